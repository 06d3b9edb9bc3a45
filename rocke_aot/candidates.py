"""Candidate records: what the store holds for one artifact, as selection needs it.

    artifacts row (cache/store.py Store.candidates, one query)
        key, blob sha256, family, spec, arch (target ID), lane, profile, generation,
        current (its generation is the one the (arch, lane) ref points to),
        code-object resources read from the artifact metadata's "code_object" section
        (written by aot/codeobject.py validate(); never recomputed here), built_at
        │
        ▼
    Candidate (frozen)  ──> variants/selection.py rank() ──> service/selection.py select()

Occupancy (waves per SIMD) is derived from those resources and the arch table
(rocke_aot/arch.py), by the rules LLVM's AMDGPUBaseInfo / GCNSubtarget use:

    by VGPRs   floor(max_vgprs / roundup(max(vgprs, 1), vgpr_alloc_granule))
    by SGPRs   GFX8/9 only (GCNSubtarget::getOccupancyWithNumSGPRs): <=80 -> 10, <=88 -> 9,
               <=100 -> 8, else 7   (the metadata's .sgpr_count includes VCC etc., as LLVM's does)
    by LDS     work-groups per CU = floor(lds_bytes(arch) / lds(kernel)), times waves per
               work-group ceil(workgroup_size / wave_size), spread over simds_per_cu SIMDs
    occupancy  min(max_waves_per_simd, by VGPRs, by SGPRs, by LDS)

An arch without these facts (NVIDIA) or a code object without resources gives None.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from rocke_aot.arch import ArchInfo


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _sgpr_waves(sgprs: int) -> int:
    # LLVM GCNSubtarget::getOccupancyWithNumSGPRs, VOLCANIC_ISLANDS and later (GFX8/GFX9).
    if sgprs <= 80:
        return 10
    if sgprs <= 88:
        return 9
    if sgprs <= 100:
        return 8
    return 7


def occupancy(info: ArchInfo, *, vgprs: int | None, sgprs: int | None, lds_bytes: int | None,
              workgroup_size: int | None) -> int | None:
    """Waves per SIMD a kernel with these resources reaches on ``info`` (formula: module doc)."""
    if not info.max_waves_per_simd or vgprs is None:
        return None
    waves = info.max_waves_per_simd
    file = info.occupancy_vgprs or info.max_vgprs
    waves = min(waves, file // (_ceil(max(vgprs, 1), info.vgpr_alloc_granule) * info.vgpr_alloc_granule))
    if info.sgpr_limits_occupancy and sgprs is not None:
        waves = min(waves, _sgpr_waves(sgprs))
    if lds_bytes and workgroup_size:
        groups = (info.lds_per_cu or info.lds_bytes) // (lds_bytes + info.lds_reserved_per_group)
        waves = min(waves, groups * _ceil(workgroup_size, info.wave_size) // info.simds_per_cu)
    return max(waves, 0)


def groups_per_cu(info: ArchInfo, *, vgprs: int | None, sgprs: int | None, lds_bytes: int | None,
                  workgroup_size: int | None) -> int | None:
    """Work-groups (CUDA blocks) one CU (SM) holds at once: the fewest the wave slots, the
    register file (per SIMD, at the allocation granule), LDS (plus any per-group reservation) and
    the per-CU group limit allow, at group granularity, as the CUDA occupancy calculator counts.
    ``vgprs`` None: no register limit (an upper bound). None where the arch has no occupancy
    facts or the group size is unknown."""
    if not info.max_waves_per_simd or not info.simds_per_cu or not workgroup_size:
        return None
    waves = _ceil(workgroup_size, info.wave_size)
    groups = info.max_waves_per_simd * info.simds_per_cu // waves
    if vgprs is not None:
        file = info.occupancy_vgprs or info.max_vgprs
        per_simd = file // (_ceil(max(vgprs, 1), info.vgpr_alloc_granule) * info.vgpr_alloc_granule)
        if info.sgpr_limits_occupancy and sgprs is not None:
            per_simd = min(per_simd, _sgpr_waves(sgprs))
        groups = min(groups, min(per_simd, info.max_waves_per_simd) * info.simds_per_cu // waves)
    if lds_bytes:
        groups = min(groups, (info.lds_per_cu or info.lds_bytes) // (lds_bytes + info.lds_reserved_per_group))
    if info.max_groups_per_cu:
        groups = min(groups, info.max_groups_per_cu)
    return max(groups, 0)


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
    workgroup_size: int | None  # .max_flat_workgroup_size
    occupancy: int | None  # waves per SIMD (module doc)

    @property
    def spills(self) -> int | None:
        if self.vgpr_spills is None and self.sgpr_spills is None:
            return None
        return (self.vgpr_spills or 0) + (self.sgpr_spills or 0)

    @classmethod
    def from_code_object(cls, co: Mapping[str, Any] | None, info: ArchInfo) -> "Resources":
        """From the metadata's "code_object" section (CodeObjectInfo.as_dict())."""
        co = co or {}
        vgprs, sgprs, lds, wg = (co.get("vgpr_count"), co.get("sgpr_count"), co.get("lds_bytes"),
                                 co.get("max_flat_workgroup_size"))
        return cls(vgprs, sgprs, co.get("agpr_count"), lds, co.get("vgpr_spill_count"), co.get("sgpr_spill_count"),
                   co.get("private_segment_bytes"), wg,
                   occupancy(info, vgprs=vgprs, sgprs=sgprs, lds_bytes=lds, workgroup_size=wg))

    def as_dict(self) -> dict[str, Any]:
        return {"vgprs": self.vgprs, "sgprs": self.sgprs, "agprs": self.agprs, "lds_bytes": self.lds_bytes,
                "vgpr_spills": self.vgpr_spills, "sgpr_spills": self.sgpr_spills, "spills": self.spills,
                "private_segment_bytes": self.private_segment_bytes, "workgroup_size": self.workgroup_size,
                "occupancy": self.occupancy}


@dataclass(frozen=True, slots=True)
class Candidate:
    """One stored artifact offered to selection. ``spec`` is the stored spec mapping."""

    key: str
    blob_sha256: str
    family: str
    spec: Mapping[str, Any]
    arch: str  # the canonical target ID it was built for
    lane: str
    profile: str
    generation: str
    current: bool  # its generation is the current one of (arch, lane)
    resources: Resources
    created_at: datetime

    __hash__ = None  # type: ignore[assignment]  # a mapping inside: compare, don't hash

    @property
    def occupancy(self) -> int | None:
        return self.resources.occupancy

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "blob_sha256": self.blob_sha256, "family": self.family, "spec": dict(self.spec),
                "arch": self.arch, "lane": self.lane, "profile": self.profile, "generation": self.generation,
                "current": self.current, "resources": self.resources.as_dict(),
                "created_at": self.created_at.isoformat()}
