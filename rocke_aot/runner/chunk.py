"""Batch chunking: split a launch whose tensors exceed what a kernel can address.

Kernels index tensors with signed 32-bit byte offsets (the launch contract's
``max_tensor_bytes``, 2**31 - 1). A problem whose split axis (the batch N of a convolution,
the rows M of a gemm) makes some tensor larger than that is run as several launches over
consecutive slices of that axis, each with its pointers offset to the slice start:

    plan_chunks(extent=N, unit_bytes={"x": C*H*W*2, "y": K*P*Q*2}, limit=2**31-1)
        -> (Chunk(start=0, count=c), Chunk(start=c, count=c), ..., Chunk(start=k*c, count=N-k*c))

Every chunk has the same count but the last, which may be smaller (never zero); every
tensor slice of every chunk fits ``limit``. One unit that alone is over the limit cannot be
chunked: a SpecError naming the tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rocke_aot.boundedjson import is_int
from rocke_aot.dtypes import MAX_TENSOR_BYTES
from rocke_aot.errors import SpecError


@dataclass(frozen=True)
class Chunk:
    start: int  # first index along the split axis
    count: int  # indices in this chunk

    def byte_offset(self, unit_bytes: int) -> int:
        return self.start * unit_bytes


def plan_chunks(extent: int, unit_bytes: Mapping[str, int], limit: int = MAX_TENSOR_BYTES) -> tuple[Chunk, ...]:
    """Consecutive chunks of ``extent`` such that count * unit_bytes[t] <= limit for every tensor t."""
    if not is_int(extent) or extent < 0:
        raise SpecError(f"chunking: the split extent must be an int >= 0, got {extent!r}")
    if not isinstance(limit, int) or limit <= 0:
        raise SpecError(f"chunking: the byte limit must be a positive int, got {limit!r}")
    if extent == 0:
        return ()
    per = extent
    for name, ub in unit_bytes.items():
        if not is_int(ub) or ub < 0:
            raise SpecError(f"chunking: bytes per unit of {name!r} must be an int >= 0, got {ub!r}")
        if ub > limit:
            raise SpecError(f"chunking: one unit of tensor {name!r} is {ub} bytes, over the {limit}-byte limit "
                            f"of the kernel's 32-bit offsets; it cannot be split along this axis")
        if ub:
            per = min(per, limit // ub)
    return tuple(Chunk(s, min(per, extent - s)) for s in range(0, extent, per))
