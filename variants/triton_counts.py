"""Kernel counts of triton_matmul for the hardware time model (variants/hw_model.py), derived from
its Triton config (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), so that selection across
families (docs/selection.md) estimates a Triton candidate and a native gemm with one model.

Triton, not this project, writes the kernel, so the counts follow its config by rules, stated here
and checked against the code Triton emits (tests/test_triton_counts.py: the matrix instructions
and MACs per K step in the PTX / AMDGCN of a CPU compile):

- the matrix work: one K step of a block is BLOCK_M x BLOCK_N x BLOCK_K MACs, split evenly over
  num_warps warps (Triton's warpsPerCTA covers the tile; no replication). Counted in the
  instruction the facts file has a rate for: on sm_90 mma.sync m16n8k16 (the facts' only
  measured rate; Triton 3.6 emits wgmma, whose rate the facts do not hold: so matrix time is an
  upper bound there, stated in the estimate's basis), on AMD the arch's default MFMA / WMMA of
  rocke_aot/mma.py (what Triton's AMD backend picks for f16 dot on 32-multiple tiles)
- staging: A (BLOCK_M x BLOCK_K) and B (BLOCK_K x BLOCK_N) f16 per step through shared memory, in
  16-byte vectors where M, N, K are all of the divisible-by-16 class (Triton's specialization
  lets it prove alignment), 2-byte elements otherwise; with num_stages >= 2 the copies are
  asynchronous (cp.async on sm_90: no separate LDS store; on AMD the stream pipeliner's prefetch:
  a store after the load) and waited for stages - 1 steps later (counts.py's pipeline fill rule)
- LDS reads: warps laid out along M first (wm = min(num_warps, BLOCK_M / instr.m), wn the rest);
  a warp reads its BLOCK_M / wm rows of A and BLOCK_N / wn columns of B per step in 16-byte
  accesses; Triton's shared layouts are swizzled, so one 128-byte wavefront per 128 bytes
- one barrier a step; the epilogue stores the f16 tile in 16-byte vectors
- integer work: a pointer advance and a mask test per staged vector (the loop's tt.addptr and
  the K-bound compare in TTGIR), 2 per global load
"""

from __future__ import annotations

from typing import Any

from rocke_aot import mma
from rocke_aot.variants.counts import KernelCounts, pipelined_latencies

EB = 2  # f16 (the family's only baked dtype)
TRITON_OPS_PER_LOAD = 2


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def matrix_instr(target: Any) -> mma.MmaInstr:
    """The instruction the counts are in (module doc): mma.sync on NVIDIA, the default on AMD."""
    if not target.is_amdgpu:
        return mma.select(target.processor, "mma", "f16")
    path = "wmma" if target.info.wave_size == 32 else "mfma"
    return mma.select(target.processor, path, "f16")


def matmul_counts(spec: Any, p: Any, target: Any, banks: int = 32) -> KernelCounts:
    bm, bn, bk, warps, stages = spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K, spec.num_warps, spec.num_stages
    ins = matrix_instr(target)
    wave = target.info.wave_size
    threads = warps * wave
    steps = _ceil(p.k, bk)
    macs = bm * bn * bk
    vec = 16 if all(getattr(spec, f"{d}_class") == "div16" for d in "mnk") else EB
    staged = (bm + bn) * bk * EB
    loads = staged / vec / threads  # global loads per thread per step
    wm = max(1, min(warps, bm // ins.m))
    wn = max(1, warps // wm)
    read_bytes = (bm // wm + bn // wn) * bk * EB  # per warp per step
    asynchronous = stages >= 2
    on_nvidia = not target.is_amdgpu
    return KernelCounts(
        threads=threads, wave_size=wave, steps=steps, instr=ins.key,
        mma=macs / (ins.m * ins.n * ins.k) / warps,
        lds_reads=read_bytes / (16 * wave), lds_read_wavefronts=read_bytes / 128,
        fma=0, cvt=0, global_loads=loads,
        lds_writes=0 if (asynchronous and on_nvidia) else loads,
        lds_write_wavefronts=staged / 128 / warps, global_wavefronts=staged / 128 / warps,
        serial_loads=pipelined_latencies(steps, stages) if asynchronous else loads,
        int_ops=loads * TRITON_OPS_PER_LOAD, staged_bytes=staged, barriers=1, double_buffer=asynchronous,
        store_bytes=bm * bn * EB, stores=_ceil(bm * bn * EB, 16 * threads),
        unique_bytes=(p.m * p.k + p.k * p.n + p.m * p.n) * EB, macs=macs)
