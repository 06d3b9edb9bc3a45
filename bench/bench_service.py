"""Service throughput and latency on loopback, against two references in the same run.

    real build (4 gemm kernels for gfx942, 27-39 KB) ──> store; the hot blob is the one nearest 30 KB
    for workers in (1, one per core):
        rocke-aot serve      GET /v1/blobs/{sha}  Accept-Encoding: identity (raw, verified bytes)
        rocke-aot serve      GET /v1/blobs/{sha}  Accept-Encoding: zstd     (the stored frame)
        bare FastAPI         GET /blob            the same raw bytes from memory (uvicorn, same workers)
        nginx (Debian)       GET /v1/blobs/{sha}  the same raw bytes as a static file
      each: wrk -t2 -c32 -d{SECONDS}s --latency  -> requests/s, p50, p99
    select: 10,000 artifacts (384 gemm specs x 26 recipe digests + the build) ──> POST /v1/select
      sequentially for SELECT_SECONDS -> p50, p99 (end to end, one worker)

Whole-run ratios only (throughput vs bare FastAPI and vs nginx): the machine is shared, so
absolute numbers move between runs while the ratios of one run hold. Keep it under ~3 min.

    .venv/bin/python bench/bench_service.py [--seconds 5] [--select-only] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
PY = sys.executable
EXE = str(Path(PY).with_name("rocke-aot"))
CONNECTIONS = 32

# The bare reference: the same bytes from memory, nothing else (loaded by uvicorn workers).
try:
    from fastapi import FastAPI
    from fastapi.responses import Response

    bare_app = FastAPI()
    _BLOB = Path(os.environ["BENCH_BLOB"]).read_bytes() if os.environ.get("BENCH_BLOB") else b""

    @bare_app.get("/blob")
    async def _blob() -> Response:
        return Response(_BLOB, media_type="application/octet-stream")
except ImportError:  # pragma: no cover
    bare_app = None


def uvicorn_impl() -> str:
    """What uvicorn's "auto" picks here (both servers under test run the same uvicorn)."""
    import importlib.util

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"loop={loop} http={http}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def process(args, ready_url: str, env=None):
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"{args[0]} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            try:
                if httpx.get(ready_url, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"{args} not ready")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def _ms(text: str) -> float:
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    return float(m.group(1)) * _UNIT[m.group(2)]


def wrk(url: str, seconds: int, headers: dict[str, str]) -> dict:
    args = ["wrk", "-t2", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency"]
    for k, v in headers.items():
        args += ["-H", f"{k}: {v}"]
    out = subprocess.run(args + [url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = _ms(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = _ms(re.search(r"\s99%\s+(\S+)", out).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50_ms": p50, "p99_ms": p99, "non_2xx": int(errors.group(1)) if errors else 0, "raw": out}


def build_store(workdir: Path) -> tuple[str, dict]:
    url = f"sqlite:///{workdir / 'bench.sqlite'}"
    t = time.perf_counter()
    subprocess.run([EXE, "build", "--cache", url, "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22",
                    "--where", "block_m=128", "--where", "block_n=128", "--where", "block_k=64", "--where", "waves=2",
                    "--where", "in_dtype=f16", "--where", "out_dtype=f32", "--json"],
                   check=True, capture_output=True)
    from rocke_aot.cache.store import Store

    with Store.open(url) as store:
        arts = store.find()
        hot = min(arts, key=lambda a: abs(a.size - 30_000))
        raw = store.get(hot.key).code_object
    return url, {"build_s": round(time.perf_counter() - t, 1), "kernels": len(arts), "sizes": sorted(a.size for a in arts),
                 "hot_sha256": hot.sha256, "hot_size": hot.size, "hot_stored_size": hot.stored_size, "raw": raw}


def fill_10k(url: str) -> dict:
    """Bring the store to >= 10,000 artifacts: every gemm spec of gfx942/llvm22 in the build's
    own (current) generation, and the same specs under 25 other recipe digests (older
    generations, which the service's select leaves out in SQL). Each row has its real key
    and generation (computed from its inputs) and points at a real code object with the
    build's metadata. Test data, so the rows go in with one INSERT in one transaction
    (10,000 puts, one write transaction each, take minutes here)."""
    from rocke_aot.cache import db
    from rocke_aot.cache.generations import generation_of
    from rocke_aot.cache.keys import KeyInputs, artifact_key, canonical_json, thaw
    from rocke_aot.cache.models import artifacts as A
    from rocke_aot.cache.store import Store
    from rocke_aot.variants import table

    t = time.perf_counter()
    with Store.open(url) as store:
        src = store.find()[0]
        have = {a.key for a in store.find()}
        specs = list(table.enumerate_specs("gemm", "gfx942", "llvm22"))
        rows = []
        now = time.time()
        for d in range(26):
            digest = src.recipe_digest if d == 0 else f"bench-recipe-{d}"
            for s in specs:
                ins = KeyInputs("gfx942", "llvm22", "llvm22", "gemm", s.to_dict(), digest, src.toolchain, src.options)
                key = artifact_key(ins)
                if key in have:
                    continue
                rows.append({"key": key, "status": "ok", "arch": ins.arch, "lane": ins.lane,
                             "profile": ins.profile, "family": ins.family, "spec_json": ins.spec_json,
                             "recipe_digest": ins.recipe_digest, "toolchain_json": ins.toolchain_json, "options_json": ins.options_json,
                             "blob_sha256": src.sha256, "ir_sha256": src.ir_sha256,
                             "metadata_json": canonical_json(thaw(src.metadata)),
                             "provenance_json": canonical_json({"bench": d}), "error": None, "log": None,
                             "built_at": now, "last_read_at": None, "generation": generation_of(ins)})
        with db.write_tx(store.engine) as conn:
            conn.execute(A.insert(), rows)
        total = store.stats().artifacts
        current = len(store.find()) - sum(1 for r in rows if r["recipe_digest"] != src.recipe_digest)
    return {"put": len(rows), "artifacts": total, "current_generation": current,
            "fill_s": round(time.perf_counter() - t, 1)}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a server process and its workers (psutil)."""
    import psutil

    procs = [psutil.Process(pid)]
    procs += procs[0].children(recursive=True)
    return sum(p.cpu_times().user + p.cpu_times().system for p in procs)


def select_latency(base: str, seconds: float, pid: int) -> dict:
    body = {"arch": "gfx942", "family": "gemm", "problem": {"m": 4096, "n": 4096, "k": 4096}, "limit": 10}
    times = []
    with httpx.Client(base_url=base, timeout=60) as c:
        t = time.perf_counter()
        first = c.post("/v1/select", json=body)
        first_ms = (time.perf_counter() - t) * 1e3
        first.raise_for_status()
        doc = first.json()
        server0, client0 = _cpu_s(pid), time.thread_time()
        end = time.monotonic() + seconds
        while time.monotonic() < end or len(times) < 5:
            t = time.perf_counter()
            r = c.post("/v1/select", json=body)
            times.append((time.perf_counter() - t) * 1e3)
            r.raise_for_status()
        server_cpu, client_cpu = _cpu_s(pid) - server0, time.thread_time() - client0
    times.sort()
    n = len(times)
    return {"requests": n, "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(times[min(n - 1, int(n * 0.99))], 2), "first_ms": round(first_ms, 2),
            # mean CPU per request: the server's (all its processes), and this client's thread
            "server_cpu_ms": round(server_cpu / n * 1e3, 3), "client_cpu_ms": round(client_cpu / n * 1e3, 3),
            "bytes": len(first.content), "accepted": len(doc["accepted"]), "rejected": len(doc["rejected"])}


def nginx_conf(prefix: Path, root: Path, port: int, workers: int) -> Path:
    conf = prefix / "nginx.conf"
    conf.write_text(f"""
user root;
worker_processes {workers};
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location = /healthz {{ return 200 "ok"; }}
    }}
}}
""")
    return conf


def run(seconds: int, select_seconds: float, select_only: bool = False) -> dict:
    if not shutil.which("wrk") or not shutil.which("nginx") and not Path("/usr/sbin/nginx").exists():
        raise SystemExit("needs wrk and nginx: apt-get install -y wrk nginx-light")
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    work = Path(tempfile.mkdtemp(prefix="bench-service-"))
    try:
        url, info = build_store(work)
        raw = info.pop("raw")
        sha = info["hot_sha256"]
        assert hashlib.sha256(raw).hexdigest() == sha
        (work / "v1" / "blobs").mkdir(parents=True)
        (work / "v1" / "blobs" / sha).write_bytes(raw)
        blob_file = work / "blob.bin"
        blob_file.write_bytes(raw)
        out: dict = {"host_cores": os.cpu_count(), "seconds": seconds, "connections": CONNECTIONS,
                     "uvicorn": uvicorn_impl(), **info, "runs": []}
        for workers in [] if select_only else sorted({1, os.cpu_count() or 1}):
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            with process([EXE, "serve", "--cache", url, "--port", str(port), "--workers", str(workers)],
                         base + "/healthz"):
                for enc in ("identity", "zstd"):
                    target = f"{base}/v1/blobs/{sha}"
                    wrk(target, 1, {"Accept-Encoding": enc})  # warm every worker's verified-blob cache
                    r = wrk(target, seconds, {"Accept-Encoding": enc})
                    out["runs"].append({"server": f"rocke ({enc})", "workers": workers, **r})
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            with process([PY, "-m", "uvicorn", "bench_service:bare_app", "--app-dir", str(HERE), "--port", str(port),
                          "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
                         base + "/blob", env={"BENCH_BLOB": str(blob_file)}):
                wrk(base + "/blob", 1, {})
                out["runs"].append({"server": "bare FastAPI", "workers": workers, **wrk(base + "/blob", seconds, {})})
            port = free_port()
            prefix = work / f"nginx{workers}"
            prefix.mkdir()
            conf = nginx_conf(prefix, work, port, workers)
            with process([nginx, "-c", str(conf), "-p", str(prefix)], f"http://127.0.0.1:{port}/healthz"):
                target = f"http://127.0.0.1:{port}/v1/blobs/{sha}"
                wrk(target, 1, {})
                out["runs"].append({"server": "nginx", "workers": workers, **wrk(target, seconds, {})})
        out["fill"] = fill_10k(url)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with process([EXE, "serve", "--cache", url, "--port", str(port)], base + "/healthz") as proc:
            out["select"] = select_latency(base, select_seconds, proc.pid)
        by = {(r["server"], r["workers"]): r for r in out["runs"]}
        out["ratios"] = {}
        for (server, w), r in by.items():
            if server.startswith("rocke"):
                out["ratios"][f"{server} / bare FastAPI, {w} worker(s)"] = round(r["rps"] / by[("bare FastAPI", w)]["rps"], 3)
                out["ratios"][f"{server} / nginx, {w} worker(s)"] = round(r["rps"] / by[("nginx", w)]["rps"], 3)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=5, help="wrk duration per server (default 5)")
    ap.add_argument("--select-seconds", type=float, default=10.0)
    ap.add_argument("--select-only", action="store_true", help="only the POST /v1/select part (no wrk, no nginx)")
    ap.add_argument("--json", action="store_true", help="one JSON document (with wrk's raw output)")
    a = ap.parse_args()
    t = time.perf_counter()
    res = run(a.seconds, a.select_seconds, a.select_only)
    res["wall_s"] = round(time.perf_counter() - t, 1)
    res["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if a.json:
        print(json.dumps(res, indent=2))
        return
    print(f"hot blob {res['hot_sha256'][:12]}: {res['hot_size']} bytes raw, {res['hot_stored_size']} stored (zstd); "
          f"build {res['build_s']} s ({res['kernels']} kernels {res['sizes']}); {res['host_cores']} cores; "
          f"wrk -t2 -c{CONNECTIONS} -d{res['seconds']}s; uvicorn {res['uvicorn']}")
    print(f"{'server':<20} {'workers':>7} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8}")
    for r in res["runs"]:
        print(f"{r['server']:<20} {r['workers']:>7} {r['rps']:>10.0f} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['non_2xx']:>8}")
    for k, v in res["ratios"].items():
        print(f"  {k}: {v}")
    f, s = res["fill"], res["select"]
    print(f"select over {f['artifacts']} artifacts (filled {f['put']} in {f['fill_s']} s): p50 {s['p50_ms']} ms, "
          f"p99 {s['p99_ms']} ms over {s['requests']} sequential requests; {f['current_generation']} in the current "
          f"generation "
          f"({s['accepted']} accepted, {s['rejected']} rejected, {s['bytes']} bytes); first request {s['first_ms']} ms; "
          f"CPU per request: server {s['server_cpu_ms']} ms, client {s['client_cpu_ms']} ms")
    print(f"wall {res['wall_s']} s; load average at the end {res['loadavg_end']}")
    print("\n--- raw wrk output ---")
    for r in res["runs"]:
        print(f"## {r['server']}, {r['workers']} worker(s)\n{r['raw']}")


if __name__ == "__main__":
    main()
