"""conv_dgrad_patch's counts: what one block issues per dY-channel chunk (KernelCounts).

    patch_counts(spec, PatchDgradProblem, Target, banks) -> KernelCounts   the model's ``counts``

The conv engine's shared part (the fragment reads of TileGemm.step, the staging rounds, the
lines and the bank cycles) is variants/counts.py's (engine_static, stage_cost, global_lines);
this family adds its own staging (dY rows and the weights, element by element, into the padded
or transposed LDS layout of spec.py, as lower.py's _dy_elem and _w_elem address them) and the
instructions counted in its IR.
"""

from __future__ import annotations

import functools
from typing import Any

from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.launch import ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.counts import KernelCounts, engine_static, global_lines, stage_cost, straight_line_serial

# Integer, compare, select and address instructions the lowerer emits per staged unit, counted
# in its IR (before the compiler folds anything; a count, not a fit):
# one dY element (_dy_elem): row / kk (2), the pixel (4), k (1), the bounds test
#   (5), the NHWK index (6), two selects (2), the address (3), the padded LDS index (2)
PATCH_OPS_PER_DY_ELEM = 25
# one weight element (_w_elem): kk / col by cols_padded (5), k (1), the test (3), the index (3),
#   two selects (2), the address (3), the padded LDS index (2)
PATCH_OPS_PER_W_ELEM = 19



@functools.lru_cache(maxsize=8192)
def _patch_lines(spec: Any, target: Target, wp: int, k: int) -> int:
    """Global lines of a step's dY (element e: pixel row e // k_chunk of the tile, channel
    e % k_chunk, NHWK at ((i * Wp) + j) * K + kk) and weights (kk * P*P*C + col), as _dy_elem
    and _w_elem address them."""
    g = spec.geometry(target)
    eb, kc, cols = DTYPE_BYTES[spec.dtype], spec.k_chunk, spec.cols_padded
    ppc = spec.p * spec.p * spec.c
    return (global_lines(g.threads, g.wave_size, spec.rows * kc, 1, eb,
                         lambda e: (((e // kc) // spec.tile_w) * wp + (e // kc) % spec.tile_w) * k + e % kc, kc)
            + global_lines(g.threads, g.wave_size, kc * cols, 1, eb, lambda e: (e // cols) * ppc + e % cols, cols))


@functools.lru_cache(maxsize=8192)
def _patch_static(spec: Any, target: Target, banks: int) -> tuple:
    """What a block issues per chunk, the spec's and the target's alone (no problem in it)."""
    eb = DTYPE_BYTES[spec.dtype]
    rows, cols = spec.rows, spec.cols_padded
    engine = engine_static(spec, target, rows, cols, spec.k_chunk, 1, banks, spec.lds_a_index, spec.lds_b_index)
    g = engine[0]
    a_size, b_size = rows * spec.k_chunk, spec.k_chunk * cols
    r1, w1 = stage_cost(g.threads, g.wave_size, a_size, 1, eb,
                        lambda e: spec.lds_a_staged(e, e // spec.k_chunk), banks)
    r2, w2 = stage_cost(g.threads, g.wave_size, b_size, 1, eb,
                        lambda e: spec.lds_b_staged(e, e // cols), banks)
    serial = straight_line_serial(g.threads, a_size) + straight_line_serial(g.threads, b_size)
    return engine, r1, w1, r2, w2, serial


def patch_counts(spec: Any, p: Any, target: Target, banks: int = 32) -> KernelCounts:
    eb = DTYPE_BYTES[spec.dtype]
    rows = spec.rows
    engine, r1, w1, r2, w2, serial = _patch_static(spec, target, banks)
    g, ins, mmas, reads, read_cyc, fma, cvt, outs = engine
    cols = spec.cols_padded
    ops = r1 * PATCH_OPS_PER_DY_ELEM + r2 * PATCH_OPS_PER_W_ELEM
    lines = _patch_lines(spec, target, p.wp, p.k)
    return KernelCounts(
        threads=g.threads, wave_size=g.wave_size, steps=ceil_div(p.k, spec.k_chunk),
        instr=None if ins is None else ins.key, mma=mmas, lds_reads=reads, lds_read_wavefronts=read_cyc,
        fma=fma, cvt=cvt, global_loads=r1 + r2, lds_writes=r1 + r2, lds_write_wavefronts=w1 + w2,
        global_wavefronts=lines, serial_loads=serial, int_ops=ops,
        staged_bytes=spec.staged_elems() * eb, barriers=2, double_buffer=False,
        store_bytes=rows * spec.cols * eb, stores=outs,
        unique_bytes=(p.n * p.hp * p.wp * p.k + p.k * p.p * p.p * p.c + p.n * p.h * p.w * p.c) * eb,
        macs=rows * cols * spec.k_chunk)
