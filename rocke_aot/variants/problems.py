"""Problems: the runtime shapes a kernel is asked to run, as frozen values.

    GemmProblem(m, n, k, dtype="f16", out_dtype=None, batch=1)
    ConvProblem(n, h, w, c, k, r, s, stride_h/w, pad_h/w, dil_h/w, dtype)     .out_hw
    PatchDgradProblem(n, h, w, c, k, p, dtype)                              .hp, .wp
    (which family takes which problem, and parsing one from JSON: variants/families.py)

Validated on construction (ints are ints, extents positive and at most MAX_EXTENT), so the efficiency
models never see a malformed problem.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from rocke_aot.dtypes import DTYPES, MAX_EXTENT
from rocke_aot.errors import SpecError

_DTYPES = DTYPES


def _validate(obj: Any, positive: tuple[str, ...], non_negative: tuple[str, ...] = ()) -> None:
    what = type(obj).__name__
    for f in fields(obj):
        v = getattr(obj, f.name)
        if f.name in ("dtype", "out_dtype"):
            if v is None and f.name == "out_dtype":
                continue
            if v not in _DTYPES:
                raise SpecError(f"{what}.{f.name} must be one of {_DTYPES}, got {v!r}")
            continue
        if type(v) is not int:
            raise SpecError(f"{what}.{f.name} must be an int, got {v!r}")
        if v > MAX_EXTENT:  # before any arithmetic: a 400-digit extent is refused, not ranked
            raise SpecError(f"{what}.{f.name} must be <= 2**40 (MAX_EXTENT), got a {v.bit_length()}-bit value")
        if f.name in positive and v < 1:
            raise SpecError(f"{what}.{f.name} must be >= 1, got {v}")
        if f.name in non_negative and v < 0:
            raise SpecError(f"{what}.{f.name} must be >= 0, got {v}")


def out_extent(size: int, filt: int, stride: int, pad: int, dil: int) -> int:
    """Output positions of a convolution along one axis (0 when the filter does not fit)."""
    return max((size + 2 * pad - dil * (filt - 1) - 1) // stride + 1, 0)


@dataclass(frozen=True)
class GemmProblem:
    m: int
    n: int
    k: int
    dtype: str = "f16"
    out_dtype: str | None = None  # None: any output dtype will do
    batch: int = 1

    def __post_init__(self) -> None:
        _validate(self, ("m", "n", "k", "batch"))
        # No gemm kernel has a batch dimension (grid or strides): a batch > 1 would run the
        # first matrix only, so it is refused here, before it can reach a ranking or a launch.
        if self.batch != 1:
            raise SpecError(f"GemmProblem.batch={self.batch}: batched gemm is not launched (the kernels "
                            f"have no batch dimension); launch batch=1 problems, one per matrix")


@dataclass(frozen=True)
class ConvProblem:
    n: int
    h: int
    w: int
    c: int
    k: int
    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    dtype: str = "f16"

    def __post_init__(self) -> None:
        _validate(self, ("n", "h", "w", "c", "k", "r", "s", "stride_h", "stride_w", "dil_h", "dil_w"),
                  ("pad_h", "pad_w"))

    @property
    def out_hw(self) -> tuple[int, int]:
        return (out_extent(self.h, self.r, self.stride_h, self.pad_h, self.dil_h),
                out_extent(self.w, self.s, self.stride_w, self.pad_w, self.dil_w))


@dataclass(frozen=True)
class PatchDgradProblem:
    """dX of a patch embedding: dY is [n, h//p, w//p, k], dX is [n, h, w, c]."""

    n: int
    h: int
    w: int
    c: int
    k: int
    p: int
    dtype: str = "f16"

    def __post_init__(self) -> None:
        _validate(self, ("n", "h", "w", "c", "k", "p"))

    @property
    def hp(self) -> int:
        return self.h // self.p

    @property
    def wp(self) -> int:
        return self.w // self.p
