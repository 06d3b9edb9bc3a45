"""Connection hygiene of the service (issue 42), against a real `rocke-aot serve`:

- 300 connections sending slow bodies take none of the in-flight slots: /healthz and every other
  request keep answering; a body that does not arrive in time is 408 (ROCKE_AOT_SERVE_BODY_TIMEOUT_S)
- 1,100 idle TCP connections (from five client addresses) never shut a new client out
- /healthz answers 503 once the store file is deleted, and reads are refused (503) then too
- If-None-Match is never answered 304 for a blob that does not verify (500, IntegrityError)
- an optional TLS listener (serve --tls-cert/--tls-key); publish tokens over plain HTTP from a
  client that is not on loopback are 403 (service/guard.py), over TLS or loopback accepted
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from _service import EXE, built_store, free_port, serve_process  # noqa: F401
from sqlalchemy import text

from rocke_aot.cache.store import Store
from rocke_aot.service.app import create_app


@pytest.fixture(scope="module")
def served(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("hygiene")
    built_store(d / "s.sqlite", kernel_bundle).close()
    with Store.open(d / "s.sqlite") as s:
        arts = s.find()
    env = {"ROCKE_AOT_SERVE_BODY_TIMEOUT_S": "3"}
    with serve_process(f"sqlite:///{d / 's.sqlite'}", env=env) as (_, base):
        yield {"base": base, "port": int(base.rsplit(":", 1)[1]), "arts": arts, "d": d}


def _connect(port: int, source: str) -> socket.socket:
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    return s


def test_slow_bodies_take_no_in_flight_slot(served):
    port, base = served["port"], served["base"]
    slow = []
    for _ in range(300):
        s = _connect(port, "127.0.0.2")
        s.sendall(b"POST /v1/select HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                  b"content-length: 4000\r\n\r\n{\"ar")  # 15 bytes of body, then nothing
        slow.append(s)
    time.sleep(1.0)
    t = time.monotonic()
    health = httpx.get(base + "/healthz", timeout=10)
    listing = httpx.get(base + "/v1/kernels?limit=2", timeout=10)
    key = served["arts"][0].key
    meta = httpx.get(f"{base}/v1/kernels/{key}/meta", timeout=10)
    assert (health.status_code, listing.status_code, meta.status_code) == (200, 200, 200), (health.text, listing.text)
    assert time.monotonic() - t < 5
    # every slow sender is answered: 503 at once past the reading bound, 408 at the body deadline
    answers = []
    for s in slow:
        try:
            answers.append(s.recv(200).split(b" ", 2)[1])
        except (TimeoutError, IndexError, OSError):
            answers.append(b"none")
        s.close()
    assert set(answers) <= {b"503", b"408"} and answers.count(b"408") == 64, sorted(set(answers))


def test_idle_connections_never_shut_a_new_client_out(served):
    port, base = served["port"], served["base"]
    idle = [_connect(port, f"127.0.0.{10 + i % 5}") for i in range(1100)]
    try:
        time.sleep(0.5)
        t = time.monotonic()
        got = [httpx.get(base + "/v1/kernels?limit=1", timeout=5).status_code for _ in range(5)]
        assert got == [200] * 5 and time.monotonic() - t < 5
    finally:
        for s in idle:
            s.close()


def test_a_corrupt_blob_is_never_304(served, tmp_path):
    d = served["d"]
    shutil.copyfile(d / "s.sqlite", tmp_path / "c.sqlite")
    a = served["arts"][1]
    with Store.open(tmp_path / "c.sqlite") as s, s.engine.begin() as c:
        c.execute(text("UPDATE blobs SET data = :d WHERE sha256 = :s"), {"d": b"\x28\xb5\x2f\xfd" + b"\0" * 40, "s": a.sha256})
    with serve_process(f"sqlite:///{tmp_path / 'c.sqlite'}") as (_, base):
        r = httpx.get(f"{base}/v1/blobs/{a.sha256}", headers={"If-None-Match": f'"{a.sha256}"'}, timeout=10)
        assert r.status_code == 500 and r.status_code != 304, r.text
        ok = served["arts"][2]
        r = httpx.get(f"{base}/v1/blobs/{ok.sha256}", headers={"If-None-Match": f'"{ok.sha256}"'}, timeout=10)
        assert r.status_code == 304


def test_healthz_and_reads_say_503_once_the_store_file_is_gone(served, tmp_path):
    shutil.copyfile(served["d"] / "s.sqlite", tmp_path / "g.sqlite")
    a = served["arts"][0]
    with serve_process(f"sqlite:///{tmp_path / 'g.sqlite'}") as (_, base):
        assert httpx.get(f"{base}/v1/kernels/{a.key}/meta", timeout=10).status_code == 200
        assert httpx.get(f"{base}/v1/blobs/{a.sha256}", timeout=10).status_code == 200  # now a hot frame
        for p in tmp_path.glob("g.sqlite*"):
            p.unlink()
        time.sleep(0.5)
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 503
        assert httpx.get(f"{base}/v1/kernels/{a.key}/meta", timeout=10).status_code == 503
        assert httpx.get(f"{base}/v1/blobs/{a.sha256}", timeout=10).status_code == 503
        assert httpx.get(f"{base}/v1/kernels?limit=1", timeout=10).status_code == 503


def _asgi_put(app, client_host: str, scheme: str = "http") -> int:
    out = {}

    async def receive():
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(msg):
        if msg["type"] == "http.response.start":
            out["status"] = msg["status"]

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "PUT",
             "path": "/v1/kernels/" + "0" * 64, "raw_path": b"/v1/kernels/" + b"0" * 64, "query_string": b"",
             "root_path": "", "scheme": scheme, "client": (client_host, 5555), "server": ("192.0.2.2", 8080),
             "headers": [(b"authorization", b"Bearer tok"), (b"content-type", b"application/json"),
                         (b"content-length", b"2")]}
    asyncio.run(app(scope, receive, send))
    return out["status"]


def test_tokens_are_refused_over_plain_http_unless_loopback(tmp_path):
    Store.open(tmp_path / "t.sqlite").close()
    app = create_app(f"sqlite:///{tmp_path / 't.sqlite'}", token="tok", plain_tokens=False)
    assert _asgi_put(app, "198.51.100.7") == 403  # a remote client, plain HTTP: the token never counts
    assert _asgi_put(app, "198.51.100.7", "https") == 422  # over TLS: authorized, then the body is checked
    assert _asgi_put(app, "127.0.0.1") == 422 and _asgi_put(app, "::1") == 422
    assert _asgi_put(create_app(f"sqlite:///{tmp_path / 't.sqlite'}", token="tok", plain_tokens=True),
                     "198.51.100.7") == 422


def test_serve_over_tls(served, tmp_path):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(tmp_path / "c.pem"), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
    port = free_port()
    proc = subprocess.Popen([EXE, "serve", "--cache", str(served["d"] / "s.sqlite"), "--port", str(port),
                             "--tls-cert", str(tmp_path / "c.pem"), "--tls-key", str(tmp_path / "k.pem")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, r = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            try:
                r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=str(tmp_path / "c.pem"), timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.3)
        assert r is not None and r.status_code == 200
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)  # plain HTTP to the TLS port: no answer
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    bad = subprocess.run([EXE, "serve", "--cache", str(served["d"] / "s.sqlite"), "--tls-cert", str(tmp_path / "c.pem")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--tls-cert and --tls-key go together" in bad.stderr


def test_the_bounds_are_documented():
    doc = (Path(__file__).resolve().parent.parent / "docs" / "reliability.md").read_text()
    for needle in ("ROCKE_AOT_SERVE_BODY_TIMEOUT_S", "MAX_PER_CLIENT", "max_reading", "MAX_TAR_HEADER",
                   "MAX_MANIFEST_ITEMS", "ROCKE_AOT_PLUGIN_IMPORT_TIMEOUT_S", "boundedjson"):
        assert needle in doc, needle
