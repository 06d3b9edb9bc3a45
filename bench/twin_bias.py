"""Does the order candidates are timed in bias a measured run? Twins were meant to answer it: two
gemm kernels of one tile that differ only in the output dtype (`_f16_f16_` / `_f16_f32_`), so the
time of the rank-0 one (timed first until run 12) over its twin should be 1.00 unless being timed
first costs something (docs/gpu.md, run 10).

Run 13 (2026-12-04) timed every problem's candidates together in interleaved rounds
(runner/runtime.py Runtime.time_many: no candidate is first after an idle GPU) and the rank-0
kernel still ran up to 1.30x its twin, always a 2-byte-output kernel over its f32 one, most on
short K: the twins are not the same speed. The pair epilogue filled half a 32-byte sector a
store for 2-byte outputs (docs/selection.md "Run 13"); the "2-byte/f32" column gives every
twin pair's ratio, whatever its rank, so the two effects can be told apart in any run.

    bench/results/bench-raw/h200-run*/{quality,holdout}-gemm.json[.gz]   (or --runs FILE ...)
        per problem, every pair of twins both timed: median_ms of the earlier-timed over the later
        ▼
    per file: the median ratio where the earlier one is the problem's first (rank 0), and where
    it is any other

    .venv/bin/python bench/twin_bias.py
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import statistics
from pathlib import Path

SWAPS = (("_f16_f16_", "_f16_f32_"), ("_f16_f32_", "_f16_f16_"), ("_bf16_bf16_", "_bf16_f32_"),
         ("_bf16_f32_", "_bf16_bf16_"))


def twin(kernel: str) -> str | None:
    return next((kernel.replace(a, b) for a, b in SWAPS if a in kernel), None)


def epilogue_ratios(doc: dict) -> list[float]:
    """2-byte-output time over its f32-output twin's, for every twin pair of every problem."""
    out = []
    for pr in doc["problems"]:
        times = {r["kernel"]: r["median_ms"] for r in pr["results"] if r.get("median_ms")}
        out += [t / times[k.replace("_f16_f16_", "_f16_f32_")] for k, t in times.items()
                if "_f16_f16_" in k and k.replace("_f16_f16_", "_f16_f32_") in times]
    return out


def ratios(doc: dict) -> tuple[list[float], list[float]]:
    first, other = [], []
    for pr in doc["problems"]:
        order = {r["kernel"]: i for i, r in enumerate(pr["results"])}  # the runner times in rank order
        times = {r["kernel"]: r["median_ms"] for r in pr["results"] if r.get("median_ms")}
        for k, t in times.items():
            tw = twin(k)
            if tw in times and order[k] < order[tw]:
                (first if order[k] == 0 else other).append(t / times[tw])
    return first, other


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="*", default=sorted(glob.glob("bench/results/bench-raw/h200-run*/*-gemm.json*")))
    a = ap.parse_args()
    for f in a.runs:
        p = Path(f)
        doc = json.loads((gzip.open(p) if p.suffix == ".gz" else open(p)).read())
        first, other = ratios(doc)
        if not first:
            continue
        rest = f"   other earlier/later {statistics.median(other):.3f} (n={len(other)})" if other else ""
        ep = epilogue_ratios(doc)
        print(f"{f:50s} rank-0/twin median {statistics.median(first):.3f} max {max(first):.3f} "
              f"(n={len(first)}){rest}   2-byte/f32 median {statistics.median(ep):.3f} max {max(ep):.3f}")


if __name__ == "__main__":
    main()
