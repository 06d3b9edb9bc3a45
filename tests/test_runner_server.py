"""`rocke-aot bench --run-from-cache --server`: a GPU host ranks on the service and fetches
through the verifying client, never a database of its own.

    real kernels (8 gemm, gfx942) ──trust/release.py──> signed/ ──serve --trust-dir──> server
    ServerSource(Client(server), Fetcher([ServiceSource(server)], LocalStore, pinned key))
        ranked()     the service's select
        load_many()  bytes == the builder's store's, launch contract == the stored one, kept as
                     blobs in the client's LocalStore (no SQLite file anywhere on the host side),
                     every kernel under the signed manifest; a server sending other bytes is
                     refused (BlobMismatchError) and nothing is kept
    the CLI: no pinned key and no --insecure -> TrustConfigError before any GPU is looked for;
             with the key -> the GPU check (exit 77 here); --cache with --server -> exit 2
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from _service import HTTP_TIMEOUT_S, built_store, serve_process  # noqa: F401
from click.testing import CliRunner

from rocke_aot.cache.keys import thaw
from rocke_aot.cli.main import cli
from rocke_aot.client import Fetcher, LocalStore, ServiceSource
from rocke_aot.errors import BlobMismatchError
from rocke_aot.runner.bench import ServerSource
from rocke_aot.service.client import Client
from rocke_aot.service.selection import parse_problem
from rocke_aot.targets import Target
from rocke_aot.trust import keys, repo
from rocke_aot.trust.release import release

PROBLEM = {"m": 512, "n": 512, "k": 512}


@pytest.fixture(scope="module")
def world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("runner-server")
    for name in ("root", "release"):
        keys.generate(d / f"{name}.key")
    rk, rel = keys.load_private(d / "root.key"), keys.load_private(d / "release.key")
    url = f"sqlite:///{d / 'served.sqlite'}"
    store = built_store(url, kernel_bundle)
    root = {1: repo.signed_root(1, datetime.now(timezone.utc) + timedelta(days=30), rk, [rel.public])}
    release(store, d / "signed", root, [rel])
    with serve_process(url, extra=["--trust-dir", str(d / "signed")]) as (_, base):
        yield {"d": d, "store": store, "base": base, "pin": str(d / "root.key.pub")}
    store.close()


def test_a_gpu_host_ranks_on_the_server_and_fetches_signed_kernels(world, tmp_path):
    store, base = world["store"], world["base"]
    fetcher = Fetcher([ServiceSource(base, retries=0)], LocalStore(tmp_path / "host"), root_key=world["pin"])
    with Client(base) as client, fetcher:
        src = ServerSource(client, fetcher)
        ranked = src.ranked(Target.parse("gfx942"), "gemm", parse_problem("gemm", PROBLEM), None)
        keys_ = [r["key"] for r in ranked]
        assert keys_ and set(keys_) <= {a.key for a in store.find()}
        loaded = src.load_many(keys_)
        assert list(loaded) == keys_
        for k in keys_:
            image, meta = loaded[k]
            art = store.get(k)
            assert image == art.code_object and meta["launch"] == thaw(art.metadata)["launch"]
        requests = fetcher.sources[0].requests
        assert src.load(keys_[0])[0] == store.get(keys_[0]).code_object
        assert fetcher.sources[0].requests == requests  # kept locally: no request
    kept = {p.name for p in (tmp_path / "host" / "blobs").iterdir()}
    assert kept == {store.get(k).sha256 for k in keys_}
    assert not list(tmp_path.rglob("*.sqlite"))  # the host keeps files named by hash, no database


def test_a_server_sending_other_bytes_is_refused_and_nothing_is_kept(world, tmp_path):
    base = world["base"]
    real = httpx.Client(timeout=HTTP_TIMEOUT_S)

    def tamper(request: httpx.Request) -> httpx.Response:
        r = real.get(str(request.url), headers={"accept-encoding": "identity"})
        body = r.content
        if "/v1/blobs/" in request.url.path:
            body = body[:-1] + bytes([body[-1] ^ 1])
        return httpx.Response(r.status_code, stream=httpx.ByteStream(body))

    evil = ServiceSource(base, retries=0, http=httpx.Client(transport=httpx.MockTransport(tamper)))
    with Client(base) as client, Fetcher([evil], LocalStore(tmp_path / "host"), root_key=world["pin"]) as f:
        src = ServerSource(client, f)
        key = src.ranked(Target.parse("gfx942"), "gemm", parse_problem("gemm", PROBLEM), None)[0]["key"]
        with pytest.raises(BlobMismatchError, match=key):
            src.load_many([key])
    assert not (tmp_path / "host" / "blobs").exists()
    real.close()


def _bench(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "gfx942", "--family", "gemm",
                                    "--problem", '{"m": 64, "n": 64, "k": 64}', *args], env=env)


def test_the_cli_checks_the_trust_configuration_before_looking_for_a_gpu(world, tmp_path, monkeypatch):
    monkeypatch.delenv("ROCKE_AOT_ROOT_KEY", raising=False)
    monkeypatch.delenv("ROCKE_AOT_INSECURE", raising=False)
    r = _bench("--server", world["base"], "--local", str(tmp_path / "host"))
    assert r.exit_code == 1 and "TrustConfigError" in r.output and "no pinned root key" in r.output, r.output
    r = _bench("--server", world["base"], "--local", str(tmp_path / "host"), "--root-key", world["pin"])
    assert r.exit_code == 77 and "HIP runtime unavailable" in r.output, r.output
    r = _bench("--server", world["base"], "--cache", str(tmp_path / "c.sqlite"), "--root-key", world["pin"])
    assert r.exit_code == 2 and "--local" in r.output
    r = _bench("--root-key", world["pin"])
    assert r.exit_code == 2 and "go with --server" in r.output



def test_a_host_fetches_by_prefix_under_the_signed_manifest(world, tmp_path):
    """Issue 39: the 16 digits select prints resolve among the signed metadata's keys (a pinned key: every bin read)."""
    arts = world["store"].find()[:2]
    base = world["base"]
    r = CliRunner().invoke(cli, ["fetch", "--server", base, "--root-key", world["pin"], "--local", str(tmp_path / "h"),
                                 arts[0].key[:16], arts[1].key[:16], "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["kernels"]
    assert [k["key"] for k in got] == [a.key for a in arts] and all(k["origin"]["signed"] for k in got)
    assert [k["sha256"] for k in got] == [a.sha256 for a in arts]
    taken = {a.key for a in world["store"].find()}
    nobody = next(p for p in ("0123456789abcdef", "fedcba9876543210") if not any(k.startswith(p) for k in taken))
    r = CliRunner().invoke(cli, ["fetch", "--server", base, "--root-key", world["pin"], "--local",
                                 str(tmp_path / "h"), nobody])
    assert r.exit_code == 1 and f"no kernel key starts with {nobody} (snapshot version 1" in r.output
