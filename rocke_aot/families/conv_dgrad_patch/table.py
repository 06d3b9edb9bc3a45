"""conv_dgrad_patch's variant table: baked patch embeddings x the knob grid, every lane decided.

    baked   dtype, C, P in {4, 14, 16} (the main job's layers below)
    knobs   tile_h, tile_w, r_blk, k_chunk, path

Every point of the product goes through the spec's own checks (construction, then
``geometry(target)``: LDS, threads, whole mma tiles), so the grid holds only specs that lower.
Lane decisions name every registered lane on purpose; a spec one lane's compiler spills is
refused on that lane by name (LANE_SPILL_REFUSALS).

``baked_for(problem)`` names the baked set a PatchDgradProblem needs (dtype, C, P):
``rocke-aot build --problems`` crosses it with the same knob grid (variants/table.py
workload_specs), so a layer the defaults lack gets its own specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.variants.table import SERVE, FamilyTable
from rocke_aot.variants.tables._common import LLVM24_NO_NVPTX, matrix_paths

# Patch embeddings: RGB (C=3) at the three patch sizes, a C=4 /14, and a bf16 /16.
_PATCH_LAYERS: tuple[Mapping[str, Any], ...] = (
    dict(dtype="f16", c=3, p=4),
    dict(dtype="f16", c=3, p=14),
    dict(dtype="f16", c=3, p=16),
    dict(dtype="f16", c=4, p=14),
    dict(dtype="bf16", c=3, p=16),
)


def _patch_baked(target: Target, lane: Lane) -> tuple[Mapping[str, Any], ...]:
    return _PATCH_LAYERS


def _patch_knobs(baked: Mapping[str, Any], target: Target, lane: Lane) -> dict[str, tuple]:
    p = baked["p"]
    return {"tile_h": (2, 4), "tile_w": (4, 8), "r_blk": tuple(d for d in range(1, p + 1) if p % d == 0),
            "k_chunk": (16, 32)}


def _patch_baked_for(problem: Any) -> dict[str, Any]:
    """The baked set a PatchDgradProblem needs: dtype, C, P (ConvDgradPatchSpec.BAKED)."""
    return {name: getattr(problem, name) for name in ConvDgradPatchSpec.BAKED}


def _patch_make(baked: Mapping[str, Any], knobs: Mapping[str, Any]) -> ConvDgradPatchSpec:
    return ConvDgradPatchSpec(**baked, **knobs)


# NVPTX mma.sync (sm_90) keeps k_chunk 16 only. With the padded LDS rows, k_chunk 32 stages
# twice the elements per thread between barriers; ptxas holds them in registers (117-193
# against 72-120 for the same tile at 16) and residency halves. On the H200 (run 5,
# docs/bench.md) the k_chunk 32 kernel ran a median 1.0-1.8x slower than its k_chunk 16
# twin on every problem, and it was the fastest candidate of 1 problem in 12, by 4%: a
# dominated variant that only costs build time and ranking risk. fma keeps both (its k_chunk
# 32 won on small patch-4 problems); the AMD matrix paths keep both (not measured there).
MMA_PATCH_K_CHUNKS = (16,)


def _patch_check(spec: ConvDgradPatchSpec, target: Target) -> None:
    spec.geometry(target)
    if spec.path == "mma" and spec.k_chunk not in MMA_PATCH_K_CHUNKS:
        raise SpecError(f"conv_dgrad_patch grid: mma keeps k_chunk {MMA_PATCH_K_CHUNKS} "
                        f"(k_chunk {spec.k_chunk} measured dominated on sm_90)")


# Specs a lane builds only with VGPR spills to scratch, refused on that lane by name (issue 37: no
# spills on any lane). Measured with each lane's own compiler on the lowered IR, register counts
# and spills from `llvm-readelf-22 --notes` (tests/test_gemm_amd_isa.py test_lane_spill_refusals
# re-measures them). The same IR builds at 164-203 VGPRs with no VGPR spill on llvm22 and llvm24.
LANE_SPILL_REFUSALS: Mapping[str, Mapping[str, str]] = {
    "llvm20": {
        "conv_dgrad_patch_f16_p14c4_mfma_t4x8_r14_kc32":
            "LLVM 20 spills 15 VGPRs to 64 bytes of scratch on gfx90a, gfx942 and gfx950 (B transposed in "
            "LDS; 276 VGPRs / 632 bytes in the [k_chunk][cols] layout before it); llvm22, llvm23 and llvm24 "
            "build it at 226-228 VGPRs, no spill (bench/results/bench-raw/conv-dgrad-b-layout-c-after.jsonl)",
    },
    "llvm23": {
        "conv_dgrad_patch_f16_p14c4_fma_t2x4_r14_kc32":
            "AMD's LLVM 23 spills 155 VGPRs to 624 bytes of scratch on gfx942 and gfx950 (142 / 572 on "
            "gfx90a, 75 / 304 on gfx1250); llvm22 and llvm24 build it at 164-203 VGPRs, no spill",
        "conv_dgrad_patch_f16_p14c3_fma_t2x4_r14_kc32":
            "AMD's LLVM 23 spills 12 VGPRs to 52 bytes of scratch on gfx942 and holds 247-256 VGPRs on "
            "gfx90a, gfx950 and gfx1250 (the limit); llvm22 and llvm24 build it at 179-180 VGPRs, no spill",
    },
}


def _patch_lane_check(spec: ConvDgradPatchSpec, target: Target, lane: Lane) -> None:
    why = LANE_SPILL_REFUSALS.get(lane.name, {}).get(spec.kernel_name)
    if why and target.info.family == "amdgcn":
        raise SpecError(f"{spec.kernel_name} is refused on {lane.name}: {why}")


TABLE = FamilyTable(
    family="conv_dgrad_patch",
    lane_decisions={"llvm20": SERVE, "llvm22": SERVE, "llvm23": SERVE, "llvm24": LLVM24_NO_NVPTX},
    baked=_patch_baked,
    knobs=_patch_knobs,
    make_spec=_patch_make,
    check=_patch_check,
    lane_check=_patch_lane_check,
    spec_from_dict=ConvDgradPatchSpec.from_dict,
    paths=matrix_paths,
    baked_for=_patch_baked_for,
)
