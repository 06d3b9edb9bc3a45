"""Provenance decides what is signed; launch contracts and specs are checked against the family.

Against a real `rocke-aot serve` with a publish token and real kernels (the builder's gemm fma
specs for gfx942 on llvm22): the issue-42 attack (a token holder PUTs, under the key of a spec
not built yet, a code object with one .text byte flipped) is stored as *published*, never counted
as built, never signed, flagged by `cache audit`, and replaced by the next build's bytes; a
contract whose grid is 4x too large or whose output is sized m instead of m*n, and a spec the
family refuses (waves=3), are refused at publish and at bundle import (nothing written).
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
import struct
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from _pg import pg_database, store_url  # noqa: F401
from _service import EXE, WHERE, built_store, serve_process  # noqa: F401
from sqlalchemy import text

from rocke_aot.aot import builder
from rocke_aot.aot.audit import audit
from rocke_aot.cache import codec, db
from rocke_aot.cache.keys import KeyInputs, artifact_key, thaw
from rocke_aot.cache.provenance import token_id
from rocke_aot.cache.store import Store
from rocke_aot.errors import BundleError, LaunchContractError, SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.trust import keys, repo
from rocke_aot.trust.release import release
from rocke_aot.trust.signable import signable_rows
from rocke_aot.variants.contract import check_entry, check_record_launch

TOKEN = "provenance-test-token"


def flip_text_byte(code: bytes) -> bytes:
    """The code object with one byte of its .text section flipped (ELF64 little endian, read with
    struct from the section headers: a reference independent of the code under test)."""
    shoff, = struct.unpack_from("<Q", code, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", code, 0x3A)

    def section(i):
        name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", code, shoff + i * shentsize)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        if code[stroff + name:stroff + name + 6] == b".text\0" and size:
            out = bytearray(code)
            out[off + size // 2] ^= 0x01
            return bytes(out)
    raise AssertionError("no .text section")


def body(a, code: bytes, *, spec=None, metadata=None) -> tuple[str, dict]:
    spec = thaw(a.spec) if spec is None else spec
    inputs = KeyInputs(a.arch, a.lane, a.profile, a.family, spec, a.recipe_digest, thaw(a.toolchain), thaw(a.options))
    doc = {"arch": a.arch, "lane": a.lane, "profile": a.profile, "family": a.family, "spec": spec,
           "recipe_digest": a.recipe_digest, "toolchain": thaw(a.toolchain), "options": thaw(a.options),
           "ir_sha256": a.ir_sha256, "sha256": codec.sha256_hex(code), "code_object": base64.b64encode(code).decode(),
           "metadata": thaw(a.metadata) if metadata is None else metadata, "provenance": {"from": "a tenant"}}
    return artifact_key(inputs), doc


def lying(metadata: dict, how: str) -> dict:
    m = copy.deepcopy(metadata)
    for launch in (m["launch"], m["kernel"]["launch"]):
        if how == "grid":
            launch["grid"][0] = f"({launch['grid'][0]}) * 4"
        else:  # the output buffer sized m instead of m * n
            for arg in launch["args"]:
                if arg["name"] == "C":
                    arg["expr"] = "m"
    return m


@pytest.fixture(scope="module")
def world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("provenance")
    with Store.open(kernel_bundle[0]) as built:
        arts = built.find()
        codes = {a.key: built.get(a.key).code_object for a in arts}
    (d / "token").write_text(TOKEN)
    Store.open(d / "served.sqlite").close()
    with serve_process(f"sqlite:///{d / 'served.sqlite'}", token_file=str(d / "token")) as (_, base):
        yield {"d": d, "arts": arts, "codes": codes, "base": base, "bundle": kernel_bundle[1]}


def put(world, key, doc):
    return httpx.put(f"{world['base']}/v1/kernels/{key}", json=doc, headers={"Authorization": f"Bearer {TOKEN}"},
                     timeout=60)


@pytest.mark.parametrize("how", ["grid", "output"])
def test_publish_refuses_a_contract_other_than_the_familys(world, how):
    a = world["arts"][1]
    assert check_record_launch(a.family, thaw(a.spec), a.arch, thaw(a.metadata)).kernel  # the honest one passes
    key, doc = body(a, world["codes"][a.key], metadata=lying(thaw(a.metadata), how))
    with pytest.raises(LaunchContractError):
        check_record_launch(a.family, thaw(a.spec), a.arch, doc["metadata"])
    r = put(world, key, doc)
    assert r.status_code == 422 and r.json()["field"] == "metadata.launch", r.text
    assert ("grid" if how == "grid" else "argument C.expr") in r.json()["message"]
    assert httpx.get(f"{world['base']}/v1/kernels/{key}/meta", timeout=10).status_code == 404


def test_publish_refuses_a_spec_the_family_refuses(world):
    a = world["arts"][1]
    key, doc = body(a, world["codes"][a.key], spec={**thaw(a.spec), "waves": 3})
    r = put(world, key, doc)
    assert r.status_code == 422 and r.json()["field"] == "spec" and "waves=3" in r.json()["message"], r.text
    assert httpx.get(f"{world['base']}/v1/kernels/{key}/meta", timeout=10).status_code == 404


def test_a_published_flipped_byte_is_never_built_signed_or_audited_clean(world, llvm22):
    a = world["arts"][0]
    evil = flip_text_byte(world["codes"][a.key])
    key, doc = body(a, evil)
    assert key == a.key  # the key of a spec of the default grid, not built on this server yet
    r = put(world, key, doc)
    assert r.status_code == 200 and r.json()["created"], r.text
    path = world["d"] / "served.sqlite"
    with Store.open(path) as store:
        row = store.record(key)
        assert (row.entered, thaw(row.entered_by), row.verified_at) == ("publish", {"token_id": token_id(TOKEN)},
                                                                         None)
        assert TOKEN not in json.dumps(row.as_dict())
        rows, left = signable_rows(store)
        assert rows == [] and [(x.key, x.entered) for x in left] == [(key, "publish")]
        assert "published" in left[0].reason
        _, rel = keys.generate(world["d"] / "root.key"), keys.generate(world["d"] / "rel.key")
        roots = {1: repo.signed_root(1, datetime.now(timezone.utc) + timedelta(days=30),
                                     keys.load_private(world["d"] / "root.key"), [rel])}
        with pytest.raises(SpecError, match="left out"):
            release(store, world["d"] / "signed", roots, [keys.load_private(world["d"] / "rel.key")])
        assert not (world["d"] / "signed" / "timestamp.json").exists()  # nothing signed
        report = audit(store)
        assert not report.ok and [u.key for u in report.unverified] == [key]
        # the builder never counts it cached: it compiles the spec and its bytes replace the published ones
        s = builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                          store=store, toolchains=[llvm22], where=WHERE)
        assert s.ok and (s["planned"], s["cached"], s["to_verify"], s["verified"]) == (8, 0, 1, 0), s.data
        assert [(x["key"], x["entered"], x["stored_sha256"], x["built_sha256"]) for x in s["replaced"]] == [
            (key, "publish", codec.sha256_hex(evil), a.sha256)]
        now = store.get(key)
        assert now.code_object == world["codes"][key] and now.entered == "build"
        rows, left = signable_rows(store)
        assert len(rows) == 8 and left == []
        assert audit(store).unverified == ()
    got = httpx.get(f"{world['base']}/v1/kernels/{key}", timeout=10)
    assert got.status_code == 200 and got.content == world["codes"][key]


def test_an_honest_publish_is_verified_by_the_next_build_and_then_signed(tmp_path, world, llvm22):
    a = world["arts"][2]
    url = f"sqlite:///{tmp_path / 'honest.sqlite'}"
    Store.open(url).close()
    with serve_process(url, token_file=str(world["d"] / "token")) as (_, base):
        key, doc = body(a, world["codes"][a.key])
        r = httpx.put(f"{base}/v1/kernels/{key}", json=doc, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        assert r.status_code == 200, r.text
    with Store.open(url) as store:
        assert not store.record(key).signable
        s = builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                          store=store, toolchains=[llvm22], where=WHERE)
        assert (s["to_verify"], s["verified"], s["replaced"]) == (1, 1, []), s.data
        row = store.record(key)
        assert row.entered == "publish" and row.verified_at is not None and row.signable
        assert len(signable_rows(store)[0]) == 8


def test_an_import_is_recorded_and_a_lying_bundle_is_refused(world, tmp_path, store_url):  # noqa: F811
    with Store.open(store_url) as store:
        store.import_(world["bundle"], check_entry=check_entry)
        rows = store.find()
        assert len(rows) == 8 and {r.entered for r in rows} == {"import"}
        assert {thaw(r.entered_by)["bundle"] for r in rows} == {Path(world["bundle"]).name}
        assert set(store.unverified()) == {r.key for r in rows}
        assert signable_rows(store)[0] == []
    # a bundle whose launch contract lies: refused whole (its hashes and record schema are fine)
    src = tmp_path / "src.sqlite"
    shutil.copyfile(Path(str(world["bundle"])).with_name("built.sqlite"), src)
    a = world["arts"][3]
    with Store.open(src) as s2:
        with s2.engine.begin() as c:
            c.execute(text("UPDATE artifacts SET metadata_json = :m WHERE key = :k"),
                      {"m": json.dumps(lying(thaw(a.metadata), "output")), "k": a.key})
        s2.export(tmp_path / "lying.bundle")
    with Store.open(tmp_path / "dst.sqlite") as dst:
        with pytest.raises(BundleError, match="LaunchContractError"):
            dst.import_(tmp_path / "lying.bundle", check_entry=check_entry)
        assert dst.find() == []
    p = subprocess.run([EXE, "cache", "import", str(tmp_path / "lying.bundle"), "--cache", str(tmp_path / "c.sqlite")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "argument C.expr" in p.stderr, p.stderr


def test_rows_of_an_older_store_are_legacy_until_a_build_verifies_them(store_url, world, llvm22):  # noqa: F811
    from alembic import command
    from alembic.config import Config

    from rocke_aot import cache as cache_pkg

    cols = ("key, status, arch, lane, profile, family, spec_json, recipe_digest, toolchain_json, options_json, "
            "blob_sha256, ir_sha256, metadata_json, provenance_json, error, log, built_at, last_read_at, generation, "
            "code_key, served")
    built = Path(str(world["bundle"])).with_name("built.sqlite")
    with Store.open(built) as src, src.engine.connect() as c:
        rows = [dict(r) for r in c.execute(text(f"SELECT {cols} FROM artifacts")).mappings()]
        blobs = [dict(r) for r in c.execute(text("SELECT * FROM blobs")).mappings()]
        gens = [dict(r) for r in c.execute(text("SELECT * FROM generations")).mappings()]
    engine = db.make_engine(db.resolve_url(store_url))
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(cache_pkg.__file__).parent / "migrations"))
    with db.write_tx(engine, exclusive=True) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0008_triton_entries")
        for table, many in (("blobs", blobs), ("generations", gens), ("artifacts", rows)):
            names = list(many[0])
            conn.execute(text(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(':' + n for n in names)})"),
                         many)
    engine.dispose()
    with Store.open(store_url) as store:  # upgraded to 0009 here
        assert {r.entered for r in store.find()} == {"legacy"} and len(store.unverified()) == 8
        assert signable_rows(store)[0] == []
        s = builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                          store=store, toolchains=[llvm22], where=WHERE)
        assert (s["to_verify"], s["verified"], s["replaced"], s["cached"]) == (8, 8, [], 0), s.data
        assert store.unverified() == {} and len(signable_rows(store)[0]) == 8
