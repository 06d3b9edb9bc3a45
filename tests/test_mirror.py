"""Static mirrors served by a real nginx (Debian's), and the attacks a mirror can try.

    store (8 real kernels) ──trust sign──> signed/ ──rocke-aot mirror export──> tree/
    nginx (unprivileged, loopback) serving a copy of tree/ per test
    Fetcher([MirrorSource(nginx)], root_key=pinned): every kernel's bytes equal the store's
    each attack (tampered blob, tampered bin, a snapshot other than the timestamp names, a
    replayed older timestamp, an expired one, another root key's repository) -> its named
    error, nothing stored, the verified state unchanged; mirrors then the service in order
    the fast path (client/wire.py's httpcore pool, each blob hashed once on download, every
    local read hashed again) and what nginx can make it bound: an oversized body, a body
    trickled past the deadline, a body cut short, a frame of the wrong length -> each a
    named error, nothing stored
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from datetime import datetime, timezone

import httpx
import pytest
import zstandard
from _nginx import nginx, served_dir
from _service import EXE, built_store, serve_process  # noqa: F401

from rocke_aot.cache.keys import thaw
from rocke_aot.client import Fetcher, LocalStore, MirrorSource, ServiceSource
from rocke_aot.client import local as client_local
from rocke_aot.client.sources import BLOB_SLACK
from rocke_aot.errors import (
    AnswerTooLargeError,
    BlobMismatchError,
    DeadlineError,
    ExpiredError,
    IntegrityError,
    MixedGenerationError,
    NotFoundError,
    NotInManifestError,
    RollbackError,
    SettingError,
    SignatureError,
    SourceError,
    SpecError,
    UnlistedKeyError,
)
from rocke_aot.trust import keys, repo

NOW = datetime.now(timezone.utc)


def metadata_requests(tree, keys_asked) -> int:
    """What a fresh host asks for before the blobs: 1.root.json, 2.root.json (404), timestamp,
    snapshot, targets, and the bin of each key asked (once each)."""
    v = repo.verify(tree / "metadata", (tree / "metadata" / "1.root.json").read_bytes())
    return 5 + len({repo.bin_of(f"kernels/{k}", v.bit_length) for k in keys_asked})


@pytest.fixture(scope="module")
def world(signed_world):
    """The keys, releases and exported tree of tests/_signed.py (shared with tests/test_tuf.py): the
    second release is d/signed, the first d/signed1."""
    return signed_world


@pytest.fixture()
def tree(world):
    """A fresh copy of the exported tree that nginx can read; removed after the test."""
    where = served_dir()
    shutil.copytree(world["d"] / "tree", where / "tree")
    yield where / "tree"
    shutil.rmtree(where)


def host(world, tmp_path, sources, **kw):
    """A GPU host's Fetcher: the sources in order (a URL string is a mirror), the pinned root key."""
    return Fetcher([MirrorSource(s, retries=0) if isinstance(s, str) else s for s in sources],
                   LocalStore(tmp_path / "host"), root_key=world["pin"], **kw)


def nothing_stored(tmp_path) -> bool:
    return LocalStore(tmp_path / "host").keys() == [] and not (tmp_path / "host" / "blobs").exists()


def test_export_writes_every_listed_blob_as_a_zstd_frame_and_a_small_index(world):
    tree, store = world["d"] / "tree", world["store"]
    arts = store.find()
    assert world["export"]["blobs_written"] == len({a.sha256 for a in arts}) and world["export"]["version"] == 2
    for a in arts:
        frame = (tree / "blobs" / f"{a.sha256}.zst").read_bytes()
        assert zstandard.ZstdDecompressor().decompress(frame) == store.get(a.key).code_object
    for p in (world["d"] / "signed").iterdir():
        if (tree / "metadata" / p.name).exists():
            assert (tree / "metadata" / p.name).read_bytes() == p.read_bytes()
    assert (tree / "metadata" / "timestamp.json").stat().st_size < 2048  # what a warm host reads at start-up
    for a in arts:  # the raw target files a TUF client downloads (consistent snapshots)
        assert (tree / "targets" / "kernels" / f"{a.sha256}.{a.key}").read_bytes() == store.get(a.key).code_object


def test_every_kernel_from_nginx_verified(world, tree, tmp_path):
    store = world["store"]
    with nginx(tree) as base, host(world, tmp_path, [base]) as f:
        for a in store.find():
            k = f.get(a.key)
            assert k.code_object == store.get(a.key).code_object
            assert k.origin["source"] == base and k.origin["snapshot_version"] == 2
            assert hashlib.sha256(k.code_object).hexdigest() == a.sha256
    # a signed fetch keeps the bytes only (one file per kernel): the record is the signed entry
    kept = sorted(p.name for p in (tmp_path / "host" / "blobs").iterdir())
    assert kept == sorted({a.sha256 for a in store.find()}) and LocalStore(tmp_path / "host").keys() == []
    with host(world, tmp_path, [], offline=True) as f:  # no source at all: local, under the manifest
        for a in store.find():
            k = f.get(a.key)
            assert k.code_object == store.get(a.key).code_object and k.origin["signed"] is True
            assert k.origin["source"] == str(tmp_path / "host") and thaw(k.metadata) == thaw(a.metadata)


def test_get_many_fetches_each_kernel_once_and_keeps_what_verified(world, tree, tmp_path, monkeypatch):
    store = world["store"]
    arts = store.find()
    keys = [x.key for x in arts]
    assert len({x.sha256 for x in arts}) == len(arts)
    with nginx(tree) as base:
        with host(world, tmp_path / "h1", [base]) as f:
            got = f.get_many(keys + keys[:3], workers=4)  # a key asked twice is fetched once
            assert list(got) == keys
            for x in arts:
                assert got[x.key].code_object == store.get(x.key).code_object and got[x.key].origin["source"] == base
            meta = metadata_requests(tree, keys)
            assert f.sources[0].requests == meta + len(arts)  # the metadata once, each bin once; each blob once
            assert all(k.origin["source"] == str(tmp_path / "h1" / "host") for k in f.get_many(keys).values())
            assert f.sources[0].requests == meta + len(arts)  # the second pass is local
            with pytest.raises(SpecError, match="workers"):
                f.get_many(keys, workers=0)
            monkeypatch.setenv("ROCKE_AOT_FETCH_WORKERS", "0")
            with pytest.raises(SpecError, match="ROCKE_AOT_FETCH_WORKERS"):
                f.get_many(keys)
            monkeypatch.setenv("ROCKE_AOT_FETCH_WORKERS", "two")
            with pytest.raises(SettingError):
                f.get_many(keys)
            monkeypatch.delenv("ROCKE_AOT_FETCH_WORKERS")
        # one tampered blob among good ones: its error, raised after the others, which are kept
        a, b = arts[0], arts[1]
        forged = (store.get(b.key).code_object * 2)[:a.size]
        (tree / "blobs" / f"{a.sha256}.zst").write_bytes(zstandard.ZstdCompressor().compress(forged))
        with host(world, tmp_path / "h2", [base]) as f, pytest.raises(BlobMismatchError, match=a.key):
            f.get_many(keys, workers=4)
        assert {p.name for p in (tmp_path / "h2" / "host" / "blobs").iterdir()} == {x.sha256 for x in arts[1:]}
        # a key the manifest does not list fails alone
        with host(world, tmp_path / "h3", [base]) as f, pytest.raises(NotInManifestError):
            f.get_many([b.key, "f" * 64], workers=2)
        assert [p.name for p in (tmp_path / "h3" / "host" / "blobs").iterdir()] == [b.sha256]


def test_sync_writes_only_new_blobs(world, tmp_path):
    d = world["d"]
    shutil.copytree(d / "tree", tmp_path / "tree")
    gone = sorted((tmp_path / "tree" / "blobs").iterdir())[0]
    gone.unlink()

    def sync(*extra):
        p = subprocess.run([EXE, "mirror", "sync", "--cache", str(d / "built.sqlite"), "--signed", str(d / "signed"),
                            str(tmp_path / "tree"), "--json", *extra], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    r = sync()
    assert r["blobs_written"] == 1 and r["blobs_kept"] == r["kernels"] - 1 and gone.is_file()
    (tmp_path / "tree" / "blobs" / ("0" * 64 + ".zst")).write_bytes(b"stale")
    r = sync("--prune")
    assert r["blobs_written"] == 0 and r["blobs_pruned"] == 1


ATTACKS = ["tampered blob", "tampered bin", "snapshot other than the timestamp names", "replayed older timestamp",
           "expired timestamp", "swapped key"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_each_attack_is_refused_and_nothing_is_stored(world, tree, tmp_path, attack):
    d, store = world["d"], world["store"]
    a = store.find()[0]
    state = tmp_path / "host" / "trust" / f"tuf-{keys.public_key(world['pin']).keyid[:16]}" / "verified.state"
    meta = tree / "metadata"

    def serve(src: str):
        shutil.rmtree(meta)
        shutil.copytree(d / src, meta)

    if attack == "tampered blob":
        other = store.get(store.find()[1].key).code_object
        forged = (other * 2)[:a.size]  # the signed size, other bytes, a valid frame
        (tree / "blobs" / f"{a.sha256}.zst").write_bytes(zstandard.ZstdCompressor().compress(forged))
        expected = BlobMismatchError
    elif attack == "tampered bin":
        v = repo.verify(meta, (meta / "1.root.json").read_bytes())
        name = repo.bin_of(f"kernels/{a.key}", v.bit_length)
        path = next(meta / f for f in v.files if f.endswith(f".{name}.json"))
        doc = json.loads(path.read_bytes())
        doc["signed"]["targets"][f"kernels/{a.key}"]["length"] += 1
        path.write_bytes(json.dumps(doc, separators=(",", ":")).encode()[:path.stat().st_size])
        expected = (MixedGenerationError, SignatureError)
    elif attack == "snapshot other than the timestamp names":
        ts = json.loads((meta / "timestamp.json").read_bytes())
        snap = meta / f"{ts['signed']['meta']['snapshot.json']['version']}.snapshot.json"
        snap.write_bytes(snap.read_bytes().replace(b'"version":', b'"version": ', 1)[:snap.stat().st_size])
        expected = MixedGenerationError
    elif attack == "replayed older timestamp":
        with nginx(tree) as base, host(world, tmp_path, [base]) as f:
            f.accepted()  # the host verified version 2 (from a good mirror)
        serve("signed1")
        expected = RollbackError
    elif attack == "expired timestamp":
        serve("expired")
        expected = ExpiredError
    else:
        serve("evil")
        expected = UnlistedKeyError
    before = state.read_bytes() if state.exists() else None
    with nginx(tree) as base, host(world, tmp_path, [base]) as f, pytest.raises(expected):
        f.get(a.key)
    assert nothing_stored(tmp_path)
    if attack not in ("tampered blob", "tampered bin"):  # (there the top-level metadata is genuine, and accepted)
        assert (state.read_bytes() if state.exists() else None) == before


def test_mirrors_then_the_service_in_order(world, tree, tmp_path):
    d, store = world["d"], world["store"]
    a, b = store.find()[:2]
    bad = served_dir()
    shutil.copytree(tree, bad / "tree")
    forged = zstandard.ZstdCompressor().compress(bytes(a.size))
    (bad / "tree" / "blobs" / f"{a.sha256}.zst").write_bytes(forged)
    try:
        extra = ["--trust-dir", str(d / "signed")]
        with nginx(bad / "tree") as evil, nginx(tree) as good, \
                serve_process(f"sqlite:///{d / 'built.sqlite'}", extra=extra) as (_, svc):
            with host(world, tmp_path, [evil, good, ServiceSource(svc, retries=0)]) as f:
                k = f.get(a.key)  # the forged blob is refused, the good mirror answers
                assert k.origin["source"] == good and k.code_object == store.get(a.key).code_object
            with host(world, tmp_path / "h2", [evil, "http://127.0.0.1:9/x", ServiceSource(svc, retries=0)]) as f:
                k = f.get(a.key)  # no good mirror: the service, verified against the same key
                assert k.origin["source"] == svc and k.code_object == store.get(a.key).code_object
                assert f.get(b.key).origin["source"] == evil  # a bad mirror's good blobs still verify
    finally:
        shutil.rmtree(bad)
    assert os.path.exists(tmp_path / "host" / "blobs" / a.sha256)


def test_the_fast_path_hashes_each_blob_once_and_every_read_again(world, tree, tmp_path, monkeypatch):
    store = world["store"]
    arts = store.find()
    hashed = []
    real = client_local.check_bytes
    monkeypatch.setattr(client_local, "check_bytes", lambda data, sha, size, what: hashed.append(sha) or
                        real(data, sha, size, what))
    with nginx(tree) as base, host(world, tmp_path, [base]) as f:
        assert type(f.sources[0].wire._net).__name__ == "_CorePool"  # httpcore directly, not httpx.Client
        got = f.get_many([a.key for a in arts], workers=4)
        assert hashed == []  # codec.decode hashed each on download; put_blob did not hash again
        for a in arts:
            assert got[a.key].code_object == store.get(a.key).code_object
            assert hashlib.sha256((tmp_path / "host" / "blobs" / a.sha256).read_bytes()).hexdigest() == a.sha256
        f.get_many([a.key for a in arts], workers=4)  # warm: every local read is hashed
        assert sorted(hashed) == sorted(a.sha256 for a in arts)
    # bytes checked for one hash are not a pass for another, and plain bytes are checked
    a, b = arts[:2]
    good = client_local.verified(store.get(a.key).code_object, a.sha256, a.size, "a")
    other = LocalStore(tmp_path / "other")
    with pytest.raises(IntegrityError):
        other.put_blob(b.sha256, a.size, good)
    with pytest.raises(IntegrityError):
        other.put_blob(a.sha256, a.size, bytes(a.size))
    assert not (tmp_path / "other" / "blobs" / b.sha256).exists()
    assert not (tmp_path / "other" / "blobs" / a.sha256).exists()


def test_a_mirror_under_a_path_prefix(world, tree, tmp_path):
    """Wire parses the base URL once and appends each path to its target: a mirror under a
    prefix (with or without a trailing slash) is asked for the files under that prefix."""
    store = world["store"]
    arts = store.find()
    with nginx(tree.parent) as base:  # nginx serves the directory holding tree/: the tree is at /tree
        for prefix in ("/tree", "/tree/"):
            with host(world, tmp_path / f"h{len(prefix)}", [base + prefix]) as f:
                for a in arts[:3]:
                    assert f.get(a.key).code_object == store.get(a.key).code_object
                assert f.sources[0].requests == metadata_requests(tree, [a.key for a in arts[:3]]) + 3
        with host(world, tmp_path / "root", [base]) as f, pytest.raises(NotFoundError):
            f.accepted()  # the tree's files are not at the server's root


def test_a_blob_is_written_after_a_miss_and_a_kept_one_is_not_rewritten(world, tmp_path):
    """put_blob writes (its callers just missed): a damaged file at the name is replaced by the
    verified bytes; put() keeps a blob already there (another kernel's bytes, the same sha256)
    and still refuses bytes that are not the record's."""
    store = world["store"]
    a = store.find()[0]
    raw = store.get(a.key).code_object
    local = LocalStore(tmp_path / "host")
    path = tmp_path / "host" / "blobs" / a.sha256
    path.parent.mkdir(parents=True)
    path.write_bytes(raw[:10])  # a damaged copy (blob() removes one it reads; here none was read)
    local.put_blob(a.sha256, a.size, raw)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == a.sha256
    k = client_local.Kernel.from_record({**a.as_dict(), "origin": {}}, code_object=raw)
    before = path.stat().st_ino
    local.put(k)
    assert path.stat().st_ino == before  # not written again
    with pytest.raises(IntegrityError):
        local.put(client_local.Kernel(**{**k.__dict__, "code_object": bytes(a.size)}))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == a.sha256


SLOW = "location /blobs/ { limit_rate 4k; }"  # nginx trickles every blob at 4 KiB/s


def _padded(tree, a, store) -> bytes:
    """a's real frame followed by zeros, within the size bound (signed size + BLOB_SLACK)."""
    frame = zstandard.ZstdCompressor().compress(store.get(a.key).code_object)
    body = frame + bytes(max(0, a.size + BLOB_SLACK - len(frame) - 1024))
    assert len(body) > 32 << 10  # over 8 s at 4 KiB/s
    (tree / "blobs" / f"{a.sha256}.zst").write_bytes(body)
    return body


@pytest.mark.parametrize("case", ["oversized", "slow past the deadline", "truncated", "short frame", "long frame"])
def test_what_nginx_can_send_is_bounded_and_nothing_is_stored(world, tree, tmp_path, case):
    store = world["store"]
    a = store.find()[0]
    path = tree / "blobs" / f"{a.sha256}.zst"
    frame = path.read_bytes()
    extra, deadline, timer = "", 30.0, None
    if case == "oversized":  # announced over the bound: refused before a byte of the body is read
        path.write_bytes(os.urandom(a.size + BLOB_SLACK + 1))
        expected = AnswerTooLargeError  # which the fetch names as the blob not matching its entry
    elif case == "slow past the deadline":
        _padded(tree, a, store)
        extra, deadline, expected = SLOW, 1.5, DeadlineError
    elif case == "truncated":  # Content-Length sent, then the file shrinks under nginx mid-body
        _padded(tree, a, store)
        extra, expected = SLOW, SourceError
        timer = threading.Timer(1.0, lambda: os.truncate(path, 100))
    elif case == "short frame":  # nginx announces the length it has: a frame cut 8 bytes short
        path.write_bytes(frame[:-8])
        expected = BlobMismatchError
    else:  # the whole frame, then bytes after it (within the size bound)
        path.write_bytes(frame + b"\0" * 64)
        expected = BlobMismatchError
    with nginx(tree, extra=extra) as base, \
            host(world, tmp_path, [MirrorSource(base, retries=0, deadline_s=deadline)]) as f:
        f.accepted()  # the metadata is genuine (and is not rate limited)
        t = time.monotonic()
        if timer is not None:
            timer.start()
        try:
            with pytest.raises(BlobMismatchError if expected is AnswerTooLargeError else expected) as e:
                f.get(a.key)
        finally:
            if timer is not None:
                timer.cancel()
        took = time.monotonic() - t
    assert nothing_stored(tmp_path)
    if case == "oversized":
        assert "bytes announced, the limit is" in str(e.value)
    if case == "truncated":
        assert type(e.value) is SourceError and "RemoteProtocolError" in str(e.value)  # not the deadline
    if case == "slow past the deadline":
        assert 1.4 <= took < 7  # not before the 1.5 s deadline; a hang guard under the trickle's 8 s
    if case == "truncated":
        assert took < 8  # the cut, not the whole trickle


def test_answer_headers_read_as_httpx_reads_them():
    from rocke_aot.client.wire import Headers

    raw = [(b"Content-Length", b"12"), (b"Vary", b"a"), (b"vary", b"b"), (b"X-Latin", "\xe9".encode("latin-1"))]
    h = Headers(raw)
    for name in ("content-length", "Content-Length", "VARY", "x-latin", "absent"):
        assert h.get(name) == httpx.Headers(raw).get(name), name
    assert len(h) == 3 and h["CONTENT-LENGTH"] == "12" and "vary" in h
