"""triton_attention: the Triton flash-attention forward kernel (triton_kernel.py) declared as a family,
exactly as a user declares their own @triton.jit kernel from their package (docs/triton-plugins.md).

    KERNEL = TritonKernel(module, function, params (the kernel's parameters in order, each with the
             formula of its value or buffer size over the problem's int fields), problem type, the
             launch grid, configs per target (the constexpr grid: head dim x tile x causal, with
             num_warps / num_stages), baked dtypes, lanes, reference, model functions)
    FAMILY = triton_family(KERNEL)     what the ``rocke_aot.families`` entry point
                                       ``triton_attention`` names (rocke-aot's pyproject.toml)

Serves head dims 64/128/256, f16/bf16, causal or not, any sliding window and scale, MHA/GQA/MQA, the
LSE output (a runtime argument: every spec), GQA decode packed or not (the constexpr PACK_GQA: the grid
over KV heads, the lets ``pack`` and ``rows``), and per spec (the constexprs VARLEN, PAGED) one KV layout:
dense BSHD, packed variable lengths (cu_seqlens), paged KV (block table; equal or variable lengths).
A spec refuses the problems of another layout, each with its reason, in ``accepts``.
Operation "attention": a select ranks it beside every other attention family on AttentionProblem.

Configs per head dim and backend: dense, every tile of TILES x causal; varlen, the first tile x causal;
paged, the second (64-row) tile x causal x (equal or variable lengths): 10 per head dim (22 at head dim
128 on CUDA: six more dense tiles). GQA-packed (PACK_GQA 1, GQA decode: a KV head's query heads in one
tile's rows, K/V read once per KV head; accepted where heads_q / heads_kv > 1 and group x seqlen_q fits
BLOCK_M, refused by name otherwise): the first tile of PACK_TILES in all four layouts x causal, 8 per head
dim (10 at head dim 128 on CUDA: a second dense tile). x f16/bf16: 108 specs per AMD arch and lane
(60 unpacked + 48 packed), 136 for sm_90 (84 + 52).
"""

from __future__ import annotations

from typing import Any

from rocke_aot.families.attention.counts import attention_counts, steps
from rocke_aot.families.attention.problem import HEAD_DIMS, AttentionProblem
from rocke_aot.families.attention.reference import REFERENCE
from rocke_aot.targets import Target
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.table import Refuse, Serve
from rocke_aot.variants.triton import TritonKernel, TritonParam, triton_family

LANES: dict[str, Serve | Refuse] = {
    "llvm20": Refuse("no Triton on LLVM 20 is qualified here (Triton 3.6 is built on LLVM 22, 3.9 on LLVM 24)"),
    "llvm22": Serve("Triton built on LLVM 22 (Triton 3.6, what the NVIDIA GPU machine runs)"),
    "llvm23": Refuse("Triton is not built on AMD's LLVM 23"),
    "llvm24": Serve("Triton built on LLVM 24 (Triton 3.9)"),
}

# (BLOCK_M, BLOCK_N, num_warps, num_stages) per head dim and backend. The first tile also serves
# packed variable lengths, the second paged KV; any further tile is for dense KV only. CUDA: the tiles
# of Triton's fused-attention tutorial, pipelined 2-3 deep through shared memory; at head dim 128 (the
# long-prefill models) also 128-key blocks on 8 warps (half the row rescales and reductions per key;
# 128 x 64 on 4 warps spills on sm_90, ptxas), and a 16-row tile for decode (one to a few query rows:
# a 64-row tile computes 4x the scores it keeps); then four more of the tutorial's Hopper autotune space
# (BLOCK_M 64/128 x BLOCK_N 32/64/128 x 2-4 stages x 4/8 warps, 8 warps only for 128 x 128 on sm_90):
# 128 x 128 on 8 warps in 3 stages (224 KiB of shared memory; 4 stages ask for 288 KiB, over sm_90's 227,
# and are refused at build), 64 x 128, 64 x 64 in 2 stages and 64 x 32 on 4 warps (3 blocks an SM), so
# that a GPU call measures the tutorial's Hopper tiles and the residencies beside the 64 x 64 / 3 stages
# the fourth call found fastest. HIP: one stage (AMD's software pipelining keeps K/V in LDS; gfx942 has
# 64 KiB of it), smaller K/V tiles at 256.
TILES: dict[str, dict[int, tuple[tuple[int, int, int, int], ...]]] = {
    "cuda": {64: ((128, 64, 4, 3), (64, 64, 4, 3)),
             128: ((128, 64, 8, 3), (64, 64, 4, 3), (128, 128, 8, 2), (16, 128, 4, 3),
                   (128, 128, 8, 3), (64, 128, 4, 3), (64, 64, 4, 2), (64, 32, 4, 3)),
             256: ((64, 64, 4, 2), (128, 32, 8, 2))},
    "hip": {64: ((128, 64, 4, 1), (64, 64, 4, 1)),
            128: ((128, 64, 4, 1), (64, 32, 4, 1)),
            256: ((64, 32, 4, 1), (128, 32, 8, 1))},
}


# The GQA-packed tiles (PACK_GQA 1: a KV head's group of query heads x the query positions in a tile's
# rows; GQA decode, where group x seqlen_q fits BLOCK_M), per head dim and backend. The first serves every
# layout (dense, packed varlen, paged, paged varlen), any further one dense KV only. 16 rows: the
# matrix instructions' least m (a 32/8 decode fills 4 of them, 28/4 7; unpacked, 1). CUDA: the 16-row
# decode tile's 128-key blocks (64 at head dim 64 and 256: shared memory), and at head dim 128 also 64-key
# blocks (half the shared memory a stage: two programs an SM); HIP: one stage, as above.
PACK_TILES: dict[str, dict[int, tuple[tuple[int, int, int, int], ...]]] = {
    "cuda": {64: ((16, 64, 4, 3),), 128: ((16, 128, 4, 3), (16, 64, 4, 3)), 256: ((16, 64, 4, 2),)},
    "hip": {64: ((16, 64, 4, 1),), 128: ((16, 64, 4, 1),), 256: ((16, 32, 4, 1),)},
}


def _layouts(tiles: tuple[tuple[int, int, int, int], ...], varlen_tile: int, paged_tile: int
             ) -> list[tuple[tuple[int, int, int, int], int, int]]:
    """(tile, VARLEN, PAGED): every tile dense, tiles[varlen_tile] packed varlen, tiles[paged_tile] paged
    with equal and with variable lengths."""
    return [(t, 0, 0) for t in tiles] + [(tiles[varlen_tile], 1, 0), (tiles[paged_tile], 0, 1),
                                         (tiles[paged_tile], 1, 1)]


def configs(target: Target) -> tuple[dict[str, int], ...]:
    backend = "hip" if target.is_amdgpu else "cuda"
    out = []
    for pack in (0, 1):
        for d in HEAD_DIMS:
            layouts = _layouts(PACK_TILES[backend][d], 0, 0) if pack else _layouts(TILES[backend][d], 0, 1)
            for (bm, bn, w, s), varlen, paged in layouts:
                out += [dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=c, VARLEN=varlen, PAGED=paged, PACK_GQA=pack,
                             num_warps=w, num_stages=s) for c in (0, 1)]
    return tuple(out)


def accepts(spec: Any, p: AttentionProblem) -> str | None:
    if p.head_dim != spec.HEAD_DIM:
        return f"the kernel is built for head_dim {spec.HEAD_DIM}, the problem has {p.head_dim}"
    if bool(p.causal) != bool(spec.CAUSAL):
        return f"the kernel is built {'causal' if spec.CAUSAL else 'without a causal mask'}; the problem is " \
               f"{'causal' if p.causal else 'not causal'}"
    if p.paged != bool(spec.PAGED):
        return f"the kernel is built for {'paged' if spec.PAGED else 'contiguous'} KV; the problem's is {p.kv_layout}"
    if p.varlen != bool(spec.VARLEN):
        return (f"the kernel is built for {'variable lengths (packed, cu_seqlens)' if spec.VARLEN else 'equal lengths'}"
                f"; the problem has {'variable' if p.varlen else 'equal'} lengths")
    if spec.PACK_GQA:
        if p.group == 1:
            return (f"the GQA-packed kernel puts a KV head's query heads in one tile's rows; the problem has one "
                    f"query head per KV head ({p.heads_q}/{p.heads_kv}): served by the unpacked kernels")
        if p.group * p.seqlen_q > spec.BLOCK_M:
            return (f"the GQA-packed kernel takes a KV head's group x seqlen_q rows in one tile of {spec.BLOCK_M} "
                    f"(decode, a few speculative tokens); {p.group} query heads x {p.seqlen_q} positions = "
                    f"{p.group * p.seqlen_q} do not fit: served by the unpacked kernels")
    return None


def work(spec: Any, p: AttentionProblem, target: Target) -> TileWork:
    d, bm, bn = spec.HEAD_DIM, spec.BLOCK_M, spec.BLOCK_N
    elem = 2
    return TileWork(threads=spec.geometry(target).threads, steps=steps(spec, p), macs_per_step=2 * bm * bn * d,
                    load_bytes_per_step=2 * bn * d * elem, lds_wavefronts_per_step=0.0, store_bytes=bm * d * elem,
                    matrix=True, double_buffer=spec.num_stages > 1, lds_bytes=2 * bn * d * elem * spec.num_stages)


def arch_rule(target: Target, lane: Any) -> str | None:
    if target.processor == "gfx1250" and lane.name == "llvm22":
        return ("Triton 3.6 (LLVM 22) lowers tl.dot to FMA on gfx1250 (no v_wmma; docs/triton.md, as for "
                "triton_matmul); Triton 3.9 (llvm24) uses WMMA")
    return None


def _int(name: str) -> TritonParam:
    # every int is do_not_specialize in the kernel: one build serves every shape of its config
    return TritonParam(name, "int", expr=name, specialize=False)


KERNEL = TritonKernel(
    family="triton_attention", module="rocke_aot.families.attention.triton_kernel", function="attention_fwd_kernel",
    params=(
        TritonParam("q_ptr", "pointer", "$dtype", "total_q * heads_q * head_dim", "read_only", label="Q"),
        TritonParam("k_ptr", "pointer", "$dtype", "kv_rows * heads_kv * head_dim", "read_only", label="K"),
        TritonParam("v_ptr", "pointer", "$dtype", "kv_rows * heads_kv * head_dim", "read_only", label="V"),
        TritonParam("o_ptr", "pointer", "$dtype", "total_q * heads_q * head_dim", "write_only", label="O"),
        # f32 [batch, heads_q, seqlen_q] or [heads_q, total_q]; 0 elements without the LSE output
        TritonParam("lse_ptr", "pointer", "f32", "lse_rows", "write_only", label="LSE"),
        TritonParam("cu_seqlens_q", "pointer", "i32", "batch + 1", "read_only"),
        TritonParam("cu_seqlens_k", "pointer", "i32", "batch + 1", "read_only"),
        TritonParam("block_table", "pointer", "i32", "batch * table_width", "read_only"),
        _int("seqlen_q"), _int("seqlen_k"), _int("heads_q"), _int("heads_kv"), _int("window"), _int("scale_bits"),
        _int("lse_rows"), _int("block_size"), _int("table_width"),
        TritonParam("HEAD_DIM", "constexpr"), TritonParam("BLOCK_M", "constexpr"), TritonParam("BLOCK_N", "constexpr"),
        TritonParam("CAUSAL", "constexpr"), TritonParam("VARLEN", "constexpr"), TritonParam("PAGED", "constexpr"),
        TritonParam("PACK_GQA", "constexpr", default=0),  # added after the others: earlier dicts read 0
    ),
    problem_type=AttentionProblem,
    problem=("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "window", "scale_bits", "total_q",
             "kv_rows", "table_width", "lse_rows", "block_size"),
    # pack: the query heads one program's rows hold (PACK_GQA: the group, heads_q / heads_kv, a whole number
    # by the problem's check; else 1); rows: a program's rows of one sequence, all its tiles together
    lets=(("pack", "PACK_GQA * (heads_q // heads_kv - 1) + 1"), ("rows", "seqlen_q * pack"),
          ("tiles", "ceil_div(rows, BLOCK_M) * batch * (heads_q // pack)")),
    grid=("ceil_div(rows, BLOCK_M)", "batch * (heads_q // pack)", "1"),
    configs=configs,
    baked=({"dtype": "f16"}, {"dtype": "bf16"}),
    classes={},
    lanes=LANES, reference=REFERENCE, operation="attention", tiled=(("rows", "BLOCK_M"),),
    accepts=accepts, work=work, counts=attention_counts, arch_rule=arch_rule,
    description="SDPA forward, flash attention (Triton): BSHD, packed variable lengths or paged KV, MHA/GQA/MQA, "
                "causal, sliding window, LSE output; head dim 64/128/256, f16/bf16",
)

FAMILY = triton_family(KERNEL)

__all__ = ["FAMILY", "KERNEL", "LANES", "PACK_TILES", "TILES", "accepts", "configs", "work"]
