"""What a conv_dgrad_patch computes, for `bench --run-from-cache` to check every output against.

    REFERENCE = Reference(output="dX", compute, flops, terms)    variants/families.py Reference
        compute(PatchDgradProblem, {"dY", "Wt"})   dX[n, i*P + r, j*P + s, c] = sum_k dY[n, i, j, k]
                                                   * W[k, r, s, c] for i < H // P, j < W // P, zero
                                                   on the border no patch covers; float64, flat
                                                   (one einsum: torch's where torch is installed,
                                                   on the GPU when there is one, else numpy's)
        flops                                      2 N Hp Wp K P P C
        terms                                      K products summed into one dX element (the
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

    hp, wp, pp = p.h // p.p, p.w // p.p, p.p
    dy = np.asarray(v["dY"]).reshape(p.n, hp, wp, p.k)
    wt = np.asarray(v["Wt"]).reshape(p.k, pp, pp, p.c)
    torch = optional_torch()
    if torch is not None:
        d = "cuda" if torch.cuda.is_available() else "cpu"
        t = torch.einsum("nyxk,kijc->nyixjc", torch.from_numpy(dy).to(d), torch.from_numpy(wt).to(d)).cpu().numpy()
    else:
        t = np.einsum("nyxk,kijc->nyixjc", dy, wt)
    dx = np.zeros((p.n, p.h, p.w, p.c))
    dx[:, :hp * pp, :wp * pp, :] = t.reshape(p.n, hp * pp, wp * pp, p.c)  # the uncovered border is zero
    return dx.ravel()


def flops(p: Any) -> int:
    return 2 * p.n * (p.h // p.p) * (p.w // p.p) * p.k * p.p * p.p * p.c


def terms(p: Any) -> int:
    return p.k


REFERENCE = Reference(output="dX", compute=compute, flops=flops, terms=terms)

__all__ = ["REFERENCE", "compute", "flops", "terms"]
