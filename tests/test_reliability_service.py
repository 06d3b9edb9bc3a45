"""The whole system with the HTTP service: load, a server killed mid-response, hostile input.

    load      4 real `rocke-aot build` processes (overlapping grids) ──> one store
              (SQLite, then PostgreSQL)  <── a live `rocke-aot serve` answering fetches,
              listings and selects from a thread the whole time                [reliability]
              afterwards: `cache verify` clean, every planned key present once, every
              request 200/404 (no 5xx, no connection error), no "database is locked"
    SIGKILL   a live server killed while requests stream; the store verifies, a restarted
              server serves the same bytes, the client got verified bytes or a named error
    bad input the CLI, the Python API and HTTP fed malformed specs, lanes, arches, problems,
              keys, --where filters, bundles and uploads: a named error, no traceback, and
              the store's rows and blobs byte-identical before and after (a digest read
              with the stdlib sqlite3, not our code)
    security  the bound address of a started server (read from /proc/net/tcp), bundles
              crafted to write outside the store or to overwrite an artifact's bytes

References: hashlib over the bytes, the SQLite file through the stdlib, the kernel's socket
table; docs/reliability.md records a run with its raw output.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import signal
import socket
import sqlite3
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import httpx
import pytest
from _pg import pg_database, store_url  # noqa: F401
from _service import EXE, HTTP_TIMEOUT_S, filled_store, free_port, serve_process, server_output  # noqa: F401
from click.testing import CliRunner
from fastapi.testclient import TestClient
from test_service import BAD, TOKEN, publish_body

from rocke_aot.cache.store import Store
from rocke_aot.cli.main import cli
from rocke_aot.errors import BundleError, LaneError, RockeError, SpecError
from rocke_aot.service.app import create_app
from rocke_aot.service.client import Client

BASE = ["--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", "--where", "path=fma", "--where", "block_m=32",
        "--where", "block_n=32", "--where", "block_k=32", "--where", "waves=2"]
# Four overlapping grids whose union is BASE (6 specs): every key is built by 1-3 processes.
GRIDS = [["--where", "in_dtype=f16"], ["--where", "out_dtype=f32"], ["--where", "double_buffer=false"], []]
RAW = Path(os.environ.get("ROCKE_AOT_RELIABILITY_RAW", "")) if os.environ.get("ROCKE_AOT_RELIABILITY_RAW") else None


def report(name: str, data) -> None:
    """Keep a test's figures (bench/results/reliability-raw/) when ROCKE_AOT_RELIABILITY_RAW names a folder."""
    if RAW is not None:
        RAW.mkdir(parents=True, exist_ok=True)
        (RAW / name).write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


# ---- helpers --------------------------------------------------------------------------------

def sqlite_digest(path: Path) -> str:
    """sha256 over every row of every table of the SQLite file (stdlib sqlite3), read-time
    bookkeeping (last_read_at) left out: the store's content, not our reading of it."""
    h = hashlib.sha256()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        for t in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")') if r[1] != "last_read_at"]
            sel = ", ".join(f'"{c}"' for c in cols)
            rows = conn.execute(f'SELECT {sel} FROM "{t}" ORDER BY {sel}').fetchall()
            h.update(repr((t, cols, rows)).encode())
    return h.hexdigest()


def server(cache_url: str, port: int | None = None, extra=()):
    """(proc, base URL) of a real `rocke-aot serve`; stopped (killed if need be) on exit."""
    return serve_process(cache_url, port=port, extra=extra)


def verify(url: str) -> dict:
    res = CliRunner().invoke(cli, ["cache", "verify", "--cache", url, "--json"])
    out = json.loads(res.stdout)
    assert res.exit_code == 0 and out["ok"] is True, res.output
    return out


def planned_keys(url_dir: Path) -> set[str]:
    """The keys of BASE as the planner names them (a dry run into a scratch store)."""
    from rocke_aot.aot import builder
    from rocke_aot.aot.builder.plan import parse_where
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    plans = []
    where = parse_where([BASE[i + 1] for i, a in enumerate(BASE) if a == "--where"])
    with Store.open(url_dir / "plan.sqlite") as s:
        builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")], store=s,
                      dry_run=True, where=where, on_plan=plans.append)
    return {j.key for j in plans[0].to_build}


# ---- 1. load --------------------------------------------------------------------------------

class Traffic(threading.Thread):
    """Fetches, listings and selects against a live server until told to stop (bounded)."""

    def __init__(self, base: str, max_requests: int = 3000):
        super().__init__(daemon=True)
        self.base, self.max_requests = base, max_requests
        self.stop = threading.Event()
        self.statuses: dict[str, dict[int, int]] = {}
        self.errors: list[str] = []
        self.bad: list[str] = []
        self.count = 0

    def _req(self, c: httpx.Client, what: str, method: str, path: str, ok=(200,), **kw):
        self.count += 1
        try:
            r = c.request(method, path, **kw)
        except httpx.TransportError as e:
            self.errors.append(f"{method} {path}: {type(e).__name__}: {e}")
            return None
        d = self.statuses.setdefault(what, {})
        d[r.status_code] = d.get(r.status_code, 0) + 1
        if r.status_code not in ok:
            self.bad.append(f"{method} {path} -> {r.status_code} {r.text[:300]}")
        return r

    def run(self):
        problem = {"m": 256, "n": 256, "k": 256}
        with httpx.Client(base_url=self.base, timeout=60) as c:
            while not self.stop.is_set() and self.count < self.max_requests:
                page = self._req(c, "list", "GET", "/v1/kernels?limit=100")
                items = page.json()["items"] if page is not None and page.status_code == 200 else []
                for it in items[:3]:
                    r = self._req(c, "kernel", "GET", f"/v1/kernels/{it['key']}", headers={"Accept-Encoding": "identity"})
                    if r is not None and r.status_code == 200 and hashlib.sha256(r.content).hexdigest() != it["sha256"]:
                        self.bad.append(f"kernel {it['key']}: wrong bytes")
                    r = self._req(c, "blob", "GET", f"/v1/blobs/{it['sha256']}", headers={"Accept-Encoding": "identity"})
                    if r is not None and r.status_code == 200 and hashlib.sha256(r.content).hexdigest() != it["sha256"]:
                        self.bad.append(f"blob {it['sha256']}: wrong bytes")
                self._req(c, "missing", "GET", "/v1/kernels/" + "0" * 64, ok=(404,))
                self._req(c, "select", "POST", "/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": problem})
                time.sleep(0.05)


@pytest.mark.reliability
def test_load_four_builders_and_a_live_server(store_url, tmp_path, llvm22):  # noqa: F811
    backend = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    want = planned_keys(tmp_path)
    assert len(want) == 6
    Store.open(store_url).close()  # the schema exists before the server opens it
    t0 = time.monotonic()
    with server(store_url) as (proc, base):
        traffic = Traffic(base)
        traffic.start()
        builds = [subprocess.Popen([EXE, "build", *BASE, *g, "--cache", store_url, "--jobs", "1", "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for g in GRIDS]
        outs = [b.communicate(timeout=300) for b in builds]
        time.sleep(1.0)  # a last round of fetches sees every artifact
        traffic.stop.set()
        traffic.join(timeout=120)
        assert not traffic.is_alive()
    server_out = server_output(proc)
    wall = time.monotonic() - t0
    assert all(b.returncode == 0 for b in builds), [e[-2000:] for _, e in outs]
    summaries = [json.loads(o) for o, _ in outs]
    for b, (o, e), s in zip(builds, outs, summaries):
        assert b.returncode == 0 and not s["failed"], (o[-2000:], e[-2000:])
    for text in [o + e for o, e in outs] + [server_out]:
        assert "database is locked" not in text and "Traceback" not in text, text[-3000:]
    assert traffic.errors == [] and traffic.bad == [], (traffic.errors[:5], traffic.bad[:5])
    assert traffic.count >= 20 and traffic.statuses["select"] == {200: traffic.statuses["select"][200]}
    assert all(code in (200, 404) for d in traffic.statuses.values() for code in d)
    # no duplicates, none missing: one row per key, every planned key, through the store's own engine
    from sqlalchemy import text as sql
    with Store.open(store_url) as s, s.engine.connect() as conn:
        rows = conn.execute(sql("SELECT key, count(*) FROM artifacts WHERE status = 'ok' GROUP BY key")).fetchall()
    assert {k for k, _ in rows} == want and all(n == 1 for _, n in rows), rows
    out = verify(store_url)
    # each key was compiled at least once; together the processes planned more than the union
    assert sum(s["planned"] for s in summaries) > len(want)
    assert sum(s["built"] for s in summaries) >= len(want)
    report(f"load-{backend}.json", {
        "backend": backend, "processes": len(builds), "grids": GRIDS, "planned_union": len(want),
        "per_process": [{k: s[k] for k in ("planned", "built", "cached", "seconds")} for s in summaries],
        "requests": traffic.count, "statuses": traffic.statuses, "transport_errors": len(traffic.errors),
        "verify": out, "wall_s": round(wall, 1)})


# ---- 2. a server killed mid-response ---------------------------------------------------------

def test_server_sigkilled_mid_response(tmp_path, kernel_bundle):  # noqa: F811
    url = f"sqlite:///{tmp_path / 'served.sqlite'}"
    with filled_store(url, kernel_bundle[1]) as s:
        arts = {a.sha256: s.get(a.key).code_object for a in s.find()}
    shas = sorted(arts)
    port = free_port()
    results: list = []
    stop = threading.Event()

    # One empty local store per thread, opened here: get_blob keeps fetched bytes in memory
    # only, so a fresh Client each round goes over the wire. (Opening new stores from two
    # threads at once races in the schema migration: see the report.)
    locals_ = [Store.open(tmp_path / f"local{i}.sqlite") for i in range(2)]

    def fetch_loop(i: int):
        n = 0
        while not stop.is_set():
            n += 1
            with Client(f"http://127.0.0.1:{port}", cache=locals_[i], retries=4, backoff=0.25) as c:
                sha = shas[n % len(shas)]
                try:
                    results.append((sha, c.get_blob(sha)))
                except RockeError as e:
                    results.append((sha, e))

    def raw_stream(base: str):
        """Requests in flight on raw streams when the kill comes: each ends complete or broken."""
        got = []
        for sha in shas * 3:
            try:
                with httpx.stream("GET", f"{base}/v1/blobs/{sha}", headers={"Accept-Encoding": "identity"},
                                  timeout=10) as r:
                    body = b"".join(r.iter_bytes(64))
                got.append((sha, r.status_code, body))
            except httpx.TransportError as e:
                got.append((sha, None, e))
        return got

    kills = 0
    streamed = []
    with server(url, port) as (proc, base):
        threads = [threading.Thread(target=fetch_loop, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        streamer = threading.Thread(target=lambda: streamed.extend(raw_stream(base)), daemon=True)
        streamer.start()
        time.sleep(1.5)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        kills += 1
        verify(url)  # the store is consistent with the server dead
        with Store.open(tmp_path / "nodown.sqlite") as s0, Client(base, cache=s0, retries=1, backoff=0.1) as c0:
            with pytest.raises(RockeError) as down:  # no server and no retries left: a named error
                c0.get_blob(shas[0])
            assert type(down.value).__name__ == "SourceError" and "after 2 attempts" in str(down.value)
        time.sleep(0.3)
    # restart on the same port while the clients retry: they get the bytes again
    with server(url, port) as (proc2, base):
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        streamer.join(timeout=60)
        for sha in shas:  # the restarted server serves the same bytes
            r = httpx.get(f"{base}/v1/blobs/{sha}", headers={"Accept-Encoding": "identity"}, timeout=HTTP_TIMEOUT_S)
            assert r.status_code == 200 and r.content == arts[sha]
    verify(url)
    for s_ in locals_:
        s_.close()
    good = [r for r in results if isinstance(r[1], bytes)]
    named = [r for r in results if not isinstance(r[1], bytes)]
    assert good, "no fetch completed"
    for sha, body in good:  # never wrong bytes
        assert hashlib.sha256(body).hexdigest() == sha and body == arts[sha]
    for _sha, e in named:
        assert type(e).__name__ in ("SourceError", "IntegrityError", "RemoteError"), e
    for sha, status, body in streamed:  # a raw stream is complete or broken, never other bytes
        if status == 200:
            assert body == arts[sha]
        else:
            assert isinstance(body, httpx.TransportError)
    report("server-sigkill.json", {"kills": kills, "client_fetches": len(results), "verified": len(good),
                                   "named_errors": sorted({type(e).__name__ for _, e in named}),
                                   "raw_streams": len(streamed),
                                   "raw_complete": sum(1 for x in streamed if x[1] == 200),
                                   "raw_broken": sum(1 for x in streamed if x[1] is None)})


# ---- 3. bad input changes nothing ------------------------------------------------------------

def _bundle(path: Path, manifest: dict | bytes, members: list[tuple[tarfile.TarInfo, bytes | None]] = ()) -> Path:
    with tarfile.open(path, "w") as tar:
        data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for info, body in members:
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    return path


def _member(name: str, body: bytes, **kw) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(body)
    for k, v in kw.items():
        setattr(info, k, v)
    return info, body


def _read_bundle(path: Path) -> tuple[dict, list[tuple[tarfile.TarInfo, bytes]]]:
    with tarfile.open(path) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers() if m.name != "manifest.json"]
    return manifest, members


def bad_bundles(d: Path, good: Path, victim_dir: Path) -> dict[str, Path]:
    """name -> a bundle that must be refused whole."""
    raw = good.read_bytes()
    manifest, members = _read_bundle(good)
    out = {}
    (d / "truncated.bundle").write_bytes(raw[: len(raw) // 2])
    out["truncated"] = d / "truncated.bundle"
    (d / "empty.bundle").write_bytes(b"")
    out["empty"] = d / "empty.bundle"
    flipped = bytearray(raw)
    m0, b0 = members[0]
    off = raw.index(b0[len(b0) // 2: len(b0) // 2 + 32]) + 4
    flipped[off] ^= 0xFF
    (d / "tampered.bundle").write_bytes(bytes(flipped))
    out["tampered blob bytes"] = d / "tampered.bundle"
    newer = {**manifest, "version": manifest["version"] + 1}
    out["newer schema"] = _bundle(d / "newer.bundle", newer, members)
    alt = json.loads(json.dumps(manifest))
    alt["entries"][0]["spec"] = {**alt["entries"][0]["spec"], "block_m": 128}
    out["manifest key inputs altered"] = _bundle(d / "altered.bundle", alt, members)
    out["manifest not json"] = _bundle(d / "notjson.bundle", b"{not json", members)
    # path tricks: members that would land outside the store if anything extracted them
    escape = victim_dir / "escaped"
    out["member ../"] = _bundle(d / "dotdot.bundle", manifest, members + [_member("../../escaped", b"x")])
    out["member absolute"] = _bundle(d / "abs.bundle", manifest, members + [_member(str(escape), b"x")])
    out["member symlink"] = _bundle(d / "link.bundle", manifest, members + [
        _member("blobs/" + "e" * 64 + ".zst", b"", type=tarfile.SYMTYPE, linkname=str(escape))])
    out["blob named ../"] = _bundle(d / "blobdotdot.bundle", manifest,
                                    [(_member("blobs/../../" + m.name.split("/")[-1], b)[0], b) for m, b in members])
    return out


def cli_run(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))  # standalone: exit codes and messages as a user sees them
    out = res.output + (res.stderr if res.stderr_bytes is not None else "")
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"{args}: uncaught {res.exception!r}\n{out}")
    return res.exit_code, out


@pytest.fixture
def hostile(tmp_path, kernel_bundle):  # noqa: F811
    path = tmp_path / "store.sqlite"
    filled_store(path, kernel_bundle[1]).close()
    return path, kernel_bundle[1]


def test_bad_input_through_the_cli_changes_nothing(hostile, tmp_path):
    path, good_bundle = hostile
    url = f"sqlite:///{path}"
    victim = tmp_path / "victim"
    victim.mkdir()
    before = sqlite_digest(path)
    key = next(iter(Store.open(path).find())).key
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "notjson.json").write_text("{nope")
    (problems / "list.json").write_text(json.dumps([{"family": "gemm", "m": 64, "n": 64, "k": 64}]))
    (problems / "neg.json").write_text(json.dumps({"gemm": [{"m": -1, "n": 64, "k": 64}]}))
    (problems / "str.json").write_text(json.dumps({"gemm": [{"m": "64", "n": 64, "k": 64}]}))
    (problems / "extra.json").write_text(json.dumps({"gemm": [{"m": 64, "n": 64, "k": 64, "q": 1}]}))
    (problems / "fam.json").write_text(json.dumps({"conv9": [{"m": 64}]}))
    b = ["build", "--cache", url, "--family", "gemm"]
    cases = [
        (b + ["--arch", "gfx9999", "--lane", "llvm22"], 2, "gfx9999"),
        (b + ["--arch", "gfx942:xnack*", "--lane", "llvm22"], 2, "xnack"),
        (b + ["--arch", "", "--lane", "llvm22"], 2, "arch"),
        (b + ["--arch", "gfx942", "--lane", "llvm99"], 2, "llvm99"),
        (b + ["--arch", "gfx942", "--lane", "22"], 2, "lane"),
        (["build", "--cache", url, "--arch", "gfx942", "--lane", "llvm22", "--family", "conv9"], 2, "conv9"),
        (b + ["--arch", "gfx942", "--lane", "llvm22", "--where", "nosuch=1"], 2, "nosuch"),
        (b + ["--arch", "gfx942", "--lane", "llvm22", "--where", "block_m=abc"], 2, "block_m"),
        (b + ["--arch", "gfx942", "--lane", "llvm22", "--where", "block_m"], 2, "FIELD=VALUE"),
        (b + ["--arch", "gfx942", "--lane", "llvm22", "--where", "=1"], 2, ""),
        (b + ["--arch", "gfx942", "--lane", "llvm22", "--where", "double_buffer=maybe"], 2, "double_buffer"),
        *[(b + ["--arch", "gfx942", "--lane", "llvm22", "--problems", str(problems / f)], 2, frag)
          for f, frag in (("notjson.json", "not JSON"), ("list.json", "expected an object"), ("neg.json", ">= 1"),
                          ("str.json", "int"), ("extra.json", "unknown gemm problem fields"), ("fam.json", "conv9"))],
        (["cache", "show", "nothex", "--cache", url], 2, "key"),
        (["cache", "show", key.upper(), "--cache", url], 2, "key"),
        (["cache", "show", "../" + key, "--cache", url], 2, "key"),
        (["cache", "show", "0" * 64, "--cache", url], 1, "NotFoundError"),
        (["select", "--cache", url, "--arch", "gfx942", "--family", "gemm", "--problem", '{"m": -1, "n": 64, "k": 64}'], 2, ">= 1"),
        (["select", "--cache", url, "--arch", "gfx942", "--family", "gemm", "--problem", '{"m": 64}'], 2, "missing"),
        (["select", "--cache", url, "--arch", "gfx942", "--family", "gemm", "--problem", "m=x"], 2, "not JSON"),
        (["select", "--cache", url, "--arch", "gfx9999", "--family", "gemm", "--problem", '{"m": 64, "n": 64, "k": 64}'], 2, "gfx9999"),
        (["select", "--cache", url, "--arch", "gfx942", "--family", "gemm", "--lane", "llvm99",
          "--problem", '{"m": 64, "n": 64, "k": 64}'], 2, "llvm99"),
    ]
    bundles = bad_bundles(tmp_path, good_bundle, victim)
    cases += [(["cache", "import", str(p), "--cache", url], 1, "BundleError") for p in bundles.values()]
    tried = []
    for args, code, fragment in cases:
        rc, out = cli_run(*args)
        tried.append({"args": args[:1] + [a for a in args[1:] if a != url], "exit": rc, "output": out.strip()[-300:]})
        assert rc == code, (args, rc, out)
        assert "Traceback" not in out and fragment in out, (args, out)
        assert sqlite_digest(path) == before, args
    assert list(victim.iterdir()) == [] and not (tmp_path.parent / "escaped").exists()
    verify(url)
    report("bad-input-cli.json", {"tried": len(tried), "cases": tried})


def test_bad_input_through_the_python_api_changes_nothing(hostile, tmp_path):
    from rocke_aot.aot import builder
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    path, good_bundle = hostile
    before = sqlite_digest(path)
    victim = tmp_path / "victim"
    victim.mkdir()
    n = 0
    with Store.open(path) as s:
        key = s.find()[0].key
        calls = [
            (lambda: get_lane("llvm99"), LaneError), (lambda: get_lane(22), LaneError), (lambda: get_lane(None), LaneError),
            (lambda: Target.parse("gfx9999"), SpecError), (lambda: Target.parse(""), SpecError),
            (lambda: Target.parse(942), SpecError),
            (lambda: s.get("nothex"), SpecError), (lambda: s.get(key.upper()), SpecError),
            (lambda: s.get("../" + key), SpecError), (lambda: s.get(None), SpecError),
            (lambda: builder.build(arches=[Target.parse("gfx942")], families=["conv9"], lanes=[get_lane("llvm22")],
                                   store=s, dry_run=True), SpecError),
            (lambda: builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                                   store=s, dry_run=True, where={"nosuch": 1}), SpecError),
            (lambda: builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                                   store=s, dry_run=True, where={"block_m": "abc"}), SpecError),
        ]
        calls += [(lambda p=p: s.import_(p), BundleError) for p in bad_bundles(tmp_path, good_bundle, victim).values()]
        for fn, exc in calls:
            with pytest.raises(exc):
                fn()
            n += 1
            assert sqlite_digest(path) == before
    assert list(victim.iterdir()) == []
    report("bad-input-python.json", {"tried": n})


def test_bad_input_over_http_changes_nothing(hostile, tmp_path):
    path, _ = hostile
    before = sqlite_digest(path)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    tried = 0
    with Store.open(path) as s, TestClient(create_app(s, token=TOKEN)) as c:
        arts = s.find()
        a = arts[0]
        other = next(x for x in arts if x.sha256 != a.sha256)
        code, other_code = s.get(a.key).code_object, s.get(other.key).code_object
        for method, p, kw, status, _, _, _ in BAD:  # test_service's table, now with the store compared
            assert c.request(method, p, **kw).status_code == status
            tried += 1
        good = publish_body(a, code)
        uploads = [
            (publish_body(a, other_code, sha256=good["sha256"]), a.key, 422),  # bytes do not match sha256
            (publish_body(a, other_code), a.key, 409),  # same key, other valid bytes: never overwritten
            ({**good, "lane": 22}, a.key, 422), ({**good, "lane": None}, a.key, 422),
            ({**good, "arch": "gfx9999"}, a.key, 422), ({**good, "family": "conv9"}, a.key, 422),
            ({**good, "spec": {"block_m": "x"}}, a.key, 422), ({**good, "spec": []}, a.key, 422),
            ({**good, "extra": 1}, a.key, 422), ({k: v for k, v in good.items() if k != "sha256"}, a.key, 422),
            ({**good, "code_object": ""}, a.key, 422), ({**good, "ir_sha256": "../../etc/passwd"}, a.key, 422),
            ([good], a.key, 422), ("not an object", a.key, 422), (None, a.key, 422),
            ({**good, "metadata": "x"}, a.key, 422), ({**good, "toolchain": {"kind": 1}}, a.key, 422),
        ]
        for body, key, status in uploads:
            r = c.put(f"/v1/kernels/{key}", json=body, headers=auth)
            assert r.status_code == status, (body if not isinstance(body, dict) else sorted(body), r.text)
            assert "error" in r.json() and "Traceback" not in r.text
            tried += 1
        for raw in (b"", b"\x00" * 100, b"{" * 5000, b'{"arch": "gfx942"'):
            r = c.put(f"/v1/kernels/{a.key}", content=raw, headers={**auth, "content-type": "application/json"})
            assert r.status_code == 422 and "Traceback" not in r.text, r.text
            tried += 1
        r = c.put(f"/v1/kernels/{a.key}", json=good, headers={"Authorization": "Bearer " + TOKEN[:-1]})
        assert r.status_code == 401
        tried += 1
    assert sqlite_digest(path) == before
    report("bad-input-http.json", {"tried": tried, "from_test_service_table": len(BAD)})


# ---- 4. security ------------------------------------------------------------------------------

def _listening(port: int) -> list[str]:
    """Local addresses in LISTEN state on ``port``, from the kernel's socket tables."""
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if int(p, 16) == port and state == "0A":
                    if width == 8:
                        found.append(".".join(str(b) for b in reversed(bytes.fromhex(addr))))
                    else:
                        found.append("v6:" + addr)
    return found


def test_server_binds_loopback_unless_told(hostile):
    path, _ = hostile
    with server(f"sqlite:///{path}") as (proc, base):
        port = int(base.rsplit(":", 1)[1])
        assert _listening(port) == ["127.0.0.1"]
        # raw request targets (no client-side normalisation of '..'): never a file's bytes
        for target in ("/../../../../etc/passwd", "/v1/blobs/../../../../etc/passwd", "/v1/kernels/..%2f..%2fetc%2fpasswd",
                       "/v1/kernels/%2e%2e/%2e%2e/etc/passwd/meta", "//etc/passwd", "/v1/blobs/%2fetc%2fpasswd"):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                reply = b""
                while chunk := sock.recv(65536):
                    reply += chunk
            status = int(reply.split(b" ", 2)[1])
            assert status in (400, 404, 422) and b"root:" not in reply, (target, reply[:300])
    with server(f"sqlite:///{path}", extra=["--host", "0.0.0.0"]) as (proc, base):
        port = int(base.rsplit(":", 1)[1])
        assert _listening(port) == ["0.0.0.0"]


def test_bounded_query_and_page_sizes(hostile):
    path, _ = hostile
    with Store.open(path) as s, TestClient(create_app(s, token=TOKEN)) as c:
        r = c.get("/v1/kernels?arch=" + "g" * 10_000)
        assert r.status_code == 422
        r = c.get("/v1/kernels?limit=1001")
        assert r.status_code == 422
        r = c.get("/v1/kernels?limit=1000")
        assert r.status_code == 200 and len(r.json()["items"]) <= 1000
        r = c.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": {"m": 64, "n": 64, "k": 64},
                                       "lanes": ["llvm22"] * 100_000})
        assert r.status_code == 413 and r.json()["error"] == "TooLarge"
        r = c.post("/v1/select", content=b"x" * (1 << 20), headers={"content-type": "application/json",
                                                                   "content-length": str(1 << 20)})
        assert r.status_code == 413


def test_bundle_cannot_overwrite_an_artifact_with_other_bytes(hostile, tmp_path):
    """A well-formed bundle (keys recomputed and matching) that carries other bytes under a
    key the store already holds: refused whole, the stored bytes stay."""
    path, good_bundle = hostile
    manifest, members = _read_bundle(good_bundle)
    with Store.open(path) as s:
        arts = {a.key: a for a in s.find()}
    e0 = next(e for e in manifest["entries"] if e["status"] == "ok")
    other = next(e for e in manifest["entries"] if e["status"] == "ok" and e["blob_sha256"] != e0["blob_sha256"])
    evil = json.loads(json.dumps(manifest))
    for e in evil["entries"]:
        if e["key"] == e0["key"]:
            e["blob_sha256"] = other["blob_sha256"]
    before = sqlite_digest(path)
    with Store.open(path) as s:
        with pytest.raises(BundleError):
            s.import_(_bundle(tmp_path / "evil.bundle", evil, members))
        assert s.get(e0["key"]).sha256 == arts[e0["key"]].sha256 == e0["blob_sha256"]
    assert sqlite_digest(path) == before


def test_new_stores_opened_from_threads_at_once(tmp_path):
    """Bug found by the SIGKILL test: two threads creating two new stores at once raced in
    Alembic's process-global migration context (DDL on the wrong connection)."""
    import concurrent.futures as cf

    def open_one(i: int) -> str:
        with Store.open(tmp_path / f"s{i}.sqlite") as s:
            return len(s.find())

    with cf.ThreadPoolExecutor(6) as ex:
        list(ex.map(open_one, range(12)))  # any exception re-raises here
    for i in range(12):  # every file has the full schema (stdlib sqlite3)
        with contextlib.closing(sqlite3.connect(tmp_path / f"s{i}.sqlite")) as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"artifacts", "blobs", "alembic_version"} <= names, names
