"""After a build: complete each generation the build ran to the end for.

    plan jobs, grouped by (arch, lane, family) ──> their generation (cache/generations.generation_of)
        │ one lookup_many over the group's keys
        ├─ every planned key holds an artifact or a recorded failure, and at least one artifact:
        │      complete -> store.complete_generation(generation): it now serves every spec it
        │      holds ahead of older generations (cache/generations.py)
        └─ otherwise (a timeout or a lost worker left keys unbuilt, or nothing built):
               it stays incomplete, so each of its specs that an older complete generation
               holds keeps being served from there

A partial build (--family, --where, --problems) completes its generation for the specs it
planned; every other spec keeps its served row, whatever generation that row is in.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke_aot.aot.builder.plan import Plan
from rocke_aot.cache.generations import generation_of


@dataclass(frozen=True)
class Completion:
    arch: str
    lane: str
    family: str
    generation: str
    completed: bool
    reason: str  # "completed", or why not


def complete_generations(plan: Plan, store) -> list[Completion]:
    groups: dict[tuple[str, str, str], list] = {}
    for job in [*plan.to_build, *plan.to_verify, *plan.cached, *(j for j, _ in plan.known_failures)]:
        groups.setdefault((job.target.id, job.lane.name, job.family), []).append(job)
    out = []
    for (arch, lane, fam), jobs in sorted(groups.items()):
        gen = generation_of(jobs[0].template.proto)
        hits = store.lookup_many([j.key for j in jobs])
        missing = sum(1 for j in jobs if j.key not in hits)
        built = sum(1 for h in hits.values() if h.ok)
        if missing or not built:
            why = f"{missing} planned specs have no artifact or recorded failure" if missing else "nothing built"
            out.append(Completion(arch, lane, fam, gen, False, why))
            continue
        store.complete_generation(gen)
        out.append(Completion(arch, lane, fam, gen, True, "completed"))
    return out
