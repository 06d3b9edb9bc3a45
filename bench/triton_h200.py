"""Qualification of prebuilt Triton kernels on a GPU host: compile nothing, match torch, start sooner.

Run on the GPU host (its own Triton and torch: on the H200, python3 with triton 3.6.0), from
the repository root, after a CPU-only build filled CACHE (bench/triton_h200_prepare.sh):

    python3 bench/triton_h200.py --cache .state/triton-h200/cache.sqlite --out $OUT

    1. check   this host's Triton against the build's: version, sha256 of triton_key()
               (Triton's own hash of its compiler, backends, language and libtriton: equal, or
               every key differs and the host compiles everything: reported as the cause)
    2. serve   `rocke-aot serve` on loopback over a copy of CACHE, with a publish token
    3. cold    a fresh process (empty TRITON_CACHE_DIR, no remote cache): the program below,
               Triton compiles what it launches (the JIT); time from process start to the
               first result, and Triton's compile count (knobs.compilation.listener)
    4. warm    a fresh process (empty TRITON_CACHE_DIR) with the remote cache:
               TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager,
               TRITON_REMOTE_CACHE_BACKEND=rocke_aot.client.triton_cache:Backend; expected
               compiles: 0; the backend's events (hits, misses and why)
    5. again   warm once more, a fresh process again (the service answers the same)
    the program: the autotuned matmul (rocke_aot/kernels/triton_matmul.py, 6 configs, key
    M, N, K) on three shapes and the row softmax on two, every result against torch
    (relative error of the fp16 result vs an fp32 torch product / torch.softmax)
    6. bench   `rocke-aot bench --run-from-cache` of triton_matmul and the native gemm (built
               here for sm_90, path mma, into the same cache) on bench/problems/triton-h200.json,
               fetched from the server, verified, timed beside torch.matmul

Writes $OUT/triton-h200.json (everything) and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MATMUL_SHAPES = ((4096, 4096, 4096), (2048, 8192, 1024), (1000, 1000, 1000))
SOFTMAX_SHAPES = ((4096, 4096), (1024, 1000))


# ---------------------------------------------------------------- the host's program (a child)

def child(out_path: str) -> None:
    t0 = float(os.environ["ROCKE_T0"])
    import torch
    import triton
    from triton import knobs

    counts = {"compiled": 0, "cache_hit": 0}

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        counts["cache_hit" if cache_hit else "compiled"] += 1

    knobs.compilation.listener = listener
    from rocke_aot.kernels.triton_matmul import autotuned, matmul
    from rocke_aot.kernels.triton_softmax import softmax

    kernel = autotuned("cuda")
    torch.manual_seed(0)
    results, first = [], None
    for m, n, k in MATMUL_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = matmul(a, b, kernel)
        torch.cuda.synchronize()
        if first is None:
            first = time.time() - t0
        ref = a.float() @ b.float()
        err = ((c.float() - ref).norm() / ref.norm()).item()
        results.append({"kernel": "matmul", "shape": [m, n, k], "rel_err": err, "ok": err < 1e-2,
                        "best_config": str(kernel.best_config)})
    for rows, cols in SOFTMAX_SHAPES:
        x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
        y = softmax(x)
        torch.cuda.synchronize()
        ref = torch.softmax(x.float(), dim=1)
        err = ((y.float() - ref).norm() / ref.norm()).item()
        results.append({"kernel": "softmax", "shape": [rows, cols], "rel_err": err, "ok": err < 1e-2})
    total = time.time() - t0
    events = {}
    try:
        from rocke_aot.client import triton_cache

        events = triton_cache.events()
    except ImportError:
        pass
    Path(out_path).write_text(json.dumps({"first_result_s": first, "total_s": total, **counts, "events": events,
                                          "results": results, "triton": triton.__version__,
                                          "device": torch.cuda.get_device_name()}))


def run_child(name: str, env: dict, out_dir: Path) -> dict:
    out = out_dir / f"{name}.json"
    e = {**env, "ROCKE_T0": repr(time.time())}
    proc = subprocess.run([sys.executable, __file__, "--child", str(out)], env=e, capture_output=True, text=True,
                          timeout=600)
    (out_dir / f"{name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {proc.stderr[-2000:]}"}
    return json.loads(out.read_text())


# ---------------------------------------------------------------- the driver

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ra(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocke_aot.cli", *args], capture_output=True, text=True, **kw)


def host_triton() -> dict:
    import hashlib

    import triton
    from triton.runtime.cache import triton_key

    return {"triton_version": triton.__version__, "triton_key_sha256": hashlib.sha256(triton_key().encode()).hexdigest()}


def built_triton(cache: str) -> list[dict]:
    import sqlite3

    rows = sqlite3.connect(f"file:{cache}?mode=ro", uri=True).execute(
        "SELECT DISTINCT toolchain_json FROM artifacts WHERE family LIKE 'triton_%' AND status = 'ok'").fetchall()
    return [json.loads(r[0]) for r in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", help="the SQLite cache a CPU-only build filled (required)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/triton-h200"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--no-bench", action="store_true", help="skip step 6")
    args = ap.parse_args()
    if args.child:  # one host process of step 3 (cold, warm, warm_again), run by the parent
        child(args.child)
        return 0
    if not args.cache:
        ap.error("the following arguments are required: --cache")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="triton-h200-"))
    report: dict = {"host": host_triton(), "built_with": built_triton(args.cache)}
    report["same_triton"] = any(t.get("triton_key_sha256") == report["host"]["triton_key_sha256"]
                                for t in report["built_with"])
    cache = work / "cache.sqlite"
    shutil.copy(args.cache, cache)
    token = work / "token"
    token.write_text("h200-qualification\n")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env0 = {k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "ROCKE_AOT_"))}
    env0["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    serve = subprocess.Popen([sys.executable, "-m", "rocke_aot.cli", "serve", "--cache", str(cache), "--host",
                              "127.0.0.1", "--port", str(port), "--token-file", str(token)],
                             stdout=open(out / "serve.log", "w"), stderr=subprocess.STDOUT, env=env0)
    try:
        import urllib.request

        for _ in range(150):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2)
                break
            except OSError:
                time.sleep(0.2)
        remote = {**env0, "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
                  "TRITON_REMOTE_CACHE_BACKEND": "rocke_aot.client.triton_cache:Backend",
                  "ROCKE_AOT_SERVER": base, "ROCKE_AOT_INSECURE": "1"}

        def fresh(name: str, env: dict) -> dict:
            d = work / name
            return run_child(name, {**env, "TRITON_CACHE_DIR": str(d / "triton"), "TRITON_HOME": str(d / "home"),
                                    "ROCKE_AOT_CLIENT_HOME": str(d / "client")}, out)

        report["warm"] = fresh("warm", remote)
        report["cold"] = fresh("cold", env0)
        report["warm_again"] = fresh("warm_again", remote)
        if not args.no_bench:
            report["bench"] = bench(base, cache, out)
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    (out / "triton-h200.json").write_text(json.dumps(report, indent=1))
    table(report)
    return 0


def bench(base: str, cache: Path, out: Path) -> dict:
    """Step 6: the native gemm built here (sm_90, mma path) beside the prebuilt triton_matmul."""
    res: dict = {}
    t = time.time()
    b = ra("build", "--arch", "sm_90", "--lane", "llvm22", "--family", "gemm", "--where", "path=mma",
           "--where", "in_dtype=f16", "--where", "out_dtype=f16", "--cache", str(cache), "-j", "16", "--json")
    res["native_build_s"] = round(time.time() - t, 1)
    (out / "native-build.log").write_text(b.stdout[-20000:] + b.stderr[-20000:])
    problems = REPO / "bench" / "problems" / "triton-h200.json"
    for fam in ("triton_matmul", "gemm"):
        r = ra("bench", "--run-from-cache", "--arch", "sm_90", "--family", fam, "--problems", str(problems),
               "--server", base, "--insecure", "--local", str(cache.parent / f"client-{fam}"), "--lane", "llvm22",
               "--candidates", "top:3", "--verify", "--reps", "10", "--out", str(out / f"bench-{fam}.json"), "--json")
        (out / f"bench-{fam}.log").write_text(r.stdout[-20000:] + r.stderr[-20000:])
        try:
            res[fam] = json.loads((out / f"bench-{fam}.json").read_text())
        except (OSError, ValueError):
            res[fam] = {"error": f"exit {r.returncode}: {r.stderr[-1500:]}"}
    return res


def table(r: dict) -> None:
    print(f"host Triton {r['host']['triton_version']} key {r['host']['triton_key_sha256'][:16]}; built with "
          f"{[(t.get('triton_version'), t.get('triton_key_sha256', '')[:16]) for t in r['built_with']]}; "
          f"same Triton: {r['same_triton']}")
    print(f"{'run':<11} {'compiles':>8} {'hits':>5} {'first result s':>15} {'total s':>8} {'all ok':>6}  events")
    for name in ("cold", "warm", "warm_again"):
        x = r.get(name, {})
        if "error" in x:
            print(f"{name:<11} ERROR {x['error'][:300]}")
            continue
        ok = all(t["ok"] for t in x.get("results", []))
        print(f"{name:<11} {x.get('compiled', '?'):>8} {x.get('cache_hit', '?'):>5} {x.get('first_result_s', 0):>15.2f} "
              f"{x.get('total_s', 0):>8.2f} {str(ok):>6}  {x.get('events')}")
    for x in r.get("warm", {}).get("results", []):
        print(f"  {x['kernel']:<8} {str(x['shape']):<20} rel_err {x['rel_err']:.2e} {x.get('best_config', '')}")
    for fam, rep in (r.get("bench") or {}).items():
        if not isinstance(rep, dict) or "summary" not in rep:
            print(f"bench {fam}: {rep if not isinstance(rep, dict) else rep.get('error', rep)}"[:400])
            continue
        print(f"bench {fam}: {json.dumps(rep['summary'])[:600]}")
        for p in rep.get("problems", [])[:8]:
            runs = [x for x in p.get("results", []) if x.get("median_ms")]
            best = min(runs, key=lambda x: x["median_ms"]) if runs else {}
            bad = [x.get("error") for x in p.get("results", []) if x.get("error")]
            print(f"  {fam} {p.get('problem')}: best {best.get('kernel')} {best.get('median_ms')} ms "
                  f"(verified {best.get('verified')}); {p.get('vendor')} {p.get('vendor_ms')} ms; "
                  f"best/vendor {p.get('best_over_vendor')}{'; errors ' + str(bad[:2]) if bad else ''}")


if __name__ == "__main__":
    sys.exit(main())
