"""Fetch N kernels three ways in one run: a verified static mirror on nginx, `rocke-aot serve`,
and bare nginx serving the same files with no verification at all, each WORKERS at a time.

    store: N synthetic code objects (SIZE bytes each, half random so zstd keeps ~half, the gemm
           family's real launch contract), one generation, signed (trust/release.py) and
           exported (trust/mirror.py) to a tree
    verified mirror   Fetcher([MirrorSource(nginx)], pinned key): cold = empty local store
                      (root + index + manifest once, then per kernel: GET the frame, decompress,
                      sha256 + size against the signed entry, the signed inputs hashed to the
                      key, blob + record written by rename); warm = a new Fetcher over the
                      filled local store (root + index, local reads, each verified)
    rocke-aot serve   the same Fetcher over ServiceSource (serve --trust-dir), cold and warm
    bare nginx        GET of every blobs/<sha>.zst into memory, nothing checked or kept, twice:
                      through httpx.Client (.get().content) and through an httpcore connection
                      pool (the HTTP stack the verified client's Wire uses, client/wire.py)
    one harness for every path: WORKERS threads (the client's default, Fetcher.get_many's) over
    one connection pool (as a Source has); per call latency -> p50, p99;
    kernels/s over the pass; the client process's CPU time per kernel (all its threads; not
    nginx's or the service's: the figure a busy shared machine moves least), and once per round
    that CPU split by step of a verified cold fetch (HTTP GET, decode, key check, blob file); plus Fetcher.get_many itself (cold, its own pool) and, for
    reference, the verified mirror and bare nginx one kernel at a time
    each ROUNDS times, interleaved; medians of the rounds
    ratios: verified mirror (cold) kernels/s / bare nginx kernels/s, against each bare client
            (goal issue 23: >= 0.9 against "bare nginx serving the same files without
            verification"; the fair bare client is the one on the same HTTP stack, httpcore)

    .venv/bin/python bench/bench_mirror.py [--kernels 300] [--size 32768] [--rounds 3] [--workers 8] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpcore
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _nginx import nginx, served_dir  # noqa: E402  (the tests' unprivileged nginx)
from _service import serve_process  # noqa: E402

from rocke_aot.cache.keys import KeyInputs  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402
from rocke_aot.launch import LaunchContract  # noqa: E402
from rocke_aot.variants.families import get_family  # noqa: E402
from rocke_aot.client import Fetcher, LocalStore, MirrorSource, ServiceSource  # noqa: E402
from rocke_aot.client.fetch import DEFAULT_WORKERS  # noqa: E402
from rocke_aot.trust import keys, mirror  # noqa: E402
from rocke_aot.trust import metadata as md  # noqa: E402
from rocke_aot.trust.release import release  # noqa: E402


def fill(store: Store, n: int, size: int) -> list[str]:
    """N kernels with the gemm family's real launch contract (the record schema checks it)."""
    spec = get_family("gemm").spec_from({})
    launch = LaunchContract.build(spec.kernel_name, spec.launch_formulas(), (256, 1, 1)).as_dict()
    out = []
    for i in range(n):
        ins = KeyInputs("gfx942", "llvm22", "llvm22", "gemm", {"bench": i}, "bench-recipe",
                        {"kind": "llvmlite", "llvm": "22.1.0"}, {})
        body = os.urandom(size // 2) + bytes(size - size // 2)
        out.append(store.put(ins, body, ir_sha256="0" * 64, metadata={"launch": launch, "format": "hsaco"},
                             provenance={"bench": True}).key)
    return out


def timed(fn, items, workers: int) -> dict:
    """fn over items on a pool of ``workers`` threads (1: in turn, no pool): kernels/s over the
    whole pass, and each call's own latency (p50, p99). Every path runs through this one harness."""
    lat: list[float] = []

    def one(it):
        t = time.perf_counter()
        fn(it)
        lat.append(time.perf_counter() - t)

    c0, t0 = time.process_time(), time.perf_counter()
    if workers == 1:
        for it in items:
            one(it)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, items))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    lat.sort()
    return {"kernels_per_s": round(len(items) / wall, 1), "wall_s": round(wall, 4),
            "client_cpu_ms_per_kernel": round(cpu / len(items) * 1e3, 3),
            "p50_ms": round(lat[len(lat) // 2] * 1e3, 3), "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3, 3)}


def steps(fetcher: Fetcher, ks: list[str]) -> dict:
    """One cold pass, one kernel at a time, with the client CPU of each step of a verified
    fetch added up (process_time around the step's function; ms per kernel)."""
    from rocke_aot.client import local, sources

    spent: dict[str, float] = {}
    patched = []

    def wrap(owner, name, label):
        orig = getattr(owner, name)

        def timed_step(*a, **k):
            c = time.process_time()
            try:
                return orig(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - c

        patched.append((owner, name, orig))
        setattr(owner, name, timed_step)

    wrap(sources.Source, "get", "HTTP GET (httpcore)")
    wrap(sources, "_decode_frame", "zstd decode + sha256")
    wrap(local.Kernel, "from_record", "signed inputs -> key")
    wrap(local.LocalStore, "put_blob", "blob file (sha256 + write)")
    try:
        fetcher.accepted()
        c = time.process_time()
        for k in ks:
            fetcher.get(k)
        total = time.process_time() - c
    finally:
        for owner, name, orig in patched:
            setattr(owner, name, orig)
    out = {label: round(v / len(ks) * 1e3, 3) for label, v in spent.items()}
    out["total"] = round(total / len(ks) * 1e3, 3)
    return out


def run(n: int, size: int, rounds: int, workers: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="rocke-bench-mirror-"))
    www = served_dir()
    try:
        keys.generate(work / "root.key")
        keys.generate(work / "rel.key")
        rk, rel = keys.load_private(work / "root.key"), keys.load_private(work / "rel.key")
        root = md.sign(md.make_root(1, datetime.now(timezone.utc) + timedelta(days=1), [rk.public], [rel.public]), [rk])
        with Store.open(work / "c.sqlite") as store:
            ks = fill(store, n, size)
            release(store, work / "signed", root, rel, version=1)
            mirror.export(store, work / "signed", www / "tree")
            shas = [store.lookup_many([k])[k].sha256 for k in ks]
        pin = str(work / "root.key.pub")
        results: dict[str, list[dict]] = {}
        fresh = iter(range(1 << 30))

        def add(name, r):
            results.setdefault(name, []).append(r)

        def verified(label, src, w, suffix=""):
            local = LocalStore(work / f"host-{next(fresh)}")
            for state in ("cold", "warm"):
                with Fetcher([src()], local, root_key=pin) as f:
                    t = time.perf_counter()
                    f.accepted()
                    meta = time.perf_counter() - t
                    r = timed(f.get, ks, w)
                    r["metadata_s"] = round(meta, 4)
                    add(f"{label}, {state}{suffix}", r)

        def bare(base, w, suffix=""):
            with httpx.Client() as c:  # one connection pool, as a Source has
                add(f"bare nginx (no verification){suffix}",
                    timed(lambda s: c.get(f"{base}/blobs/{s}.zst").raise_for_status().content, shas, w))
            with httpcore.ConnectionPool() as pool:

                def get(s):
                    r = pool.request("GET", f"{base}/blobs/{s}.zst")
                    assert r.status == 200
                    return r.content

                add(f"bare nginx, httpcore (no verification){suffix}", timed(get, shas, w))

        with nginx(www / "tree") as mbase, \
                serve_process(f"sqlite:///{work / 'c.sqlite'}", extra=["--trust-dir", str(work / "signed")]) as (_, sbase):
            for _ in range(rounds):
                verified("verified mirror (nginx)", lambda: MirrorSource(mbase), workers)
                verified("rocke-aot serve", lambda: ServiceSource(sbase), workers)
                bare(mbase, workers)
                # the API itself: Fetcher.get_many (its own pool), cold, for throughput
                with Fetcher([MirrorSource(mbase)], LocalStore(work / f"host-{next(fresh)}"), root_key=pin) as f:
                    f.accepted()
                    t = time.perf_counter()
                    got = f.get_many(ks, workers=workers)
                    wall = time.perf_counter() - t
                    assert len(got) == n
                    add("verified mirror (nginx), cold, get_many", {"kernels_per_s": round(n / wall, 1),
                                                                    "wall_s": round(wall, 4)})
                with Fetcher([MirrorSource(mbase)], LocalStore(work / f"host-{next(fresh)}"), root_key=pin) as f:
                    add("client CPU per step, ms per kernel (verified mirror, cold, 1 worker)", steps(f, ks))
                if workers != 1:  # one at a time, both sides, for reference
                    verified("verified mirror (nginx)", lambda: MirrorSource(mbase), 1, ", 1 worker")
                    bare(mbase, 1, ", 1 worker")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(www, ignore_errors=True)
    summary = {}
    for name, rs in results.items():
        summary[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    bare_w = summary["bare nginx (no verification)"]["kernels_per_s"]
    bare_core = summary["bare nginx, httpcore (no verification)"]["kernels_per_s"]
    out = {"kernels": n, "size": size, "rounds": rounds, "workers": workers, "cpus": os.cpu_count(),
           "load_avg": os.getloadavg(), "median_of_rounds": summary, "raw": results,
           "ratio_verified_mirror_cold_over_bare_nginx":
               round(summary["verified mirror (nginx), cold"]["kernels_per_s"] / bare_w, 3),
           "ratio_verified_mirror_cold_over_bare_httpcore":
               round(summary["verified mirror (nginx), cold"]["kernels_per_s"] / bare_core, 3),
           "ratio_get_many_over_bare_nginx":
               round(summary["verified mirror (nginx), cold, get_many"]["kernels_per_s"] / bare_w, 3)}
    if workers != 1:
        out["ratio_one_worker"] = round(summary["verified mirror (nginx), cold, 1 worker"]["kernels_per_s"]
                                        / summary["bare nginx (no verification), 1 worker"]["kernels_per_s"], 3)
        out["ratio_one_worker_over_bare_httpcore"] = round(
            summary["verified mirror (nginx), cold, 1 worker"]["kernels_per_s"]
            / summary["bare nginx, httpcore (no verification), 1 worker"]["kernels_per_s"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=300)
    ap.add_argument("--size", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                    help="concurrent fetches, the same on every path (default: the client's, %(default)s)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = run(a.kernels, a.size, a.rounds, a.workers)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['kernels']} kernels x {out['size']} bytes, {out['workers']} workers on every path, median of "
          f"{out['rounds']} rounds, {out['cpus']} cpus, load average {out['load_avg'][0]:.1f}")
    print(f"{'path':48} {'kernels/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'metadata s':>11} {'client cpu ms':>14}")
    nan = float("nan")
    for name, r in out["median_of_rounds"].items():
        if "kernels_per_s" not in r:
            continue
        print(f"{name:48} {r['kernels_per_s']:10.1f} {r.get('p50_ms', nan):8.3f} {r.get('p99_ms', nan):8.3f} "
              f"{r.get('metadata_s', nan):11.4f} {r.get('client_cpu_ms_per_kernel', nan):14.3f}")
    ratio, core = out["ratio_verified_mirror_cold_over_bare_nginx"], out["ratio_verified_mirror_cold_over_bare_httpcore"]
    print(f"verified mirror (cold) / bare nginx, {out['workers']} workers each: {ratio:.3f} against bare httpx "
          f"(goal >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'}), {core:.3f} against bare httpcore "
          f"(goal >= 0.9: {'met' if core >= 0.9 else 'NOT met'}); get_many / bare httpx: "
          f"{out['ratio_get_many_over_bare_nginx']:.3f}")
    if "ratio_one_worker" in out:
        print(f"one worker each: {out['ratio_one_worker']:.3f} against bare httpx, "
              f"{out['ratio_one_worker_over_bare_httpcore']:.3f} against bare httpcore")
    for name, r in out["median_of_rounds"].items():
        if "kernels_per_s" not in r:
            print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
