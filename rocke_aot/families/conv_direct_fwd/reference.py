"""What a conv_direct_fwd computes, for `bench --run-from-cache` to check every output against.

    REFERENCE = Reference(output="Y", compute, flops, terms)     variants/families.py Reference
        compute(ConvProblem, {"X", "Wt"})   Y[n, oh, ow, k] = sum_{r, s, c}
                                                X[n, oh*u - p + r*d, ow*v - q + s*e, c] * W[k, r, s, c]
                                            in float64, NHWC / KRSC / NHWK, flat: torch's conv2d
                                            where torch is installed (on the GPU when there is
                                            one), else numpy, one einsum per filter tap over the
                                            zero-padded input
        flops                               2 N OH OW K R S C
        terms                               R S C products summed into one Y element (the
                                            runner's Higham bound, runner/reference.py)

numpy and torch are imported inside the functions: a service host loads this family half without
either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.variants.families import Reference, optional_torch


def compute(p: Any, v: Mapping[str, Any]) -> Any:
    import numpy as np

    x = np.asarray(v["X"]).reshape(p.n, p.h, p.w, p.c)
    wt = np.asarray(v["Wt"]).reshape(p.k, p.r, p.s, p.c)
    oh, ow = p.out_hw
    torch = optional_torch()
    if torch is not None:
        d = "cuda" if torch.cuda.is_available() else "cpu"
        y = torch.nn.functional.conv2d(
            torch.from_numpy(x).to(d).permute(0, 3, 1, 2), torch.from_numpy(wt).to(d).permute(0, 3, 1, 2),
            stride=(p.stride_h, p.stride_w), padding=(p.pad_h, p.pad_w), dilation=(p.dil_h, p.dil_w))
        return y.permute(0, 2, 3, 1).contiguous().cpu().numpy().ravel()
    xp = np.pad(x, ((0, 0), (p.pad_h, p.pad_h), (p.pad_w, p.pad_w), (0, 0)))
    y = np.zeros((p.n, oh, ow, p.k))
    for r in range(p.r):
        for s in range(p.s):
            r0, s0 = r * p.dil_h, s * p.dil_w
            win = xp[:, r0:r0 + p.stride_h * (oh - 1) + 1:p.stride_h, s0:s0 + p.stride_w * (ow - 1) + 1:p.stride_w, :]
            y += np.einsum("nhwc,kc->nhwk", win, wt[:, r, s, :])
    return y.ravel()


def flops(p: Any) -> int:
    return 2 * p.n * p.out_hw[0] * p.out_hw[1] * p.k * p.r * p.s * p.c


def terms(p: Any) -> int:
    return p.r * p.s * p.c


REFERENCE = Reference(output="Y", compute=compute, flops=flops, terms=terms)

__all__ = ["REFERENCE", "compute", "flops", "terms"]
