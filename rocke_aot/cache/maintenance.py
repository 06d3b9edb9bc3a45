"""The maintenance part of a store: reports over every table, and what takes rows away on purpose.

    stats() ── counts by status, blob bytes (raw, stored, referenced), orphans, per (arch, lane)
    verify() ── keyset pages over blobs: Blobs.decode each (decompress + size + sha256), then
                every row's key recomputed from its stored inputs, every record checked against
                the record schema, the artifacts counted per origin (the server a client fetched
                them from) -> VerifyReport (never raises for a bad row: it is reported)
    gc() ── ONE exclusive write transaction: code objects no row points at, then blobs no
            artifact row holds (cache/blobs.py delete_orphans)
    gc_generations(keep) ── per (arch, lane, family) keep the best-ranked generation and ``keep``
            more; of the older ones drop every row nothing serves, the generations left empty,
            then the orphans as gc (cache/generations.py: a served row is never dropped)
    purge(origin) ── drop the artifacts a client fetched from that server (provenance "origin",
            service/client.py), hand their served specs on, then the orphans as gc: a poisoned
            local store is cleaned
    evict(max_bytes) ── pending read times flushed first (eviction orders by them), then ONE
            exclusive write transaction: least-recently-read rows go until the stored blobs fit
            (a blob shared by several rows is freed with its last), each evicted served row
            hands its spec to the next-best generation's row, then the orphans as gc

SQLite: BEGIN IMMEDIATE (db.write_tx); PostgreSQL: the exclusive advisory lock, so a gc never
deletes a blob a concurrent put has just decided to reuse.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, func, select

from rocke_aot import record
from rocke_aot.boundedjson import is_int
from rocke_aot.cache import blobs, db, generations, models
from rocke_aot.cache.artifacts import ROW, ROW_FROM, Artifacts, origin_of
from rocke_aot.cache.blobs import Blobs
from rocke_aot.cache.keys import artifact_key
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import blob_data
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.records import GcReport, StoreStats, VerifyReport, to_artifact, to_failure
from rocke_aot.errors import CacheError, IntegrityError, SpecError


class Maintenance:
    """Stats, verify, gc, gc_generations, purge and evict of one store (module doc)."""

    def __init__(self, handle: db.Handle, blobs_part: Blobs, artifacts: Artifacts):
        self.handle = handle
        self.blobs = blobs_part
        self.artifacts = artifacts

    def stats(self, *, max_bytes: int | None) -> StoreStats:
        engine = self.handle.engine
        with db.read_tx(engine) as conn:
            by_status: db.Rows = conn.execute(select(A.c.status, func.count()).group_by(A.c.status)).all()
            counts: dict[str, int] = dict(by_status)
            sizes: tuple[Any, ...] = conn.execute(
                select(func.count(), func.coalesce(func.sum(B.c.size), 0), func.coalesce(func.sum(B.c.stored_size), 0))
            ).one()
            nblobs, raw, stored = sizes
            referenced: int = conn.execute(
                select(func.coalesce(func.sum(B.c.size), 0)).select_from(A.join(B, A.c.blob_sha256 == B.c.sha256))
            ).scalar_one()
            orphans = conn.execute(select(func.count()).select_from(B).where(~blobs.referenced(B.c.sha256))).scalar_one()
            by: db.Rows = conn.execute(
                select(A.c.arch, A.c.lane, func.count()).where(A.c.status == "ok")
                .group_by(A.c.arch, A.c.lane).order_by(A.c.arch, A.c.lane)
            ).all()
        return StoreStats(
            url=db.display_url(self.handle.url), backend=engine.dialect.name, schema_version=models.SCHEMA_VERSION,
            artifacts=counts.get("ok", 0), failures=counts.get("failed", 0), blobs=nblobs,
            raw_bytes=int(raw), stored_bytes=int(stored), referenced_raw_bytes=int(referenced),
            orphan_blobs=orphans, by_arch_lane=tuple((a, l, n) for a, l, n in by), max_bytes=max_bytes,
        )

    def verify(self, batch: int = 256) -> VerifyReport:
        engine = self.handle.engine
        corrupt: list[tuple[str, str]] = []
        checked = 0
        last = ""
        while True:  # keyset pages, so a huge store never sits in memory at once
            with db.read_tx(engine) as conn:
                page: db.Rows = conn.execute(
                    select(B.c.sha256, B.c.size, B.c.codec, blob_data, B.c.stored_size, B.c.dict_id)
                    .where(B.c.sha256 > last).order_by(B.c.sha256).limit(batch)
                ).all()
                for sha, size, cod, data, stored_size, dict_id in page:
                    checked += 1
                    try:
                        self.blobs.decode(conn, sha, size, cod, stored_size, data, dict_id)
                    except IntegrityError as e:
                        corrupt.append((sha, str(e)))
            if not page:
                break
            last = page[-1][0]
        bad_sha = {s for s, _ in corrupt}
        affected: list[str] = []
        bad_keys: list[tuple[str, str]] = []
        with db.read_tx(engine) as conn:
            rows = conn.execute(select(*ROW, B.c.sha256.label("present")).select_from(ROW_FROM)).mappings().all()
            orphans = conn.execute(select(func.count()).select_from(B).where(~blobs.referenced(B.c.sha256))).scalar_one()
        bad_records: list[tuple[str, str]] = []
        origins: dict[str, int] = {}
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
        self.handle.writable("purge")
        if not isinstance(origin, str) or not origin.startswith(("http://", "https://")):
            raise SpecError(f"an origin is the URL of a server (http:// or https://), got {origin!r}")
        want = origin.rstrip("/")
        with db.write_tx(self.handle.engine, exclusive=True) as conn:
            rows: db.Rows = conn.execute(select(A.c.key, A.c.provenance_json).where(A.c.status == "ok")).all()
            victims: list[str] = []
            for key, text in rows:
                try:
                    if origin_of(json.loads(text)) == want:
                        victims.append(key)
                except (ValueError, RecursionError):
                    continue  # unreadable provenance: verify reports it
            for chunk in db.chunks(victims):
                conn.execute(delete(A).where(A.c.key.in_(chunk)))
            generations.reserve_groups(conn)
            n, freed = blobs.delete_orphans(conn)
            after = blobs.stored_bytes(conn)
        return GcReport(len(victims), n, freed, after)

    def gc(self) -> GcReport:
        self.handle.writable("gc")
        with db.write_tx(self.handle.engine, exclusive=True) as conn:
            n, freed = blobs.delete_orphans(conn)
            after = blobs.stored_bytes(conn)
        return GcReport(0, n, freed, after)

    def gc_generations(self, keep: int = 0) -> GcReport:
        self.handle.writable("gc")
        if not is_int(keep) or keep < 0:
            raise SpecError(f"keep must be a non-negative int, got {keep!r}")
        with db.write_tx(self.handle.engine, exclusive=True) as conn:
            keys, gone = generations.shadowed(conn, keep)
            n = generations.drop(conn, keys, gone, db.LOOKUP_CHUNK)
            deleted, freed = blobs.delete_orphans(conn)
            after = blobs.stored_bytes(conn)
        return GcReport(n, deleted, freed, after, tuple(gone))

    def evict(self, max_bytes: int) -> GcReport:
        self.handle.writable("evict")
        if not is_int(max_bytes) or max_bytes < 0:
            raise CacheError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        self.artifacts.flush_reads()  # eviction orders by read time: the pending ones count
        with db.write_tx(self.handle.engine, exclusive=True) as conn:
            deleted, freed = blobs.delete_orphans(conn)
            total = blobs.stored_bytes(conn)
            victims: list[str] = []
            if total > max_bytes:
                by_read: db.Rows = conn.execute(
                    select(A.c.key, A.c.blob_sha256, B.c.stored_size)
                    .select_from(A.join(B, A.c.blob_sha256 == B.c.sha256))
                    .order_by(A.c.last_read_at, A.c.built_at, A.c.key)
                ).all()
                refs: dict[str, int] = {}
                for _, sha, _ in by_read:
                    refs[sha] = refs.get(sha, 0) + 1
                for key, sha, stored_size in by_read:
                    if total <= max_bytes:
                        break
                    victims.append(key)
                    refs[sha] -= 1
                    if refs[sha] == 0:
                        total -= stored_size
                for chunk in db.chunks(victims):
                    conn.execute(delete(A).where(A.c.key.in_(chunk)))
                # An evicted served row hands its spec to the next-best generation's row, if any.
                generations.reserve_groups(conn)
                n, more = blobs.delete_orphans(conn)
                deleted += n
                freed += more
            after = blobs.stored_bytes(conn)
        return GcReport(len(victims), deleted, freed, after)
