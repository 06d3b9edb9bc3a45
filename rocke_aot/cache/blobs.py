"""The blob part of a store: sha256 of the raw bytes -> one zstd frame (optionally with a
trained dictionary), published, decoded, verified and trained here and nowhere else.

    Store.put ──Blobs.encode(raw, arch, family)──> (stored frame, codec, dict_id)
        │        (outside the write lock: compression is the slow part of a put)
        └─ in the put's write transaction: Blobs.publish(conn, sha, raw, stored, ...)
                 -> blobs row (reuse a stored copy that verifies; overwrite one that does not)
    Store.get / verify / export ──Blobs.decode(conn, row)──> codec.decode(..., zdict) ──> raw bytes
    Store.get_blob(sha) / blob_frame(sha) / has_blob(sha) ── one blob by content (the service's
                 immutable URLs): verified raw bytes, and the stored plain-zstd frame as is
    gc / evict (cache/maintenance.py) ──delete_orphans(conn)──> blobs no artifact row holds
    Store.train_dictionaries ──Blobs.train(...)── per (arch, family) with enough blobs:
        sample (verified) ─> train on half ─> measure on the other half, counting the
        dictionary's own bytes ─> adopt only where it pays ─> ONE exclusive write
        transaction: insert the dictionary, recompress that pair's blobs with it
        (each re-verified before its row is updated)

Dictionaries are immutable and never deleted, so a cached copy never goes stale; the
"current" dictionary of a pair is the newest, re-read at most every CURRENT_TTL seconds.
"""

from __future__ import annotations

import re
import time
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, delete, func, or_, select, update

from rocke_aot.cache import code_objects, codec, db
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import blob_data
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.models import zstd_dicts as D
from rocke_aot.errors import IntegrityError, NotFoundError, SpecError

CURRENT_TTL = 30.0
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
_Q_BLOB = select(B.c.size, B.c.codec, blob_data, B.c.stored_size, B.c.dict_id).where(B.c.sha256 == bindparam("s"))
_Q_BLOB_EXISTS = select(B.c.size).where(B.c.sha256 == bindparam("s"))
_Q_DICT = select(D.c.sha256, D.c.data).where(D.c.id == bindparam("i"))
_Q_CURRENT = (
    select(D.c.id).where(D.c.arch == bindparam("a"), D.c.family == bindparam("f")).order_by(D.c.id.desc()).limit(1)
)
_Q_STORED = select(func.coalesce(func.sum(B.c.stored_size), 0))


class Dicts:
    """Per-store cache of dictionaries (by id) and of each pair's current one."""

    def __init__(self) -> None:
        self._by_id: dict[int, codec.Dictionary] = {}
        self._current: dict[tuple[str, str], tuple[float, int | None]] = {}

    def load(self, conn: Connection, dict_id: int) -> codec.Dictionary:
        d = self._by_id.get(dict_id)
        if d is None:
            row = conn.execute(_Q_DICT, {"i": dict_id}).first()
            if row is None:
                raise IntegrityError(f"zstd dictionary {dict_id} is missing; its blobs cannot be read")
            d = self._by_id[dict_id] = codec.Dictionary(bytes(row.data), row.sha256)
        return d

    def current(self, engine: Engine, arch: str, family: str) -> tuple[int | None, codec.Dictionary | None]:
        now = time.monotonic()
        hit = self._current.get((arch, family))
        if hit is None or now - hit[0] > CURRENT_TTL:
            with db.read_tx(engine) as conn:
                dict_id = conn.execute(_Q_CURRENT, {"a": arch, "f": family}).scalar()
                if dict_id is not None:
                    self.load(conn, dict_id)
            hit = self._current[(arch, family)] = (now, dict_id)
        return (None, None) if hit[1] is None else (hit[1], self._by_id[hit[1]])

    def decode(self, conn: Connection, sha: str, size: int, cod: str, stored_size: int | None,
               data: bytes, dict_id: int | None) -> bytes:
        zdict = self.load(conn, dict_id) if dict_id is not None else None
        return codec.decode(data, sha, size, cod, stored_size, zdict)

    def remember(self, dict_id: int, zdict: codec.Dictionary) -> None:
        """A dictionary this process just stored, known by its id from now on."""
        self._by_id[dict_id] = zdict

    def forget_current(self, arch: str, family: str) -> None:
        """The pair's current dictionary is read again on its next put (after a new one committed)."""
        self._current.pop((arch, family), None)


def publish_blob(conn: Connection, dicts: Dicts, sha: str, raw: bytes, stored: bytes, cod: str,
                 dict_id: int | None, now: float) -> bool:
    """Insert the blob, or reuse the stored copy; a stored copy that fails to verify is
    overwritten with these (known-good) bytes, so a put also heals a corrupt blob.
    Returns whether a new row was inserted."""
    cur = conn.execute(_Q_BLOB, {"s": sha}).first()
    values = {"size": len(raw), "stored_size": len(stored), "codec": cod, "data": stored, "dict_id": dict_id}
    if cur is not None:
        try:
            dicts.decode(conn, sha, cur.size, cur.codec, cur.stored_size, cur.data, cur.dict_id)
        except IntegrityError:
            conn.execute(update(B).where(B.c.sha256 == sha).values(**values))
        return False
    res = conn.execute(db.insert_ignore(conn, B), {"sha256": sha, "created_at": now, **values})
    return res.rowcount == 1


def referenced(sha_col):
    """Whether an artifact row or a Triton entry (cache/triton_entries.py) holds the blob. A code
    object (cache/code_objects.py) holds it only while an artifact row points at that code
    object, so it keeps nothing alive itself."""
    from rocke_aot.cache.models import triton_entries as T
    from rocke_aot.cache.models import triton_host_entries as H

    return or_(select(A.c.key).where(A.c.blob_sha256 == sha_col).exists(),
               select(T.c.triton_key).where(T.c.blob_sha256 == sha_col).exists(),
               select(H.c.triton_key).where(H.c.blob_sha256 == sha_col).exists())


def delete_orphans(conn: Connection, chunk: int = db.LOOKUP_CHUNK) -> tuple[int, int]:
    code_objects.unreferenced(conn)  # first: their foreign key would hold the blobs
    rows = conn.execute(select(B.c.sha256, B.c.stored_size).where(~referenced(B.c.sha256))).all()
    shas = [r[0] for r in rows]
    for i in range(0, len(shas), chunk):
        conn.execute(delete(B).where(B.c.sha256.in_(shas[i:i + chunk]), ~referenced(B.c.sha256)))
    return len(rows), sum(r[1] for r in rows)


def stored_bytes(conn: Connection) -> int:
    """The stored (compressed) bytes of every blob."""
    return int(conn.execute(_Q_STORED).scalar_one())  # coalesce: one row, never NULL


def _pair_blobs(conn: Connection, arch: str, family: str) -> list[str]:
    return list(conn.execute(
        select(A.c.blob_sha256).where(A.c.arch == arch, A.c.family == family, A.c.status == "ok")
        .distinct().order_by(A.c.blob_sha256)
    ).scalars())


def check_sha(sha256: Any) -> None:
    if not isinstance(sha256, str) or not SHA_RE.match(sha256):
        raise SpecError(f"a blob id is 64 lowercase hex digits, got {sha256!r}")


class Blobs:
    """The blob part of one store (module doc): its dictionaries and compression level."""

    def __init__(self, handle: db.Handle, level: int):
        self.handle = handle
        self.level = level
        self.dicts = Dicts()

    def encode(self, raw: bytes, arch: str, family: str) -> tuple[bytes, str, int | None]:
        """(stored frame, codec, dictionary id) for a new blob of (arch, family)."""
        dict_id, zdict = self.dicts.current(self.handle.engine, arch, family)
        return codec.encode(raw, self.level, zdict), (codec.CODEC if zdict is None else codec.CODEC_DICT), dict_id

    def publish(self, conn: Connection, sha: str, raw: bytes, stored: bytes, cod: str, dict_id: int | None,
                now: float) -> bool:
        """Inside a write transaction (a put, an import): publish_blob with this store's dictionaries."""
        return publish_blob(conn, self.dicts, sha, raw, stored, cod, dict_id, now)

    def put(self, conn: Connection, data: bytes, arch: str, family: str, now: float) -> str:
        """Inside a write transaction: encode and publish ``data`` as a blob of (arch, family); its sha256."""
        sha = codec.sha256_hex(data)
        stored, cod, dict_id = self.encode(data, arch, family)
        self.publish(conn, sha, data, stored, cod, dict_id, now)
        return sha

    def decode(self, conn: Connection, sha: str, size: int, cod: str, stored_size: int | None, data: bytes,
               dict_id: int | None) -> bytes:
        """Decompress + size + sha256 of one stored row: the raw bytes, or IntegrityError."""
        return self.dicts.decode(conn, sha, size, cod, stored_size, data, dict_id)

    def load_dict(self, conn: Connection, dict_id: int) -> codec.Dictionary:
        return self.dicts.load(conn, dict_id)

    def _row(self, conn: Connection, sha256: str):
        check_sha(sha256)
        row = conn.execute(_Q_BLOB, {"s": sha256}).first()
        if row is None:
            raise NotFoundError(f"no blob {sha256} in {self.handle}")
        return row

    def get(self, sha256: str) -> bytes:
        """The verified raw bytes of one blob by its sha256."""
        with db.read_tx(self.handle.engine) as conn:
            size, cod, data, stored_size, dict_id = self._row(conn, sha256)
            return self.decode(conn, sha256, size, cod, stored_size, data, dict_id)

    def frame(self, sha256: str) -> tuple[bytes, bytes | None]:
        """(verified raw bytes, the stored zstd frame as is): the frame is None for a dictionary
        frame (a client could not decode it alone). The frame is only handed out after it
        decoded to the raw bytes' sha256."""
        with db.read_tx(self.handle.engine) as conn:
            size, cod, data, stored_size, dict_id = self._row(conn, sha256)
            data = bytes(data)
            raw = self.decode(conn, sha256, size, cod, stored_size, data, dict_id)
        return raw, (data if cod == codec.CODEC else None)

    def exists(self, sha256: str) -> bool:
        check_sha(sha256)
        with db.read_tx(self.handle.engine) as conn:
            return conn.execute(_Q_BLOB_EXISTS, {"s": sha256}).first() is not None

    def stored_bytes(self) -> int:
        with db.read_tx(self.handle.engine) as conn:
            return stored_bytes(conn)

    def train(self, *, min_samples: int = 64, max_samples: int = 512, dict_size: int = 16384,
              min_gain: float = 1.15) -> list[dict[str, Any]]:
        """Train and adopt a dictionary per (arch, family) where it pays; returns one report per pair."""
        self.handle.writable("train-dicts")
        engine = self.handle.engine
        with db.read_tx(engine) as conn:
            pairs: db.Rows = conn.execute(
                select(A.c.arch, A.c.family, func.count(func.distinct(A.c.blob_sha256)))
                .where(A.c.status == "ok").group_by(A.c.arch, A.c.family).order_by(A.c.arch, A.c.family)
            ).all()
        reports = []
        for arch, family, n in pairs:
            rep: dict[str, Any] = {"arch": arch, "family": family, "blobs": n, "adopted": False}
            reports.append(rep)
            if n < min_samples:
                rep["reason"] = f"{n} blobs < {min_samples} samples"
                continue
            with db.read_tx(engine) as conn:
                shas = _pair_blobs(conn, arch, family)
                step = max(1, len(shas) // max_samples)
                samples = []
                for sha in shas[::step][:max_samples]:
                    blob: tuple[Any, ...] = conn.execute(_Q_BLOB, {"s": sha}).one()
                    size, cod, data, stored_size, dict_id = blob
                    samples.append(self.decode(conn, sha, size, cod, stored_size, data, dict_id))
            fit, hold = samples[0::2], samples[1::2]
            try:
                zdict = codec.train(fit, dict_size)
            except Exception as e:  # noqa: BLE001 - zstd refuses too-uniform samples; report it
                rep["reason"] = f"training failed: {e}"
                continue
            raw = sum(map(len, hold))
            plain = sum(len(codec.encode(b, self.level)) for b in hold)
            with_d = sum(len(codec.encode(b, self.level, zdict)) for b in hold)
            # Over the whole pair, the dictionary's own bytes are paid once.
            total_plain = plain / len(hold) * n
            total_dict = with_d / len(hold) * n + len(zdict.data)
            rep.update(ratio_plain=round(raw / plain, 2), ratio_dict=round(raw / with_d, 2),
                       dict_bytes=len(zdict.data), gain=round(total_plain / total_dict, 2))
            if total_plain / total_dict < min_gain:
                rep["reason"] = f"gain {rep['gain']} < {min_gain}"
                continue
            rep.update(self._adopt(arch, family, zdict, len(fit)))
        return reports

    def _adopt(self, arch: str, family: str, zdict: codec.Dictionary, samples: int) -> dict[str, Any]:
        before = after = count = 0
        with db.write_tx(self.handle.engine, exclusive=True) as conn:
            existing = conn.execute(select(D.c.id).where(D.c.sha256 == zdict.sha256)).scalar()
            if existing is None:
                pk = conn.execute(D.insert().values(
                    arch=arch, family=family, sha256=zdict.sha256, size=len(zdict.data), samples=samples,
                    data=zdict.data, created_at=time.time(),
                )).inserted_primary_key
                assert pk is not None, "a single-row INSERT's result carries its primary key"
                existing = pk[0]
            self.dicts.remember(existing, zdict)
            for sha in _pair_blobs(conn, arch, family):
                blob: tuple[Any, ...] = conn.execute(_Q_BLOB, {"s": sha}).one()
                size, cod, data, stored_size, dict_id = blob
                if dict_id == existing:
                    continue
                raw = self.decode(conn, sha, size, cod, stored_size, data, dict_id)
                new = codec.encode(raw, self.level, zdict)
                codec.decode(new, sha, size, codec.CODEC_DICT, len(new), zdict)  # never store unverified bytes
                conn.execute(update(B).where(B.c.sha256 == sha).values(
                    data=new, stored_size=len(new), codec=codec.CODEC_DICT, dict_id=existing))
                before += stored_size
                after += len(new)
                count += 1
        self.dicts.forget_current(arch, family)
        return {"adopted": True, "dict_id": existing, "recompressed": count, "bytes_before": before,
                "bytes_after": after}
