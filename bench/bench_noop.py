"""The no-op replan rate alone, to compare two trees in one sitting (A/B under the same load).

Plans the whole grid of one arch (every family, every lane with a toolchain), puts one
placeholder code object under every key, then replans it ``--repeat`` times per round with every
key present (as bench_build.py's no-op step) and prints specs/s per round; last, the time to hash
the grid's plan keys and look them all up in one ``Store.lookup_many``.

Target (a ratio within the run; tests/test_variants.py had it as an absolute 50,000 specs/s):
    enumerate_over_noop_replan   the time to enumerate every family's grid of the arch on every
                                 lane (variants.table.enumerate_specs, the cached enumeration a
                                 no-op rebuild repeats) / the time of one no-op replan of the
                                 same grid: at most ENUMERATE_SHARE (enumeration is not what a
                                 no-op rebuild spends its time on). Exit 1 when missed. The tree measured is the
one on PYTHONPATH, so the same file runs against any checkout:

    for t in /path/before /path/after; do PYTHONPATH=$t .venv/bin/python bench/bench_noop.py; done
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

ENUMERATE_SHARE = 0.1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="gfx942")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()

    import rocke_aot
    from rocke_aot.aot.builder import make_plan
    from rocke_aot.aot.toolchains import detect_all
    from rocke_aot.cache.keys import artifact_key
    from rocke_aot.cache.store import Store
    from rocke_aot.targets import Target
    from rocke_aot.variants import table

    target, tcs = Target.parse(a.arch), detect_all()
    with tempfile.TemporaryDirectory() as d, Store.open(f"sqlite:///{d}/noop.sqlite") as store:
        full = make_plan(arches=[target], families=None, lanes=[], toolchains=tcs, store=store)
        for job in full.to_build:
            store.put(job.inputs, b"\x7fELF placeholder", ir_sha256="0" * 64, metadata={}, provenance={})
        rates = []
        for _ in range(a.rounds):
            planned, t0 = 0, time.perf_counter()
            for _ in range(a.repeat):
                p = make_plan(arches=[target], families=None, lanes=[], toolchains=tcs, store=store)
                assert not p.to_build
                planned += p.planned
            rates.append(round(planned / (time.perf_counter() - t0)))
        t0 = time.perf_counter()
        for _ in range(20):
            store.lookup_many([artifact_key(j.inputs) for j in full.to_build])
        lookup_ms = (time.perf_counter() - t0) / 20 * 1e3
        served = sorted({(j.family, j.lane.name) for j in full.to_build})  # the (family, lane) pairs planned
        t0, enumerated = time.perf_counter(), 0
        for _ in range(a.repeat):
            for fam, lane in served:
                enumerated += sum(1 for _ in table.enumerate_specs(fam, a.arch, lane))
        enum_s = (time.perf_counter() - t0) / a.repeat
    replan_s = full.planned / max(rates)  # the fastest round's no-op replan of the grid
    share = enum_s / replan_s
    print(json.dumps({"tree": rocke_aot.__file__, "grid": full.planned, "noop_specs_per_s": rates,
                      "keys_and_lookup_many_ms": round(lookup_ms, 1),
                      "enumerated_per_round": enumerated // a.repeat, "enumerate_s": round(enum_s, 4),
                      "targets": {"enumerate_over_noop_replan": {"ratio": round(share, 4),
                                                                "target": f"<= {ENUMERATE_SHARE:g}",
                                                                "met": share <= ENUMERATE_SHARE}}}))
    if share > ENUMERATE_SHARE:
        sys.exit(1)


if __name__ == "__main__":
    main()
