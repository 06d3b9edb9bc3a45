"""Crafted bundles: sizes checked before decoding, bounded manifests, named errors for bad
dates, code objects validated like a publish, failure records only when asked for.

Every refusal: a BundleError (CLI: exit 1, no traceback) and the store's stdlib-sqlite3
digest unchanged. The zstd frames are written by hand from the format (RFC 8878: magic,
frame header with an 8-byte content size, RLE blocks), so a frame can declare 4 GiB in
128 KiB; peak RSS is this process's ru_maxrss.
"""

from __future__ import annotations

import hashlib
import json
import resource
import struct

import pytest
from _service import filled_store  # noqa: F401
from click.testing import CliRunner
from test_hostile_records import readelf_resources
from test_reliability_service import _bundle, _member, _read_bundle, sqlite_digest

from rocke_aot.aot.codeobject import validate
from rocke_aot.cache.store import Store
from rocke_aot.cli.main import cli
from rocke_aot.errors import BundleError
from rocke_aot.targets import Target


def CHECK(code: bytes, arch: str) -> dict:  # what `rocke-aot cache import` passes
    return validate(code, Target.parse(arch)).as_dict()


def rle_frame(size: int, byte: bytes = b"A") -> bytes:
    """A valid zstd frame of ``size`` copies of ``byte``, declaring its content size."""
    out = [struct.pack("<I", 0xFD2FB528), bytes([0xE0]), struct.pack("<Q", size)]  # FCS 8 bytes, single segment
    left = size
    while left:
        n = min(left, 128 << 10)
        left -= n
        out.append(struct.pack("<I", (n << 3) | (1 << 1) | (1 if left == 0 else 0))[:3] + byte)  # RLE block
    return b"".join(out)


@pytest.fixture
def store(tmp_path, kernel_bundle):  # noqa: F811
    path = tmp_path / "store.sqlite"
    Store.open(path).close()
    return path, kernel_bundle[1]


def maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cli_import(bundle, path, *extra) -> tuple[int, str]:
    res = CliRunner().invoke(cli, ["cache", "import", str(bundle), "--cache", f"sqlite:///{path}", *extra])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert "Traceback" not in out
    return res.exit_code, out


def _one_blob(manifest, members, sha: str, frame: bytes, size: int) -> tuple[dict, list]:
    """The bundle with blob ``sha`` replaced by ``frame`` (manifest sizes: ``size``, len(frame))."""
    m = json.loads(json.dumps(manifest))
    m["blobs"][sha].update(size=size, stored_size=len(frame), stored_sha256=hashlib.sha256(frame).hexdigest())
    out = [(_member(info.name, frame)[0], frame) if info.name == f"blobs/{sha}.zst" else (info, body)
           for info, body in members]
    return m, out


def test_frames_declaring_huge_sizes_are_refused_before_decoding(store, tmp_path):
    path, good = store
    manifest, members = _read_bundle(good)
    sha = next(iter(manifest["blobs"]))
    before, peak0 = sqlite_digest(path), maxrss()
    four_gib = rle_frame(4 << 30)
    assert len(four_gib) < 200 << 10
    cases = {
        "4 GiB frame, manifest says 4 GiB": _one_blob(manifest, members, sha, four_gib, 4 << 30),
        "1 TiB header, manifest says 1 TiB": _one_blob(manifest, members, sha, rle_frame(0)[:5] + struct.pack(
            "<Q", 1 << 40) + rle_frame(0)[13:], 1 << 40),
        "1 TiB header, manifest says 1000": _one_blob(manifest, members, sha, rle_frame(0)[:5] + struct.pack(
            "<Q", 1 << 40) + rle_frame(0)[13:], 1000),
        "4 GiB frame, manifest says the real size": _one_blob(manifest, members, sha, four_gib,
                                                              manifest["blobs"][sha]["size"]),
    }
    with Store.open(path) as s:
        for what, (m, mem) in cases.items():
            bundle = _bundle(tmp_path / "huge.bundle", m, mem)
            with pytest.raises(BundleError):
                s.import_(bundle, check=CHECK)
            rc, out = cli_import(bundle, path)
            assert rc == 1 and "BundleError" in out, (what, out)
    assert maxrss() - peak0 < 256 << 20, "a frame was decoded before its size was checked"
    assert sqlite_digest(path) == before


def test_deep_or_malformed_manifests_and_dates_are_named_errors(store, tmp_path):
    path, good = store
    manifest, members = _read_bundle(good)
    before = sqlite_digest(path)
    deep = b'{"format": "rocke-aot-bundle", "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    bundles = {"deep manifest": _bundle(tmp_path / "deep.bundle", deep, members)}
    for what, value in (("date text", "yesterday"), ("date inf", float("inf")), ("date negative", -5),
                        ("date bool", True), ("date list", [1]), ("date huge", 1e300)):
        m = json.loads(json.dumps(manifest))
        m["entries"][0]["built_at"] = value
        bundles[what] = _bundle(tmp_path / f"{what}.bundle", json.dumps(m).encode(), members)
    for what, md in (("metadata wrong shape", {"code_object": "x"}), ("launch wrong shape", {"launch": [1]}),
                     ("deep metadata", {"x": json.loads("[" * 60 + "]" * 60)})):
        m = json.loads(json.dumps(manifest))
        e = next(e for e in m["entries"] if e["status"] == "ok")
        e["metadata"] = md
        bundles[what] = _bundle(tmp_path / f"{what}.bundle", m, members)
    with Store.open(path) as s:
        for what, bundle in bundles.items():
            with pytest.raises(BundleError):  # also without a code-object check: the record schema
                s.import_(bundle)
            rc, out = cli_import(bundle, path)
            assert rc == 1 and "BundleError" in out, (what, out)
    assert sqlite_digest(path) == before


def test_blobs_that_are_not_code_objects_for_their_arch_are_refused(store, tmp_path):
    path, good = store
    manifest, members = _read_bundle(good)
    before = sqlite_digest(path)
    import zstandard

    script = b"#!/bin/sh\necho pwned\n" * 8
    frame = zstandard.ZstdCompressor().compress(script)
    e = next(e for e in manifest["entries"] if e["status"] == "ok")
    m, mem = _one_blob(manifest, members, e["blob_sha256"], frame, len(script))
    sha = hashlib.sha256(script).hexdigest()  # a consistent bundle: the script under its own hash
    m["blobs"][sha] = m["blobs"].pop(e["blob_sha256"])
    for x in m["entries"]:
        if x.get("blob_sha256") == e["blob_sha256"]:
            x["blob_sha256"] = sha
    mem = [(_member(f"blobs/{sha}.zst", b)[0], b) if i.name == f"blobs/{e['blob_sha256']}.zst" else (i, b)
           for i, b in mem]
    script_bundle = _bundle(tmp_path / "script.bundle", m, mem)
    # a real code object, but every entry says it is for gfx90a (keys recomputed: consistent)
    other = json.loads(json.dumps(manifest))
    from rocke_aot.cache.keys import KeyInputs, artifact_key

    for x in other["entries"]:
        x["arch"] = "gfx90a"
        x["key"] = artifact_key(KeyInputs.from_dict(x))
    arch_bundle = _bundle(tmp_path / "arch.bundle", other, members)
    with Store.open(path) as s:
        for bundle in (script_bundle, arch_bundle):
            with pytest.raises(BundleError, match="not a valid code object"):
                s.import_(bundle, check=CHECK)
            rc, out = cli_import(bundle, path)
            assert rc == 1 and "not a valid code object" in out, out
    assert sqlite_digest(path) == before


def test_imported_resources_are_the_code_objects_own(store, tmp_path):
    path, good = store
    manifest, members = _read_bundle(good)
    lied = json.loads(json.dumps(manifest))
    for e in lied["entries"]:
        if e["status"] == "ok":
            e["metadata"]["code_object"].update(vgpr_count=1, sgpr_count=1, lds_bytes=0)
    rc, out = cli_import(_bundle(tmp_path / "lied.bundle", lied, members), path)
    assert rc == 0, out
    codes = {m.name[6:70]: None for m, _ in members if m.name.startswith("blobs/")}
    with Store.open(path) as s:
        for a in s.find():
            got = dict(a.metadata)["code_object"]
            want = readelf_resources(s.get(a.key).code_object, tmp_path)
            assert (got["vgpr_count"], got["sgpr_count"], got["lds_bytes"]) == (
                want["vgpr_count"], want["sgpr_count"], want["group_segment_fixed_size"])
            assert a.sha256 in codes


def test_failure_records_are_imported_only_when_asked_for(store, tmp_path):
    path, good = store
    manifest, members = _read_bundle(good)
    m = json.loads(json.dumps(manifest))
    victim = next(e for e in m["entries"] if e["status"] == "ok")
    m["entries"].remove(victim)
    m["blobs"].pop(victim["blob_sha256"], None)
    if any(e.get("blob_sha256") == victim["blob_sha256"] for e in m["entries"]):
        m["blobs"][victim["blob_sha256"]] = manifest["blobs"][victim["blob_sha256"]]
        mem = members
    else:
        mem = [(i, b) for i, b in members if i.name != f"blobs/{victim['blob_sha256']}.zst"]
    failure = {k: victim[k] for k in ("key", "arch", "lane", "profile", "family", "spec", "recipe_digest",
                                      "toolchain", "options", "built_at")}
    m["entries"].append({**failure, "status": "failed", "error": "LLVM ERROR: crafted", "log": ""})
    bundle = _bundle(tmp_path / "fail.bundle", m, mem)
    rc, out = cli_import(bundle, path)
    assert rc == 0 and "1 failures left out" in out, out
    with Store.open(path) as s:
        assert s.lookup_many([victim["key"]]) == {}  # a build will compile it
    rc, out = cli_import(bundle, path, "--with-failures")
    assert rc == 0, out
    with Store.open(path) as s:
        assert s.lookup_many([victim["key"]])[victim["key"]].kind == "failure"
