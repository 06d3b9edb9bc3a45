"""conv_direct_fwd's model: can a spec run a problem, how well, and what one block does.

    MODEL = Model(accepts, efficiency, work, counts, reads_schedule=True)   variants/models.py's Model
        accepts(spec, ConvProblem)   every baked field (dtype, C, K, filter, stride, padding,
                                     dilation), a non-empty output, 32-bit offsets of X and Y
        efficiency                   tile granularity of OH, OW and K times CU granularity
        work                         TileWork for the fitted time model (variants/perf.py): one
                                     step = one c_chunk of input channels, then every filter tap
        counts                       counts.py fwd_counts, for the hardware-fact model (which
                                     takes ptxas's schedule where the artifact records one)
"""

from __future__ import annotations

from typing import Any

from rocke_aot.arch import ArchInfo
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.families.conv_direct_fwd.counts import fwd_counts, layout_of
from rocke_aot.launch import ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.models import (
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
from rocke_aot.variants.problems import ConvProblem


def _fwd_accepts(spec: Any, p: ConvProblem) -> str | None:
    checks = (("dtype", p.dtype, spec.dtype), ("input channels C", p.c, spec.c),
              ("output channels K", p.k, spec.k), ("filter R", p.r, spec.r), ("filter S", p.s, spec.s),
              ("stride_h", p.stride_h, spec.stride_h), ("stride_w", p.stride_w, spec.stride_w),
              ("pad_h", p.pad_h, spec.pad_h), ("pad_w", p.pad_w, spec.pad_w),
              ("dil_h", p.dil_h, spec.dil_h), ("dil_w", p.dil_w, spec.dil_w))
    for name, want, baked in checks:
        if want != baked:
            return f"{name}: problem has {want}, spec is baked for {baked}"
    oh, ow = p.out_hw
    if oh < 1 or ow < 1:
        return f"output is empty ({oh}x{ow}) for a {p.h}x{p.w} input"
    return first_reason(too_big("input", p.n * p.h * p.w * p.c, p.dtype),
                  too_big("output", p.n * oh * ow * p.k, p.dtype))


def _fwd_eff(spec: Any, p: ConvProblem, info: ArchInfo) -> Efficiency:
    oh, ow = p.out_hw
    dims = (dim("OH", oh, spec.tile_h), dim("OW", ow, spec.tile_w), dim("K", p.k, spec.tile_k))
    tiles = formulas(spec).tiles(p)
    return combine(dims, tiles, info)


def _fwd_work(spec: Any, p: ConvProblem, target: Target) -> TileWork:
    # One step = one c_chunk of input channels staged (halo + weights), then every filter tap.
    macs = spec.tile_h * spec.tile_w * spec.tile_k * spec.c_chunk * spec.r * spec.s
    layout = layout_of(spec)  # the LDS layout's own counts, shared by layers that differ in channels
    return TileWork(threads=geometry_of(layout, target).threads, steps=ceil_div(spec.c, spec.c_chunk), macs_per_step=macs,
                    load_bytes_per_step=spec.lds_bytes(), lds_wavefronts_per_step=matrix_wavefronts(layout, target, macs),
                    store_bytes=spec.tile_h * spec.tile_w * spec.tile_k * DTYPE_BYTES[spec.dtype],
                    matrix=spec.path != "fma", double_buffer=False, lds_bytes=spec.lds_bytes())


MODEL = Model(_fwd_accepts, _fwd_eff, _fwd_work, fwd_counts, reads_schedule=True)
