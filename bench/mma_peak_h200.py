"""The ceiling of warp-level mma.sync on this GPU: m16n8k16 f16 -> f32 from registers only.

    kernel: each warp runs ITERS rounds of CHAINS independent mma.sync.m16n8k16 (operands in
            registers, accumulators carried, no memory traffic but one store at the end so
            nothing is dead), lowered as LLVM IR text -> NVPTX (llvmlite, O3) -> ptxas
    grid:   BLOCKS_PER_SM x SMs blocks of WARPS warps; timed by CUDA events, median of REPS
    prints TFLOP/s = 2 * 16*8*16 * CHAINS * ITERS * warps / time, beside torch.matmul at 8192^3
    (cuBLAS: wgmma on sm_90) -- the figure that says how far a mma.sync kernel can get.

    python bench/mma_peak_h200.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from _cuda import check, module_image  # noqa: E402
from bench_gemm_gpu import median_ms  # noqa: E402  (one timing rule: CUDA events per launch, median)

CHAINS, ITERS, WARPS, REPS = 8, 4096, 4, 20


def kernel_ir(chains: int) -> str:
    acc = "{float, float, float, float}"
    lines = [
        'target triple = "nvptx64-nvidia-cuda"',
        f"declare {acc} @llvm.nvvm.mma.m16n8k16.row.col.f32.f32(<2 x half>, <2 x half>, <2 x half>, <2 x half>, "
        "<2 x half>, <2 x half>, float, float, float, float)",
        "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()",
        "define ptx_kernel void @mma_peak(ptr addrspace(1) %out, i32 %iters) {",
        "entry:",
        "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()",
        "  %tf = sitofp i32 %t to half",
        "  %a = insertelement <2 x half> <half 0xH3C00, half 0xH3C00>, half %tf, i32 0",
        "  br label %loop",
        "loop:",
        "  %i = phi i32 [0, %entry], [%i1, %loop]",
    ]
    for c in range(chains):
        for r in range(4):
            lines.append(f"  %c{c}_{r} = phi float [0.0, %entry], [%d{c}_{r}, %loop]")
    for c in range(chains):
        args = ", ".join(["<2 x half> %a"] * 6 + [f"float %c{c}_{r}" for r in range(4)])
        lines.append(f"  %s{c} = call {acc} @llvm.nvvm.mma.m16n8k16.row.col.f32.f32({args})")
        for r in range(4):
            lines.append(f"  %d{c}_{r} = extractvalue {acc} %s{c}, {r}")
    lines += ["  %i1 = add i32 %i, 1", "  %more = icmp slt i32 %i1, %iters", "  br i1 %more, label %loop, label %done",
              "done:"]
    total = "%d0_0"
    for c in range(chains):
        for r in range(4):
            if (c, r) != (0, 0):
                lines.append(f"  %sum{c}_{r} = fadd float {total}, %d{c}_{r}")
                total = f"%sum{c}_{r}"
    lines += ["  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()", "  %g = mul i32 %b, 1024",
              "  %idx = add i32 %g, %t", "  %p = getelementptr float, ptr addrspace(1) %out, i32 %idx",
              f"  store float {total}, ptr addrspace(1) %p", "  ret void", "}",
              "!nvvm.annotations = !{!0}", f'!0 = !{{ptr @mma_peak, !"maxntidx", i32 {32 * WARPS}}}']
    return "\n".join(lines) + "\n"


def main() -> None:
    import torch
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.cuda.init()
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    image, how = module_image(kernel_ir(CHAINS))
    img = np.frombuffer(image, dtype=np.uint8)
    mod = check(cu.cuModuleLoadData(img.ctypes.data))
    fn = check(cu.cuModuleGetFunction(mod, b"mma_peak"))
    res = {"device": torch.cuda.get_device_name(0), "sms": sms, "chains": CHAINS, "iters": ITERS, "warps": WARPS,
           "image": how, "runs": []}
    out = torch.empty(sms * 64 * 1024, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    for per_sm in (1, 2, 4, 8, 16):
        blocks = sms * per_sm
        holders = [np.array([out.data_ptr()], dtype=np.uint64), np.array([ITERS], dtype=np.int32)]
        params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)

        def run():
            check(cu.cuLaunchKernel(fn, blocks, 1, 1, 32 * WARPS, 1, 1, 0, stream, params.ctypes.data, 0))

        ms = median_ms(run, REPS)
        flop = 2.0 * 16 * 8 * 16 * CHAINS * ITERS * blocks * WARPS
        res["runs"].append({"blocks_per_sm": per_sm, "ms": ms, "tflops": flop / ms / 1e9})
        print(f"mma.sync m16n8k16 f16->f32, {per_sm} blocks/SM x {WARPS} warps: {ms:.3f} ms {flop / ms / 1e9:.1f} TFLOP/s",
              flush=True)
    n = 8192
    a = torch.randn(n, n, device="cuda").half()
    b = torch.randn(n, n, device="cuda").half()
    c = torch.empty(n, n, device="cuda").half()
    ms = median_ms(lambda: torch.matmul(a, b, out=c), REPS)
    res["torch_8192_tflops"] = 2.0 * n ** 3 / ms / 1e9
    best = max(r["tflops"] for r in res["runs"])
    res["mma_sync_peak_tflops"] = best
    print(f"torch.matmul 8192^3: {res['torch_8192_tflops']:.1f} TFLOP/s; mma.sync peak {best:.1f} "
          f"= {best / res['torch_8192_tflops']:.2f}x of it", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
