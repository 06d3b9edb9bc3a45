"""After a build: move each (arch, lane) ref to the generation this build completed.

    plan jobs, grouped by (arch, lane) ──> their generation (cache/generations.generation_of)
        │ one lookup_many over the pair's keys
        ├─ every key holds an artifact or a recorded failure, and at least one artifact:
        │      the generation is complete -> store.move_ref(arch, lane, generation)
        └─ otherwise (a timeout or a lost worker left keys unbuilt, or nothing built):
               the ref stays where it was, so select keeps serving the last complete build

A partial build (--family, --where, --problems) completes the generation for the specs it
planned; moving the ref then serves only those (documented in docs/selection.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke_aot.aot.builder.plan import Plan
from rocke_aot.cache.generations import generation_of


@dataclass(frozen=True)
class RefMove:
    arch: str
    lane: str
    generation: str
    previous: str | None
    moved: bool
    reason: str  # "moved", "already current", or why it stayed


def move_refs(plan: Plan, store) -> list[RefMove]:
    pairs: dict[tuple[str, str], list] = {}
    for job in [*plan.to_build, *plan.cached, *(j for j, _ in plan.known_failures)]:
        pairs.setdefault((job.target.id, job.lane.name), []).append(job)
    out = []
    for (arch, lane), jobs in sorted(pairs.items()):
        gen = generation_of(jobs[0].template.proto)
        hits = store.lookup_many([j.key for j in jobs])
        missing = sum(1 for j in jobs if j.key not in hits)
        built = sum(1 for h in hits.values() if h.ok)
        if missing or not built:
            why = f"{missing} planned specs have no artifact or recorded failure" if missing else "nothing built"
            out.append(RefMove(arch, lane, gen, store.current_generation(arch, lane), False, why))
            continue
        prev = store.move_ref(arch, lane, gen)
        out.append(RefMove(arch, lane, gen, prev, prev != gen, "moved" if prev != gen else "already current"))
    return out
