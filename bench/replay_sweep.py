"""Selection quality of the hardware model on a sweep of bench/gemm_async_h200.py: every kernel of
the sweep that the sm_90 gemm table serves (f16 -> f16, llvm22) is a candidate, its screen time
(held_ms, the sweep's --held) its measured time, and the time model ranks them as a store's
candidates are ranked (variants/selection.rank, resources from a local compile of each spec:
aot/codeobject.py validate, the same record the builder stores).

    sweep.json[.gz] ──> per problem: table kernels timed ──> rank(model) first choice
        ──> quality = best measured / the first choice's measured time; which pipeline won

    .venv/bin/python bench/replay_sweep.py bench/results/bench-raw/h100-run24/sweep.json.gz [--model hardware]
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone

from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.compiler import compile_llvmlite
from rocke_aot.aot.lower import lower
from rocke_aot.candidates import Candidate, Resources
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank


def resources(spec, target: Target) -> Resources:
    k = lower("gemm", spec, target.id, "llvm22")
    info = validate(compile_llvmlite(sys.executable, k.ir, target).code_object, target, kernel=k.kernel_name)
    return Resources.from_code_object(info.as_dict(), target.info, block_size=k.block_size,
                                      dynamic_lds=k.dynamic_lds_bytes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep")
    ap.add_argument("--model", default="hardware")
    args = ap.parse_args()
    raw = open(args.sweep, "rb").read()
    doc = json.loads(gzip.decompress(raw) if args.sweep.endswith(".gz") else raw)
    target = Target.parse("sm_90")
    specs = {s.kernel_name: s for s in table.enumerate_specs("gemm", "sm_90", "llvm22")
             if s.in_dtype == "f16" and s.out_dtype == "f16"}
    timed = {k.split(":", 1)[1] for e in doc["problems"].values() for k in e["screen"]}
    names = sorted(timed & set(specs))
    with ThreadPoolExecutor(8) as ex:
        res = dict(zip(names, ex.map(lambda n: resources(specs[n], target), names)))
    at = datetime(2026, 12, 5, tzinfo=timezone.utc)
    entry = get_family("gemm")
    qs = []
    print(f"{len(names)} table kernels timed ({sum(specs[n].wgmma for n in names)} wgmma); model {args.model}")
    for prob, e in doc["problems"].items():
        times = {k.split(":", 1)[1]: v for k, v in e["screen"].items() if k.split(":", 1)[1] in res}
        cands = [Candidate(n, n, "gemm", specs[n].to_dict(), "sm_90", "llvm22", "default", "g", True, res[n], at)
                 for n in sorted(times)]
        m, n, k = (int(x) for x in prob.split("x"))
        problem = entry.problem_from({"m": m, "n": n, "k": k, "dtype": "f16"})
        first = rank(cands, problem, target, model=args.model).best.key
        fastest = min(times, key=times.get)
        q = times[fastest] / times[first]
        qs.append(q)
        print(f"{prob:<18} quality {q:.3f}  first {first} {times[first]:.4f} ms  best {fastest} {times[fastest]:.4f} ms")
    print(f"median {statistics.median(qs):.3f}  min {min(qs):.3f}  below 0.7: {sum(q < 0.7 for q in qs)} of {len(qs)}")


if __name__ == "__main__":
    main()
