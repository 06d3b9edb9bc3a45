"""Fetch N kernels three ways in one run: a verified static mirror on nginx, `rocke-aot serve`,
and bare nginx serving the same files with no verification at all.

    store: N synthetic code objects (SIZE bytes each, half random so zstd keeps ~half), one
           generation, signed (trust/release.py) and exported (trust/mirror.py) to a tree
    verified mirror   Fetcher([MirrorSource(nginx)], pinned key): cold = empty local store
                      (root + index + manifest, then per kernel: GET the frame, decompress,
                      sha256 + size against the signed entry, write blob + record by rename);
                      warm = a new Fetcher over the filled local store (root + index, local reads)
    rocke-aot serve   the same Fetcher over ServiceSource (serve --trust-dir), cold and warm
    bare nginx        httpx GET of every blobs/<sha>.zst into memory, nothing checked or kept
    each ROUNDS times, interleaved; per kernel latency -> p50, p99; kernels/s over the pass
    ratio: verified mirror (cold) kernels/s / bare nginx kernels/s (goal issue 23: >= 0.9)

    .venv/bin/python bench/bench_mirror.py [--kernels 300] [--size 32768] [--rounds 3] [--json]
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
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _nginx import nginx, served_dir  # noqa: E402  (the tests' unprivileged nginx)
from _service import serve_process  # noqa: E402

from rocke_aot.cache.keys import KeyInputs  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402
from rocke_aot.client import Fetcher, LocalStore, MirrorSource, ServiceSource  # noqa: E402
from rocke_aot.trust import keys, mirror  # noqa: E402
from rocke_aot.trust import metadata as md  # noqa: E402
from rocke_aot.trust.release import release  # noqa: E402


def fill(store: Store, n: int, size: int) -> list[str]:
    out = []
    for i in range(n):
        ins = KeyInputs("gfx942", "llvm22", "llvm22", "gemm", {"bench": i}, "bench-recipe",
                        {"kind": "llvmlite", "llvm": "22.1.0"}, {})
        body = os.urandom(size // 2) + bytes(size - size // 2)
        out.append(store.put(ins, body, ir_sha256="0" * 64, metadata={"launch": {"block": [256, 1, 1]}},
                             provenance={"bench": True}).key)
    return out


def timed(fn, items) -> dict:
    lat = []
    t0 = time.perf_counter()
    for it in items:
        t = time.perf_counter()
        fn(it)
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    lat.sort()
    return {"kernels_per_s": round(len(items) / wall, 1), "wall_s": round(wall, 4),
            "p50_ms": round(lat[len(lat) // 2] * 1e3, 3), "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3, 3)}


def run(n: int, size: int, rounds: int) -> dict:
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

        def add(name, r):
            results.setdefault(name, []).append(r)

        with nginx(www / "tree") as mbase, \
                serve_process(f"sqlite:///{work / 'c.sqlite'}", extra=["--trust-dir", str(work / "signed")]) as (_, sbase):
            for rnd in range(rounds):
                for label, src in (("verified mirror (nginx)", lambda: MirrorSource(mbase)),
                                   ("rocke-aot serve", lambda: ServiceSource(sbase))):
                    local = LocalStore(work / f"host-{rnd}-{label[:6]}")
                    with Fetcher([src()], local, root_key=pin) as f:
                        t = time.perf_counter()
                        f.accepted()
                        meta = time.perf_counter() - t
                        r = timed(f.get, ks)
                        r["metadata_s"] = round(meta, 4)
                        add(f"{label}, cold", r)
                    with Fetcher([src()], local, root_key=pin) as f:
                        t = time.perf_counter()
                        f.accepted()
                        meta = time.perf_counter() - t
                        r = timed(f.get, ks)
                        r["metadata_s"] = round(meta, 4)
                        add(f"{label}, warm", r)
                with httpx.Client() as c:
                    add("bare nginx (no verification)",
                        timed(lambda s: c.get(f"{mbase}/blobs/{s}.zst").raise_for_status().content, shas))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(www, ignore_errors=True)
    summary = {}
    for name, rs in results.items():
        summary[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    ratio = summary["verified mirror (nginx), cold"]["kernels_per_s"] / summary["bare nginx (no verification)"]["kernels_per_s"]
    return {"kernels": n, "size": size, "rounds": rounds, "cpus": os.cpu_count(), "median_of_rounds": summary,
            "raw": results, "ratio_verified_mirror_cold_over_bare_nginx": round(ratio, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=300)
    ap.add_argument("--size", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = run(a.kernels, a.size, a.rounds)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['kernels']} kernels x {out['size']} bytes, median of {out['rounds']} rounds, {out['cpus']} cpus")
    print(f"{'path':36} {'kernels/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'metadata s':>11}")
    for name, r in out["median_of_rounds"].items():
        print(f"{name:36} {r['kernels_per_s']:10.1f} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} "
              f"{r.get('metadata_s', float('nan')):11.4f}")
    ratio = out["ratio_verified_mirror_cold_over_bare_nginx"]
    print(f"verified mirror (cold) / bare nginx: {ratio:.3f} (goal >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'})")


if __name__ == "__main__":
    main()
