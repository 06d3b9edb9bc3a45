"""The gemm family's variant table (GemmSpec itself lives in variants/gemm.py).

    baked   (in_dtype, out_dtype)
    knobs   block_m, block_n, block_k, waves, double_buffer, vector_width, path
            (mma = "auto": the arch's default instruction for the path)

Every point goes through GemmSpec's own checks (construction, then
``geometry(target)``: threads, instruction tiling, LDS), so the grid holds only
specs that lower.

``baked_for(problem)``: a problem that names its output dtype needs (dtype, out_dtype);
``build --problems`` crosses a pair the defaults lack with the same knobs. A problem that
takes any output (out_dtype None) is served from the default pairs.
"""

from __future__ import annotations

from typing import Any, Mapping

from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.variants.gemm import GemmSpec
from rocke_aot.variants.table import SERVE, FamilyTable, Serve
from rocke_aot.variants.tables._common import matrix_paths

_DTYPES: tuple[Mapping[str, Any], ...] = (
    dict(in_dtype="f16", out_dtype="f32"),
    dict(in_dtype="f16", out_dtype="f16"),
    dict(in_dtype="bf16", out_dtype="bf16"),
)


def _baked(target: Target, lane: Lane) -> tuple[Mapping[str, Any], ...]:
    return _DTYPES


def _knobs(baked: Mapping[str, Any], target: Target, lane: Lane) -> dict[str, tuple]:
    return {"block_m": (32, 64, 128), "block_n": (32, 64, 128), "block_k": (32, 64),
            "waves": (2, 4), "double_buffer": (False, True), "vector_width": (4,)}


def _baked_for(problem: Any) -> dict[str, Any] | None:
    if problem.out_dtype is None:
        return None
    return dict(in_dtype=problem.dtype, out_dtype=problem.out_dtype)


def _make(baked: Mapping[str, Any], knobs: Mapping[str, Any]) -> GemmSpec:
    return GemmSpec(**baked, **knobs)


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
