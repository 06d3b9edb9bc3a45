"""The sm_90 gemm pipelines against torch.matmul on one NVIDIA GPU: a sweep to choose the table's points.

    specs: the asynchronous pipeline (GemmSpec.stages: cp.async + ldmatrix) over block tiles,
           block_k, warps, stages, tile order and split-K (SPLIT_TILES: split_k on the tiles where
           it can pay; a split-K kernel gets its own zeroed workspace per problem) (--grid focused: stages 3-4, group_m 8; --grid
           full: stages 2-4, group_m 1 and 8), lowered by each of --lowerings: "new" (today's
           main loop, families/gemm/lower_async.py build_async; run 15 also timed "inline", the first
           loop, removed since: bench/results/bench-raw/h200-run15/gemm-sm90.txt); with --registers also the
           register-staged mma specs of the variant table -- f16 in, f16 out
        -> lower (llvm22) -> cubin (the project's compiler, every core)     [tests/_cuda.module_image]
        -> every kernel on the ragged problems (--ragged: M, N off the tile, K tails, K below one
           pipeline's depth), C poisoned with NaN, against an fp32 torch product
        -> per problem: every spec screened by the median of SCREEN launches, the TOP fastest
           of each pipeline timed again (median of REPS launches, each between its own CUDA
           events) beside torch.matmul(a, b, out=c) on the same tensors and stream
        -> every timed spec checked against an fp32 torch product (relative Frobenius error)
    prints per problem the best of each pipeline and torch (speed = torch ms / kernel ms);
    --json writes everything; exit status 1 when any kernel computed a wrong result

    python bench/gemm_async_h200.py --json OUT.json [--problems 4096x4096x4096,...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))

from _cuda import check, module_image  # noqa: E402
from bench_gemm_gpu import median_ms  # noqa: E402  (one timing rule: CUDA events per launch, median)

from rocke_aot.aot.lower import lower  # noqa: E402
from rocke_aot.errors import RockeError  # noqa: E402
from rocke_aot.families.gemm.lower import lower_gemm  # noqa: E402
from rocke_aot.families.gemm.spec import GemmSpec  # noqa: E402
from rocke_aot.lanes import get_lane  # noqa: E402
from rocke_aot.targets import Target  # noqa: E402
from rocke_aot.variants import table  # noqa: E402

# issue 27's large problems: every one above 10 GFLOP (f16 -> f16)
PROBLEMS = ("3072x3072x3072,4096x4096x4096,2048x4096x4096,4096x4096x1024,256x11008x4096,2048x14336x4096,"
            "128x4096x14336,8192x8192x1024")
# correctness only (not timed): M and N off every tile, K tails of both block_k, a K below one
# tile (the pipeline's copies past K zero-fill), N and K multiples of 8 (the pipeline's rule)
RAGGED = "1031x1000x1048,127x136x72,1x8x8,300x264x40"
SCREEN, REPS, TOP = 5, 20, 4
# 192 x 128 and 128 x 192 (GemmSpec WAVE_FILL_BLOCKS): 3072^3 in 384 tiles, 2.9 waves of 132 SMs at
# one CTA/SM (the power-of-two tiles make 2.18 there); the table serves 192 x 128, the sweep says
# whether 128 x 192 (B copied in panels) does better; 192 x 64 too, for the smaller problems' waves.
# Split-K stays off them (SPLIT_TILES): their point is a full last wave without partials in HBM.
TILES = [(128, 128), (128, 256), (256, 128), (64, 128), (128, 64), (64, 64), (256, 64), (64, 256),
         (192, 128), (128, 192), (192, 64)]
# focused: a warp's tile at most 64 x 64 (the table's rule: more spills)
GRIDS = {"focused": dict(block_k=(32, 64), waves=(4, 8), stages=(3, 4), group_m=(8,), warp_tile=64 * 64),
         "full": dict(block_k=(32, 64), waves=(4, 8), stages=(2, 3, 4), group_m=(1, 8), warp_tile=256 * 256)}
# split-K (GemmSpec.split_k) on the tiles where it can pay: few output tiles against 132 SMs
# (128x4096x14336: 32 tiles of 128 x 128) or a bad wave count (3072^3: 2.2 waves); the table
# serves 1, 2, 4 on 128 x 128 (families/gemm/table.py), the sweep also times 3 and 8 there
SPLIT_TILES = {(128, 128): (1, 2, 3, 4, 8), (128, 256): (1, 2, 4), (64, 128): (1, 2, 4)}
REL_OK = 1e-2  # f16 output of K-long f32 sums: the sweep's errors were 2e-4


def async_specs(grid: str = "focused") -> list[GemmSpec]:
    out = []
    sm90 = Target.parse("sm_90")
    g = GRIDS[grid]
    for (bm, bn), bk, w, st, gm in itertools.product(TILES, g["block_k"], g["waves"], g["stages"], g["group_m"]):
        if bm * bn // w > g["warp_tile"]:
            continue
        for sk in SPLIT_TILES.get((bm, bn), (1,)):
            try:
                s = GemmSpec(in_dtype="f16", out_dtype="f16", path="mma", block_m=bm, block_n=bn, block_k=bk,
                             waves=w, vector_width=8, stages=st, group_m=gm, split_k=sk)
                s.geometry(sm90)
            except RockeError:
                continue
            out.append(s)
    return out


# the warpgroup pipeline (GemmSpec.wgmma, sm_90a): whole warpgroups splitting M, 64-column B chunks,
# block_k 64; split-K where the mma.sync sweep found it pays
WG_TILES = [(64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128), (64, 256), (128, 192), (256, 64)]
WG_SPLIT = {(128, 128): (1, 2, 4), (128, 256): (1, 2), (64, 128): (1, 2, 4), (64, 256): (1, 2, 4)}


def wgmma_specs(dtype: str = "f16") -> list[GemmSpec]:
    out = []
    sm90 = Target.parse("sm_90")
    for (bm, bn), w, st in itertools.product(WG_TILES, (4, 8), (2, 3, 4)):
        for sk in WG_SPLIT.get((bm, bn), (1,)):
            try:
                s = GemmSpec(in_dtype=dtype, out_dtype=dtype, path="mma", block_m=bm, block_n=bn, block_k=64,
                             waves=w, vector_width=8, stages=st, group_m=8, split_k=sk, wgmma=True)
                s.geometry(sm90)
            except RockeError:
                continue
            out.append(s)
    return out


def held_ms(fn, reps: int) -> float:
    """Device time per call of ``reps`` back-to-back calls queued behind a spin kernel (torch's
    _sleep, about 1 ms): the host enqueues them all before the GPU reaches the first, so a short
    call measures the device, not the host's launch path (runner/runtime.py's hold, the same idea)."""
    import torch

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)  # the spin kernel (runner/run.py reaches it the same way)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / reps


def table_specs() -> list[GemmSpec]:
    return [s for s in table.enumerate_specs("gemm", "sm_90", "llvm22")
            if s.path == "mma" and s.in_dtype == "f16" and s.out_dtype == "f16"]


class Kernel:
    def __init__(self, spec, image: bytes, block: int, shared: int, pipe: str):
        from cuda.bindings import driver as cu

        self.spec, self.block, self.shared, self.pipe = spec, block, shared, pipe
        self.name = f"{pipe}:{spec.kernel_name}"  # one spec, two lowerings: two kernels
        self.image = np.frombuffer(image, dtype=np.uint8)
        self.module = check(cu.cuModuleLoadData(self.image.ctypes.data))
        self.fn = check(cu.cuModuleGetFunction(self.module, spec.kernel_name.encode()))
        if shared > 48 * 1024:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self.fn, attr, shared))

    def launcher(self, a, b, c, m, n, k, stream):
        import torch
        from cuda.bindings import driver as cu

        tiles = -(-m // self.spec.block_m) * -(-n // self.spec.block_n)
        tensors = [a, b, c]
        if self.spec.split_k > 1:  # the workspace (rocke_aot/launch.py): zeroed once, left zeroed by every launch
            tensors.append(torch.zeros(tiles * self.spec.workspace_words_per_tile, dtype=torch.int32, device=a.device))
        holders = [np.array([t.data_ptr()], dtype=np.uint64) for t in tensors]
        holders += [np.array([v], dtype=np.int32) for v in (m, n, k)]
        params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        g = tiles * self.spec.split_k

        def run():
            check(cu.cuLaunchKernel(self.fn, g, 1, 1, self.block, 1, 1, self.shared, stream, params.ctypes.data, 0))
        run.keep = (holders, params, tensors)
        return run


def rel_error(c, ref) -> float:
    import torch

    if not bool(torch.isfinite(c).all()):  # an unwritten (NaN-poisoned) or overflowed element
        return float("inf")
    return float(torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref))


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--problems", default=PROBLEMS)
    ap.add_argument("--ragged", default=RAGGED, help="correctness-only problems ('' for none)")
    ap.add_argument("--grid", default="focused", choices=sorted(GRIDS))
    ap.add_argument("--registers", action="store_true", help="also the table's register-staged mma specs")
    ap.add_argument("--wgmma", action="store_true", help="also the warpgroup pipeline (wgmma_specs)")
    ap.add_argument("--held", action="store_true", help="time by held_ms (calls queued behind a hold)")
    args = ap.parse_args()
    problems = [tuple(int(x) for x in p.split("x")) for p in args.problems.split(",") if p]
    ragged = [tuple(int(x) for x in p.split("x")) for p in args.ragged.split(",") if p]
    lowerings = ["new"]  # the first loop ("inline") is gone: bench/results/bench-raw/h200-run15/gemm-sm90.txt
    torch.cuda.init()
    dev = torch.device("cuda")
    from cuda.bindings import driver as cu

    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    jobs = [(pipe, s) for pipe in lowerings for s in async_specs(args.grid)]
    jobs += [("registers", s) for s in (table_specs() if args.registers else [])]
    jobs += [("wgmma", s) for s in (wgmma_specs() if args.wgmma else [])]
    timer = held_ms if args.held else median_ms
    extra = (["registers"] if args.registers else []) + (["wgmma"] if args.wgmma else [])
    t0 = time.time()

    def build(job):
        pipe, spec = job
        try:
            k = lower_gemm(spec, Target.parse("sm_90"), get_lane("llvm22")) if pipe != "registers" else lower("gemm", spec, "sm_90", "llvm22")
            image, how = module_image(k.ir)
            return pipe, spec, image, k.block_size, k.dynamic_lds_bytes, None
        except Exception as e:  # noqa: BLE001 - reported per spec
            return pipe, spec, None, 0, 0, f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        built = list(ex.map(build, jobs))
    failed = {f"{p}:{s.kernel_name}": err for p, s, _, _, _, err in built if err}
    kernels = []
    for p, s, img, blk, sh, err in built:
        if err:
            continue
        try:
            kernels.append(Kernel(s, img, blk, sh, p))
        except RuntimeError as e:
            failed[f"{p}:{s.kernel_name}"] = f"load: {e}"
    print(f"device {torch.cuda.get_device_name(0)}; compiled {len(kernels)} of {len(jobs)} kernels "
          f"({', '.join(lowerings + extra)}) in {time.time() - t0:.1f} s; "
          f"failed {len(failed)}", flush=True)
    for name, err in list(failed.items())[:5]:
        print("  failed:", name, err[:200])
    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device=dev).manual_seed(0)
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "failed": failed,
           "timing": "held" if args.held else "events per launch",
           "lowerings": lowerings, "grid": args.grid, "ragged": {}, "problems": {}}
    wrong = []
    t0 = time.time()
    for m, n, k in ragged:  # every kernel, NaN-poisoned output, against fp32 torch
        a = torch.randn(m, k, device=dev, generator=gen).half()
        b = torch.randn(k, n, device=dev, generator=gen).half()
        c = torch.empty(m, n, device=dev, dtype=torch.half)
        ref = torch.matmul(a.float(), b.float())
        errs = {}
        for kern in kernels:
            c.fill_(float("nan"))
            kern.launcher(a, b, c, m, n, k, stream)()
            torch.cuda.synchronize()
            errs[kern.name] = rel_error(c, ref)
        bad = {x: e for x, e in errs.items() if not e <= REL_OK}
        wrong += [f"{x} {m}x{n}x{k}: rel {e:.2e}" for x, e in bad.items()]
        res["ragged"][f"{m}x{n}x{k}"] = errs
        print(f"ragged {m}x{n}x{k}: {len(errs) - len(bad)} of {len(errs)} kernels right "
              f"(max rel {max(errs.values(), default=0):.1e})", flush=True)
    if ragged:
        print(f"ragged checks in {time.time() - t0:.1f} s", flush=True)
    summary = []
    for m, n, k in problems:
        a = torch.randn(m, k, device=dev, generator=gen).half()
        b = torch.randn(k, n, device=dev, generator=gen).half()
        c = torch.empty(m, n, device=dev, dtype=torch.half)
        ref = torch.matmul(a.float(), b.float())
        flop = 2.0 * m * n * k
        screen = {kern.name: timer(kern.launcher(a, b, c, m, n, k, stream), SCREEN) for kern in kernels}
        t_torch = timer(lambda: torch.matmul(a, b, out=c), REPS)
        entry = {"torch_ms": t_torch, "screen": screen, "best": {}}
        row = {"problem": f"{m}x{n}x{k}", "gflop": flop / 1e9, "torch_ms": t_torch}
        for pipe in lowerings + extra:
            ks = sorted((x for x in kernels if x.pipe == pipe), key=lambda x: screen[x.name])[:TOP]
            if not ks:
                continue
            timed = {}
            for kern in ks:
                t = timer(kern.launcher(a, b, c, m, n, k, stream), REPS)
                c.fill_(float("nan"))
                kern.launcher(a, b, c, m, n, k, stream)()
                torch.cuda.synchronize()
                rel = rel_error(c, ref)
                if not rel <= REL_OK:
                    wrong.append(f"{kern.name} {m}x{n}x{k}: rel {rel:.2e}")
                timed[kern.spec.kernel_name] = {"ms": t, "rel_err": rel, "spec": kern.spec.to_dict()}
            best = min(timed, key=lambda x: timed[x]["ms"])
            entry["best"][pipe] = {"kernel": best, **timed[best], "timed": timed}
            row[pipe] = t_torch / timed[best]["ms"]
            tf = flop / timed[best]["ms"] / 1e9
            print(f"{m}x{n}x{k} {pipe:<9} {best:<44} {timed[best]['ms']:.4f} ms {tf:7.1f} TFLOP/s "
                  f"{t_torch / timed[best]['ms']:.2f}x torch  rel {timed[best]['rel_err']:.1e}", flush=True)
        print(f"{m}x{n}x{k} torch.matmul {t_torch:.4f} ms {flop / t_torch / 1e9:7.1f} TFLOP/s", flush=True)
        res["problems"][f"{m}x{n}x{k}"] = entry
        summary.append(row)
    pipes = [p for p in lowerings + extra if any(p in r for r in summary)]
    print("\nbest native / torch.matmul (higher is better; goal: >= 0.5 on every problem above 10 GFLOP)")
    print(f"{'problem':<18} {'GFLOP':>7} " + " ".join(f"{p:>9}" for p in pipes))
    for r in summary:
        print(f"{r['problem']:<18} {r['gflop']:7.1f} " + " ".join(f"{r.get(p, float('nan')):9.2f}" for p in pipes))
    res["summary"], res["wrong"] = summary, wrong
    print(f"wrong results: {len(wrong)}" + "".join(f"\n  {w}" for w in wrong[:20]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    sys.exit(1 if wrong or failed else 0)


if __name__ == "__main__":
    main()
