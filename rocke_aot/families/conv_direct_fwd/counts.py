"""conv_direct_fwd's counts: what one block issues per input-channel chunk (KernelCounts).

    fwd_counts(spec, ConvProblem, Target, banks) -> KernelCounts   the model's ``counts``

The conv engine's shared part (the fragment reads of TileGemm.step, the staging rounds, the
lines and the bank cycles) is variants/counts.py's (engine_static, stage_cost, global_lines);
this family adds its own staging (the input halo and the KRSC weights, element by element, as
lower.py's _halo_elem and _weight_elem address them) and the instructions counted in its IR.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.launch import ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.counts import KernelCounts, engine_static, global_lines, stage_cost, straight_line_serial

# Integer, compare, select and address instructions the lowerer emits per staged unit, counted
# in its IR (before the compiler folds anything; a count, not a fit):
# one halo element (_halo_elem): e (1), hy / hx / cc by constant divisors (7),
#   ih, iw (4), the bounds test (3), the NHWC index (6), two selects (2), the address (3)
FWD_OPS_PER_HALO_ELEM = 26
# one weight element (_weight_elem): kl / t / cc (7), k (1), the KRSC index (4), the test (1),
#   two selects (2), the address (3)
FWD_OPS_PER_WEIGHT_ELEM = 18



@functools.lru_cache(maxsize=8192)
def _fwd_lines(spec: Any, target: Target, w: int, c: int) -> int:
    """Global lines of a step's halo (element e: pixel (hy, hx), channel cc of the chunk, NHWC at
    ((hy * W) + hx) * C + cc) and weights ((kl * R*S + t) * C + cc, KRSC), as _halo_elem and
    _weight_elem address them."""
    g = spec.geometry(target)
    eb, cc, rs = DTYPE_BYTES[spec.dtype], spec.c_chunk, spec.r * spec.s
    halo = spec.halo_h * spec.halo_w * cc
    return (global_lines(g.threads, g.wave_size, halo, 1, eb,
                         lambda e: ((e // (spec.halo_w * cc)) * w + (e // cc) % spec.halo_w) * c + e % cc, cc)
            + global_lines(g.threads, g.wave_size, spec.tile_k * rs * cc, 1, eb,
                           lambda e: ((e // (rs * cc)) * rs + (e // cc) % rs) * c + e % cc, cc))


def layout_of(spec: Any) -> Any:
    """The spec with the baked fields no per-step count reads set to fixed values (the channel
    counts c and k, the padding): layers that differ only there (a ResNet's stages) share one
    _fwd_static entry. The counts read the tile, the chunk, the filter, stride and dilation (the
    halo and the LDS layout), the dtype and the path; tests/test_hw_model.py checks every
    spec's counts through this against the spec's own."""
    return dataclasses.replace(spec, c=spec.c_chunk, k=spec.tile_k, pad_h=0, pad_w=0)


@functools.lru_cache(maxsize=8192)
def _fwd_static(spec: Any, target: Target, banks: int) -> tuple:
    """What a block issues per chunk, the spec's and the target's alone (no problem in it): a
    select over a new problem recounts only the problem's lines, not the bank simulation."""
    eb = DTYPE_BYTES[spec.dtype]
    rows, cols = spec.tile_h * spec.tile_w, spec.tile_k
    engine = engine_static(spec, target, rows, cols, spec.c_chunk, spec.r * spec.s, banks, spec.lds_a_index,
                           spec.lds_b_index)
    g = engine[0]
    halo = spec.halo_h * spec.halo_w * spec.c_chunk
    weights = spec.tile_k * spec.r * spec.s * spec.c_chunk
    r1, w1 = stage_cost(g.threads, g.wave_size, halo, 1, eb, lambda e: e, banks)
    r2, w2 = stage_cost(g.threads, g.wave_size, weights, 1, eb, lambda e: e + halo, banks)
    serial = straight_line_serial(g.threads, halo) + straight_line_serial(g.threads, weights)
    return engine, halo, weights, r1, w1, r2, w2, serial


def fwd_counts(spec: Any, p: Any, target: Target, banks: int = 32) -> KernelCounts:
    eb = DTYPE_BYTES[spec.dtype]
    rows, cols = spec.tile_h * spec.tile_w, spec.tile_k
    engine, halo, weights, r1, w1, r2, w2, serial = _fwd_static(layout_of(spec), target, banks)
    g, ins, mmas, reads, read_cyc, fma, cvt, outs = engine
    ops = r1 * FWD_OPS_PER_HALO_ELEM + r2 * FWD_OPS_PER_WEIGHT_ELEM
    oh, ow = p.out_hw
    lines = _fwd_lines(spec, target, p.w, p.c)
    return KernelCounts(
        threads=g.threads, wave_size=g.wave_size, steps=ceil_div(spec.c, spec.c_chunk),
        instr=None if ins is None else ins.key, mma=mmas, lds_reads=reads, lds_read_wavefronts=read_cyc,
        fma=fma, cvt=cvt, global_loads=r1 + r2, lds_writes=r1 + r2, lds_write_wavefronts=w1 + w2,
        global_wavefronts=lines, serial_loads=serial, int_ops=ops,
        staged_bytes=(halo + weights) * eb, barriers=2, double_buffer=False,
        store_bytes=rows * cols * eb, stores=outs,
        unique_bytes=(p.n * p.h * p.w * p.c + p.k * p.r * p.s * p.c + p.n * oh * ow * p.k) * eb,
        macs=rows * cols * spec.c_chunk * spec.r * spec.s)
