"""Generations (side by side, a spec served by its best-ranked build; gc --keep N) and the read-only store, on SQLite and a
real PostgreSQL (a read-only role created here)."""

from __future__ import annotations

import os
import secrets
import sqlite3
from urllib.parse import quote

import pytest
from _pg import _connect, pg_database, role_url, store_url  # noqa: F401
from _selstore import TOOLCHAIN, put_fake
from sqlalchemy import text

from rocke_aot.cache.generations import generation_id
from rocke_aot.cache.keys import canonical_json
from rocke_aot.cache.store import Store
from rocke_aot.errors import CacheAccessError, IntegrityError, NotFoundError, ReadOnlyError, SpecError
from rocke_aot.service.selection import select
from rocke_aot.variants import selection as S

DEVICE = "gfx942:sramecc+:xnack-"
SPECS = [dict(in_dtype="f16", out_dtype="f32", block_m=bm, block_n=bn, block_k=32, waves=4, path="fma",
              double_buffer=False, vector_width=4, mma="auto") for bm in (32, 64) for bn in (32, 64)]
PROBLEM = {"m": 512, "n": 512, "k": 128}


def _gen(digest, arch="gfx942", lane="llvm22", family="gemm"):
    return generation_id(arch, lane, family, digest, canonical_json(TOOLCHAIN))


def _gen_v1(digest, arch="gfx942", lane="llvm22"):
    """The generation id before 0006 (per arch and lane), by its documented rule."""
    import hashlib

    h = hashlib.sha256(b"rocke-aot/generation/v1\n")
    for part in (arch, lane, digest, canonical_json(TOOLCHAIN)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def _served(store):
    return {c.candidate.key for c in select(store, DEVICE, "gemm", PROBLEM).accepted}


def test_generations_serve_side_by_side_and_never_drop(store_url):
    with Store.open(store_url) as store:
        old = {put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d1").key for s in SPECS}
        # A first build serves while it runs (nothing else serves these specs).
        assert _served(store) == old and store.current_generation("gfx942", "llvm22", "gemm") is None
        store.complete_generation(_gen("d1"))
        new = {put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d2").key for s in SPECS}
        assert not old & new
        # The new build has not completed: the complete one keeps serving every spec.
        sel = select(store, DEVICE, "gemm", PROBLEM)
        assert {c.candidate.key for c in sel.accepted} == old
        assert {r.candidate.key for r in sel.rejected if r.reason == S.STALE} == new
        store.complete_generation(_gen("d2"))
        sel = select(store, DEVICE, "gemm", PROBLEM)
        assert {c.candidate.key for c in sel.accepted} == new
        assert {r.candidate.key for r in sel.rejected} == old and all(r.reason == S.STALE for r in sel.rejected)
        fast = select(store, DEVICE, "gemm", PROBLEM, explain=False)
        assert [c.candidate.key for c in fast.accepted] == [c.candidate.key for c in sel.accepted]
        # A partial build under a third recipe (two specs, like --where) takes over only those two.
        part = {put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d3").key for s in SPECS[:2]}
        store.complete_generation(_gen("d3"))
        keep = {a.key for a in store.find(family="gemm") if a.spec in [dict(x) for x in SPECS[2:]]
                and a.recipe_digest == "d2"}
        assert _served(store) == part | keep and len(keep) == 2
        # listings serve exactly what select serves
        page = store.find(arch="gfx942", family="gemm", served_only=True, limit=100)
        assert {a.key for a in page} == part | keep
        gens = {g.id: g for g in store.generations()}
        assert gens[_gen("d3")].current and not gens[_gen("d2")].current
        assert (gens[_gen("d1")].served, gens[_gen("d2")].served, gens[_gen("d3")].served) == (0, 2, 2)
        assert gens[_gen("d1")].artifacts == gens[_gen("d2")].artifacts == len(SPECS)
        with pytest.raises(NotFoundError):
            store.complete_generation("0" * 32)


def test_gc_keeps_n_generations_of_history_and_every_served_row(store_url):
    with Store.open(store_url) as store:
        keys = {}
        for d in ("d1", "d2", "d3", "d4"):
            keys[d] = {put_fake(store, "gfx942", "llvm22", "gemm", s, digest=d).key for s in SPECS}
            store.complete_generation(_gen(d))
        other = put_fake(store, "gfx950", "llvm22", "gemm", SPECS[0], digest="d1").key  # another arch
        rep = store.gc_generations(keep=1)
        # d4 serves, one of history (d3) stays whole, d1 and d2 (nothing served) go
        assert sorted(rep.generations_dropped) == sorted([_gen("d1"), _gen("d2")])
        assert rep.artifacts_evicted == 2 * len(SPECS) and rep.blobs_deleted == 2 * len(SPECS)
        assert {a.key for a in store.find()} == keys["d3"] | keys["d4"] | {other}
        # a partial d5 build (two specs): gc --keep 0 drops d3 and the two d4 rows d5 shadows,
        # never the two d4 rows that still serve
        d5 = {put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d5").key for s in SPECS[:2]}
        store.complete_generation(_gen("d5"))
        served = _served(store)
        rep = store.gc_generations(keep=0)
        assert rep.generations_dropped == (_gen("d3"),) and rep.artifacts_evicted == len(SPECS) + 2
        assert _served(store) == served and len(served & keys["d4"]) == 2
        assert {a.key for a in store.find()} == served | {other} and d5 <= served
        with pytest.raises(SpecError):
            store.gc_generations(keep=-1)


def test_paging_with_a_cursor(store_url):
    with Store.open(store_url) as store:
        keys = sorted(put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d1").key for s in SPECS)
        keys += []
        seen, pages, after = [], 0, None
        while True:
            page = store.find(family="gemm", served_only=True, after=after, limit=3)
            seen += [a.key for a in page]
            pages += 1
            if len(page) < 3:
                break
            after = page[-1].key
        assert seen == keys and pages == len(keys) // 3 + 1
        with pytest.raises(SpecError, match="after"):
            store.find(after="nope")
        with pytest.raises(SpecError, match="limit"):
            store.find(limit=0)


def test_get_blob_verifies(store_url):
    with Store.open(store_url) as store:
        art = put_fake(store, "gfx942", "llvm22", "gemm", SPECS[0])
        raw = store.get(art.key).code_object
        assert store.get_blob(art.sha256) == raw
        with pytest.raises(NotFoundError):
            store.get_blob("0" * 64)
        with pytest.raises(SpecError):
            store.get_blob("xyz")
        if store.backend == "sqlite":
            with store.engine.begin() as conn:
                conn.execute(text("UPDATE blobs SET data = zeroblob(length(data))"))
            with pytest.raises(IntegrityError):
                store.get_blob(art.sha256)


def test_reads_batch_their_times(tmp_path):
    """get() never opens a write transaction per read: read times wait for flush_reads()."""
    path = tmp_path / "c.sqlite"
    with Store.open(path, touch_interval=0.0) as store:
        keys = [put_fake(store, "gfx942", "llvm22", "gemm", s).key for s in SPECS]
        writes = []
        from rocke_aot.cache import db as dbmod
        real = dbmod.write_tx

        def counting(engine, **kw):
            writes.append(1)
            return real(engine, **kw)

        dbmod.write_tx = counting
        try:
            store.artifacts.flushed_at = float("inf")  # hold the batch open for this check
            for _ in range(3):
                for k in keys:
                    store.get(k)
            assert writes == []
            assert store.flush_reads() == len(keys)
            assert writes == [1]
        finally:
            dbmod.write_tx = real


def _writes_refused(store):
    art_key = store.find()[0].key
    assert store.get(art_key).code_object  # reads work
    assert select(store, DEVICE, "gemm", PROBLEM).accepted
    from _selstore import fake_inputs
    for call in (lambda: put_fake(store, "gfx942", "llvm22", "gemm", SPECS[0], digest="zz"),
                 lambda: store.put_failure(fake_inputs("gfx942", "llvm22", "gemm", SPECS[0]), "boom"),
                 lambda: store.gc(), lambda: store.evict(0), lambda: store.gc_generations(0),
                 lambda: store.complete_generation(_gen("d1")),
                 lambda: store.claim(["0" * 64], "me", 5.0), lambda: store.train_dictionaries()):
        with pytest.raises(ReadOnlyError, match="read-only"):
            call()


def test_readonly_sqlite_file(tmp_path):
    path = tmp_path / "c.sqlite"
    with Store.open(path) as store:
        for s in SPECS:
            put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d1")
    os.chmod(path, 0o444)
    before = path.read_bytes()
    with Store.open(path, readonly=True) as ro:
        _writes_refused(ro)
        # Below the store's own check, SQLite itself refuses: the file is opened mode=ro.
        with pytest.raises(CacheAccessError, match=r"is read-only: this command writes to it \(attempt to write a readonly database\)"):
            with ro.engine.begin() as conn:
                conn.execute(text("DELETE FROM claims"))
        for k in [a.key for a in ro.find()]:
            ro.get(k)
    assert path.read_bytes() == before  # no read time, no journal change: not a byte written
    con = sqlite3.connect(path)
    assert con.execute("SELECT COUNT(*) FROM artifacts").fetchone()[0] == len(SPECS)
    con.close()


def test_readonly_never_creates(tmp_path):
    with pytest.raises(NotFoundError, match="never created"):
        Store.open(tmp_path / "missing.sqlite", readonly=True)
    assert not (tmp_path / "missing.sqlite").exists()


def test_readonly_sqlite_refuses_an_old_schema(tmp_path):
    path = tmp_path / "c.sqlite"
    Store.open(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE alembic_version SET version_num = '0003'")
    con.commit()
    con.close()
    from rocke_aot.errors import SchemaVersionError
    with pytest.raises(SchemaVersionError):
        Store.open(path, readonly=True)


def test_readonly_postgresql_role(pg_database):
    dbname = pg_database.rsplit("/", 1)[1]
    schema, role = f"ro_{secrets.token_hex(5)}", f"rocke_ro_{secrets.token_hex(5)}"
    with _connect(dbname) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'CREATE ROLE "{role}" LOGIN PASSWORD \'{role}-pw\'')  # the test cluster: scram
    url = f"{pg_database}?options={quote(f'-csearch_path={schema}')}"
    try:
        with Store.open(url) as store:
            for s in SPECS:
                put_fake(store, "gfx942", "llvm22", "gemm", s, digest="d1")
        with _connect(dbname) as conn:
            conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
            conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        ro_url = role_url(url, role, f"{role}-pw")
        with Store.open(ro_url, readonly=True) as ro:
            _writes_refused(ro)
            with pytest.raises(Exception, match="read-only|permission denied"):
                with ro.engine.begin() as conn:
                    conn.execute(text("DELETE FROM claims"))
        # The role really cannot write: a plain (not readonly) store of it fails at the server.
        with pytest.raises(Exception, match="permission denied|read-only"):
            with Store.open(ro_url) as rw:
                put_fake(rw, "gfx942", "llvm22", "gemm", SPECS[0], digest="zz")
    finally:
        with _connect(dbname) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def test_upgrade_from_0003_backfills_generations_and_refs(store_url):
    """A store written before generations existed: each row gets the generation its inputs name,
    and each (arch, lane) ref points at the generation of its newest artifact.

    (Checked at revision 0003_generations with SQL: the next revision, 0002_recipe_options
    (cache key v2), empties the v1 rows again, so the head store cannot show the backfill.)"""
    from pathlib import Path as P

    from alembic import command
    from alembic.config import Config

    import rocke_aot.cache as cache_pkg
    from rocke_aot.cache import db as dbmod

    with Store.open(store_url) as store:
        made = [put_fake(store, "gfx942", "llvm22", "gemm", SPECS[0], digest="d1"),
                put_fake(store, "gfx942", "llvm22", "gemm", SPECS[1], digest="d2"),  # newer build
                put_fake(store, "gfx950", "llvm24", "gemm", SPECS[0], digest="d1")]
        with store.engine.begin() as conn:
            rows = [dict(r) for r in conn.execute(text(
                "SELECT key, status, arch, lane, profile, family, spec_json, recipe_digest, toolchain_json, "
                "blob_sha256, ir_sha256, metadata_json, provenance_json FROM artifacts")).mappings()]
        order = {a.key: i for i, a in enumerate(made)}
        cfg = Config()
        cfg.set_main_option("script_location", str(P(cache_pkg.__file__).parent / "migrations"))
        with dbmod.write_tx(store.engine, exclusive=True) as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, "0003")
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0003"
            # the rows as a 0003 store held them (the downgrade emptied the table: v2 rows are
            # unreachable under v1 keys), built in the order made
            for r in rows:
                conn.execute(text(
                    "INSERT INTO artifacts (key, status, arch, lane, profile, family, spec_json, lowering_digest, "
                    "toolchain_json, blob_sha256, ir_sha256, metadata_json, provenance_json, built_at, last_read_at) "
                    "VALUES (:key, :status, :arch, :lane, :profile, :family, :spec_json, :recipe_digest, "
                    ":toolchain_json, :blob_sha256, :ir_sha256, :metadata_json, :provenance_json, :t, :t)"),
                    {**r, "t": 1000.0 + order[r["key"]]})
            command.upgrade(cfg, "0003_generations")  # backfilling
            gens = conn.execute(text("SELECT id, arch, lane, recipe_digest FROM generations")).all()
            assert {(a, l, d) for _, a, l, d in gens} == {("gfx942", "llvm22", "d1"), ("gfx942", "llvm22", "d2"),
                                                          ("gfx950", "llvm24", "d1")}
            assert all(i == _gen_v1(d, a, l) for i, a, l, d in gens)
            refs = dict(((a, l), g) for a, l, g in conn.execute(text("SELECT arch, lane, generation FROM refs")))
            assert refs == {("gfx942", "llvm22"): _gen_v1("d2"), ("gfx950", "llvm24"): _gen_v1("d1", "gfx950", "llvm24")}
            per_gen = conn.execute(text("SELECT generation, COUNT(*) FROM artifacts GROUP BY generation")).all()
            assert sorted(n for _, n in per_gen) == [1, 1, 1] and None not in {g for g, _ in per_gen}
    with Store.open(store_url) as store:  # on to the head: key v2 drops the v1 rows and their generations
        assert store.stats().artifacts == 0 and not store.generations()
