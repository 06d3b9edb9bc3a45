"""What each family computes, for checking and counting: references, flops, error bounds.

    inputs(dtype, count, rng)      -> (storage bits for the device, exact float64 values)
    decode(bits, dtype)            -> float64 values of f32 / f16 / bf16 storage
    semantics(family) -> Semantics, from the first that has one:
        the family's own Reference (variants/families.py Family.reference: a plugin declares
            its numpy / torch reference there; rocke-aot's families keep theirs below)
        SEMANTICS[the name the family computes] (runner/run.py reference_of: a Triton family
            names one, triton_matmul -> gemm, triton_softmax -> softmax; every other family its own name)
        else SpecError naming the family and how to declare one
    Semantics.expected(problem, {arg: float64 values}, out_dtype) -> (float64 output, flat;
        the largest error a correct kernel makes per element): .terms(problem) (products summed
        into one output: bound() below), or the family's own bound(problem, inputs, ref, dtype)
    Semantics.reference / .flops(problem) (None: no TFLOP/s)
    bound(ref_abs, terms, out_dtype) -> elementwise error bound of a sum of products

The launch is data (the artifact's launch contract); what the numbers MEAN is per family,
and lives here, beside nothing that launches. References run in float64: torch (on the GPU
when there is one) where torch is installed, numpy otherwise.

Error bound of a correct kernel (f32 accumulation of exact 16-bit products, Higham's
gamma_K = K u / (1 - K u), u = 2^-24, eq. 3.5), plus one rounding of the output
(u_out = 2^-11 for f16, 2^-8 for bf16, 2^-24 for f32):
    |got - ref| <= gamma_K * S + u_out * (|ref| + gamma_K * S) + 2^-25,   S = sum |a_i b_i|
S is the same reference applied to the inputs' absolute values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rocke_aot.errors import SpecError

U_OUT = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def inputs(dtype: str, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(storage for the device, the exact float64 values it holds), uniform in [-1, 1)."""
    x = rng.uniform(-1.0, 1.0, size=count).astype(np.float32)
    if dtype == "f32":
        return x, x.astype(np.float64)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float64)
    if dtype == "bf16":
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation: exactly representable
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise SpecError(f"no input generator for dtype {dtype!r}")


def storage_dtype(dtype: str) -> np.dtype:
    return np.dtype(np.float32 if dtype == "f32" else np.int32 if dtype == "i32" else np.uint16)


def decode(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f32":
        return bits.view(np.float32).astype(np.float64)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    if dtype == "bf16":
        return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise SpecError(f"no decoder for dtype {dtype!r}")


def bound(ref_abs: np.ndarray, ref: np.ndarray, terms: int, out_dtype: str) -> np.ndarray:
    u = 2.0**-24
    gamma = terms * u / (1 - terms * u)
    return gamma * ref_abs + U_OUT[out_dtype] * (np.abs(ref) + gamma * ref_abs) + 2.0**-25


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _dev(torch):
    return "cuda" if torch.cuda.is_available() else "cpu"


def _gemm(p: Any, v: Mapping[str, np.ndarray]) -> np.ndarray:
    a, b = v["A"].reshape(p.m, p.k), v["B"].reshape(p.k, p.n)
    torch = _torch()
    if torch is not None:
        d = _dev(torch)
        return (torch.from_numpy(a).to(d) @ torch.from_numpy(b).to(d)).cpu().numpy().ravel()
    return (a @ b).ravel()


def _conv_fwd(p: Any, v: Mapping[str, np.ndarray]) -> np.ndarray:
    x = v["X"].reshape(p.n, p.h, p.w, p.c)
    wt = v["Wt"].reshape(p.k, p.r, p.s, p.c)
    oh, ow = p.out_hw
    torch = _torch()
    if torch is not None:
        d = _dev(torch)
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


def _dgrad_patch(p: Any, v: Mapping[str, np.ndarray]) -> np.ndarray:
    hp, wp, pp = p.h // p.p, p.w // p.p, p.p
    dy = v["dY"].reshape(p.n, hp, wp, p.k)
    wt = v["Wt"].reshape(p.k, pp, pp, p.c)
    torch = _torch()
    if torch is not None:
        d = _dev(torch)
        t = torch.einsum("nyxk,kijc->nyixjc", torch.from_numpy(dy).to(d), torch.from_numpy(wt).to(d)).cpu().numpy()
    else:
        t = np.einsum("nyxk,kijc->nyixjc", dy, wt)
    dx = np.zeros((p.n, p.h, p.w, p.c))
    dx[:, :hp * pp, :wp * pp, :] = t.reshape(p.n, hp * pp, wp * pp, p.c)  # the uncovered border is zero
    return dx.ravel()


def _softmax(p: Any, v: Mapping[str, np.ndarray]) -> np.ndarray:
    """Row-wise softmax in float64: exp(x - max(x)) / sum(exp(x - max(x))) per row."""
    x = v["X"].reshape(p.rows, p.cols)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).ravel()


# A correct softmax kernel (f32 math, Triton's fused-softmax tutorial: rocke_aot/kernels/triton_softmax.py):
# x - max is exact (two 16-bit values in f32); exp is the hardware's approximation (NVIDIA
# ex2.approx: 2 ulp of f32 after the log2(e) scaling's rounding; AMD v_exp_f32: 1 ulp), so 2^-21
# relative per element; the row sum of ``cols`` such terms adds Higham's gamma_cols and their own
# 2^-21; the division one f32 rounding. Relative to each output: 2^-20 + cols * 2^-24 + 2^-24,
# then one rounding to the output dtype.
SOFTMAX_EXP_REL = 2.0**-21


def _softmax_bound(p: Any, v: Mapping[str, np.ndarray], ref: np.ndarray, out_dtype: str) -> np.ndarray:
    u = 2.0**-24
    rel = 2 * SOFTMAX_EXP_REL + p.cols * u / (1 - p.cols * u) + u
    a = np.abs(ref)
    return rel * a + U_OUT[out_dtype] * (a + rel * a) + 2.0**-25


@dataclass(frozen=True)
class Semantics:
    output: str  # the argument the kernel writes
    reference: Callable[[Any, Mapping[str, np.ndarray]], np.ndarray]
    flops: Callable[[Any], int] | None
    terms: Callable[[Any], int] | None  # products summed into one output element
    error_bound: Callable[[Any, Mapping[str, np.ndarray], np.ndarray, str], np.ndarray] | None = None
    family: str = ""
    # the family's own values for an input that is not uniform data (Reference.inputs), or None
    inputs: Callable[[Any, str, str, int, np.random.Generator], Any] | None = None

    def expected(self, problem: Any, values: Mapping[str, np.ndarray], out_dtype: str) -> tuple[np.ndarray, np.ndarray]:
        """(the exact output, flat float64; the largest error per element of a correct kernel)."""
        want = np.asarray(self.reference(problem, values), dtype=np.float64).ravel()
        if self.error_bound is not None:
            lim = np.asarray(self.error_bound(problem, values, want, out_dtype), dtype=np.float64)
            if lim.shape not in ((), want.shape):
                raise SpecError(f"the reference bound of {self.family} has shape {lim.shape}, its output {want.shape}")
            return want, np.broadcast_to(lim, want.shape)
        want_abs = np.asarray(self.reference(problem, {n: np.abs(v) for n, v in values.items()}),
                              dtype=np.float64).ravel()
        return want, bound(want_abs, want, self.terms(problem), out_dtype)


SEMANTICS: Mapping[str, Semantics] = {
    "gemm": Semantics("C", _gemm, lambda p: 2 * p.m * p.n * p.k, lambda p: p.k, family="gemm"),
    "conv_direct_fwd": Semantics(
        "Y", _conv_fwd, lambda p: 2 * p.n * p.out_hw[0] * p.out_hw[1] * p.k * p.r * p.s * p.c,
        lambda p: p.r * p.s * p.c, family="conv_direct_fwd"),
    "conv_dgrad_patch": Semantics(
        "dX", _dgrad_patch, lambda p: 2 * p.n * (p.h // p.p) * (p.w // p.p) * p.k * p.p * p.p * p.c,
        lambda p: p.k, family="conv_dgrad_patch"),
    # what triton_softmax computes (its TritonKernel names "softmax"): no flops (not a sum of products)
    "softmax": Semantics("Y", _softmax, None, None, _softmax_bound, family="softmax"),
}


def reference_of(family: str) -> str:
    """What the family computes, as SEMANTICS names it: a Triton family says which
    (triton_matmul computes gemm's C = A x B); every other family is its own."""
    from rocke_aot.variants.families import get_family

    kernel = getattr(get_family(family).spec_type, "KERNEL", None)
    ref = getattr(kernel, "reference", "")
    return ref if isinstance(ref, str) and ref else family  # a Reference object is the family's own


def semantics(family: str) -> Semantics:
    """What ``family`` computes (module doc): its own Reference, else the one it names."""
    from rocke_aot.variants.families import get_family

    ref = get_family(family).reference
    if ref is not None:
        return Semantics(ref.output, ref.compute, ref.flops, ref.terms, ref.bound, family, ref.inputs)
    name = reference_of(family)
    try:
        return SEMANTICS[name]
    except KeyError:
        raise SpecError(f"the runner has no reference for family {family!r} (built in: {', '.join(SEMANTICS)}): "
                        f"declare what it computes, Family(..., reference=Reference(output, compute, flops, "
                        f"terms= or bound=)), rocke_aot.variants.families (docs/plugins.md)") from None
