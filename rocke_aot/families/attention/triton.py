"""triton_attention: the Triton flash-attention forward kernel (triton_kernel.py) declared as a family,
exactly as a user declares their own @triton.jit kernel from their package (docs/triton-plugins.md).

    KERNEL = TritonKernel(module, function, params (the kernel's parameters in order, each with the
             formula of its value or buffer size over the problem's int fields), problem type, the
             launch grid, configs per target (the constexpr grid: head dim x tile x causal, with
             num_warps / num_stages), baked dtypes, lanes, reference, model functions)
    FAMILY = triton_family(KERNEL)     what the ``rocke_aot.families`` entry point
                                       ``triton_attention`` names (rocke-aot's pyproject.toml)

Serves head dims 64/128/256, f16/bf16, causal or not, any sliding window and scale, MHA/GQA/MQA, the
LSE output (a runtime argument: every spec), and per spec (the constexprs VARLEN, PAGED) one KV layout:
dense BSHD, packed variable lengths (cu_seqlens), paged KV (block table; equal or variable lengths).
A spec refuses the problems of another layout, each with its reason, in ``accepts``.
Operation "attention": a select ranks it beside every other attention family on AttentionProblem.

Configs per head dim and backend: dense, every tile of TILES x causal; varlen, the first tile x causal;
paged, the second (64-row) tile x causal x (equal or variable lengths): 10 per head dim (16 at head dim
128 on CUDA: two more dense tiles), x f16/bf16: 60 specs per AMD arch and lane, 68 for sm_90.
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
# a 64-row tile computes 4x the scores it keeps). HIP: one stage (AMD's software pipelining keeps K/V in LDS; gfx942 has 64 KiB of it),
# smaller K/V tiles at 256.
TILES: dict[str, dict[int, tuple[tuple[int, int, int, int], ...]]] = {
    "cuda": {64: ((128, 64, 4, 3), (64, 64, 4, 3)),
             128: ((128, 64, 8, 3), (64, 64, 4, 3), (128, 128, 8, 2), (16, 128, 4, 3)),
             256: ((64, 64, 4, 2), (128, 32, 8, 2))},
    "hip": {64: ((128, 64, 4, 1), (64, 64, 4, 1)),
            128: ((128, 64, 4, 1), (64, 32, 4, 1)),
            256: ((64, 32, 4, 1), (128, 32, 8, 1))},
}


def configs(target: Target) -> tuple[dict[str, int], ...]:
    backend = "hip" if target.is_amdgpu else "cuda"
    out = []
    for d in HEAD_DIMS:
        tiles = TILES[backend][d]
        layouts = [(t, 0, 0) for t in tiles] + [(tiles[0], 1, 0), (tiles[1], 0, 1), (tiles[1], 1, 1)]
        for (bm, bn, w, s), varlen, paged in layouts:
            out += [dict(HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=c, VARLEN=varlen, PAGED=paged, num_warps=w,
                         num_stages=s) for c in (0, 1)]
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
    ),
    problem_type=AttentionProblem,
    problem=("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "window", "scale_bits", "total_q",
             "kv_rows", "table_width", "lse_rows", "block_size"),
    lets=(("tiles", "ceil_div(seqlen_q, BLOCK_M) * batch * heads_q"),),
    grid=("ceil_div(seqlen_q, BLOCK_M)", "batch * heads_q", "1"),
    configs=configs,
    baked=({"dtype": "f16"}, {"dtype": "bf16"}),
    classes={},
    lanes=LANES, reference=REFERENCE, operation="attention", tiled=(("seqlen_q", "BLOCK_M"),),
    accepts=accepts, work=work, counts=attention_counts, arch_rule=arch_rule,
    description="SDPA forward, flash attention (Triton): BSHD, packed variable lengths or paged KV, MHA/GQA/MQA, "
                "causal, sliding window, LSE output; head dim 64/128/256, f16/bf16",
)

FAMILY = triton_family(KERNEL)

__all__ = ["FAMILY", "KERNEL", "LANES", "TILES", "accepts", "configs", "work"]
