"""What triton_softmax computes, for `bench --run-from-cache` to check every output against.

    REFERENCE = Reference(output="Y", compute, bound)       variants/families.py Reference
        compute(SoftmaxProblem, {"X"})   exp(x - max(x)) / sum(exp(x - max(x))) per row, float64, flat
        flops                            None: not a sum of products (no TFLOP/s figure)
        bound                            the largest error of a correct kernel per element (below)

A correct softmax kernel (f32 math, Triton's fused-softmax tutorial: rocke_aot/kernels/triton_softmax.py):
x - max is exact (two 16-bit values in f32); exp is the hardware's approximation (NVIDIA
ex2.approx: 2 ulp of f32 after the log2(e) scaling's rounding; AMD v_exp_f32: 1 ulp), so 2^-21
relative per element; the row sum of ``cols`` such terms adds Higham's gamma_cols and their own
2^-21; the division one f32 rounding. Relative to each output: 2^-20 + cols * 2^-24 + 2^-24,
then one rounding to the output dtype (dtypes.UNIT_ROUNDOFF).

numpy is imported inside the functions: a service host loads this family half without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.dtypes import UNIT_ROUNDOFF
from rocke_aot.variants.families import Reference

SOFTMAX_EXP_REL = 2.0**-21


def compute(p: Any, v: Mapping[str, Any]) -> Any:
    """Row-wise softmax in float64: exp(x - max(x)) / sum(exp(x - max(x))) per row, flat."""
    import numpy as np

    x = np.asarray(v["X"]).reshape(p.rows, p.cols)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).ravel()


def bound(p: Any, v: Mapping[str, Any], ref: Any, out_dtype: str) -> Any:
    """The largest error per element of a correct kernel (module doc), float64, ``ref``'s shape."""
    import numpy as np

    u = 2.0**-24
    rel = 2 * SOFTMAX_EXP_REL + p.cols * u / (1 - p.cols * u) + u
    a = np.abs(ref)
    return rel * a + UNIT_ROUNDOFF[out_dtype] * (a + rel * a) + 2.0**-25


REFERENCE = Reference(output="Y", compute=compute, flops=None, bound=bound)

__all__ = ["REFERENCE", "SOFTMAX_EXP_REL", "bound", "compute"]
