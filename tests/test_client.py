"""The service client against a real server on loopback (and, for tampering, a fake one):
verification, the local store, offline mode, retries, publish, and the fetch/publish CLI."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time

import httpx
import pytest
import zstandard
from _service import EXE, HTTP_TIMEOUT_S, filled_store, free_port, live_server  # noqa: F401
from sqlalchemy import update

from rocke_aot.cache.keys import thaw
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.store import Store
from rocke_aot.errors import (
    CacheError,
    IntegrityError,
    LaneError,
    NotFoundError,
    SpecError,
)
from rocke_aot.service.client import Client, OfflineMiss
from rocke_aot.service.errors import Conflict, Unauthorized

TOKEN = "client-test-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory, kernel_bundle):
    """(base URL, source Store) of one live server with a publish token, for the module."""
    d = tmp_path_factory.mktemp("client")
    url = f"sqlite:///{d / 'served.sqlite'}"
    src = filled_store(url, kernel_bundle[1])
    (d / "token").write_text(TOKEN + "\n")
    with live_server(url, token_file=str(d / "token")) as base:
        yield base, src
    src.close()


def test_get_verifies_stores_locally_and_second_get_makes_no_request(server, tmp_path):
    base, src = server
    a = src.find()[0]
    want = src.get(a.key).code_object
    with Client(base, cache=tmp_path / "local.sqlite") as c:
        got = c.get(a.key)
        assert got.code_object == want and hashlib.sha256(got.code_object).hexdigest() == a.sha256
        assert got.key == a.key and thaw(got.spec) == thaw(a.spec) and got.ir_sha256 == a.ir_sha256
        n = c.requests_made
        assert n == 2  # meta + blob
        again = c.get(a.key)
        assert again.code_object == want and c.requests_made == n
        assert c.store.get(a.key).code_object == want  # kept in the local store, verified on read
        assert c.get_blob(a.sha256) == want and c.requests_made == n  # the local blob answers
        other = src.find()[1]
        blob = c.get_blob(other.sha256)
        assert hashlib.sha256(blob).hexdigest() == other.sha256 and c.requests_made == n + 1
        assert c.get_blob(other.sha256) == blob and c.requests_made == n + 1


def test_offline_answers_from_the_local_store_only(server, tmp_path, monkeypatch):
    base, src = server
    a, b = src.find()[:2]
    local = tmp_path / "local.sqlite"
    with Client(base, cache=local) as c:
        c.get(a.key)
    monkeypatch.setenv("ROCKE_AOT_OFFLINE", "1")
    with Client(base, cache=local) as c:
        assert c.offline
        assert c.get(a.key).code_object == src.get(a.key).code_object
        with pytest.raises(OfflineMiss, match=b.key):
            c.get(b.key)
        with pytest.raises(OfflineMiss, match=b.sha256):
            c.get_blob(b.sha256)
        sel = c.select("gfx942", "gemm", {"m": 1000, "n": 1000, "k": 512})
        assert [x["key"] for x in sel["accepted"]] == [a.key]  # what the local store holds
        assert c.requests_made == 0
    assert isinstance(OfflineMiss("x"), NotFoundError)
    monkeypatch.setenv("ROCKE_AOT_OFFLINE", "yes")
    with pytest.raises(SpecError, match="ROCKE_AOT_OFFLINE"):
        Client(base, cache=local)


def test_select_over_http_matches_the_service(server, tmp_path):
    base, src = server
    with Client(base, cache=tmp_path / "l.sqlite") as c:
        sel = c.select("gfx942", "gemm", {"m": 1000, "n": 1000, "k": 512}, lanes=["llvm22"], limit=3)
        assert len(sel["accepted"]) == 3
        for cand in sel["accepted"]:
            assert hashlib.sha256(c.get_blob(cand["sha256"])).hexdigest() == cand["sha256"]
        with pytest.raises(LaneError, match="llvm99"):
            c.select("gfx942", "gemm", {"m": 1, "n": 1, "k": 1}, lanes=["llvm99"])
        with pytest.raises(SpecError, match="unknown family"):
            c.select("gfx942", "gemmm", {"m": 1, "n": 1, "k": 1})
        with pytest.raises(NotFoundError):
            c.get("0" * 64)


def test_publish_through_the_client(server, tmp_path):
    base, src = server
    a = src.find()[0]
    art = src.get(a.key)
    from rocke_aot.cache.keys import KeyInputs

    ins = art.inputs
    new = KeyInputs(ins.arch, ins.lane, ins.profile, ins.family, ins.spec, "published-by-client", ins.toolchain, ins.options)
    with Client(base, cache=tmp_path / "l.sqlite", token=TOKEN) as c:
        out = c.publish(new, art.code_object, ir_sha256=art.ir_sha256, metadata=thaw(art.metadata))
        assert out["created"] is True and out["kernel"]["sha256"] == a.sha256
        assert c.publish(new, art.code_object, ir_sha256=art.ir_sha256)["created"] is False
        other = src.get(next(x.key for x in src.find() if x.sha256 != a.sha256)).code_object
        with pytest.raises(Conflict):
            c.publish(new, other, ir_sha256=art.ir_sha256)
        fetched = c.get(out["kernel"]["key"])
        assert fetched.code_object == art.code_object
    with Client(base, cache=tmp_path / "l2.sqlite", token="wrong") as c:
        with pytest.raises(Unauthorized):
            c.publish(new, art.code_object, ir_sha256=art.ir_sha256)


def test_retries_with_backoff_on_connection_errors(tmp_path):
    base = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with Client(base, cache=tmp_path / "l.sqlite", retries=2, backoff=0.05) as c:
        t = time.monotonic()
        with pytest.raises(CacheError, match="after 3 attempts"):
            c.get("ab" * 32)
        assert c.requests_made == 3 and time.monotonic() - t >= 0.05 + 0.10


def test_retries_5xx_then_names_the_corrupt_blob(tmp_path, kernel_bundle):
    url = f"sqlite:///{tmp_path / 'corrupt.sqlite'}"
    store = filled_store(url, kernel_bundle[1])
    a = store.find()[0]
    with store.engine.begin() as conn:
        conn.execute(update(B).where(B.c.sha256 == a.sha256).values(data=b"\x28\xb5\x2f\xfd garbage"))
    with live_server(url) as base:
        with Client(base, cache=tmp_path / "l.sqlite", retries=2, backoff=0.01) as c:
            with pytest.raises(IntegrityError, match=a.sha256):
                c.get_blob(a.sha256)
            assert c.requests_made == 3  # 500 is retried, then surfaced as the named error
            with pytest.raises(IntegrityError):
                c.get(a.key)
            assert c.store.lookup_many([a.key]) == {}  # nothing unverified was kept
        text = httpx.get(base + "/metrics", timeout=HTTP_TIMEOUT_S).text
        assert "rocke_verification_failures_total 6.0" in text
    store.close()


def fake_server(frame: bytes, meta: dict, encoding: str | None):
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/meta"):
            return httpx.Response(200, json=meta)
        headers = {"content-encoding": encoding} if encoding else {}
        return httpx.Response(200, stream=httpx.ByteStream(frame), headers=headers)  # as a socket streams
    return httpx.Client(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("tamper", ["raw-bytes", "zstd-frame-of-other-bytes", "zstd-bomb-claim"])
def test_client_refuses_bytes_that_do_not_verify(tmp_path, kernel_bundle, tamper):
    with Store.open(kernel_bundle[0]) as src:
        a = src.find()[0]
        raw = src.get(a.key).code_object
    meta = {"key": a.key, "arch": a.arch, "lane": a.lane, "profile": a.profile, "family": a.family,
            "spec": thaw(a.spec), "recipe_digest": a.recipe_digest, "toolchain": thaw(a.toolchain), "options": thaw(a.options),
            "sha256": a.sha256, "size": a.size, "ir_sha256": a.ir_sha256, "metadata": {}, "provenance": {}}
    evil = raw[:-1] + bytes([raw[-1] ^ 1])
    frame, enc = {
        "raw-bytes": (evil, None),
        "zstd-frame-of-other-bytes": (zstandard.ZstdCompressor().compress(evil), "zstd"),
        "zstd-bomb-claim": (zstandard.ZstdCompressor().compress(b"\0" * (a.size * 100)), "zstd"),
    }[tamper]
    with Client("http://fake", cache=tmp_path / "l.sqlite", http=fake_server(frame, meta, enc), retries=0) as c:
        with pytest.raises(IntegrityError, match=a.sha256):
            c.get(a.key)
        assert c.store.lookup_many([a.key]) == {}


def test_cli_fetch_and_publish(server, tmp_path):
    base, src = server
    a = src.find()[2]
    out = tmp_path / "k.hsaco"
    p = subprocess.run([EXE, "fetch", "--server", base, "--local", str(tmp_path / "l"), "--insecure", a.key, "-o",
                        str(out), "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() == a.sha256 == json.loads(p.stdout)["kernels"][0]["sha256"]
    p = subprocess.run([EXE, "fetch", "--server", base, "--local", str(tmp_path / "l"), "--insecure", "0" * 64],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "NotFoundError" in p.stderr
    art = src.get(a.key)
    (tmp_path / "spec.json").write_text(json.dumps(thaw(art.spec)))
    args = [EXE, "publish", "--server", base, "--arch", "gfx942", "--lane", "llvm22", "--family", "gemm",
            "--spec", f"@{tmp_path / 'spec.json'}", "--recipe-digest", "cli-published",
            "--toolchain", json.dumps(thaw(art.toolchain)), "--options", json.dumps(thaw(art.options)), "--ir-sha256", art.ir_sha256,
            "--metadata", json.dumps(thaw(art.metadata)), str(out), "--json"]  # a publish carries its launch contract
    p = subprocess.run(args, capture_output=True, text=True, timeout=120, env={**os.environ, "ROCKE_AOT_TOKEN": TOKEN})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["created"] is True and doc["kernel"]["sha256"] == a.sha256
    assert doc["kernel"]["recipe_digest"] == "cli-published"
    p = subprocess.run(args[:4] + ["--token", "nope"] + args[4:], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "Unauthorized" in p.stderr
    p = subprocess.run([*args[:6], "llvm99", *args[7:]], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "llvm99" in p.stderr


def test_cli_select_through_the_server(server, tmp_path):
    base, src = server
    p = subprocess.run([EXE, "select", "--server", base, "--arch", "gfx942", "--family", "gemm",
                        "--problem", '{"m": 1000, "n": 1000, "k": 512}', "--limit", "2", "--json"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "ROCKE_AOT_HOME": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    local = subprocess.run([EXE, "select", "--cache", src.url, "--arch", "gfx942", "--family", "gemm",
                            "--problem", '{"m": 1000, "n": 1000, "k": 512}', "--limit", "2", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert [c["key"] for c in doc["accepted"]] == [c["key"] for c in json.loads(local.stdout)["accepted"]]
    assert not (tmp_path / "cache.sqlite").exists()  # a remote select opens no local store
    p = subprocess.run([EXE, "select", "--server", base, "--arch", "gfx942", "--family", "gemm",
                        "--problem", '{"m": 1}'], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "problem" in p.stderr
