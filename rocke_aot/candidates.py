"""Candidate records: what the store holds for one artifact, as selection needs it.

    artifacts row (cache/store.py Store.candidates, one query)
        key, blob sha256, family, spec, arch (target ID), lane, profile, generation,
        current (its generation is the one the (arch, lane) ref points to),
        code-object resources read from the artifact metadata's "code_object" section
        (written by aot/codeobject.py validate(); never recomputed here), built_at,
        triton_version (triton_version_of the key's toolchain identity: the Triton that
        compiled it; None for every other toolchain)
        │
        ▼
    Candidate (frozen)  ──> variants/selection.py rank() ──> service/selection.py select()

Occupancy (waves per SIMD) and work-groups per CU are derived from those resources and the
arch table (rocke_aot/arch.py); nothing here reads a code object.

AMD, by the rules LLVM's AMDGPUBaseInfo / GCNSubtarget use:

    by VGPRs   floor(max_vgprs / roundup(max(vgprs, 1), vgpr_alloc_granule))
    by SGPRs   GFX8/9 only (GCNSubtarget::getOccupancyWithNumSGPRs): <=80 -> 10, <=88 -> 9,
               <=100 -> 8, else 7   (the metadata's .sgpr_count includes VCC etc., as LLVM's does)
    by LDS     work-groups per CU = floor(lds_bytes(arch) / lds(kernel)), times waves per
               work-group ceil(workgroup_size / wave_size), spread over simds_per_cu SIMDs
    occupancy  min(max_waves_per_simd, by VGPRs, by SGPRs, by LDS)
    groups_per_cu  min(floor(min(max_waves_per_simd, by VGPRs, by SGPRs) * simds_per_cu
                             / waves per work-group),  floor(lds_bytes(arch) / lds(kernel)))
               (no cap on work-groups per CU: none is documented in AMDGPUUsage or the ISA
               guides; LLVM's getMaxWorkGroupsPerCU (16 for multi-wave groups) is the
               compiler's own model, so it is not modelled here)

NVIDIA (sm_90), block granularity, as the CUDA occupancy calculator computes it
(cuda_occupancy.h cudaOccMaxActiveBlocksPerMultiprocessor; checked against the driver's
cuOccupancyMaxActiveBlocksPerMultiprocessor on an H200, tests/test_cubin_resources.py):

    warps      W = ceil(block / 32)
    registers  per warp = roundup(regs * 32, reg_alloc_granule 256); a block fits only if
               per warp * W and per warp * roundup(W, 4) <= regs_per_group (65536);
               blocks = floor(floor(regs_per_cu / 4 / per warp) * 4 / W)
    warps      floor(64 / W)
    blocks     max_groups_per_cu (32)
    shared     per block = roundup(lds + reserved 1024, lds_alloc_granule 128) (at most
               lds_bytes(arch) + 1024); blocks = floor(lds_per_cu 233472 / per block)
    barriers   named barriers B > 0: floor(barriers_per_cu 64 / B)
    groups_per_cu  min of the above
    occupancy  resident warps per SM sub-partition: floor(groups_per_cu * W / 4)

Schedule (sm_90 cubins): ptxas's schedule as aot/sass.py read it off the cubin's SASS when the
artifact was built, from metadata["code_object"]["schedule"] (record.check_schedule's form; a
malformed one is a RecordError when the candidate is read: fail closed). The hardware model
takes it in place of two of its counts where a family says so (variants/selection.py
estimate_hw); "unavailable" carries why the build could not read it (no cuobjdump), and the
model then uses its counts and says so.

An arch without these facts or a code object without resources gives None; NVIDIA needs
the block size too (the launch contract's, or the cubin's .maxntid / .reqntid).
groups_per_cu without registers (vgprs None) leaves the register limit out: an upper bound.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from rocke_aot.arch import ArchInfo
from rocke_aot.errors import SpecError
from rocke_aot.lanes import Lane, get_lane
from rocke_aot.launch import ceil_div
from rocke_aot.record import SCHEDULE_VERSION, check_resources, check_schedule
from rocke_aot.targets import Target


def _sgpr_waves(sgprs: int) -> int:
    # LLVM GCNSubtarget::getOccupancyWithNumSGPRs, VOLCANIC_ISLANDS and later (GFX8/GFX9).
    if sgprs <= 80:
        return 10
    if sgprs <= 88:
        return 9
    if sgprs <= 100:
        return 8
    return 7


def _amd_waves(info: ArchInfo, vgprs: int, sgprs: int | None) -> int:
    """Waves per SIMD by the wave limit, VGPRs and (GFX8/9) SGPRs."""
    waves = info.max_waves_per_simd
    waves = min(waves, info.max_vgprs // (ceil_div(max(vgprs, 1), info.vgpr_alloc_granule) * info.vgpr_alloc_granule))
    if info.sgpr_limits_occupancy and sgprs is not None:
        waves = min(waves, _sgpr_waves(sgprs))
    return waves


def _nv_groups(info: ArchInfo, regs: int | None, lds_bytes: int, threads: int, barriers: int | None) -> int:
    """Resident blocks per SM (cuda_occupancy.h's rules, module doc)."""
    warps = ceil_div(threads, info.wave_size)
    subs = info.simds_per_cu
    limits = [info.max_groups_per_cu, info.max_waves_per_simd * subs // warps]
    per_warp = ceil_div((regs or 0) * info.wave_size, info.reg_alloc_granule) * info.reg_alloc_granule
    if per_warp:
        # the hardware checks a block as if its warps were spread over every sub-partition
        if max(per_warp * warps, per_warp * ceil_div(warps, subs) * subs) > info.regs_per_group:
            return 0
        limits.append(info.regs_per_cu // subs // per_warp * subs // warps)
    smem = ceil_div(lds_bytes + info.lds_reserved_per_group, info.lds_alloc_granule) * info.lds_alloc_granule
    if smem > info.lds_bytes + info.lds_reserved_per_group:
        return 0
    if smem:
        limits.append(info.cu_lds_bytes // smem)
    if barriers and info.barriers_per_cu:
        limits.append(info.barriers_per_cu // barriers)
    return max(min(limits), 0)


def groups_per_cu(info: ArchInfo, *, vgprs: int | None, sgprs: int | None, lds_bytes: int | None,
                  workgroup_size: int | None, barriers: int | None = None) -> int | None:
    """Work-groups (CUDA blocks) one CU (SM) holds at once (formula: module doc).

    ``vgprs`` is registers per thread on NVIDIA; None: no register limit (an upper bound, for
    a spec whose code object is not built yet). ``barriers``: the named barriers a block uses
    (NVIDIA only; None or 0: no barrier limit). None where the arch has no occupancy facts or
    the work-group size is unknown.
    """
    if not info.max_waves_per_simd or not workgroup_size:
        return None
    if info.regs_per_cu:
        return _nv_groups(info, vgprs, lds_bytes or 0, workgroup_size, barriers)
    waves = info.max_waves_per_simd if vgprs is None else _amd_waves(info, vgprs, sgprs)
    groups = waves * info.simds_per_cu // ceil_div(workgroup_size, info.wave_size)
    if lds_bytes:
        groups = min(groups, info.cu_lds_bytes // lds_bytes)
    return max(groups, 0)


def occupancy(info: ArchInfo, *, vgprs: int | None, sgprs: int | None, lds_bytes: int | None,
              workgroup_size: int | None, barriers: int | None = None) -> int | None:
    """Waves per SIMD (NVIDIA: warps per SM sub-partition) a kernel with these resources
    reaches on ``info`` (formula: module doc)."""
    if not info.max_waves_per_simd or vgprs is None:
        return None
    if info.regs_per_cu:
        if not workgroup_size:
            return None
        groups = _nv_groups(info, vgprs, lds_bytes or 0, workgroup_size, barriers)
        return groups * ceil_div(workgroup_size, info.wave_size) // info.simds_per_cu
    waves = _amd_waves(info, vgprs, sgprs)
    if lds_bytes and workgroup_size:
        groups = info.lds_bytes // lds_bytes
        waves = min(waves, groups * ceil_div(workgroup_size, info.wave_size) // info.simds_per_cu)
    return max(waves, 0)


def launch_block_size(launch: Mapping[str, Any] | None) -> int | None:
    """Threads per work-group of a stored launch contract (metadata["launch"]), when its block
    formulas are integer literals (the families' are); None otherwise."""
    block = (launch or {}).get("block") if isinstance(launch, Mapping) else None
    if not isinstance(block, (list, tuple)) or len(block) != 3:
        return None
    size = 1
    for dim in block:
        text = str(dim).strip()
        if not text.isdigit() or int(text) < 1:
            return None
        size *= int(text)
    return size


def launch_dynamic_lds(launch: Mapping[str, Any] | None) -> int:
    """Dynamic shared memory bytes of a stored launch contract (0 when it names none)."""
    v = launch.get("dynamic_shared_bytes", 0) if isinstance(launch, Mapping) else 0
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


TRITON_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+_-]{0,63}$")  # "3.6.0", "3.4.0+gitabc12345"


def triton_version_of(toolchain: Mapping[str, Any] | None) -> str | None:
    """The Triton version a build's toolchain identity names (kind "triton": Triton's own compiler,
    aot/toolchains/triton_jit.py identity()), None for any other toolchain. The identity is part of
    the key, so the version a key names cannot be told apart from the bytes it was built with.
    A Triton identity without a well-formed version raises SpecError (a malformed row)."""
    if not isinstance(toolchain, Mapping) or toolchain.get("kind") != "triton":
        return None
    v = toolchain.get("triton_version")
    if not isinstance(v, str) or not TRITON_VERSION_RE.match(v):
        raise SpecError(f"a Triton toolchain identity names no Triton version (triton_version {v!r})")
    return v


@dataclass(frozen=True, slots=True)
class Schedule:
    """ptxas's schedule of one kernel, read off its SASS at build time (aot/sass.py; module doc).

    Derived from the artifact's bytes, so it is no part of the cache key: the key covers what
    shapes the bytes, and the same bytes always walk to the same figures."""

    source: str  # "sass": read; "unavailable": the build could not read it (``reason`` says why)
    exposed_latencies: float | None = None  # global-load latencies a step's staging exposes (to its barrier)
    chain_ratio: float | None = None  # the compute loop's dependency chain / its instructions (None: no such loop)
    global_latency: float | None = None  # the walk's latencies (a reader whose facts differ does not use it)
    lds_latency: float | None = None
    tool: str | None = None  # the disassembler's version line
    reason: str | None = None  # why unavailable

    @property
    def available(self) -> bool:
        return self.source == "sass"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], what: str = "metadata.code_object.schedule") -> Schedule:
        """From the stored form; RecordError (named field) when it is not record.check_schedule's."""
        d = check_schedule(d, what)
        return cls(d["source"], d.get("exposed_latencies"), d.get("chain_ratio"), d.get("global_latency"),
                   d.get("lds_latency"), d.get("tool"), d.get("reason"))

    def as_dict(self) -> dict[str, Any]:
        if not self.available:
            return {"version": SCHEDULE_VERSION, "source": self.source, "reason": self.reason}
        return {"version": SCHEDULE_VERSION, "source": self.source, "tool": self.tool,
                "exposed_latencies": self.exposed_latencies, "chain_ratio": self.chain_ratio,
                "global_latency": self.global_latency, "lds_latency": self.lds_latency}


@dataclass(frozen=True, slots=True)
class Resources:
    """Code-object resources, as validate() recorded them (None where the format has none)."""

    vgprs: int | None
    sgprs: int | None
    agprs: int | None
    lds_bytes: int | None
    vgpr_spills: int | None
    sgpr_spills: int | None
    private_segment_bytes: int | None
    workgroup_size: int | None  # the launch's block size, else the code object's .max_flat_workgroup_size
    occupancy: int | None  # waves per SIMD; NVIDIA: warps per SM sub-partition (module doc)
    groups_per_cu: int | None = None  # work-groups (blocks) one CU (SM) holds at once (module doc)
    schedule: Schedule | None = None  # ptxas's schedule (sm_90 cubins; module doc); None: none recorded

    @property
    def spills(self) -> int | None:
        if self.vgpr_spills is None and self.sgpr_spills is None:
            return None
        return (self.vgpr_spills or 0) + (self.sgpr_spills or 0)

    @classmethod
    def from_code_object(cls, co: Mapping[str, Any] | None, info: ArchInfo, *,
                         block_size: int | None = None, dynamic_lds: int = 0) -> Resources:
        """From the metadata's "code_object" section (CodeObjectInfo.as_dict()).

        ``block_size``: the work-group size the kernel is launched with (launch_block_size() of
        metadata["launch"]); without it, the code object's .max_flat_workgroup_size (a cubin
        states one only through .maxntid / .reqntid). ``dynamic_lds``: the shared memory the
        launch adds to the object's static figure (launch_dynamic_lds(): a Triton kernel's, the
        sm_90 async gemm's stages), which residency counts like static memory.
        """
        co = co or {}
        vgprs, sgprs, lds = co.get("vgpr_count"), co.get("sgpr_count"), co.get("lds_bytes")
        if dynamic_lds:
            lds = (lds or 0) + dynamic_lds
        wg = block_size or co.get("max_flat_workgroup_size")
        kw = dict(vgprs=vgprs, sgprs=sgprs, lds_bytes=lds, workgroup_size=wg, barriers=co.get("barrier_count"))
        # a code object that recorded no registers (a cubin stored before they were parsed) has
        # no residency, not groups_per_cu's upper bound
        groups = groups_per_cu(info, **kw) if vgprs is not None else None
        sched = Schedule.from_dict(co["schedule"]) if co.get("schedule") is not None else None
        return cls(vgprs, sgprs, co.get("agpr_count"), lds, co.get("vgpr_spill_count"), co.get("sgpr_spill_count"),
                   co.get("private_segment_bytes"), wg, occupancy(info, **kw), groups, sched)

    def as_dict(self) -> dict[str, Any]:
        return {"vgprs": self.vgprs, "sgprs": self.sgprs, "agprs": self.agprs, "lds_bytes": self.lds_bytes,
                "vgpr_spills": self.vgpr_spills, "sgpr_spills": self.sgpr_spills, "spills": self.spills,
                "private_segment_bytes": self.private_segment_bytes, "workgroup_size": self.workgroup_size,
                "occupancy": self.occupancy, "groups_per_cu": self.groups_per_cu,
                "schedule": None if self.schedule is None else self.schedule.as_dict()}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One stored artifact offered to selection. ``spec`` is the stored spec mapping."""

    key: str
    blob_sha256: str
    family: str
    spec: Mapping[str, Any]
    target: Target  # what it was built for (the stored canonical target ID, parsed by candidate_of)
    lane: Lane
    profile: str
    generation: str
    current: bool  # its generation is the current one of (arch, lane)
    resources: Resources
    created_at: datetime
    triton_version: str | None = None  # the Triton that built it (triton_version_of its toolchain); None: not Triton

    __hash__ = None  # type: ignore[assignment]  # a mapping inside: compare, don't hash

    @property
    def arch(self) -> str:
        """The canonical target ID it was built for (the stored string)."""
        return self.target.id

    @property
    def occupancy(self) -> int | None:
        return self.resources.occupancy

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "blob_sha256": self.blob_sha256, "family": self.family, "spec": dict(self.spec),
                "arch": self.arch, "lane": self.lane.name, "profile": self.profile, "generation": self.generation,
                "current": self.current, "resources": self.resources.as_dict(),
                "created_at": self.created_at.isoformat(), "triton_version": self.triton_version}


def candidate_of(key: str, sha256: str, family: str, spec: Any, arch: str, lane: str, profile: str,
                 generation: str | None, current: bool, metadata: Any, created_at: datetime,
                 toolchain: Any, info: ArchInfo) -> Candidate:
    """A Candidate from one artifact's stored fields (the spec, metadata and toolchain as parsed
    JSON): the store's selection view (a row) and the client's signed index (a signed record)
    read artifacts through this one function: the edge where the stored target ID and lane name
    become a Target and a Lane (tests/test_parse_edge.py). The metadata's "code_object" section is
    checked (record.check_resources); a spec or metadata that is not an object is a SpecError, an
    unknown target ID a SpecError, an unknown lane a LaneError."""
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise SpecError("its metadata or spec is not a JSON object")
    co = metadata.get("code_object")
    if co is not None:
        check_resources(co)
    return Candidate(key, sha256, family, MappingProxyType(spec if isinstance(spec, dict) else dict(spec)),
                     Target.parse(arch), get_lane(lane, "the stored lane"), profile, generation or "", current,
                     Resources.from_code_object(co, info, block_size=launch_block_size(metadata.get("launch")),
                                                dynamic_lds=launch_dynamic_lds(metadata.get("launch"))),
                     created_at, triton_version_of(toolchain if isinstance(toolchain, Mapping) else None))
