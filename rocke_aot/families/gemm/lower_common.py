"""What every gemm pipeline shares: the lowering object's state, its small IR helpers, and the
A-fragment rule.

    GemmLoweringBase(spec, target, lane, geo)
        .kb                  the target's KernelModule (aot/lower: kernel_for), block = geo.threads
        .instr               the matrix instruction (rocke_aot/mma.py), None on the fma path
        .lda / .ldb          LDS row strides of the A and B tiles (padding included)
        warp_origin()        (lane, first row, first column) of this work-item's wave
        b / S / gep / to_f32 / smin / stage_base / lds_load     IR helpers
        grouped_tile(gid, tiles_n)   the L2 tile order (spec.group_m, lower.py's module doc)
    a_fragment_run(ins, row_stride)  consecutive A fragment elements one LDS load fetches

The pipelines (lower_registers.py, lower_async.py, lower_warpgroup.py) are subclasses of it;
lower.py composes them into the one GemmLowering that lower_gemm builds.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from rocke_aot import lanes, mma
from rocke_aot.aot.lower import kernel_for
from rocke_aot.aot.lower.module import BF16, F16, F32, I16, I32, KernelModule, Sym
from rocke_aot.families.gemm.spec import WGMMA_M, GemmGeometry, GemmSpec
from rocke_aot.mma import WARPGROUP
from rocke_aot.targets import Target

OUT_TYPES = {"f32": F32, "f16": F16, "bf16": BF16}


def c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def a_fragment_run(ins: mma.MmaInstr, row_stride: int, coord=None, per_lane: int | None = None) -> int:
    """How many consecutive A fragment elements one LDS vector load may fetch (1, 2, 4, 8).

    The A tile is row-major in LDS (K contiguous). Elements j..j+w-1 of every lane are one
    aligned <w x i16> load when, for every lane, they are the same row and K, K+1, ..,
    K+w-1 with K a multiple of w, and w divides the LDS row stride and the instruction's K (so the
    row, stage and k-step offsets keep the alignment). Decided from the instruction's own
    a_coord over all lanes (numpy), so it is a property of the map, not of an instruction
    name: mma.sync pairs (w=2: 32-bit loads), MFMA 4 or 8, WMMA 8.
    ``coord`` / ``per_lane``: another operand's (row, contiguous index) map and length -- B of a
    transposed tile (b_lds "nk") is (column, K), which gives B the same runs.
    """
    coord = coord or ins.a_coord
    per = per_lane or ins.a_per_lane
    lane = np.arange(ins.wave_size)
    w = per
    while w > 1:
        ok = per % w == 0 and row_stride % w == 0 and ins.k % w == 0
        for j in range(0, per, w) if ok else ():
            r0, c0 = (np.broadcast_to(x, lane.shape) for x in coord(lane, j))
            ok = ok and bool((c0 % w == 0).all())
            for e in range(1, w):
                r, c = (np.broadcast_to(x, lane.shape) for x in coord(lane, j + e))
                ok = ok and bool((r == r0).all() and (c == c0 + e).all())
        if ok:
            return w
        w //= 2
    return 1


@dataclass(frozen=True)
class StagedChunk:
    """One staged vector: operand, LDS row / vector, global row and leading dimension (the
    element index is grow * gld + gcol, emitted where each mover needs it), its row test,
    global column and column limit, the tensor, the operand's LDS offset and row stride."""

    which: str
    r: Sym
    v: Sym
    grow: Sym
    gld: Sym
    row_ok: ir.Value
    gcol: Sym
    limit: Sym
    ptr: ir.Value
    off: Sym
    ld: int


class GemmLoweringBase:
    """The state and helpers every gemm pipeline reads (module doc)."""

    # set by GemmLowering.build (lower.py), the kernel's entry, before a pipeline runs
    A: ir.Value  # the kernel's pointer arguments (W: split-K's workspace)
    B: ir.Value
    C: ir.Value
    W: ir.Value
    M: Sym
    N: Sym
    K: Sym
    lds: ir.Value  # the LDS stages' base (i16 elements)
    tid: Sym  # the work-item's id in the block
    z: Sym  # split-K: this work-group's K slice
    tile: Sym  # the output tile's index (launch order)
    row0: Sym  # the tile's first row and column
    col0: Sym

    def __init__(self, spec: GemmSpec, target: Target, lane: lanes.Lane, geo: GemmGeometry):
        self.spec, self.geo = spec, geo
        self.kb: KernelModule = kernel_for(spec.kernel_name, target, lane, geo.threads)
        self.instr = mma.INSTRS[geo.instr] if geo.instr else None
        if self.instr is not None:
            self.mma_fn = self.kb.matrix_op(self.instr.key, self.instr.capability,
                                            op=f"gemm {spec.path} ({self.instr.mnemonic_for(target.processor)})")
            self.a_run = a_fragment_run(self.instr, spec.block_k + spec.lds_row_pad)
            if spec.b_lds == "nk":  # B's (column, K) map over column rows of K: runs like A's
                self.b_run = a_fragment_run(self.instr, spec.ldb, self.b_cn, self.instr.b_per_lane)
        # LDS row strides (elements) of the A (block_m x block_k) and B (block_k x block_n, or
        # transposed: block_n x block_k) tiles
        self.lda, self.ldb = spec.block_k + spec.lds_row_pad, spec.ldb
        self.fmuladd = self.kb.declare("fmuladd_f32") if self.instr is None else None

    @property
    def mma_instr(self) -> mma.MmaInstr:
        """The spec's matrix instruction, which every MMA pipeline has (an fma spec has none and
        lowers without the warp tiles below)."""
        assert self.instr is not None, "the warp tiles are the MMA pipelines' (geometry.instr set)"
        return self.instr

    def warp_origin(self) -> tuple[Sym, Sym, Sym]:
        """(lane, first row, first column) of this work-item's wave in the block tile: the waves
        form a waves_m x waves_n grid, each owning tiles_m x tiles_n instruction tiles."""
        g, ins = self.geo, self.mma_instr
        lane, wave = self.tid % g.wave_size, self.tid // g.wave_size
        if self.spec.wgmma:  # warp w of warpgroup q: rows 16 (w % 4) of each of q's m64 tiles
            rows = g.tiles_m * WGMMA_M
            return lane, (wave // WARPGROUP) * rows + (wave % WARPGROUP) * ins.m, self.S(c32(0))
        return lane, (wave // g.waves_n) * (g.tiles_m * ins.m), (wave % g.waves_n) * (g.tiles_n * ins.n)

    @property
    def row_step(self) -> int:
        """Rows between a warp's tiles along M: the instruction's M (mma.sync: 16), or one m64
        wgmma tile (the warp's 16 rows of each)."""
        return WGMMA_M if self.spec.wgmma else self.mma_instr.m

    def b_cn(self, lane, j):
        kr, c = self.instr.b_coord(lane, j)
        return c, kr

    # -- small helpers ----------------------------------------------------------------
    @property
    def b(self) -> ir.IRBuilder:
        return self.kb.ir_builder()

    def S(self, v: ir.Value) -> Sym:
        return Sym(self.b, v)

    def gep(self, base: ir.Value, idx: Sym, ty: ir.Type = I16) -> ir.Value:
        return self.b.gep(base, [idx.v], source_etype=ty)

    def to_f32(self, bits: ir.Value) -> ir.Value:
        return self.kb.bits_to_f32(bits, self.spec.in_dtype)

    def stage_base(self, stage: Sym | int) -> Sym:
        s = self.spec
        per = s.block_m * self.lda + s.b_tile_elems
        return self.S(c32(0)) + stage * per if isinstance(stage, int) else stage * per

    def lds_load(self, idx: Sym) -> ir.Value:
        return self.b.load(self.gep(self.lds, idx), typ=I16, align=2)

    # -- tile order -------------------------------------------------------------------
    def grouped_tile(self, gid: Sym, tiles_n: Sym) -> tuple[Sym, Sym]:
        """(tile row, tile column) of work-group gid in groups of group_m tile rows."""
        G = self.spec.group_m
        b = self.b
        tiles_m = (self.M + (self.spec.block_m - 1)) // self.spec.block_m
        per_group = tiles_n * G
        first = (gid // per_group) * G
        left = tiles_m - first  # > 0 for every launched work-group
        rows = self.S(b.select(b.icmp_unsigned("<", left.v, c32(G)), left.v, c32(G)))
        within = gid % per_group
        return first + within % rows, within // rows

    def smin(self, x: Sym, y: Sym) -> Sym:
        return self.S(self.b.select(self.b.icmp_signed("<", x.v, y.v), x.v, y.v))
