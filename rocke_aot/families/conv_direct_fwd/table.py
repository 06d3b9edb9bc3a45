"""conv_direct_fwd's variant table: baked layers x the knob grid, every lane decided.

    baked   dtype, C, K, R x S, stride, padding, dilation (the main job's layers below)
    knobs   tile_h, tile_w, tile_k, c_chunk, path

Every point of the product goes through the spec's own checks (construction, then
``geometry(target)``: LDS, threads, whole mma tiles), so the grid holds only specs that lower.
Lane decisions name every registered lane on purpose.

``baked_for(problem)`` names the baked set a model's layer needs (a ConvProblem's dtype, C, K,
filter, stride, padding, dilation): ``rocke-aot build --problems`` crosses it with the same knob
grid (variants/table.py workload_specs), so a layer the defaults lack gets its own specs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.variants.table import SERVE, FamilyTable
from rocke_aot.variants.tables._common import LLVM24_NO_NVPTX, matrix_paths

# Representative layers: a 3x3 body conv, a strided 3x3, a 1x1 projection, a 7x7/2 RGB
# stem (C=3: fma only, no mma K-atom divides it), a dilated 3x3, and a bf16 3x3.
_FWD_LAYERS: tuple[Mapping[str, Any], ...] = (
    dict(dtype="f16", c=64, k=64, r=3, s=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1, dil_h=1, dil_w=1),
    dict(dtype="f16", c=64, k=128, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, dil_h=1, dil_w=1),
    dict(dtype="f16", c=256, k=64, r=1, s=1, stride_h=1, stride_w=1, pad_h=0, pad_w=0, dil_h=1, dil_w=1),
    dict(dtype="f16", c=3, k=64, r=7, s=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3, dil_h=1, dil_w=1),
    dict(dtype="f16", c=32, k=32, r=3, s=3, stride_h=1, stride_w=1, pad_h=2, pad_w=2, dil_h=2, dil_w=2),
    dict(dtype="bf16", c=64, k=64, r=3, s=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1, dil_h=1, dil_w=1),
)


def _fwd_baked(target: Target, lane: Lane) -> tuple[Mapping[str, Any], ...]:
    return _FWD_LAYERS


def _fwd_knobs(baked: Mapping[str, Any], target: Target, lane: Lane) -> dict[str, tuple]:
    c = baked["c"]
    chunks = tuple(x for x in (8, 16, 32) if c % x == 0) or (c,)
    return {"tile_h": (4, 8), "tile_w": (8, 16), "tile_k": (16, 32, 64), "c_chunk": chunks}


def _fwd_baked_for(problem: Any) -> dict[str, Any]:
    """The baked set a ConvProblem needs: every ConvDirectFwdSpec.BAKED field, from the problem."""
    return {name: getattr(problem, name) for name in ConvDirectFwdSpec.BAKED}


def _fwd_make(baked: Mapping[str, Any], knobs: Mapping[str, Any]) -> ConvDirectFwdSpec:
    return ConvDirectFwdSpec(**baked, **knobs)


TABLE = FamilyTable(
    family="conv_direct_fwd",
    lane_decisions={"llvm20": SERVE, "llvm22": SERVE, "llvm23": SERVE, "llvm24": LLVM24_NO_NVPTX},
    baked=_fwd_baked,
    knobs=_fwd_knobs,
    make_spec=_fwd_make,
    check=lambda spec, target: spec.geometry(target),
    spec_from_dict=ConvDirectFwdSpec.from_dict,
    paths=matrix_paths,
    baked_for=_fwd_baked_for,
)
