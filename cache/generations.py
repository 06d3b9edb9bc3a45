"""Build generations and the current-generation ref per (arch, lane).

    put(inputs) ──> generation_id(arch, lane, recipe digest, toolchain identity)
        │             = sha256("rocke-aot/generation/v1\\n" + canonical JSON of the four)[:32]
        ├─ artifacts.generation = that id
        ├─ generations row (insert once)
        └─ refs row for (arch, lane) only if none exists yet (a first build is current)
    builder, after a build that ran to the end ──> move_ref(arch, lane, id)
        the previous generation gets retired_at = now (its place in history)
    select / listings ──> only rows whose generation is the ref's ("stale generation" otherwise)
    gc_generations(keep=N) ──> per (arch, lane): keep the current one and the N most recently
        retired; delete the artifacts (and failures) of the others, then the orphaned blobs

The id is a pure function of what makes a build's bytes differ (the same code and
toolchain give the same generation, so a top-up or no-op rebuild stays in it).
The compile options (the key's ``options``) need no part of their own: they are defined in
aot/compiler/options.py, a module of the recipe, so the recipe digest moves with them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, delete, func, select, update

from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import generations as G
from rocke_aot.cache.models import refs as R

_PREFIX = b"rocke-aot/generation/v1\n"


def generation_id(arch: str, lane: str, recipe_digest: str, toolchain_json: str) -> str:
    """The generation of (arch, lane) built with this recipe digest and toolchain identity.

    ``toolchain_json`` is the canonical JSON the artifacts table stores.
    """
    h = hashlib.sha256(_PREFIX)
    for part in (arch, lane, recipe_digest, toolchain_json):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def generation_of(inputs) -> str:
    """The generation a KeyInputs belongs to (its arch, lane, recipe digest and toolchain)."""
    return generation_id(inputs.arch, inputs.lane, inputs.recipe_digest, inputs.toolchain_json)


@dataclass(frozen=True)
class Generation:
    id: str
    arch: str
    lane: str
    recipe_digest: str
    toolchain_json: str
    created_at: float
    retired_at: float | None
    current: bool
    artifacts: int
    failures: int

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def register(conn: Connection, insert_ignore, gen: str, arch: str, lane: str, digest: str, tc_json: str,
             now: float) -> None:
    """Inside a put's write transaction: the generation row, and a ref if (arch, lane) has none."""
    conn.execute(insert_ignore(conn, G), {"id": gen, "arch": arch, "lane": lane, "recipe_digest": digest,
                                          "toolchain_json": tc_json, "created_at": now, "retired_at": None})
    conn.execute(insert_ignore(conn, R), {"arch": arch, "lane": lane, "generation": gen, "moved_at": now})


def move_ref(conn: Connection, arch: str, lane: str, gen: str, now: float) -> str | None:
    """Point (arch, lane) at ``gen``; returns the generation it pointed at before (or None)."""
    if conn.execute(select(G.c.id).where(G.c.id == gen)).first() is None:
        raise KeyError(gen)
    prev = conn.execute(select(R.c.generation).where(and_(R.c.arch == arch, R.c.lane == lane))).scalar()
    if prev == gen:
        return prev
    if prev is None:
        conn.execute(R.insert().values(arch=arch, lane=lane, generation=gen, moved_at=now))
    else:
        conn.execute(update(R).where(and_(R.c.arch == arch, R.c.lane == lane)).values(generation=gen, moved_at=now))
        conn.execute(update(G).where(G.c.id == prev).values(retired_at=now))
    conn.execute(update(G).where(G.c.id == gen).values(retired_at=None))
    return prev


def current(conn: Connection) -> dict[tuple[str, str], str]:
    return {(arch, lane): g for arch, lane, g in conn.execute(select(R.c.arch, R.c.lane, R.c.generation))}


def listing(conn: Connection, arch: str | None = None, lane: str | None = None) -> list[Generation]:
    counts: dict[str, dict[str, int]] = {}
    for gen, status, n in conn.execute(select(A.c.generation, A.c.status, func.count())
                                       .group_by(A.c.generation, A.c.status)):
        counts.setdefault(gen, {})[status] = n
    refs = current(conn)
    stmt = select(G)
    if arch is not None:
        stmt = stmt.where(G.c.arch == arch)
    if lane is not None:
        stmt = stmt.where(G.c.lane == lane)
    out = []
    for r in conn.execute(stmt.order_by(G.c.arch, G.c.lane, G.c.created_at, G.c.id)).mappings():
        c = counts.get(r["id"], {})
        out.append(Generation(r["id"], r["arch"], r["lane"], r["recipe_digest"], r["toolchain_json"],
                              r["created_at"], r["retired_at"], refs.get((r["arch"], r["lane"])) == r["id"],
                              c.get("ok", 0), c.get("failed", 0)))
    return out


def doomed(conn: Connection, keep: int) -> list[str]:
    """Generations gc drops: per (arch, lane), all but the current one and ``keep`` retired."""
    refs = current(conn)
    by_pair: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for gid, arch, lane, created, retired in conn.execute(
            select(G.c.id, G.c.arch, G.c.lane, G.c.created_at, G.c.retired_at)):
        if refs.get((arch, lane)) == gid:
            continue
        # Most recently retired first; one never current (retired_at NULL) by its creation.
        by_pair.setdefault((arch, lane), []).append((retired if retired is not None else created, created, gid))
    out = []
    for _, gens in sorted(by_pair.items()):
        gens.sort(reverse=True)
        out.extend(g for _, _, g in gens[keep:])
    return sorted(out)


def drop(conn: Connection, gens: list[str], chunk: int) -> int:
    """Delete the artifacts, failures and rows of ``gens``; the caller deletes orphaned blobs."""
    n = 0
    for i in range(0, len(gens), chunk):
        part = gens[i : i + chunk]
        n += conn.execute(delete(A).where(A.c.generation.in_(part))).rowcount
        conn.execute(delete(G).where(G.c.id.in_(part)))
    return n


def backfill(conn: Connection, insert_ignore, now: float) -> int:
    """Give rows without a generation (an imported bundle's) the one their inputs name."""
    groups = conn.execute(
        select(A.c.arch, A.c.lane, A.c.recipe_digest, A.c.toolchain_json).where(A.c.generation.is_(None))
        .group_by(A.c.arch, A.c.lane, A.c.recipe_digest, A.c.toolchain_json)).all()
    n = 0
    for arch, lane, digest, tc_json in groups:
        gen = generation_id(arch, lane, digest, tc_json)
        register(conn, insert_ignore, gen, arch, lane, digest, tc_json, now)
        n += conn.execute(update(A).where(and_(
            A.c.generation.is_(None), A.c.arch == arch, A.c.lane == lane, A.c.recipe_digest == digest,
            A.c.toolchain_json == tc_json)).values(generation=gen)).rowcount
    return n
