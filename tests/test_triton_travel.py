"""Triton cache entries travel with their builds: bundles, the service after an import, static mirrors.

    the build     triton_softmax (BLOCK=1024, cols % 16 == 0) for gfx942 by Triton 3.9.0 (llvm24):
                  one artifact and its Triton entry (<kernel>.json, the binary = the artifact's
                  code object, the group file), by the real builder
    bundle        export -> import into an empty store (the CLI's code-object check): the entry
                  arrives with the same files, bytes, version, target, as the build's; importing
                  again changes nothing; a bundle whose entry names another file than its artifact's
                  record, or an artifact it does not carry, is refused and nothing is imported
    the service   `rocke-aot serve` of the imported store: a fresh GPU host's Triton (a CPU Triton 3.9
                  process, tests/_triton_host.py) compiles nothing, its two look-ups hits
    a mirror      the imported store signed (trust/release.py), `rocke-aot mirror export`, served by
                  a real nginx (tests/_nginx.py), no server at all: the host with a pinned root key and
                  ROCKE_AOT_MIRRORS compiles nothing; an entry the mirror rewrote (its metadata file
                  swapped for the group file) is "unsigned", a miss, and the host compiles it itself
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from _nginx import nginx, served_dir
from _service import EXE, live_server
from test_reliability_service import _bundle, _read_bundle, sqlite_digest
from test_triton_remote_cache import host, triton39  # noqa: F401 - the llvm24 lane's Triton, a host run

from rocke_aot.aot.builder import build
from rocke_aot.aot.codeobject import validate
from rocke_aot.cache.store import Store
from rocke_aot.errors import BundleError, SpecError
from rocke_aot.targets import Target
from rocke_aot.trust import keys, repo
from rocke_aot.trust.release import release

HOST_ARGS = ("hip", "gfx942", 64, 1024, 4096)  # the softmax launch the build prebuilt


def CHECK(code: bytes, arch: str) -> dict:  # what `rocke-aot cache import` passes
    return validate(code, Target.parse(arch)).as_dict()


def _entry(store: Store, key: str) -> dict:
    return {f: (e.blob_sha256, e.size, e.triton_version, e.target, e.source) for f, e in store.triton_entry(key).items()}


@pytest.fixture(scope="module")
def moved(tmp_path_factory, all_toolchains, triton39):  # noqa: F811
    d = tmp_path_factory.mktemp("triton-travel")
    with Store.open(d / "built.sqlite") as store:
        s = build(arches=[Target.parse("gfx942")], families=["triton_softmax"], lanes=["llvm24"], store=store,
                  toolchains=all_toolchains, where={"BLOCK": "1024", "cols_class": "div16"})
        assert s["built"] == 1 and not s["failed"]
        art = store.find(family="triton_softmax")[0]
        tkey = art.metadata["triton"]["key"]
        built = _entry(store, tkey)
        exported = store.export(d / "triton.bundle")
    with Store.open(d / "imported.sqlite") as store:
        imported = store.import_(d / "triton.bundle", check=CHECK)
        again = store.import_(d / "triton.bundle", check=CHECK)
        arrived = _entry(store, tkey)
        blobs = {f: store.get_blob(sha) for f, (sha, *_) in arrived.items()}
        owner = {e.artifact_key for e in store.triton_entry(tkey).values()}
    return {"d": d, "toolchains": all_toolchains, "art": art, "tkey": tkey, "built": built, "exported": exported, "imported": imported,
            "again": again, "arrived": arrived, "blobs": blobs, "owner": owner}


def test_a_bundle_carries_the_triton_entry_of_each_build(moved):
    art, name = moved["art"], moved["art"].metadata["triton"]["name"]
    assert moved["exported"]["triton_entries"] == 1 and moved["exported"]["blobs"] == 3
    assert moved["imported"]["triton_entries"] == 1 and moved["imported"]["artifacts"] == 1
    assert moved["arrived"] == moved["built"]  # every file: same sha256, size, version, target, a build's
    assert set(moved["arrived"]) == {f"{name}.json", f"{name}.hsaco", f"__grp__{name}.json"}
    assert {v[2:] for v in moved["arrived"].values()} == {("3.9.0", "hip:gfx942:64", "build")}
    assert moved["owner"] == {art.key}
    assert moved["blobs"][f"{name}.hsaco"] == validate_bytes(moved)  # the binary is the code object
    assert json.loads(moved["blobs"][f"__grp__{name}.json"]) == {"child_paths": sorted([f"{name}.json",
                                                                                        f"{name}.hsaco"])}
    assert json.loads(moved["blobs"][f"{name}.json"])["triton_version"] == "3.9.0"
    assert moved["again"]["artifacts"] == 0 and moved["again"]["unchanged"] == 1  # idempotent


def validate_bytes(moved) -> bytes:
    with Store.open(moved["d"] / "imported.sqlite", readonly=True) as store:
        raw = store.get(moved["art"].key).code_object
    assert validate(raw, Target.parse("gfx942")).kernel == "softmax_kernel"
    return raw


def test_a_bundle_whose_triton_entry_is_not_its_builds_is_refused(moved, tmp_path):
    manifest, members = _read_bundle(moved["d"] / "triton.bundle")
    name = moved["art"].metadata["triton"]["name"]
    (tkey, t), = manifest["triton"].items()
    swapped = json.loads(json.dumps(manifest))  # the metadata and group files' blobs swapped
    swapped["triton"][tkey]["files"][f"{name}.json"] = t["files"][f"__grp__{name}.json"]
    swapped["triton"][tkey]["files"][f"__grp__{name}.json"] = t["files"][f"{name}.json"]
    orphan = json.loads(json.dumps(manifest))  # an entry naming an artifact the bundle does not carry
    orphan["triton"][tkey]["artifact_key"] = "0" * 64
    renamed = json.loads(json.dumps(manifest))  # a file the build's record does not name
    renamed["triton"][tkey]["files"]["extra.json"] = renamed["triton"][tkey]["files"].pop(f"{name}.json")
    for label, m, why in (("swapped", swapped, f"{name}.json is not the one its artifact's record states"),
                          ("orphan", orphan, "which is no Triton build of this key in the bundle"),
                          ("renamed", renamed, "the build's record names")):
        target = tmp_path / f"{label}.sqlite"
        Store.open(target).close()
        before = sqlite_digest(target)
        with Store.open(target) as store, pytest.raises(BundleError, match=why):
            store.import_(_bundle(tmp_path / f"{label}.bundle", m, members), check=CHECK)
        assert sqlite_digest(target) == before, label  # nothing imported


def test_the_service_serves_an_imported_entry_and_a_fresh_host_compiles_nothing(moved, triton39, tmp_path):  # noqa: F811
    with live_server(str(moved["d"] / "imported.sqlite")) as base:
        got, _ = host(triton39, {"base": base}, tmp_path, *HOST_ARGS)
    assert got["compiled"] == 0 and got["cache_hit"] == 1 and got["events"] == {"hit": 2}
    assert got["hash"] == moved["art"].metadata["triton"]["hash"]


@pytest.fixture(scope="module")
def mirrored(moved):
    d = moved["d"]
    for name in ("root", "release"):
        keys.generate(d / f"{name}.key")
    rk, rel = keys.load_private(d / "root.key"), keys.load_private(d / "release.key")
    root = {1: repo.signed_root(1, datetime.now(timezone.utc) + timedelta(days=30), rk, [rel.public])}
    with Store.open(d / "imported.sqlite") as store:
        # an import is not a build here: a release leaves it out until a build here verifies it
        with pytest.raises(SpecError, match="left out"):
            release(store, d / "unsigned", root, [rel])
        s = build(arches=[Target.parse("gfx942")], families=["triton_softmax"], lanes=["llvm24"], store=store,
                  toolchains=moved["toolchains"], where={"BLOCK": "1024", "cols_class": "div16"})
        assert (s["to_verify"], s["verified"], s["replaced"], s["cached"]) == (1, 1, [], 0), s.data
        release(store, d / "signed", root, [rel])
    where = served_dir()
    p = subprocess.run([EXE, "mirror", "export", "--cache", str(d / "imported.sqlite"), "--signed", str(d / "signed"),
                        "--root-key", str(d / "root.key.pub"), "-o", str(where / "tree"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    yield {"tree": where / "tree", "report": json.loads(p.stdout), "pin": str(d / "root.key.pub")}
    shutil.rmtree(where)


def _signed_host(triton39, mirror_url, pin, tmp_path):  # noqa: F811
    env = {"ROCKE_AOT_SERVER": "", "ROCKE_AOT_MIRRORS": mirror_url, "ROCKE_AOT_ROOT_KEY": pin, "ROCKE_AOT_INSECURE": "0"}
    return host(triton39, {"base": ""}, tmp_path, *HOST_ARGS, env=env)


def test_a_static_mirror_serves_signed_entries_and_a_host_compiles_nothing(moved, mirrored, triton39, tmp_path):  # noqa: F811
    tkey, name = moved["tkey"], moved["art"].metadata["triton"]["name"]
    rep = mirrored["report"]
    assert rep["triton_entries"] == 1 and rep["triton_missing"] == [] and rep["kernels"] == 3
    doc = json.loads((mirrored["tree"] / "triton" / f"{tkey}.json").read_text())
    assert {f: v["sha256"] for f, v in doc["files"].items()} == {f: v[0] for f, v in moved["arrived"].items()}
    assert {v["artifact_key"] for v in doc["files"].values()} == {moved["art"].key}  # the signed kernel
    with nginx(mirrored["tree"]) as url:
        got, _ = _signed_host(triton39, url, mirrored["pin"], tmp_path / "good")
        assert got["compiled"] == 0 and got["cache_hit"] == 1 and got["events"] == {"hit": 2}
        # the mirror rewrites the entry: its metadata file is now the group file's blob
        doc["files"][f"{name}.json"] = dict(doc["files"][f"__grp__{name}.json"])
        (mirrored["tree"] / "triton" / f"{tkey}.json").write_text(json.dumps(doc))
        bad, err = _signed_host(triton39, url, mirrored["pin"], tmp_path / "bad")
    assert bad["compiled"] == 1 and bad["events"].get("unsigned") == 1 and "hit" not in bad["events"]
    assert "the entry's files are not the ones the signed record states" in err
