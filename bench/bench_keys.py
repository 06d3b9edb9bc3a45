"""Keys and claims, measured on real compiles (whole-run figures; no timing asserted anywhere).

    1. one builder (--jobs 2) builds GRID into a fresh store: wall time, compiles
    2. no-op rebuild: wall time, compiles (0 expected)
    3. the recipe digest moved, no IR did (a comment or ranking edit): every plan misses,
       is lowered again, finds its code object -> wall time, compiles (0 expected), reused
    4. the lowering moved the IR of the block_n == 64 specs only (another digest): compiles
       expected == how many of GRID have block_n == 64, every other plan reused
    5. two builder processes (--jobs 1 each: 2 cores in all) build GRID into another fresh
       store at once: wall time until both end, compiles in all (each key once expected),
       and the ratio to run 1

    .venv/bin/python bench/bench_keys.py [--where path=fma --where block_m=64 ...] > bench/results/bench-raw/keys.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WHERE = ["path=fma", "block_m=64", "waves=4"]

_ONE = """
import json, sys
from rocke_aot.aot import builder
from rocke_aot.aot.builder import plan as plan_mod
from rocke_aot.aot.builder.plan import parse_where
from rocke_aot.aot.toolchains import detect_all
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
url, jobs, digest, where = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
if digest != "-":  # the plan key's recipe digest (aot/builder/plan.py reads it per family)
    plan_mod.family_digest = lambda name: digest
if len(sys.argv) > 5:  # a lowering change that moves the IR of the specs with block_n == N only
    import dataclasses, hashlib
    from rocke_aot.aot.builder import run as run_mod
    real, moved_n = run_mod.lower_one, int(sys.argv[5])
    def lower_one(job):
        k = real(job)
        if job.spec["block_n"] != moved_n:
            return k
        ir = k.ir + "\\n; the lowering moved\\n"
        return dataclasses.replace(k, ir=ir, ir_sha256=hashlib.sha256(ir.encode()).hexdigest())
    run_mod.lower_one = lower_one
with Store.open(url) as store:
    s = builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")], store=store,
                      toolchains=detect_all(), where=parse_where(where), jobs=jobs)
print(json.dumps({k: s[k] for k in ("planned", "to_build", "built", "reused", "built_by_others", "cached",
                                    "compiles", "seconds")}))
"""


def _start(url: str, jobs: int, digest: str, where: list[str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _ONE, url, str(jobs), digest, json.dumps(where), *extra],
                            stdout=subprocess.PIPE, text=True)


def _run(url: str, jobs: int, digest: str, where: list[str], *extra: str) -> dict:
    t = time.perf_counter()
    p = _start(url, jobs, digest, where, *extra)
    out = json.loads(p.communicate()[0])
    return {**out, "wall_s": round(time.perf_counter() - t, 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--where", action="append", default=None)
    a = ap.parse_args()
    where = a.where or WHERE
    d = Path(tempfile.mkdtemp())
    one = f"sqlite:///{d / 'one.sqlite'}"
    res = {"where": where, "first_build": _run(one, 2, "-", where)}
    res["noop_rebuild"] = _run(one, 2, "-", where)
    res["recipe_moved_no_ir_moved"] = _run(one, 2, "f" * 64, where)
    # the lowering changed (another digest) and moved the IR of the block_n == 64 specs only
    res["lowering_moved_block_n_64"] = _run(one, 2, "e" * 64, where, "64")
    two = f"sqlite:///{d / 'two.sqlite'}"
    t = time.perf_counter()
    procs = [_start(two, 1, "-", where) for _ in range(2)]
    outs = [json.loads(p.communicate()[0]) for p in procs]
    wall = time.perf_counter() - t
    res["two_builders"] = {"wall_s": round(wall, 2), "builders": outs,
                           "compiles_total": sum(o["compiles"] for o in outs),
                           "wall_ratio_to_one_builder": round(wall / res["first_build"]["wall_s"], 3)}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
