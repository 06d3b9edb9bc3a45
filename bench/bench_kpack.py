"""kpack vs the store vs LZMA (not a test): bytes per kernel, and the time to get one kernel.

    --cache URL  a store with real kernels (e.g. `rocke-aot build --arch gfx942 --family gemm --lane llvm22
                 --cache sqlite:///tmp/k.sqlite`); it is only read: its arch's kernels are copied into a
                 temporary store (bundle export/import), where the zstd dictionaries are trained
    sizes, per kernel (every kernel the store serves for --arch):
        raw                     the code object
        kpack                   the .kpack file (`rocke-aot export --kpack`: zstd level 3 per kernel, the
                                RFC0008 default, + the 4-byte frame size, + the TOC, all / kernels)
        store                   the store's zstd frames (level 15) after `train-dicts` (a dictionary per
                                (arch, family) where it pays; its bytes amortized over the kernels too)
        lzma-9                  Python's lzma at preset 9 per kernel (the stand-in for AOTriton's LZMA images)
        lzma-9 solid            all kernels as one LZMA stream (an image compressed whole)
    time, whole-run totals over --reps gets of a kernel (cycling through all), as ratios to the store:
        first: open + one kernel   kpack.read(file) + get;  DeviceWheelSource(dir) + blob (the client's
                                   reader, offsets from the manifest, no msgpack);  Store.open + get_blob
        warm: one kernel           on the archive / source / store opened once
    every get's bytes are checked against the store's sha256 once before timing

Run:  .venv/bin/python bench/bench_kpack.py --cache sqlite:///tmp/k.sqlite --arch gfx942 [--reps 300]
Raw output: bench/results/kpack-<UTC stamp>.json (every size and every timing); the table goes to
docs/kpack.md by hand. Timings on a shared 2-core machine are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import zstandard

from rocke_aot.cache import kpack
from rocke_aot.cache.store import Store
from rocke_aot.client.device_kernels import DEVICE_SCHEMA, DeviceWheelSource, frame_index
from rocke_aot.targets import Target

ROOT = Path(__file__).resolve().parent


def _sizes(store: Store, arts, raws: dict[str, bytes], kp: Path) -> dict:
    n = len(arts)
    raw_total = sum(len(r) for r in raws.values())
    shas = sorted({a.sha256 for a in arts})
    stored = {a.sha256: a.stored_size for a in arts}
    with store.engine.connect() as conn:
        dict_bytes = conn.exec_driver_sql("SELECT COALESCE(SUM(size), 0) FROM zstd_dicts").scalar()
    lz = [len(lzma.compress(raws[s], preset=9)) for s in shas]
    solid = len(lzma.compress(b"".join(raws[s] for s in shas), preset=9))
    z19 = [len(zstandard.ZstdCompressor(level=19).compress(raws[s])) for s in shas]
    per = {
        "raw": raw_total / n,
        "kpack": kp.stat().st_size / n,
        "store_frames": sum(stored[s] for s in shas) / n,
        "store_frames_plus_dicts": (sum(stored[s] for s in shas) + dict_bytes) / n,
        "lzma9_per_kernel": sum(lz) / n,
        "lzma9_solid": solid / n,
        "zstd19_per_kernel_no_dict": sum(z19) / n,
    }
    return {"kernels": n, "raw_bytes": raw_total, "dict_bytes": dict_bytes, "per_kernel": per,
            "of_raw": {k: v / per["raw"] for k, v in per.items()},
            "each": {"raw": [len(raws[s]) for s in shas], "store": [stored[s] for s in shas], "lzma9": lz,
                     "zstd19": z19}}


def _time(fn, reps: int) -> list[float]:
    out = []
    for i in range(reps):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", required=True)
    ap.add_argument("--arch", default="gfx942")
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--min-samples", type=int, default=32, help="train-dicts' --min-samples")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-kpack-"))
    try:
        with Store.open(args.cache, readonly=True) as src:
            src.export(tmp / "arch.bundle", arch=args.arch, failures=False)
        url = f"sqlite:///{tmp / 'store.sqlite'}"
        with Store.open(url) as store:
            store.import_(tmp / "arch.bundle")
            dicts = store.train_dictionaries(min_samples=args.min_samples)
            arts = kpack.served(store, args.arch)
            raws = {a.sha256: store.get_blob(a.sha256) for a in arts}
            kp, mp, doc, body = kpack.export(store, tmp / "out", Target.parse(args.arch))
            arts = store.find(arch=args.arch, served_only=True)  # stored_size after the dictionaries
            sizes = _sizes(store, arts, raws, kp)
        # a directory laid out as an installed device wheel (client/device_kernels.py)
        wheel_dir = tmp / "wheel"
        wheel_dir.mkdir()
        shutil.copy(kp, wheel_dir / kp.name)
        shutil.copy(mp, wheel_dir / mp.name)
        (wheel_dir / "device.json").write_text(json.dumps({"schema": DEVICE_SCHEMA, "arch": args.arch,
                                                           "manifest": mp.name, "kpack": kp.name,
                                                           "frames": frame_index(doc)}))
        entries = doc["entries"]
        picks = [entries[i % len(entries)] for i in range(args.reps)]
        ar = kpack.read(kp)
        for e in entries:  # correctness once, outside the timing
            assert hashlib.sha256(ar.get(e["toc_key"], e["arch"])).hexdigest() == e["sha256"]
            assert hashlib.sha256(DeviceWheelSource(wheel_dir).blob(e["sha256"], e["size"])).hexdigest() == e["sha256"]
        store_r = Store.open(url, readonly=True)
        src_w = DeviceWheelSource(wheel_dir)
        timings = {
            "kpack_first": _time(lambda i: kpack.read(kp).get(picks[i]["toc_key"], picks[i]["arch"]), args.reps),
            "wheel_first": _time(lambda i: DeviceWheelSource(wheel_dir).blob(picks[i]["sha256"], picks[i]["size"]),
                                 args.reps),
            "store_first": _time(lambda i: _store_first(url, picks[i]["sha256"]), args.reps),
            "kpack_warm": _time(lambda i: ar.get(picks[i]["toc_key"], picks[i]["arch"]), args.reps),
            "wheel_warm": _time(lambda i: src_w.blob(picks[i]["sha256"], picks[i]["size"]), args.reps),
            "store_warm": _time(lambda i: store_r.get_blob(picks[i]["sha256"]), args.reps),
        }
        store_r.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    totals = {k: sum(v) for k, v in timings.items()}
    ratios = {f"{k}/store_{k.split('_')[1]}": totals[k] / totals[f"store_{k.split('_')[1]}"]
              for k in totals if not k.startswith("store")}
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "arch": args.arch, "reps": args.reps,
        "host": {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count(),
                 "zstandard": zstandard.__version__},
        "dictionaries": dicts, "sizes": sizes,
        "time_total_s": totals, "time_median_us": {k: statistics.median(v) * 1e6 for k, v in timings.items()},
        "ratios_whole_run": ratios, "timings_s": timings,
    }
    out = Path(args.out) if args.out else ROOT / "results" / f"kpack-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    per, of = sizes["per_kernel"], sizes["of_raw"]
    print(f"{sizes['kernels']} kernels of {args.arch}; raw output: {out}")
    print("| format | bytes per kernel | of raw |\n| --- | ---: | ---: |")
    for k in per:
        print(f"| {k} | {per[k]:,.0f} | {of[k]:.1%} |")
    print("| get one kernel | total over reps (s) | median (us) | whole-run ratio to the store |\n| --- | ---: | ---: | ---: |")
    for k in timings:
        r = ratios.get(f"{k}/store_{k.split('_')[1]}")
        print(f"| {k} | {totals[k]:.4f} | {result['time_median_us'][k]:.1f} | {'1.00' if r is None else f'{r:.2f}'} |")
    return 0


def _store_first(url: str, sha: str) -> bytes:
    with Store.open(url, readonly=True) as s:
        return s.get_blob(sha)


if __name__ == "__main__":
    sys.exit(main())
