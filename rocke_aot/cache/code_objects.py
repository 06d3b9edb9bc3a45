"""Code objects by what the compiler consumed: the store's part behind ``code_objects``.

    builder, a plan miss ──lower (cheap)──> code_object_key(arch, profile, IR sha256, toolchain, options)
        │ Store.lookup_code_objects([key])  (this module's ``lookup``)
        ├─ 'ok'     -> reuse its blob: no compile (the plan row is written with the new
        │              launch contract, the same bytes)
        ├─ 'failed' -> the compiler refused this very IR before: a failure, no compile
        └─ absent   -> compile; Store.put writes the code object and the plan row together

Rows are immutable once 'ok'; a 'failed' row becomes 'ok' if a forced build succeeds.
``unreferenced`` rows (no plan row points at them any more: gc dropped the generations) go
with gc, so their blobs can go too; recorded failures stay (they are small and save compiles).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, delete, select, update

from rocke_aot.cache import db
from rocke_aot.cache.keys import canonical_json, code_object_key
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import code_objects as C
from rocke_aot.targets import target_identity


@dataclass(frozen=True)
class CodeHit:
    """A stored code object (``blob_sha256`` set) or a recorded compiler refusal (``error``)."""

    key: str
    status: str  # "ok" | "failed"
    blob_sha256: str | None
    info: Mapping[str, Any] = field(default_factory=dict)  # {"format": ..., "ptx": ... for a cubin}
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _identity_json(inputs) -> str:
    """The toolchain identity a code object's key hashes (keys.code_object_key): the target's format's."""
    return canonical_json(target_identity(json.loads(inputs.toolchain_json), inputs.arch))


def put_ok(conn: Connection, key: str, inputs, ir_sha256: str, blob_sha256: str,
           info: Mapping[str, Any], now: float) -> None:
    row = {"key": key, "status": "ok", "arch": inputs.arch, "profile": inputs.profile, "ir_sha256": ir_sha256,
           "toolchain_json": _identity_json(inputs), "options_json": inputs.options_json,
           "blob_sha256": blob_sha256, "info_json": canonical_json(info), "error": None, "built_at": now,
           "entered": "build"}
    conn.execute(db.insert_ignore(conn, C), row)
    # Present already: a recorded failure turns into the success, and so does a code object no build
    # here made (rev 0010_provenance: 'legacy', an import's): the build's bytes win; a build's 'ok' row
    # (the one just inserted too) stays as is. Not keyed on the insert's rowcount: on PostgreSQL (psycopg 3)
    # it is -1 for ON CONFLICT DO NOTHING (measured), so the update never ran there.
    conn.execute(update(C).where(C.c.key == key, (C.c.status == "failed") | (C.c.entered != "build")).values(
        status="ok", blob_sha256=blob_sha256, info_json=row["info_json"], error=None, built_at=now,
        entered="build"))


def put_failed(conn: Connection, key: str, inputs, ir_sha256: str, error: str, now: float) -> None:
    conn.execute(db.insert_ignore(conn, C), {
        "key": key, "status": "failed", "arch": inputs.arch, "profile": inputs.profile, "ir_sha256": ir_sha256,
        "toolchain_json": _identity_json(inputs), "options_json": inputs.options_json, "blob_sha256": None,
        "info_json": "{}", "error": error, "built_at": now, "entered": "build"})


def lookup(conn: Connection, keys: list[str], chunk: int) -> dict[str, CodeHit]:
    """Code objects (and refusals) a build here recorded; one that entered otherwise (an older
    store's, an import's: rev 0010_provenance) is absent here, so the builder compiles it again."""
    out: dict[str, CodeHit] = {}
    for i in range(0, len(keys), chunk):
        found: db.RowIter = conn.execute(
            select(C.c.key, C.c.status, C.c.blob_sha256, C.c.info_json, C.c.error)
            .where(C.c.key.in_(keys[i : i + chunk]), C.c.entered == "build"))
        for key, status, sha, info, error in found:
            out[key] = CodeHit(key, status, sha, json.loads(info), error)
    return out


def unreferenced(conn: Connection) -> int:
    """Delete 'ok' code objects no artifact row points at (after gc or eviction)."""
    used = select(A.c.key).where(A.c.code_key == C.c.key).exists()
    return conn.execute(delete(C).where(C.c.status == "ok", ~used)).rowcount


def backfill(conn: Connection, now: float, keys: Iterable[str] | None = None) -> int:
    """Give 'ok' rows that have an IR sha256 but no code key (an imported bundle's) their code
    object. A cubin's PTX was not exported, so such a cubin is compiled again once before reuse."""
    # the code object of a row no build here made is recorded as such: never reused unbuilt (lookup)
    stmt = (select(A.c.key, A.c.arch, A.c.profile, A.c.ir_sha256, A.c.toolchain_json, A.c.options_json,
                   A.c.blob_sha256, A.c.metadata_json, A.c.entered, A.c.verified_at)
            .where(A.c.status == "ok", A.c.code_key.is_(None), A.c.ir_sha256.is_not(None)))
    n = 0
    rows: db.Rows = conn.execute(stmt).all()
    for key, arch, profile, ir, tc_json, opt_json, blob, meta_json, entered, verified in rows:
        ck = code_object_key(arch, profile, ir, tc_json, opt_json)
        fmt = (json.loads(meta_json) or {}).get("format")
        tc_json = canonical_json(target_identity(json.loads(tc_json), arch))  # what the key hashes
        conn.execute(db.insert_ignore(conn, C), {
            "key": ck, "status": "ok", "arch": arch, "profile": profile, "ir_sha256": ir, "toolchain_json": tc_json,
            "options_json": opt_json, "blob_sha256": blob, "info_json": canonical_json({"format": fmt}),
            "error": None, "built_at": now, "entered": "build" if entered == "build" or verified else "import"})
        conn.execute(update(A).where(A.c.key == key).values(code_key=ck))
        n += 1
    return n
