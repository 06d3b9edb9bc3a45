"""Score the model's cross-family picks on a stored H200 run of bench/across_h200.py, with today's
model, on the CPU: each problem's top candidate (from `bench/across_h200.py --no-run` over the same
prebuilt cache) looked up in that run's bench reports (the top 8 of each family were timed).

    bash bench/across_h200_prepare.sh      # the cache (.state/across-h200/cache.sqlite)
    .venv/bin/python bench/across_h200.py --cache .state/across-h200/cache.sqlite --out /tmp/acr --no-run
    .venv/bin/python bench/across_score.py /tmp/acr/across-h200.json docs/triton-raw/h200-2026-12-04-across

Prints per problem: the pick's family, estimate, measured time, the best measured of both families,
and selection quality (best / pick); "untimed" where the pick was not among the timed candidates.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def main(picks_file: str, run_dir: str) -> int:
    picks = json.loads(Path(picks_file).read_text())["model_picks"]
    times: dict[tuple, dict[str, tuple[float, str]]] = {}
    for fam in ("gemm", "triton_matmul"):
        doc = json.load(gzip.open(Path(run_dir) / f"bench-{fam}.json.gz"))
        for p in doc["problems"]:
            shape = (p["problem"]["m"], p["problem"]["n"], p["problem"]["k"])
            for r in p["results"]:
                if r.get("median_ms") is not None:
                    times.setdefault(shape, {})[r["key"]] = (r["median_ms"], fam)
    for mp in picks:
        pr = mp["problem"]
        shape = (pr["m"], pr["n"], pr["k"])
        best = min(t for t, _ in times[shape].values())
        got = times[shape].get(mp["top"]["key"])
        q = f"{best / got[0]:.3f}" if got else "untimed"
        ms = f"{got[0]:.4f}" if got else "-"
        print(f"{'x'.join(map(str, shape)):<18} {mp['top']['family']:<14} est {mp['top']['estimate_ms']:.4f} "
              f"measured {ms} best {best:.4f} quality {q}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
