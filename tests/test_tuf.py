"""The signed metadata is TUF, checked by programs this project did not write.

    store (8 real kernels) ──trust sign──> signed/ (a TUF repository: python-tuf's Metadata API)
        ──rocke-aot mirror export──> tree/ served by a real nginx
    an unmodified python-tuf ngclient.Updater (its own urllib3 fetcher) downloads every kernel
        from nginx: the reference client accepts what this project signs
    the host's Fetcher (python-tuf's Updater through the project's bounded Wire) fetches them;
        a cold fetch downloads the bin of the key asked and no other; a warm offline fetch
        reads what was verified, without verifying again
    attacks, each refused by name with nothing stored: a tampered blob, a tampered bin, a
        replayed older timestamp, a fresh host given an expired (older) timestamp, another root
        key's repository; two processes of a fresh host never move its state backwards
    rocke_aot.service.client.Client with ROCKE_AOT_ROOT_KEY set refuses a tampered code object
        (issue 42, item 2); publish streams one file per request to a real `rocke-aot serve`
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from _nginx import nginx, served_dir
from _service import EXE, HTTP_TIMEOUT_S, built_store, serve_process  # noqa: F401

from rocke_aot.cache.keys import thaw
from rocke_aot.client import Fetcher, LocalStore, MirrorSource, ServiceSource
from rocke_aot.errors import (
    BlobMismatchError,
    ExpiredError,
    NotInManifestError,
    RollbackError,
    SignatureError,
    TrustConfigError,
    TrustError,
    UnlistedKeyError,
)
from rocke_aot.trust import keys, repo
from rocke_aot.trust.release import release

NOW = datetime.now(timezone.utc)


@pytest.fixture(scope="module")
def world(signed_world):
    """The keys, releases and exported tree of tests/_signed.py (shared with tests/test_mirror.py)."""
    return signed_world


@pytest.fixture()
def tree(world):
    where = served_dir()
    shutil.copytree(world["d"] / "tree", where / "tree")
    yield where / "tree"
    shutil.rmtree(where)


def host(world, path, sources, **kw):
    return Fetcher([MirrorSource(s, retries=0) if isinstance(s, str) else s for s in sources],
                   LocalStore(path), root_key=kw.pop("root_key", world["pin"]), **kw)


def nothing_stored(path: Path) -> bool:
    return not (path / "blobs").exists() or not any((path / "blobs").iterdir())


def test_signed_directory_is_tuf_that_python_tuf_reads(world):
    from tuf.api.metadata import Metadata, Root, Snapshot, Targets, Timestamp

    d = world["d"] / "signed"
    ts = Metadata[Timestamp].from_bytes((d / "timestamp.json").read_bytes())
    root = Metadata[Root].from_bytes((d / "1.root.json").read_bytes())
    root.signed.verify_delegate("timestamp", ts.signed_bytes, ts.signatures)
    assert root.signed.consistent_snapshot and ts.signed.version == 2
    assert ts.signed.expires - datetime.now(timezone.utc) < timedelta(days=1, minutes=5)  # short-lived: the rollback floor
    snap = Metadata[Snapshot].from_bytes((d / f"{ts.signed.snapshot_meta.version}.snapshot.json").read_bytes())
    targets = Metadata[Targets].from_bytes((d / f"{snap.signed.meta['targets.json'].version}.targets.json").read_bytes())
    succinct = targets.signed.delegations.succinct_roles
    assert succinct is not None and set(snap.signed.meta) == {"targets.json", *(f"{b}.json" for b in succinct.get_roles())}
    # re-signing an unchanged store signs no bin again: hosts and CDNs keep every bin file
    assert world["info"]["bins_written"] == 0 and world["info"]["bins_kept"] == len(list(succinct.get_roles()))
    for a in world["store"].find():
        name = succinct.get_role_for_target(f"kernels/{a.key}")
        assert repo.bin_of(f"kernels/{a.key}", succinct.bit_length) == name
        b = Metadata[Targets].from_bytes((d / f"{snap.signed.meta[name + '.json'].version}.{name}.json").read_bytes())
        targets.signed.verify_delegate(name, b.signed_bytes, b.signatures)
        tf = b.signed.targets[f"kernels/{a.key}"]
        assert tf.length == a.size and tf.hashes == {"sha256": a.sha256}
        assert json.loads(tf.custom["record"])["metadata"]["launch"] == thaw(a.metadata)["launch"]
        assert tf.custom["arch"] == a.arch and tf.custom["family"] == a.family


def test_unmodified_python_tuf_updater_downloads_every_kernel_from_nginx(world, tree, tmp_path):
    from tuf.ngclient import Updater

    (tmp_path / "meta").mkdir()
    (tmp_path / "dl").mkdir()
    with nginx(tree) as base:
        up = Updater(str(tmp_path / "meta"), f"{base}/metadata/", str(tmp_path / "dl"), f"{base}/targets/",
                     bootstrap=(world["d"] / "root.json").read_bytes())
        up.refresh()
        for a in world["store"].find():
            info = up.get_targetinfo(f"kernels/{a.key}")
            assert info is not None
            path = up.download_target(info)
            assert Path(path).read_bytes() == world["store"].get(a.key).code_object
        assert up.get_targetinfo("kernels/" + "0" * 64) is None


def test_fetcher_cold_reads_only_the_bins_asked_and_warm_offline_reads_what_was_verified(world, tree, tmp_path):
    store = world["store"]
    arts = store.find()
    with nginx(tree) as base, host(world, tmp_path / "h", [base]) as f:
        k = f.get(arts[0].key)
        assert k.code_object == store.get(arts[0].key).code_object and k.origin["snapshot_version"] == 2
        got = sorted(p.name for p in f.trusted.dir.glob("bins-*.json"))
        assert got == [f"{repo.bin_of('kernels/' + arts[0].key, f.trusted.state()['bit_length'])}.json"]
        with pytest.raises(NotInManifestError):
            f.get("0" * 64)
        for a in arts:
            assert f.get(a.key).code_object == store.get(a.key).code_object
    with host(world, tmp_path / "h", [], offline=True) as f:  # no network, no signature check
        for a in arts:
            k = f.get(a.key)
            assert k.code_object == store.get(a.key).code_object and k.origin["signed"] is True
    # the state remembers the snapshot's bytes: a changed local snapshot is not trusted offline
    snap = tmp_path / "h" / "trust" / f"tuf-{keys.public_key(world['pin']).keyid[:16]}" / "snapshot.json"
    snap.write_bytes(snap.read_bytes().replace(b'"version":', b'"version": ', 1))
    with host(world, tmp_path / "h", [], offline=True) as f, pytest.raises(TrustError, match="not the snapshot"):
        f.get(arts[0].key)


WARM = """
import sys
from rocke_aot.client import Fetcher, LocalStore
with Fetcher([], LocalStore(sys.argv[1]), root_key=sys.argv[2], offline=True) as f:
    got = [f.get(k).sha256 for k in sys.argv[3:]]
print(" ".join(got), "rocke_aot.variants" in sys.modules)
"""


def test_a_launch_contract_is_checked_once_per_host_and_code(world, tree, tmp_path, monkeypatch):
    """The Fetcher's contract check (variants/contract.py) runs in full once per record and code
    on a host (client/contracts.py): a warm process imports no family, a process of other code
    (another sys.path) checks again, a record whose contract differs is checked (and refused)
    whatever markers exist."""
    from rocke_aot.client import contracts, fetch
    from rocke_aot.errors import LaunchContractError

    arts = world["store"].find()
    with nginx(tree) as base, host(world, tmp_path / "h", [base]) as f:
        for a in arts:
            f.get(a.key)
        memo_dir = f.trusted.dir / "contracts"
        entry = f.accepted().kernel(arts[0].key)
    (code,) = [json.loads(p.read_bytes()) for p in memo_dir.glob("code-*.json")]
    assert any(e[0].endswith(os.path.join("variants", "contract.py")) for e in code["entries"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cmd = [sys.executable, "-c", WARM, str(tmp_path / "h"), world["pin"], *(a.key for a in arts)]
    for imported in ("True", "False"):  # this interpreter's first process checks; the next reads markers
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [*(a.sha256 for a in arts), imported]
    extra = tmp_path / "elsewhere"
    extra.mkdir()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**env, "PYTHONPATH": str(extra)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == [*(a.sha256 for a in arts), "True"]  # other code: checked in full
    # in this process: a spy on the full check; a folder on sys.path that changes moves the code id
    calls: list[str] = []
    full = contracts.check_contract
    monkeypatch.setattr(contracts, "check_contract", lambda k, what, *plain: (calls.append(k.key), full(k, what, *plain)))
    monkeypatch.syspath_prepend(str(extra))
    signed = fetch.Kernel.from_record({**entry, "key": arts[0].key, "origin": {}})
    contracts.ContractMemo(memo_dir).check(signed, "first")
    contracts.ContractMemo(memo_dir).check(signed, "again")
    assert calls == [arts[0].key]
    (extra / "plugin.py").write_text("")  # something installed on the path: the folder's mtime moves
    os.utime(extra, ns=(1, 1))
    contracts.ContractMemo(memo_dir).check(signed, "after")
    assert calls == [arts[0].key] * 2
    # a record whose contract differs has no marker: checked, and refused by field
    lie = json.loads(json.dumps(entry))
    lie["metadata"]["launch"]["grid"] = ["4096", "4096", "1"]
    lying = fetch.Kernel.from_record({**lie, "key": arts[0].key, "origin": {}})
    with pytest.raises(LaunchContractError, match="grid"):
        contracts.ContractMemo(memo_dir).check(lying, "the lie")
    assert calls == [arts[0].key] * 3
    # the memos are bounded by the local store's bound: a gc that evicts drops them all
    from rocke_aot.client.local import LocalStore

    contracts.ContractMemo(memo_dir).check(signed, "kept")
    assert calls == [arts[0].key] * 3 and any(memo_dir.iterdir())
    assert LocalStore(tmp_path / "h").gc(0)
    assert not memo_dir.exists()
    contracts.ContractMemo(memo_dir).check(signed, "after gc")
    assert calls == [arts[0].key] * 4


def test_a_batch_writes_its_contract_markers_as_one_list_that_later_processes_read(world, tree, tmp_path, monkeypatch):
    """Fetcher.get_each writes the contract markers of its kernels as one list file (client/contracts.py
    batch) instead of one file each: a later memo answers from it without checking again, a line that
    is not a digest is no marker, and a warm note's proof still gets a file of its own."""
    from rocke_aot.client import contracts, fetch

    arts = world["store"].find()
    assert len(arts) >= 3
    with nginx(tree) as base, host(world, tmp_path / "h", [base]) as f:
        got = f.get_each([a.key for a in arts], workers=4)
        assert all(isinstance(v, fetch.Kernel) for v in got.values())
        memo_dir = f.trusted.dir / "contracts"
        entries = [f.accepted().kernel(a.key) for a in arts]
    (folder,) = [d for d in memo_dir.iterdir() if d.is_dir()]
    (lst,) = list(folder.iterdir())  # one file for the whole batch, no marker per kernel
    assert lst.name.endswith(contracts.BATCH)
    signed = [fetch.Kernel.from_record({**e, "key": a.key, "origin": {}}) for a, e in zip(arts, entries, strict=True)]
    digests = {contracts.inputs_digest(k) for k in signed}
    assert set(lst.read_text().split()) == digests
    calls: list[str] = []
    full = contracts.check_contract
    monkeypatch.setattr(contracts, "check_contract", lambda k, what, *plain: (calls.append(k.key), full(k, what, *plain)))
    for k in signed:
        contracts.ContractMemo(memo_dir).check(k, "from the list")
    assert calls == []
    # a list is read line by line: a damaged line is no marker (that record is checked in full again)
    first = contracts.inputs_digest(signed[0])
    lst.write_text(lst.read_text().replace(first, first[:63] + "g"))
    for k in signed:
        contracts.ContractMemo(memo_dir).check(k, "damaged")
    assert calls == [signed[0].key]
    # in a batch, a kernel's proof (what a warm note names) is a marker file of its own, written then
    memo = contracts.ContractMemo(memo_dir)
    shutil.rmtree(folder)
    with memo.batch():
        memo.check(signed[1], "in a batch")
        assert not any(folder.glob("*")) if folder.exists() else True
        cfile, cid, digest = memo.proof(signed[1])
        assert (memo_dir / cid[:32] / digest).is_file() and digest == contracts.inputs_digest(signed[1])
        memo.check(signed[2], "in a batch")
    # a batch of one (signed[2]: signed[1] has its file already) is a marker file too, no list
    assert sorted(p.name for p in folder.iterdir()) == sorted(contracts.inputs_digest(k) for k in signed[1:3])
    assert calls == [signed[0].key, signed[1].key, signed[2].key]
    # many lists (one per batch) are merged by the process that reads them: later ones read a few files
    import secrets

    others = [secrets.token_hex(32) for _ in range(2 * (contracts.MAX_LISTS + 8))]
    for i in range(0, len(others), 2):
        (folder / f"x{i}{contracts.BATCH}").write_text(f"{others[i]}\n{others[i + 1]}\n")
    (folder / f"y{contracts.BATCH}").write_text(f"{contracts.inputs_digest(signed[0])}\n")
    contracts.ContractMemo(memo_dir).check(signed[0], "from a merged list")
    lists = sorted(folder.glob(f"*{contracts.BATCH}"))
    assert len(lists) == 1 and set(lists[0].read_text().split()) == {*others, contracts.inputs_digest(signed[0])}
    (folder / contracts.inputs_digest(signed[0])).unlink(missing_ok=True)
    contracts.ContractMemo(memo_dir).check(signed[0], "after the merge")
    assert calls == [signed[0].key, signed[1].key, signed[2].key]  # answered from the lists both times


def test_tampered_blob_and_tampered_bin_are_refused_and_nothing_stored(world, tree, tmp_path):
    a = world["store"].find()[0]
    blob = tree / "blobs" / f"{a.sha256}.zst"
    import zstandard

    raw = bytearray(zstandard.ZstdDecompressor().decompress(blob.read_bytes()))
    raw[100] ^= 1
    blob.write_bytes(zstandard.ZstdCompressor().compress(bytes(raw)))
    with nginx(tree) as base, host(world, tmp_path / "h1", [base]) as f, pytest.raises(BlobMismatchError):
        f.get(a.key)
    assert nothing_stored(tmp_path / "h1")
    # a bin edited after signing (the signed length no longer matches, or its signature breaks)
    ts = json.loads((tree / "metadata" / "timestamp.json").read_bytes())
    sv = ts["signed"]["meta"]["snapshot.json"]["version"]
    snap = json.loads((tree / "metadata" / f"{sv}.snapshot.json").read_bytes())
    bits = json.loads((tree / "metadata" / f"{snap['signed']['meta']['targets.json']['version']}.targets.json")
                      .read_bytes())["signed"]["delegations"]["succinct_roles"]["bit_length"]
    name = repo.bin_of(f"kernels/{a.key}", bits)
    bpath = tree / "metadata" / f"{snap['signed']['meta'][name + '.json']['version']}.{name}.json"
    doc = json.loads(bpath.read_bytes())
    rec = json.loads(doc["signed"]["targets"][f"kernels/{a.key}"]["custom"]["record"])
    rec["metadata"]["launch"]["grid"] = [4096, 4096, 1]  # a lying launch contract
    doc["signed"]["targets"][f"kernels/{a.key}"]["custom"]["record"] = json.dumps(rec)
    body = json.dumps(doc, separators=(",", ":")).encode()
    bpath.write_bytes(body[:snap["signed"]["meta"][name + ".json"]["length"]].ljust(
        snap["signed"]["meta"][name + ".json"]["length"], b" "))
    with nginx(tree) as base, host(world, tmp_path / "h2", [base]) as f, pytest.raises(TrustError):
        f.get(a.key)
    assert nothing_stored(tmp_path / "h2")


def test_rollback_replayed_timestamp_and_fresh_host_floor(world, tree, tmp_path):
    a = world["store"].find()[0]
    with nginx(tree) as base, host(world, tmp_path / "h", [base]) as f:
        f.get(a.key)  # this host has verified timestamp version 2
    old = world["d"] / "signed1" / "timestamp.json"
    (tree / "metadata" / "timestamp.json").write_bytes(old.read_bytes())
    with nginx(tree) as base, host(world, tmp_path / "h", [base]) as f, pytest.raises(RollbackError):
        f.accepted()
    assert f.trusted.state()["timestamp_version"] == 2
    # a fresh host: an old (expired) timestamp is refused, whatever it names
    k = world["k"]
    d2 = tmp_path / "stale"
    release(world["store"], d2, {1: (world["d"] / "root.json").read_bytes()}, [k["release"]],
            timestamp_days=1, now=NOW - timedelta(days=3))
    stale = served_dir()
    shutil.copytree(tree, stale / "tree")
    for p in (stale / "tree" / "metadata").iterdir():
        p.unlink()
    shutil.copytree(d2, stale / "tree" / "metadata", dirs_exist_ok=True)
    try:
        with nginx(stale / "tree") as base, host(world, tmp_path / "fresh", [base]) as f, \
                pytest.raises(ExpiredError):
            f.get(a.key)
        assert nothing_stored(tmp_path / "fresh")
    finally:
        shutil.rmtree(stale)


def test_another_root_key_and_no_pin(world, tmp_path):
    evil = served_dir()
    shutil.copytree(world["d"] / "tree", evil / "tree")
    shutil.rmtree(evil / "tree" / "metadata")
    shutil.copytree(world["d"] / "evil", evil / "tree" / "metadata")
    try:
        with nginx(evil / "tree") as base, host(world, tmp_path / "h", [base]) as f, \
                pytest.raises((UnlistedKeyError, SignatureError)):
            f.get(world["store"].find()[0].key)
    finally:
        shutil.rmtree(evil)
    with pytest.raises(TrustConfigError):
        Fetcher([MirrorSource("http://127.0.0.1:9")], LocalStore(tmp_path / "x"), root_key=None, insecure=False)


def test_two_processes_of_a_fresh_host_never_move_state_backwards(world, tree, tmp_path):
    """One process is given timestamp 2, the other timestamp 1 (a stale mirror), at once: the
    host ends on version 2 and one of them is refused (RollbackError), never regressed."""
    stale = served_dir()
    shutil.copytree(tree, stale / "tree")
    shutil.copytree(world["d"] / "signed1", stale / "tree" / "metadata", dirs_exist_ok=True)
    code = ("import sys\nfrom rocke_aot.client import Fetcher, LocalStore, MirrorSource\n"
            "f = Fetcher([MirrorSource(sys.argv[1], retries=0)], LocalStore(sys.argv[2]), root_key=sys.argv[3])\n"
            "try:\n    f.accepted(); print('ok')\nexcept Exception as e:\n    print(type(e).__name__)\n")
    try:
        with nginx(tree) as new, nginx(stale / "tree") as old:
            for _ in range(3):
                home = tmp_path / f"h{_}"
                procs = [subprocess.Popen([sys.executable, "-c", code, url, str(home), world["pin"]],
                                          stdout=subprocess.PIPE, text=True) for url in (old, new, old, new)]
                outs = [p.communicate(timeout=120)[0].strip() for p in procs]
                assert set(outs) <= {"ok", "RollbackError"}, outs
                state = json.loads(next((home / "trust").glob("tuf-*/verified.state")).read_bytes())
                assert state["timestamp_version"] == 2, (outs, state)
    finally:
        shutil.rmtree(stale)


def text_offset(elf: bytes) -> int:
    """The file offset of the first byte of .text (ELF64 little-endian section headers)."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    def sh(i):
        return struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)  # name, type, flags, addr, offset, size
    strtab = sh(shstrndx)[4]
    for i in range(shnum):
        name, _, _, _, off, size = sh(i)
        if elf[strtab + name:].split(b"\0", 1)[0] == b".text" and size:
            return off
    raise AssertionError("no .text")


@contextlib.contextmanager
def tampering_proxy(upstream: str, key: str):
    """A hostile server in front of a real one: the record of ``key`` names other bytes (a
    .text-sized edit of the code object, its sha256 and size updated), and serves them."""
    real = httpx.get(f"{upstream}/v1/kernels/{key}/meta", timeout=HTTP_TIMEOUT_S).json()
    raw = httpx.get(f"{upstream}/v1/blobs/{real['sha256']}", headers={"Accept-Encoding": "identity"}, timeout=HTTP_TIMEOUT_S).content
    bad = bytearray(raw)
    bad[text_offset(raw)] ^= 0x01  # one instruction byte: still a well-formed code object
    bad = bytes(bad)
    sha = hashlib.sha256(bad).hexdigest()
    record = json.dumps({**real, "sha256": sha, "size": len(bad)}).encode()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path == f"/v1/kernels/{key}/meta":
                body, ctype = record, "application/json"
            elif self.path in (f"/v1/blobs/{sha}", f"/v1/blobs/{real['sha256']}"):
                body, ctype = bad, "application/octet-stream"
            else:
                r = httpx.get(upstream + self.path, headers={"Accept-Encoding": "identity"}, timeout=HTTP_TIMEOUT_S)
                self.send_response(r.status_code)
                self.send_header("Content-Type", r.headers.get("content-type", "application/json"))
                self.send_header("Content-Length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_service_client_with_a_pinned_key_refuses_a_tampered_code_object(world, tmp_path, monkeypatch):
    """Issue 42, item 2: rocke_aot.service.client.Client with ROCKE_AOT_ROOT_KEY set took the
    server's unsigned record and kept a tampered code object, silently. Now the pin sends every
    get through the Fetcher: the signed target's sha256 refuses it, nothing is kept; the
    genuine server's answer passes; without a pin the unsigned path warns."""
    from rocke_aot.client import InsecureFetchWarning
    from rocke_aot.service.client import Client

    a = world["store"].find()[0]
    monkeypatch.setenv("ROCKE_AOT_CLIENT_HOME", str(tmp_path / "home"))
    with serve_process(str(world["d"] / "built.sqlite"), extra=["--trust-dir", str(world["d"] / "signed")]) \
            as (_, base), tampering_proxy(base, a.key) as evil:
        monkeypatch.setenv("ROCKE_AOT_ROOT_KEY", world["pin"])
        with Client(evil, cache=str(tmp_path / "c1.sqlite"), offline=False, retries=0) as c:
            with pytest.raises(BlobMismatchError):
                c.get(a.key)
            assert c.store.lookup_many([a.key]).get(a.key) is None
        with Client(base, cache=str(tmp_path / "c2.sqlite"), offline=False) as c:
            got = c.get(a.key)
            assert got.code_object == world["store"].get(a.key).code_object
            assert got.provenance["origin"]["signed"] is True
            with pytest.raises(NotInManifestError):
                c.get("0" * 64)
        monkeypatch.delenv("ROCKE_AOT_ROOT_KEY")
        with Client(evil, cache=str(tmp_path / "c3.sqlite"), offline=False) as c, \
                pytest.warns(InsecureFetchWarning):
            got = c.get(a.key)  # unpinned: the server's word (the tampered bytes), and a warning says so
            assert got.code_object != world["store"].get(a.key).code_object


def test_publish_streams_one_file_per_request_to_a_real_service(world, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    served = tmp_path / "served"
    served.mkdir()
    with serve_process(str(world["d"] / "built.sqlite"), token_file=str(token),
                       extra=["--trust-dir", str(served), "--root-key", world["pin"]]) as (_, base):
        env = {**os.environ, "ROCKE_AOT_TOKEN": "s3cret"}
        p = subprocess.run([EXE, "trust", "publish", "--server", base, str(world["d"] / "signed1"), "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["version"] == 1
        p = subprocess.run([EXE, "trust", "publish", "--server", base, str(world["d"] / "signed"), "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["version"] == 2 and out["kernels"] == len(world["store"].find())
        assert out["files_written"] < out["files"]  # the unchanged bins were served already
        p = subprocess.run([EXE, "trust", "publish", "--server", base, str(world["d"] / "signed1"), "--json"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode != 0 and "RollbackError" in p.stderr + p.stdout
        r = httpx.get(f"{base}/v1/trust/timestamp.json", timeout=HTTP_TIMEOUT_S)
        assert r.json()["signed"]["version"] == 2 and r.headers["cache-control"] == "no-cache"
        r = httpx.get(f"{base}/v1/trust/1.root.json", timeout=HTTP_TIMEOUT_S)
        assert "immutable" in r.headers["cache-control"]
        # a host reads the service as it reads a mirror
        with host(world, tmp_path / "h", [ServiceSource(base)]) as f:
            a = world["store"].find()[0]
            assert f.get(a.key).code_object == world["store"].get(a.key).code_object


def _bins_of(metadata: Path):
    """(top-level Targets, Snapshot, {bin name: the bin file's bytes}) of a served metadata folder."""
    from tuf.api.metadata import Metadata

    ts = json.loads((metadata / "timestamp.json").read_bytes())
    sv = ts["signed"]["meta"]["snapshot.json"]["version"]
    snap = Metadata.from_bytes((metadata / f"{sv}.snapshot.json").read_bytes()).signed
    top = Metadata.from_bytes((metadata / f"{snap.meta['targets.json'].version}.targets.json").read_bytes()).signed
    bins = {n[:-5]: (metadata / f"{m.version}.{n}").read_bytes() for n, m in snap.meta.items() if n != "targets.json"}
    return top, snap, bins


def test_a_bin_is_verified_over_its_own_signed_bytes_and_refused_where_python_tuf_refuses(world):
    """client/trusted.py verified_bin (the host's bin step): every bin reads to the very Targets
    python-tuf's Metadata API reads; a bin laid out otherwise (indented, so its signed member is
    no longer the signed bytes) is decided by python-tuf's own canonical path and accepted; a
    byte changed in the signed member, a second "signed" member after the first, another bin's
    signature, another version, an expired bin: refused with python-tuf's own errors."""
    from tuf.api import exceptions as x
    from tuf.api.metadata import Metadata, MetaFile

    from rocke_aot.client.trusted import _signed_slice, verified_bin

    top, snap, bins = _bins_of(world["d"] / "tree" / "metadata")
    assert len(bins) >= 2
    for name, data in bins.items():
        assert _signed_slice(data) is not None  # the layout the signer writes: the fast path is taken
        got = verified_bin(top, snap, name, data, NOW)
        want = Metadata.from_bytes(data)
        top.verify_delegate(name, want.signed_bytes, want.signatures)  # python-tuf's own check passes
        assert got == want.signed and got.targets == want.signed.targets and got.targets
    name, data = next((n, d) for n, d in bins.items() if json.loads(d)["signed"]["targets"])
    other = next(d for n, d in bins.items() if n != name)

    def sized(body: bytes, version: int | None = None):
        """The snapshot, its entry for ``name`` naming ``body``'s length (so the bytes reach the signature check)."""
        s = copy.copy(snap)
        s.meta = {**snap.meta, f"{name}.json": MetaFile(version=version or snap.meta[f"{name}.json"].version,
                                                        length=len(body))}
        return s

    doc = json.loads(data)
    pretty = json.dumps(doc, indent=2).encode()  # not the signed bytes, but the same signed object
    assert _signed_slice(pretty) is None
    assert verified_bin(top, sized(pretty), name, pretty, NOW) == Metadata.from_bytes(data).signed
    # one byte of the signed member changed (a target's sha256)
    path = next(iter(doc["signed"]["targets"]))
    sha = doc["signed"]["targets"][path]["hashes"]["sha256"]
    evil = data.replace(sha.encode(), (("0" if sha[0] != "0" else "1") + sha[1:]).encode())
    assert evil != data and len(evil) == len(data)
    with pytest.raises(x.UnsignedMetadataError):
        verified_bin(top, sized(evil), name, evil, NOW)
    # a second "signed" member after the signed one: JSON keeps the last, which nobody signed
    twice = data[:-1] + b',"signed":' + json.dumps(json.loads(evil)["signed"], separators=(",", ":")).encode() + b"}"
    assert json.loads(twice)["signed"]["targets"][path]["hashes"]["sha256"] != sha
    with pytest.raises(x.UnsignedMetadataError):
        verified_bin(top, sized(twice), name, twice, NOW)
    # another bin's valid signature over this bin's bytes
    swapped = json.dumps({"signatures": json.loads(other)["signatures"], "signed": doc["signed"]},
                         separators=(",", ":"), sort_keys=True).encode()
    with pytest.raises(x.UnsignedMetadataError):
        verified_bin(top, sized(swapped), name, swapped, NOW)
    # the snapshot names another version; the bin expired; the snapshot's length is not the file's
    with pytest.raises(x.BadVersionNumberError):
        verified_bin(top, sized(data, version=snap.meta[f"{name}.json"].version + 1), name, data, NOW)
    with pytest.raises(x.ExpiredMetadataError):
        verified_bin(top, snap, name, data, NOW + timedelta(days=400))
    with pytest.raises(x.LengthOrHashMismatchError):
        verified_bin(top, snap, name, pretty, NOW)


def test_many_kernels_at_once_are_the_bytes_one_at_a_time_gives_and_a_tampered_bin_refuses_its_own(world, tree,
                                                                                                     tmp_path):
    """get_each with several workers (the bins verified once each, the blobs concurrently): the
    same verified bytes as one get at a time; a bin whose signed member was changed (its length
    kept, so the bytes reach the signature) refuses exactly its kernels, nothing of them stored,
    and the others still come."""
    store = world["store"]
    arts = store.find()
    keys_ = [a.key for a in arts]
    with nginx(tree) as base, host(world, tmp_path / "h", [base]) as f:
        got = f.get_each(keys_, workers=4)
    assert {k: v.code_object for k, v in got.items()} == {k: store.get(k).code_object for k in keys_}
    with nginx(tree) as base, host(world, tmp_path / "h1", [base]) as f:
        one = {k: f.get(k).code_object for k in keys_}
    assert one == {k: v.code_object for k, v in got.items()}
    metadata = tree / "metadata"
    top, snap, bins = _bins_of(metadata)
    bits = top.delegations.succinct_roles.bit_length
    name = repo.bin_of(f"kernels/{keys_[0]}", bits)
    path = metadata / f"{snap.meta[name + '.json'].version}.{name}.json"
    data = path.read_bytes()
    sha = json.loads(data)["signed"]["targets"][f"kernels/{keys_[0]}"]["hashes"]["sha256"]
    path.write_bytes(data.replace(sha.encode(), (("0" if sha[0] != "0" else "1") + sha[1:]).encode()))
    in_bin = {k for k in keys_ if repo.bin_of(f"kernels/{k}", bits) == name}
    with nginx(tree) as base, host(world, tmp_path / "h2", [base]) as f:
        got = f.get_each(keys_, workers=4)
    assert {k for k, v in got.items() if isinstance(v, SignatureError)} == in_bin
    assert {k: v.code_object for k, v in got.items() if k not in in_bin} == \
        {k: store.get(k).code_object for k in keys_ if k not in in_bin} and len(in_bin) < len(keys_)
    kept = {p.name for p in (tmp_path / "h2" / "blobs").rglob("*") if p.is_file()}
    assert not any(store.get(k).sha256 in n for k in in_bin for n in kept)
