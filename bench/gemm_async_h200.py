"""The sm_90 gemm pipelines against torch.matmul on one NVIDIA GPU: a sweep to choose the table's points.

    specs: the asynchronous pipeline (GemmSpec.stages: cp.async + ldmatrix) over block tiles,
           block_k, warps, stages and tile order, plus the register-staged mma specs of the
           variant table (today's path) -- f16 in, f16 out
        -> lower (llvm22) -> cubin (the project's compiler, every core)     [tests/_cuda.module_image]
        -> per problem: every spec screened by the median of SCREEN launches, the TOP fastest
           timed again (median of REPS launches, each between its own CUDA events) beside
           torch.matmul(a, b, out=c) on the same tensors and stream
        -> every timed spec checked against an fp32 torch product (relative Frobenius error)
    prints per problem the best of each pipeline and torch; --json writes everything

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
from rocke_aot.targets import Target  # noqa: E402
from rocke_aot.variants import table  # noqa: E402
from rocke_aot.variants.gemm import GemmSpec  # noqa: E402

PROBLEMS = "4096x4096x4096,2048x14336x4096,8192x8192x1024,128x4096x14336,1024x1024x1024,512x4096x4096"
SCREEN, REPS, TOP = 5, 20, 4


def async_specs() -> list[GemmSpec]:
    out = []
    sm90 = Target.parse("sm_90")
    for (bm, bn), bk, w, st, g in itertools.product(
            [(128, 128), (128, 256), (256, 128), (64, 128), (128, 64), (64, 64), (256, 64), (64, 256)],
            (32, 64), (4, 8), (2, 3, 4), (1, 8)):
        try:
            s = GemmSpec(in_dtype="f16", out_dtype="f16", path="mma", block_m=bm, block_n=bn, block_k=bk,
                         waves=w, vector_width=8, stages=st, group_m=g)
            s.geometry(sm90)
        except RockeError:
            continue
        out.append(s)
    return out


def table_specs() -> list[GemmSpec]:
    return [s for s in table.enumerate_specs("gemm", "sm_90", "llvm22")
            if s.path == "mma" and s.in_dtype == "f16" and s.out_dtype == "f16"]


class Kernel:
    def __init__(self, spec, image: bytes, block: int, shared: int):
        from cuda.bindings import driver as cu

        self.spec, self.block, self.shared = spec, block, shared
        self.image = np.frombuffer(image, dtype=np.uint8)
        self.module = check(cu.cuModuleLoadData(self.image.ctypes.data))
        self.fn = check(cu.cuModuleGetFunction(self.module, spec.kernel_name.encode()))
        if shared > 48 * 1024:
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(self.fn, attr, shared))

    def launcher(self, a, b, c, m, n, k, stream):
        from cuda.bindings import driver as cu

        holders = [np.array([t.data_ptr()], dtype=np.uint64) for t in (a, b, c)]
        holders += [np.array([v], dtype=np.int32) for v in (m, n, k)]
        params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        g = -(-m // self.spec.block_m) * -(-n // self.spec.block_n)

        def run():
            check(cu.cuLaunchKernel(self.fn, g, 1, 1, self.block, 1, 1, self.shared, stream, params.ctypes.data, 0))
        run.keep = (holders, params)
        return run


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    ap.add_argument("--problems", default=PROBLEMS)
    args = ap.parse_args()
    problems = [tuple(int(x) for x in p.split("x")) for p in args.problems.split(",")]
    torch.cuda.init()
    dev = torch.device("cuda")
    from cuda.bindings import driver as cu

    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    specs = async_specs() + table_specs()
    t0 = time.time()

    def build(spec):
        try:
            k = lower("gemm", spec, "sm_90", "llvm22")
            image, how = module_image(k.ir)
            return spec, image, k.block_size, k.dynamic_lds_bytes, None
        except Exception as e:  # noqa: BLE001 - reported per spec
            return spec, None, 0, 0, f"{type(e).__name__}: {e}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        built = list(ex.map(build, specs))
    failed = {s.kernel_name: err for s, _, _, _, err in built if err}
    kernels = []
    for s, img, blk, sh, err in built:
        if err:
            continue
        try:
            kernels.append(Kernel(s, img, blk, sh))
        except RuntimeError as e:
            failed[s.kernel_name] = f"load: {e}"
    print(f"device {torch.cuda.get_device_name(0)}; compiled {len(kernels)} of {len(specs)} specs in "
          f"{time.time() - t0:.1f} s; failed {len(failed)}", flush=True)
    for name, err in list(failed.items())[:5]:
        print("  failed:", name, err[:200])
    stream = torch.cuda.current_stream().cuda_stream
    gen = torch.Generator(device=dev).manual_seed(0)
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "failed": failed, "problems": {}}
    for m, n, k in problems:
        a = torch.randn(m, k, device=dev, generator=gen).half()
        b = torch.randn(k, n, device=dev, generator=gen).half()
        c = torch.empty(m, n, device=dev, dtype=torch.half)
        ref = torch.matmul(a.float(), b.float())
        flop = 2.0 * m * n * k
        screen = {kern.spec.kernel_name: median_ms(kern.launcher(a, b, c, m, n, k, stream), SCREEN)
                  for kern in kernels}
        t_torch = median_ms(lambda: torch.matmul(a, b, out=c), REPS)
        entry = {"torch_ms": t_torch, "screen": screen, "best": {}}
        for pipe, pick in (("async", lambda s: s.stages > 0), ("registers", lambda s: s.stages == 0)):
            ks = sorted((x for x in kernels if pick(x.spec)), key=lambda x: screen[x.spec.kernel_name])[:TOP]
            timed = {}
            for kern in ks:
                t = median_ms(kern.launcher(a, b, c, m, n, k, stream), REPS)
                c.fill_(float("nan"))
                kern.launcher(a, b, c, m, n, k, stream)()
                torch.cuda.synchronize()
                rel = float(torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref))
                timed[kern.spec.kernel_name] = {"ms": t, "rel_err": rel, "spec": kern.spec.to_dict()}
            best = min(timed, key=lambda x: timed[x]["ms"])
            entry["best"][pipe] = {"kernel": best, **timed[best], "timed": timed}
            tf = flop / timed[best]["ms"] / 1e9
            print(f"{m}x{n}x{k} {pipe:<9} {best:<48} {timed[best]['ms']:.4f} ms {tf:7.1f} TFLOP/s "
                  f"{t_torch / timed[best]['ms']:.2f}x torch  rel {timed[best]['rel_err']:.1e}", flush=True)
        print(f"{m}x{n}x{k} torch.matmul {t_torch:.4f} ms {flop / t_torch / 1e9:7.1f} TFLOP/s", flush=True)
        res["problems"][f"{m}x{n}x{k}"] = entry
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
