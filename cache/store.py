"""The content-addressed store: one facade over SQLite (default) or PostgreSQL and its parts.

    builder ──plan key (keys.artifact_key)──> artifacts   the plan index: one row per
        │                                                 (recipe digest, family, spec, arch, lane,
        │                                                 toolchain, options) -> launch contract,
        │                                                 blob, code_key, generation, served
        ├──code-object key (keys.code_object_key)──> code_objects   (cache/code_objects.py)
        │                                                 what the compiler consumed -> blob
        ├──claims (cache/claims.py): a lease per key while one builder compiles it
        └──generations (cache/generations.py): per (arch, lane, family); which row serves
    blobs (cache/blobs.py): sha256 of the raw bytes -> zstd frame (optionally a trained dict)

    put(inputs, code_object) ─┬─ key = artifact_key(inputs), blob = sha256(code_object)
                              └─ ONE write transaction:
                                   generation row (once), blob row (insert, or reuse; a
                                   corrupt copy is repaired), code object row (once), artifact
                                   row (insert; idempotent when identical), served flags of
                                   that spec -> a reader never sees an artifact without its blob
    put_failure(inputs, error, log, ir_sha256) ── a 'failed' row (negative entry), no blob;
                 with the IR's sha256, the compiler's refusal is kept by code-object key too
    lookup_many(keys) ── chunked ``key IN (...)`` over artifacts only -> {key: Hit}
    lookup_code_objects(keys) ── the builder's question after lowering: compiled already?
    get(key) ── row + blob ─> codec.decode (decompress, size, sha256) ─> Artifact
                 mismatch -> IntegrityError, the bytes never leave; then touch last_read_at
    find / list_artifacts / stats / verify ── listings and reports (verify decodes every blob,
                 recomputes every key, checks every record against the record schema and counts
                 the artifacts per origin: the server a client fetched them from)
    purge(origin) ── drop the artifacts a client fetched from that server (provenance "origin",
                 service/client.py), then their blobs: a poisoned local store is cleaned
    complete_generation / generations / gc_generations ── cache/generations.py
    claim / renew_claims / release_claims / claimed_by_others ── cache/claims.py
    gc ── delete blobs no artifact references
    evict(max_bytes) ── drop least-recently-read artifacts until the blobs fit, then gc
    export / import_ ── cache/bundle.py
    candidates(family, device, lanes) ── ONE raw query -> tuple of Candidates (selection's input);
                 SQLite: the tuple is kept per query shape and served again while
                 PRAGMA data_version / total_changes() show no commit since (any writer,
                 any process), else every kept tuple is dropped first

Writers: SQLite BEGIN IMMEDIATE (db.write_tx); PostgreSQL shared advisory lock for puts,
exclusive for gc/evict/import/claims. ``last_read_at`` is refreshed at most every
``touch_interval`` seconds per artifact, so hot reads do not turn into a write each.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import time
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping

from sqlalchemy import Connection, and_, bindparam, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from rocke_aot import settings
from rocke_aot.cache import blobs, claims, code_objects, codec, db, generations, models, triton_entries
from rocke_aot.cache.code_objects import CodeHit
from rocke_aot.cache.keys import KeyInputs, artifact_key, canonical_json, check_key, code_key_of
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import blob_data
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.records import (
    Artifact,
    Failure,
    GcReport,
    Hit,
    StoreStats,
    VerifyReport,
    to_artifact,
    to_failure,
)
from rocke_aot import record
from rocke_aot.candidates import Candidate, Resources, launch_block_size
from rocke_aot.targets import Target, compatible_ids
from rocke_aot.errors import CacheError, IntegrityError, NotFoundError, ReadOnlyError, RockeError, SpecError

log = logging.getLogger("rocke_aot.cache")
ENV_MAX_BYTES = settings.CACHE_MAX_BYTES
LOOKUP_CHUNK = 900  # under SQLite's oldest bound-parameter limit (999) and PostgreSQL's (65535)
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")


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

# Columns of one artifact row with its blob's sizes (no blob data): listings and gets.
_ROW = [*A.c, B.c.size, B.c.stored_size]
_ROW_FROM = A.outerjoin(B, A.c.blob_sha256 == B.c.sha256)

# The hot statements are built once: constructing a SELECT costs more than running it on
# SQLite, and the builder's no-op path and get() are the hot paths.
_Q_ROW = select(*_ROW).select_from(_ROW_FROM).where(A.c.key == bindparam("k"))
_Q_GET = select(*_ROW, B.c.codec, blob_data, B.c.dict_id).select_from(_ROW_FROM).where(A.c.key == bindparam("k"))
_Q_STATUS = select(A.c.status, A.c.blob_sha256).where(A.c.key == bindparam("k"))


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


def _processor_ids(target: Target) -> tuple[str, ...]:
    """Every target ID of the device's processor (any/on/off per feature): at most nine."""
    opts: list[tuple[str, ...]] = [()]
    for name in target.info.target_features:
        opts = [o + extra for o in opts for extra in ((), (f"{name}+",), (f"{name}-",))]
    return tuple(Target.parse(":".join((target.processor, *o))).id for o in opts)


@functools.lru_cache(maxsize=256)
def _candidates_sql(dialect: str, n_arch: int, n_lanes: int | None, current_only: bool) -> str:
    # Raw DBAPI SQL, built once per shape: selection is a hot path of the service, and
    # SQLAlchemy's statement compilation costs more than SQLite running the query.
    p = "?" if dialect == "sqlite" else "%s"
    sql = ("SELECT a.key, a.blob_sha256, a.arch, a.lane, a.profile, a.spec_json, a.generation, a.metadata_json, "
           "a.built_at, a.served FROM artifacts a "
           f"WHERE a.family = {p} AND a.status = 'ok' AND a.arch IN ({','.join([p] * n_arch)})")
    if n_lanes is not None:
        sql += f" AND a.lane IN ({','.join([p] * n_lanes)})"
    if current_only:
        sql += " AND a.served = 1"
    return sql  # no ORDER BY: rank() orders by key itself (a sort in SQL would cost a temp B-tree)


_U_TOUCH = update(A).where(A.c.key == bindparam("k")).values(last_read_at=bindparam("t"))


_INSERT_IGNORE: dict[tuple[str, str], Any] = {}


def _insert_ignore(conn: Connection, table):
    """INSERT ... ON CONFLICT (primary key) DO NOTHING, built once per dialect and table."""
    k = (conn.dialect.name, table.name)
    if k not in _INSERT_IGNORE:
        ins = (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(table)
        _INSERT_IGNORE[k] = ins.on_conflict_do_nothing(index_elements=[c.name for c in table.primary_key])
    return _INSERT_IGNORE[k]


def _json(value: Any, what: str) -> str:
    if not isinstance(value, Mapping):
        raise SpecError(f"{what} must be a mapping, got {type(value).__name__}")
    return canonical_json(value)


def _candidate(key, sha, family, arch, lane, profile, gen, is_current, spec_json, meta_json, built_at,
               info) -> Candidate:
    meta = json.loads(meta_json)
    spec = json.loads(spec_json)
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        raise SpecError("its metadata or spec is not a JSON object")
    co = meta.get("code_object")
    if co is not None:
        record.check_resources(co)
    return Candidate(key, sha, family, MappingProxyType(spec), arch, lane, profile, gen or "", is_current,
                     Resources.from_code_object(co, info, block_size=launch_block_size(meta.get("launch"))),
                     datetime.fromtimestamp(built_at, tz=timezone.utc))


def _chunks(seq: list[str], n: int) -> Iterator[list[str]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def origin_of(provenance: Any) -> str | None:
    """The server an artifact was fetched from (provenance "origin" {"source": URL}, written by
    service/client.py), None for one built or imported here."""
    o = provenance.get("origin") if isinstance(provenance, Mapping) else None
    src = o.get("source") if isinstance(o, Mapping) else None
    return src.rstrip("/") if isinstance(src, str) else None


class Store:
    """A cache store. Open with :meth:`Store.open`; use as a context manager or call close()."""

    def __init__(self, url: str, engine, *, level: int, max_bytes: int | None, touch_interval: float,
                 readonly: bool = False):
        self.url = url
        self.engine = engine
        self.level = level
        self.max_bytes = max_bytes
        self.touch_interval = touch_interval
        self.readonly = readonly
        self._dicts = blobs.Dicts()
        # Read times wait here and are written in one transaction per touch_interval (never
        # one write per get); a read-only store keeps none.
        self._touches: dict[str, float] = {}
        self._touch_flushed = time.time()
        self._candidate_memo: dict[str, Candidate] = {}
        # Parsed candidate lists per query shape, valid while the database has not changed
        # (SQLite only, see _unchanged_since_last_look); the lock keeps check + fill atomic.
        self._candidate_lists: dict[tuple, tuple[Candidate, ...]] = {}
        self._seen_conns: dict[Any, tuple[int, int]] = {}
        self._candidate_lock = threading.Lock()
        self.malformed_rows = 0  # rows candidates() skipped (logged); the service exports it

    @classmethod
    def open(
        cls,
        url: str | os.PathLike | None = None,
        *,
        level: int = codec.DEFAULT_LEVEL,
        max_bytes: int | None = None,
        touch_interval: float = 60.0,
        create: bool = True,
        readonly: bool = False,
    ) -> "Store":
        """Open (creating or upgrading through Alembic) the store at ``url``.

        ``url`` None -> ``$ROCKE_AOT_CACHE`` -> ``$ROCKE_AOT_HOME/cache.sqlite`` -> the user
        cache dir. ``max_bytes`` (or ``$ROCKE_AOT_CACHE_MAX_BYTES``) caps the stored bytes:
        puts beyond it evict least-recently-read artifacts.

        ``readonly``: no write ever (a read-only SQLite file or PostgreSQL role works; read
        times are not recorded; every write method raises ReadOnlyError). The schema must
        already be at head: a read-only store is never migrated.
        """
        resolved = db.resolve_url(url)
        if max_bytes is None:
            max_bytes = settings.integer(ENV_MAX_BYTES)
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
            raise CacheError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        if readonly and resolved.startswith("sqlite"):
            path = resolved.split(":///", 1)[1]
            if not os.path.isfile(path):
                raise NotFoundError(f"no cache at {path}: a read-only store is never created (build one first)")
        engine = db.make_engine(resolved, readonly=readonly)
        try:
            db.ensure_schema(engine, resolved, create=create and not readonly)
        except Exception:
            engine.dispose()
            raise
        return cls(resolved, engine, level=level, max_bytes=max_bytes, touch_interval=touch_interval,
                   readonly=readonly)

    def close(self) -> None:
        try:
            self.flush_reads()
        finally:
            self.engine.dispose()

    def _writable(self, what: str) -> None:
        if self.readonly:
            raise ReadOnlyError(f"{self} is open read-only: {what} refused (open it without readonly=True)")

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({db.display_url(self.url)!r})"

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    # ---- writes -------------------------------------------------------------------------

    def put(
        self,
        inputs: KeyInputs,
        code_object: bytes,
        *,
        ir_sha256: str,
        metadata: Mapping[str, Any],
        provenance: Mapping[str, Any],
        replace: bool = False,
        ptx: str | None = None,
        triton_files: Mapping[str, bytes] | None = None,
    ) -> Artifact:
        """Publish a code object under the key of ``inputs``; blob and row in one transaction.

        Idempotent: the same inputs and bytes again return the stored artifact. The same
        inputs with *different* bytes are refused (the key misses an input, or the build is
        not deterministic) unless ``replace`` (a forced rebuild). A success replaces a
        cached failure of the same key. The code object is also kept under its own key
        (keys.code_object_key: what the compiler consumed), with ``ptx`` for a cubin, so a
        later plan whose IR is the same reuses it without compiling.
        """
        self._writable("put")
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"put needs KeyInputs, got {type(inputs).__name__}")
        if not isinstance(code_object, (bytes, bytearray, memoryview)) or len(code_object) == 0:
            raise SpecError("put needs a non-empty code object (bytes)")
        if not isinstance(ir_sha256, str) or not _SHA_RE.match(ir_sha256):
            raise SpecError(f"ir_sha256 must be 64 lowercase hex digits, got {ir_sha256!r}")
        record.check_metadata(metadata)  # the one record schema, before anything is written
        record.check_provenance(provenance)
        raw = bytes(code_object)
        key = artifact_key(inputs)
        sha = codec.sha256_hex(raw)
        dict_id, zdict = self._dicts.current(self.engine, inputs.arch, inputs.family)
        stored = codec.encode(raw, self.level, zdict)  # outside the write lock: it is the slow part
        cod = codec.CODEC if zdict is None else codec.CODEC_DICT
        code_key = code_key_of(inputs, ir_sha256)
        info = {"format": metadata.get("format"), **({"ptx": ptx} if ptx is not None else {}),
                **({"triton": metadata["triton"]} if metadata.get("triton") is not None else {})}
        entry = self._triton_entry(metadata, raw, triton_files)
        row = {
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
        }
        with db.write_tx(self.engine) as conn:
            now = time.time()
            row["built_at"] = row["last_read_at"] = now
            row["generation"] = generations.register(conn, _insert_ignore, inputs, now)
            blobs.publish_blob(conn, self._dicts, sha, raw, stored, cod, dict_id, now)
            code_objects.put_ok(conn, _insert_ignore, code_key, inputs, ir_sha256, sha, info, now)
            _publish_artifact(conn, row, replace=replace)
            if entry is not None:  # the Triton cache entry a GPU host looks up, in the same transaction
                triton_entries.publish(conn, _insert_ignore, entry["key"], entry["files"],
                                       triton_version=entry["triton_version"], target=entry["target"],
                                       artifact_key=key, source="build",
                                       put_blob=lambda data: self._put_blob(conn, data, inputs.arch, inputs.family, now))
            generations.reserve_spec(conn, inputs.arch, inputs.lane, inputs.family, inputs.spec_json)
            out = conn.execute(_Q_ROW, {"k": key}).mappings().one()
        art = to_artifact(out, code_object=raw)
        if self.max_bytes is not None and self.stored_bytes() > self.max_bytes:
            self.evict(self.max_bytes)
        return art

    def _triton_entry(self, metadata: Mapping[str, Any], raw: bytes,
                      files: Mapping[str, bytes] | None) -> dict[str, Any] | None:
        """The Triton cache entry of a Triton build's put (None for any other artifact)."""
        entry = metadata.get("triton")
        if entry is None:
            return None
        name = entry["name"]
        json_text = (files or {}).get(f"{name}.json")
        if json_text is None:
            if files is None:  # a code object reused by another plan key: its entry is stored already
                return None
            raise SpecError(f"a Triton build of {name} must store its {name}.json")
        if codec.sha256_hex(json_text) != entry["files"].get(f"{name}.json") or \
                codec.sha256_hex(raw) != entry["files"].get(entry["binary"]):
            raise SpecError(f"Triton entry {entry['key']}: its files' sha256 are not the ones its record states")
        return {"key": entry["key"], "triton_version": entry["triton_version"],
                "target": triton_entries.target_name(entry["target"]),
                "files": triton_entries.entry_files(entry, json_text, raw)}

    def _put_blob(self, conn: Connection, data: bytes, arch: str, family: str, now: float) -> str:
        sha = codec.sha256_hex(data)
        dict_id, zdict = self._dicts.current(self.engine, arch, family)
        cod = codec.CODEC if zdict is None else codec.CODEC_DICT
        blobs.publish_blob(conn, self._dicts, sha, data, codec.encode(data, self.level, zdict), cod, dict_id, now)
        return sha

    def put_triton_entry(self, key: str, files: Mapping[str, bytes], *, triton_version: str, target: str,
                         artifact_key: str | None = None, source: str = "host") -> None:
        """Store a Triton cache entry (a GPU host's publish: every file it put under ``key``)."""
        self._writable("put a Triton entry")
        with db.write_tx(self.engine) as conn:
            now = time.time()
            triton_entries.publish(conn, _insert_ignore, key, files, triton_version=triton_version, target=target,
                                   artifact_key=artifact_key, source=source,
                                   put_blob=lambda data: self._put_blob(conn, data, "triton", "triton", now), now=now)

    def triton_entry(self, key: str) -> dict[str, "triton_entries.EntryFile"]:
        """{filename: EntryFile} of the Triton entry under ``key`` (empty when there is none)."""
        with db.read_tx(self.engine) as conn:
            return triton_entries.lookup(conn, key)

    def put_failure(self, inputs: KeyInputs, error: str, log: str = "", *, ir_sha256: str | None = None) -> Hit:
        """Record that building ``inputs`` failed, so builds skip it unless forced.

        A key that already holds an artifact keeps it (a good binary is never shadowed by a
        later flaky failure): the returned Hit then has kind 'artifact'. ``ir_sha256`` (the
        compiler refused this IR, rather than the lowering failing): the refusal is kept under
        the code-object key too, so the same IR under another recipe is not compiled again.
        """
        self._writable("put_failure")
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"put_failure needs KeyInputs, got {type(inputs).__name__}")
        if not isinstance(error, str) or not error:
            raise SpecError("put_failure needs a non-empty error message")
        if not isinstance(log, str):
            raise SpecError(f"log must be a string, got {type(log).__name__}")
        if ir_sha256 is not None and (not isinstance(ir_sha256, str) or not _SHA_RE.match(ir_sha256)):
            raise SpecError(f"ir_sha256 must be 64 lowercase hex digits, got {ir_sha256!r}")
        key = artifact_key(inputs)
        code_key = None if ir_sha256 is None else code_key_of(inputs, ir_sha256)
        with db.write_tx(self.engine) as conn:
            now = time.time()
            gen = generations.register(conn, _insert_ignore, inputs, now)
            if code_key is not None:
                code_objects.put_failed(conn, _insert_ignore, code_key, inputs, ir_sha256, error, now)
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
                    toolchain_json=inputs.toolchain_json, options_json=inputs.options_json, metadata_json="{}", provenance_json="{}", **values,
                ))
            else:
                conn.execute(update(A).where(A.c.key == key).values(**values))
        return Hit(key, "failure", error=error)

    # ---- reads --------------------------------------------------------------------------

    def get(self, key: str) -> Artifact:
        """The artifact with verified ``code_object``; NotFoundError / IntegrityError."""
        check_key(key)
        with db.read_tx(self.engine) as conn:
            row = conn.execute(_Q_GET, {"k": key}).mappings().first()
            if row is None:
                raise NotFoundError(f"no artifact {key} in {self}")
            if row["status"] != "ok":
                raise NotFoundError(f"{key} is a cached build failure, not an artifact: {row['error']}")
            if row["data"] is None:  # the foreign key forbids it; a hand-edited store may not
                raise IntegrityError(f"artifact {key}: its blob {row['blob_sha256']} is missing")
            raw = self._dicts.decode(conn, row["blob_sha256"], row["size"], row["codec"], row["stored_size"],
                                     row["data"], row["dict_id"])
        now = time.time()
        last = row["last_read_at"]
        if not self.readonly and (last is None or now - last >= self.touch_interval):
            self._touches[key] = now
            row = {**row, "last_read_at": now}
            if now - self._touch_flushed >= self.touch_interval or len(self._touches) >= 4096:
                self.flush_reads()
        return to_artifact(row, code_object=raw)

    def record(self, key: str) -> Artifact:
        """The artifact's record without its bytes and without a read-time write (the service's
        kernel lookup); the same checks as get(): NotFoundError, IntegrityError (blob missing)."""
        check_key(key)
        with db.read_tx(self.engine) as conn:
            row = conn.execute(_Q_ROW, {"k": key}).mappings().first()
        if row is None:
            raise NotFoundError(f"no artifact {key} in {self}")
        if row["status"] != "ok":
            raise NotFoundError(f"{key} is a cached build failure, not an artifact: {row['error']}")
        if row["size"] is None:
            raise IntegrityError(f"artifact {key}: its blob {row['blob_sha256']} is missing")
        return to_artifact(row)

    def flush_reads(self) -> int:
        """Write the pending read times in one transaction (eviction order); close() calls it."""
        pending, self._touches = self._touches, {}
        self._touch_flushed = time.time()
        if not pending or self.readonly:
            return 0
        with db.write_tx(self.engine) as conn:
            conn.execute(_U_TOUCH, [{"k": k, "t": t} for k, t in sorted(pending.items())])
        return len(pending)

    def get_failure(self, key: str) -> Failure:
        check_key(key)
        with db.read_tx(self.engine) as conn:
            row = conn.execute(select(A).where(A.c.key == key)).mappings().first()
        if row is None or row["status"] != "failed":
            raise NotFoundError(f"no cached failure {key} in {self}")
        return to_failure(row)

    def lookup_many(self, keys: Iterable[str]) -> dict[str, Hit]:
        """For each present key: artifact or cached failure. Bulk, chunked; no blob is read."""
        wanted = list(keys)
        if not _all_keys(wanted):
            for k in wanted:
                check_key(k)  # raises, naming the bad key
        # Sorted: neighbouring keys share index pages (measured 1.3x on 10,000 keys).
        wanted = sorted(set(wanted))
        out: dict[str, Hit] = {}
        with db.read_tx(self.engine) as conn:
            # Straight to the DBAPI cursor: at 10,000 keys, SQLAlchemy's rendering of an
            # expanding IN list and its Row objects cost more than the index lookups.
            cur = conn.connection.dbapi_connection.cursor()
            failed: list[str] = []
            try:
                for chunk in _chunks(wanted, LOOKUP_CHUNK):
                    cur.execute(_lookup_sql(conn.dialect.name, len(chunk)), chunk)
                    for key, status, sha in cur.fetchall():
                        if status == "ok":
                            out[key] = Hit(key, "artifact", sha)
                        else:
                            failed.append(key)
            finally:
                cur.close()
            # Failures are few; their messages come from the table in a second pass.
            for chunk in _chunks(failed, LOOKUP_CHUNK):
                for key, error in conn.execute(select(A.c.key, A.c.error).where(A.c.key.in_(chunk))):
                    out[key] = Hit(key, "failure", None, error)
        return out

    def find(
        self,
        arch: str | None = None,
        lane: str | None = None,
        family: str | None = None,
        profile: str | None = None,
        *,
        status: str = "ok",
        key_prefix: str | None = None,
        limit: int | None = None,
    ) -> list[Artifact | Failure]:
        """List artifacts (``status='ok'``), failures ('failed') or both ('all'); no blobs."""
        if status not in ("ok", "failed", "all"):
            raise SpecError(f"status must be 'ok', 'failed' or 'all', got {status!r}")
        conds = []
        if arch is not None:
            from rocke_aot.targets import Target

            conds.append(A.c.arch == Target.parse(arch).id)
        for col, val in ((A.c.lane, lane), (A.c.family, family), (A.c.profile, profile)):
            if val is not None:
                if not isinstance(val, str):
                    raise SpecError(f"filter {col.name} must be a string, got {val!r}")
                conds.append(col == val)
        if status != "all":
            conds.append(A.c.status == status)
        if key_prefix is not None:
            if not isinstance(key_prefix, str) or not re.match(r"^[0-9a-f]{1,64}$", key_prefix):
                raise SpecError(f"a key prefix is lowercase hex, got {key_prefix!r}")
            conds.append(A.c.key.like(key_prefix + "%"))
        stmt = select(*_ROW).select_from(_ROW_FROM).where(and_(True, *conds))
        stmt = stmt.order_by(A.c.arch, A.c.lane, A.c.family, A.c.key)
        if limit is not None:
            stmt = stmt.limit(limit)
        with db.read_tx(self.engine) as conn:
            rows = conn.execute(stmt).mappings().all()
        return [to_artifact(r) if r["status"] == "ok" else to_failure(r) for r in rows]

    def resolve_key(self, prefix: str) -> str:
        """The one key starting with ``prefix`` (for the CLI); NotFoundError or SpecError."""
        if not isinstance(prefix, str) or not re.match(r"^[0-9a-f]{4,64}$", prefix):
            raise SpecError(f"give at least 4 lowercase hex digits of a key, got {prefix!r}")
        with db.read_tx(self.engine) as conn:
            keys = conn.execute(select(A.c.key).where(A.c.key.like(prefix + "%")).limit(2)).scalars().all()
        if not keys:
            raise NotFoundError(f"no artifact or failure whose key starts with {prefix} in {self}")
        if len(keys) > 1:
            raise SpecError(f"key prefix {prefix} is ambiguous; give more digits")
        return keys[0]

    def stored_bytes(self) -> int:
        with db.read_tx(self.engine) as conn:
            return int(conn.execute(select(func.coalesce(func.sum(B.c.stored_size), 0))).scalar())

    def stats(self) -> StoreStats:
        with db.read_tx(self.engine) as conn:
            counts = dict(conn.execute(select(A.c.status, func.count()).group_by(A.c.status)).all())
            nblobs, raw, stored = conn.execute(
                select(func.count(), func.coalesce(func.sum(B.c.size), 0), func.coalesce(func.sum(B.c.stored_size), 0))
            ).one()
            referenced = conn.execute(
                select(func.coalesce(func.sum(B.c.size), 0)).select_from(A.join(B, A.c.blob_sha256 == B.c.sha256))
            ).scalar()
            orphans = conn.execute(select(func.count()).select_from(B).where(~blobs.referenced(B.c.sha256))).scalar()
            by = conn.execute(
                select(A.c.arch, A.c.lane, func.count()).where(A.c.status == "ok")
                .group_by(A.c.arch, A.c.lane).order_by(A.c.arch, A.c.lane)
            ).all()
        return StoreStats(
            url=db.display_url(self.url), backend=self.backend, schema_version=models.SCHEMA_VERSION,
            artifacts=counts.get("ok", 0), failures=counts.get("failed", 0), blobs=nblobs,
            raw_bytes=int(raw), stored_bytes=int(stored), referenced_raw_bytes=int(referenced),
            orphan_blobs=orphans, by_arch_lane=tuple((a, l, n) for a, l, n in by), max_bytes=self.max_bytes,
        )

    def verify(self, batch: int = 256) -> VerifyReport:
        """Decode every blob (decompress + size + sha256) and recompute every key."""
        corrupt: list[tuple[str, str]] = []
        checked = 0
        last = ""
        while True:  # keyset pages, so a huge store never sits in memory at once
            with db.read_tx(self.engine) as conn:
                page = conn.execute(
                    select(B.c.sha256, B.c.size, B.c.codec, blob_data, B.c.stored_size, B.c.dict_id)
                    .where(B.c.sha256 > last).order_by(B.c.sha256).limit(batch)
                ).all()
                for sha, size, cod, data, stored_size, dict_id in page:
                    checked += 1
                    try:
                        self._dicts.decode(conn, sha, size, cod, stored_size, data, dict_id)
                    except IntegrityError as e:
                        corrupt.append((sha, str(e)))
            if not page:
                break
            last = page[-1][0]
        bad_sha = {s for s, _ in corrupt}
        affected: list[str] = []
        bad_keys: list[tuple[str, str]] = []
        bad_records: list[tuple[str, str]] = []
        origins: dict[str, int] = {}
        with db.read_tx(self.engine) as conn:
            rows = conn.execute(select(*_ROW, B.c.sha256.label("present")).select_from(_ROW_FROM)).mappings().all()
            orphans = conn.execute(select(func.count()).select_from(B).where(~blobs.referenced(B.c.sha256))).scalar()
        for r in rows:
            if r["status"] == "ok" and (r["present"] is None or r["blob_sha256"] in bad_sha):
                affected.append(r["key"])
            try:
                inputs = (to_artifact(r) if r["status"] == "ok" and r["present"] else to_failure(r)).inputs
                want = artifact_key(inputs)
                if want != r["key"]:
                    bad_keys.append((r["key"], f"stored inputs hash to {want}"))
            except Exception as e:  # noqa: BLE001 - any unreadable row is reported, not raised
                bad_keys.append((r["key"], f"unreadable inputs: {type(e).__name__}: {e}"))
            if r["status"] != "ok":
                continue
            try:  # the one record schema, as on every put (a row written before it, or by hand)
                prov = json.loads(r["provenance_json"])
                record.check_metadata(json.loads(r["metadata_json"]))
                record.check_provenance(prov)
            except (ValueError, RecursionError, SpecError) as e:
                bad_records.append((r["key"], f"{type(e).__name__}: {e}"))
                continue
            src = origin_of(prov)
            if src is not None:
                origins[src] = origins.get(src, 0) + 1
        return VerifyReport(checked, len(rows), tuple(corrupt), tuple(sorted(affected)), tuple(bad_keys), orphans,
                            tuple(bad_records), tuple(sorted(origins.items(), key=lambda x: (-x[1], x[0]))))

    def purge(self, origin: str) -> GcReport:
        """Drop every artifact whose provenance says a client fetched it from ``origin`` (a server
        URL; service/client.py records it), hand each served spec to the next-best generation's
        row, then delete the blobs nothing references any more."""
        self._writable("purge")
        if not isinstance(origin, str) or not origin.startswith(("http://", "https://")):
            raise SpecError(f"an origin is the URL of a server (http:// or https://), got {origin!r}")
        want = origin.rstrip("/")
        with db.write_tx(self.engine, exclusive=True) as conn:
            rows = conn.execute(select(A.c.key, A.c.provenance_json).where(A.c.status == "ok")).all()
            victims = []
            for key, text in rows:
                try:
                    if origin_of(json.loads(text)) == want:
                        victims.append(key)
                except (ValueError, RecursionError):
                    continue  # unreadable provenance: verify reports it
            for chunk in _chunks(victims, LOOKUP_CHUNK):
                conn.execute(delete(A).where(A.c.key.in_(chunk)))
            generations.reserve_groups(conn)
            n, freed = blobs.delete_orphans(conn)
            after = int(conn.execute(select(func.coalesce(func.sum(B.c.stored_size), 0))).scalar())
        return GcReport(len(victims), n, freed, after)

    # ---- selection, generations, paging ------------------------------------------------

    def candidates(self, family: str, device: object, lanes: Iterable[str] | None = None, *,
                   compatible_only: bool = True, current_only: bool = False) -> tuple[Candidate, ...]:
        """The stored artifacts of ``family`` that a ``device`` target ID may run, as Candidates.

        One query over artifacts; each row's ``current`` is its served flag (the row of its
        spec that the best-ranked generation built: cache/generations.py). ``compatible_only``
        False also returns the processor's other target IDs (selection then rejects them,
        naming why); ``current_only`` leaves rows that are not served out in SQL. Resources come from the stored metadata's "code_object"
        section (the work-group size from its "launch" block); rows are immutable per (key,
        blob), so each is parsed once per Store.
        """
        if not isinstance(family, str):
            raise SpecError(f"family must be a string, got {family!r}")
        target = Target.parse(device)
        ids = compatible_ids(target) if compatible_only else _processor_ids(target)
        lane_list = None if lanes is None else sorted(set(lanes))
        if lane_list is not None and not all(isinstance(x, str) for x in lane_list):
            raise SpecError(f"lanes must be lane names, got {lane_list!r}")
        if lane_list == []:
            return ()
        dialect = self.engine.dialect.name
        sql = _candidates_sql(dialect, len(ids), None if lane_list is None else len(lane_list), current_only)
        params = [family, *ids, *(lane_list or ())]
        if dialect != "sqlite":  # no cheap change stamp on PostgreSQL: query every time
            with db.read_tx(self.engine) as conn:
                return tuple(self._candidate_rows(conn, sql, params, family, target))
        shape = (sql, tuple(params))
        with self._candidate_lock, db.read_tx(self.engine) as conn:
            if not self._unchanged_since_last_look(conn):
                self._candidate_lists.clear()
            got = self._candidate_lists.get(shape)
            if got is None:
                if len(self._candidate_lists) > 4096:
                    self._candidate_lists.clear()
                got = self._candidate_lists[shape] = tuple(self._candidate_rows(conn, sql, params, family, target))
            return got

    def _unchanged_since_last_look(self, conn: Connection) -> bool:
        """Whether no transaction has committed to the database since this connection last looked.

        SQLite's ``PRAGMA data_version`` moves when another connection (any process) commits,
        ``total_changes()`` when this one does; a connection seen for the first time proves
        nothing. If anything committed after a list was filled, the first look after that commit,
        on whichever pooled connection, differs from that connection's previous look (taken before
        the commit), so the lists are dropped before any is served: a build that moves a ref, a
        put, a publish, gc, eviction, an import all refill them. Connections are held (not their
        ids: a new connection could reuse a dead one's id); the pool keeps few, the dict is bounded.
        """
        raw = conn.connection.dbapi_connection
        cur = raw.cursor()
        try:
            cur.execute("SELECT data_version, total_changes() FROM pragma_data_version")
            stamp = tuple(cur.fetchone())
        finally:
            cur.close()
        seen = self._seen_conns
        same = seen.get(raw) == stamp
        if not same:
            if len(seen) > 64:
                seen.clear()
            seen[raw] = stamp
        return same

    def _candidate_rows(self, conn: Connection, sql: str, params: list, family: str, target: Target) -> list[Candidate]:
        memo = self._candidate_memo
        if len(memo) > 200_000:  # rows are small, but a long-lived service must not grow without bound
            memo.clear()
        info = target.info
        out = []
        cur = conn.connection.dbapi_connection.cursor()
        try:
            cur.execute(sql, params)
            rows = cur.fetchall()
        finally:
            cur.close()
        for key, sha, arch, lane, profile, spec_json, gen, meta_json, built_at, served in rows:
            is_current = bool(served)
            c = memo.get(key)
            # A key's row is immutable except for a forced rebuild (new blob) and its served flag.
            if c is None or c.blob_sha256 != sha or c.current is not is_current or c.family != family:
                try:
                    c = _candidate(key, sha, family, arch, lane, profile, gen, is_current, spec_json, meta_json,
                                   built_at, info)
                except (RockeError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
                    # One malformed row (written before the record schema, or by hand) must not
                    # fail the family for everyone: it is skipped, logged and counted.
                    self.malformed_rows += 1
                    log.error("store %s: artifact %s skipped by select, its row is malformed (%s: %s)",
                              self, key, type(e).__name__, e)
                    continue
                memo[key] = c
            out.append(c)
        return out

    def candidates_bare_sql(self, family: str, device: object, lanes: Iterable[str] | None = None) -> tuple[str, list]:
        """The SQL and parameters Store.candidates runs (for bench/bench_select.py's baseline)."""
        target = Target.parse(device)
        ids = _processor_ids(target)
        lane_list = None if lanes is None else sorted(set(lanes))
        return (_candidates_sql(self.engine.dialect.name, len(ids), None if lane_list is None else len(lane_list),
                                False), [family, *ids, *(lane_list or ())])

    def current_generation(self, arch: str, lane: str, family: str) -> str | None:
        """The newest complete generation of (arch, lane, family), or None."""
        with db.read_tx(self.engine) as conn:
            return generations.newest_complete(conn).get((Target.parse(arch).id, lane, family))

    def generations(self, arch: str | None = None, lane: str | None = None,
                    family: str | None = None) -> list[generations.Generation]:
        """Every generation with its artifact, failure and served counts, and whether it is the
        newest complete one of its (arch, lane, family)."""
        with db.read_tx(self.engine) as conn:
            return generations.listing(conn, None if arch is None else Target.parse(arch).id, lane, family)

    def complete_generation(self, generation: str) -> None:
        """Mark ``generation`` complete (a build that planned into it ran to the end): it then
        serves every spec it holds ahead of older generations. NotFoundError if unknown."""
        self._writable("complete_generation")
        with db.write_tx(self.engine) as conn:
            if not generations.complete(conn, generation, time.time()):
                raise NotFoundError(f"no generation {generation} in {self}")

    def gc_generations(self, keep: int = 0) -> GcReport:
        """Per (arch, lane, family), keep the best-ranked generation and ``keep`` more whole; of
        the older ones drop every row nothing serves (a served row is never dropped), the
        generations left empty, the code objects and blobs nothing references any more."""
        self._writable("gc")
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise SpecError(f"keep must be a non-negative int, got {keep!r}")
        with db.write_tx(self.engine, exclusive=True) as conn:
            keys, gone = generations.shadowed(conn, keep)
            n = generations.drop(conn, keys, gone, LOOKUP_CHUNK)
            deleted, freed = blobs.delete_orphans(conn)
            after = int(conn.execute(select(func.coalesce(func.sum(B.c.stored_size), 0))).scalar())
        self._candidate_memo.clear()
        return GcReport(n, deleted, freed, after, tuple(gone))

    # ---- code objects and claims ---------------------------------------------------------

    def lookup_code_objects(self, keys: Iterable[str]) -> dict[str, CodeHit]:
        """For each present code-object key: its blob (and format, PTX) or the compiler's refusal."""
        wanted = sorted(set(keys))
        for k in wanted:
            check_key(k)
        with db.read_tx(self.engine) as conn:
            return code_objects.lookup(conn, wanted, LOOKUP_CHUNK)

    def claim(self, keys: Iterable[str], holder: str, lease_s: float) -> list[str]:
        """Lease ``keys`` for ``holder`` for ``lease_s`` seconds where no other holder has a live
        lease (cache/claims.py); the keys now ours."""
        self._writable("claim")
        wanted = sorted(set(keys))
        with db.write_tx(self.engine, exclusive=True) as conn:
            return claims.claim(conn, wanted, holder, time.time(), lease_s, LOOKUP_CHUNK)

    def renew_claims(self, keys: Iterable[str], holder: str, lease_s: float) -> int:
        self._writable("claim")
        with db.write_tx(self.engine) as conn:
            return claims.renew(conn, sorted(set(keys)), holder, time.time(), lease_s, LOOKUP_CHUNK)

    def release_claims(self, keys: Iterable[str], holder: str) -> int:
        self._writable("claim")
        with db.write_tx(self.engine) as conn:
            return claims.release(conn, sorted(set(keys)), holder, LOOKUP_CHUNK)

    def claimed_by_others(self, keys: Iterable[str], holder: str) -> set[str]:
        with db.read_tx(self.engine) as conn:
            return claims.held_by_others(conn, sorted(set(keys)), holder, time.time(), LOOKUP_CHUNK)

    def get_blob(self, sha256: str) -> bytes:
        """The verified raw bytes of one blob by its sha256 (immutable content URLs)."""
        if not isinstance(sha256, str) or not _SHA_RE.match(sha256):
            raise SpecError(f"a blob id is 64 lowercase hex digits, got {sha256!r}")
        with db.read_tx(self.engine) as conn:
            row = conn.execute(select(B.c.size, B.c.codec, B.c.stored_size, blob_data, B.c.dict_id)
                               .where(B.c.sha256 == sha256)).first()
            if row is None:
                raise NotFoundError(f"no blob {sha256} in {self}")
            size, cod, stored_size, data, dict_id = row
            return self._dicts.decode(conn, sha256, size, cod, stored_size, data, dict_id)

    def list_artifacts(self, *, arch: str | None = None, lane: str | None = None, family: str | None = None,
                       cursor: str | None = None, limit: int = 100,
                       current_only: bool = True) -> tuple[list[Artifact], str | None]:
        """One page of artifacts in key order after ``cursor``, and the cursor of the next page
        (None at the end). Keyset paging: a page costs the same at any depth, and a concurrent
        put never shifts a page. ``current_only``: only served rows (what select serves)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise SpecError(f"limit must be an int within 1..10000, got {limit!r}")
        if cursor is not None and (not isinstance(cursor, str) or not _SHA_RE.match(cursor)):
            raise SpecError(f"cursor must be a key (64 lowercase hex digits) from a previous page, got {cursor!r}")
        conds = [A.c.status == "ok"]
        if arch is not None:
            conds.append(A.c.arch == Target.parse(arch).id)
        for col, val in ((A.c.lane, lane), (A.c.family, family)):
            if val is not None:
                if not isinstance(val, str):
                    raise SpecError(f"filter {col.name} must be a string, got {val!r}")
                conds.append(col == val)
        if cursor is not None:
            conds.append(A.c.key > cursor)
        if current_only:
            conds.append(A.c.served == 1)
        stmt = select(*_ROW).select_from(_ROW_FROM)
        stmt = stmt.where(and_(*conds)).order_by(A.c.key).limit(limit + 1)
        with db.read_tx(self.engine) as conn:
            rows = conn.execute(stmt).mappings().all()
        page = [to_artifact(r) for r in rows[:limit]]
        return page, (page[-1].key if len(rows) > limit else None)

    # ---- space --------------------------------------------------------------------------

    def gc(self) -> GcReport:
        """Delete blobs that no artifact references."""
        self._writable("gc")
        with db.write_tx(self.engine, exclusive=True) as conn:
            n, freed = blobs.delete_orphans(conn)
            after = conn.execute(select(func.coalesce(func.sum(B.c.stored_size), 0))).scalar()
        return GcReport(0, n, freed, int(after))

    def evict(self, max_bytes: int) -> GcReport:
        """Drop least-recently-read artifacts until the stored blobs fit in ``max_bytes``.

        Failures hold no blob and are not evicted. Blobs shared by several artifacts are
        freed only when their last artifact goes.
        """
        self._writable("evict")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise CacheError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.flush_reads()  # eviction orders by read time: the pending ones count
        with db.write_tx(self.engine, exclusive=True) as conn:
            deleted, freed = blobs.delete_orphans(conn)
            total = int(conn.execute(select(func.coalesce(func.sum(B.c.stored_size), 0))).scalar())
            victims: list[str] = []
            if total > max_bytes:
                rows = conn.execute(
                    select(A.c.key, A.c.blob_sha256, B.c.stored_size)
                    .select_from(A.join(B, A.c.blob_sha256 == B.c.sha256))
                    .order_by(A.c.last_read_at, A.c.built_at, A.c.key)
                ).all()
                refs: dict[str, int] = {}
                for _, sha, _ in rows:
                    refs[sha] = refs.get(sha, 0) + 1
                for key, sha, stored_size in rows:
                    if total <= max_bytes:
                        break
                    victims.append(key)
                    refs[sha] -= 1
                    if refs[sha] == 0:
                        total -= stored_size
                for chunk in _chunks(victims, LOOKUP_CHUNK):
                    conn.execute(delete(A).where(A.c.key.in_(chunk)))
                # An evicted served row hands its spec to the next-best generation's row, if any.
                generations.reserve_groups(conn)
                n, more = blobs.delete_orphans(conn)
                deleted += n
                freed += more
            after = int(conn.execute(select(func.coalesce(func.sum(B.c.stored_size), 0))).scalar())
        return GcReport(len(victims), deleted, freed, after)

    # ---- bundles ------------------------------------------------------------------------

    def train_dictionaries(self, **kw: Any) -> list[dict[str, Any]]:
        """Train a zstd dictionary per (arch, family) where it pays and recompress that pair's
        blobs with it (see cache/blobs.py; measured in docs/cache.md). New puts of the pair use it."""
        self._writable("train-dicts")
        return blobs.train(self, **kw)

    def export(self, path: str | os.PathLike, **filters: Any) -> dict[str, Any]:
        from rocke_aot.cache.bundle import export_bundle

        return export_bundle(self, path, **filters)

    def import_(self, path: str | os.PathLike, *, check=None, failures: bool = False) -> dict[str, Any]:
        """Import a bundle, all or nothing (cache/bundle.py): ``check(code, arch)`` validates
        each code object and returns its resources (the CLI passes aot's validation; without
        it only the record schema and the hashes are checked); ``failures`` imports its
        failure records too."""
        from rocke_aot.cache.bundle import import_bundle

        self._writable("import")
        out = import_bundle(self, path, check=check, failures=failures)
        with db.write_tx(self.engine) as conn:  # imported rows join the generation of their inputs
            now = time.time()
            touched = generations.backfill(conn, _insert_ignore, now)
            code_objects.backfill(conn, _insert_ignore, now)
            generations.reserve_groups(conn, touched)
        return out


def _publish_artifact(conn: Connection, row: dict[str, Any], *, replace: bool) -> None:
    key = row["key"]
    for _ in range(2):  # a concurrent PostgreSQL insert of the same key is seen on the retry
        cur = conn.execute(_Q_STATUS, {"k": key}).first()
        if cur is None:
            res = conn.execute(_insert_ignore(conn, A), row)
            if res.rowcount == 1:
                return
            continue
        if cur.status == "ok" and cur.blob_sha256 == row["blob_sha256"]:
            return  # idempotent: same inputs, same bytes
        if cur.status == "ok" and not replace:
            raise CacheError(
                f"artifact {key} already holds code object {cur.blob_sha256}, and the same key inputs "
                f"now gave {row['blob_sha256']}: the build is not deterministic or the key misses an "
                f"input. Refusing to overwrite (pass replace=True for a forced rebuild)."
            )
        values = {k: v for k, v in row.items() if k != "key"}
        conn.execute(update(A).where(A.c.key == key).values(**values))
        return
    raise CacheError(f"artifact {key}: could not insert or read it back")
