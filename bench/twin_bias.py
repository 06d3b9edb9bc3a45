"""Does the order candidates are timed in bias a measured run? Twins answer it: two gemm kernels
of one tile that differ only in the output dtype (`_f16_f16_` / `_f16_f32_`: one cvt per pair of
outputs apart in the PTX) run at the same speed, so the time of the first-timed one over its twin
should be 1.00 unless being timed first costs something (docs/gpu.md, run 10).

    docs/bench-raw/h200-run*/{quality,holdout}-gemm.json[.gz]   (or --runs FILE ...)
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
    ap.add_argument("--runs", nargs="*", default=sorted(glob.glob("docs/bench-raw/h200-run*/*-gemm.json*")))
    a = ap.parse_args()
    for f in a.runs:
        p = Path(f)
        doc = json.loads((gzip.open(p) if p.suffix == ".gz" else open(p)).read())
        first, other = ratios(doc)
        if not first:
            continue
        rest = f"   other earlier/later {statistics.median(other):.3f} (n={len(other)})" if other else ""
        print(f"{f:50s} first-timed/twin median {statistics.median(first):.3f} max {max(first):.3f} "
              f"(n={len(first)}){rest}")


if __name__ == "__main__":
    main()
