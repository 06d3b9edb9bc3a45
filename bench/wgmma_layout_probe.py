"""Where each operand element of the warpgroup pipeline lands, on the GPU: a layout probe.

    For one wgmma spec and a problem of whole tiles, two products whose result names its source:
      B probe: A[i, k] = 1 where k == i % K (else 0), B[k, n] = k + K * (n % 16)   -> C[i, j] = B[i % K, j]
      A probe: B[k, n] = 1 where k == n % K (else 0), A[i, k] = k + K * (i % 16)   -> C[i, j] = A[i, j % K]
    Every code is an integer below 2048 (exact in f16). A wrong smem layout or descriptor shows as
    codes from the wrong (k, column) / (row, k): the probe prints the share right and the first
    wrong elements decoded, so a layout fault can be read off one run.

    python bench/wgmma_layout_probe.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cuda import check, module_image  # noqa: E402  (gemm_async_h200 put tests/ on the path)
from gemm_async_h200 import Kernel  # noqa: E402

from rocke_aot.families.gemm.lower import lower_gemm  # noqa: E402
from rocke_aot.families.gemm.spec import GemmSpec  # noqa: E402
from rocke_aot.lanes import get_lane  # noqa: E402
from rocke_aot.targets import Target  # noqa: E402

SPECS = [dict(block_m=64, block_n=64, waves=4, stages=2), dict(block_m=128, block_n=128, waves=8, stages=3),
         dict(block_m=128, block_n=256, waves=8, stages=4), dict(block_m=128, block_n=128, waves=4, stages=4)]


def probe(kern, m, n, k, which, dev, stream):
    import torch

    i = torch.arange(m, device=dev)[:, None]
    j = torch.arange(n, device=dev)[None, :]
    kk = torch.arange(k, device=dev)
    if which == "B":
        a = (kk[None, :] == (i % k)).half()
        b = (kk[:, None] + k * (j % 16)).half()
        ref = b[(i % k).expand(m, n), j.expand(m, n)].float()
    else:
        b = (kk[:, None] == (j % k)).half()
        a = (kk[None, :] + k * (i % 16)).half()
        ref = a[i.expand(m, n), (j % k).expand(m, n)].float()
    c = torch.full((m, n), float("nan"), device=dev, dtype=torch.half)
    kern.launcher(a.contiguous(), b.contiguous(), c, m, n, k, stream)()
    torch.cuda.synchronize()
    got = c.float()
    ok = got == ref
    bad = (~ok).nonzero()[:12].tolist()
    out = []
    for r, col in bad:
        v = got[r, col].item()
        code = None if v != v else (int(v) % k, int(v) // k)  # (k, column % 16) or (k, row % 16)
        out.append({"at": [r, col], "got": v, "want": ref[r, col].item(), "decoded": code})
    return float(ok.float().mean().item()), out


def main() -> None:
    import torch
    from cuda.bindings import driver as cu

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.cuda.init()
    dev = torch.device("cuda")
    check(cu.cuInit(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(check(cu.cuDeviceGet(0))))
    check(cu.cuCtxSetCurrent(ctx))
    stream = torch.cuda.current_stream().cuda_stream
    res = {}
    for d in SPECS:
        spec = GemmSpec(in_dtype="f16", out_dtype="f16", path="mma", block_k=64, vector_width=8, group_m=8,
                        wgmma=True, **d)
        low = lower_gemm(spec, Target.parse("sm_90"), get_lane("llvm22"))
        image, _ = module_image(low.ir)
        kern = Kernel(spec, image, low.block_size, low.dynamic_lds_bytes, "wgmma")
        m, n, k = 2 * spec.block_m, 2 * spec.block_n, 128
        for which in ("A", "B"):
            share, bad = probe(kern, m, n, k, which, dev, stream)
            res[f"{spec.kernel_name} {which}"] = {"right": share, "first_wrong": bad}
            print(f"{spec.kernel_name} {which} probe: {share:.4f} right" + "".join(f"\n   {b}" for b in bad[:6]),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
