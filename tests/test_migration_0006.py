"""Migration 0006_ir_keys from a store as the 0002_recipe_options schema (main before issue 22)
wrote it: nothing lost, nothing rebuilt, and a rebuild under a new recipe reuses every code
object (backfilled). SQLite and PostgreSQL.

The fixture store: real kernels built now, their rows copied (SQL) into a database that
Alembic brought to revision 0002_recipe_options, with the generations (v1 ids, one per
(arch, lane)) and the ref that main's Store.put and the builder's ref move wrote.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from _pg import pg_database, store_url  # noqa: F401
from alembic import command
from alembic.config import Config
from sqlalchemy import text

import rocke_aot.cache as cache_pkg
from rocke_aot.aot import builder
from rocke_aot.aot.builder import plan as plan_mod
from rocke_aot.cache import db
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.service.selection import select
from rocke_aot.targets import Target

WHERE = {"block_m": "64", "block_n": "64", "in_dtype": "f16", "out_dtype": "f32", "path": "fma"}
COLS = ("key, status, arch, lane, profile, family, spec_json, recipe_digest, toolchain_json, options_json, "
        "blob_sha256, ir_sha256, metadata_json, provenance_json, error, log, built_at, last_read_at")


def _gen_v1(arch, lane, digest, tc_json):
    h = hashlib.sha256(b"rocke-aot/generation/v1\n")
    for p in (arch, lane, digest, tc_json):
        h.update(p.encode() + b"\0")
    return h.hexdigest()[:32]


def _build(store, llvm22):
    return builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                         store=store, toolchains=[llvm22], where=WHERE, jobs=2)


def test_a_0002_recipe_options_store_migrates_losing_and_rebuilding_nothing(store_url, llvm22, tmp_path,
                                                                             monkeypatch):
    with Store.open(tmp_path / "src.sqlite") as src:
        assert _build(src, llvm22).ok
        with src.engine.connect() as c:
            rows = [dict(r) for r in c.execute(text(f"SELECT {COLS} FROM artifacts")).mappings()]
            blobs = [dict(r) for r in c.execute(text(
                "SELECT sha256, size, stored_size, codec, data, created_at, dict_id FROM blobs")).mappings()]
    assert len(rows) == 8
    engine = db.make_engine(db.resolve_url(store_url))
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(cache_pkg.__file__).parent / "migrations"))
    with db.write_tx(engine, exclusive=True) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002_recipe_options")
        for b in blobs:
            conn.execute(text("INSERT INTO blobs (sha256, size, stored_size, codec, data, created_at, dict_id) "
                              "VALUES (:sha256, :size, :stored_size, :codec, :data, :created_at, :dict_id)"), b)
        r0 = rows[0]
        gen = _gen_v1(r0["arch"], r0["lane"], r0["recipe_digest"], r0["toolchain_json"])
        for r in rows:
            conn.execute(text(f"INSERT INTO artifacts ({COLS}, generation) VALUES "
                              "(" + ", ".join(":" + c.strip() for c in COLS.split(",")) + ", :g)"), {**r, "g": gen})
        conn.execute(text("INSERT INTO generations (id, arch, lane, recipe_digest, toolchain_json, created_at) "
                          "VALUES (:i, :a, :l, :d, :t, 1.0)"),
                     {"i": gen, "a": r0["arch"], "l": r0["lane"], "d": r0["recipe_digest"], "t": r0["toolchain_json"]})
        conn.execute(text("INSERT INTO refs (arch, lane, generation, moved_at) VALUES (:a, :l, :g, 2.0)"),
                     {"a": r0["arch"], "l": r0["lane"], "g": gen})
    engine.dispose()

    problem = {"m": 1024, "n": 1024, "k": 512, "dtype": "f16"}
    with Store.open(store_url) as store:  # upgrades to head
        arts = {a.key: a for a in store.find()}
        # nothing lost: every key, its bytes (verified on read), its record
        assert set(arts) == {r["key"] for r in rows}
        for r in rows:
            a = store.get(r["key"])
            assert a.sha256 == r["blob_sha256"] and a.ir_sha256 == r["ir_sha256"]
        assert store.verify().ok  # every blob decodes, every key matches its stored inputs
        served = {c.candidate.key for c in select(store, "gfx942", "gemm", problem).accepted}
        assert served and served <= set(arts)
        gens = store.generations()
        assert len(gens) == 1 and gens[0].family == "gemm" and gens[0].current and gens[0].served == 8
        # the plan keys did not change; the rows predate provenance (rev 0010_provenance: 'legacy'), so the
        # first build compiles each once and compares (all verified, none replaced), then nothing is rebuilt
        first = _build(store, llvm22)
        assert (first["to_build"], first["to_verify"], first["verified"], first["replaced"]) == (0, 8, 8, [])
        again = _build(store, llvm22)
        assert again["to_build"] == 0 and again["cached"] == 8 and again["compiles"] == 0
        # a new recipe digest: every plan misses, every code object is found (backfilled)
        monkeypatch.setattr(plan_mod, "family_digest", lambda name: "0" * 64)  # what a plan key carries
        moved = _build(store, llvm22)
        assert moved["to_build"] == 8 and moved["reused"] == 8 and moved["compiles"] == 0
        assert {c.candidate.key for c in select(store, "gfx942", "gemm", problem).accepted}.isdisjoint(served)
