"""The gemm family's variant table (GemmSpec itself lives in spec.py beside it).

    baked   (in_dtype, out_dtype)
    knobs   block_m, block_n, block_k, waves, double_buffer, vector_width, path
            (mma = "auto": the arch's default instruction for the path)
            where the lane can emit the sm_90 asynchronous pipeline (async-copy:sm_90), also
            the AMD matrix paths (mfma, wmma) fold b_lds "nk" and vector_width 8 into every point
            (AMD_MATRIX: issue 37): B transposed in LDS makes every B fragment read one
            ds_read_b64 / b128 instead of element reads (ds_read_u16), staged as 4-byte pairs of K
            rows (ds_write2_b32), and 16-byte global loads; the main loop that serves them is
            lower_registers.py build_amd (docs/lowering.md "The AMD main loop"). fma keeps
            "kn" and 4.
            Also, stages in (0, 3): stages 3 is its own sub-grid (make_spec): mma path, blocks of
            64..256 (at most 128 x 256 elements), 4 or 8 warps, vector_width 8, tile order
            group_m 8, double_buffer folded (one point per tile, not two); stages 0 keeps the
            register-staged grid as it was (blocks up to 128, 2 or 4 waves); a warp's tile at
            most 64 x 64 (no spills); 192 only in 192 x 128 and 128 x 192 (WAVE_FILL_TILES). Stages 3 and
            group_m 8 are the sweep's choice (bench/gemm_async_h200.py: the best of 2, 3, 4
            stages was within 3 % of 3 on every problem, docs/gpu.md)
            Also, split_k in (1, 2, 4) on the asynchronous 128 x 128 tiles (ASYNC_SPLIT_KS: split-K,
            GemmSpec.split_k), 1 everywhere else
            Also, where the lane has wgmma:sm_90a, wgmma in (False, True): True is the warpgroup
            pipeline's own sub-grid (WGMMA_TILES, _make_wgmma)

Every point goes through GemmSpec's own checks (construction, then
``geometry(target)``: threads, instruction tiling, LDS), so the grid holds only
specs that lower.

``baked_for(problem)``: a problem that names its output dtype needs (dtype, out_dtype);
``build --problems`` crosses a pair the defaults lack with the same knobs. A problem that
takes any output (out_dtype None) is served from the default pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.families.gemm.spec import ASYNC_VECTOR, GemmSpec
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.variants.table import SERVE, FamilyTable, Serve
from rocke_aot.variants.tables._common import matrix_paths

_DTYPES: tuple[Mapping[str, Any], ...] = (
    dict(in_dtype="f16", out_dtype="f32"),
    dict(in_dtype="f16", out_dtype="f16"),
    dict(in_dtype="bf16", out_dtype="bf16"),
)


def _baked(target: Target, lane: Lane) -> tuple[Mapping[str, Any], ...]:
    return _DTYPES


def _async(target: Target, lane: Lane) -> bool:
    return target.info.matrix_unit == "mma" and lane.profile.has("async-copy:sm_90")


def _knobs(baked: Mapping[str, Any], target: Target, lane: Lane) -> dict[str, tuple]:
    if not _async(target, lane):
        return {"block_m": (32, 64, 128), "block_n": (32, 64, 128), "block_k": (32, 64),
                "waves": (2, 4), "double_buffer": (False, True), "vector_width": (4,)}
    knobs = {"block_m": (32, 64, 128, 192, 256), "block_n": (32, 64, 128, 192, 256), "block_k": (32, 64),
             "waves": (2, 4, 8), "double_buffer": (False, True), "vector_width": (4,), "stages": (0, ASYNC_STAGES),
             "split_k": ASYNC_SPLIT_KS}
    if lane.profile.has("wgmma:sm_90a"):
        knobs["wgmma"] = (False, True)
    return knobs


ASYNC_STAGES, ASYNC_GROUP_M = 3, 8
# The AMD matrix paths' layout and load width (issue 37, docs/lowering.md "The AMD main loop"):
# per 128x128x32 step on gfx942 (llvm22) the interior loop went from 157 instructions, 24 waits,
# 32 ds_read_u16 (kn, vector_width 4) to 67, 6 and none (bench/gemm_amd_isa.py).
AMD_MATRIX_PATHS = ("mfma", "wmma")
AMD_MATRIX = {"b_lds": "nk", "vector_width": 8}
# split-K on the 128 x 128 asynchronous tiles only: where few output tiles meet a long K
# (128x4096x14336: 32 tiles on 132 SMs) and where 128 x 128 tiles quantize into waves badly
# (3072^3: 2.2 waves -> 4.4 at split 2); the smaller tiles already make more work-groups, the
# larger ones hold too many accumulators to pay for a second pass. +24 specs a lane on sm_90.
ASYNC_SPLIT_KS = (1, 2, 4)
SPLIT_K_TILE = (128, 128)
MAX_WARP_TILE = 64 * 64
# The non-power-of-two tiles (GemmSpec WAVE_FILL_BLOCKS): 192 x 128 over 8 warps of 48 x 64 and
# 128 x 192 over 8 warps of 64 x 48 (B copied in panels), for problems the power-of-two tiles
# quantize badly onto 132 SMs: 3072^3 makes 384 of either, 2.9 waves at one CTA/SM, where
# 256 x 128 and 128 x 128 make 2.18, three rounds (0.45 -> 0.56x torch.matmul, H200 run 19);
# 256x11008x4096 makes 116 of 128 x 192, one wave, where 256 x 128 makes 172, two (0.0764 ->
# 0.0631 ms, run 19). 3 stages take 132 KiB (block_k 64) or 71 KiB (32) of shared memory, 196-204
# registers, no spills. 192 x 64 is in the sweep only (bench/gemm_async_h200.py); 192 x 256's warp
# tile is past MAX_WARP_TILE at 8 warps. +4 specs a dtype pair, 12 a lane.
WAVE_FILL_TILES = ((192, 128), (128, 192))


# The warpgroup pipeline (GemmSpec.wgmma: cp.async into 128-byte swizzled stages, wgmma.mma_async
# from shared memory, sm_90a): its tiles and warps, block_k 64 (one swizzle row), WGMMA_STAGES
# stages, group_m 8, split_k (1, 2, 4) on 128 x 128 as the mma.sync grid's.
WGMMA_TILES = ((128, 256, 8), (256, 128, 8), (128, 128, 8), (128, 128, 4), (64, 128, 4), (128, 64, 4),
               (64, 256, 4), (128, 192, 8))
WGMMA_STAGES = 4


def _make_wgmma(baked: Mapping[str, Any], k: dict[str, Any]) -> GemmSpec:
    bm, bn, w = k["block_m"], k["block_n"], k["waves"]
    if (bm, bn, w) not in WGMMA_TILES or k["block_k"] != 64 or k["stages"] != ASYNC_STAGES or k["double_buffer"] \
            or k["path"] != "mma":
        raise SpecError("the wgmma grid is " + ", ".join(f"{m}x{n} w{x}" for m, n, x in WGMMA_TILES)
                        + f", block_k 64, one point per tile (stages {WGMMA_STAGES})")
    k.update(vector_width=ASYNC_VECTOR, group_m=ASYNC_GROUP_M, stages=WGMMA_STAGES)
    return GemmSpec(**baked, **k)


def _baked_for(problem: Any) -> dict[str, Any] | None:
    if problem.out_dtype is None:
        return None
    return dict(in_dtype=problem.dtype, out_dtype=problem.out_dtype)


def _make(baked: Mapping[str, Any], knobs: Mapping[str, Any]) -> GemmSpec:
    k = dict(knobs)
    bm, bn, w = k["block_m"], k["block_n"], k["waves"]
    if k.get("wgmma"):
        if k.get("split_k", 1) > 1 and (bm, bn) != SPLIT_K_TILE:
            raise SpecError(f"split_k is in the {SPLIT_K_TILE[0]}x{SPLIT_K_TILE[1]} tiles only")
        return _make_wgmma(baked, k)
    if k.get("split_k", 1) > 1 and (not k.get("stages") or (bm, bn) != SPLIT_K_TILE):
        raise SpecError(f"split_k is in the asynchronous grid's {SPLIT_K_TILE[0]}x{SPLIT_K_TILE[1]} tiles only")
    if not k.get("stages"):
        if max(bm, bn) > 128 or w > 4:
            raise SpecError("the register-staged grid stops at 128-wide blocks and 4 waves (stages=0)")
        if k["path"] in AMD_MATRIX_PATHS:
            k.update(AMD_MATRIX)
        return GemmSpec(**baked, **k)
    if 192 in (bm, bn) and (bm, bn) not in WAVE_FILL_TILES:
        raise SpecError("the asynchronous grid's 192-wide tiles are "
                        + " and ".join(f"{m}x{n}" for m, n in WAVE_FILL_TILES) + " only")
    if k["path"] != "mma" or k["double_buffer"] or w < 4 or min(bm, bn) < 64 or bm * bn > 128 * 256:
        raise SpecError("the asynchronous grid (stages=3) is mma, 64..256-wide blocks up to 128 x 256, "
                        "4 or 8 warps, one point per tile (double_buffer folded)")
    if bm * bn // w > MAX_WARP_TILE:
        # 128 f32 accumulators a lane, plus fragments and addresses: more spilled in the sweep
        # (ptxas: 128x256 and 256x128 over 4 warps, 560-1580 bytes of spill stores)
        raise SpecError(f"the asynchronous grid keeps a warp's tile at most {MAX_WARP_TILE} elements "
                        f"({bm}x{bn} over {w} warps is {bm * bn // w})")
    k.update(vector_width=ASYNC_VECTOR, group_m=ASYNC_GROUP_M)
    return GemmSpec(**baked, **k)


GEMM = FamilyTable(
    family="gemm",
    lane_decisions={"llvm20": SERVE, "llvm22": SERVE, "llvm23": SERVE,
                    "llvm24": Serve("the LLVM 24 AMDGPU code generator; no NVPTX, so sm_90 is refused there")},
    baked=_baked,
    knobs=_knobs,
    make_spec=_make,
    check=lambda spec, target: spec.geometry(target),
    spec_from_dict=GemmSpec.from_dict,
    paths=matrix_paths,
    baked_for=_baked_for,
)
