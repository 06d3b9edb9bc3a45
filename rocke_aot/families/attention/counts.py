"""Kernel counts of both attention families for the hardware time model (variants/hw_model.py), so that
a select ranks their candidates by estimated time, together: ``attention_counts`` (triton_attention,
from its config, below) and ``native_counts`` (the native kernel, from lower.py: the comment above it).

One step of a program is one K/V block of BLOCK_N keys against its BLOCK_M queries:
- matrix work: S = Q K^T (BLOCK_M x BLOCK_N x HEAD_DIM) and O += P V (BLOCK_M x HEAD_DIM x BLOCK_N),
  split evenly over the warps. On sm_90 Triton 3.6 emits warpgroup wgmma for both where num_warps is a
  multiple of 4 and BLOCK_M of 64 (triton_counts.py's MMAv3 rule): counted in the facts' 16x8x16 units,
  issued as m64nNk16 with N = BLOCK_N for S and HEAD_DIM for P V (capped at 256); elsewhere the arch's
  default MFMA / WMMA (triton_counts.matrix_instr)
- staging: the K and V tiles (2 x BLOCK_N x HEAD_DIM x 2 bytes) per step in 16-byte vectors (a row of
  HEAD_DIM f16 is contiguous), asynchronous where num_stages >= 2; Q once per program (not per step)
- shared-memory reads: with wgmma the warpgroup's operands come from shared memory through descriptors
  (one K and one V tile per warpgroup: a quarter per warp, no read instruction); elsewhere every warp
  reads the whole K and V tiles in 16-byte accesses (its rows of Q and P stay in registers)
- softmax on the S tile per step, per element: the scale, the row max, the subtraction, exp2 (a
  transcendental: EXP2_COST vector slots), the row sum, the mask select, the conversion of P; and the
  rescale of the accumulator rows (BLOCK_M x HEAD_DIM) -- all as vector operations (``fma``)
- causal / window: the key blocks the kernel's loop bounds visit, averaged over the programs (steps())
- phased (KernelCounts.phased, both families): the softmax consumes S and produces P for P V, and the step's
  barriers keep a program's warps at one phase, so one program's matrix and vector work add up in its chain
  (variants/hw_model.py step_terms); other resident programs overlap them
- GQA packing (PACK_GQA): a program's step is the same tile's work, but the grid (the launch formulas'
  ``tiles``, which the time model rounds over the CUs) has one program per KV head and ceil(group x
  seqlen_q / BLOCK_M) row tiles instead of one per query head and ceil(seqlen_q / BLOCK_M): a GQA decode
  stages each KV head's K/V once instead of group times
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from rocke_aot.families.attention.plan import b_nk, lds_operand, register_plan
from rocke_aot.launch import ceil_div
from rocke_aot.mma import WARPGROUP
from rocke_aot.targets import Target
from rocke_aot.variants.counts import (
    KernelCounts,
    a_run,
    frag_cost,
    lds_cycles,
    merged_run,
    pipelined_latencies,
    stage_cost,
    straight_line_serial,
)
from rocke_aot.variants.triton_counts import WGMMA_KEY, matrix_instr

EB = 2  # f16 / bf16
SOFTMAX_OPS = 6  # scale, max, subtract, sum, mask select, convert: per S element (module doc)
EXP2_COST = {"cuda": 8, "hip": 4}  # vector slots of one exp2 (MUFU at 1/8 of the FMA rate; AMD a quarter)



def uses_wgmma(spec: Any, target: Target) -> bool:
    return (not target.is_amdgpu and target.processor == "sm_90" and spec.num_warps % 4 == 0
            and spec.BLOCK_M % 64 == 0)


def steps(spec: Any, p: Any) -> int:
    """K/V blocks a program visits, averaged over its query blocks (rounded up), as the kernel's loop
    bounds run them: causal up to its last row's diagonal, a window from its first row's first key's
    block (triton_kernel.py). Diagonal blocks are computed whole and masked, so a causal program does
    a little more than the visible pairs (BLOCK_M / 2 of a block's keys per row more, at most).
    GQA-packed (PACK_GQA): a tile's rows are group query heads of each position, row r position
    r // group, so a tile spans BLOCK_M / group positions (the first and last rows' positions bound it)."""
    bm, bn = spec.BLOCK_M, spec.BLOCK_N
    g = p.group if getattr(spec, "PACK_GQA", 0) else 1
    blocks_m = ceil_div(p.seqlen_q * g, bm)
    shift = p.seqlen_k - p.seqlen_q
    total = 0
    for m in range(blocks_m):
        hi = min(p.seqlen_k, max(0, ((m + 1) * bm - 1) // g + 1 + shift)) if p.causal else p.seqlen_k
        lo = max(0, m * bm // g + shift - p.window + 1) // bn * bn if p.window else 0
        total += ceil_div(hi - lo, bn) if hi > lo else 0
    return max(1, ceil_div(total, blocks_m))


def attention_counts(spec: Any, p: Any, target: Target, banks: int = 32) -> KernelCounts:
    bm, bn, d, warps = spec.BLOCK_M, spec.BLOCK_N, spec.HEAD_DIM, spec.num_warps
    wave = target.info.wave_size
    threads = warps * wave
    macs = 2 * bm * bn * d
    staged = 2 * bn * d * EB
    loads = staged / 16 / threads
    asynchronous = spec.num_stages >= 2
    n_steps = steps(spec, p)
    if uses_wgmma(spec, target):
        units = macs / (16 * 8 * 16) / warps
        per_warp_s = bm * bn * d / (16 * 8 * 16) / warps / (min(bn, 256) / 8)
        per_warp_pv = bm * d * bn / (16 * 8 * 16) / warps / (min(d, 256) / 8)
        instr, mma_n, issued = WGMMA_KEY, units, per_warp_s + per_warp_pv
        read_bytes = staged / WARPGROUP
        lds_reads = 0.0
    else:
        ins = matrix_instr(target)
        instr, mma_n, issued = ins.key, macs / (ins.m * ins.n * ins.k) / warps, None
        read_bytes = staged
        lds_reads = read_bytes / (16 * wave)
    exp_cost = EXP2_COST["hip" if target.is_amdgpu else "cuda"]
    vector = (bm * bn * (SOFTMAX_OPS + exp_cost) + bm * d) / threads
    q_bytes = p.batch * p.seqlen_q * p.heads_q * d * EB
    kv_bytes = 2 * p.batch * p.seqlen_k * p.heads_kv * d * EB
    return KernelCounts(
        threads=threads, wave_size=wave, steps=n_steps, instr=instr, mma=mma_n, matrix_issued=issued,
        lds_reads=lds_reads, lds_read_wavefronts=read_bytes / 128, fma=vector, cvt=0, global_loads=loads,
        lds_writes=0 if (asynchronous and not target.is_amdgpu) else loads,
        lds_write_wavefronts=staged / 128 / warps, global_wavefronts=staged / 128 / warps,
        serial_loads=pipelined_latencies(n_steps, spec.num_stages) if asynchronous else loads,
        int_ops=loads * 2 + bm * bn / threads, staged_bytes=staged, barriers=2, double_buffer=asynchronous,
        store_bytes=bm * d * EB, stores=ceil_div(bm * d * EB, 16 * threads), unique_bytes=2 * q_bytes + kv_bytes,
        macs=macs, phased=True)


# -- the native kernel (native.py / lower.py): ``native_counts``, the attention family's Model.counts ----------
#
# Counted from lower.py, per work-group and K/V block of block_n keys (one step), as the lowering emits it:
# - staging: block_n x head_dim of K and of V in 16-byte vectors (8 elements of one key row), thread t takes
#   vectors t, t + T, ..: on sm_90 a K and a V vector a round (two 16-byte loads, one 16-byte LDS store of K,
#   eight 2-byte stores of V^T); on AMD K's rounds (a load and a 16-byte store each) then V's (4 key rows:
#   four loads, eight 8-byte stores of V^T); the straight-line rounds of one group keep their loads in flight
#   together (one exposed latency a group, variants/counts.py straight_line_serial); a paged cache reads
#   the block table before each K/V load (one more load a vector, one more latency a step)
# - matrix work: every warp computes its 16 query rows of S = Q K^T and O += P V whatever the problem's
#   query rows (a decode's one token is 1 of the 16 rows the instruction computes: the padding costs as
#   much as the work)
# - the softmax through shared memory (split-KV, on every target): S stored by the instruction's
#   d_coord (f32), read back by lane l % 16 (one row a lane: block_n loads, each key of the row in turn),
#   masked, scaled, exp2, P stored (2 bytes) and alpha; the P and V^T fragments read for O += P V, alpha
#   read once per distinct row of a lane's accumulators; four barriers a step. Bank conflicts of every
#   access from its lanes' real addresses (variants/counts.py lds_cycles)
# - the softmax in registers (unsplit, plan.py register_plan): AMD's S^T accumulators are the lane's row,
#   the row max by ds_bpermute over the lanes of a column (log2(wave / 16) of them, LDS accesses); sm_90's
#   S accumulators are in two rows a lane, each row's max by shfl.sync over its quad (2 a row, no shared
#   memory); K and V^T fragments the only shared-memory reads, the staging the only stores; two barriers
#   a step; the masks in the masked loop's steps only (the diagonal's, a ragged tail, any window)
# - split-KV: kv_splits work-groups per query tile (Efficiency.tiles counts them), each over one chunk of
#   ceil(seqlen_k / kv_splits) keys in whole blocks; every work-group stores its partial (block_m x
#   (head_dim + 4) f32), the last arriver of a tile reads kv_splits of them: the bytes averaged over the
#   tile's work-groups, the rest once (KernelCounts.tail_bytes, the split-K gemm's rule); its chain adds
#   the fence / atomic / fence (SPLIT_LATENCIES) and the combination's loops over the splits, one load
#   round trip an iteration (the loop's loads wait for nothing but its counter, yet the in-order issue
#   stops at their first use): 2 + head_dim / n loops of kv_splits iterations (the row max, the row sum,
#   one per O fragment), an upper bound where the compiler unrolls them
# - K/V traffic: every program stages its own KV head's keys (a GQA group of heads_q / heads_kv programs
#   reads each KV head that many times; neighbours in launch order, so the L2 serves the repeats: the l2
#   term); the HBM floor counts every tensor once (unique_bytes)
NATIVE_OPS_PER_VECTOR = 8  # per staged vector and step, the loop-invariant parts hoisted: the key row (1), its
# test against the length (1), the element offset (2), the guarded select (1), the 64-bit address (2), the
# zero select of the value (1)
PAGED_OPS_PER_VECTOR = 8  # the block-table slot (2), its guard (1), its address (2), block * size + row (3)
V_UNPACK_OPS = 4  # sm_90: the 8 halves of a V vector's 4 registers for the 2-byte V^T stores (the odd ones)
MASK_OPS = 8  # per S element of the shared-memory softmax: key < length, row < length, and; the window's
# sub, two compares, or, and
CAUSAL_MASK_OPS = 2  # the diagonal's compare and and
SOFTMAX_FP = 6  # per S element: scale, mask select, max (compare + select), exp2's subtraction, sum
ROW_FP = 7  # per row and step: the new max (2), its -inf guard (2), alpha's subtraction, l * alpha + sum (2)
SPLIT_LATENCIES = 3  # fence, atomic, fence of the last arriver's protocol (the split-K gemm's count)


def native_steps(block_m: int, block_n: int, p: Any, causal: bool) -> int:
    """K/V blocks an unsplit program visits, averaged over its query blocks (rounded up): from key 0
    (the native loop has no lower bound: a window is masked, not skipped) up to its last row's diagonal
    when causal (lower.py ``hi``)."""
    blocks_m = ceil_div(p.seqlen_q, block_m)
    shift = p.seqlen_k - p.seqlen_q
    total = 0
    for m in range(blocks_m):
        hi = min(p.seqlen_k, max(0, (m + 1) * block_m + shift)) if causal else p.seqlen_k
        total += ceil_div(hi, block_n)
    return max(1, ceil_div(total, blocks_m))


def _vt_at(vpr: int, ldv: int, e: int, keys: int) -> Callable[[int], int]:
    """LDS element of V^T that staging unit c stores for head-dim element e of its vector: unit c holds
    vector c % vpr of ``keys`` consecutive key rows from (c // vpr) * keys (lower.py stage, v_vecs)."""
    def at(c: int) -> int:
        return ((c % vpr) * 8 + e) * ldv + (c // vpr) * keys
    return at


def _lds(lanes: Any, nbytes: int, banks: int) -> int:
    return lds_cycles(((a, nbytes) for a in lanes), banks)


@functools.lru_cache(maxsize=4096)
def _native_static(spec: Any, target: Target, banks: int) -> dict[str, float]:
    """What a step of the spec issues per warp (instructions, LDS cycles) or thread (vector work),
    independent of the problem (module comment above)."""
    g = spec.geometry(target)
    ins, wave, T, D, BN = g.instr, g.wave, g.threads, spec.head_dim, g.block_n
    warps = T // wave
    rows = g.block_m // warps
    ldk = dict((n, e) for n, e, _ in spec.lds_layout())["attn_k"] // BN
    ldv = dict((n, e) for n, e, _ in spec.lds_layout())["attn_vt"] // D
    vpr = D // 8
    chunks = BN * vpr
    out: dict[str, float] = {}
    k_at = lambda c: (c // vpr) * ldk + (c % vpr) * 8  # noqa: E731
    if target.is_amdgpu:  # K rounds, then V's of 4 key rows (8-byte V^T stores)
        k_rounds, k_cyc = stage_cost(T, wave, chunks, 8, EB, k_at, banks)
        v_rounds = ceil_div(chunks // 4, T)
        v_cyc = sum(stage_cost(T, wave, chunks // 4, 4, EB, _vt_at(vpr, ldv, e, 4), banks)[1] for e in range(8))
        out["global_loads"] = k_rounds + 4 * v_rounds
        out["lds_writes"] = k_rounds + 8 * v_rounds
        out["write_cycles"] = k_cyc + v_cyc
        out["serial"] = straight_line_serial(T, chunks) + straight_line_serial(T, chunks // 4)
        out["int_ops"] = NATIVE_OPS_PER_VECTOR * (k_rounds + 4 * v_rounds)
    else:  # a K and a V vector of one key row a round
        rounds, k_cyc = stage_cost(T, wave, chunks, 8, EB, k_at, banks)
        v_cyc = sum(stage_cost(T, wave, chunks, 1, EB, _vt_at(vpr, ldv, e, 1), banks)[1] for e in range(8))
        out["global_loads"] = 2 * rounds
        out["lds_writes"] = 9 * rounds
        out["write_cycles"] = k_cyc + v_cyc
        out["serial"] = straight_line_serial(T, chunks)
        out["int_ops"] = (2 * NATIVE_OPS_PER_VECTOR + V_UNPACK_OPS) * rounds
    out["vectors"] = out["global_loads"]  # staged vectors a thread loads a step (the paged table reads: one each)
    out["mma"] = 2 * rows * BN * D / (ins.m * ins.n * ins.k)
    lane = range(ins.wave_size)
    reads = read_cyc = 0.0
    plan = None if spec.split_kv else register_plan(ins, BN)
    if plan is not None:  # the register softmax (lower.py registers)
        tile = plan.tile(ins)
        tiles_s, tiles_o = BN // tile, D // tile
        lds_per, lds_coord = lds_operand(ins, plan.transposed)  # K and V^T as A, or as B stored (n, k)
        kr, kc = frag_cost(ins, lds_coord, lds_per, lambda m_, k_: m_ * ldk + k_, EB,
                           a_run(ins, ldk, lds_coord, lds_per), banks)
        vr, vc = frag_cost(ins, lds_coord, lds_per, lambda m_, k_: m_ * ldv + k_, EB,
                           a_run(ins, ldv, lds_coord, lds_per), banks)
        nrows = len(plan.rows)  # query rows of one lane
        shuffles = nrows * len(plan.masks)  # a row's max over its lanes, lane ^ span(masks), per row of a lane
        # AMDGPU's shuffle is ds_bpermute (an LDS access); sm_90's shfl.sync is no shared-memory access
        lds_shuffles = shuffles if target.is_amdgpu else 0
        reads = tiles_s * (D // ins.k) * kr + tiles_o * (BN // ins.k) * vr + lds_shuffles
        read_cyc = tiles_s * (D // ins.k) * kc + tiles_o * (BN // ins.k) * vc + lds_shuffles * _lds(
            (4 * ln for ln in range(wave)), 4, banks)
        per_lane = tiles_s * ins.acc_per_lane  # S elements of one lane (its query rows' keys)
        exp = EXP2_COST["hip" if target.is_amdgpu else "cuda"]
        out["fma"] = per_lane * (SOFTMAX_FP - 1 + exp) + shuffles + nrows * (ROW_FP + exp) \
            + tiles_o * ins.acc_per_lane
        out["cvt"] = per_lane
        out["mask_ops"] = per_lane * (MASK_OPS + CAUSAL_MASK_OPS * spec.causal)  # masked steps only
        out["barriers"] = 2
    else:  # the softmax through shared memory (lower.py step)
        nk = b_nk(ins)
        kr, kc = frag_cost(ins, nk, ins.b_per_lane, lambda n_, k_: n_ * ldk + k_, EB,
                           a_run(ins, ldk, nk, ins.b_per_lane), banks)
        vr, vc = frag_cost(ins, nk, ins.b_per_lane, lambda n_, k_: n_ * ldv + k_, EB,
                           a_run(ins, ldv, nk, ins.b_per_lane), banks)
        pr, pc = frag_cost(ins, ins.a_coord, ins.a_per_lane, lambda r_, c_: r_ * BN + c_, EB, a_run(ins, BN), banks)
        # a lane's consecutive S / P elements are one wider access where aligned (LLVM's load/store
        # vectorizer, variants/counts.py merged_run): S stored 2 f32 a lane (the instruction's pairs of
        # columns), read back 4 (16 bytes), P written 8 (16 bytes); the sm_90 SASS of w1 n16 / w4 n64
        # issues 74 / 290 LDS and 80 / 97 STS a step (tests/test_attention_counts.py)
        s_run = merged_run(ins.d_coord, ins.acc_per_lane, ins.wave_size, lambda r_, c_: r_ * BN + c_, 4)
        row_run = merged_run(lambda ln, j: (ln % rows, j), BN, wave, lambda r_, c_: r_ * BN + c_, 4)
        p_run = merged_run(lambda ln, j: (ln, j), BN, rows, lambda r_, c_: r_ * BN + c_, EB)
        s_st = sum(_lds((4 * (ins.d_coord(ln, r)[0] * BN + nt * ins.n + ins.d_coord(ln, r)[1]) for ln in lane),
                        4 * s_run, banks) for nt in range(BN // ins.n) for r in range(0, ins.acc_per_lane, s_run))
        s_ld = sum(_lds((4 * ((ln % rows) * BN + c) for ln in range(wave)), 4 * row_run, banks)
                   for c in range(0, BN, row_run))
        p_st = sum(_lds((EB * (ln * BN + c) for ln in range(rows)), EB * p_run, banks) for c in range(0, BN, p_run))
        alpha_rows = max(len({int(ins.d_coord(ln, r)[0]) for r in range(ins.acc_per_lane)}) for ln in lane)
        reads = (BN // ins.n) * (D // ins.k) * kr + BN // row_run + (BN // ins.k) * pr \
            + (D // ins.n) * (BN // ins.k) * vr + alpha_rows
        read_cyc = (BN // ins.n) * (D // ins.k) * kc + s_ld + (BN // ins.k) * pc + (D // ins.n) * (BN // ins.k) * vc \
            + alpha_rows
        out["lds_writes_warp"] = (BN // ins.n) * ins.acc_per_lane // s_run + BN // p_run + 1
        out["write_cycles"] += s_st + p_st + 1
        exp = EXP2_COST["hip" if target.is_amdgpu else "cuda"]
        out["fma"] = BN * (SOFTMAX_FP + exp) + ROW_FP + exp + (D // ins.n) * ins.acc_per_lane
        out["cvt"] = BN
        out["mask_ops"] = BN * (MASK_OPS + CAUSAL_MASK_OPS * spec.causal)  # every step
        out["barriers"] = 4
    out["lds_reads"], out["read_cycles"] = reads, read_cyc
    return out


def native_counts(spec: Any, p: Any, target: Target, banks: int = 32) -> KernelCounts:
    """The native kernel's KernelCounts on one problem (the comment above ``native_steps``)."""
    g = spec.geometry(target)
    st = _native_static(spec, target, banks)
    D, BN, bm = spec.head_dim, g.block_n, g.block_m
    T, wave = g.threads, g.wave
    warps = T // wave
    registers = not spec.split_kv  # the softmax in registers (register_plan; lower.py refuses a spec without one)
    if spec.split_kv:
        splits = spec.launch_formulas().env(p)["kv_splits"]
        n_steps = max(1, ceil_div(ceil_div(max(1, p.seqlen_k), splits), BN))
    else:
        splits = 1
        n_steps = native_steps(bm, BN, p, bool(spec.causal))
    global_loads, serial, int_ops = st["global_loads"], st["serial"], st["int_ops"]
    if spec.paged:  # the block table's entry before each K/V load
        global_loads += st["vectors"]
        serial += 1
        int_ops += PAGED_OPS_PER_VECTOR * st["vectors"]
    if registers:  # the masked loop's steps only: the diagonal's (causal), a ragged tail, any window
        masked = n_steps if p.window else min(n_steps, (ceil_div(bm, BN) + 1) if spec.causal else
                                              (1 if p.seqlen_k % BN else 0))
        int_ops += st["mask_ops"] * masked / n_steps
    else:
        int_ops += st["mask_ops"]
    fma = st["fma"]
    lds_writes = st["lds_writes"] + st.get("lds_writes_warp", 0.0)
    staged = 2 * BN * D * EB
    rows_out = min(bm, p.seqlen_q)  # rows a block stores (row < seqlen_q)
    q_bytes = p.total_q * p.heads_q * D * EB
    kv_bytes = 2 * p.kv_rows * p.heads_kv * D * EB
    out_bytes = rows_out * D * EB
    epilogue_latencies, extra, tail = 1.0, 0.0, 0
    store_bytes = out_bytes
    work_bytes = 0
    if spec.split_kv:
        ins = g.instr
        part = spec.workspace_words_per_group * 4
        whole = splits * part + out_bytes  # the last arriver's reads and O
        store_bytes = part + whole // splits
        tail = whole - whole // splits
        loops = 2 + D // ins.n  # the row max, the row sum, one per O fragment (lower.py reduce_splits)
        epilogue_latencies = 1.0 + SPLIT_LATENCIES + loops * splits
        q4 = ins.acc_per_lane // 4
        extra = (D // ins.n) * q4 + 2 + 3 / warps + loops * splits * (q4 + 2) / splits
        work_bytes = spec.launch_formulas().env(p)["tiles"] * part  # the workspace, written and read once
    return KernelCounts(
        threads=T, wave_size=wave, steps=n_steps, instr=g.instr.key, mma=st["mma"],
        lds_reads=st["lds_reads"], lds_read_wavefronts=st["read_cycles"], fma=fma, cvt=st["cvt"],
        global_loads=global_loads, lds_writes=lds_writes, lds_write_wavefronts=st["write_cycles"],
        global_wavefronts=staged / 128 / warps, serial_loads=serial, int_ops=int_ops, staged_bytes=staged,
        barriers=int(st["barriers"]), double_buffer=False, store_bytes=store_bytes,
        stores=ceil_div(out_bytes, 2 * T), unique_bytes=2 * q_bytes + kv_bytes + 2 * work_bytes,
        macs=2 * bm * BN * D, epilogue_latencies=epilogue_latencies, epilogue_instructions=extra, tail_bytes=tail,
        phased=True)


__all__ = ["attention_counts", "native_counts", "native_steps", "steps", "uses_wgmma"]
