"""Element types every layer names, their sizes, and the addressing limit of the kernels.

    DTYPE_BYTES["f16"] -> 2          the storage size of one element
    POINTEE_BYTES      -> DTYPE_BYTES and the index type i32 (a buffer of indices: an attention
                                     kernel's block table, its cu_seqlens): what a kernel's pointer
                                     argument may point to; a spec or problem names DTYPES only
    UNIT_ROUNDOFF["f16"] -> 2**-11   u of one rounding to the type (half its epsilon): the output
                                     rounding of the references' error bounds (runner/reference.py,
                                     families/triton_softmax/reference.py)
    MAX_TENSOR_BYTES   -> 2**31 - 1  kernels index tensors with signed 32-bit byte offsets,
                                     so a larger tensor is refused up front (or chunked by
                                     a runner), never silently wrapped
    MAX_EXTENT         -> 2**40      the largest value of any problem field (an extent, a
                                     stride, a pad): far above any tensor a GPU holds, low
                                     enough that no model does big-number arithmetic on it;
                                     2**64 or 10**400 is refused (HTTP 422), not ranked
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

DTYPE_BYTES: Mapping[str, int] = MappingProxyType({"f16": 2, "bf16": 2, "f32": 4})
DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)  # every element type a spec or problem may name
POINTEE_BYTES: Mapping[str, int] = MappingProxyType({**DTYPE_BYTES, "i32": 4})
MATRIX_IN_DTYPES: tuple[str, ...] = ("f16", "bf16")  # operand types of the matrix paths
UNIT_ROUNDOFF: Mapping[str, float] = MappingProxyType({"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8})

MAX_TENSOR_BYTES = 2**31 - 1
MAX_EXTENT = 2**40
