"""Field type checks every spec dataclass starts its validation with.

    check_types(spec, "gemm")   each field's value has exactly its annotated type
                                ("str", "int", "bool"), else SpecError naming the field
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from rocke_aot.errors import SpecError

_TYPES = {"str": str, "int": int, "bool": bool}


def check_types(spec: Any, what: str) -> None:
    for f in fields(spec):
        v = getattr(spec, f.name)
        if type(v) is not _TYPES[f.type]:  # bool is not an int here, and 64.0 is not 64
            raise SpecError(f"{what} spec field {f.name} must be {f.type}, got {v!r}")
