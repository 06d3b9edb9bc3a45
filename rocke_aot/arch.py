"""Arch data: the one table of per-processor facts (wave size, LDS, CUs, limits).

Every figure carries its source (``ArchInfo.sources``: field -> where it comes
from). The lowering (wave size, LDS), the code-object validator (wave size,
LDS, register limits), the variant tables (admission: matrix unit, LDS and
register budgets) and the tile-efficiency models (CU count) all read this
table; nothing else holds these numbers.

    ARCHES["gfx942"] -> ArchInfo(wave_size=64, lds_bytes=65536, cu_count=304, ...)
        .sources["lds_bytes"] -> "LLVM AMDGPUBaseInfo getAddressableLocalMemorySize ..."

Register limits are per lane of one wave: the VGPRs one wave may address (on
gfx90a+ the unified file holds VGPRs and AGPRs together, 512 per lane) and the
addressable SGPRs; for NVIDIA, registers per thread.

Occupancy facts (rocke_aot/candidates.py occupancy(), groups_per_cu()):
    AMD     max_waves_per_simd, vgpr_alloc_granule, simds_per_cu, sgpr_limits_occupancy
            (LLVM's AMDGPUBaseInfo / GCNSubtarget model); LDS per CU = lds_bytes
    NVIDIA  the CUDA occupancy calculator's (cuda_occupancy.h) per-SM figures: a "SIMD" is an
            SM sub-partition (simds_per_cu = 4, max_waves_per_simd = 64 warps / 4), plus
            regs_per_cu, reg_alloc_granule (per warp), regs_per_group, lds_per_cu,
            lds_alloc_granule, lds_reserved_per_group, max_groups_per_cu, barriers_per_cu
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from rocke_aot.errors import SpecError

_LLVM_LDS = (
    "LLVM AMDGPUBaseInfo getAddressableLocalMemorySize: 65536 for gfx7+, 163840 for gfx950, "
    "327680 for gfx1250 (AMDGPUUsage 'LDS size' per work-group)"
)
_LLVM_SGPR_GFX9 = "LLVM AMDGPUUsage DWARF register map: SGPR0-SGPR101 addressable on GFX9 (102)"
_LLVM_SGPR_GFX10 = "LLVM AMDGPUUsage DWARF register map: SGPR0-SGPR105 addressable on GFX10+ (106)"
_SPECIALS_GFX9 = (
    "LLVM AMDGPUBaseInfo getNumExtraSGPRs: VCC (2) + FLAT_SCRATCH and XNACK_MASK (6 in all) on "
    "GFX8/9 (llvm MC test: gfx90a extrasgpr_flatscr 6), counted in the metadata .sgpr_count"
)
_SPECIALS_GFX10 = "LLVM AMDGPUBaseInfo getNumExtraSGPRs: only VCC (2) on GFX10+"
_CUDA_CC90 = ("NVIDIA CUDA C++ Programming Guide, 'Compute Capabilities', technical specifications "
              "per compute capability, column 9.0")
_HOPPER = "NVIDIA Hopper Tuning Guide (CUDA 12/13), 'Occupancy' and 'Unified Shared Memory/L1/Texture Cache'"
_OCC_H = "CUDA 13.0 include/cuda_occupancy.h (the occupancy calculator the runtime's occupancy API is built on)"
_UNIFIED_VGPR = (
    "AMD CDNA2/CDNA3/CDNA4 ISA guides: 512 unified VGPR+AGPR per lane of a wave64 "
    "(256 ArchVGPRs + 256 AccVGPRs)"
)


@dataclass(frozen=True)
class ArchInfo:
    processor: str
    family: str  # LLVM target family: "amdgcn" or "nvptx64"
    wave_size: int
    lds_bytes: int  # most LDS / shared memory one work-group may allocate
    cu_count: int  # compute units (AMD) or SMs (NVIDIA) of the reference product
    max_vgprs: int  # VGPRs per lane one wave may address (AMD, unified with AGPRs); regs/thread (NVIDIA)
    max_sgprs: int  # addressable SGPRs per wave (AMD); 0 for NVIDIA
    has_agprs: bool  # accumulation VGPRs (gfx90a+ MFMA), counted with VGPRs in a unified file
    target_features: tuple[str, ...]  # target-ID features the processor accepts (sramecc, xnack)
    product: str
    matrix_unit: str | None = None  # "mfma" (gfx9), "wmma" (gfx1250), "mma" (sm_90 mma.sync), None
    max_block: int = 1024  # most work-items per work-group
    static_lds_bytes: int | None = None  # static allocation limit when below lds_bytes (CUDA: 48 KiB)
    sgpr_specials: int = 0  # special SGPRs (VCC, FLAT_SCRATCH, XNACK_MASK) metadata .sgpr_count adds
    # Occupancy facts (rocke_aot/candidates.py occupancy(), groups_per_cu(); 0 = not modelled):
    max_waves_per_simd: int = 0  # waves one SIMD (EU) holds at most; NVIDIA: warps per SM sub-partition
    vgpr_alloc_granule: int = 0  # AMD: VGPRs are allocated to a wave in blocks of this many
    simds_per_cu: int = 0  # SIMDs sharing one CU's LDS; NVIDIA: sub-partitions of an SM
    sgpr_limits_occupancy: bool = False  # GFX8/9: the per-SIMD SGPR file caps waves (GFX10+: no)
    # NVIDIA only (the CUDA occupancy calculator's model; 0 = AMD, not modelled this way):
    regs_per_cu: int = 0  # 32-bit registers per SM, split evenly over its sub-partitions
    reg_alloc_granule: int = 0  # a warp gets regs/thread x warp size registers, rounded up to this
    regs_per_group: int = 0  # most registers one block may hold
    lds_per_cu: int = 0  # shared memory per SM (0: lds_bytes is the per-CU figure, as on AMD)
    lds_alloc_granule: int = 0  # a block's shared memory is allocated in units of this many bytes
    lds_reserved_per_group: int = 0  # shared memory the system reserves per block on top of the kernel's
    max_groups_per_cu: int = 0  # resident blocks per SM (AMD: not modelled, see candidates.py)
    barriers_per_cu: int = 0  # named-barrier slots per SM shared by resident blocks (0: not modelled)
    sources: Mapping[str, str] = field(default_factory=dict)  # field name -> source of the figure

    @property
    def source(self) -> str:
        """Every source, one line per figure (for display)."""
        return "; ".join(f"{k}: {v}" for k, v in sorted(self.sources.items()))

    @property
    def max_sgpr_count(self) -> int:
        """The most SGPRs a code object's metadata ``.sgpr_count`` may report (it counts the
        special SGPRs on top of the addressable ones)."""
        return self.max_sgprs + self.sgpr_specials

    @property
    def cu_lds_bytes(self) -> int:
        """Shared memory / LDS one CU (SM) holds for all its resident work-groups."""
        return self.lds_per_cu or self.lds_bytes

    @property
    def static_lds_limit(self) -> int:
        """The most static LDS / shared memory a kernel of this table may declare."""
        return self.lds_bytes if self.static_lds_bytes is None else self.static_lds_bytes


def _src(**kw: str) -> Mapping[str, str]:
    return MappingProxyType(dict(kw))


ARCHES: Mapping[str, ArchInfo] = MappingProxyType(
    {
        "gfx90a": ArchInfo(
            "gfx90a", "amdgcn", 64, 64 * 1024, 110, 512, 102, True, ("sramecc", "xnack"),
            "AMD Instinct MI250X (one GCD)", "mfma",
            sgpr_specials=6, max_waves_per_simd=8, vgpr_alloc_granule=8, simds_per_cu=4,
            sgpr_limits_occupancy=True,
            sources=_src(
                wave_size="AMD CDNA2 ISA guide: wave64",
                lds_bytes=_LLVM_LDS,
                cu_count="AMD Instinct MI250X data sheet: 220 CUs over two GCDs, 110 per GCD",
                max_vgprs=_UNIFIED_VGPR,
                max_sgprs=_LLVM_SGPR_GFX9,
                sgpr_specials=_SPECIALS_GFX9,
                matrix_unit="AMD CDNA2 ISA guide: MFMA (v_mfma_f32_32x32x8f16, ...)",
                max_waves_per_simd="LLVM AMDGPUBaseInfo getMaxWavesPerEU: 8 on gfx90a-class (GFX90AInsts)",
                vgpr_alloc_granule="LLVM AMDGPUBaseInfo getVGPRAllocGranule: 8 with GFX90AInsts",
                simds_per_cu="AMD CDNA ISA guides: 4 SIMDs per CU",
                sgpr_limits_occupancy="LLVM GCNSubtarget getOccupancyWithNumSGPRs: GFX8/9 table",
                max_block="LLVM AMDGPUUsage: amdgpu-flat-work-group-size at most 1024",
            ),
        ),
        "gfx942": ArchInfo(
            "gfx942", "amdgcn", 64, 64 * 1024, 304, 512, 102, True, ("sramecc", "xnack"),
            "AMD Instinct MI300X", "mfma",
            sgpr_specials=6, max_waves_per_simd=8, vgpr_alloc_granule=8, simds_per_cu=4,
            sgpr_limits_occupancy=True,
            sources=_src(
                wave_size="AMD CDNA3 ISA guide: wave64",
                lds_bytes=_LLVM_LDS,
                cu_count="AMD Instinct MI300X data sheet: 304 CUs",
                max_vgprs=_UNIFIED_VGPR,
                max_sgprs=_LLVM_SGPR_GFX9,
                sgpr_specials=_SPECIALS_GFX9,
                matrix_unit="AMD CDNA3 ISA guide: MFMA; measured: mfma.f32.32x32x8f16 compiles on LLVM 20 and 22",
                max_waves_per_simd="LLVM AMDGPUBaseInfo getMaxWavesPerEU: 8 on gfx90a-class (GFX90AInsts)",
                vgpr_alloc_granule="LLVM AMDGPUBaseInfo getVGPRAllocGranule: 8 with GFX90AInsts",
                simds_per_cu="AMD CDNA ISA guides: 4 SIMDs per CU",
                sgpr_limits_occupancy="LLVM GCNSubtarget getOccupancyWithNumSGPRs: GFX8/9 table",
                max_block="LLVM AMDGPUUsage: amdgpu-flat-work-group-size at most 1024",
            ),
        ),
        "gfx950": ArchInfo(
            "gfx950", "amdgcn", 64, 160 * 1024, 256, 512, 102, True, ("sramecc", "xnack"),
            "AMD Instinct MI355X", "mfma",
            sgpr_specials=6, max_waves_per_simd=8, vgpr_alloc_granule=8, simds_per_cu=4,
            sgpr_limits_occupancy=True,
            sources=_src(
                wave_size="AMD CDNA4 ISA guide: wave64",
                lds_bytes=_LLVM_LDS,
                cu_count="AMD Instinct MI355X data sheet: 256 CUs",
                max_vgprs=_UNIFIED_VGPR,
                max_sgprs=_LLVM_SGPR_GFX9,
                sgpr_specials=_SPECIALS_GFX9,
                matrix_unit="AMD CDNA4 ISA guide: MFMA incl. 32x32x16 f16/bf16 (gfx950 only)",
                max_waves_per_simd="LLVM AMDGPUBaseInfo getMaxWavesPerEU: 8 on gfx90a-class (GFX90AInsts)",
                vgpr_alloc_granule="LLVM AMDGPUBaseInfo getVGPRAllocGranule: 8 with GFX90AInsts",
                simds_per_cu="AMD CDNA ISA guides: 4 SIMDs per CU",
                sgpr_limits_occupancy="LLVM GCNSubtarget getOccupancyWithNumSGPRs: GFX8/9 table",
                max_block="LLVM AMDGPUUsage: amdgpu-flat-work-group-size at most 1024",
            ),
        ),
        "gfx1250": ArchInfo(
            "gfx1250", "amdgcn", 32, 320 * 1024, 256, 1024, 106, False, ("xnack",),
            "AMD gfx1250 (GFX12.5)", "wmma",
            sgpr_specials=2, max_waves_per_simd=16, vgpr_alloc_granule=16, simds_per_cu=2,
            sources=_src(
                wave_size="LLVM AMDGPUUsage: gfx1250 is wave32 only",
                lds_bytes=_LLVM_LDS,
                cu_count="assumed equal to gfx950 (256) until a product data sheet is public",
                max_vgprs="LLVM AMDGPUUsage DWARF register map (llvm-project PR 159447): "
                          "VGPR0-VGPR1023 in wave32 on GFX1250",
                max_sgprs=_LLVM_SGPR_GFX10,
                sgpr_specials=_SPECIALS_GFX10,
                matrix_unit="measured: llvm.amdgcn.wmma.f32.16x16x32.f16 compiles for gfx1250 on LLVM 22 only",
                max_waves_per_simd="LLVM AMDGPUBaseInfo getMaxWavesPerEU: 16 on GFX10.3+ (gfx1250 assumed to follow)",
                vgpr_alloc_granule="LLVM AMDGPUBaseInfo getVGPRAllocGranule: 16 for wave32 on GFX10.3+ "
                                   "(gfx1250 assumed to follow)",
                simds_per_cu="RDNA CU mode: 2 SIMD32 per CU (gfx1250 assumed to follow)",
                max_block="LLVM AMDGPUUsage: amdgpu-flat-work-group-size at most 1024",
            ),
        ),
        "sm_90": ArchInfo(
            "sm_90", "nvptx64", 32, 227 * 1024, 132, 255, 0, False, (),
            "NVIDIA H200 SXM", "mma", 1024, 48 * 1024,
            max_waves_per_simd=16, simds_per_cu=4, regs_per_cu=64 * 1024, reg_alloc_granule=256,
            regs_per_group=64 * 1024, lds_per_cu=228 * 1024, lds_alloc_granule=128, lds_reserved_per_group=1024,
            max_groups_per_cu=32, barriers_per_cu=64,
            sources=_src(
                wave_size="CUDA C Programming Guide: warp size 32",
                lds_bytes="CUDA C Programming Guide, compute capability 9.0: 227 KiB shared memory "
                          "per block (dynamic, opt-in)",
                static_lds_bytes="CUDA C Programming Guide: static shared memory is limited to 48 KiB "
                                 "per block; more needs dynamic shared memory and an opt-in",
                cu_count="NVIDIA H200 SXM data sheet: 132 SMs",
                max_vgprs="CUDA C Programming Guide, compute capability 9.0: 255 registers per thread",
                max_block="CUDA C Programming Guide: 1024 threads per block",
                matrix_unit="PTX ISA: warp-level mma.sync m16n8k16 f16/bf16 (sm_80+); measured: "
                            "llvm.nvvm.mma.m16n8k16.row.col.f32.f32 / .bf16 select on LLVM 20.1 and 22.1",
                max_waves_per_simd=f"{_CUDA_CC90}: 64 resident warps per SM; {_HOPPER}: 'The maximum number "
                                   "of concurrent warps per SM remains the same as in NVIDIA Ampere GPU "
                                   "architecture (that is, 64)'; over 4 sub-partitions, 16 each",
                simds_per_cu=f"{_OCC_H} cudaOccSubPartitionsPerMultiprocessor: 4 for compute capability 9 "
                             "(registers are allocated per sub-partition)",
                regs_per_cu=f"{_CUDA_CC90}: 64K 32-bit registers per SM; {_HOPPER}: 'The register file size "
                            "is 64K 32-bit registers per SM'",
                reg_alloc_granule=f"{_OCC_H} cudaOccRegAllocationGranularity: 256 (registers are allocated "
                                  "to warps: regs/thread x 32 rounded up to 256)",
                regs_per_group=f"{_CUDA_CC90}: 64K 32-bit registers per thread block",
                lds_per_cu=f"{_CUDA_CC90}: 228 KB shared memory per SM; {_HOPPER}: 'shared memory "
                           "capacity per SM is 228 KB'; measured on an H200 (driver 580): "
                           "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 233472",
                lds_alloc_granule=f"{_OCC_H} cudaOccSMemAllocationGranularity: 128 bytes for compute "
                                  "capability 8-12",
                lds_reserved_per_group=f"{_HOPPER}: 'CUDA reserves 1 KB of shared memory per thread "
                                       "block'; measured on an H200 (driver 580): "
                                       "CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 1024",
                max_groups_per_cu=f"{_CUDA_CC90}: 32 resident blocks per SM; {_HOPPER}: 'The maximum "
                                  "number of thread blocks per SM is 32 for devices of compute capability 9.0'",
                barriers_per_cu=f"{_OCC_H} cudaOccMaxBlocksPerSMBlockBarrierLimit: compute capability 9 has "
                                "2 barriers per resident-block slot (2 x 32); measured on an H200: kernels "
                                "using 3 and 5 barriers reach 21 and 12 blocks of 32 threads per SM",
            ),
        ),
    }
)


def arch_info(processor: str) -> ArchInfo:
    if not isinstance(processor, str):
        raise SpecError(f"a processor must be a string such as 'gfx942', got {processor!r}")
    try:
        return ARCHES[processor]
    except KeyError:
        raise SpecError(
            f"unknown processor {processor!r}; known: {', '.join(ARCHES)}"
        ) from None
