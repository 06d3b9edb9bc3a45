"""Speed of the sm_90 gemm paths against torch.matmul, f16 in / f16 out, on one NVIDIA GPU.

    every f16 -> f16 spec of the sm_90 variant table, paths mma (mma.sync) and fma
        -> lower -> cubin (the project's compiler, all cores)        [tests/_cuda.module_image]
        -> at each size (1024^3, 4096^3): every spec screened (median of 5 launches), the TOP
           fastest of each path timed again (median of REPS launches, each between its own
           CUDA events) beside torch.matmul on the same tensors, same stream, same timing
        -> the best of each path checked against torch (fp32 matmul of the same inputs)
    prints a table; ``--json PATH`` writes the raw numbers

Run on the GPU machine (after scripts/gpu-tests.sh installed the project, or with the
project on PYTHONPATH):  python scripts/bench_gemm_gpu.py --json /tmp/bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from _cuda import check, module_image  # noqa: E402

from rocke_aot.aot.lower import lower  # noqa: E402
from rocke_aot.variants import table  # noqa: E402
from rocke_aot.variants.families import get_family  # noqa: E402
from rocke_aot.variants.problems import GemmProblem  # noqa: E402

REPS = 20
TOP = 4


def _specs():
    return [s for s in table.enumerate_specs("gemm", "sm_90", "llvm22")
            if s.in_dtype == "f16" and s.out_dtype == "f16"]


class Kernel:
    def __init__(self, spec, image: bytes, block: int):
        from cuda.bindings import driver as cu

        self.spec, self.block = spec, block
        img = np.frombuffer(image, dtype=np.uint8)
        self.module = check(cu.cuModuleLoadData(img.ctypes.data))
        self.fn = check(cu.cuModuleGetFunction(self.module, spec.kernel_name.encode()))

    def launcher(self, a, b, c, m, n, k, stream):
        from cuda.bindings import driver as cu

        holders = [np.array([t.data_ptr()], dtype=np.uint64) for t in (a, b, c)]
        holders += [np.array([v], dtype=np.int32) for v in (m, n, k)]
        params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        g = get_family("gemm").formulas(self.spec).grid_of(GemmProblem(m, n, k))[0]  # the launch contract's grid

        def run():
            check(cu.cuLaunchKernel(self.fn, g, 1, 1, self.block, 1, 1, 0, stream, params.ctypes.data, 0))
        run.keep = (holders, params)  # the parameter buffers must outlive the launches
        return run


def median_ms(fn, reps: int = REPS) -> float:
    import torch

    for _ in range(3):  # warm-up: module load, first-launch costs
        fn()
    torch.cuda.synchronize()
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in evs:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return float(np.median([s.elapsed_time(e) for s, e in evs]))


def main() -> None:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default=None)
    ap.add_argument("--sizes", default="1024,4096")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]

    torch.cuda.init()
    dev = torch.device("cuda")
    print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__, flush=True)
    from cuda.bindings import driver as cu

    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))  # the context torch uses (the primary one)

    specs = _specs()
    t0 = time.time()

    def build(spec):
        k = lower("gemm", spec, "sm_90", "llvm22")
        image, _ = module_image(k.ir)
        return spec, image, k.block_size

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        built = list(ex.map(build, specs))
    kernels = [Kernel(s, img, blk) for s, img, blk in built]
    print(f"compiled {len(kernels)} specs in {time.time() - t0:.1f} s", flush=True)

    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device=dev).manual_seed(0)
    results: dict = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "reps": REPS,
                     "screen": {}, "final": {}}

    def operands(s):
        a = torch.randn(s, s, device=dev, generator=gen).half()
        b = torch.randn(s, s, device=dev, generator=gen).half()
        return a, b, torch.empty(s, s, device=dev, dtype=torch.half)

    rows = []
    for s in sizes:
        # screen every spec at this size (the best tile differs between 1024^3 and 4096^3),
        # then time the TOP fastest of each path again beside torch.matmul
        a, b, c = operands(s)
        flop = 2.0 * s**3
        screen = results["screen"][str(s)] = {}
        for kern in kernels:
            screen[kern.spec.kernel_name] = median_ms(kern.launcher(a, b, c, s, s, s, stream), reps=5)
        t_torch = median_ms(lambda: torch.matmul(a, b, out=c))
        ref = torch.matmul(a.float(), b.float())
        entry = {"torch_ms": t_torch, "paths": {}}
        for path in ("mma", "fma"):
            ks = sorted((k for k in kernels if k.spec.path == path), key=lambda k: screen[k.spec.kernel_name])[:TOP]
            times = {k.spec.kernel_name: median_ms(k.launcher(a, b, c, s, s, s, stream)) for k in ks}
            name = min(times, key=times.get)
            kern = next(k for k in ks if k.spec.kernel_name == name)
            c.fill_(float("nan"))
            kern.launcher(a, b, c, s, s, s, stream)()
            torch.cuda.synchronize()
            rel = float(torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref))
            entry["paths"][path] = {"best": name, "ms": times[name], "all_ms": times, "rel_err": rel}
            rows.append((s, path, name, times[name], flop / times[name] / 1e9, t_torch, rel))
            print(f"{s}^3 {path}: fastest {TOP} after screening:", {n: round(t, 4) for n, t in times.items()},
                  flush=True)
        rows.append((s, "torch", "torch.matmul", t_torch, flop / t_torch / 1e9, t_torch, 0.0))
        results["final"][str(s)] = entry

    print("\nsize   path   kernel                                          median ms   TFLOP/s   vs torch   rel err")
    for s, path, name, ms, tf, tt, rel in rows:
        print(f"{s:<6} {path:<6} {name:<47} {ms:10.4f} {tf:9.1f} {ms / tt:9.2f}x  {rel:.2e}")
    for s in sizes:
        e = results["final"][str(s)]
        mma, fma = e["paths"]["mma"]["ms"], e["paths"]["fma"]["ms"]
        print(f"{s}^3: best mma / torch = {mma / e['torch_ms']:.2f}x, best fma / best mma = {fma / mma:.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
