"""Kernel counts of triton_attention for the hardware time model (variants/hw_model.py), from its config,
so that a select ranks its candidates by estimated time (and beside any other attention family).

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
"""

from __future__ import annotations

from typing import Any

from rocke_aot.launch import ceil_div
from rocke_aot.mma import WARPGROUP
from rocke_aot.targets import Target
from rocke_aot.variants.counts import KernelCounts, pipelined_latencies
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
    a little more than the visible pairs (BLOCK_M / 2 of a block's keys per row more, at most)."""
    bm, bn = spec.BLOCK_M, spec.BLOCK_N
    blocks_m = ceil_div(p.seqlen_q, bm)
    shift = p.seqlen_k - p.seqlen_q
    total = 0
    for m in range(blocks_m):
        hi = min(p.seqlen_k, max(0, (m + 1) * bm + shift)) if p.causal else p.seqlen_k
        lo = max(0, m * bm + shift - p.window + 1) // bn * bn if p.window else 0
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
        macs=macs)


__all__ = ["attention_counts", "steps", "uses_wgmma"]
