"""What a compile gives back: the code object and what the tools said on the way."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CompileResult:
    code_object: bytes  # HSACO (AMDGPU) or cubin (NVPTX)
    format: str  # "hsaco" | "cubin"
    log: str = ""  # warnings the tools printed
    ptx: str | None = None  # NVPTX: the PTX the cubin came from
    asm: str | None = None  # textual ISA where the toolchain produced it on the way
    # Kind-specific record fields (the Triton toolchain: its cache entry, under "triton"; and the
    # entry's files, under "triton_files", which the builder stores beside the code object).
    extra: Mapping[str, Any] = field(default_factory=dict)
