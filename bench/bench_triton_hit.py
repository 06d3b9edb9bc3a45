"""A Triton remote-cache hit through the project's backend against Triton compiling the same kernel (CPU).

    PYTHONPATH=$PWD .venv/bin/python bench/bench_triton_hit.py --rounds 5 --work /tmp/bench-triton-hit \
        --out bench/results/triton-raw/<date>-hit-vs-compile.txt

Issue 39: "A Triton remote-cache hit on the main job's store costs <= 0.25x Triton's own compile of
the same kernel (CPU)". One run:
  1. a store built by `rocke-aot build` (-j 1): triton_softmax (cols % 16 == 0: 6 BLOCKs) and
     triton_matmul (M, N, K % 16 == 0: 5 configs) for gfx942 by the llvm24 lane's Triton (3.9),
     plus --filler synthetic gemm kernels (bench/bench_fetch_process.py fill: real specs and
     contracts) so the signed metadata is a store of the main job's size (2,771 kernels for gfx1250,
     README); signed and exported as docs/trust.md shows (trust keygen, root, sign; mirror export)
     into a tree Debian's nginx serves
  2. the host: the Triton lane's own interpreter running bench/_triton_hit_host.py, which launches
     each kernel as the builder did (its compile request: the same stand-in driver, tensors and
     ints, so the same Triton cache key) and times each launch's `warmup` in the process (CPU,
     wall), Triton's compilation listener saying whether it compiled or hit:
       compile          no remote cache (fresh TRITON_CACHE_DIR): Triton compiles each kernel
       hit, cold host   TRITON_CACHE_MANAGER=RemoteCacheManager, TRITON_REMOTE_CACHE_BACKEND=
                        rocke_aot.client.triton_cache:Backend, ROCKE_AOT_MIRRORS=nginx,
                        ROCKE_AOT_ROOT_KEY=root.key.pub, an empty local store: the first lookup
                        loads the client and verifies the TUF metadata (root, timestamp,
                        snapshot, targets), each the entry's bin and blobs (fetch, verify,
                        Triton's cache layout)
       hit, warm host   the same with the local store a cold run filled (metadata verified
                        before: timestamp asked; entry and blobs read locally and hashed)
       Triton's file cache  no remote cache, TRITON_CACHE_DIR already filled (reference)
     in-process: one process per mode per round launches every kernel: per kernel, median over
     rounds; the first launch of a process carries the client's imports and the metadata refresh
     whole process: per --whole kernel, one process per mode (GNU time, CPU from wait4:
     bench/bench_tuf.py measure), against `import triton` alone
  Each round runs the modes in turn, order alternating; the ratios are hit / compile (goal <= 0.25).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(HERE))
from _nginx import nginx  # noqa: E402
from bench_fetch_process import fill, run, sign_and_export  # noqa: E402
from bench_tuf import append_report, measure  # noqa: E402

from rocke_aot.cache.keys import thaw  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402

HOST = HERE / "_triton_hit_host.py"
BASELINE = ("import sys, types; t = types.ModuleType('torch'); t.Tensor = type('Tensor', (), {}); "
            "sys.modules['torch'] = t; import triton")  # the host's imports, no kernel
BUILDS = (("triton_softmax", ("cols_class=div16",)),
          ("triton_matmul", ("m_class=div16", "n_class=div16", "k_class=div16")))


def build_store(work: Path, filler: int, say) -> Path:
    exe = str(Path(sys.executable).with_name("rocke-aot"))
    cache = work / "cache.sqlite"
    for family, where in BUILDS:
        t = time.perf_counter()
        run([exe, "build", "--cache", str(cache), "--arch", "gfx942", "--lane", "llvm24", "--family", family,
             *[x for w in where for x in ("--where", w)], "-j", "1", "--json"])
        say(f"rocke-aot build --arch gfx942 --lane llvm24 --family {family} {' '.join('--where ' + w for w in where)}"
            f" -j 1: {time.perf_counter() - t:.1f} s")
    if filler:
        with Store.open(f"sqlite:///{cache}") as store:
            fill(store, filler, 16384)
        say(f"filler: {filler} synthetic gemm kernels (bench_fetch_process.fill)")
    return cache


def payloads(cache: Path) -> list[dict]:
    """The builder's compile request of every Triton artifact (aot/families/triton.py request),
    with the Triton cache key the build recorded."""
    from rocke_aot.aot.families.triton import request
    from rocke_aot.targets import Target
    from rocke_aot.variants.families import get_family

    out = []
    with Store.open(f"sqlite:///{cache}", readonly=True) as store:
        for family, _ in BUILDS:
            for a in sorted(store.find(family=family), key=lambda a: a.key):
                spec = get_family(family).spec_from(thaw(a.inputs.spec))
                out.append({**request(spec, Target.parse(a.arch)), "family": family, "kernel": spec.kernel_name,
                            "triton_key": a.metadata["triton"]["key"]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--filler", type=int, default=2760, help="synthetic gemm kernels beside the Triton builds")
    ap.add_argument("--triton-python", default=str(Path.home() / ".cache/rocke-aot/lanes/llvm24/bin/python"),
                    help="the Triton lane's interpreter (this Python's version: the client's packages are this venv's)")
    ap.add_argument("--whole", default="0,-1", help="kernels (indexes) timed as whole processes too")
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-triton-hit-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    head = run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO).strip()
    say(f"# bench_triton_hit {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} tree={head} rounds={args.rounds} "
        f"filler={args.filler} python={sys.version.split()[0]} cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}")
    made = work / "made.json"
    if made.exists() and Path(json.loads(made.read_text())["tree"]).is_dir():
        tree = Path(json.loads(made.read_text())["tree"])
        say(f"reused the store and signed tree in {work}, {tree}")
    else:
        shutil.rmtree(work / "signed", ignore_errors=True)
        cache = build_store(work, args.filler, say)
        tree = sign_and_export(work, cache, say)
        (work / "payloads.json").write_text(json.dumps(payloads(cache)))
        made.write_text(json.dumps({"tree": str(tree)}))
    pays = json.loads((work / "payloads.json").read_text())
    say(f"{len(pays)} Triton kernels: " + ", ".join(p["kernel"] for p in pays))
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root"),
                "PYTHONPATH": f"{REPO}:{sysconfig.get_paths()['purelib']}",
                "PYTHONPYCACHEPREFIX": str(work / "pycache")}  # bytecode cached, as an installed wheel's is
    remote = {"TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
              "TRITON_REMOTE_CACHE_BACKEND": "rocke_aot.client.triton_cache:Backend",
              "ROCKE_AOT_ROOT_KEY": str(work / "root.key.pub")}

    def env(name: str, *, url: str, client: Path | None = None, triton_dir: Path | None = None) -> dict:
        t = triton_dir or work / f"triton-{name}"
        if triton_dir is None:
            shutil.rmtree(t, ignore_errors=True)
        e = {**base_env, "TRITON_HOME": str(t), "TRITON_CACHE_DIR": str(t / "cache")}
        if client is not None:
            e.update(remote, ROCKE_AOT_MIRRORS=url, ROCKE_AOT_CLIENT_HOME=str(client))
        return e

    def host(e: dict, *idx: int) -> tuple[dict, float, float]:
        cpu, wall, _, out = measure([args.triton_python, str(HOST), str(work / "payloads.json"),
                                     *map(str, idx)], e)
        return json.loads(out.strip().splitlines()[-1]), cpu, wall

    n = len(pays)
    whole = sorted({int(x) % n for x in args.whole.split(",") if x.strip()})
    inproc: dict[str, list[list[dict]]] = {}
    procs: dict[str, list[tuple[float, float]]] = {}
    with nginx(tree) as url:
        warm_client = work / "client-warm"
        shutil.rmtree(warm_client, ignore_errors=True)
        first, _, _ = host(env("prime", url=url, client=warm_client))  # fills the warm host's store
        if any(k["compiled"] for k in first["kernels"]):
            raise SystemExit(f"a prebuilt kernel was compiled on a cold host: {first}")
        for k, p in zip(first["kernels"], pays, strict=True):
            if k["key"] != p["triton_key"]:
                raise SystemExit(f"{p['kernel']}: the host's Triton key {k['key']} is not the build's {p['triton_key']}")
        filecache = work / "triton-filecache"
        shutil.rmtree(filecache, ignore_errors=True)
        host(env("fc", url=url, triton_dir=filecache))  # Triton's own file cache, filled
        for r in range(args.rounds):
            def modes():
                cold = work / "client-cold"
                shutil.rmtree(cold, ignore_errors=True)
                return {"compile (Triton, no cache)": env("compile", url=url),
                        "hit, cold host (empty local store)": env("cold", url=url, client=cold),
                        "hit, warm host (local store filled)": env("warm", url=url, client=warm_client),
                        "Triton's own file cache (reference)": env("fc", url=url, triton_dir=filecache)}
            order = list(modes())
            if r % 2:
                order.reverse()
            for name in order:
                doc, cpu, wall = host(modes()[name])
                want_hit = not name.startswith("compile")
                for k in doc["kernels"]:
                    if bool(k["compiled"]) == want_hit or k["cache_hit"] != int(want_hit):
                        raise SystemExit(f"{name}: kernel {k['index']} compiled={k['compiled']} "
                                         f"cache_hit={k['cache_hit']}; events {doc['events']}")
                inproc.setdefault(name, []).append(doc["kernels"])
                procs.setdefault(f"{name}: every kernel in one process", []).append((cpu, wall))
            for i in whole:
                names = ["compile (Triton, no cache)", "hit, cold host (empty local store)"]
                for name in (names if r % 2 == 0 else names[::-1]):
                    _, cpu, wall = host(modes()[name], i)
                    procs.setdefault(f"kernel {i} ({pays[i]['kernel']}): {name}", []).append((cpu, wall))
            cpu, wall = measure([args.triton_python, "-c", BASELINE], base_env)[:2]
            procs.setdefault("baseline: import triton (no kernel)", []).append((cpu, wall))
    say(f"triton {first['triton']} ({args.triton_python}); nginx {url}; every launch's Triton key equals the build's")
    say("")
    say(f"In-process, each launch's `warmup` (CPU ms, median of {args.rounds}; the first launch of a process "
        "carries the client's imports and the metadata refresh):")
    names = list(inproc)
    say("| kernel | " + " | ".join(names) + " | hit cold / compile | hit warm / compile |")
    say("| --- |" + " --- |" * (len(names) + 2))
    med = {name: [statistics.median(run_[j]["cpu_s"] for run_ in inproc[name]) * 1e3 for j in range(n)] for name in names}
    for j, p in enumerate(pays):
        c = med["compile (Triton, no cache)"][j]
        say(f"| {j} {p['kernel']} | " + " | ".join(f"{med[nm][j]:.1f}" for nm in names)
            + f" | {med['hit, cold host (empty local store)'][j] / c:.3f} | "
              f"{med['hit, warm host (local store filled)'][j] / c:.3f} |")
    tot = {nm: statistics.median(sum(k["cpu_s"] for k in run_) for run_ in inproc[nm]) * 1e3 for nm in names}
    c = tot["compile (Triton, no cache)"]
    say(f"| all {n} launches | " + " | ".join(f"{tot[nm]:.1f}" for nm in names)
        + f" | {tot['hit, cold host (empty local store)'] / c:.3f} | {tot['hit, warm host (local store filled)'] / c:.3f} |")
    rest = {nm: statistics.median(sum(k["cpu_s"] for k in run_[1:]) / (n - 1) for run_ in inproc[nm]) * 1e3
            for nm in names}
    say("| per launch after the first | " + " | ".join(f"{rest[nm]:.1f}" for nm in names)
        + f" | {rest['hit, cold host (empty local store)'] / rest['compile (Triton, no cache)']:.3f} | "
          f"{rest['hit, warm host (local store filled)'] / rest['compile (Triton, no cache)']:.3f} |")
    say("")
    say(f"Whole processes (median of {args.rounds}):")
    say("| process | CPU ms | wall ms |")
    say("| --- | --- | --- |")
    for name, vals in procs.items():
        say(f"| {name} | {statistics.median(v[0] for v in vals) * 1e3:.1f} | "
            f"{statistics.median(v[1] for v in vals) * 1e3:.1f} |")
    for i in whole:
        pre = f"kernel {i} ({pays[i]['kernel']}): "
        h = statistics.median(v[0] for v in procs[pre + "hit, cold host (empty local store)"])
        cc = statistics.median(v[0] for v in procs[pre + "compile (Triton, no cache)"])
        b = statistics.median(v[0] for v in procs["baseline: import triton (no kernel)"])
        say(f"{pre}whole-process CPU hit / compile {h / cc:.3f}; over `import triton`: {(h - b) / (cc - b):.3f}")
    if args.out:
        append_report(args.out, lines)


if __name__ == "__main__":
    main()
