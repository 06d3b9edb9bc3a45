"""Signed metadata (TUF, through python-tuf) end to end: keys, root -> release keys, the release
step over a real store, a real `rocke-aot serve --trust-dir` serving the repository, and a host
that refuses everything the pinned root key does not vouch for.

    built store (8 real gemm kernels) ──trust/release.py──> a TUF repository (trust/repo.py)
    rocke-aot serve --trust-dir D --root-key root.pub --token-file T
    Fetcher(ServiceSource, root_key=root.pub):
        good: bytes equal the store's, origin names the snapshot version; a second get is local
        each attack, written into D (the server reads it per request) or sent by a tampering
        transport: named error, nothing in the local store, the verified state unchanged
    PUT /v1/trust/<file>: a good repository is served after; a bad timestamp is refused, D unchanged
    `rocke-aot trust keygen|root|sign|timestamp|migrate` and the old format refused by name
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from _service import EXE, HTTP_TIMEOUT_S, built_store, filled_store, serve_process  # noqa: F401

from rocke_aot.cache.store import Store
from rocke_aot.client import Fetcher, InsecureFetchWarning, LocalStore, ServiceSource
from rocke_aot.errors import (
    BlobMismatchError,
    Conflict,
    ExpiredError,
    MixedGenerationError,
    NotFoundError,
    NotInManifestError,
    RollbackError,
    SignatureError,
    SpecError,
    TrustConfigError,
    TrustError,
    UnlistedKeyError,
)
from rocke_aot.service.trust import accept_file
from rocke_aot.trust import keys, repo
from rocke_aot.trust import metadata as old_md
from rocke_aot.trust.release import release

TOKEN = "trust-test-token"
NOW = datetime.now(timezone.utc)


def make_root(root_key, release_pubs, version=1, days=365, signers=None) -> bytes:
    md = repo.make_root(version, NOW + timedelta(days=days), [root_key.public], release_pubs)
    for s in signers or [root_key]:
        md.sign(s.signer(), append=True)
    return repo.dump_metadata(md)


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}


def restore(d: Path, files: dict[str, bytes]) -> None:
    for p in d.iterdir():
        if p.is_file() and p.name not in files:
            p.unlink()
    for n, data in files.items():
        (d / n).write_bytes(data)


@pytest.fixture(scope="module")
def world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("trust")
    for name in ("root", "release", "release2", "evil"):
        keys.generate(d / f"{name}.key")
    k = {name: keys.load_private(d / f"{name}.key") for name in ("root", "release", "release2", "evil")}
    url = f"sqlite:///{d / 'served.sqlite'}"
    store = built_store(url, kernel_bundle)
    roots = {1: make_root(k["root"], [k["release"].public])}
    served = d / "served"
    release(store, served, roots, [k["release"]])
    (d / "token").write_text(TOKEN)
    extra = ["--trust-dir", str(served), "--root-key", str(d / "root.key.pub")]
    with serve_process(url, token_file=str(d / "token"), extra=extra) as (_, base):
        yield {"d": d, "k": k, "store": store, "roots": roots, "served": served, "gen1": snapshot(served),
               "base": base, "pin": str(d / "root.key.pub")}
    store.close()


@pytest.fixture()
def served(world):
    """The served directory, put back to version 1 after the test."""
    yield world["served"]
    restore(world["served"], world["gen1"])


def fetcher(world, tmp_path, **kw):
    return Fetcher([ServiceSource(world["base"], retries=0)], LocalStore(tmp_path / "host"),
                   root_key=kw.pop("root_key", world["pin"]), **kw)


def state_path(world, tmp_path) -> Path:
    return tmp_path / "host" / "trust" / f"tuf-{keys.public_key(world['pin']).keyid[:16]}" / "verified.state"


def nothing_stored(tmp_path) -> bool:
    host = LocalStore(tmp_path / "host")
    return host.keys() == [] and not (tmp_path / "host" / "blobs").exists()


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(tmp_path):
    pub = keys.generate(tmp_path / "k")
    assert stat.S_IMODE((tmp_path / "k").stat().st_mode) == 0o600
    assert keys.public_key(tmp_path / "k.pub") == pub == keys.public_key(pub.as_pin())
    assert keys.load_private(tmp_path / "k").public == pub
    assert pub.keyid == hashlib.sha256(bytes.fromhex(pub.public)).hexdigest()
    with pytest.raises(TrustConfigError, match="never overwritten"):
        keys.generate(tmp_path / "k")
    with pytest.raises(TrustConfigError):
        keys.public_key("ed25519:1234")


def test_a_signed_fetch_from_the_service(world, served, tmp_path):
    a = world["store"].find()[0]
    with fetcher(world, tmp_path) as f:
        k = f.get(a.key)
        assert k.code_object == world["store"].get(a.key).code_object
        assert k.origin["signed"] is True and k.origin["snapshot_version"] == 1
        n = f.sources[0].requests
        assert f.get(a.key).code_object == k.code_object and f.sources[0].requests == n
        assert n == 6 + 1  # 1.root.json, 2.root.json (404), timestamp, snapshot, targets, the bin; the blob
    state = json.loads(state_path(world, tmp_path).read_text())
    assert state["snapshot_version"] == 1 and state["timestamp_version"] == 1
    # a warm start downloads the timestamp and the next root version only (nothing changed)
    with fetcher(world, tmp_path) as f:
        assert f.get(a.key).code_object == k.code_object and f.sources[0].requests == 2
    with fetcher(world, tmp_path, offline=True) as f:
        assert f.get(a.key).code_object == k.code_object and f.sources[0].requests == 0


def test_a_pinned_initial_root_json_works_as_the_key_does(world, served, tmp_path):
    (tmp_path / "root.json").write_bytes(world["roots"][1])
    a = world["store"].find()[0]
    with fetcher(world, tmp_path, root_key=str(tmp_path / "root.json")) as f:
        assert f.get(a.key).code_object == world["store"].get(a.key).code_object


def test_no_pinned_key_is_refused_unless_insecure_is_asked_for(world, tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKE_AOT_ROOT_KEY", raising=False)
    monkeypatch.delenv("ROCKE_AOT_INSECURE", raising=False)
    with pytest.raises(TrustConfigError, match="no pinned root key"):
        Fetcher([ServiceSource(world["base"])], LocalStore(tmp_path / "host"))
    a = world["store"].find()[0]
    with pytest.warns(InsecureFetchWarning, match="WITHOUT signature checks"):
        f = Fetcher([ServiceSource(world["base"])], LocalStore(tmp_path / "host"), insecure=True)
    with f:
        k = f.get(a.key)
    assert k.origin["signed"] is False
    monkeypatch.setenv("ROCKE_AOT_ROOT_KEY", world["pin"])  # configuration, not code
    with Fetcher([ServiceSource(world["base"])], LocalStore(tmp_path / "host")) as f:
        k2 = f.get(a.key)  # the unsigned record counts for nothing: the signed target is the record,
        sent = f.sources[0].requests  # and bytes of the signed sha256 are the signed bytes
    assert k2.origin["signed"] is True and k2.code_object == k.code_object
    assert sent == 6  # the metadata only: no blob fetched again
    assert k2.origin["source"] == str(tmp_path / "host")


def _bin_file(d: Path, key: str) -> Path:
    ts = json.loads((d / "timestamp.json").read_bytes())
    snap = json.loads((d / f"{ts['signed']['meta']['snapshot.json']['version']}.snapshot.json").read_bytes())
    tv = snap["signed"]["meta"]["targets.json"]["version"]
    bits = json.loads((d / f"{tv}.targets.json").read_bytes())["signed"]["delegations"]["succinct_roles"]["bit_length"]
    name = repo.bin_of(f"kernels/{key}", bits)
    return d / f"{snap['signed']['meta'][name + '.json']['version']}.{name}.json"


@pytest.mark.parametrize("attack", ["unsigned timestamp", "tampered bin", "tampered bin re-signed by another key",
                                    "expired timestamp", "swapped root key", "unlisted release key",
                                    "snapshot other than the timestamp names"])
def test_bad_metadata_is_refused_and_nothing_is_stored(world, served, tmp_path, attack):
    k, store = world["k"], world["store"]
    a = store.find()[0]
    expected: type[TrustError] | tuple
    if attack == "unsigned timestamp":
        doc = json.loads((served / "timestamp.json").read_bytes())
        doc["signatures"] = []
        (served / "timestamp.json").write_bytes(json.dumps(doc).encode())
        expected = SignatureError
    elif attack.startswith("tampered bin"):
        path = _bin_file(served, a.key)
        doc = json.loads(path.read_bytes())
        t = doc["signed"]["targets"][f"kernels/{a.key}"]
        t["hashes"]["sha256"] = hashlib.sha256(b"evil").hexdigest()
        if attack.endswith("another key"):
            from tuf.api.metadata import Metadata

            md = Metadata.from_dict(doc)
            md.signatures.clear()
            md.sign(k["evil"].signer())
            path.write_bytes(repo.dump_metadata(md))
            expected = (SignatureError, MixedGenerationError)  # the signed length moved too, or the key
        else:
            path.write_bytes(json.dumps(doc, separators=(",", ":")).encode())
            expected = (SignatureError, MixedGenerationError)
    elif attack == "expired timestamp":
        restore(served, {})
        release(store, served, world["roots"], [k["release"]], now=NOW - timedelta(days=2))
        expected = ExpiredError
    elif attack == "swapped root key":
        restore(served, {})
        release(store, served, {1: make_root(k["evil"], [k["evil"].public])}, [k["evil"]])
        expected = UnlistedKeyError
    elif attack == "unlisted release key":
        with pytest.raises(TrustError, match="does not list enough"):  # the release step refuses first
            release(store, tmp_path / "x", world["roots"], [k["evil"]])
        from tuf.api.metadata import Metadata

        md = Metadata.from_bytes((served / "timestamp.json").read_bytes())
        md.signed.version += 1
        md.signatures.clear()
        md.sign(k["evil"].signer())
        (served / "timestamp.json").write_bytes(repo.dump_metadata(md))
        expected = SignatureError
    else:
        ts = json.loads((served / "timestamp.json").read_bytes())
        snap = served / f"{ts['signed']['meta']['snapshot.json']['version']}.snapshot.json"
        snap.write_bytes(snap.read_bytes() + b" ")
        expected = (MixedGenerationError, SignatureError)
    with fetcher(world, tmp_path) as f, pytest.raises(expected):
        f.get(a.key)
    assert nothing_stored(tmp_path)


def test_a_replayed_older_version_is_a_rollback(world, served, tmp_path):
    k, store = world["k"], world["store"]
    a = store.find()[0]
    release(store, served, world["roots"], [k["release"]])  # version 2
    with fetcher(world, tmp_path) as f:
        assert f.accepted().version == 2
    before = state_path(world, tmp_path).read_bytes()
    (served / "timestamp.json").write_bytes(world["gen1"]["timestamp.json"])  # validly signed, unexpired
    with fetcher(world, tmp_path) as f, pytest.raises(RollbackError):
        f.get(a.key)
    assert nothing_stored(tmp_path) and state_path(world, tmp_path).read_bytes() == before


def test_kernels_not_listed_and_blobs_other_than_signed_are_refused(world, served, tmp_path):
    store = world["store"]
    a = store.find()[0]
    with fetcher(world, tmp_path) as f, pytest.raises(NotInManifestError, match="not a target") as refused:
        f.get("ab" * 32)
    assert isinstance(refused.value, NotFoundError)  # the fetch's own error is a not-found too (CLI exit, HTTP 404)
    real = httpx.Client(timeout=HTTP_TIMEOUT_S)

    def tamper(request: httpx.Request) -> httpx.Response:
        r = real.get(str(request.url), headers={"accept-encoding": "identity"})
        body = r.content
        if "/v1/blobs/" in request.url.path:
            body = body[:-1] + bytes([body[-1] ^ 1])
        return httpx.Response(r.status_code, stream=httpx.ByteStream(body))

    evil = ServiceSource(world["base"], http=httpx.Client(transport=httpx.MockTransport(tamper)))
    with Fetcher([evil], LocalStore(tmp_path / "host"), root_key=world["pin"]) as f, \
            pytest.raises(BlobMismatchError):
        f.get(a.key)
    assert nothing_stored(tmp_path)
    real.close()


def test_rotating_release_and_root_keys_needs_no_new_pin_and_revokes_the_old(world, served, tmp_path):
    k, store = world["k"], world["store"]
    a = store.find()[0]
    with fetcher(world, tmp_path) as f:
        f.accepted()  # this host trusts root version 1
    # root v2 lists release2 only; v3 moves the root itself to release2's... no: to the evil key's
    # place of a new root key (signed by the old one too): hosts walk 1 -> 2 -> 3 from their pin
    roots = {**world["roots"], 2: make_root(k["root"], [k["release2"].public], version=2)}
    release(store, served, roots, [k["release2"]])
    with fetcher(world, tmp_path) as f:
        assert f.get(a.key).origin["snapshot_version"] == 2
    with fetcher(world, tmp_path / "fresh") as f:  # a fresh host walks the chain from its pin
        assert f.get(a.key).origin["snapshot_version"] == 2
    # the revoked key signs a newer timestamp: refused
    from tuf.api.metadata import Metadata

    md = Metadata.from_bytes((served / "timestamp.json").read_bytes())
    md.signed.version += 1
    md.signatures.clear()
    md.sign(k["release"].signer())
    (served / "timestamp.json").write_bytes(repo.dump_metadata(md))
    with fetcher(world, tmp_path / "h2") as f, pytest.raises(SignatureError):
        f.accepted()


def test_publish_checks_the_timestamp_before_serving_it(world, served, tmp_path):
    k, store = world["k"], world["store"]
    good = tmp_path / "good"
    shutil.copytree(served, good)
    release(store, good, world["roots"], [k["release"]])  # version 2
    pin = keys.public_key(world["pin"])
    target = tmp_path / "d"
    shutil.copytree(served, target)
    bad = json.loads((good / "timestamp.json").read_bytes())
    bad["signatures"][0]["sig"] = "00" * 64
    with pytest.raises(SignatureError):
        accept_file(store, target, pin, "timestamp.json", json.dumps(bad).encode())
    assert (target / "timestamp.json").read_bytes() == world["gen1"]["timestamp.json"]
    with pytest.raises(Conflict):  # a version is never rewritten
        accept_file(store, target, pin, "1.snapshot.json", b"{}")
    for p in sorted(good.iterdir()):
        if p.name != "timestamp.json":
            accept_file(store, target, pin, p.name, p.read_bytes())
    out = accept_file(store, target, pin, "timestamp.json", (good / "timestamp.json").read_bytes())
    assert out["version"] == 2 and out["kernels"] == 8
    with pytest.raises(RollbackError):
        accept_file(store, target, pin, "timestamp.json", world["gen1"]["timestamp.json"])
    with pytest.raises(SpecError):
        accept_file(store, target, pin, "../x.json", b"{}")
    # a repository listing kernels the store does not hold
    with Store.open(tmp_path / "empty.sqlite") as empty, pytest.raises(NotFoundError, match="8 kernel"):
        accept_file(empty, good, pin, "timestamp.json", (good / "timestamp.json").read_bytes())
    r = httpx.put(f"{world['base']}/v1/trust/timestamp.json", content=b"{}",
                  headers={"Authorization": "Bearer wrong"}, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 401


def test_the_trust_commands(world, kernel_bundle, tmp_path):
    env = {**os.environ, "ROCKE_AOT_HOME": str(tmp_path)}

    def run(*args, ok=True):
        p = subprocess.run([EXE, "trust", *args, "--json"], capture_output=True, text=True, timeout=120, env=env)
        if ok:
            assert p.returncode == 0, p.stderr
            return json.loads(p.stdout)
        return p

    r = run("keygen", str(tmp_path / "root.key"))
    assert r["keyid"] == keys.public_key(tmp_path / "root.key.pub").keyid
    p = subprocess.run([EXE, "trust", "keygen", str(tmp_path / "rel.key")], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "pin the ROOT key only" in p.stdout and "never pinned" in p.stdout
    r = run("root", "--key", str(tmp_path / "root.key"), "--release", str(tmp_path / "rel.key.pub"),
            "-o", str(tmp_path / "root.json"))
    assert r["version"] == 1
    built_store(tmp_path / "c.sqlite", kernel_bundle).close()
    sign = ["sign", "--cache", str(tmp_path / "c.sqlite"), "--root", str(tmp_path / "root.json"),
            "--key", str(tmp_path / "rel.key"), "-o", str(tmp_path / "signed")]
    r = run(*sign)
    assert r["version"] == 1 and r["kernels"] == 8 and r["bins_written"] == r["bins"]
    r = run(*sign)
    assert r["version"] == 2 and r["bins_written"] == 0  # versions only grow; unchanged bins are kept
    r = run("timestamp", "--key", str(tmp_path / "rel.key"), str(tmp_path / "signed"))
    assert r["version"] == 3
    v = repo.verify(tmp_path / "signed", keys.public_key(tmp_path / "root.key.pub"))
    assert v.timestamp_version == 3 and len(v.kernels) == 8
    p = run("sign", "--cache", str(tmp_path / "c.sqlite"), "--root", str(tmp_path / "root.json"),
            "--key", str(tmp_path / "root.key"), "-o", str(tmp_path / "s2"), ok=False)
    assert p.returncode == 1 and "does not list enough" in p.stderr
    # a directory of the old format: refused by name, with the command that migrates it
    old = tmp_path / "old"
    old.mkdir()
    rk, rel = keys.load_private(tmp_path / "root.key"), keys.load_private(tmp_path / "rel.key")
    root_doc = old_md.sign(old_md.make_root(1, NOW + timedelta(days=30), [rk.public], [rel.public]), [rk])
    kernels = {key: {k2: v2 for k2, v2 in e.items()} for key, e in v.kernels.items()}
    gens = sorted({(e["arch"], e["lane"], e["family"], e["generation"]) for e in kernels.values()})
    man = old_md.make_manifest(1, NOW + timedelta(days=30), [dict(zip(("arch", "lane", "family", "generation"), g))
                                                            for g in gens], kernels)
    mb = old_md.dumps(old_md.sign(man, [rel]))
    (old / "root.json").write_bytes(old_md.dumps(root_doc))
    (old / "manifest.json").write_bytes(mb)
    (old / "index.json").write_bytes(old_md.dumps(old_md.sign(old_md.make_index(1, NOW + timedelta(days=30), mb, man),
                                                              [rel])))
    with pytest.raises(TrustConfigError, match="rocke-aot trust migrate"):
        repo.verify(old, keys.public_key(tmp_path / "root.key.pub"))
    r = run("migrate", "--root-key", str(tmp_path / "root.key"), "--key", str(tmp_path / "rel.key"), str(old))
    assert r["kernels"] == 8 and (old / "legacy" / "manifest.json").is_file()
    assert repo.verify(old, keys.public_key(tmp_path / "root.key.pub")).kernels == v.kernels
    with pytest.raises(NotFoundError):
        raise NotInManifestError("a NotInManifestError is a NotFoundError too")


def test_bins_are_sized_per_bin_kept_as_the_store_grows_and_drawn_again_once_outgrown(tmp_path):
    """`trust sign` sizes its hashed bins for about repo.PER_BIN kernels each (the fewest bins,
    a power of two, holding the kernels at that average), keeps the count from the directory
    while the store grows up to 4x what the bins were sized for (bins whose kernels did not
    change keep their files), and draws the bins again past that ("outgrown": every bin signed
    again); a count given explicitly is kept. Checked against the signed files themselves and
    python-tuf's own succinct-role arithmetic, over repo.verify (a host's whole check)."""
    import math

    from tuf.api.metadata import SuccinctRoles

    keys.generate(tmp_path / "root.key")
    keys.generate(tmp_path / "release.key")
    rk, rel = keys.load_private(tmp_path / "root.key"), keys.load_private(tmp_path / "release.key")
    roots = {1: repo.signed_root(1, NOW + timedelta(days=30), rk, [rel.public])}
    per = repo.PER_BIN

    def kernels(n: int) -> dict[str, dict]:
        return {hashlib.sha256(f"k{i}".encode()).hexdigest(): {
            "sha256": hashlib.sha256(f"blob{i}".encode()).hexdigest(), "size": 1000 + i, "arch": "gfx942",
            "lane": "llvm22", "family": "gemm", "generation": "g1"} for i in range(n)}

    def expected_bits(n: int) -> int:  # the fewest bins holding n kernels at `per` each on average
        return max(1, math.ceil(math.log2(n / per)))

    def check(out: Path, n: int, bits: int) -> None:
        v = repo.verify(out, rk.public)
        assert v.bit_length == bits and len(v.kernels) == n
        succinct = SuccinctRoles([], 1, bits, repo.BIN_PREFIX)
        snap = json.loads((out / f"{v.snapshot_version}.snapshot.json").read_bytes())["signed"]["meta"]
        assert sorted(snap) == sorted([*(f"{r}.json" for r in succinct.get_roles()), "targets.json"])
        held = {}
        for name, m in snap.items():
            if name != "targets.json":
                doc = json.loads((out / f"{m['version']}.{name}").read_bytes())
                for path in doc["signed"]["targets"]:
                    assert succinct.get_role_for_target(path) == name[:-5]
                    held[path] = name
        assert len(held) == n

    out = tmp_path / "signed"
    n0 = 2 * per + 1  # one more than 2 bins hold: 4 bins
    info = repo.write(out, roots, kernels(n0), [rel])
    assert info["bit_length"] == expected_bits(n0) == 2 and info["bins"] == 4
    check(out, n0, 2)
    n1 = 4 * per * 4  # 4x what 4 bins were sized for: the count is kept
    info = repo.write(out, roots, kernels(n1), [rel])
    assert info["bit_length"] == 2 and expected_bits(n1) == 4
    check(out, n1, 2)
    info = repo.write(out, roots, kernels(n1), [rel])  # nothing changed: every bin kept
    assert (info["bins_written"], info["bins_kept"]) == (0, 4)
    info = repo.write(out, roots, kernels(n1 + 1), [rel])  # outgrown: drawn again, every bin signed
    assert info["bit_length"] == expected_bits(n1 + 1) == 5
    assert (info["bins"], info["bins_written"], info["bins_kept"]) == (32, 32, 0)
    assert (n1 + 1) / info["bins"] <= per
    check(out, n1 + 1, 5)
    explicit = tmp_path / "explicit"  # a count asked for is kept, outgrown or not
    repo.write(explicit, roots, kernels(n0), [rel], bit_length=1)
    info = repo.write(explicit, roots, kernels(n1 + 1), [rel], bit_length=1)
    assert info["bit_length"] == 1
    check(explicit, n1 + 1, 1)
