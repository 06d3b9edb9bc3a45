"""Kernel counts of triton_matmul for the hardware time model (variants/hw_model.py), derived from
its Triton config (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages), so that selection across
families (docs/selection.md) estimates a Triton candidate and a native gemm with one model.

Triton, not this project, writes the kernel, so the counts follow its config by rules, stated here
and checked against the code Triton emits (tests/test_triton_counts.py: the matrix instructions
and MACs per K step in the PTX / AMDGCN of a CPU compile):

- the matrix work: one K step of a block is BLOCK_M x BLOCK_N x BLOCK_K MACs, split evenly over
  num_warps warps (Triton's warpsPerCTA covers the tile; no replication). On sm_90 Triton 3.6
  emits warpgroup wgmma.mma_async where its MMAv3 rule accepts the dot (lib/Analysis/Utility.cpp
  supportMMA: num_warps a multiple of 4, BLOCK_M % 64 == 0, BLOCK_N % 8 == 0, BLOCK_K >= 16,
  f16 / bf16): :func:`wgmma_layout` restates its instruction shape (TritonGPU Utility.cpp
  mmaVersionToInstrShape: the largest N of 256, 248, ... 8 dividing BLOCK_N and at most
  BLOCK_N / max(num_warps / (BLOCK_M / 16), 1)) and its warps (AccelerateMatmul.cpp
  warpsPerTileV3: from 4 x 1, doubling along M while BLOCK_M exceeds 16 x warps_m, else N).
  Each warp issues every wgmma of its warpgroup, one m64nNk16 per (M rep, N rep, 16 of K), and
  its matrix work is counted in its 16xNx16 quarter's N / 8 units of the facts' wgmma rate
  (wgmma_f32_m64n8k16_f16: the whitepaper's dense peak); the operands come from shared memory
  through descriptors, so the K loop issues no LDS read instruction (its LDS cycles stay
  counted). Elsewhere on sm_90 (num_warps 2) mma.sync m16n8k16 at its measured rate, on AMD the
  arch's default MFMA / WMMA of rocke_aot/mma.py (what Triton's AMD backend picks for f16 dot on
  32-multiple tiles)
- staging: A (BLOCK_M x BLOCK_K) and B (BLOCK_K x BLOCK_N) f16 per step through shared memory, in
  16-byte vectors where M, N, K are all of the divisible-by-16 class (Triton's specialization
  lets it prove alignment), 2-byte elements otherwise; with num_stages >= 2 the copies are
  asynchronous (cp.async on sm_90, only for 16-byte vectors here: no separate LDS store; on AMD
  the stream pipeliner's prefetch: a store after the load) and waited for stages - 1 steps later
  (counts.py's pipeline fill rule); outside that class on sm_90 ld.global + st.shared, unpipelined
- LDS reads: warps laid out along M first (wm = min(num_warps, BLOCK_M / instr.m), wn the rest;
  with wgmma warpsPerTileV3's);
  a warp reads its BLOCK_M / wm rows of A and BLOCK_N / wn columns of B per step in 16-byte
  accesses (with wgmma a quarter of the B columns: the warpgroup's 4 warps share one B tile);
  Triton's shared layouts are swizzled, so one 128-byte wavefront per 128 bytes
- one barrier a step; the epilogue stores the f16 tile in 16-byte vectors
- integer work: a pointer advance and a mask test per staged vector (the loop's tt.addptr and
  the K-bound compare in TTGIR), 2 per global load
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocke_aot import mma
from rocke_aot.launch import ceil_div
from rocke_aot.mma import WARPGROUP, WGMMA_K
from rocke_aot.targets import Target
from rocke_aot.variants.counts import KernelCounts, pipelined_latencies, wgmma_key

EB = 2  # f16 (the family's only baked dtype)
TRITON_OPS_PER_LOAD = 2
# the facts' key of a warp's 16x8x16 quarter of a wgmma (variants/hw_facts/sm_90.json)
WGMMA_KEY = wgmma_key("f16")
ASYNC_MIN_BYTES = 4  # the smallest cp.async copy
# WARPGROUP: warps of one wgmma; WGMMA_K: 256 bits of K per f16 instruction (mmaVersionToInstrShape:
# 256 / bit width) -- the native warpgroup pipeline's constants (families/gemm/spec.py)
WGMMA_N = tuple(range(256, 0, -8))  # the f16 instruction N Triton tries, largest first



def matrix_instr(target: Target) -> mma.MmaInstr:
    """The instruction the counts are in where no wgmma is emitted (module doc): mma.sync on
    NVIDIA, the default on AMD."""
    if not target.is_amdgpu:
        return mma.select(target.processor, "mma", "f16")
    path = "wmma" if target.info.wave_size == 32 else "mfma"
    return mma.select(target.processor, path, "f16")


@dataclass(frozen=True)
class WgmmaLayout:
    """How Triton 3.6 lays a config's dot out in wgmma (module doc)."""

    n: int  # the instruction's N (m64nNk16)
    warps_m: int
    warps_n: int
    per_step: int  # wgmma instructions a warp issues per K step

    @property
    def units(self) -> int:
        """16x8x16 units of a warp's quarter per K step (the facts' wgmma rate is per unit)."""
        return self.per_step * self.n // 8


def wgmma_layout(spec: Any, target: Target) -> WgmmaLayout | None:
    """Triton 3.6's wgmma layout of the config on sm_90, or None where it emits mma.sync / MFMA."""
    bm, bn, bk, warps = spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K, spec.num_warps
    if target.is_amdgpu or target.processor != "sm_90":
        return None
    if warps % 4 or bm % 64 or bn % 8 or bk < WGMMA_K:
        return None
    max_n = max(bn // max(warps // max(bm // 16, 1), 1), 8)
    n = next(v for v in WGMMA_N if bn % v == 0 and v <= max_n)
    wm, wn = 4, 1
    while wm * wn < warps:
        if bm > 16 * wm:
            wm *= 2
        else:
            wn *= 2
    reps = max(1, bm // (16 * wm)) * max(1, bn // (n * wn)) * ceil_div(bk, WGMMA_K)
    return WgmmaLayout(n, wm, wn, reps)


def matmul_counts(spec: Any, p: Any, target: Target, banks: int = 32) -> KernelCounts:
    bm, bn, bk, warps, stages = spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K, spec.num_warps, spec.num_stages
    ins = matrix_instr(target)
    wg = wgmma_layout(spec, target)
    wave = target.info.wave_size
    threads = warps * wave
    steps = ceil_div(p.k, bk)
    macs = bm * bn * bk
    vec = 16 if all(getattr(spec, f"{d}_class") == "div16" for d in "mnk") else EB
    staged = (bm + bn) * bk * EB
    loads = staged / vec / threads  # global loads per thread per step
    if wg is not None:
        wm, wn = wg.warps_m, wg.warps_n
        # one wgmma is a warpgroup's: its 4 warps' 16-row slices of A each, and ONE B tile for
        # the warpgroup (PTX ISA, wgmma.mma_async: a single shared-memory descriptor of B for the
        # collective instruction), so a warp's share of B is a quarter. Charging every warp the
        # whole B put the LDS term of 128x256x64 w8 s3 at 4096^3 at 0.388 ms, above the 0.204 ms
        # that kernel ran in on the H200 (bench/results/triton-raw/h200-2026-12-04-across): a term of a
        # lower bound cannot exceed a measured time, so that reading was wrong.
        read_bytes = (bm // wm + bn // wn / WARPGROUP) * bk * EB
    else:
        wm = max(1, min(warps, bm // ins.m))
        wn = max(1, warps // wm)
        read_bytes = (bm // wm + bn // wn) * bk * EB  # per warp per step
    # cp.async copies 4, 8 or 16 bytes (PTX ISA, cp.async cp-size): 2-byte elements (a problem
    # outside the divisible-by-16 class) go through registers, ld.global then st.shared in the
    # same step, which Triton 3.6 does not pipeline (tests/test_triton_counts.py: its K loop)
    asynchronous = stages >= 2 and (target.is_amdgpu or vec >= ASYNC_MIN_BYTES)
    on_nvidia = not target.is_amdgpu
    return KernelCounts(
        threads=threads, wave_size=wave, steps=steps, instr=WGMMA_KEY if wg else ins.key,
        mma=wg.units if wg else macs / (ins.m * ins.n * ins.k) / warps,
        matrix_issued=wg.per_step if wg else None,
        lds_reads=0 if wg else read_bytes / (16 * wave), lds_read_wavefronts=read_bytes / 128,
        fma=0, cvt=0, global_loads=loads,
        lds_writes=0 if (asynchronous and on_nvidia) else loads,
        lds_write_wavefronts=staged / 128 / warps, global_wavefronts=staged / 128 / warps,
        serial_loads=pipelined_latencies(steps, stages) if asynchronous else loads,
        int_ops=loads * TRITON_OPS_PER_LOAD, staged_bytes=staged, barriers=1, double_buffer=asynchronous,
        store_bytes=bm * bn * EB, stores=ceil_div(bm * bn * EB, 16 * threads),
        unique_bytes=(p.m * p.k + p.k * p.n + p.m * p.n) * EB, macs=macs)
