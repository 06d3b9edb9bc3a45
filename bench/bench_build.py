"""Builder benchmarks: overhead against pure codegen + link, 1 -> 2 worker scaling, no-op rate.

All numbers are whole-run ratios measured in the same run (never timing assertions):

1. pure:     for every kernel of the grid, time only the toolchain's work, serially, in this
             process: O3 pipeline + object emission (llvmlite) + `ld.lld -shared`. Lowering is
             done beforehand and not counted. This is the floor a builder cannot beat.
2. build -j1 / -j2: wall time of real `build()` calls into fresh SQLite caches.
             overhead = wall(-j1) / sum(pure) - 1   (goal: <= 10%)
             scaling  = wall(-j1) / wall(-j2)        (goal: near 2 on 2 cores)
3. no-op:    plan + one bulk lookup of the WHOLE grid of one arch (every family, every lane
             with a toolchain), every key present in the store; rate = specs / second
             (goal: >= 50,000). Toolchain detection is done once before and not counted
             (it is per process, not per spec). The store is filled for this with one
             small placeholder code object under every key of the grid (a real compile of
             thousands of kernels would only slow the setup; the lookup reads no blobs).

    .venv/bin/python bench/bench_build.py --arch gfx942 --family gemm --where block_k=32 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from rocke_aot.lanes import get_lane


def pure_compile_seconds(kernels, target) -> float:
    import llvmlite.binding as llvm

    from rocke_aot.aot.compiler.lld import find_lld

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    lld = find_lld()
    total = 0.0
    with tempfile.TemporaryDirectory() as d:
        obj, out = os.path.join(d, "k.o"), os.path.join(d, "k.hsaco")
        for k in kernels:
            t0 = time.perf_counter()
            tm = llvm.Target.from_triple(target.triple).create_target_machine(
                cpu=target.processor, features=target.llvm_features, opt=3, reloc="pic")
            mod = llvm.parse_assembly(k.ir)
            mod.verify()
            pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
            pb.getModulePassManager().run(mod, pb)
            with open(obj, "wb") as f:
                f.write(tm.emit_object(mod))
            subprocess.run([lld, "-shared", obj, "-o", out], check=True, capture_output=True)
            total += time.perf_counter() - t0
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", default="gfx942")
    ap.add_argument("--family", default="gemm")
    ap.add_argument("--lane", default="llvm22")
    ap.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE",
                    help="restrict the compiled grid (the no-op measurement always uses the whole grid)")
    ap.add_argument("--noop-repeat", type=int, default=10, help="times the no-op grid is replanned")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from rocke_aot.aot.builder import build, make_plan
    from rocke_aot.aot.builder.plan import parse_where, where_for
    from rocke_aot.aot.lower import lower
    from rocke_aot.aot.toolchains import detect_all, toolchains_for_lane
    from rocke_aot.cache.store import Store
    from rocke_aot.targets import Target
    from rocke_aot.variants import table

    target = Target.parse(args.arch)
    tcs = detect_all()
    tc = toolchains_for_lane(get_lane(args.lane), tcs)[0]
    where = where_for(args.family, parse_where(args.where))  # typed as the builder types it
    specs = [s for s in table.enumerate_specs(args.family, target.processor, args.lane)
             if all(s.to_dict().get(k) == v for k, v in where.items())]
    kernels = [lower(args.family, s, target, args.lane) for s in specs]
    pure = pure_compile_seconds(kernels, target)

    results = {"arch": target.id, "family": args.family, "lane": args.lane, "kernels": len(kernels),
               "pure_codegen_link_s": round(pure, 3), "cpus": os.cpu_count()}
    walls = {}
    with tempfile.TemporaryDirectory() as d:
        for jobs in (1, 2):
            with Store.open(f"sqlite:///{d}/j{jobs}.sqlite") as store:
                t0 = time.perf_counter()
                s = build(arches=[target], families=[args.family], lanes=[args.lane], store=store,
                          toolchains=[tc], jobs=jobs, where=where)
                walls[jobs] = time.perf_counter() - t0
                assert s["built"] == len(kernels) and not s["failed"], s.data
        results["build_j1_s"] = round(walls[1], 3)
        results["build_j2_s"] = round(walls[2], 3)
        results["overhead_j1"] = round(walls[1] / pure - 1, 4)
        results["scaling_j1_over_j2"] = round(walls[1] / walls[2], 3)

        # no-op: the whole grid of this arch, every key present; count specs per second
        with Store.open(f"sqlite:///{d}/noop.sqlite") as store:
            full = make_plan(arches=[target], families=None, lanes=[], toolchains=tcs, store=store)
            placeholder = b"\x7fELF placeholder for the no-op lookup benchmark"
            for job in full.to_build:
                store.put(job.inputs, placeholder, ir_sha256="0" * 64, metadata={}, provenance={})
            planned = 0
            t0 = time.perf_counter()
            for _ in range(args.noop_repeat):
                p = make_plan(arches=[target], families=None, lanes=[], toolchains=tcs, store=store)
                assert not p.to_build
                planned += p.planned
            noop = time.perf_counter() - t0
        results["noop_grid_specs"] = full.planned
        results["noop_specs"] = planned
        results["noop_specs_per_s"] = round(planned / noop)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        w = max(len(k) for k in results)
        for k, v in results.items():
            print(f"{k:<{w}}  {v}")


if __name__ == "__main__":
    sys.exit(main())
