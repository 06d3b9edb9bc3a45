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
        .lane_check(spec, target, lane) -> None  (a spec refused on one lane by name, with the
                                              measured reason: conv_dgrad_patch's llvm23 spills)
        .baked_for(problem)      -> {baked params} | None   the baked set a problem needs
                                              (build --problems: a layer's own grid)

    admission(family, arch, lane)         -> Admission(served, reason)
        lane undecided?  -> refused "undecided" (and check_complete() names it)
        lane refused?    -> refused with the family's reason
        profile lacks target:<arch>       -> "LLVM 20 has no gfx1250 target"
        family arch rule                  -> its reason
    enumerate_specs(family, arch, lane)   -> Iterator[spec]   (AdmissionError when refused)
    path_admissions(family, arch, lane)   -> {path: Admission}  ("wmma needs gfx1250", ...)
    check_complete()                      -> [] or the list of holes (lane x family)
    FamilyTable.audit(spec_type) / audit_table(...)   -> [] or sentences: what the registry's
                                          install refuses (a refusal without a reason, a served
                                          (arch, lane) with an empty grid, a table function raising
                                          anything but SpecError/CapabilityError, specs that do not
                                          round-trip); the grid part runs for a plugin's family

    workload-driven grids (``rocke-aot build --problems``; the default lists stay the main job's):
    problem_baked(family, problem)        -> the baked set the problem needs (table.baked_for), or None
    layer_grid(family, arch, lane, baked) -> LayerGrid: that baked set x the same knob grid, every
                                             point admitted (a spec) or refused with the reason
                                             the default enumeration drops it for (one code path)
    layer_points(family, arch, lane, baked) -> the same points one by one, uncached (select)
    workload_specs(family, arch, lane, problems) -> (specs, [LayerGrid])  the default grid, then
                                             each problem's baked set not in the default list

The lanes come only from the registry (``rocke_aot.lanes.LANES``), read at call time
through :func:`registered_lanes`, so a lane added there reaches every check here.
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rocke_aot import lanes as lane_registry
from rocke_aot.arch import ARCHES
from rocke_aot.errors import AdmissionError, CapabilityError, PluginError, SpecError
from rocke_aot.lanes import CAPABILITIES, Lane
from rocke_aot.launch import LaunchFormulas
from rocke_aot.targets import Target
from rocke_aot.variants import families as family_registry

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
    # The baked parameters a problem needs (a conv layer's dtype, channels, filter, stride,
    # padding, dilation); None where the default list decides (no problem-driven grid).
    baked_for: Callable[[Any], Mapping[str, Any] | None] | None = None
    # True: the family's own compiler decides which targets a lane builds (a Triton family:
    # its toolchain's probes), not the lane's emission profile (which only LLVM IR goes through)
    own_targets: bool = False
    # Per lane, a spec refused by name on that lane only (SpecError with the measured reason): a
    # point one lane's compiler builds badly (conv_dgrad_patch's VGPR spills on AMD's LLVM 23).
    lane_check: Callable[[Any, Target, Lane], Any] = lambda spec, target, lane: None

    def audit(self, spec_type: type, *, grid: bool = True, limit: int = 5) -> list[str]:
        """What is wrong with this table, as sentences (empty: nothing). The registry runs it on
        every family it installs (variants/families.py install); ``grid`` also enumerates every
        (arch, lane) (a plugin's: the built-in grids are checked by check_complete in the tests).
        See :func:`audit_table`."""
        return audit_table(self, spec_type, grid=grid, limit=limit)


# -- the tables, from the family registry ---------------------------------------------------------------
# Each family's table is its Family's .table (variants/families.py); the functions below take
# the family's name and look it up there (family_names is the registry's own).
family_names = family_registry.family_names


def family_table(family: object) -> FamilyTable:
    """The registered family's variant table (its Family's .table)."""
    table = family_registry.get_family(family).table
    if not isinstance(table, FamilyTable):  # install() admits none (audit_table refuses it): fail closed
        raise PluginError(f"family {family}: its table is a {type(table).__name__}, not a FamilyTable")
    return table


def registered_lanes() -> tuple[Lane, ...]:
    """The lane registry as this module sees it (read at call time, never copied)."""
    return tuple(lane_registry.LANES)


def lane_of(value: object) -> Lane:
    # Resolve against the registry view above (not a private copy), so a lane added to
    # the registry is a lane here too. Names and Lane values are both accepted.
    for lane in registered_lanes():
        if value == lane.name or (isinstance(value, Lane) and value == lane and value.name == lane.name):
            return lane
    return lane_registry.get_lane(value)  # raises LaneError naming the qualified lanes


def _target(arch: Target | str) -> Target:
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


def admission(family: str, arch: Target | str, lane: Lane | str) -> Admission:
    """Served, or refused with the reason; decided without lowering or LLVM."""
    return _admission(family_table(family), _target(arch), lane_of(lane))


def _admission(table: FamilyTable, target: Target, lane: Lane) -> Admission:
    family = table.family
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


def require_admitted(family: str, arch: Target | str, lane: Lane | str) -> None:
    """Raise AdmissionError (with the reason) unless (family, arch, lane) is served."""
    adm = admission(family, arch, lane)
    if not adm.served:
        raise AdmissionError(f"{family} is not served for {_target(arch).id} on {lane_of(lane).name}: "
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


def served_paths(table: FamilyTable, target: Target, lane: Lane) -> tuple[str, ...]:
    return tuple(p for p in table.paths(target, lane) if path_admission(target, lane, p).served)


def path_admissions(family: str, arch: Target | str, lane: Lane | str) -> dict[str, Admission]:
    """Per path of the family: served or refused with the reason (for the CLI and reports)."""
    table = family_table(family)
    target, lane = _target(arch), lane_of(lane)
    offered = set(table.paths(target, lane))
    out = {}
    for path in PATHS:
        adm = path_admission(target, lane, path)
        if adm.served and path not in offered:
            adm = Admission(False, f"{family} has no {path} path")
        out[path] = adm
    return out


# -- enumeration ---------------------------------------------------------------------------

def enumerate_specs(family: str, arch: Target | str, lane: Lane | str) -> Iterator[Any]:
    """Every spec of the family's grid for (arch, lane), in a deterministic order.

    Raises AdmissionError when the combination is refused (with its reason): a caller
    never gets an empty iterator for a refusal.
    """
    require_admitted(family, arch, lane)
    target, lane = _target(arch), lane_of(lane)
    return iter(_specs(family, target.processor, lane.name, lane.major))


@functools.cache
def _specs(family: str, processor: str, lane_name: str, major: int) -> tuple[Any, ...]:
    # Cached per (family, processor, lane): planning a no-op rebuild enumerates the same
    # grid many times, and specs are frozen values. The major is part of the cache key so
    # a monkeypatched registry lane with the same name cannot alias a real one.
    return _enumerate(family_table(family), Target(processor), lane_of(lane_name))  # a bare processor, validated by the caller


def _points(table: FamilyTable, target: Target, lane: Lane,
            baked_sets: Sequence[Mapping[str, Any]] | None = None) -> Iterator[tuple[Mapping[str, Any], dict[str, Any]]]:
    """(baked, knobs) of every point of the product, "path" among the knobs (the served paths);
    over the table's default baked list, or over ``baked_sets`` (a workload's layers: layer_grid)."""
    paths = served_paths(table, target, lane)
    for baked in table.baked(target, lane) if baked_sets is None else baked_sets:
        grid = dict(table.knobs(baked, target, lane))
        grid["path"] = tuple(p for p in grid.get("path", paths) if p in paths)
        names = sorted(grid)
        for values in itertools.product(*(grid[n] for n in names)):
            yield baked, dict(zip(names, values))


def _admit(table: FamilyTable, target: Target, baked: Mapping[str, Any], knobs: Mapping[str, Any],
           lane: Lane) -> tuple[Any, str]:
    """(spec, "admitted"), or (None, why) when the point is not in the grid on this arch (the
    spec's own checks or a grid rule of the table: tile, LDS or thread limits). The one place a
    point is admitted: the default enumeration and the workload-driven grids (layer_grid) both
    ask it, so a layer's specs pass the same checks and a refused point says the same reason."""
    try:
        spec = table.make_spec(baked, knobs)
        table.check(spec, target)
        table.lane_check(spec, target, lane)
    except (SpecError, CapabilityError) as e:
        return None, str(e)
    return spec, "admitted"


def _enumerate(table: FamilyTable, target: Target, lane: Lane) -> tuple[Any, ...]:
    out, seen = [], set()
    for baked, knobs in _points(table, target, lane):
        spec, _ = _admit(table, target, baked, knobs, lane)
        if spec is not None and spec not in seen:
            seen.add(spec)
            out.append(spec)
    return tuple(out)


# -- workload-driven grids (build --problems) ---------------------------------------------------

@dataclass(frozen=True)
class LayerGrid:
    """One baked parameter set (a model's layer) crossed with its family's knob grid on one
    (arch, lane): the admitted specs, and every refused point's reason with its count."""

    family: str
    arch: str  # the processor
    lane: str
    baked: Mapping[str, Any]
    default: bool  # the table's default list holds this baked set (its specs are the main job's)
    specs: tuple[Any, ...]  # admitted, in the grid's order
    refused: tuple[tuple[str, int], ...]  # (reason, points), most points first
    reason: str = ""  # the whole set refused before any point: the (arch, lane) admission, or the
                      # baked set itself (a patch size the family has no kernel for)

    @property
    def points(self) -> int:
        return len(self.specs) + sum(n for _, n in self.refused)

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "arch": self.arch, "lane": self.lane, "baked": dict(self.baked),
                "default": self.default, "admitted": len(self.specs), "points": self.points,
                "refused": [{"reason": r, "count": n} for r, n in self.refused], "reason": self.reason}


def problem_baked(family: str, problem: Any) -> dict[str, Any] | None:
    """The baked parameters ``problem`` needs from a spec of ``family`` (its table's baked_for),
    or None where the family has no problem-driven grid (its default list decides)."""
    fn = family_table(family).baked_for
    if fn is None:
        return None
    got = fn(problem)
    return None if got is None else dict(got)


def layer_grid(family: str, arch: Target | str, lane: Lane | str, baked: Mapping[str, Any]) -> LayerGrid:
    """``baked`` crossed with the family's knob grid on (arch, lane), every point admitted or
    refused by the rules the default enumeration applies (never an AdmissionError: a refused
    (arch, lane) is the grid's ``reason``)."""
    target, lane = _target(arch), lane_of(lane)
    return _layer_grid(family, target.processor, lane.name, lane.major, tuple(sorted(dict(baked).items())))


def layer_points(family: str, arch: Target | str, lane: Lane | str, baked: Mapping[str, Any]) -> Iterator[tuple[Any, str]]:
    """(spec, "admitted") or (None, why) for every point of ``baked`` x the family's knob grid on
    (arch, lane), in the grid's order, uncached (a select's no-candidate answer walks it until a
    spec runs its problem: a server keeps nothing per problem). The (arch, lane) must be served
    (``admission``)."""
    table, target, lane = family_table(family), _target(arch), lane_of(lane)
    for b, knobs in _points(table, target, lane, (dict(baked),)):
        yield _admit(table, target, b, knobs, lane)


@functools.lru_cache(maxsize=256)  # a build asks once per (family, arch, lane, layer); ~12 KB each
def _layer_grid(family: str, processor: str, lane_name: str, major: int,
                baked_items: tuple[tuple[str, Any], ...]) -> LayerGrid:
    table = family_table(family)
    target, lane = Target(processor), lane_of(lane_name)  # a bare processor, validated by the caller
    baked = dict(baked_items)
    default = any(dict(b) == baked for b in table.baked(target, lane))
    adm = admission(family, target, lane)
    if not adm.served:
        return LayerGrid(family, processor, lane.name, baked, default, (), (), adm.reason)
    specs: list[Any] = []
    seen: set[Any] = set()
    why: dict[str, int] = {}
    for spec, reason in layer_points(family, target, lane, baked):
        if spec is None:
            why[reason] = why.get(reason, 0) + 1
        elif spec not in seen:
            seen.add(spec)
            specs.append(spec)
    refused = tuple(sorted(why.items(), key=lambda kv: (-kv[1], kv[0])))
    return LayerGrid(family, processor, lane.name, baked, default, tuple(specs), refused, layer_reason(specs, refused))


def layer_reason(specs: Sequence[Any], refused: Sequence[tuple[str, int]]) -> str:
    """The whole layer's reason: every point refused for the one same reason (a patch size the
    family has no kernel for), else none ("")."""
    return refused[0][0] if not specs and len(refused) == 1 else ""


def workload_specs(family: str, arch: Target | str, lane: Lane | str,
                   problems: Sequence[Any]) -> tuple[tuple[Any, ...], tuple[LayerGrid, ...]]:
    """The specs ``build --problems`` may plan for (family, arch, lane): the default grid, then
    the admitted specs of every problem's baked set (in problem order, each set once) that
    the default list lacks; and one LayerGrid per distinct baked set the problems need.
    Which of them serve a problem (acceptance, the efficiency floor) the caller decides
    (variants/selection.py specs_serving). A baked set already in the default list adds no
    spec: its specs are the default grid's, so their keys are the main job's."""
    require_admitted(family, arch, lane)
    target, lane = _target(arch), lane_of(lane)
    specs = list(_specs(family, target.processor, lane.name, lane.major))
    seen = set(specs)
    layers: list[LayerGrid] = []
    done: set[tuple] = set()
    for p in problems:
        baked = problem_baked(family, p)
        if baked is None:
            continue
        items = tuple(sorted(baked.items()))
        if items in done:
            continue
        done.add(items)
        grid = _layer_grid(family, target.processor, lane.name, lane.major, items)
        layers.append(grid)
        for spec in grid.specs:
            if spec not in seen:
                seen.add(spec)
                specs.append(spec)
    return tuple(specs), tuple(layers)


def count_specs(family: str, arch: Target | str, lane: Lane | str) -> int:
    adm = admission(family, arch, lane)
    if not adm.served:
        return 0
    target, lane = _target(arch), lane_of(lane)
    return len(_specs(family, target.processor, lane.name, lane.major))


def spec_from_dict(family: str, d: Mapping[str, Any]) -> Any:
    return family_table(family).spec_from_dict(dict(d))


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
        table = family_table(family)
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


# -- audit (what the registry checks when it installs a family) --------------------------------

_SPEC_PROTOCOL = ("to_dict", "from_dict", "kernel_name", "geometry", "launch_formulas")


def _call(problems: list[str], where: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), or None with a sentence in ``problems`` when it raises anything."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - a plugin's code: any exception is a finding
        problems.append(f"{where} raised {type(e).__name__}: {e}")
        return None


def audit_table(table: FamilyTable, spec_type: type, *, grid: bool = True, limit: int = 5) -> list[str]:
    """The sentences saying what is wrong with ``table`` (at most ``limit`` of them).

    Always (cheap; every family the registry installs):
      - each lane decision is SERVE/Serve(note) or Refuse(reason) with a non-empty reason,
        keyed by lane name (a registered lane without a decision is not a finding here: it
        is refused as "undecided" with that reason, and check_complete names it a hole)
      - spec_from_dict, baked, knobs, make_spec, check, arch_rule and paths are callable
    With ``grid`` (a plugin's family), for every wired arch x every decided lane:
      - the arch rule returns None or a non-empty reason; ``paths`` returns known paths
      - a served (arch, lane) has at least one spec: an empty grid refuses without a reason
      - baked/knobs/make_spec/check raise nothing but SpecError/CapabilityError (a point
        that is not in the grid); each spec is a ``spec_type``, its to_dict() is JSON and
        round-trips through spec_from_dict, its kernel_name is a string, its geometry has
        threads within the arch's block size and its launch_formulas() are LaunchFormulas
    """
    problems: list[str] = []
    if not isinstance(table, FamilyTable):
        return [f"its table is a {type(table).__name__}, not a rocke_aot.variants.table.FamilyTable"]
    missing = [n for n in _SPEC_PROTOCOL if not hasattr(spec_type, n)]
    if missing:
        problems.append(f"its spec type {spec_type.__name__} lacks {', '.join(missing)}")
    for name in ("baked", "knobs", "make_spec", "check", "spec_from_dict", "arch_rule", "paths"):
        if not callable(getattr(table, name)):
            problems.append(f"its table's {name} is not callable")
    if table.baked_for is not None and not callable(table.baked_for):
        problems.append("its table's baked_for is neither None nor callable")
    if not isinstance(table.lane_decisions, Mapping):
        problems.append("its table's lane_decisions is not a mapping of lane name -> SERVE | Refuse(reason)")
        return problems
    for lane_name, decision in table.lane_decisions.items():
        if isinstance(decision, Refuse):
            if not isinstance(decision.reason, str) or not decision.reason.strip():
                problems.append(f"lane {lane_name!r} is refused without a reason (Refuse(reason) needs one)")
        elif not isinstance(decision, Serve):
            problems.append(f"lane {lane_name!r}: the decision is a {type(decision).__name__}, "
                            f"not SERVE, Serve(note) or Refuse(reason)")
    if problems or not grid:
        return problems[:limit]
    lanes = [lane for lane in registered_lanes() if lane.name in table.lane_decisions]
    for processor in ARCHES:
        target = Target(processor)  # the registry's bare processors
        for lane in lanes:
            where = f"{processor}/{lane.name}"
            if len(problems) >= limit:
                return problems[:limit]
            if isinstance(_lane_decision(table, lane), Refuse) or not target_admission(target, lane).served:
                continue
            reason = _call(problems, f"{where}: arch_rule", table.arch_rule, target, lane)
            if reason is not None and (not isinstance(reason, str)):
                problems.append(f"{where}: arch_rule returned a {type(reason).__name__}, not None or a reason")
                continue
            if reason:
                continue  # refused for this arch, with its reason
            paths = _call(problems, f"{where}: paths", table.paths, target, lane)
            if paths is None:
                continue
            unknown = [p for p in paths if p not in PATHS]
            if isinstance(paths, str) or unknown:
                problems.append(f"{where}: paths returned {paths!r}; a path is one of {', '.join(PATHS)}")
                continue
            problems += _audit_grid(table, spec_type, target, lane, where)
    return problems[:limit]


def _audit_grid(table: FamilyTable, spec_type: type, target: Target, lane: Lane, where: str) -> list[str]:
    problems: list[str] = []
    specs: list[Any] = []  # a plugin's specs: the duck type _SPEC_PROTOCOL names, checked above
    try:
        points = list(_points(table, target, lane))
    except Exception as e:  # noqa: BLE001 - baked/knobs of a plugin
        return [f"{where}: enumerating the grid (baked, knobs) raised {type(e).__name__}: {e}"]
    for baked, knobs in points:
        try:
            spec = table.make_spec(baked, knobs)
            table.check(spec, target)
            table.lane_check(spec, target, lane)
        except (SpecError, CapabilityError):
            continue
        except Exception as e:  # noqa: BLE001
            return [f"{where}: make_spec/check of {dict(baked)} {knobs} raised {type(e).__name__}: {e} "
                    f"(a point not in the grid raises SpecError or CapabilityError)"]
        if type(spec) is not spec_type:
            return [f"{where}: make_spec returned a {type(spec).__name__}, not the family's {spec_type.__name__}"]
        specs.append(spec)
    if not specs:
        return [f"{where}: served with an empty grid: no spec passes make_spec and check, so the "
                f"combination is refused without a reason (Refuse(reason) in lane_decisions, or arch_rule)"]
    for spec in specs:
        got = _call(problems, f"{where}: {spec_type.__name__}.to_dict", spec.to_dict)
        if got is None:
            break
        try:
            back = table.spec_from_dict(json.loads(json.dumps(got, sort_keys=True, allow_nan=False)))
        except Exception as e:  # noqa: BLE001
            problems.append(f"{where}: {got} does not round-trip through JSON and spec_from_dict "
                            f"({type(e).__name__}: {e})")
            break
        if back != spec:
            problems.append(f"{where}: spec_from_dict(to_dict()) gives {back!r}, not the spec {spec!r}")
            break
        if not isinstance(spec.kernel_name, str) or not spec.kernel_name:
            problems.append(f"{where}: kernel_name of {got} is not a non-empty string")
            break
        geo = _call(problems, f"{where}: geometry of {got}", spec.geometry, target)
        threads = getattr(geo, "threads", None)
        if geo is not None and (not isinstance(threads, int) or not 1 <= threads <= target.info.max_block):
            problems.append(f"{where}: geometry of {got} has threads {threads!r}, not 1..{target.info.max_block}")
        lf = _call(problems, f"{where}: launch_formulas of {got}", spec.launch_formulas)
        if lf is not None and not isinstance(lf, LaunchFormulas):
            problems.append(f"{where}: launch_formulas() of {got} is a {type(lf).__name__}, not LaunchFormulas")
        if problems:
            break
    return problems


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


def report(families: Sequence[str] | None = None, arches: Sequence[Target | str] | None = None,
           lanes: Sequence[object] | None = None) -> list[Row]:
    """One row per (family, arch, lane): count of specs, or the refusal reason."""
    fams = [family_table(f).family for f in families] if families else list(family_names())
    targets = [_target(a) for a in arches] if arches else [Target(p) for p in ARCHES]
    lane_list = [lane_of(lane) for lane in lanes] if lanes else list(registered_lanes())
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
    "report", "spec_from_dict", "target_admission", "audit_table", "LayerGrid", "problem_baked", "layer_grid",
    "layer_points", "layer_reason", "workload_specs",
]
