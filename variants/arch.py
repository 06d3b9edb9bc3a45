"""Arch data: the one table of per-processor facts (wave size, LDS, CUs, limits).

Every figure carries its source. The lowering (wave size, LDS), the code-object
validator (wave size, LDS), the variant tables (admission) and the
tile-efficiency models (CU count) all read this table; nothing else holds these
numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping


@dataclass(frozen=True)
class ArchInfo:
    processor: str
    family: str  # LLVM target family: "amdgcn" or "nvptx64"
    wave_size: int
    lds_bytes: int  # most LDS / shared memory one work-group may allocate
    cu_count: int  # compute units (AMD) or SMs (NVIDIA) of the reference product
    max_vgprs: int  # architectural VGPRs per lane available to one wave (AMD); regs/thread (NVIDIA)
    max_sgprs: int  # addressable SGPRs per wave (AMD); 0 for NVIDIA
    has_agprs: bool  # accumulation VGPRs (gfx90a+ MFMA), counted with VGPRs in a unified file
    target_features: tuple[str, ...]  # target-ID features the processor accepts (sramecc, xnack)
    product: str
    source: str


ARCHES: Mapping[str, ArchInfo] = MappingProxyType(
    {
        "gfx90a": ArchInfo(
            "gfx90a", "amdgcn", 64, 64 * 1024, 110, 512, 102, True, ("sramecc", "xnack"),
            "AMD Instinct MI250X (one GCD)",
            "AMD CDNA2 ISA guide (LDS 64 KiB per work-group, 512 unified VGPR+AGPR); "
            "MI250X data sheet (220 CUs over two GCDs)",
        ),
        "gfx942": ArchInfo(
            "gfx942", "amdgcn", 64, 64 * 1024, 304, 512, 102, True, ("sramecc", "xnack"),
            "AMD Instinct MI300X",
            "AMD CDNA3 ISA guide (LDS 64 KiB); MI300X data sheet (304 CUs)",
        ),
        "gfx950": ArchInfo(
            "gfx950", "amdgcn", 64, 160 * 1024, 256, 512, 102, True, ("sramecc", "xnack"),
            "AMD Instinct MI355X",
            "AMD CDNA4 ISA guide (LDS 160 KiB per CU); MI355X data sheet (256 CUs)",
        ),
        "gfx1250": ArchInfo(
            "gfx1250", "amdgcn", 32, 320 * 1024, 256, 1024, 106, False, ("xnack",),
            "AMD gfx1250 (GFX12.5)",
            "LLVM AMDGPUUsage (gfx1250: wave32, 320 KiB LDS); CU count: reference "
            "configuration assumed equal to gfx950 until a product sheet is public",
        ),
        "sm_90": ArchInfo(
            "sm_90", "nvptx64", 32, 227 * 1024, 132, 255, 0, False, (),
            "NVIDIA H200 SXM",
            "CUDA C Programming Guide, compute capability 9.0 (227 KiB shared memory per "
            "block, 255 registers per thread); H200 data sheet (132 SMs)",
        ),
    }
)


def arch_info(processor: str) -> ArchInfo:
    from rocke_aot.errors import SpecError

    try:
        return ARCHES[processor]
    except KeyError:
        raise SpecError(
            f"unknown processor {processor!r}; known: {', '.join(ARCHES)}"
        ) from None
