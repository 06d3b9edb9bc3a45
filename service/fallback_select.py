"""A stand-in for issue 11's shared ``select()`` until ``service/selection.py`` lands.

    store.find(family) ── artifacts of the target's processor (exact ID or the bare
        │                 processor, the generic build) and of the requested lanes
        ▼
    variants.efficiency.rank(specs, problem, target, min_efficiency)
        ▼
    equal specs: the newest lane wins, the others are rejected ("other lane preferred")
        ▼
    (accepted best first [:limit], rejected with reasons), as plain dicts

Kept deliberately small: ``access.select`` imports the shared helper first, so this file
is deleted once that exists. No generations, no full target-ID compatibility rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.cache.keys import thaw
from rocke_aot.variants import efficiency, table
from rocke_aot.variants.problems import problem_from_dict

from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

RESOURCE_FIELDS = ("vgpr_count", "sgpr_count", "agpr_count", "vgpr_spill_count", "sgpr_spill_count",
                   "lds_bytes", "private_segment_bytes", "wavefront_size", "max_flat_workgroup_size")


def resources(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Code-object resources recorded at build time (aot/codeobject.py CodeObjectInfo)."""
    co = metadata.get("code_object") or {}
    return {f: co.get(f) for f in RESOURCE_FIELDS if co.get(f) is not None}


def select(store, target, family: str, problem, *, lanes=None, min_efficiency=None,
           limit=None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(accepted best first, rejected), each a plain dict (the shape access.select returns)."""
    target = Target.parse(target)
    table.get_table(family)
    wanted = {get_lane(l, source="lanes").name for l in lanes} if lanes else None
    if isinstance(problem, Mapping):
        problem = problem_from_dict(family, dict(problem))
    arts = [a for a in store.find(family=family) if a.arch in (target.id, target.processor)]
    rejected: list[dict[str, Any]] = []
    specs, by_spec = [], {}
    for a in arts:
        if wanted is not None and a.lane not in wanted:
            rejected.append(_refusal(a, f"lane {a.lane} not requested"))
            continue
        s = table.spec_from_dict(family, thaw(a.spec))
        specs.append(s)
        by_spec[id(s)] = a
    ranking = efficiency.rank(specs, problem, target, min_efficiency=min_efficiency or 0.0)
    for r in ranking.rejected:
        a = by_spec[id(r.spec)]
        rejected.append(_refusal(a, r.reason))
    accepted: list[dict[str, Any]] = []
    for r in ranking.accepted:
        a = by_spec[id(r.spec)]
        newest = max((by_spec[id(o.spec)].lane for o in ranking.accepted if o.spec == r.spec),
                     key=lambda n: get_lane(n).major)
        if a.lane != newest:
            rejected.append(_refusal(a, f"other lane preferred: {newest}"))
            continue
        accepted.append({"key": a.key, "sha256": a.sha256, "arch": a.arch, "lane": a.lane, "spec": thaw(a.spec),
                         "efficiency": r.efficiency.as_dict(), "resources": resources(thaw(a.metadata))})
    if limit is not None:
        accepted = accepted[:limit]
    return accepted, rejected


def _refusal(a, reason: str) -> dict[str, Any]:
    return {"key": a.key, "lane": a.lane, "arch": a.arch, "spec": thaw(a.spec), "reason": reason}
