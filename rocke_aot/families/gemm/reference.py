"""What a gemm computes, for `bench --run-from-cache` to check every output against.

    REFERENCE = Reference(output="C", compute, flops, terms)     variants/families.py Reference
        compute(GemmProblem, {"A", "B"})   C = A x B in float64 (torch on the GPU where torch is
                                           installed, numpy otherwise), flat
        flops                              2 M N K
        terms                              K products summed into one C element (the runner's
                                           Higham bound of f32 accumulation, runner/reference.py)

triton_matmul computes the same operation on the same problem: its kernel names this family as
its reference (``reference="gemm"``), so one definition checks both.
numpy and torch are imported inside the functions: a service host loads this family half without
either.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.variants.families import Reference, optional_torch


def compute(p: Any, v: Mapping[str, Any]) -> Any:
    """C = A x B, row-major (A: M x K, B: K x N), flat float64."""
    import numpy as np

    a, b = np.asarray(v["A"]).reshape(p.m, p.k), np.asarray(v["B"]).reshape(p.k, p.n)
    torch = optional_torch()
    if torch is None:
        return (a @ b).ravel()
    d = "cuda" if torch.cuda.is_available() else "cpu"
    return (torch.from_numpy(a).to(d) @ torch.from_numpy(b).to(d)).cpu().numpy().ravel()


def flops(p: Any) -> int:
    return 2 * p.m * p.n * p.k


def terms(p: Any) -> int:
    return p.k


REFERENCE = Reference(output="C", compute=compute, flops=flops, terms=terms)

__all__ = ["REFERENCE", "compute", "flops", "terms"]
