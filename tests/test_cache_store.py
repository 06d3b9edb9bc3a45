"""The store on both backends (SQLite file and a real PostgreSQL): every test runs twice."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time

import pytest
import sqlalchemy.exc
from _pg import code_object, inputs, pg_database, put, store_url  # noqa: F401
from sqlalchemy import text

from rocke_aot.cache import codec, db, models
from rocke_aot.cache.keys import artifact_key
from rocke_aot.cache.store import LOOKUP_CHUNK, Store
from rocke_aot.errors import BundleError, CacheError, IntegrityError, NotFoundError, SchemaVersionError, SpecError


@pytest.fixture
def store(store_url):
    s = Store.open(store_url, touch_interval=0)
    yield s
    s.close()


def _sql(store, sql, **params):
    with store.engine.begin() as conn:
        return conn.execute(text(sql), params)


def _flip_byte(store, sha: str, offset: int = -1) -> None:
    with store.engine.begin() as conn:
        data = bytearray(conn.execute(text("SELECT data FROM blobs WHERE sha256 = :s"), {"s": sha}).scalar_one())
        data[offset] ^= 0x5A
        conn.execute(text("UPDATE blobs SET data = :d WHERE sha256 = :s"), {"d": bytes(data), "s": sha})


def test_put_get_round_trip(store):
    art = put(store, 1)
    assert art.key == artifact_key(inputs(1))
    got = store.get(art.key)
    assert got.code_object == code_object(1)
    assert got.sha256 == got.blob_sha256 == hashlib.sha256(code_object(1)).hexdigest() and got.size == 4096
    assert got.stored_size < got.size  # zstd actually compressed it
    assert got.inputs == inputs(1) and got.lane == "llvm22" and got.profile == "llvm22"
    assert got.metadata["kernel"] == "k1" and got.provenance["i"] == 1
    assert got.ir_sha256 == hashlib.sha256(b"ir1").hexdigest()
    assert got.last_read_at >= got.built_at


def test_identical_binaries_are_stored_once(store):
    a = put(store, 1, data=code_object(7))
    b = put(store, 2, data=code_object(7))
    assert a.key != b.key and a.sha256 == b.sha256
    s = store.stats()
    assert (s.artifacts, s.blobs) == (2, 1)
    assert s.referenced_raw_bytes == 2 * s.raw_bytes


def test_put_is_idempotent(store):
    a = put(store, 1)
    b = put(store, 1)
    assert a.key == b.key and a.built_at == b.built_at
    assert store.stats().artifacts == 1


def test_same_key_different_bytes_is_refused_unless_replaced(store):
    a = put(store, 1)
    with pytest.raises(CacheError, match="not deterministic"):
        put(store, 1, data=code_object(99))
    assert store.get(a.key).code_object == code_object(1)
    b = store.put(inputs(1), code_object(99), ir_sha256="0" * 64, metadata={}, provenance={}, replace=True)
    assert store.get(a.key).code_object == code_object(99) and b.sha256 != a.sha256
    assert store.gc().blobs_deleted == 1  # the replaced blob was left orphaned until GC


def test_failures_are_cached_and_superseded_by_success(store):
    hit = store.put_failure(inputs(5), "LLVM ERROR: Cannot select", "the log")
    assert hit.kind == "failure"
    f = store.get_failure(hit.key)
    assert (f.error, f.log, f.inputs) == ("LLVM ERROR: Cannot select", "the log", inputs(5))
    with pytest.raises(NotFoundError, match="cached build failure"):
        store.get(hit.key)
    # A second failure updates the message; a success replaces the failure.
    store.put_failure(inputs(5), "again", "")
    assert store.get_failure(hit.key).error == "again"
    put(store, 5)
    assert store.get(hit.key).code_object == code_object(5)
    # A later failure never shadows a good binary.
    assert store.put_failure(inputs(5), "flaky", "").kind == "artifact"
    assert store.get(hit.key).code_object == code_object(5)
    assert store.stats().failures == 0


def test_lookup_many_is_bulk_and_tells_artifacts_from_failures(store):
    keys = [put(store, i).key for i in range(3)]
    fail = store.put_failure(inputs(10), "boom", "").key
    absent = [artifact_key(inputs(100 + i)) for i in range(2 * LOOKUP_CHUNK + 7)]  # several chunks
    hits = store.lookup_many(absent + keys + [fail] + keys)
    assert set(hits) == set(keys) | {fail}
    assert all(hits[k].ok and hits[k].sha256 == hashlib.sha256(code_object(i)).hexdigest() for i, k in enumerate(keys))
    assert hits[fail].kind == "failure" and hits[fail].error == "boom"
    assert store.lookup_many([]) == {}
    with pytest.raises(SpecError):
        store.lookup_many(["nothex"])


def test_missing_keys(store):
    with pytest.raises(NotFoundError):
        store.get("0" * 64)
    with pytest.raises(SpecError):
        store.get("zz")
    with pytest.raises(NotFoundError):
        store.get_failure("0" * 64)


def test_find_filters(store):
    put(store, 1)
    put(store, 2, arch="gfx950")
    put(store, 3, lane="llvm20", profile="llvm20")
    put(store, 4, family="conv_direct_fwd")
    store.put_failure(inputs(5, arch="gfx950"), "boom", "")
    assert len(store.find()) == 4
    assert [a.arch for a in store.find(arch="gfx950")] == ["gfx950"]
    assert [a.lane for a in store.find(lane="llvm20")] == ["llvm20"]
    assert [a.family for a in store.find(family="conv_direct_fwd")] == ["conv_direct_fwd"]
    assert [f.error for f in store.find(status="failed")] == ["boom"]
    assert len(store.find(status="all", arch="gfx950")) == 2
    assert len(store.find(limit=2)) == 2
    assert all(a.code_object is None for a in store.find())  # listings never load blobs


def test_flipped_byte_raises_and_verify_reports_it(store):
    a = put(store, 1)
    b = put(store, 2)
    _flip_byte(store, a.sha256)
    with pytest.raises(IntegrityError, match=a.sha256):
        store.get(a.key)
    assert store.get(b.key).code_object == code_object(2)
    report = store.verify()
    assert not report.ok
    assert [s for s, _ in report.corrupt] == [a.sha256]
    assert report.affected_keys == (a.key,)
    # Putting the good bytes again heals the stored blob.
    put(store, 1)
    assert store.get(a.key).code_object == code_object(1)
    assert store.verify().ok


def test_valid_frame_with_wrong_content_is_caught(store):
    a = put(store, 1)
    other = codec.encode(code_object(1)[:-1] + b"\x00")  # same size, decompresses fine
    # Keep every recorded length consistent, so only the sha256 can notice.
    _sql(store, "UPDATE blobs SET data = :d, stored_size = :n WHERE sha256 = :s", d=other, n=len(other), s=a.sha256)
    with pytest.raises(IntegrityError, match="hashes to"):
        store.get(a.key)
    assert store.verify().corrupt[0][0] == a.sha256


def test_trailing_bytes_after_the_frame_are_corruption(store):
    a = put(store, 1)
    _sql(store, "UPDATE blobs SET data = :d WHERE sha256 = :s", d=codec.encode(code_object(1)) * 2, s=a.sha256)
    with pytest.raises(IntegrityError):
        store.get(a.key)
    assert not store.verify().ok


def test_verify_recomputes_keys(store):
    a = put(store, 1)
    _sql(store, "UPDATE artifacts SET recipe_digest = 'tampered' WHERE key = :k", k=a.key)
    report = store.verify()
    assert [k for k, _ in report.bad_keys] == [a.key]


def test_verify_recomputes_keys_over_the_options(store):
    a = put(store, 1)
    _sql(store, "UPDATE artifacts SET options_json = :o WHERE key = :k", o='{"speed_level":2}', k=a.key)
    assert [k for k, _ in store.verify().bad_keys] == [a.key]


def test_blob_of_an_artifact_cannot_be_deleted(store):
    a = put(store, 1)
    with pytest.raises(sqlalchemy.exc.IntegrityError):
        _sql(store, "DELETE FROM blobs WHERE sha256 = :s", s=a.sha256)
    assert store.get(a.key).code_object == code_object(1)


def test_gc_deletes_only_unreferenced_blobs(store):
    a = put(store, 1)
    b = put(store, 2)
    _sql(store, "DELETE FROM artifacts WHERE key = :k", k=a.key)
    assert store.stats().orphan_blobs == 1
    rep = store.gc()
    assert (rep.blobs_deleted, rep.bytes_freed) == (1, a.stored_size)
    assert store.stats().blobs == 1 and store.get(b.key).code_object == code_object(2)
    assert store.gc().blobs_deleted == 0


def test_evict_least_recently_read(store):
    arts = [put(store, i) for i in range(4)]
    time.sleep(0.01)
    store.get(arts[0].key)  # 0 is now the most recently read; 1 is the oldest
    each = arts[0].stored_size
    rep = store.evict(store.stats().stored_bytes - 1)
    assert rep.artifacts_evicted == 1 and rep.blobs_deleted == 1 and rep.bytes_freed > 0
    present = store.lookup_many(a.key for a in arts)
    assert arts[1].key not in present and {arts[0].key, arts[2].key, arts[3].key} <= set(present)
    store.evict(0)
    assert store.stats().artifacts == 0 and store.stats().stored_bytes == 0
    assert each > 0


def test_evict_counts_shared_blobs_once(store):
    a = put(store, 1, data=code_object(7))
    time.sleep(0.01)
    put(store, 2, data=code_object(7))
    time.sleep(0.01)
    c = put(store, 3)
    rep = store.evict(c.stored_size)  # must drop both sharers of blob 7, keep 3
    assert rep.artifacts_evicted == 2 and rep.blobs_deleted == 1
    assert set(store.lookup_many([a.key, c.key])) == {c.key}


def test_size_cap_on_put(store_url):
    with Store.open(store_url, touch_interval=0) as s:
        one = put(s, 0).stored_size
    with Store.open(store_url, touch_interval=0, max_bytes=3 * one + one // 2) as s:
        for i in range(1, 6):
            put(s, i)
            time.sleep(0.005)
        st = s.stats()
        assert st.stored_bytes <= s.max_bytes and st.artifacts == 3
        assert set(s.lookup_many(artifact_key(inputs(i)) for i in range(6))) == {
            artifact_key(inputs(i)) for i in (3, 4, 5)
        }


def test_schema_version_is_checked(store_url):
    Store.open(store_url).close()
    s = Store.open(store_url)
    _sql(s, f"UPDATE rocke_meta SET value = '{models.SCHEMA_VERSION + 1}' WHERE name = 'schema_version'")
    s.close()
    with pytest.raises(SchemaVersionError, match="schema version"):
        Store.open(store_url)
    engine = db.make_engine(db.resolve_url(store_url))
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE rocke_meta SET value = '{models.SCHEMA_VERSION}'"))
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    with pytest.raises(SchemaVersionError, match="0099"):
        Store.open(store_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE alembic_version"))
    with pytest.raises(SchemaVersionError, match="no Alembic revision"):
        Store.open(store_url)
    engine.dispose()


def test_export_import_round_trip(store, tmp_path, pg_database):
    arts = [put(store, i) for i in range(5)]
    put(store, 9, data=code_object(0))  # shares blob 0
    store.put_failure(inputs(20), "boom", "log text")
    info = store.export(tmp_path / "b.bundle")
    assert (info["artifacts"], info["failures"], info["blobs"]) == (6, 1, 5)
    # Import into an empty store on the *other* backend, too: the bundle is backend-neutral.
    target_url = f"sqlite:///{tmp_path / 'other.sqlite'}"
    with Store.open(target_url) as other:
        summary = other.import_(tmp_path / "b.bundle", failures=True)
        assert (summary["artifacts"], summary["failures"], summary["blobs"]) == (6, 1, 5)
        for a in arts:
            got = other.get(a.key)
            assert got.code_object == code_object(a.provenance["i"])
            assert (got.ir_sha256, dict(got.metadata), got.inputs) == (a.ir_sha256, dict(a.metadata), a.inputs)
        assert other.get_failure(artifact_key(inputs(20))).log == "log text"
        assert other.verify().ok
        again = other.import_(tmp_path / "b.bundle", failures=True)  # idempotent
        assert again["unchanged"] == 7 and again["artifacts"] == 0
    # Filtered export.
    put(store, 30, arch="gfx950")
    assert store.export(tmp_path / "g.bundle", arch="gfx950")["artifacts"] == 1


def _rewrite_bundle(src, dst, *, manifest=None, blob=None, drop=None):
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for m in tin:
            data = tin.extractfile(m).read()
            if m.name == "manifest.json" and manifest:
                data = json.dumps(manifest(json.loads(data))).encode()
            elif m.name.startswith("blobs/") and blob and m.name == blob[0]:
                data = blob[1](data)
            if drop and m.name == drop:
                continue
            info = tarfile.TarInfo(m.name)
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))


def _flip_last(b: bytes) -> bytes:
    return b[:-1] + bytes([b[-1] ^ 1])


def _tamper_spec(m):
    m["entries"][0]["spec"]["tile_m"] = 128
    return m


@pytest.mark.parametrize("how", ["blob-byte", "blob-swapped", "manifest-input", "blob-missing", "not-a-tar"])
def test_tampered_bundle_is_refused_and_nothing_published(store, tmp_path, store_url, how):
    for i in range(3):
        put(store, i)
    store.export(tmp_path / "good.bundle")
    with tarfile.open(tmp_path / "good.bundle") as t:
        blob_names = [m.name for m in t if m.name.startswith("blobs/")]
    bad = tmp_path / "bad.bundle"
    if how == "blob-byte":
        _rewrite_bundle(tmp_path / "good.bundle", bad, blob=(blob_names[-1], _flip_last))
    elif how == "blob-swapped":  # a valid zstd frame of other bytes of the same size
        _rewrite_bundle(tmp_path / "good.bundle", bad,
                        blob=(blob_names[-1], lambda b: codec.encode(code_object(1234))))
    elif how == "manifest-input":
        _rewrite_bundle(tmp_path / "good.bundle", bad, manifest=_tamper_spec)
    elif how == "blob-missing":
        _rewrite_bundle(tmp_path / "good.bundle", bad, drop=blob_names[-1])
    else:
        bad.write_bytes(b"not a bundle at all")
    with Store.open(f"sqlite:///{tmp_path / 'fresh.sqlite'}") as fresh:
        with pytest.raises(BundleError):
            fresh.import_(bad)
        s = fresh.stats()
        assert (s.artifacts, s.failures, s.blobs) == (0, 0, 0)  # nothing published
        fresh.import_(tmp_path / "good.bundle")  # the store is still healthy
        assert fresh.stats().artifacts == 3


def test_tampered_bundle_into_populated_backend_store(store, tmp_path):
    # Same refusal into the parametrized backend (PostgreSQL too), which already holds data.
    for i in range(3):
        put(store, i)
    store.export(tmp_path / "good.bundle")
    with tarfile.open(tmp_path / "good.bundle") as t:
        name = [m.name for m in t if m.name.startswith("blobs/")][0]
    _rewrite_bundle(tmp_path / "good.bundle", tmp_path / "bad.bundle", blob=(name, _flip_last))
    before = store.stats()
    store.evict(0)
    with pytest.raises(BundleError):
        store.import_(tmp_path / "bad.bundle")
    after = store.stats()
    assert (after.artifacts, after.blobs) == (0, 0) and before.artifacts == 3


def test_export_refuses_a_corrupt_store(store, tmp_path):
    a = put(store, 1)
    _flip_byte(store, a.sha256)
    with pytest.raises(IntegrityError):
        store.export(tmp_path / "x.bundle")
    assert not (tmp_path / "x.bundle").exists()
