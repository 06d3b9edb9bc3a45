"""A stand-in for issue 11's shared ``select()`` until ``service/selection.py`` lands.

    one query ── (key, blob, arch, lane, spec) of the family's artifacts built for the exact
        │        target ID or its bare processor (the generic build); lanes filtered after
        ▼
    variants.efficiency.rank(distinct specs, problem, target, min_efficiency)
        ▼
    equal specs: the newest lane wins, the others are rejected ("other lane preferred")
        ▼
    (accepted best first [:limit], rejected with reasons), as plain dicts

Kept deliberately small: ``access.select`` imports the shared helper first, so this file
is deleted once that exists. No generations, no full target-ID compatibility rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

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


def _rows(store, family: str, arch_ids: tuple[str, ...]):
    from rocke_aot.cache import db
    from rocke_aot.cache.models import artifacts as A
    from sqlalchemy import select as sa_select

    stmt = (sa_select(A.c.key, A.c.blob_sha256, A.c.arch, A.c.lane, A.c.spec_json)
            .where(A.c.status == "ok", A.c.family == family, A.c.arch.in_(arch_ids)).order_by(A.c.key))
    with db.read_tx(store.engine) as conn:
        return conn.execute(stmt).all()


def _metadata(store, keys: list[str]) -> dict[str, Any]:
    from rocke_aot.cache import db
    from rocke_aot.cache.models import artifacts as A
    from sqlalchemy import select as sa_select

    if not keys:
        return {}
    with db.read_tx(store.engine) as conn:
        return {k: json.loads(m) for k, m in conn.execute(
            sa_select(A.c.key, A.c.metadata_json).where(A.c.key.in_(keys))).all()}


def select(store, target, family: str, problem, *, lanes=None, min_efficiency=None,
           limit=None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(accepted best first, rejected), each a plain dict (the shape access.select returns).

    Ranks each distinct spec once (artifacts of equal specs share its efficiency)."""
    target = Target.parse(target)
    table.get_table(family)
    wanted = {get_lane(l, source="lanes").name for l in lanes} if lanes else None
    if isinstance(problem, Mapping):
        problem = problem_from_dict(family, dict(problem))
    rows = _rows(store, family, tuple({target.id, target.processor}))
    specs: dict[str, Any] = {}  # spec_json -> spec value
    for r in rows:
        if r.spec_json not in specs:
            specs[r.spec_json] = table.spec_from_dict(family, json.loads(r.spec_json))
    ranking = efficiency.rank(list(specs.values()), problem, target, min_efficiency=min_efficiency or 0.0)
    order = {id(x.spec): (i, x) for i, x in enumerate(ranking.accepted)}
    why = {id(x.spec): x.reason for x in ranking.rejected}
    rejected: list[dict[str, Any]] = []
    ok: list[tuple[int, Any, Any]] = []
    newest: dict[int, int] = {}  # rank position -> newest lane major with an artifact of that spec
    for r in rows:
        spec = specs[r.spec_json]
        if wanted is not None and r.lane not in wanted:
            rejected.append(_refusal(r, f"lane {r.lane} not requested"))
        elif id(spec) in why:
            rejected.append(_refusal(r, why[id(spec)]))
        else:
            pos, ranked = order[id(spec)]
            ok.append((pos, ranked, r))
            newest[pos] = max(newest.get(pos, 0), get_lane(r.lane).major)
    kept = []
    for pos, ranked, r in sorted(ok, key=lambda t: (t[0], t[2].key)):
        if get_lane(r.lane).major != newest[pos]:
            rejected.append(_refusal(r, f"other lane preferred: llvm{newest[pos]}"))
        else:
            kept.append((ranked, r))
    kept = kept[:limit] if limit is not None else kept
    meta = _metadata(store, [r.key for _, r in kept])
    accepted = [{"key": r.key, "sha256": r.blob_sha256, "arch": r.arch, "lane": r.lane,
                 "spec": json.loads(r.spec_json), "efficiency": ranked.efficiency.as_dict(),
                 "resources": resources(meta.get(r.key, {}))} for ranked, r in kept]
    return accepted, rejected


def _refusal(r, reason: str) -> dict[str, Any]:
    return {"key": r.key, "lane": r.lane, "arch": r.arch, "spec": json.loads(r.spec_json), "reason": reason}
