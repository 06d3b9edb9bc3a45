"""Trained zstd dictionaries on real code objects, the 0001 -> 0002 migration, bundles with dictionaries."""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

import pytest
from _bench import load_bench
from _pg import inputs, pg_database, store_url  # noqa: F401
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from rocke_aot.cache import codec, db, models
from rocke_aot.cache.store import Store
from rocke_aot.errors import BundleError, IntegrityError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kernels():
    """Real HSACOs: small kernels compiled with llvmlite (LLVM 22) and linked by ld.lld."""
    bench = load_bench("bench_cache")
    corpus = bench.build_corpus(16, arches=("gfx942",))
    assert all(c["data"][:4] == b"\x7fELF" for c in corpus)
    return corpus


def _put_all(store, corpus):
    arts = []
    for i, c in enumerate(corpus):
        inp = inputs(i, family=c["family"], spec={**c["knobs"], "i": i})
        arts.append(store.put(inp, c["data"], ir_sha256=hashlib.sha256(c["data"]).hexdigest(),
                              metadata={}, provenance={}))
    return arts


def _codecs(store):
    with store.engine.connect() as conn:
        return dict(conn.execute(text("SELECT codec, count(*) FROM blobs GROUP BY codec")).all())


def test_dictionaries_are_adopted_where_they_pay(store_url, kernels):
    with Store.open(store_url, touch_interval=0) as s:
        arts = _put_all(s, kernels)
        before = s.stats().stored_bytes
        reports = s.train_dictionaries(min_samples=8, dict_size=4096)
        assert {(r["arch"], r["family"]) for r in reports} == {("gfx942", f) for f in ("gemm", "reduce", "vadd")}
        adopted = [r for r in reports if r["adopted"]]
        assert adopted, reports  # small sibling kernels share most of their bytes
        for r in adopted:
            assert r["ratio_dict"] > r["ratio_plain"] and r["bytes_after"] < r["bytes_before"]
        assert s.stats().stored_bytes < before
        assert _codecs(s).get("zstd-dict") == sum(r["recompressed"] for r in adopted)
        for a, c in zip(arts, kernels):
            assert s.get(a.key).code_object == c["data"]
        assert s.verify().ok
        # A new put of an adopted pair is compressed with the pair's dictionary.
        fam = adopted[0]["family"]
        src = next(c for c in kernels if c["family"] == fam)
        data = src["data"][:-16] + bytes(16)  # a new, similar code object
        a = s.put(inputs(999, family=fam), data, ir_sha256="1" * 64, metadata={}, provenance={})
        with s.engine.connect() as conn:
            assert conn.execute(text("SELECT codec FROM blobs WHERE sha256 = :s"), {"s": a.sha256}).scalar() == "zstd-dict"
        assert s.get(a.key).code_object == data
        # Training again finds the blobs already on the current dictionary.
        again = s.train_dictionaries(min_samples=8, dict_size=4096)
        assert all(r.get("recompressed", 0) == 0 for r in again if r["adopted"])


def test_small_pairs_are_left_alone(tmp_path, kernels):
    with Store.open(tmp_path / "c.sqlite") as s:
        _put_all(s, kernels)
        reports = s.train_dictionaries(min_samples=1000)
        assert not any(r["adopted"] for r in reports)
        assert all("samples" in r["reason"] for r in reports)
        assert set(_codecs(s)) == {"zstd"}


def test_a_missing_dictionary_fails_closed(tmp_path, kernels):
    with Store.open(tmp_path / "c.sqlite") as s:
        arts = _put_all(s, kernels)
        assert any(r["adopted"] for r in s.train_dictionaries(min_samples=8, dict_size=4096))
        with s.engine.begin() as conn:
            victim = conn.execute(text("SELECT sha256 FROM blobs WHERE dict_id IS NOT NULL LIMIT 1")).scalar()
            conn.execute(text("DELETE FROM zstd_dicts"))
    with Store.open(tmp_path / "c.sqlite") as s:  # fresh process state: no cached dictionary
        key = next(a.key for a in arts if a.sha256 == victim)
        with pytest.raises(IntegrityError, match="dictionary"):
            s.get(key)
        assert victim in {sha for sha, _ in s.verify().corrupt}


def test_bundles_carry_dictionaries(store_url, kernels, tmp_path):
    with Store.open(store_url) as s:
        arts = _put_all(s, kernels)
        s.train_dictionaries(min_samples=8, dict_size=4096)
        info = s.export(tmp_path / "d.bundle")
    with tarfile.open(tmp_path / "d.bundle") as t:
        names = [m.name for m in t]
    dict_members = [n for n in names if n.startswith("dicts/")]
    assert dict_members and names.index(dict_members[-1]) < min(i for i, n in enumerate(names) if n.startswith("blobs/"))
    with Store.open(tmp_path / "other.sqlite") as o:
        assert o.import_(tmp_path / "d.bundle")["artifacts"] == info["artifacts"]
        for a, c in zip(arts, kernels):
            assert o.get(a.key).code_object == c["data"]
        assert o.verify().ok
    # A tampered dictionary is refused and nothing is published.
    bad = tmp_path / "bad.bundle"
    with tarfile.open(tmp_path / "d.bundle") as tin, tarfile.open(bad, "w") as tout:
        for m in tin:
            data = tin.extractfile(m).read()
            if m.name == dict_members[0]:
                data = data[:-1] + bytes([data[-1] ^ 1])
            tout.addfile(m, __import__("io").BytesIO(data))
    with Store.open(tmp_path / "fresh.sqlite") as f:
        with pytest.raises(BundleError):
            f.import_(bad)
        st = f.stats()
        assert (st.artifacts, st.blobs) == (0, 0)


def test_upgrade_from_revision_0001_keeps_the_data_until_key_v2(store_url):
    engine = db.make_engine(db.resolve_url(store_url))
    cfg = Config()
    cfg.set_main_option("script_location", str(ROOT / "rocke_aot" / "cache" / "migrations"))
    raw = b"\x7fELF" + bytes(range(256)) * 8
    sha = hashlib.sha256(raw).hexdigest()
    inp = inputs(1)
    key = "ab" * 32  # a v1 key (made before key v2; no v2 key can equal it)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        stored = codec.encode(raw)
        conn.execute(text("INSERT INTO blobs VALUES (:s, :n, :z, 'zstd', :d, 0)"),
                     {"s": sha, "n": len(raw), "z": len(stored), "d": stored})
        conn.execute(text(
            "INSERT INTO artifacts (key, status, arch, lane, profile, family, spec_json, lowering_digest,"
            " toolchain_json, blob_sha256, ir_sha256, metadata_json, provenance_json, built_at, last_read_at)"
            " VALUES (:k, 'ok', :arch, :lane, :profile, :family, :spec, :ld, :tc, :s, :ir, '{}', '{}', 1, 1)"),
            {"k": key, "arch": inp.arch, "lane": inp.lane, "profile": inp.profile, "family": inp.family,
             "spec": inp.spec_json, "ld": "lower-v1", "tc": inp.toolchain_json, "s": sha, "ir": "0" * 64})
        assert conn.execute(text("SELECT value FROM rocke_meta")).scalar() == "1"
        command.upgrade(cfg, "0003")  # dictionaries, the lookup index: the data stays
        assert conn.execute(text("SELECT key FROM artifacts")).scalars().all() == [key]
        assert conn.execute(text("SELECT value FROM rocke_meta")).scalar() == "3"
    engine.dispose()
    with Store.open(store_url) as s:  # upgrades 0003 -> head (0010_provenance) through Alembic
        # v1 keys can never be hit under key v2: their rows are gone, the blob waits for gc
        st = s.stats()
        assert (st.artifacts, st.failures, st.blobs, st.orphan_blobs) == (0, 0, 1, 1)
        assert s.gc().blobs_deleted == 1
        with s.engine.connect() as conn:
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == models.HEAD_REVISION
            assert models.HEAD_REVISION == "0010_provenance"
            assert conn.execute(text("SELECT value FROM rocke_meta")).scalar() == str(models.SCHEMA_VERSION)
            assert compare_metadata(MigrationContext.configure(conn), models.metadata) == []
        a = s.put(inp, raw, ir_sha256="0" * 64, metadata={}, provenance={})
        assert s.get(a.key).code_object == raw and s.get(a.key).recipe_digest == inp.recipe_digest
