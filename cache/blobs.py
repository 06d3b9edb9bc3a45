"""Blob rows: publishing, decoding with the right dictionary, orphans, dictionary training.

    put/import ──publish_blob(conn, sha, raw, stored, codec, dict_id)──> blobs row
                 (reuse a stored copy that verifies; overwrite one that does not)
    get/verify/export ──Dicts.decode(conn, row)──> codec.decode(..., zdict) ──> raw bytes
    put ──Dicts.current(engine, arch, family)──> (dict_id, Dictionary) or (None, None)
    train(store, ...) per (arch, family) with enough blobs:
        sample (verified) ─> train on half ─> measure on the other half, counting the
        dictionary's own bytes ─> adopt only where it pays ─> ONE exclusive write
        transaction: insert the dictionary, recompress that pair's blobs with it
        (each re-verified before its row is updated)

Dictionaries are immutable and never deleted, so a cached copy never goes stale; the
"current" dictionary of a pair is the newest, re-read at most every CURRENT_TTL seconds.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, bindparam, delete, func, or_, select, update

from rocke_aot.cache import code_objects, codec, db
from rocke_aot.cache.models import artifacts as A
from rocke_aot.cache.models import blob_data
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.models import zstd_dicts as D
from rocke_aot.errors import IntegrityError

if TYPE_CHECKING:
    from rocke_aot.cache.store import Store

CURRENT_TTL = 30.0
_Q_BLOB = select(B.c.size, B.c.codec, blob_data, B.c.stored_size, B.c.dict_id).where(B.c.sha256 == bindparam("s"))
_Q_DICT = select(D.c.sha256, D.c.data).where(D.c.id == bindparam("i"))
_Q_CURRENT = (
    select(D.c.id).where(D.c.arch == bindparam("a"), D.c.family == bindparam("f")).order_by(D.c.id.desc()).limit(1)
)


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


def publish_blob(conn: Connection, dicts: Dicts, sha: str, raw: bytes, stored: bytes, cod: str,
                 dict_id: int | None, now: float) -> bool:
    """Insert the blob, or reuse the stored copy; a stored copy that fails to verify is
    overwritten with these (known-good) bytes, so a put also heals a corrupt blob.
    Returns whether a new row was inserted."""
    from rocke_aot.cache.store import _insert_ignore

    cur = conn.execute(_Q_BLOB, {"s": sha}).first()
    values = {"size": len(raw), "stored_size": len(stored), "codec": cod, "data": stored, "dict_id": dict_id}
    if cur is not None:
        try:
            dicts.decode(conn, sha, cur.size, cur.codec, cur.stored_size, cur.data, cur.dict_id)
        except IntegrityError:
            conn.execute(update(B).where(B.c.sha256 == sha).values(**values))
        return False
    res = conn.execute(_insert_ignore(conn, B), {"sha256": sha, "created_at": now, **values})
    return res.rowcount == 1


def referenced(sha_col):
    """Whether an artifact row or a Triton entry (cache/triton_entries.py) holds the blob. A code
    object (cache/code_objects.py) holds it only while an artifact row points at that code
    object, so it keeps nothing alive itself."""
    from rocke_aot.cache.models import triton_entries as T

    return or_(select(A.c.key).where(A.c.blob_sha256 == sha_col).exists(),
               select(T.c.triton_key).where(T.c.blob_sha256 == sha_col).exists())


def delete_orphans(conn: Connection, chunk: int = 900) -> tuple[int, int]:
    code_objects.unreferenced(conn)  # first: their foreign key would hold the blobs
    rows = conn.execute(select(B.c.sha256, B.c.stored_size).where(~referenced(B.c.sha256))).all()
    shas = [r[0] for r in rows]
    for i in range(0, len(shas), chunk):
        conn.execute(delete(B).where(B.c.sha256.in_(shas[i:i + chunk]), ~referenced(B.c.sha256)))
    return len(rows), sum(r[1] for r in rows)


def _pair_blobs(conn: Connection, arch: str, family: str) -> list[str]:
    return list(conn.execute(
        select(A.c.blob_sha256).where(A.c.arch == arch, A.c.family == family, A.c.status == "ok")
        .distinct().order_by(A.c.blob_sha256)
    ).scalars())


def train(store: "Store", *, min_samples: int = 64, max_samples: int = 512, dict_size: int = 16384,
          min_gain: float = 1.15) -> list[dict[str, Any]]:
    """Train and adopt a dictionary per (arch, family) where it pays; returns one report per pair."""
    with db.read_tx(store.engine) as conn:
        pairs = conn.execute(
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
        with db.read_tx(store.engine) as conn:
            shas = _pair_blobs(conn, arch, family)
            step = max(1, len(shas) // max_samples)
            samples = []
            for sha in shas[::step][:max_samples]:
                size, cod, data, stored_size, dict_id = conn.execute(_Q_BLOB, {"s": sha}).one()
                samples.append(store._dicts.decode(conn, sha, size, cod, stored_size, data, dict_id))
        fit, hold = samples[0::2], samples[1::2]
        try:
            zdict = codec.train(fit, dict_size)
        except Exception as e:  # noqa: BLE001 - zstd refuses too-uniform samples; report it
            rep["reason"] = f"training failed: {e}"
            continue
        raw = sum(map(len, hold))
        plain = sum(len(codec.encode(b, store.level)) for b in hold)
        with_d = sum(len(codec.encode(b, store.level, zdict)) for b in hold)
        # Over the whole pair, the dictionary's own bytes are paid once.
        total_plain = plain / len(hold) * n
        total_dict = with_d / len(hold) * n + len(zdict.data)
        rep.update(ratio_plain=round(raw / plain, 2), ratio_dict=round(raw / with_d, 2),
                   dict_bytes=len(zdict.data), gain=round(total_plain / total_dict, 2))
        if total_plain / total_dict < min_gain:
            rep["reason"] = f"gain {rep['gain']} < {min_gain}"
            continue
        rep.update(_adopt(store, arch, family, zdict, len(fit)))
    return reports


def _adopt(store: "Store", arch: str, family: str, zdict: codec.Dictionary, samples: int) -> dict[str, Any]:
    before = after = count = 0
    with db.write_tx(store.engine, exclusive=True) as conn:
        existing = conn.execute(select(D.c.id).where(D.c.sha256 == zdict.sha256)).scalar()
        if existing is None:
            existing = conn.execute(D.insert().values(
                arch=arch, family=family, sha256=zdict.sha256, size=len(zdict.data), samples=samples,
                data=zdict.data, created_at=time.time(),
            )).inserted_primary_key[0]
        store._dicts._by_id[existing] = zdict
        for sha in _pair_blobs(conn, arch, family):
            size, cod, data, stored_size, dict_id = conn.execute(_Q_BLOB, {"s": sha}).one()
            if dict_id == existing:
                continue
            raw = store._dicts.decode(conn, sha, size, cod, stored_size, data, dict_id)
            new = codec.encode(raw, store.level, zdict)
            codec.decode(new, sha, size, codec.CODEC_DICT, len(new), zdict)  # never store unverified bytes
            conn.execute(update(B).where(B.c.sha256 == sha).values(
                data=new, stored_size=len(new), codec=codec.CODEC_DICT, dict_id=existing))
            before += stored_size
            after += len(new)
            count += 1
    store._dicts._current.pop((arch, family), None)
    return {"adopted": True, "dict_id": existing, "recompressed": count, "bytes_before": before, "bytes_after": after}
