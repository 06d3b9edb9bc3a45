"""Planning a build: variant tables -> keys -> one bulk lookup -> the misses to compile.

    arches x lanes x families
        │ lane without a usable toolchain ──────────────> Skip("llvm24: no toolchain on this host")
        │ variant table refuses (family, arch, lane) ───> Refusal(reason)   (never attempted)
        ▼
    enumerate_specs(family, arch, lane) -> Job(key = KeyTemplate(...).key(spec_json))   (no lowering;
                                           equal to artifact_key(KeyInputs(...)), tested)
        ▼
    store.lookup_many(all keys)   ONE bulk query
        ├── artifact present ───> cached
        ├── failure present  ───> known failure (retried only with force=True)
        └── absent ─────────────> to build

Keys need no lowering: every input (target ID, lane, profile, family, canonical
spec, the lowering code's digest, the toolchain identity) is known up front, so a
no-op rebuild is pure hashing plus one query.
"""

from __future__ import annotations

import functools
import gc
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from rocke_aot.lanes import LANES, Lane, get_lane
from rocke_aot.targets import Target
from rocke_aot.aot.toolchains.base import Toolchain
from rocke_aot.cache.keys import KeyInputs, KeyTemplate, canonical_json
from rocke_aot.errors import SpecError


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


@functools.lru_cache(maxsize=None)
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
    known_failures: list[tuple[Job, str]] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    toolchains: dict[str, Mapping[str, str]] = field(default_factory=dict)  # lane -> identity

    @property
    def planned(self) -> int:
        return len(self.to_build) + len(self.cached) + len(self.known_failures)


def choose_lanes(requested: Sequence[Lane], toolchains: Sequence[Toolchain]) -> tuple[dict[str, Toolchain], list[Skip]]:
    """lane -> the toolchain that builds it; requested lanes without one become named skips.

    No lanes requested: every qualified lane that has a toolchain here. A lane is
    never reported as built when nothing here can compile it.
    """
    usable: dict[str, Toolchain] = {}
    for tc in toolchains:
        info = tc.detect()
        if info.usable and info.lane not in usable:
            usable[info.lane] = tc
    wanted = [get_lane(lane) for lane in requested] or [lane for lane in LANES if lane.name in usable]
    chosen, skips = {}, []
    for lane in dict.fromkeys(wanted):
        if lane.name in usable:
            chosen[lane.name] = usable[lane.name]
        else:
            skips.append(Skip(lane.name, f"{lane.name}: no LLVM {lane.major} toolchain on this host"))
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
) -> Plan:
    """Plan a build. ``where`` keeps only specs whose fields equal the given values
    (e.g. ``{"path": "fma"}``); an unknown field is a SpecError, not an empty build."""
    from rocke_aot.aot.lower import lowering_digest
    from rocke_aot.variants import table

    all_families = table.family_names()
    for fam in families or ():
        if fam not in all_families:
            raise SpecError(f"unknown family {fam!r}; known: {', '.join(all_families)}")
    fams = list(families) if families else list(all_families)
    chosen, skips = choose_lanes(lanes, toolchains)
    plan = Plan(skipped=skips)
    digest = lowering_digest()
    jobs: list[Job] = []
    for lane_name, tc in chosen.items():
        lane = get_lane(lane_name)
        identity = tc.identity()
        plan.toolchains[lane.name] = identity
        tc_arches = set(tc.detect().arches)
        for target in arches:
            for fam in fams:
                adm = table.admission(fam, target.processor, lane)
                if not adm.served:
                    plan.refused.append(Refusal(fam, target.id, lane.name, adm.reason))
                    continue
                if target.processor not in tc_arches:
                    # The table serves it but this host's toolchain cannot target it: refuse
                    # on purpose rather than let LLVM ignore the processor and misbehave.
                    plan.refused.append(Refusal(fam, target.id, lane.name,
                                                f"the {lane.name} toolchain here does not know {target.processor}"))
                    continue
                tpl = KeyTemplate(target.id, lane.name, lane.profile_name, fam, digest, identity)
                key = tpl.key
                sjs = map(spec_json, table.enumerate_specs(fam, target.processor, lane))
                if where:
                    sjs = [sj for sj in sjs if _matches(fam, json.loads(sj), where)]
                jobs.extend(Job(key(sj), fam, sj, target, lane, tc, tpl) for sj in sjs)
    hits = store.lookup_many([j.key for j in jobs]) if jobs else {}
    for job in _dedupe(jobs):
        hit = hits.get(job.key)
        if hit is None:
            plan.to_build.append(job)
        elif hit.ok:
            plan.cached.append(job)
        elif force:
            plan.to_build.append(job)
        else:
            plan.known_failures.append((job, hit.error or "failed"))
    return plan


def _matches(family: str, spec: Mapping[str, Any], where: Mapping[str, Any]) -> bool:
    for field_name, want in where.items():
        if field_name not in spec:
            raise SpecError(f"--where {field_name}=...: family {family} specs have no field {field_name!r} "
                            f"(fields: {', '.join(sorted(spec))})")
        if spec[field_name] != want:
            return False
    return True


def parse_where(items: Sequence[str]) -> dict[str, Any]:
    """["path=fma", "block_m=64", "double_buffer=true"] -> {"path": "fma", "block_m": 64, ...}."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, raw = item.partition("=")
        if not sep or not name:
            raise SpecError(f"--where expects FIELD=VALUE, got {item!r}")
        try:
            out[name] = json.loads(raw)
        except json.JSONDecodeError:
            out[name] = raw
    return out


def _dedupe(jobs: Iterable[Job]) -> list[Job]:
    # The same arch given twice (or two grids producing one spec) must not compile twice.
    seen: dict[str, Job] = {}
    for job in jobs:
        seen.setdefault(job.key, job)
    return list(seen.values())
