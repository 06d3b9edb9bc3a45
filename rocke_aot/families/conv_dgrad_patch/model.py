"""conv_dgrad_patch's model: can a spec run a problem, how well, and what one block does.

    MODEL = Model(accepts, efficiency, work, counts, reads_schedule=True)   variants/models.py's Model
        accepts(spec, PatchDgradProblem)   dtype, P and C baked, an image of at least one patch,
                                           32-bit offsets of dX and dY
        efficiency                   tile granularity of Hp, Wp and the padded GEMM columns
                                     times CU granularity (border blocks do no tile work)
        work                         TileWork for the fitted time model (variants/perf.py): one
                                     step = one k_chunk of dY channels (dY rows + weights)
        counts                       counts.py patch_counts, for the hardware-fact model (which
                                     takes ptxas's schedule where the artifact records one)
"""

from __future__ import annotations

from typing import Any

from rocke_aot.arch import ArchInfo
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.families.conv_dgrad_patch.counts import patch_counts
from rocke_aot.launch import ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.models import (
    DimGranularity,
    Efficiency,
    Model,
    combine,
    dim,
    first_reason,
    formulas,
    geometry_of,
    matrix_wavefronts,
    too_big,
)
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.problems import PatchDgradProblem


def _patch_accepts(spec: Any, p: PatchDgradProblem) -> str | None:
    for name, want, baked in (("dtype", p.dtype, spec.dtype), ("patch size P", p.p, spec.p),
                              ("channels C", p.c, spec.c)):
        if want != baked:
            return f"{name}: problem has {want}, spec is baked for {baked}"
    if p.h < p.p or p.w < p.p:
        return f"image {p.h}x{p.w} is smaller than one {p.p}x{p.p} patch: no GEMM to run"
    return first_reason(too_big("dX", p.n * p.h * p.w * p.c, p.dtype),
                  too_big("dY", p.n * p.hp * p.wp * p.k, p.dtype))


def _patch_eff(spec: Any, p: PatchDgradProblem, info: ArchInfo) -> Efficiency:
    # GEMM rows: dY pixels, tiled tile_h x tile_w over the patch grid; GEMM columns: a
    # block's r_blk*P*C columns padded to whole 16-column tiles (the padding is waste).
    dims = (dim("Hp", p.hp, spec.tile_h), dim("Wp", p.wp, spec.tile_w),
            DimGranularity("cols", spec.cols, spec.cols_padded, spec.cols / spec.cols_padded))
    tiles = formulas(spec).tiles(p)  # main blocks only: border blocks do no tile work
    return combine(dims, tiles, info)


def _patch_work(spec: Any, p: PatchDgradProblem, target: Target) -> TileWork:
    # One step = one k_chunk of dY channels staged (dY rows + weights); columns padded to 16.
    macs = spec.rows * spec.cols_padded * spec.k_chunk
    return TileWork(threads=geometry_of(spec, target).threads, steps=ceil_div(p.k, spec.k_chunk), macs_per_step=macs,
                    load_bytes_per_step=spec.staged_elems() * DTYPE_BYTES[spec.dtype], lds_wavefronts_per_step=matrix_wavefronts(spec, target, macs),
                    store_bytes=spec.rows * spec.cols * DTYPE_BYTES[spec.dtype],
                    matrix=spec.path != "fma", double_buffer=False, lds_bytes=spec.lds_bytes())


MODEL = Model(_patch_accepts, _patch_eff, _patch_work, patch_counts, reads_schedule=True)
