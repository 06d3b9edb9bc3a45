"""Signed generations end to end: keys, root -> release delegation, the release step over a real
store, a real `rocke-aot serve --trust-dir` serving the metadata, and a host that refuses
everything the pinned root key does not vouch for.

    built store (8 real gemm kernels) ──trust/release.py──> manifest.json + index.json (+ root.json)
    rocke-aot serve --trust-dir D --root-key root.pub --token-file T
    Fetcher(ServiceSource, root_key=root.pub):
        good: bytes equal the store's, origin names the manifest version; a second get is local
        each attack, written into D (the server reads it per request) or sent by a tampering
        transport: named error, nothing in the local store, the versions seen unchanged
    PUT /v1/trust: a good generation is served after; a bad one is refused and D is unchanged
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest
from _service import EXE, built_store, filled_store, kernel_bundle, serve_process  # noqa: F401

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
    TrustConfigError,
    TrustError,
    Unauthorized,
    UnlistedKeyError,
)
from rocke_aot.service.client import Client
from rocke_aot.service.trust import accept
from rocke_aot.trust import keys
from rocke_aot.trust import metadata as md
from rocke_aot.trust.release import release

TOKEN = "trust-test-token"
NOW = datetime.now(timezone.utc)


def make_root(root_key, release_pubs, version=1, days=365, signer=None):
    return md.sign(md.make_root(version, NOW + timedelta(days=days), [root_key.public], release_pubs),
                   [signer or root_key])


def generation(store, where: Path, root_doc, key, version, days=30.0) -> dict[str, bytes]:
    """A signed generation of ``store`` as the bytes of its three files (written to ``where``)."""
    release(store, where, root_doc, key, version=version, expires_days=days)
    return {n: (where / n).read_bytes() for n in ("root.json", "index.json", "manifest.json")}


@pytest.fixture(scope="module")
def world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("trust")
    for name in ("root", "release", "release2", "evil"):
        keys.generate(d / f"{name}.key")
    k = {name: keys.load_private(d / f"{name}.key") for name in ("root", "release", "release2", "evil")}
    url = f"sqlite:///{d / 'served.sqlite'}"
    store = built_store(url, kernel_bundle)
    root_doc = make_root(k["root"], [k["release"].public])
    served = d / "served"
    gen1 = generation(store, served, root_doc, k["release"], 1)
    (d / "token").write_text(TOKEN)
    extra = ["--trust-dir", str(served), "--root-key", str(d / "root.key.pub")]
    with serve_process(url, token_file=str(d / "token"), extra=extra) as (_, base):
        yield {"d": d, "k": k, "store": store, "root_doc": root_doc, "served": served, "gen1": gen1, "base": base,
               "pin": str(d / "root.key.pub")}
    store.close()


@pytest.fixture()
def served(world):
    """The served directory, put back to generation 1 after the test."""
    yield world["served"]
    for n, data in world["gen1"].items():
        (world["served"] / n).write_bytes(data)


def fetcher(world, tmp_path, **kw):
    return Fetcher([ServiceSource(world["base"], retries=0)], LocalStore(tmp_path / "host"),
                   root_key=kw.pop("root_key", world["pin"]), **kw)


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
        assert k.origin["signed"] is True and k.origin["manifest_version"] == 1
        n = f.sources[0].requests
        assert f.get(a.key).code_object == k.code_object and f.sources[0].requests == n
    state = json.loads((tmp_path / "host" / "trust" / "state.json").read_text())
    assert state["manifest_version"] == 1 and state["index_version"] == 1
    # a warm start reads root.json and index.json only (the manifest's sha256 did not move)
    with fetcher(world, tmp_path) as f:
        assert f.get(a.key).code_object == k.code_object and f.sources[0].requests == 2
    with fetcher(world, tmp_path, offline=True) as f:
        assert f.get(a.key).code_object == k.code_object and f.sources[0].requests == 0


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
        k2 = f.get(a.key)  # the unsigned record counts for nothing: the signed entry is the record,
        sent = f.sources[0].requests  # and bytes of the signed sha256 are the signed bytes
    assert k2.origin["signed"] is True and k2.code_object == k.code_object
    assert sent == 3  # root.json, index.json, manifest.json: no blob fetched again
    assert k2.origin["manifest_version"] == 1 and k2.origin["source"] == str(tmp_path / "host")


@pytest.mark.parametrize("attack", ["unsigned", "tampered manifest", "tampered manifest and index", "expired",
                                    "swapped root key", "unlisted release key", "another manifest, same version"])
def test_bad_metadata_is_refused_and_nothing_is_stored(world, served, tmp_path, attack):
    k, store, root_doc = world["k"], world["store"], world["root_doc"]
    a = store.find()[0]
    g1 = world["gen1"]
    expected: type[TrustError]
    if attack == "unsigned":
        doc = json.loads(g1["index.json"])
        doc["signatures"] = []
        (served / "index.json").write_bytes(md.dumps(doc))
        expected = SignatureError
    elif attack.startswith("tampered manifest"):
        doc = json.loads(g1["manifest.json"])
        entry = doc["signed"]["kernels"][a.key]
        entry["sha256"] = hashlib.sha256(b"evil").hexdigest()
        data = md.dumps(doc)
        (served / "manifest.json").write_bytes(data)
        expected = MixedGenerationError  # the index names the manifest's sha256
        if attack.endswith("and index"):
            ix = json.loads(g1["index.json"])
            ix["signed"]["manifest"].update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
            (served / "index.json").write_bytes(md.dumps(ix))
            expected = SignatureError
    elif attack == "expired":
        generation(store, served, root_doc, k["release"], 1, days=-1)
        expected = ExpiredError
    elif attack == "swapped root key":
        evil_root = make_root(k["evil"], [k["evil"].public])
        generation(store, served, evil_root, k["evil"], 1)
        expected = UnlistedKeyError
    elif attack == "unlisted release key":
        with pytest.raises(TrustError, match="does not list key"):  # the release step refuses first
            release(store, tmp_path / "x", root_doc, k["evil"], version=1)
        ix = json.loads(g1["index.json"])
        (served / "index.json").write_bytes(md.dumps(md.sign(ix["signed"], [k["evil"]])))
        expected = UnlistedKeyError
    else:  # a host saw version 1; a source now answers another version 1 (other generation contents)
        with fetcher(world, tmp_path) as f:
            f.accepted()
        gen = generation(store, tmp_path / "other", root_doc, k["release"], 1, days=31)
        for n, data in gen.items():
            (served / n).write_bytes(data)
        expected = MixedGenerationError
    state_before = _read(tmp_path / "host" / "trust" / "state.json")
    with fetcher(world, tmp_path) as f, pytest.raises(expected):
        f.get(a.key)
    assert nothing_stored(tmp_path)
    assert _read(tmp_path / "host" / "trust" / "state.json") == state_before


def _read(p: Path) -> bytes | None:
    return p.read_bytes() if p.exists() else None


def test_a_replayed_older_version_is_a_rollback(world, served, tmp_path):
    k, store = world["k"], world["store"]
    a = store.find()[0]
    generation(store, served, world["root_doc"], k["release"], 2)
    with fetcher(world, tmp_path) as f:
        assert f.accepted().manifest.version == 2
    for n, data in world["gen1"].items():  # the attacker replays version 1, validly signed and unexpired
        (served / n).write_bytes(data)
    with fetcher(world, tmp_path) as f, pytest.raises(RollbackError, match="older than version 2"):
        f.get(a.key)
    assert nothing_stored(tmp_path)


def test_kernels_not_listed_and_blobs_other_than_signed_are_refused(world, served, tmp_path):
    store = world["store"]
    a = store.find()[0]
    with fetcher(world, tmp_path) as f, pytest.raises(NotInManifestError, match="not listed") as refused:
        f.get("ab" * 32)
    assert isinstance(refused.value, NotFoundError)  # the fetch's own error is a not-found too (CLI exit, HTTP 404)
    real = httpx.Client()

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


def test_rotating_the_release_key_needs_no_new_pin_and_revokes_the_old_one(world, served, tmp_path):
    k, store = world["k"], world["store"]
    a = store.find()[0]
    root2 = make_root(k["root"], [k["release2"].public], version=2)
    generation(store, served, root2, k["release2"], 2)
    with fetcher(world, tmp_path) as f:
        assert f.get(a.key).origin["manifest_version"] == 2
    # the revoked key signs a newer generation under the new root: refused
    generation(store, tmp_path / "old", root2, k["release2"], 3)  # (a valid one, to copy the root from)
    ix = json.loads((tmp_path / "old" / "index.json").read_bytes())
    (served / "index.json").write_bytes(md.dumps(md.sign(ix["signed"], [k["release"]])))
    (served / "manifest.json").write_bytes((tmp_path / "old" / "manifest.json").read_bytes())
    (served / "root.json").write_bytes(md.dumps(root2))
    with fetcher(world, tmp_path / "h2") as f, pytest.raises(UnlistedKeyError):
        f.accepted()


def test_publish_of_a_signed_generation_checks_before_writing(world, served, tmp_path):
    k, store, base = world["k"], world["store"], world["base"]
    good = generation(store, tmp_path / "g2", world["root_doc"], k["release"], 2)
    texts = {n.split(".")[0]: data.decode() for n, data in good.items()}
    with Client(base, token=TOKEN, offline=False) as c:
        bad = dict(texts)
        doc = json.loads(bad["manifest"])
        doc["signatures"][0]["sig"] = "00" * 64
        bad["manifest"] = md.dumps(doc).decode()
        with pytest.raises(MixedGenerationError):  # the index names the exact manifest bytes
            c.publish_generation(**bad)
        assert (served / "index.json").read_bytes() == world["gen1"]["index.json"]
        out = c.publish_generation(**texts)
        assert out["version"] == 2 and out["kernels"] == 8
        assert httpx.get(f"{base}/v1/trust/index.json").content == good["index.json"]
        with pytest.raises(RollbackError):
            c.publish_generation(**{n.split(".")[0]: d.decode() for n, d in world["gen1"].items()})
        other = generation(store, tmp_path / "g2b", world["root_doc"], k["release"], 2, days=10)
        with pytest.raises(Conflict):
            c.publish_generation(**{n.split(".")[0]: d.decode() for n, d in other.items()})
        assert httpx.get(f"{base}/v1/trust/manifest.json").content == good["manifest.json"]
    with Client(base, token="wrong", offline=False) as c, pytest.raises(Unauthorized):
        c.publish_generation(**texts)
    # a manifest listing kernels the store does not hold (the same checks, in process)
    with Store.open(tmp_path / "empty.sqlite") as empty, pytest.raises(NotFoundError, match="8 kernel"):
        accept(empty, tmp_path / "d", keys.public_key(world["pin"]), *(d.decode() for d in good.values()))
    assert not (tmp_path / "d").exists()


def test_the_trust_commands(world, kernel_bundle, tmp_path):
    env = {**os.environ, "ROCKE_AOT_HOME": str(tmp_path)}

    def run(*args):
        p = subprocess.run([EXE, "trust", *args, "--json"], capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    r = run("keygen", str(tmp_path / "root.key"))
    assert r["keyid"] == keys.public_key(tmp_path / "root.key.pub").keyid
    run("keygen", str(tmp_path / "rel.key"))
    r = run("root", "--key", str(tmp_path / "root.key"), "--release", str(tmp_path / "rel.key.pub"),
            "-o", str(tmp_path / "root.json"))
    assert r["version"] == 1
    built_store(tmp_path / "c.sqlite", kernel_bundle).close()
    r = run("sign", "--cache", str(tmp_path / "c.sqlite"), "--root", str(tmp_path / "root.json"),
            "--key", str(tmp_path / "rel.key"), "-o", str(tmp_path / "signed"))
    assert r["version"] == 1 and r["kernels"] == 8
    r = run("sign", "--cache", str(tmp_path / "c.sqlite"), "--root", str(tmp_path / "root.json"),
            "--key", str(tmp_path / "rel.key"), "-o", str(tmp_path / "signed"))
    assert r["version"] == 2  # versions only grow
    pin = keys.public_key(tmp_path / "root.key.pub")
    root = md.check_root(json.loads((tmp_path / "signed" / "root.json").read_bytes()), pin, NOW)
    ix = md.check_index(json.loads((tmp_path / "signed" / "index.json").read_bytes()), root, NOW)
    m = md.check_manifest((tmp_path / "signed" / "manifest.json").read_bytes(), ix, root, NOW)
    assert m.version == 2 and len(m.kernels) == 8
    p = subprocess.run([EXE, "trust", "sign", "--cache", str(tmp_path / "c.sqlite"), "--root",
                        str(tmp_path / "root.json"), "--key", str(tmp_path / "root.key"), "-o", str(tmp_path / "s2")],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1 and "does not list key" in p.stderr
