"""Planning a build: variant tables -> keys -> one bulk lookup -> the misses to compile.

    arches x lanes x families
        │ lane without a usable toolchain ──────────────> Skip("llvm24: no LLVM 24 toolchain on this host ...")
        │ variant table refuses (family, arch, lane) ───> Refusal(reason)   (never attempted)
        │ toolchain_for(lane, arch) finds none ─────────> Refusal(its ToolchainError message; the
        │                                                  same chooser `rocke-aot compile` uses)
        ▼
    enumerate_specs(family, arch, lane), filtered by where_for(family, --where)  (typed from the
                                           spec dataclass; unknown field / bad value: SpecError)
        (build --problems: workload.specs(family, target, lane) instead: the default grid and
         each problem's own baked set x the knob grid, kept where they serve a problem
         (aot/builder/problems.py); Plan.layers says, per baked set, what was admitted and why not)
        -> Job(key = KeyTemplate(...).key(spec_json))   (no lowering;
                                           equal to artifact_key(KeyInputs(...)), tested)
        ▼
    store.lookup_many(all keys)   ONE bulk query
        ├── artifact present ───> cached (a row a build here made or verified), else
        │                         to verify: compiled again, compared (run.py; cache/provenance.py)
        ├── failure present  ───> known failure (retried only with force=True)
        └── absent ─────────────> to build (run.py lowers it; only a new IR is compiled)

Plan keys need no lowering: every input (target ID, lane, profile, family, canonical
spec, the recipe digest of the lowering/compile code (aot/recipe.py family_digest: a plugin
family's also covers the plugin's own packages), the toolchain identity, the compile
options) is known up front, so a no-op rebuild is pure hashing
plus one query. A plan miss costs a lowering; the compile is decided by the code-object
key (cache/keys.py), which the lowering's IR gives.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from rocke_aot.aot.recipe import family_digest
from rocke_aot.aot.toolchains import toolchain_for
from rocke_aot.aot.toolchains.base import Toolchain
from rocke_aot.cache.keys import KeyInputs, KeyTemplate, canonical_json
from rocke_aot.errors import PluginError, SpecError, ToolchainError
from rocke_aot.lanes import LANES, Lane
from rocke_aot.targets import Target
from rocke_aot.variants import families as family_registry


class Job(NamedTuple):
    """One spec to build for one (arch, lane). A NamedTuple, not a frozen dataclass: a no-op
    plan creates one per spec of the grid, and tuple creation is several times cheaper."""

    key: str
    family: str
    spec_json: str  # canonical JSON of the spec (what the key hashes)
    target: Target
    lane: Lane
    toolchain: Toolchain
    template: KeyTemplate

    @property
    def spec(self) -> dict[str, Any]:
        return json.loads(self.spec_json)

    @property
    def inputs(self) -> KeyInputs:
        # Built (and validated) only for jobs that get stored: a no-op plan never pays for it.
        return self.template.inputs(self.spec)

    @property
    def label(self) -> str:
        return f"{self.family}/{self.target.id}/{self.lane.name}"


@functools.cache
def spec_json(spec: Any) -> str:
    """cache.keys.canonical_json of a frozen spec, memoized: specs are immutable values from
    the tables, so each is checked and encoded once per process, not once per plan."""
    return canonical_json(spec.to_dict())


@dataclass(frozen=True)
class Refusal:
    family: str
    arch: str
    lane: str
    reason: str


@dataclass(frozen=True)
class Skip:
    lane: str
    reason: str


@dataclass
class Plan:
    to_build: list[Job] = field(default_factory=list)
    cached: list[Job] = field(default_factory=list)
    # stored, but not by a build here (published, imported, fetched, older than provenance):
    # compiled again and compared before it counts (run.py: verified, or replaced by the build's bytes)
    to_verify: list[Job] = field(default_factory=list)
    verify_sha: dict[str, str] = field(default_factory=dict)  # key -> the stored blob sha256
    verify_entered: dict[str, str] = field(default_factory=dict)  # key -> how the stored row entered
    known_failures: list[tuple[Job, str]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    toolchains: dict[str, Mapping[str, str]] = field(default_factory=dict)  # lane -> identity
    layers: list[Any] = field(default_factory=list)  # build --problems: LayerPlan per baked set (problems.py)
    force: bool = False  # retry recorded failures (the plan's and the compiler's refusals of an IR)

    @property
    def planned(self) -> int:
        return len(self.to_build) + len(self.to_verify) + len(self.cached) + len(self.known_failures)


def choose_lanes(requested: Sequence[Lane], toolchains: Sequence[Toolchain]) -> tuple[dict[str, Toolchain], list[Skip]]:
    """lane -> its first usable toolchain; requested lanes without one become named skips.

    No lanes requested: every qualified lane that has a toolchain here. A lane is
    never reported as built when nothing here can compile it. Which toolchain compiles
    each target is chosen per (lane, target) by ``toolchain_for``, as `rocke-aot compile` does.
    """
    pool = list(toolchains)
    wanted = list(requested) or list(LANES)
    chosen, skips = {}, []
    for lane in dict.fromkeys(wanted):
        try:
            chosen[lane.name] = toolchain_for(lane, None, pool, consumes=None)
        except ToolchainError as e:
            if requested:  # a lane nobody asked for is simply not built
                skips.append(Skip(lane.name, str(e)))
    return chosen, skips


def make_plan(**kwargs) -> Plan:
    """Plan a build (see ``_make_plan``), with the cyclic GC paused.

    A plan allocates a few small objects per spec and frees none of them until it returns;
    in a process with a large heap (a builder that has compiled, a service) the collector
    would otherwise walk that heap again and again while the plan runs: measured as the
    difference between 66,000 and 48,000 specs/s in bench/bench_build.py.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _make_plan(**kwargs)
    finally:
        if enabled:
            gc.enable()


def _make_plan(
    *,
    arches: Sequence[Target],
    families: Sequence[str] | None,
    lanes: Sequence[Lane],
    toolchains: Sequence[Toolchain],
    store,
    force: bool = False,
    where: Mapping[str, Any] | None = None,
    workload: Any = None,
) -> Plan:
    """Plan a build. ``where`` keeps only specs whose fields equal the given values
    (e.g. ``{"path": "fma", "block_m": "64"}``, typed per family by :func:`where_for`); an
    unknown field or a value of the wrong type is a SpecError, not an empty build.
    ``workload`` (aot/builder/problems.py Workload, from ``--problems``) replaces the tables'
    default grid by the specs serving its problems, its layers' own baked sets included."""
    from rocke_aot.variants import table

    all_families = table.family_names()
    for fam in families or ():
        family_registry.get_family(fam)  # unknown: SpecError; a plugin that failed to load: its PluginError
    fams = list(families) if families else list(all_families)
    chosen, skips = choose_lanes(lanes, toolchains)
    plan = Plan(skipped=skips, force=force)
    # Per family, memoized per process (a no-op plan stays pure hashing). A plugin family whose
    # lowerer cannot load is refused with its PluginError, named; the other families build.
    digests: dict[str, str] = {}
    broken: dict[str, str] = {}
    for fam in fams:
        try:
            digests[fam] = family_digest(fam)
        except PluginError as e:
            if families:  # asked for by name: the error itself
                raise
            broken[fam] = f"PluginError: {e}"
    jobs: list[Job] = []
    wants = {fam: where_for(fam, where) for fam in fams} if where else {}  # checked before any lane
    by_name = {lane.name: lane for lane in (lanes or LANES)}
    for lane_name, lane_tc in chosen.items():
        lane = by_name[lane_name]
        plan.toolchains[lane.name] = lane_tc.core_identity()  # each target's key adds its format's tools
        for target in arches:
            # The one chooser `rocke-aot compile` uses too: a toolchain of this lane that
            # knows the processor, or the reason none does (refused on purpose rather than
            # letting LLVM ignore an unknown processor and misbehave). A family's jobs get a
            # toolchain of the input it lowers to (LLVM IR, or a Triton compile request).
            chooser: dict[str, tuple] = {}

            def choose(consumes: str) -> tuple:
                if consumes not in chooser:
                    try:
                        tc = toolchain_for(lane, target, toolchains, consumes=consumes)
                        chooser[consumes] = (tc, None, tc.identity(target))
                    except ToolchainError as e:
                        chooser[consumes] = (None, str(e), None)
                return chooser[consumes]

            for fam in fams:
                if fam in broken:
                    plan.refused.append(Refusal(fam, target.id, lane.name, broken[fam]))
                    continue
                adm = table.admission(fam, target.processor, lane)
                if not adm.served:
                    plan.refused.append(Refusal(fam, target.id, lane.name, adm.reason))
                    continue
                spec_type = table_spec_type(fam)
                tc, no_tc, identity = choose(getattr(spec_type, "compile_input", "llvm-ir"))
                if tc is None:
                    plan.refused.append(Refusal(fam, target.id, lane.name, no_tc))
                    continue
                options = tc.compile_options(target)
                material = getattr(spec_type, "key_material", None)
                if material is not None:  # what the family's own code adds (a Triton kernel's sources)
                    options = {**options, "family": material()}
                tpl = KeyTemplate(target.id, lane.name, lane.profile_name, fam, digests[fam], identity, options)
                key = tpl.key
                if workload is not None:  # build --problems (aot/builder/problems.py)
                    specs, layers = workload.specs(fam, target, lane)
                    plan.layers.extend(layers)
                else:
                    specs = table.enumerate_specs(fam, target.processor, lane)
                sjs: Iterable[str] = map(spec_json, specs)
                if where:
                    sjs = [sj for sj in sjs if _matches(json.loads(sj), wants[fam])]
                jobs.extend(Job(key(sj), fam, sj, target, lane, tc, tpl) for sj in sjs)
    hits = store.lookup_many([j.key for j in jobs]) if jobs else {}
    # the few rows no build here made or verified (one query): a build never counts them as cached
    unverified = store.unverified() if any(h.ok for h in hits.values()) else {}
    for job in _dedupe(jobs):
        hit = hits.get(job.key)
        if hit is None:
            plan.to_build.append(job)
        elif hit.ok and job.key in unverified:
            plan.to_verify.append(job)
            plan.verify_sha[job.key] = hit.sha256
            plan.verify_entered[job.key] = unverified[job.key]
        elif hit.ok:
            plan.cached.append(job)
        elif force:
            plan.to_build.append(job)
        else:
            plan.known_failures.append((job, hit.error or "failed"))
    return plan


def table_spec_type(family: str) -> type:
    from rocke_aot.variants.families import get_family

    return get_family(family).spec_type


def _matches(spec: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    return all(spec[name] == value for name, value in want.items())


def parse_where(items: Sequence[str]) -> dict[str, str]:
    """["path=fma", "block_m=64"] -> {"path": "fma", "block_m": "64"}: syntax only.

    The values stay text here; :func:`where_for` types them per family from the spec
    dataclass (a family is known only once the plan runs). A field given twice is refused
    rather than silently keeping the last one.
    """
    out: dict[str, str] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise SpecError(f"--where expects FIELD=VALUE, got {item!r}")
        if name in out:
            raise SpecError(f"--where {name} given twice ({out[name]!r} and {raw!r}); give each field once")
        out[name] = raw
    return out


_BOOL_WORDS = {"true": True, "false": False, "True": True, "False": False}
_INT = re.compile(r"[+-]?[0-9]+")


def spec_field_types(family: str) -> dict[str, type]:
    """field name -> type, read from the family's spec dataclass annotations (never a hand list)."""
    from rocke_aot.aot.families import get_family

    cls = get_family(family).spec_type
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def where_for(family: str, where: Mapping[str, Any]) -> dict[str, Any]:
    """Type a ``--where`` filter for one family's specs, or refuse it (SpecError, exit 2).

    An unknown field is refused (naming the family's fields), and so is a value that does
    not parse as the field's annotated type: int fields take a decimal integer (``64``),
    bool fields ``true``/``false`` (JSON; Python's ``True``/``False`` are accepted too),
    str fields the text as given (or a JSON string, ``"fma"``). A value already typed (the
    library API) must have exactly the field's type: ``1`` is not a bool, ``64.0`` not an int.
    """
    types = spec_field_types(family)
    out: dict[str, Any] = {}
    for name, value in where.items():
        if name not in types:
            raise SpecError(f"--where {name}=...: family {family} specs have no field {name!r} "
                            f"(fields: {', '.join(sorted(types))}; narrow the families with --family)")
        out[name] = _typed(family, name, types[name], value)
    return out


def _typed(family: str, name: str, typ: type, value: Any) -> Any:
    accepted = {bool: "true or false", int: "an integer such as 64", str: "text such as fma"}.get(typ)
    if accepted is None:
        raise SpecError(f"--where {name}: family {family} field {name!r} has type {typ!r}, which --where cannot compare")
    problem = f"--where {name}={value!r}: family {family} field {name!r} is {typ.__name__}; give {accepted}"
    if not isinstance(value, str):
        if type(value) is not typ:
            raise SpecError(problem)
        return value
    if typ is bool:
        if value.strip() not in _BOOL_WORDS:
            raise SpecError(problem)
        return _BOOL_WORDS[value.strip()]
    if typ is int:
        if not _INT.fullmatch(value.strip()):
            raise SpecError(problem)
        return int(value)
    if value.startswith('"'):
        try:
            text = json.loads(value)
        except json.JSONDecodeError:
            raise SpecError(problem) from None
        if not isinstance(text, str):
            raise SpecError(problem)
        return text
    return value


def _dedupe(jobs: Iterable[Job]) -> list[Job]:
    # The same arch given twice (or two grids producing one spec) must not compile twice.
    seen: dict[str, Job] = {}
    for job in jobs:
        seen.setdefault(job.key, job)
    return list(seen.values())
