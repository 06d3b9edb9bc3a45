"""Generations, and which stored row of each spec is served.

    put(inputs) ──> generation_id(arch, lane, family, recipe digest, toolchain identity)
        │             = sha256("rocke-aot/generation/v2\\n" + the five, NUL-separated)[:32]
        ├─ artifacts.generation = that id;  generations row (insert once)
        └─ reserve(one spec): its 'ok' rows, one per generation that built it ──> the best
              ranked one gets served = 1, every other served = 0; per Triton version for a
              Triton family (line_of: the version its generation's toolchain identity names),
              since a GPU host's Triton must equal the builder's: a Triton 3.7 build never
              takes a spec away from the hosts that run 3.6, whatever the lane
    builder, after a build that ran to the end ──> complete(generation): completed_at = now,
        then reserve(every spec of that generation)
    select / listings ──> rows with served = 1

    rank(generation) = (completed?, completed_at, created_at, id)   higher serves

A spec keeps being served by the row it was served by until a row of a better-ranked
generation exists for *that spec*: a build limited by --family, --where or --problems only
creates rows for what it planned; a failed compile creates no 'ok' row; an interrupted build
never completes its generation, so its rows serve only specs that nothing complete serves
(a first build serves while it runs); a changed recipe starts a new generation that takes over
spec by spec when it completes. Old and new generations serve side by side meanwhile, and the
newest complete generation of a family wins wherever it has the spec. Only ``gc`` (the rows no
one serves) and eviction (a size cap, on purpose) ever take a row away.

The id is a pure function of what makes a build's bytes differ, per family: the same code
and toolchain give the same generation, so a top-up or no-op rebuild stays in it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, func, select, update

from rocke_aot.cache import db
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import generations as G
from rocke_aot.candidates import triton_version_of
from rocke_aot.errors import RockeError

_PREFIX = b"rocke-aot/generation/v2\n"


def generation_id(arch: str, lane: str, family: str, recipe_digest: str, toolchain_json: str) -> str:
    """The generation of (arch, lane, family) built with this recipe digest and toolchain.

    ``toolchain_json`` is the canonical JSON the artifacts table stores.
    """
    h = hashlib.sha256(_PREFIX)
    for part in (arch, lane, family, recipe_digest, toolchain_json):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def generation_of(inputs) -> str:
    """The generation a KeyInputs belongs to."""
    return generation_id(inputs.arch, inputs.lane, inputs.family, inputs.recipe_digest, inputs.toolchain_json)


@dataclass(frozen=True)
class Generation:
    id: str
    arch: str
    lane: str
    family: str
    recipe_digest: str
    toolchain_json: str
    created_at: float
    completed_at: float | None
    current: bool  # the newest complete generation of its (arch, lane, family)
    artifacts: int
    failures: int
    served: int  # how many of its artifacts select serves

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def rank(completed_at: float | None, created_at: float, gid: str) -> tuple:
    return (completed_at is not None, completed_at or 0.0, created_at, gid)


@functools.lru_cache(maxsize=1024)
def line_of(toolchain_json: str | None) -> str:
    """The serving line a generation's rows belong to: "" for every toolchain but Triton's, the
    Triton version for Triton's (candidates.triton_version_of). One row of a spec is served per
    line; a malformed identity is a line of its own (select skips such rows)."""
    try:
        return triton_version_of(json.loads(toolchain_json or "{}")) or ""
    except (ValueError, RockeError):
        return "?malformed"


def register(conn: Connection, inputs, now: float) -> str:
    """Inside a put's write transaction: the generation row of ``inputs`` (once); its id."""
    gen = generation_of(inputs)
    conn.execute(db.insert_ignore(conn, G), {
        "id": gen, "arch": inputs.arch, "lane": inputs.lane, "family": inputs.family,
        "recipe_digest": inputs.recipe_digest, "toolchain_json": inputs.toolchain_json,
        "created_at": now, "retired_at": None, "completed_at": None})
    return gen


_Q_SPEC_ROWS = (
    select(A.c.key, A.c.served, G.c.completed_at, G.c.created_at, G.c.id, G.c.toolchain_json)
    .select_from(A.join(G, G.c.id == A.c.generation))
    .where(A.c.arch == bindparam("a"), A.c.lane == bindparam("l"), A.c.family == bindparam("f"),
           A.c.spec_json == bindparam("s"), A.c.status == "ok")
)
_U_SERVED = update(A).where(A.c.key == bindparam("k")).values(served=bindparam("v"))


def _apply(conn: Connection, rows: Iterable[tuple]) -> int:
    """rows: (key, served, completed_at, created_at, gen) of ONE spec and line -> flip what must change."""
    rows = list(rows)
    if not rows:
        return 0
    best = max(rows, key=lambda r: rank(r[2], r[3], r[4]) + (r[0],))[0]
    changes = [{"k": k, "v": int(k == best)} for k, served, *_ in rows if bool(served) != (k == best)]
    if changes:
        conn.execute(_U_SERVED, changes)
    return len(changes)


def _by_line(rows: Iterable[tuple]) -> list[list[tuple]]:
    """rows (key, served, completed_at, created_at, gen, toolchain_json) of one spec, per line_of."""
    lines: dict[str, list[tuple]] = {}
    for r in rows:
        lines.setdefault(line_of(r[5]), []).append(tuple(r[:5]))
    return list(lines.values())


def reserve_spec(conn: Connection, arch: str, lane: str, family: str, spec_json: str) -> int:
    """Serve the best-ranked 'ok' row of one spec, per line (after a put)."""
    rows = conn.execute(_Q_SPEC_ROWS, {"a": arch, "l": lane, "f": family, "s": spec_json}).all()
    return sum(_apply(conn, line) for line in _by_line(rows))


def reserve_groups(conn: Connection, groups: Iterable[tuple[str, str, str]] | None = None) -> int:
    """Recompute served for every spec of the given (arch, lane, family) groups (None: all)."""
    stmt = (select(A.c.arch, A.c.lane, A.c.family, A.c.spec_json, A.c.key, A.c.served, A.c.status,
                   G.c.completed_at, G.c.created_at, G.c.id, G.c.toolchain_json)
            .select_from(A.outerjoin(G, G.c.id == A.c.generation)))
    wanted = None if groups is None else set(groups)
    if wanted is not None and not wanted:
        return 0
    if wanted is not None and len(wanted) == 1:
        (a, l, f), = wanted
        stmt = stmt.where(and_(A.c.arch == a, A.c.lane == l, A.c.family == f))
    by_spec: dict[tuple, list[tuple]] = {}
    clear: list[dict[str, Any]] = []
    for arch, lane, fam, sj, key, served, status, completed, created, gid, tc_json in conn.execute(stmt):
        if wanted is not None and (arch, lane, fam) not in wanted:
            continue
        if status != "ok" or gid is None:
            if served:
                clear.append({"k": key, "v": 0})
            continue
        by_spec.setdefault((arch, lane, fam, sj, line_of(tc_json)), []).append((key, served, completed, created, gid))
    if clear:
        conn.execute(_U_SERVED, clear)
    return len(clear) + sum(_apply(conn, rows) for rows in by_spec.values())


def complete(conn: Connection, gen: str, now: float) -> bool:
    """Mark ``gen`` complete (a build that planned into it ran to the end) and re-serve its
    specs. False when no such generation exists."""
    row: tuple[Any, ...] | None = conn.execute(select(G.c.arch, G.c.lane, G.c.family).where(G.c.id == gen)).first()
    if row is None:
        return False
    conn.execute(update(G).where(G.c.id == gen).values(completed_at=now))
    arch, lane, family = row
    reserve_groups(conn, [(arch, lane, family)])
    return True


def newest_complete(conn: Connection) -> dict[tuple[str, str, str], str]:
    """(arch, lane, family) -> its newest complete generation."""
    best: dict[tuple[str, str, str], tuple] = {}
    gens: db.RowIter = conn.execute(
        select(G.c.id, G.c.arch, G.c.lane, G.c.family, G.c.created_at, G.c.completed_at))
    for gid, arch, lane, fam, created, completed in gens:
        if completed is None:
            continue
        r = rank(completed, created, gid)
        if (arch, lane, fam) not in best or r > best[(arch, lane, fam)]:
            best[(arch, lane, fam)] = r
    return {k: r[3] for k, r in best.items()}


def listing(conn: Connection, arch: str | None = None, lane: str | None = None,
            family: str | None = None) -> list[Generation]:
    counts: dict[str, dict[str, int]] = {}
    grouped: db.RowIter = conn.execute(select(A.c.generation, A.c.status, A.c.served, func.count())
                                       .group_by(A.c.generation, A.c.status, A.c.served))
    for gen, status, served, n in grouped:
        c = counts.setdefault(gen, {})
        c[status] = c.get(status, 0) + n
        if served:
            c["served"] = c.get("served", 0) + n
    cur = newest_complete(conn)
    stmt = select(G)
    for col, val in ((G.c.arch, arch), (G.c.lane, lane), (G.c.family, family)):
        if val is not None:
            stmt = stmt.where(col == val)
    out = []
    for r in conn.execute(stmt.order_by(G.c.arch, G.c.lane, G.c.family, G.c.created_at, G.c.id)).mappings():
        c = counts.get(r["id"], {})
        out.append(Generation(r["id"], r["arch"], r["lane"], r["family"], r["recipe_digest"], r["toolchain_json"],
                              r["created_at"], r["completed_at"],
                              cur.get((r["arch"], r["lane"], r["family"])) == r["id"],
                              c.get("ok", 0), c.get("failed", 0), c.get("served", 0)))
    return out


def shadowed(conn: Connection, keep: int) -> tuple[list[str], list[str]]:
    """What gc drops: (row keys, generation ids). Per (arch, lane, family) the generations are
    ranked; the best one and ``keep`` more stay whole; of the others every row that is not
    served goes (failures included), and a generation left with no rows goes too. A served row
    is never dropped here, whatever its generation."""
    by_group: dict[tuple[str, str, str], list[tuple]] = {}
    gens: db.RowIter = conn.execute(
        select(G.c.id, G.c.arch, G.c.lane, G.c.family, G.c.created_at, G.c.completed_at))
    for gid, arch, lane, fam, created, completed in gens:
        by_group.setdefault((arch, lane, fam), []).append(rank(completed, created, gid))
    old: set[str] = set()
    for ranks in by_group.values():
        ranks.sort(reverse=True)
        old.update(r[3] for r in ranks[1 + keep:])
    if not old:
        return [], []
    keys: list[str] = []
    survivors: set[str] = set()
    rows: db.RowIter = conn.execute(select(A.c.key, A.c.generation, A.c.served))
    for key, gen, served in rows:
        if gen not in old:
            continue
        if served:
            survivors.add(gen)
        else:
            keys.append(key)
    return sorted(keys), sorted(old - survivors)


def drop(conn: Connection, keys: list[str], gens: list[str], chunk: int) -> int:
    """Delete the rows ``keys`` and the generation rows ``gens``."""
    n = 0
    for i in range(0, len(keys), chunk):
        n += conn.execute(delete(A).where(A.c.key.in_(keys[i : i + chunk]), A.c.served == 0)).rowcount
    for i in range(0, len(gens), chunk):
        conn.execute(delete(G).where(G.c.id.in_(gens[i : i + chunk])))
    return n


def backfill(conn: Connection, now: float) -> set[tuple[str, str, str]]:
    """Give rows without a generation (an imported bundle's) the one their inputs name; the
    (arch, lane, family) groups touched (the caller re-serves them)."""
    groups: db.Rows = conn.execute(
        select(A.c.arch, A.c.lane, A.c.family, A.c.recipe_digest, A.c.toolchain_json)
        .where(A.c.generation.is_(None))
        .group_by(A.c.arch, A.c.lane, A.c.family, A.c.recipe_digest, A.c.toolchain_json)).all()
    touched: set[tuple[str, str, str]] = set()
    for arch, lane, fam, digest, tc_json in groups:
        gen = generation_id(arch, lane, fam, digest, tc_json)
        conn.execute(db.insert_ignore(conn, G), {
            "id": gen, "arch": arch, "lane": lane, "family": fam, "recipe_digest": digest,
            # A bundle is a finished build: its generation enters complete.
            "toolchain_json": tc_json, "created_at": now, "retired_at": None, "completed_at": now})
        conn.execute(update(A).where(and_(
            A.c.generation.is_(None), A.c.arch == arch, A.c.lane == lane, A.c.family == fam,
            A.c.recipe_digest == digest, A.c.toolchain_json == tc_json)).values(generation=gen))
        touched.add((arch, lane, fam))
    return touched
