"""What each family computes, for checking and counting: references, flops, error bounds.

    inputs(dtype, count, rng)      -> (storage bits for the device, exact float64 values)
    decode(bits, dtype)            -> float64 values of f32 / f16 / bf16 storage
    semantics(family) -> Semantics, from the first that has one:
        the family's own Reference (variants/families.py Family.reference: a plugin declares
            its numpy / torch reference there, and so do rocke-aot's family folders:
            rocke_aot/families/<name>/reference.py)
        the Reference of the family it names (reference_of: a Triton family names what it
            computes, triton_matmul -> gemm)
        else SpecError naming the family and how to declare one
    Semantics.expected(problem, {arg: float64 values}, out_dtype) -> (float64 output, flat;
        the largest error a correct kernel makes per element): .terms(problem) (products summed
        into one output: bound() below), or the family's own bound(problem, inputs, ref, dtype)
    Semantics.reference / .flops(problem) (None: no TFLOP/s)
    bound(ref_abs, terms, out_dtype) -> elementwise error bound of a sum of products

The launch is data (the artifact's launch contract); what the numbers MEAN is per family,
and lives with the family (its Reference), run here, beside nothing that launches. References run
in float64: rocke-aot's own (gemm, the conv families) in torch (on the GPU when there is one)
where torch is installed, numpy otherwise.

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

from rocke_aot.dtypes import UNIT_ROUNDOFF as U_OUT
from rocke_aot.errors import SpecError


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
        if self.terms is None:
            raise SpecError(f"the reference of {self.family} has neither an error bound nor terms to bound it by")
        want_abs = np.asarray(self.reference(problem, {n: np.abs(v) for n, v in values.items()}),
                              dtype=np.float64).ravel()
        return want, bound(want_abs, want, self.terms(problem), out_dtype)


def reference_of(family: str) -> str:
    """What the family computes, by the family whose Reference it uses: a Triton family says which
    (triton_matmul computes gemm's C = A x B); every other family is its own."""
    from rocke_aot.variants.families import get_family

    kernel = getattr(get_family(family).spec_type, "KERNEL", None)
    ref = getattr(kernel, "reference", "")
    return ref if isinstance(ref, str) and ref else family  # a Reference object is the family's own


def semantics(family: str) -> Semantics:
    """What ``family`` computes (module doc): its own Reference, else the one it names."""
    from rocke_aot.variants.families import family_names, get_family

    ref = get_family(family).reference
    if ref is not None:
        return Semantics(ref.output, ref.compute, ref.flops, ref.terms, ref.bound, family, ref.inputs)
    name = reference_of(family)
    named = get_family(name).reference if name != family and name in family_names() else None
    if named is not None:  # the family it names declares it (triton_matmul -> gemm's folder)
        return Semantics(named.output, named.compute, named.flops, named.terms, named.bound, name, named.inputs)
    raise SpecError(f"the runner has no reference for family {family!r}: declare what it computes, "
                    f"Family(..., reference=Reference(output, compute, flops, terms= or bound=)), "
                    f"rocke_aot.variants.families (docs/plugins.md)")
