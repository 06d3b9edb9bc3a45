"""A time model for ranking: how long one kernel takes on one problem, from its tile work,
its residency and a few per-arch constants measured on the device.

    spec, problem ──> the family's work model (variants/models.py, Model.work)
                        TileWork: threads, reduction steps per block, per step the MACs,
                        the bytes staged into LDS and the LDS wavefronts of the matrix
                        fragments (bank conflicts counted), the bytes each block stores
    tiles           ──> the launch contract's tile count (the same formula as the grid)
    groups per CU   ──> the code object's residency (rocke_aot/candidates.py groups_per_cu:
                        registers, LDS, warps, blocks), or the spec's own (threads, LDS) when
                        the artifact has no resources
    PerfConstants   ──> variants/perf_constants/<processor>.json, fitted by
                        bench/fit_perf.py from a `rocke-aot bench --candidates all` run
        │
        ▼
    estimate_ms(work, tiles, groups, spill_bytes, cus, constants)

The busiest CU runs ceil(tiles / CUs) blocks, ``groups`` at a time. A block's reduction step
costs the longer of its own latency chain (a fixed step latency, the per-warp matrix or FMA
issue, the per-thread LDS staging, the fragment reads, spills) and the CU's throughput
shared by the blocks resident with it (``g`` x the step's issue cost, which includes a cost
per warp whatever its tile work: many small blocks of many warps pay it more often than few
large ones for the same MACs, which is what decides between the conv_dgrad_patch row blocks
on the H200, docs/bench.md); the two combine with
a smooth maximum (p = 4). Blocks finish in rounds of ``groups``; the last round has fewer.
Add a launch overhead and the epilogue stores. This is the model of tritonBLAS/origami's kind
(an analytical latency/throughput model with hardware constants, no per-problem tuning),
narrowed to how these kernels are built: no cp.async/TMA, a barrier per step, LDS staging by
every thread, mma.sync fragments read element by element (docs/bench.md, "The time model").

Why bank conflicts are in it: on the H100 the conv kernels with c_chunk (or k_chunk) 32 ran
1.2-1.6x slower than the same tile with 16, though they do the same work in half the steps.
Their LDS rows are 64 bytes long, so the eight row groups of an mma.sync A fragment land on
the same four banks (4-way conflicts) where 32-byte rows give 2-way ones. gemm and, since
2026-12-03, conv_dgrad_patch pad their rows (lds_row_pad) and have none; conv_direct_fwd's
halo keeps them. The wavefront count makes the difference visible to the ranking.

Pure functions of their arguments; no I/O but reading the constants file once.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from importlib import resources
from typing import Any

from rocke_aot.arch import ArchInfo
from rocke_aot.candidates import groups_per_cu
from rocke_aot.errors import SpecError

LDS_BANKS = 32  # 4-byte banks (NVIDIA shared memory; AMD LDS on gfx9/gfx12) — see bank_degree
BANK_BYTES = 4


@dataclass(frozen=True)
class TileWork:
    """What one block of a spec does for one problem (counts per block)."""

    threads: int
    steps: int  # reduction steps (LDS refills) per block
    macs_per_step: int  # multiply-accumulates per step, padding included
    load_bytes_per_step: int  # bytes every step stages from global memory into LDS
    lds_wavefronts_per_step: float  # LDS wavefronts of the matrix fragment reads (0: fma)
    store_bytes: int  # bytes the block writes at the end
    matrix: bool  # the inner product runs on the matrix unit
    double_buffer: bool
    lds_bytes: int  # static LDS of the block (residency when no resources are known)


def bank_degree(byte_addresses: Any) -> int:
    """Conflict degree of one LDS access of a wavefront: the most distinct 4-byte words any
    one bank must serve (1 = conflict free; lanes reading the same word are a broadcast).
    NVIDIA shared memory: 32 banks of 4 bytes, a request split into as many wavefronts as the
    worst bank's distinct words (CUDA C Programming Guide, "Shared Memory", compute
    capability 5.x and later)."""
    per_bank: dict[int, set[int]] = {}
    for a in byte_addresses:
        w = int(a) // BANK_BYTES
        per_bank.setdefault(w % LDS_BANKS, set()).add(w)
    return max((len(v) for v in per_bank.values()), default=0)


def fragment_wavefronts(instr: Any, a_index: Callable[[int, int], int], b_index: Callable[[int, int], int],
                        elem_bytes: int) -> int:
    """LDS wavefronts one matrix instruction's operand fragments cost when each lane reads its
    elements one by one at ``a_index(row, k)`` / ``b_index(k, col)`` (element indices): the sum
    over the fragment's loads of their bank-conflict degree (rocke_aot/mma.py coordinate maps)."""
    lanes = range(instr.wave_size)
    total = 0
    for j in range(instr.a_per_lane):
        total += bank_degree([a_index(*instr.a_coord(ln, j)) * elem_bytes for ln in lanes])
    for j in range(instr.b_per_lane):
        total += bank_degree([b_index(*instr.b_coord(ln, j)) * elem_bytes for ln in lanes])
    return total


@dataclass(frozen=True)
class PerfConstants:
    """Per-arch constants of the time model (milliseconds; per MAC, byte or wavefront)."""

    launch: float  # launch overhead
    lat_sb: float  # step latency, single-buffered
    lat_db: float  # step latency, double-buffered
    warp_mma: float  # per MAC per warp on the latency chain, matrix path
    warp_fma: float  # the same, fma path
    thread_load: float  # per staged byte per thread on the latency chain
    cu_mma: float  # per MAC of CU throughput, matrix path
    cu_fma: float  # per MAC of CU throughput, fma path
    cu_load: float  # per staged byte of CU throughput
    cu_lds: float  # per fragment wavefront of CU throughput
    warp_lds: float  # per fragment wavefront per warp on the latency chain
    store: float  # per stored byte per round
    spill: float  # per spilled (local) byte per thread per step
    barrier: float  # per warp per step (the barrier)
    cu_warp: float  # per warp per step of CU throughput (loop control, address math, barrier arrival)
    load_factor: Mapping[str, float]  # per family: staging cost relative to gemm's

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> PerfConstants:
        names = [f.name for f in fields(cls)]
        missing = sorted(set(names) - set(d))
        unknown = sorted(set(d) - set(names))
        if missing or unknown:
            raise SpecError(f"{where}: perf constants missing {missing}, unknown {unknown}")
        out: dict[str, Any] = {}  # each field's value: a float, load_factor a dict
        for n in names:
            v = d[n]
            if n == "load_factor":
                if not isinstance(v, Mapping) or not all(isinstance(x, (int, float)) and x > 0 for x in v.values()):
                    raise SpecError(f"{where}: load_factor must map families to positive numbers")
                out[n] = dict(v)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SpecError(f"{where}: perf constant {n} must be a finite number >= 0, got {v!r}")
            else:
                out[n] = float(v)
        return cls(**out)


@functools.cache
def constants_for(processor: str) -> PerfConstants | None:
    """The measured constants of ``processor`` (variants/perf_constants/<processor>.json), or
    None where nobody has measured that arch: selection then ranks by tile efficiency."""
    try:
        text = resources.files("rocke_aot.variants").joinpath("perf_constants", f"{processor}.json").read_text()
    except FileNotFoundError:
        return None
    doc = json.loads(text)
    return PerfConstants.from_dict(doc["constants"], f"perf_constants/{processor}.json")


def resident_groups(info: ArchInfo, work: TileWork, resources: Any = None) -> int:
    """Work-groups one CU holds for this kernel: the code object's own residency where the
    artifact records it (Resources.groups_per_cu: registers, LDS, barriers, block size), else the
    spec's threads and LDS alone (registers unknown: no register limit, an upper bound)."""
    got = getattr(resources, "groups_per_cu", None)
    if got is None:
        lds = getattr(resources, "lds_bytes", None) or work.lds_bytes
        got = groups_per_cu(info, vgprs=getattr(resources, "vgprs", None), sgprs=getattr(resources, "sgprs", None),
                            lds_bytes=lds, workgroup_size=work.threads)
    return max(1, got or 1)


def _smax(a: Any, b: Any) -> Any:
    # A smooth maximum (p = 4): near max(a, b) when one dominates, above it where both are close
    # (latency and throughput limits overlap imperfectly).
    return (a ** 4 + b ** 4) ** 0.25


def estimate_ms(work: TileWork, family: str, tiles: int, groups: int, spill_bytes: int, cus: int,
                k: PerfConstants) -> float:
    """Estimated kernel time in milliseconds (module doc)."""
    if tiles <= 0 or work.steps <= 0:
        return k.launch
    return float(estimate_core(
        k, tiles=tiles, cus=cus, groups=max(1, groups), steps=work.steps, threads=max(1, work.threads),
        macs=work.macs_per_step, load=work.load_bytes_per_step, wavefronts=work.lds_wavefronts_per_step,
        store=work.store_bytes, matrix=1.0 if work.matrix else 0.0, double_buffer=1.0 if work.double_buffer else 0.0,
        spill=spill_bytes, load_factor=k.load_factor.get(family, 1.0)))


def estimate_core(k: Any, *, tiles, cus, groups, steps, threads, macs, load, wavefronts, store, matrix,
                  double_buffer, spill, load_factor):
    """The model itself, on plain numbers or numpy arrays alike (bench/fit_perf.py fits the
    constants through this same function; ``k`` is a PerfConstants or any object with its
    fields, ``matrix`` and ``double_buffer`` are 0/1)."""
    per_cu = -(-tiles // cus)
    full = per_cu // groups
    rem = per_cu - full * groups
    warps = -(-threads // 32)
    lat = (k.lat_db * double_buffer + k.lat_sb * (1 - double_buffer)
           + (k.warp_mma * matrix + k.warp_fma * (1 - matrix)) * macs / warps
           + load_factor * k.thread_load * load / threads
           + k.warp_lds * wavefronts / warps
           + k.spill * spill + k.barrier * warps)
    unit = ((k.cu_mma * matrix + k.cu_fma * (1 - matrix)) * macs + load_factor * k.cu_load * load
            + k.cu_lds * wavefronts + k.spill * spill * threads / 32 + k.cu_warp * warps)
    rounds = full + (rem > 0)
    t = steps * (full * _smax(lat, groups * unit) + (rem > 0) * _smax(lat, (rem + (rem == 0)) * unit))
    return k.launch + t + rounds * k.store * store
