"""The numpy references that decide "verified" where torch is absent (each family folder's
reference.py: gemm, conv_direct_fwd, conv_dgrad_patch; runner/reference.py runs them) against a direct float64 loop written here from the definitions:

    conv fwd   Y[n, oy, ox, k] = sum_{r, s, c} X[n, oy*sh - ph + r*dh, ox*sw - pw + s*dw, c] * W[k, r, s, c]
               (an input index outside the image contributes 0), oh = (h + 2 ph - dh (r - 1) - 1) // sh + 1
    dgrad patch  dX[n, y*p + i, x*p + j, c] = sum_k dY[n, y, x, k] * W[k, i, j, c]; the rows and
               columns past the last whole patch are 0
    gemm       C[i, j] = sum_l A[i, l] B[l, j]

on shapes that take every branch (stride 2, padding, dilation, non-square kernels, an image the patch
does not divide). torch is made absent for the check (the path a host without torch takes); where
torch is installed its path is compared too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rocke_aot.families.conv_dgrad_patch import reference as DGRAD
from rocke_aot.families.conv_direct_fwd import reference as FWD
from rocke_aot.families.gemm import reference as GEMM
from rocke_aot.runner.reference import semantics
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem

CONVS = [ConvProblem(n=2, h=7, w=6, c=3, k=4, r=3, s=3),
         ConvProblem(n=1, h=9, w=8, c=2, k=3, r=3, s=2, stride_h=2, stride_w=1, pad_h=1, pad_w=2),
         ConvProblem(n=2, h=10, w=9, c=3, k=2, r=2, s=3, stride_h=1, stride_w=2, pad_h=2, pad_w=1, dil_h=2, dil_w=3),
         ConvProblem(n=1, h=5, w=5, c=4, k=5, r=1, s=1, stride_h=2, stride_w=2)]
DGRADS = [PatchDgradProblem(n=2, h=8, w=12, c=3, k=5, p=4), PatchDgradProblem(n=1, h=10, w=9, c=2, k=3, p=4)]


def _values(shapes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(size) for name, size in shapes.items()}


def _conv_loop(p: ConvProblem, v) -> np.ndarray:
    x = v["X"].reshape(p.n, p.h, p.w, p.c)
    wt = v["Wt"].reshape(p.k, p.r, p.s, p.c)
    oh = (p.h + 2 * p.pad_h - p.dil_h * (p.r - 1) - 1) // p.stride_h + 1
    ow = (p.w + 2 * p.pad_w - p.dil_w * (p.s - 1) - 1) // p.stride_w + 1
    y = np.zeros((p.n, oh, ow, p.k))
    for n, oy, ox, k in itertools.product(range(p.n), range(oh), range(ow), range(p.k)):
        acc = 0.0
        for r, s, c in itertools.product(range(p.r), range(p.s), range(p.c)):
            iy, ix = oy * p.stride_h - p.pad_h + r * p.dil_h, ox * p.stride_w - p.pad_w + s * p.dil_w
            if 0 <= iy < p.h and 0 <= ix < p.w:
                acc += float(x[n, iy, ix, c]) * float(wt[k, r, s, c])
        y[n, oy, ox, k] = acc
    return y.ravel()


def _dgrad_loop(p: PatchDgradProblem, v) -> np.ndarray:
    hp, wp = p.h // p.p, p.w // p.p
    dy = v["dY"].reshape(p.n, hp, wp, p.k)
    wt = v["Wt"].reshape(p.k, p.p, p.p, p.c)
    dx = np.zeros((p.n, p.h, p.w, p.c))
    for n, y, x, i, j, c in itertools.product(range(p.n), range(hp), range(wp), range(p.p), range(p.p), range(p.c)):
        dx[n, y * p.p + i, x * p.p + j, c] = sum(float(dy[n, y, x, k]) * float(wt[k, i, j, c]) for k in range(p.k))
    return dx.ravel()


@pytest.fixture(params=["numpy", "torch"])
def path(request, monkeypatch):
    if request.param == "numpy":
        for module in (FWD, DGRAD, GEMM):
            monkeypatch.setattr(module, "optional_torch", lambda: None)
    elif FWD.optional_torch() is None:
        return "numpy (torch not installed)"  # the numpy case above already covers this host
    return request.param


def test_conv_fwd_reference_is_the_direct_loop(path):
    assert len(CONVS) == 4
    for i, p in enumerate(CONVS):
        oh, ow = p.out_hw
        assert oh >= 2 and ow >= 2, p  # a real window sweep, not one output
        v = _values({"X": p.n * p.h * p.w * p.c, "Wt": p.k * p.r * p.s * p.c}, i)
        got, want = FWD.compute(p, v), _conv_loop(p, v)
        assert got.shape == want.shape == (p.n * oh * ow * p.k,)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{path}: {p}")


def test_dgrad_patch_reference_is_the_direct_loop(path):
    for i, p in enumerate(DGRADS):
        v = _values({"dY": p.n * (p.h // p.p) * (p.w // p.p) * p.k, "Wt": p.k * p.p * p.p * p.c}, 10 + i)
        got, want = DGRAD.compute(p, v), _dgrad_loop(p, v)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{path}: {p}")
    p = DGRADS[1]  # 10 x 9 with p = 4: rows 8-9 and column 8 lie past the last whole patch
    v = _values({"dY": p.n * 2 * 2 * p.k, "Wt": p.k * 16 * p.c}, 11)
    dx = DGRAD.compute(p, v).reshape(p.n, p.h, p.w, p.c)
    assert not dx[:, 8:].any() and not dx[:, :, 8:].any() and dx[:, :8, :8].all()


def test_gemm_reference_is_the_direct_loop(path):
    p = GemmProblem(m=5, n=7, k=9, dtype="f16")
    v = _values({"A": 45, "B": 63}, 3)
    a, b = v["A"].reshape(5, 9), v["B"].reshape(9, 7)
    want = [sum(float(a[i, t]) * float(b[t, j]) for t in range(9)) for i in range(5) for j in range(7)]
    np.testing.assert_allclose(GEMM.compute(p, v), want, rtol=1e-12, atol=1e-12)


def test_the_runner_runs_each_family_folders_reference():
    """runner/reference.py semantics(): a family folder's own Reference (output, flops, terms), and
    triton_matmul's, which names gemm's."""
    for fam, ref, out in (("gemm", GEMM, "C"), ("conv_direct_fwd", FWD, "Y"), ("conv_dgrad_patch", DGRAD, "dX")):
        sem = semantics(fam)
        assert (sem.output, sem.reference, sem.flops, sem.terms) == (out, ref.compute, ref.flops, ref.terms), fam
    sem = semantics("triton_matmul")
    assert (sem.family, sem.output, sem.reference) == ("gemm", "C", GEMM.compute)
    p = ConvProblem(n=2, h=7, w=6, c=3, k=4, r=3, s=3)
    assert semantics("conv_direct_fwd").flops(p) == 2 * 2 * 5 * 4 * 4 * 3 * 3 * 3  # no padding: 7 x 6 -> 5 x 4
    assert semantics("gemm").terms(GemmProblem(m=5, n=7, k=9)) == 9
