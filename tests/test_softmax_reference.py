"""triton_softmax's reference (rocke_aot/families/triton_softmax/reference.py, run by runner/reference.py), checked
against numpy computed another way, and its error bound against kernels simulated in numpy:

    reference    exp(x - max) / sum, float64; compared with exp(x - logsumexp(x)), logsumexp by
                 np.logaddexp.reduce (another algorithm), to 1e-12
    bound        a correct kernel simulated step by step in float32 (the kernel's arithmetic: the
                 f16 inputs widened, x - max, exp, the row sum, the division, one rounding to f16)
                 is inside it everywhere; the same with exp's argument scaled by 1.01 or (rows short
                 enough for f16 to see it) the row sum missing its last element is outside it
    wiring       semantics("triton_softmax") is the family's own Reference, output "Y", no flops
"""

from __future__ import annotations

import numpy as np
import pytest

from rocke_aot.families.triton_softmax.family import SoftmaxProblem
from rocke_aot.families.triton_softmax.reference import REFERENCE
from rocke_aot.runner.reference import inputs, reference_of, semantics
from rocke_aot.variants.families import get_family

SHAPES = [(4, 200), (8, 1024), (3, 17), (2, 4096)]


def _values(rows: int, cols: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    _, x = inputs("f16", rows * cols, np.random.default_rng(seed))
    return x, x.reshape(rows, cols)


def _kernel_f32(x2: np.ndarray, *, scale: float = 1.0, drop_last: bool = False) -> np.ndarray:
    """The kernel's arithmetic in float32, rounded to f16 at the end."""
    x = x2.astype(np.float32)
    d = (x - x.max(axis=1, keepdims=True)) * np.float32(scale)
    e = np.exp(d).astype(np.float32)
    s = (e[:, :-1] if drop_last else e).sum(axis=1, keepdims=True, dtype=np.float32)
    return (e / s).astype(np.float16).astype(np.float64)


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_reference_equals_numpy_by_logsumexp(rows, cols):
    flat, x = _values(rows, cols)
    sem = semantics("triton_softmax")
    got, _ = sem.expected(SoftmaxProblem(rows, cols), {"X": flat}, "f16")
    lse = np.logaddexp.reduce(x, axis=1, keepdims=True)
    assert np.max(np.abs(got - np.exp(x - lse).ravel())) < 1e-12
    assert np.allclose(got.reshape(rows, cols).sum(axis=1), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rows, cols", SHAPES)
def test_bound_admits_a_correct_kernel_and_refuses_wrong_ones(rows, cols):
    flat, x = _values(rows, cols, seed=1)
    want, lim = semantics("triton_softmax").expected(SoftmaxProblem(rows, cols), {"X": flat}, "f16")
    ok = np.abs(_kernel_f32(x).ravel() - want)
    assert np.all(ok <= lim), float(np.max(ok / lim))
    scaled = np.abs(_kernel_f32(x, scale=1.01).ravel() - want) > lim
    assert scaled.sum() > 0.5 * want.size  # most outputs move by more than a correct kernel can
    if 1 / cols > 2 * 2.0**-11:  # a sum short by ~1/cols moves every output by more than two f16 ulps:
        dropped = np.abs(_kernel_f32(x, drop_last=True).ravel() - want) > lim  # (wider rows: f16 cannot tell)
        assert dropped.sum() > 0.5 * want.size


def test_triton_softmax_declares_its_own_reference():
    sem = semantics("triton_softmax")
    assert get_family("triton_softmax").reference is REFERENCE and sem.reference is REFERENCE.compute
    assert reference_of("triton_softmax") == "triton_softmax" and sem.output == "Y" and sem.flops is None
