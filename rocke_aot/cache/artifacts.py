"""The artifacts part of a store: the plan index and its rows, written and read here only.

    one row per key = artifact_key(KeyInputs): (recipe digest, family, spec, arch, lane,
    toolchain, options) -> status 'ok' (blob, IR sha256, launch contract in metadata, code_key,
    generation, served) or 'failed' (a negative entry: error, log; no blob)

    put(inputs, code_object) ─┬─ key = artifact_key(inputs), sha = sha256(code_object)
                              ├─ Blobs.encode (outside the write lock: the slow part)
                              └─ ONE write transaction:
                                   generation row (once: cache/generations.py), blob row (insert,
                                   or reuse; a corrupt copy is repaired: cache/blobs.py), code
                                   object row (once: cache/code_objects.py), artifact row
                                   (publish_row: insert; idempotent when identical), served flags
                                   of that spec, a Triton build's cache entry (cache/triton_entries.py)
                                   -> a reader never sees an artifact without its blob
    put_failure(inputs, error, log, ir_sha256) ── a 'failed' row, no blob; with the IR's sha256
                 the compiler's refusal is kept by code-object key too
    lookup_many(keys) ── chunked ``key IN (...)`` over the covering index only -> {key: Hit}
    get(key) ── row + blob ─> Blobs.decode (decompress, size, sha256) ─> Artifact; a mismatch
                 raises IntegrityError and the bytes never leave; then the read time waits
                 (flush_reads writes the batch, at most once per touch_interval)
    record(key) ── the row alone, no bytes, no read-time write (the service's kernel lookup)
    find(...) ── THE listing: rows in key order, no blobs; filters, status, served_only,
                 key_prefix, keyset paging (after=the last key of the previous page, limit)
    resolve_key(prefix) ── the one key a CLI prefix names

``publish_row(conn, row, replace)`` is the one way an 'ok' row enters the table, inside a
caller's write transaction (put here, import in cache/bundle.py).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, select, update

from rocke_aot import record as record_schema
from rocke_aot.boundedjson import is_int
from rocke_aot.cache import code_objects, codec, db, generations, triton_entries
from rocke_aot.cache.blobs import SHA_RE, Blobs
from rocke_aot.cache.keys import KeyInputs, artifact_key, canonical_json, check_key, code_key_of
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import blob_data
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.provenance import BUILD, ENTRIES, SIGNABLE_ENTRY, Entry
from rocke_aot.cache.records import Artifact, Failure, Hit, to_artifact, to_failure
from rocke_aot.errors import CacheError, IntegrityError, KeyConflictError, NotFoundError, SpecError
from rocke_aot.targets import Target

# Columns of one artifact row with its blob's sizes (no blob data): listings and gets.
ROW = [*A.c, B.c.size, B.c.stored_size]
ROW_FROM = A.outerjoin(B, A.c.blob_sha256 == B.c.sha256)

# The hot statements are built once: constructing a SELECT costs more than running it on
# SQLite, and the builder's no-op path and get() are the hot paths.
_Q_ROW = select(*ROW).select_from(ROW_FROM).where(A.c.key == bindparam("k"))
_Q_GET = select(*ROW, B.c.codec, blob_data, B.c.dict_id).select_from(ROW_FROM).where(A.c.key == bindparam("k"))
_Q_STATUS = select(A.c.status, A.c.blob_sha256, A.c.entered, A.c.verified_at).where(A.c.key == bindparam("k"))
_U_TOUCH = update(A).where(A.c.key == bindparam("k")).values(last_read_at=bindparam("t"))
_PREFIX_RE = re.compile(r"^[0-9a-f]{1,64}$")
_CLI_PREFIX_RE = re.compile(r"^[0-9a-f]{4,64}$")
STATUSES = ("ok", "failed", "all")


def _all_keys(keys: list) -> bool:
    """Whether every item is a key (64 lowercase hex digits), in C-speed passes: 10,000 keys
    checked one regex at a time would cost a tenth of the whole lookup."""
    try:
        joined = "".join(keys)
    except TypeError:
        return False
    if not keys:
        return True
    if set(map(len, keys)) != {64}:
        return False
    try:
        raw = joined.encode("ascii")
    except UnicodeEncodeError:
        return False
    return not raw.translate(None, b"0123456789abcdef")  # nothing left but hex digits


@functools.lru_cache(maxsize=16)
def _lookup_sql(dialect: str, n: int) -> str:
    # SQLite's planner prefers the primary-key index (then a second search into the table per
    # key); naming the covering index answers from the index alone (migration 0003).
    if dialect == "sqlite":
        return (
            "SELECT key, status, blob_sha256 FROM artifacts INDEXED BY ix_artifacts_lookup WHERE key IN ("
            + ",".join(["?"] * n) + ")"
        )
    return "SELECT key, status, blob_sha256 FROM artifacts WHERE key IN (" + ",".join(["%s"] * n) + ")"


def _json(value: Any, what: str) -> str:
    if not isinstance(value, Mapping):
        raise SpecError(f"{what} must be a mapping, got {type(value).__name__}")
    return canonical_json(value)


def _check_sha(value: Any, what: str) -> None:
    if not isinstance(value, str) or not SHA_RE.match(value):
        raise SpecError(f"{what} must be 64 lowercase hex digits, got {value!r}")


def origin_of(provenance: Any) -> str | None:
    """The server an artifact was fetched from (provenance "origin" {"source": URL}, written by
    service/client.py), None for one built or imported here."""
    o = provenance.get("origin") if isinstance(provenance, Mapping) else None
    src = o.get("source") if isinstance(o, Mapping) else None
    return src.rstrip("/") if isinstance(src, str) else None


def publish_row(conn: Connection, row: dict[str, Any], *, replace: bool) -> str:
    """Insert one 'ok' row inside the caller's write transaction; the same bytes again are a
    no-op, different bytes under the same key are refused (CacheError) unless ``replace``.

    The row's ``entered`` (cache/provenance.py) decides two more things: a build ('build') of the
    same bytes as a row that entered otherwise verifies it (``verified_at`` set, its entry
    kept); any other entry of the same bytes changes nothing (a publish never downgrades or
    claims a built row). Returns what happened: "inserted", "unchanged", "verified", "replaced".
    """
    key = row["key"]
    row.setdefault("entered", "build")
    row.setdefault("entered_json", "{}")
    for _ in range(2):  # a concurrent PostgreSQL insert of the same key is seen on the retry
        cur = conn.execute(_Q_STATUS, {"k": key}).first()
        if cur is None:
            res = conn.execute(db.insert_ignore(conn, A), row)
            if res.rowcount == 1:
                return "inserted"
            continue
        if cur.status == "ok" and cur.blob_sha256 == row["blob_sha256"]:
            # idempotent: same inputs, same bytes; a build of them verifies a row that entered otherwise
            if row["entered"] == SIGNABLE_ENTRY and cur.entered != SIGNABLE_ENTRY and cur.verified_at is None:
                conn.execute(update(A).where(A.c.key == key).values(verified_at=row.get("built_at") or time.time()))
                return "verified"
            return "unchanged"
        if cur.status == "ok" and not replace:
            raise KeyConflictError(
                f"artifact {key} already holds code object {cur.blob_sha256}, and the same key inputs "
                f"now gave {row['blob_sha256']}: the build is not deterministic or the key misses an "
                f"input. Refusing to overwrite (pass replace=True for a forced rebuild)."
            )
        values = {k: v for k, v in row.items() if k != "key"}
        values.setdefault("verified_at", None)
        conn.execute(update(A).where(A.c.key == key).values(**values))
        return "replaced" if cur.status == "ok" else "inserted"
    raise CacheError(f"artifact {key}: could not insert or read it back")


class Artifacts:
    """The artifacts part of one store (module doc)."""

    def __init__(self, handle: db.Handle, blobs: Blobs, *, touch_interval: float):
        self.handle = handle
        self.blobs = blobs
        self.touch_interval = touch_interval
        # Read times wait here and are written in one transaction per touch_interval (never
        # one write per get); a read-only store keeps none.
        self._touches: dict[str, float] = {}
        self.flushed_at = time.time()  # when the read times were last written

    # ---- writes -------------------------------------------------------------------------

    def put(self, inputs: KeyInputs, code_object: bytes, *, ir_sha256: str, metadata: Mapping[str, Any],
            provenance: Mapping[str, Any], replace: bool = False, ptx: str | None = None,
            triton_files: Mapping[str, bytes] | None = None, entered: Entry = BUILD) -> Artifact:
        self.handle.writable("put")
        if not isinstance(entered, Entry):
            raise SpecError(f"put needs an Entry (cache/provenance.py), got {type(entered).__name__}")
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"put needs KeyInputs, got {type(inputs).__name__}")
        if not isinstance(code_object, (bytes, bytearray, memoryview)) or len(code_object) == 0:
            raise SpecError("put needs a non-empty code object (bytes)")
        _check_sha(ir_sha256, "ir_sha256")
        record_schema.check_metadata(metadata)  # the one record schema, before anything is written
        record_schema.check_provenance(provenance)
        raw = bytes(code_object)
        key = artifact_key(inputs)
        sha = codec.sha256_hex(raw)
        stored, cod, dict_id = self.blobs.encode(raw, inputs.arch, inputs.family)
        code_key = code_key_of(inputs, ir_sha256)
        # what a build that reuses this code object needs beside its bytes: a cubin's PTX (its
        # launch layout) and ptxas's schedule (aot/sass.py: ~0.4 s of cuobjdump per cubin, read
        # off these very bytes, so the same for every artifact that reuses them)
        schedule = (metadata.get("code_object") or {}).get("schedule")
        info = {"format": metadata.get("format"), **({"ptx": ptx} if ptx is not None else {}),
                **({"triton": metadata["triton"]} if metadata.get("triton") is not None else {}),
                **({"schedule": schedule} if schedule is not None else {})}
        entry = triton_entries.entry_of(metadata, raw, triton_files)
        row: dict[str, Any] = {
            "key": key,
            "status": "ok",
            "arch": inputs.arch,
            "lane": inputs.lane,
            "profile": inputs.profile,
            "family": inputs.family,
            "spec_json": inputs.spec_json,
            "recipe_digest": inputs.recipe_digest,
            "toolchain_json": inputs.toolchain_json,
            "options_json": inputs.options_json,
            "blob_sha256": sha,
            "ir_sha256": ir_sha256,
            "metadata_json": _json(metadata, "metadata"),
            "provenance_json": _json(provenance, "provenance"),
            "error": None,
            "log": None,
            "code_key": code_key,
            "entered": entered.how,
            "entered_json": entered.by_json(),
        }
        with db.write_tx(self.handle.engine) as conn:
            now = time.time()
            row["built_at"] = row["last_read_at"] = now
            row["generation"] = generations.register(conn, inputs, now)
            self.blobs.publish(conn, sha, raw, stored, cod, dict_id, now)
            if entered.built:  # only a build's bytes become a code object the builder reuses
                code_objects.put_ok(conn, code_key, inputs, ir_sha256, sha, info, now)
            publish_row(conn, row, replace=replace)
            if entry is not None and entered.built:  # the Triton cache entry a GPU host looks up, in the same transaction
                triton_entries.publish(conn, entry["key"], entry["files"], triton_version=entry["triton_version"],
                                       target=entry["target"], artifact_key=key, source="build",
                                       put_blob=lambda data: self.blobs.put(conn, data, inputs.arch, inputs.family,
                                                                            now))
            generations.reserve_spec(conn, inputs.arch, inputs.lane, inputs.family, inputs.spec_json)
            out = conn.execute(_Q_ROW, {"k": key}).mappings().one()
        return to_artifact(out, code_object=raw)

    def put_failure(self, inputs: KeyInputs, error: str, log: str = "", *, ir_sha256: str | None = None) -> Hit:
        self.handle.writable("put_failure")
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"put_failure needs KeyInputs, got {type(inputs).__name__}")
        if not isinstance(error, str) or not error:
            raise SpecError("put_failure needs a non-empty error message")
        if not isinstance(log, str):
            raise SpecError(f"log must be a string, got {type(log).__name__}")
        if ir_sha256 is not None:
            _check_sha(ir_sha256, "ir_sha256")
        key = artifact_key(inputs)
        code_key = None if ir_sha256 is None else code_key_of(inputs, ir_sha256)
        with db.write_tx(self.handle.engine) as conn:
            now = time.time()
            gen = generations.register(conn, inputs, now)
            if code_key is not None and ir_sha256 is not None:  # one is None when the other is
                code_objects.put_failed(conn, code_key, inputs, ir_sha256, error, now)
            cur = conn.execute(_Q_STATUS, {"k": key}).first()
            if cur is not None and cur.status == "ok":
                return Hit(key, "artifact", sha256=cur.blob_sha256)
            values = {
                "status": "failed", "error": error, "log": log, "built_at": now, "last_read_at": None,
                "blob_sha256": None, "ir_sha256": ir_sha256, "generation": gen, "code_key": code_key, "served": 0,
            }
            if cur is None:
                conn.execute(A.insert().values(
                    key=key, arch=inputs.arch, lane=inputs.lane, profile=inputs.profile, family=inputs.family,
                    spec_json=inputs.spec_json, recipe_digest=inputs.recipe_digest,
                    toolchain_json=inputs.toolchain_json, options_json=inputs.options_json, metadata_json="{}",
                    provenance_json="{}", entered="build", **values,
                ))
            else:
                conn.execute(update(A).where(A.c.key == key).values(**values))
        return Hit(key, "failure", error=error)

    # ---- reads --------------------------------------------------------------------------

    def _served_row(self, key: str, row, blob_field: str):
        """The row of an 'ok' artifact whose blob joined (``blob_field`` not null), else the named
        error: missing, a cached failure, or a blob gone (the foreign key forbids it; a
        hand-edited store may not)."""
        if row is None:
            raise NotFoundError(f"no artifact {key} in {self.handle}")
        if row["status"] != "ok":
            raise NotFoundError(f"{key} is a cached build failure, not an artifact: {row['error']}")
        if row[blob_field] is None:
            raise IntegrityError(f"artifact {key}: its blob {row['blob_sha256']} is missing")
        return row

    def get(self, key: str) -> Artifact:
        check_key(key)
        with db.read_tx(self.handle.engine) as conn:
            row = self._served_row(key, conn.execute(_Q_GET, {"k": key}).mappings().first(), "data")
            raw = self.blobs.decode(conn, row["blob_sha256"], row["size"], row["codec"], row["stored_size"],
                                    row["data"], row["dict_id"])
        now = time.time()
        last = row["last_read_at"]
        if not self.handle.readonly and (last is None or now - last >= self.touch_interval):
            self._touches[key] = now
            row = {**row, "last_read_at": now}
            if now - self.flushed_at >= self.touch_interval or len(self._touches) >= 4096:
                self.flush_reads()
        return to_artifact(row, code_object=raw)

    def record(self, key: str) -> Artifact:
        check_key(key)
        with db.read_tx(self.handle.engine) as conn:
            row = self._served_row(key, conn.execute(_Q_ROW, {"k": key}).mappings().first(), "size")
        return to_artifact(row)

    def flush_reads(self) -> int:
        pending, self._touches = self._touches, {}
        self.flushed_at = time.time()
        if not pending or self.handle.readonly:
            return 0
        with db.write_tx(self.handle.engine) as conn:
            conn.execute(_U_TOUCH, [{"k": k, "t": t} for k, t in sorted(pending.items())])
        return len(pending)

    def get_failure(self, key: str) -> Failure:
        check_key(key)
        with db.read_tx(self.handle.engine) as conn:
            row = conn.execute(select(A).where(A.c.key == key)).mappings().first()
        if row is None or row["status"] != "failed":
            raise NotFoundError(f"no cached failure {key} in {self.handle}")
        return to_failure(row)

    def lookup_many(self, keys: Iterable[str]) -> dict[str, Hit]:
        wanted = list(keys)
        if not _all_keys(wanted):
            for k in wanted:
                check_key(k)  # raises, naming the bad key
        # Sorted: neighbouring keys share index pages (measured 1.3x on 10,000 keys).
        wanted = sorted(set(wanted))
        out: dict[str, Hit] = {}
        with db.read_tx(self.handle.engine) as conn:
            # Straight to the DBAPI cursor: at 10,000 keys, SQLAlchemy's rendering of an
            # expanding IN list and its Row objects cost more than the index lookups.
            cur = db.dbapi(conn).cursor()
            failed: list[str] = []
            try:
                for chunk in db.chunks(wanted):
                    cur.execute(_lookup_sql(conn.dialect.name, len(chunk)), chunk)
                    for key, status, sha in cur.fetchall():
                        if status == "ok":
                            out[key] = Hit(key, "artifact", sha)
                        else:
                            failed.append(key)
            finally:
                cur.close()
            # Failures are few; their messages come from the table in a second pass.
            for chunk in db.chunks(failed):
                failures: db.RowIter = conn.execute(select(A.c.key, A.c.error).where(A.c.key.in_(chunk)))
                for key, error in failures:
                    out[key] = Hit(key, "failure", None, error)
        return out

    def find(self, target: Target | None = None, lane: str | None = None, family: str | None = None,
             profile: str | None = None, *, status: str = "ok", served_only: bool = False,
             key_prefix: str | None = None, after: str | None = None,
             limit: int | None = None) -> list[Artifact | Failure]:
        if status not in STATUSES:
            raise SpecError(f"status must be 'ok', 'failed' or 'all', got {status!r}")
        if limit is not None and (not is_int(limit) or limit < 1):
            raise SpecError(f"limit must be a positive int, got {limit!r}")
        if after is not None and (not isinstance(after, str) or not SHA_RE.match(after)):
            raise SpecError(f"after must be a key (64 lowercase hex digits) from a previous page, got {after!r}")
        conds = []
        if target is not None:
            conds.append(A.c.arch == target.id)
        for col, val in ((A.c.lane, lane), (A.c.family, family), (A.c.profile, profile)):
            if val is not None:
                if not isinstance(val, str):
                    raise SpecError(f"filter {col.name} must be a string, got {val!r}")
                conds.append(col == val)
        if status != "all":
            conds.append(A.c.status == status)
        if served_only:
            conds.append(A.c.served == 1)
        if key_prefix is not None:
            if not isinstance(key_prefix, str) or not _PREFIX_RE.match(key_prefix):
                raise SpecError(f"a key prefix is lowercase hex, got {key_prefix!r}")
            conds.append(A.c.key.like(key_prefix + "%"))
        if after is not None:
            conds.append(A.c.key > after)
        stmt = select(*ROW).select_from(ROW_FROM).where(and_(True, *conds)).order_by(A.c.key)
        if limit is not None:
            stmt = stmt.limit(limit)
        with db.read_tx(self.handle.engine) as conn:
            rows = conn.execute(stmt).mappings().all()
        return [to_artifact(r) if r["status"] == "ok" else to_failure(r) for r in rows]

    def unverified(self, keys: Iterable[str] | None = None) -> dict[str, str]:
        """{key: entered} of the 'ok' rows no build here made or verified (cache/provenance.py),
        among ``keys`` (None: all). One indexed query over the few such rows, not per key."""
        wanted = None if keys is None else set(keys)
        stmt = select(A.c.key, A.c.entered).where(
            A.c.status == "ok", A.c.entered.in_([e for e in ENTRIES if e != SIGNABLE_ENTRY]), A.c.verified_at.is_(None))
        with db.read_tx(self.handle.engine) as conn:
            rows: db.Rows = conn.execute(stmt).all()
        return {k: e for k, e in rows if wanted is None or k in wanted}

    def resolve_key(self, prefix: str) -> str:
        if not isinstance(prefix, str) or not _CLI_PREFIX_RE.match(prefix):
            raise SpecError(f"give at least 4 lowercase hex digits of a key, got {prefix!r}")
        with db.read_tx(self.handle.engine) as conn:
            keys: Sequence[str] = conn.execute(select(A.c.key).where(A.c.key.like(prefix + "%")).limit(2)).scalars().all()
        if not keys:
            raise NotFoundError(f"no artifact or failure whose key starts with {prefix} in {self.handle}")
        if len(keys) > 1:
            raise SpecError(f"key prefix {prefix} is ambiguous; give more digits")
        return keys[0]
