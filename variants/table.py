"""Variant tables: per family, the knob grid per (arch, lane) and an admission decision
for EVERY (arch, lane) pair.

    family table (variants/tables/*.py)
        .lane_decisions   {lane name: SERVE | Refuse(reason)}  one entry per registered lane,
                          on purpose: a new lane in the registry is "undecided" until each
                          family says SERVE or refuses it (check_complete() fails until then)
        .arch_rule(target, lane) -> reason | None   family-specific arch refusals
        .baked(target, lane)     -> [ {baked params}, ... ]      (dtype, filter, patch size)
        .knobs(baked, target, lane) -> {knob: (values...)}        (tuning grid)
        .make_spec(baked, knobs) -> spec     (raises SpecError/CapabilityError = not in grid)
        .check(spec, target)     -> None     (the spec's own arch checks: LDS, threads, tiles;
                                              and any grid rule of the table's own)

    admission(family, arch, lane)         -> Admission(served, reason)
        lane undecided?  -> refused "undecided" (and check_complete() names it)
        lane refused?    -> refused with the family's reason
        profile lacks target:<arch>       -> "LLVM 20 has no gfx1250 target"
        family arch rule                  -> its reason
    enumerate_specs(family, arch, lane)   -> Iterator[spec]   (AdmissionError when refused)
    path_admissions(family, arch, lane)   -> {path: Admission}  ("wmma needs gfx1250", ...)
    check_complete()                      -> [] or the list of holes (lane x family)

The lanes come only from the registry (``rocke_aot.lanes.LANES``), read at call time
through :func:`registered_lanes`, so a lane added there reaches every check here.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from rocke_aot import lanes as lane_registry
from rocke_aot.lanes import CAPABILITIES, Lane
from rocke_aot.variants import families as family_registry
from rocke_aot.targets import Target
from rocke_aot.errors import AdmissionError, CapabilityError, SpecError
from rocke_aot.arch import ARCHES

PATHS = ("mfma", "wmma", "mma", "fma")


@dataclass(frozen=True)
class Admission:
    served: bool
    reason: str  # why it is served ("served") or refused

    def __bool__(self) -> bool:
        return self.served


SERVED = Admission(True, "served")


@dataclass(frozen=True)
class Serve:
    """A lane decision: served, subject to the arch and capability rules."""

    note: str = ""


@dataclass(frozen=True)
class Refuse:
    """A lane decision: refused on purpose, for every arch, with this reason."""

    reason: str


SERVE = Serve()


@dataclass(frozen=True)
class FamilyTable:
    """One family's variant table. Pure data + pure functions; no lowering, no LLVM."""

    family: str
    lane_decisions: Mapping[str, Serve | Refuse]
    baked: Callable[[Target, Lane], Sequence[Mapping[str, Any]]]
    knobs: Callable[[Mapping[str, Any], Target, Lane], Mapping[str, Sequence[Any]]]
    make_spec: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
    check: Callable[[Any, Target], Any]  # raises SpecError/CapabilityError when the spec cannot run
    spec_from_dict: Callable[[Mapping[str, Any]], Any]
    arch_rule: Callable[[Target, Lane], str | None] = lambda target, lane: None
    paths: Callable[[Target, Lane], Sequence[str]] = lambda target, lane: ("fma",)
    # True: the family's own compiler decides which targets a lane builds (a Triton family:
    # its toolchain's probes), not the lane's emission profile (which only LLVM IR goes through)
    own_targets: bool = False


# -- the tables, from the family registry ---------------------------------------------------------------
# Each family's table is its Family's .table (variants/families.py); the functions below take
# the family's name and look it up there (family_names is the registry's own).
family_names = family_registry.family_names


def _table(family: object) -> FamilyTable:
    return family_registry.get_family(family).table


def registered_lanes() -> tuple[Lane, ...]:
    """The lane registry as this module sees it (read at call time, never copied)."""
    return tuple(lane_registry.LANES)


def _lane(value: object) -> Lane:
    # Resolve against the registry view above (not a private copy), so a lane added to
    # the registry is a lane here too. Names and Lane values are both accepted.
    for lane in registered_lanes():
        if value == lane.name or (isinstance(value, Lane) and value == lane and value.name == lane.name):
            return lane
    return lane_registry.get_lane(value)  # raises LaneError naming the qualified lanes


def _target(arch: object) -> Target:
    return Target.parse(arch)


# -- admission ---------------------------------------------------------------------------

def _lane_decision(table: FamilyTable, lane: Lane) -> Serve | Refuse | None:
    return table.lane_decisions.get(lane.name)


def target_admission(target: Target, lane: Lane) -> Admission:
    """Does the lane's emission profile know this processor at all?"""
    cap = f"target:{target.processor}"
    if cap not in CAPABILITIES or not lane.profile.has(cap):
        return Admission(False, f"LLVM {lane.major} ({lane.name}) has no {target.processor} target")
    return SERVED


def admission(family: str, arch: object, lane: object) -> Admission:
    """Served, or refused with the reason; decided without lowering or LLVM."""
    table = _table(family)
    target, lane = _target(arch), _lane(lane)
    decision = _lane_decision(table, lane)
    if decision is None:
        return Admission(False, f"undecided: family {family} has no decision for lane {lane.name} "
                                f"(add SERVE or Refuse(reason) to its lane_decisions)")
    if isinstance(decision, Refuse):
        return Admission(False, decision.reason)
    adm = SERVED if table.own_targets else target_admission(target, lane)
    if not adm.served:
        return adm
    reason = table.arch_rule(target, lane)
    if reason:
        return Admission(False, reason)
    return SERVED


def require_admitted(family: str, arch: object, lane: object) -> None:
    """Raise AdmissionError (with the reason) unless (family, arch, lane) is served."""
    adm = admission(family, arch, lane)
    if not adm.served:
        raise AdmissionError(f"{family} is not served for {_target(arch).id} on {_lane(lane).name}: "
                             f"{adm.reason}", reason=adm.reason)


def path_admission(target: Target, lane: Lane, path: str) -> Admission:
    """Which matrix path an (arch, lane) offers: fma everywhere, mfma on gfx9, wmma on gfx1250,
    mma (mma.sync) on sm_90."""
    unit = target.info.matrix_unit
    if path == "fma":
        return SERVED
    if path == "mfma":
        if unit != "mfma":
            return Admission(False, f"mfma needs a gfx9 MFMA arch (gfx90a, gfx942, gfx950); "
                                    f"{target.processor} has {unit or 'no matrix unit wired'}")
        if not lane.profile.has("mfma:f16"):
            return Admission(False, f"LLVM {lane.major} ({lane.name}) has no MFMA f16 intrinsics")
        return SERVED
    if path == "wmma":
        if unit != "wmma":
            return Admission(False, f"wmma needs gfx1250; {target.processor} has "
                                    f"{unit or 'no matrix unit wired'}")
        if not lane.profile.has("wmma:gfx1250"):
            return Admission(False, f"LLVM {lane.major} ({lane.name}) has no gfx1250 WMMA")
        return SERVED
    if path == "mma":
        if unit != "mma":
            return Admission(False, f"mma (NVPTX mma.sync) needs sm_90; {target.processor} has "
                                    f"{unit or 'no matrix unit wired'}")
        if not lane.profile.has("mma:sm_90"):
            return Admission(False, f"LLVM {lane.major} ({lane.name}) has no NVPTX mma.sync")
        return SERVED
    raise SpecError(f"unknown path {path!r}; paths: {', '.join(PATHS)}")


def path_admissions(family: str, arch: object, lane: object) -> dict[str, Admission]:
    """Per path of the family: served or refused with the reason (for the CLI and reports)."""
    table = _table(family)
    target, lane = _target(arch), _lane(lane)
    offered = set(table.paths(target, lane))
    out = {}
    for path in PATHS:
        adm = path_admission(target, lane, path)
        if adm.served and path not in offered:
            adm = Admission(False, f"{family} has no {path} path")
        out[path] = adm
    return out


# -- enumeration ---------------------------------------------------------------------------

def enumerate_specs(family: str, arch: object, lane: object) -> Iterator[Any]:
    """Every spec of the family's grid for (arch, lane), in a deterministic order.

    Raises AdmissionError when the combination is refused (with its reason): a caller
    never gets an empty iterator for a refusal.
    """
    require_admitted(family, arch, lane)
    target, lane = _target(arch), _lane(lane)
    return iter(_specs(family, target.processor, lane.name, lane.major))


@functools.lru_cache(maxsize=None)
def _specs(family: str, processor: str, lane_name: str, major: int) -> tuple[Any, ...]:
    # Cached per (family, processor, lane): planning a no-op rebuild enumerates the same
    # grid many times, and specs are frozen values. The major is part of the cache key so
    # a monkeypatched registry lane with the same name cannot alias a real one.
    table = _table(family)
    target, lane = Target.parse(processor), _lane(lane_name)
    paths = tuple(p for p in table.paths(target, lane) if path_admission(target, lane, p).served)
    out, seen = [], set()
    for baked in table.baked(target, lane):
        grid = dict(table.knobs(baked, target, lane))
        grid["path"] = tuple(p for p in grid.get("path", paths) if p in paths)
        names = sorted(grid)
        for values in itertools.product(*(grid[n] for n in names)):
            try:
                spec = table.make_spec(baked, dict(zip(names, values)))
                table.check(spec, target)
            except (SpecError, CapabilityError):
                continue  # not a point of the grid on this arch (tile, LDS or thread limits)
            if spec not in seen:
                seen.add(spec)
                out.append(spec)
    return tuple(out)


def count_specs(family: str, arch: object, lane: object) -> int:
    adm = admission(family, arch, lane)
    if not adm.served:
        return 0
    target, lane = _target(arch), _lane(lane)
    return len(_specs(family, target.processor, lane.name, lane.major))


def spec_from_dict(family: str, d: Mapping[str, Any]) -> Any:
    return _table(family).spec_from_dict(dict(d))


# -- completeness ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Hole:
    family: str
    lane: str
    problem: str

    def __str__(self) -> str:
        return f"{self.family} / {self.lane}: {self.problem}"


def check_complete() -> list[Hole]:
    """Every (family, arch, lane) must be served with at least one spec, or refused on
    purpose. Returns the holes: lanes a family has no decision for, decisions naming a
    lane the registry does not hold, and served combinations with an empty grid."""
    holes = []
    lanes = registered_lanes()
    names = {lane.name for lane in lanes}
    for family in family_names():
        table = _table(family)
        for lane in lanes:
            if lane.name not in table.lane_decisions:
                holes.append(Hole(family, lane.name, "neither served nor refused on purpose"))
        for stale in sorted(set(table.lane_decisions) - names):
            holes.append(Hole(family, stale, "decision for a lane the registry does not hold"))
        for lane in lanes:
            if lane.name not in table.lane_decisions:
                continue
            for processor in ARCHES:
                if admission(family, processor, lane).served and count_specs(family, processor, lane) == 0:
                    holes.append(Hole(family, lane.name, f"served on {processor} with an empty grid"))
    return holes


# -- reports (CLI, service) ------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    family: str
    arch: str
    lane: str
    served: bool
    count: int
    reason: str
    paths: Mapping[str, str]  # path -> "served" or the refusal reason
    # whether a measured characterization backs a served row: "characterized", "unvalidated"
    # or "contradicted" (filled by the CLI from aot/characterize.py; this layer cannot measure)
    backing: str = ""
    backing_detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "arch": self.arch, "lane": self.lane, "served": self.served,
                "count": self.count, "reason": self.reason, "paths": dict(self.paths),
                "backing": self.backing, "backing_detail": self.backing_detail}


def report(families: Sequence[str] | None = None, arches: Sequence[object] | None = None,
           lanes: Sequence[object] | None = None) -> list[Row]:
    """One row per (family, arch, lane): count of specs, or the refusal reason."""
    fams = [_table(f).family for f in families] if families else list(family_names())
    targets = [_target(a) for a in arches] if arches else [Target.parse(p) for p in ARCHES]
    lane_list = [_lane(lane) for lane in lanes] if lanes else list(registered_lanes())
    rows = []
    for fam in fams:
        for target in targets:
            for lane in lane_list:
                adm = admission(fam, target, lane)
                paths = {p: a.reason for p, a in path_admissions(fam, target, lane).items()} if adm.served else {}
                rows.append(Row(fam, target.id, lane.name, adm.served,
                                count_specs(fam, target, lane) if adm.served else 0, adm.reason, paths))
    return rows


__all__ = [
    "Admission", "SERVE", "Serve", "Refuse", "FamilyTable", "Hole", "Row", "PATHS",
    "admission", "require_admitted", "enumerate_specs", "count_specs", "path_admission",
    "path_admissions", "family_names", "registered_lanes", "check_complete",
    "report", "spec_from_dict", "target_admission",
]
