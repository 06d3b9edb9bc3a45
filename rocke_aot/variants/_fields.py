"""Field type checks every spec dataclass starts its validation with.

    check_types(spec, "gemm")   each field's value has exactly its annotated type
                                ("str", "int", "bool"), else SpecError naming the field
    check_known(cls, d, "gemm spec")   d is a mapping of cls's fields only (missing ones may
                                take their defaults), else SpecError naming the extras
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from rocke_aot.errors import SpecError

_TYPES = {"str": str, "int": int, "bool": bool}


def check_types(spec: Any, what: str) -> None:
    for f in fields(spec):
        v = getattr(spec, f.name)
        # the spec modules use `from __future__ import annotations`: every field's type is its name
        if type(v) is not _TYPES[str(f.type)]:  # bool is not an int here, and 64.0 is not 64
            raise SpecError(f"{what} spec field {f.name} must be {f.type}, got {v!r}")


def check_known(cls: Any, d: object, what: str) -> dict[str, Any]:
    """``d`` itself, once it is a mapping of ``cls``'s fields only."""
    if not isinstance(d, dict):
        raise SpecError(f"a {what} must be a mapping, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise SpecError(f"unknown {what} fields {unknown}; known: {sorted(known)}")
    return d
