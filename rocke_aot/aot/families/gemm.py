"""The gemm family: C = A x B (row-major, f16/bf16 in, f32 accumulate, f16/bf16/f32 out).

    lower_gemm(spec, target, lane)
      1. spec.geometry(target)            threads, wave grid, instruction, LDS (refuses early)
      2. lanes.require(...)               target + matrix capability, before any IR exists
      3. kernel(A, B, C, M, N, K)         1-D grid: ceil(M/bm) * ceil(N/bn) work-groups
                                          (GemmSpec.launch_formulas: the launch contract)
           entry:  tile (tm, tn) from the work-group id; zeroed accumulators
           [double buffer: stage K-tile 0 into LDS stage 0; barrier]
           loop kt < ceil(K/bk):
               single: stage K-tile kt -> LDS; barrier; compute; barrier
               double: stage K-tile kt+1 -> LDS stage (kt+1)&1 (if any); compute stage kt&1;
                       barrier    (one barrier: the stage written was last read before it)
           exit:   every accumulator element, guarded by row < M and col < N, converted, stored
      AMD matrix paths (mfma / wmma, stages 0): build_amd instead of the loop above -- an
           interior loop over K // bk (blocks inside M and N) with no bounds test, the next
           K-tile's loads issued before the step's MFMAs, one barrier a step when double
           buffered; then a checked edge loop (docs/lowering.md "The AMD main loop")
      compute:
           fma        each thread a thread_m x thread_n micro tile, llvm.fmuladd.f32
           mfma/wmma/mma  each wave (a warp on sm_90) tiles_m x tiles_n instruction tiles;
                      the fragment of lane l is read from LDS at the coordinates
                      mma.MmaInstr.a_coord/b_coord give, the instruction is called through
                      aot/lower/matrix.py (its operand convention), results are stored at
                      d_coord. mma (sm_90 mma.sync m16n8k16) is the same code with its maps.

The asynchronous pipeline (sm_90 mma, spec.stages = S in 2..4; GemmSpec.stages), build_async:
           entry:  trap unless K and N are multiples of 8 (16-byte aligned rows: the
                   selection refuses such problems, a direct launch must not misread)
           copy plan (copy_plan, once): per operand the work-item's source index at K-tile 0,
                   its LDS offset in a stage, B's column test and A's rows left in M; its
                   rounds are dr = threads / vectors-per-row rows apart, so a round adds a
                   constant LDS offset and it * dr * K (A) / N (B) to the source; a row of
                   vectors the threads do not step evenly (B of block_n 192: 24) goes in
                   panels of 8 vectors, one plan entry each (variants/gemm.py copy_panel)
           prologue: K-tiles 0 .. S-2 -> stages 0 .. S-2, one commit group each; wait for tile 0
                   (S-2 pending); barrier; fragments of tile 0's k-step 0
           loop kt < ceil(K/bk), per 16-deep k-step ks (KS = bk/16 of them):
               ks = 0:      cp.async K-tile kt+S-1 -> stage (kt-1)%S (every warp left it before
                            the last barrier); a tile past K copies 0 bytes (no branch)
               every ks:    fragments of ks+1 (ldmatrix) while ks's mma.sync issue (fragments
                            in registers for two k-steps)
               ks = KS-2:   commit; wait (S-2 pending: tile kt+1 has landed); barrier (every
                            thread's copies visible; every warp done with stage kt%S, whose
                            last fragments were just read) -- KS = 1: after k-step 0
               ks = KS-1:   the fragments read are K-tile kt+1's k-step 0, from the next stage,
                            while the tile's last mma.sync run across the barrier
               the loop body is one basic block: ptxas interleaves copies, reads and mma.sync
           exit:   wait for every copy; c0,c1 / c2,c3 of each mma tile are adjacent columns: one
                   2-element store each; a 2-byte output, two n-tiles at a time: lanes 2j, 2j+1
                   of a quad swap a pair (shfl.bfly 1) and each lane stores 4 columns (8 bytes):
                   whole 32-byte sectors (variants/gemm.py quad_stores, epilogue_quads)
      ldmatrix addresses: one pointer per operand, stage and lane, every fragment a constant
      offset from it (ptxas: [R+imm]). The first version of this pipeline (copies behind a
      branch, indices and fragment addresses recomputed in the loop, no fragment lookahead)
      ran 0.39-0.51x torch.matmul on the large problems where this one runs 0.41-0.59x
      (bench/results/bench-raw/h200-run15/gemm-sm90.txt); it is gone since, in git history only.
      copies are 16 bytes (8 elements); an out-of-range chunk reads no source bytes and writes
      16 zeros (cp.async's ignore-src predicate and the address as computed, at most
      S K-tiles or one block of rows past the tensor, as CUTLASS's zfill copies do), so edges
      need no branch. The stages live in dynamic shared memory (the contract's
      dynamic_shared_bytes), past the 48 KiB static limit.
      ldmatrix lane maps (PTX ISA "ldmatrix"): lane l gives the address of row l%8 of matrix
      l//8; thread t receives row t//4, elements 2(t%4), 2(t%4)+1 of each matrix (.trans: the
      matrix transposed). A: matrix i = rows 8(i%2).., K 8(i//2).. of the 16x16 tile, which is
      mma.sync's a0..a7 order; B (K x N in LDS): matrix i = K rows 8(i%2).., columns 8(i//2)..,
      transposed, which is b0..b3 of N-tiles 2t and 2t+1.
The warpgroup pipeline (spec.wgmma, sm_90a; build_wgmma; docs/lowering.md has the layouts):
           stages in dynamic shared memory 1 KiB longer than they need, the base rounded up to 1024
           bytes; tiles 128-byte swizzled (GemmSpec.lds_a_index / lds_b_index: A K-major, B N-major
           in 64-column chunks), copied by the same copy plan in panels of one swizzle row
           prologue: K-tiles 0 .. copy_ahead-1, one commit group each
           loop kt: wait (tile kt landed); fence.proxy.async; barrier; copies of kt + copy_ahead;
                    wgmma.fence; per 16 of K and m64 tile one wgmma m64nNk16 (N = block_n) from the
                    stage's descriptors (descriptor_bits); commit; wait (1 pending at 4 stages, else 0)
           exit:    wait for every wgmma (accumulators through the wait) and copy; the n8 slices of
                    the accumulators are mma.sync m16n8 fragments of the warp's 16 rows of each m64
                    tile: the asynchronous pipeline's split-K and epilogue, row step 64
Split-K (spec.split_k = s > 1, the asynchronous pipeline only; reduce_split): kernel(A, B, C, W, M, N,
      K) over tiles * s work-groups; g % s is the K slice z, g // s the tile (then the tile order
      below). Slice z runs K-tiles [z * per, min(kt, (z + 1) * per)), per = ceil(kt / s), through
      the same main loop (an empty slice, K short, runs none and contributes zeros). Then:
           every thread stores its f32 accumulators to W's partial slot (tile, z) in register
           order (16-byte st.global.cg, 512 contiguous bytes a warp); bar.sync; thread 0:
           fence.acq_rel.gpu; atom.relaxed.gpu.add the tile's counter (after the partials in W);
           fence.acq_rel.gpu; its old value through shared memory; bar.sync; all but the last to
           arrive (old == s - 1) return; the last resets the counter to 0 and sums the s partials
           (ld.global.cg) in the order z = 0 .. s-1 -- the same bits whatever the arrival order --
           fragment by fragment where the epilogue stores it (each fragment's loads next to its
           stores: ptxas otherwise hoisted them all and spilled), then the usual epilogue.
      docs/lowering.md "Split-K" has the memory-model argument and the workspace contract.
Tile order (spec.group_m = G > 1): work-group g takes tile rows in groups of G: within a group,
      consecutive work-groups walk down G tile rows before the next column (Triton's grouped
      order), so the tiles in flight share A rows and B columns in L2.

Global loads: each thread moves vector_width contiguous elements (along K for A, N for B);
a vector wholly inside the matrix is one <vw x i16> load, a vector at an edge (M, N or the
K tail) falls back to per-element loads whose address is clamped to 0 when out of range,
so no load ever leaves the tensor and missing elements read as zero. On AMD the matrix paths'
interior loop (build_amd) loads without checks; its edge loop and the fma path's stage_tile
check as above. Data stays as i16
bits until the arithmetic, so f16 and bf16 share every load and LDS path.
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from rocke_aot import lanes, mma
from rocke_aot.aot.lower import kernel_for, nvptx
from rocke_aot.aot.lower.matrix import call_matrix
from rocke_aot.aot.lower.module import BF16, F16, F32, I16, I32, KernelModule, LoweredKernel, Sym
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.errors import CapabilityError
from rocke_aot.targets import Target
from rocke_aot.variants.gemm import (
    SWIZZLE_ELEMS,
    WARPGROUP,
    WGMMA_ALIGN,
    WGMMA_K,
    WGMMA_M,
    GemmGeometry,
    GemmSpec,
    copy_panel,
    quad_stores,
)

_OUT_TYPES = {"f32": F32, "f16": F16, "bf16": BF16}


def _c32(v: int) -> ir.Constant:
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
class _Chunk:
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


@dataclass(frozen=True)
class _CopyOperand:
    """One operand's cp.async copies of a K-tile, as a work-item issues them (copy_plan): ``rounds``
    copies ``dr`` rows apart, at LDS element offset ``lds`` (+ it * dr * ld) of a stage and source
    element index ``src`` (+ it * step) at K-tile 0, each a 16-byte vector; ``fixed``: B's test that
    holds for every K-tile (its N columns; None for A, whose K column is tested per tile);
    A's rounds are inside M while it * dr < rem; ``koff``: the K offset in the tile (A: the column,
    B: the first row)."""

    which: str
    rounds: int
    chunks: int
    dr: int
    ld: int
    lds: Sym
    src: Sym
    step: Sym
    rem: Sym | None
    fixed: ir.Value | None
    koff: Sym


@dataclass(frozen=True)
class _CopyPlan:
    ops: tuple[_CopyOperand, ...]


class _SumsOnUse:
    """The split-K tile's sums as the epilogue's accumulator list, each fragment's loads and adds
    emitted where the epilogue first reads it: emitted all before the epilogue, ptxas kept every
    load in flight (4 x 32 x 4 floats at 128x128, split 4) and spilled 1.1 KB; read next to their
    stores (the loads are ordered behind the previous stores by their memory clobber), no spills."""

    def __init__(self, emit, count: int):
        self.emit, self.count, self.done = emit, count, {}

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, f: int) -> ir.Value:
        if f not in self.done:
            self.done[f] = self.emit(f)
        return self.done[f]


SWIZZLE_128B = 1  # the descriptor's swizzle mode for 128-byte swizzling (bits 62..63)


def descriptor_bits(lbo: int, sbo: int) -> int:
    """The constant part of a wgmma matrix descriptor: leading and stride dimension byte offsets
    (16-byte multiples, stored >> 4 in bits 16..29 and 32..45), base offset 0 (bits 49..51) and the
    128-byte swizzle mode in bits 62..63; the start address (bits 0..13) is added per operand."""
    if lbo % 16 or sbo % 16 or not (0 <= lbo >> 4 < 1 << 14 and 0 <= sbo >> 4 < 1 << 14):
        raise CapabilityError(f"wgmma descriptor offsets {lbo}, {sbo}: 16-byte multiples below 256 KiB")
    return (lbo >> 4) << 16 | (sbo >> 4) << 32 | SWIZZLE_128B << 62


class _GemmLowering:
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

    def warp_origin(self) -> tuple[Sym, Sym, Sym]:
        """(lane, first row, first column) of this work-item's wave in the block tile: the waves
        form a waves_m x waves_n grid, each owning tiles_m x tiles_n instruction tiles."""
        g, ins = self.geo, self.instr
        lane, wave = self.tid % g.wave_size, self.tid // g.wave_size
        if self.spec.wgmma:  # warp w of warpgroup q: rows 16 (w % 4) of each of q's m64 tiles
            rows = g.tiles_m * WGMMA_M
            return lane, (wave // WARPGROUP) * rows + (wave % WARPGROUP) * ins.m, self.S(_c32(0))
        return lane, (wave // g.waves_n) * (g.tiles_m * ins.m), (wave % g.waves_n) * (g.tiles_n * ins.n)

    @property
    def row_step(self) -> int:
        """Rows between a warp's tiles along M: the instruction's M (mma.sync: 16), or one m64
        wgmma tile (the warp's 16 rows of each)."""
        return WGMMA_M if self.spec.wgmma else self.instr.m

    def b_cn(self, lane, j):
        kr, c = self.instr.b_coord(lane, j)
        return c, kr

    # -- small helpers ----------------------------------------------------------------
    @property
    def b(self) -> ir.IRBuilder:
        return self.kb.builder

    def S(self, v: ir.Value) -> Sym:
        return Sym(self.b, v)

    def gep(self, base: ir.Value, idx: Sym, ty: ir.Type = I16) -> ir.Value:
        return self.b.gep(base, [idx.v], source_etype=ty)

    def to_f32(self, bits: ir.Value) -> ir.Value:
        return self.kb.bits_to_f32(bits, self.spec.in_dtype)

    # -- global -> LDS ------------------------------------------------------------------
    def load_vec(self, ptr: ir.Value, base: Sym, row_ok: ir.Value, col: Sym, limit: Sym, vw: int) -> ir.Value:
        """vw i16 at ptr[base + 0..vw-1]; zero where row_ok is false or col+e >= limit."""
        b = self.b
        if vw == 1:
            ok = self.kb.all_of(row_ok, col.lt(limit))
            idx = b.select(ok, base.v, _c32(0))
            v = b.load(self.gep(ptr, self.S(idx)), typ=I16, align=2)
            return b.select(ok, v, ir.Constant(I16, 0))
        vty = ir.VectorType(I16, vw)
        full = self.kb.all_of(row_ok, b.icmp_unsigned("<=", (col + vw).v, limit.v))

        def whole():
            return b.load(self.gep(ptr, base), typ=vty, align=2)

        def edge():
            v = ir.Constant(vty, None)
            for e in range(vw):
                ok = self.kb.all_of(row_ok, (col + e).lt(limit))
                idx = b.select(ok, (base + e).v, _c32(0))
                x = b.load(self.gep(ptr, self.S(idx)), typ=I16, align=2)
                v = b.insert_element(v, b.select(ok, x, ir.Constant(I16, 0)), _c32(e))
            return v

        return self.kb.select_value(full, whole, edge, name="ld")

    def each_chunk(self, kt: Sym, stage: Sym | int, move, name: str) -> None:
        """Cut K-tile kt of A (bm x bk) and B (bk x bn) into vector_width-element chunks;
        work-item t moves chunks t, t + T, t + 2T, ... (a runtime loop when there is more than
        one round) by ``move(chunk)`` -- the register copy (stage_tile) or cp.async
        (stage_tile_async): one chunk walk, two ways to move it."""
        s, T, vw = self.spec, self.geo.threads, self.spec.vector_width
        for which in ("A", "B"):
            rows, cols = (s.block_m, s.block_k) if which == "A" else (s.block_k, s.block_n)
            ld = self.lda if which == "A" else self.ldb
            vpr = cols // vw  # vectors per row
            chunks = rows * vpr
            off = self.stage_base(stage) + (0 if which == "A" else s.block_m * self.lda)

            def one_round(it: Sym | int, _vals, which=which, ld=ld, vpr=vpr, chunks=chunks, off=off):
                c = self.tid + it * T
                guard = None
                if chunks % T:  # some round has fewer chunks than work-items
                    guard = self.kb.if_then(c.lt(chunks), name=name)
                    guard.__enter__()
                r, v = c // vpr, c % vpr
                if which == "A":
                    grow, gcol = self.row0 + r, kt * s.block_k + v * vw
                    row_ok, limit, gld, ptr = grow.lt(self.M), self.K, self.K, self.A
                else:
                    grow, gcol = kt * s.block_k + r, self.col0 + v * vw
                    row_ok, limit, gld, ptr = grow.lt(self.K), self.N, self.N, self.B
                move(_Chunk(which, r, v, grow, gld, row_ok, gcol, limit, ptr, off, ld))
                if guard is not None:
                    guard.__exit__(None, None, None)
                return []

            rounds = -(-chunks // T)
            if rounds == 1:
                one_round(0, [])
            else:
                self.kb.loop(rounds, [], one_round, name=f"{name}{which}")

    def tile_inside(self, kt: Sym) -> ir.Value:
        """K-tile kt's A (block_m x block_k) and B (block_k x block_n) lie wholly inside A and B."""
        s, b = self.spec, self.b
        return self.kb.all_of(b.icmp_unsigned("<=", (self.row0 + s.block_m).v, self.M.v),
                              b.icmp_unsigned("<=", (self.col0 + s.block_n).v, self.N.v),
                              b.icmp_unsigned("<=", ((kt + 1) * s.block_k).v, self.K.v))

    def stage_tile(self, kt: Sym, stage: Sym | int) -> None:
        """Copy K-tile kt into LDS stage ``stage`` through registers (each_chunk).

        On AMD a tile wholly inside both matrices takes a path without per-vector edge checks:
        each vector behind its own branch made LLVM wait for every load (s_waitcnt vmcnt(0))
        before issuing the next (docs/lowering.md, "Native vs Triton on AMD"); branch-free, the
        step's loads issue together. Boundary tiles keep the checked path. sm_90 keeps the
        checked path only: its fast gemm is the cp.async pipeline, and the register-staged
        one's effect there is unmeasured (no H200 run of this change)."""
        if not self.kb.target.is_amdgpu:
            self._stage_tile(kt, stage, checked=True)
            return
        full = self.tile_inside(kt)
        with self.kb.if_then(full, name="tile"):
            self._stage_tile(kt, stage, checked=False)
        with self.kb.if_then(self.b.not_(full), name="ragged"):
            self._stage_tile(kt, stage, checked=True)

    def _stage_tile(self, kt: Sym, stage: Sym | int, checked: bool) -> None:
        s, vw = self.spec, self.spec.vector_width

        def move(ch: _Chunk) -> None:
            base = ch.grow * ch.gld + ch.gcol
            if checked:
                val = self.load_vec(ch.ptr, base, ch.row_ok, ch.gcol, ch.limit, vw)
            else:  # the tile is inside the matrix: every vector is
                val = self.b.load(self.gep(ch.ptr, base), typ=I16 if vw == 1 else ir.VectorType(I16, vw), align=2)
            if ch.which == "B" and s.b_lds == "nk":  # transposed: element e to column row v*vw+e
                for e in range(vw):
                    x = val if vw == 1 else self.b.extract_element(val, _c32(e))
                    self.b.store(x, self.gep(self.lds, ch.off + (ch.v * vw + e) * ch.ld + ch.r), align=2)
            else:
                self.b.store(val, self.gep(self.lds, ch.off + ch.r * ch.ld + ch.v * vw), align=2)

        self.each_chunk(kt, stage, move, "stage")

    # -- the AMD main loop (register prefetch, interior / edge loops) ---------------------------
    def amd_units(self) -> list[tuple]:
        """The staged vectors of one K-tile as work-item ``tid`` moves them: per operand and
        round, (which, rows of the unit, chunk count, vectors a row, LDS row stride). A unit is
        one vector of vector_width elements, except B transposed in LDS (nk): two vectors of
        consecutive K rows (pair units are numbered K first, amd_load), so that their elements pair up into 4-byte LDS stores (column n's
        K and K+1, adjacent in a column row: one ds_write_b32, merged into ds_write2_b32)."""
        s, T, vw = self.spec, self.geo.threads, self.spec.vector_width
        out = []
        for which in ("A", "B"):
            rows, cols = (s.block_m, s.block_k) if which == "A" else (s.block_k, s.block_n)
            pair = 2 if which == "B" and s.b_lds == "nk" else 1
            vpr = cols // vw
            chunks = rows // pair * vpr
            for it in range(-(-chunks // T)):
                out.append((which, pair, chunks, vpr, self.lda if which == "A" else self.ldb, it))
        return out

    def amd_load(self, kt: Sym, checked: bool) -> list[tuple]:
        """Global loads of K-tile kt, every unit of amd_units: [(unit, LDS row, vector, [values])].
        A work-item past the last chunk of a round takes the last chunk again (the same values to
        the same LDS words: no branch in the loop). ``checked``: each vector through load_vec
        (zero outside the matrix); unchecked: the tile is wholly inside A and B (the interior)."""
        s, b, T, vw = self.spec, self.b, self.geo.threads, self.spec.vector_width
        vty = I16 if vw == 1 else ir.VectorType(I16, vw)
        out = []
        for unit in self.amd_units():
            which, pair, chunks, vpr, _ld, it = unit
            c = self.tid + it * T
            if (it + 1) * T > chunks:
                c = self.S(b.select(c.lt(chunks), c.v, _c32(chunks - 1)))
            # a pair unit walks K first: lanes next to each other store to K words next to each
            # other (the column rows 8 apart are the same bank: 4-way at block_k 32, not 16-way)
            r, v = (c // vpr, c % vpr) if pair == 1 else (c % (s.block_k // 2), c // (s.block_k // 2))
            vals = []
            for p in range(pair):
                if which == "A":
                    grow, gcol = self.row0 + r, kt * s.block_k + v * vw
                    row_ok, limit, gld, ptr = grow.lt(self.M), self.K, self.K, self.A
                    corner, off = self.row0 * self.K + kt * s.block_k, r * self.K + v * vw
                else:
                    grow, gcol = kt * s.block_k + r * pair + p, self.col0 + v * vw
                    row_ok, limit, gld, ptr = grow.lt(self.K), self.N, self.N, self.B
                    corner, off = kt * s.block_k * self.N + self.col0, (r * pair + p) * self.N + v * vw
                if checked:
                    vals.append(self.load_vec(ptr, grow * gld + gcol, row_ok, gcol, limit, vw))
                else:
                    vals.append(b.load(self.split_address(ptr, corner, off), typ=vty, align=2))
            out.append((unit, r, v, vals))
        return out

    def split_address(self, ptr: ir.Value, corner: Sym, off: Sym) -> ir.Value:
        """&ptr[corner + off] with the index zero-extended to 64 bits (every index here is
        non-negative and below 2^31 elements; a sign extension costs a shift per load a step)."""
        return self.b.gep(ptr, [self.b.zext((corner + off).v, ir.IntType(64))], source_etype=I16)

    def amd_store(self, loaded: list[tuple], stage: Sym | int) -> None:
        """The values amd_load returned into LDS stage ``stage``: A and B (kn) one vector store
        each (aligned to its width); B (nk) per column e of the unit, K rows 2r and 2r+1 as one
        <2 x i16> store at column row v*vw+e."""
        s, b, vw = self.spec, self.b, self.spec.vector_width
        a_off = self.stage_base(stage)
        for (which, pair, _chunks, _vpr, ld, _it), r, v, vals in loaded:
            off = a_off if which == "A" else a_off + s.block_m * self.lda
            if pair == 1:
                b.store(vals[0], self.gep(self.lds, off + r * ld + v * vw), align=2 * vw)
                continue
            two = ir.VectorType(I16, 2)
            for e in range(vw):
                x0, x1 = ((val if vw == 1 else b.extract_element(val, _c32(e))) for val in vals)
                w = b.insert_element(b.insert_element(ir.Constant(two, None), x0, _c32(0)), x1, _c32(1))
                b.store(w, self.gep(self.lds, off + (v * vw + e) * ld + r * 2), align=4)

    def build_amd(self, ktiles: Sym, zero: list[ir.Value]) -> list[ir.Value]:
        """The AMD matrix paths' main loop (mfma / wmma, stages 0); returns the accumulators.

          kfull = K // block_k if the block's rows and columns lie inside M and N, else 0
          [kfull > 0: K-tile 0 -> registers -> LDS stage 0; barrier]
          interior loop kt < kfull (no edge test in it):
              global loads of K-tile min(kt + 1, kfull - 1) into registers   (issued first)
              compute stage kt & 1 (double buffer) / 0                        (LDS reads, MFMAs)
              single: barrier; registers -> stage 0;         barrier   (two a step)
              double: registers -> stage (kt + 1) & 1;       barrier   (one a step: that stage
                      was last read in step kt - 1, before the barrier that ended it; the last
                      step's reload goes to the stage nobody reads after it)
          edge loop kt in kfull .. ceil(K / block_k): the checked tile (zero outside the matrices)
              -> registers -> LDS stage 0; barrier; compute; barrier
        The last interior step reloads its own tile (no branch around the loads); the edge loop
        runs for the blocks on the M / N edge (every K-tile) and for a K tail (one)."""
        s, kb, b = self.spec, self.kb, self.b
        inside = kb.all_of(b.icmp_unsigned("<=", (self.row0 + s.block_m).v, self.M.v),
                           b.icmp_unsigned("<=", (self.col0 + s.block_n).v, self.N.v))
        kfull = self.S(b.select(inside, (self.K // s.block_k).v, _c32(0)))
        with kb.if_then(self.S(_c32(0)).lt(kfull), name="pro"):
            self.amd_store(self.amd_load(self.S(_c32(0)), checked=False), 0)
        kb.barrier()
        last = kfull - 1

        def interior(kt: Sym, acc: list[ir.Value]) -> list[ir.Value]:
            nxt = kt + 1
            nxt = self.S(b.select(nxt.lt(kfull), nxt.v, last.v))
            regs = self.amd_load(nxt, checked=False)
            if s.double_buffer:
                acc = self.compute(kt % 2, acc)
                self.amd_store(regs, (kt + 1) % 2)
            else:
                acc = self.compute(0, acc)
                kb.barrier()
                self.amd_store(regs, 0)
            kb.barrier()
            return acc

        acc = kb.loop(kfull, zero, interior, name="k")

        def edge(i: Sym, acc: list[ir.Value]) -> list[ir.Value]:
            self.amd_store(self.amd_load(kfull + i, checked=True), 0)
            kb.barrier()
            acc = self.compute(0, acc)
            kb.barrier()
            return acc

        return kb.loop(ktiles - kfull, acc, edge, name="kedge")

    def stage_base(self, stage: Sym | int) -> Sym:
        s = self.spec
        per = s.block_m * self.lda + s.b_tile_elems
        return self.S(_c32(0)) + stage * per if isinstance(stage, int) else stage * per

    def lds_load(self, idx: Sym) -> ir.Value:
        return self.b.load(self.gep(self.lds, idx), typ=I16, align=2)

    def runs(self, per_lane: int, run: int, index) -> ir.Value:
        """A <per_lane x i16> fragment read as runs of ``run`` elements: element j at LDS
        index(j) (a Sym), one <run x i16> load per run (run 1: one element each)."""
        vec = ir.Constant(ir.VectorType(I16, per_lane), None)
        for j in range(0, per_lane, run):
            if run == 1:
                vec = self.b.insert_element(vec, self.lds_load(index(j)), _c32(j))
                continue
            got = self.b.load(self.gep(self.lds, index(j)), typ=ir.VectorType(I16, run), align=2 * run)
            for e in range(run):
                vec = self.b.insert_element(vec, self.b.extract_element(got, _c32(e)), _c32(j + e))
        return vec

    # -- compute ------------------------------------------------------------------------
    def compute(self, stage: Sym | int, acc: list[ir.Value]) -> list[ir.Value]:
        s, g = self.spec, self.geo
        a_off = self.stage_base(stage)
        b_off = a_off + s.block_m * self.lda
        if self.instr is None:
            tx, ty = self.tid % (s.block_n // g.thread_n), self.tid // (s.block_n // g.thread_n)
            a_row = a_off + ty * (g.thread_m * self.lda)  # this thread's first A row in LDS
            b_col = b_off + tx * g.thread_n

            def step(kk: Sym, vals: list[ir.Value]) -> list[ir.Value]:
                av = [self.to_f32(self.lds_load(a_row + kk + i * self.lda)) for i in range(g.thread_m)]
                b_k = b_col + kk * self.ldb
                bv = [self.to_f32(self.lds_load(b_k + j)) for j in range(g.thread_n)]
                return [self.b.call(self.fmuladd, [av[i], bv[j], vals[i * g.thread_n + j]])
                        for i in range(g.thread_m) for j in range(g.thread_n)]

            # a runtime loop over the K-tile: the IR stays small, LLVM's O3 unrolls it
            return self.kb.loop(s.block_k, list(acc), step, name="kk")
        ins = self.instr
        lane, wm0, wn0 = self.warp_origin()

        def k_step(ks: Sym | int, out: list[ir.Value]) -> list[ir.Value]:
            k0 = ks * ins.k
            afr = []
            for i in range(g.tiles_m):
                vec = ir.Constant(ir.VectorType(I16, ins.a_per_lane), None)
                for j in range(0, ins.a_per_lane, self.a_run):
                    r, c = ins.a_coord(lane, j)
                    idx = a_off + (wm0 + i * ins.m + r) * self.lda + (c + k0)
                    if self.a_run == 1:
                        vec = self.b.insert_element(vec, self.lds_load(idx), _c32(j))
                        continue
                    run = self.b.load(self.gep(self.lds, idx), typ=ir.VectorType(I16, self.a_run),
                                      align=2 * self.a_run)
                    for e in range(self.a_run):
                        vec = self.b.insert_element(vec, self.b.extract_element(run, _c32(e)), _c32(j + e))
                afr.append(vec)
            if s.b_lds == "nk":
                bfr = [self.runs(ins.b_per_lane, self.b_run, lambda j, t=t: (
                    lambda c, kr: b_off + (wn0 + t * ins.n + c) * self.ldb + (kr + k0))(*self.b_cn(lane, j)))
                    for t in range(g.tiles_n)]
                return [call_matrix(self.kb, self.mma_fn, ins, afr[i], bfr[t], out[i * g.tiles_n + t])
                        for i in range(g.tiles_m) for t in range(g.tiles_n)]
            bfr = []
            for t in range(g.tiles_n):
                vec = ir.Constant(ir.VectorType(I16, ins.b_per_lane), None)
                for j in range(ins.b_per_lane):
                    kr, c = ins.b_coord(lane, j)
                    x = self.lds_load(b_off + (kr + k0) * self.ldb + (wn0 + t * ins.n + c))
                    vec = self.b.insert_element(vec, x, _c32(j))
                bfr.append(vec)
            return [call_matrix(self.kb, self.mma_fn, ins, afr[i], bfr[t], out[i * g.tiles_n + t])
                    for i in range(g.tiles_m) for t in range(g.tiles_n)]

        steps = s.block_k // ins.k
        return k_step(0, list(acc)) if steps == 1 else self.kb.loop(steps, list(acc), k_step, name="ks")

    # -- epilogue -----------------------------------------------------------------------
    def store_out(self, row: Sym, col: Sym, value: ir.Value) -> None:
        b = self.b
        with self.kb.if_then(self.kb.all_of(row.lt(self.M), col.lt(self.N)), name="st"):
            out_ty = _OUT_TYPES[self.spec.out_dtype]
            v = value if out_ty is F32 else b.fptrunc(value, out_ty)
            b.store(v, self.gep(self.C, row * self.N + col, out_ty))

    def epilogue(self, acc: list[ir.Value]) -> None:
        s, g = self.spec, self.geo
        if self.instr is None:
            tx, ty = self.tid % (s.block_n // g.thread_n), self.tid // (s.block_n // g.thread_n)
            for i in range(g.thread_m):
                for j in range(g.thread_n):
                    self.store_out(self.row0 + ty * g.thread_m + i, self.col0 + tx * g.thread_n + j,
                                   acc[i * g.thread_n + j])
            return
        ins = self.instr
        lane, wm0, wn0 = self.warp_origin()
        for i in range(g.tiles_m):
            for t in range(g.tiles_n):
                vec = acc[i * g.tiles_n + t]
                for r in range(ins.acc_per_lane):
                    dr, dc = ins.d_coord(lane, r)
                    x = self.b.extract_element(vec, _c32(r))
                    self.store_out(self.row0 + wm0 + i * ins.m + dr, self.col0 + wn0 + t * ins.n + dc, x)

    # -- tile order -------------------------------------------------------------------
    def grouped_tile(self, gid: Sym, tiles_n: Sym) -> tuple[Sym, Sym]:
        """(tile row, tile column) of work-group gid in groups of group_m tile rows."""
        G = self.spec.group_m
        b = self.b
        tiles_m = (self.M + (self.spec.block_m - 1)) // self.spec.block_m
        per_group = tiles_n * G
        first = (gid // per_group) * G
        left = tiles_m - first  # > 0 for every launched work-group
        rows = self.S(b.select(b.icmp_unsigned("<", left.v, _c32(G)), left.v, _c32(G)))
        within = gid % per_group
        return first + within % rows, within // rows

    # -- the asynchronous pipeline (sm_90: cp.async + ldmatrix) ---------------------------
    def _regs_to_bits(self, regs: list[ir.Value]) -> ir.Value:
        vec = ir.Constant(ir.VectorType(I32, len(regs)), None)
        for i, r in enumerate(regs):
            vec = self.b.insert_element(vec, r, _c32(i))
        return self.b.bitcast(vec, ir.VectorType(I16, 2 * len(regs)))

    def epilogue_pairs(self, acc: list[ir.Value]) -> None:
        """mma.sync results c0,c1 (c2,c3) are columns 2t, 2t+1 of one row: a 2-element store
        (N is even here, so both columns are in or out together and the store is aligned).
        A 2-byte output takes the quad path (``quad_stores``) where the warp's tile allows it."""
        s, g, ins, b = self.spec, self.geo, self.instr, self.b
        if quad_stores(s, g):
            self.epilogue_quads(acc)
            return
        out_ty = _OUT_TYPES[s.out_dtype]
        lane, wm0, wn0 = self.warp_origin()
        vty = ir.VectorType(out_ty, 2)
        for i in range(g.tiles_m):
            for t in range(g.tiles_n):
                vec = acc[i * g.tiles_n + t]
                for r in range(0, ins.acc_per_lane, 2):
                    dr, dc = ins.d_coord(lane, r)
                    row, col = self.row0 + wm0 + i * self.row_step + dr, self.col0 + wn0 + t * ins.n + dc
                    with self.kb.if_then(self.kb.all_of(row.lt(self.M), col.lt(self.N)), name="st"):
                        pair = ir.Constant(vty, None)
                        for e in range(2):
                            x = b.extract_element(vec, _c32(r + e))
                            pair = b.insert_element(pair, x if out_ty is F32 else b.fptrunc(x, out_ty), _c32(e))
                        b.store(pair, self.gep(self.C, row * self.N + col, out_ty), align=2 * DTYPE_BYTES[s.out_dtype])

    def epilogue_quads(self, acc: list[ir.Value]) -> None:
        """2-byte outputs, two n-tiles (t, t+1) at a time: a lane's pair is 4 bytes, so a
        quad's pairs of one row fill only half of a 32-byte sector per store; the H200 ran the
        f16-output kernels up to 1.3x slower than their f32-output twins (run 13, short K,
        where the epilogue is most of the time). Lanes 2j and 2j+1 of a quad swap one pair
        (one shfl.bfly 1): the even lane then holds columns 4j..4j+3 of tile t, the odd one
        the same columns of tile t+1, and the quad writes 8-byte stores that fill whole sectors
        (32 contiguous bytes a row), half as many stores as pairs. Columns come in groups of 4
        and N % 8 == 0 on this path (build_async traps otherwise), so a group is in or out
        whole; the shuffle runs on every lane, before the bounds check."""
        s, g, ins, b = self.spec, self.geo, self.instr, self.b
        out_ty = _OUT_TYPES[s.out_dtype]
        lane, wm0, wn0 = self.warp_origin()
        odd_s = lane % 2
        odd = b.icmp_unsigned("!=", odd_s.v, _c32(0))
        half_ty = ir.VectorType(out_ty, 2)
        shfl = self.kb.declare("shfl_bfly_i32")

        def pack(vec: ir.Value, r: int) -> ir.Value:
            pair = ir.Constant(half_ty, None)
            for e in range(2):
                pair = b.insert_element(pair, b.fptrunc(b.extract_element(vec, _c32(r + e)), out_ty), _c32(e))
            return b.bitcast(pair, I32)

        for i in range(g.tiles_m):
            for t in range(0, g.tiles_n, 2):
                va, vb = acc[i * g.tiles_n + t], acc[i * g.tiles_n + t + 1]
                for r in range(0, ins.acc_per_lane, 2):
                    dr, dc = ins.d_coord(lane, r)
                    pa, pb = pack(va, r), pack(vb, r)
                    got = b.call(shfl, [_c32(-1), b.select(odd, pa, pb), _c32(1), _c32(0x1F)])
                    quad = b.insert_element(ir.Constant(ir.VectorType(I32, 2), None), b.select(odd, got, pa), _c32(0))
                    quad = b.insert_element(quad, b.select(odd, pb, got), _c32(1))
                    # dc = 2j: (dc // 4) * 4 = 4 * (j // 2); the odd lane's group is in tile t+1
                    row = self.row0 + wm0 + i * self.row_step + dr
                    col = self.col0 + wn0 + t * ins.n + (dc // 4) * 4 + odd_s * ins.n
                    with self.kb.if_then(self.kb.all_of(row.lt(self.M), col.lt(self.N)), name="st"):
                        b.store(quad, self.gep(self.C, row * self.N + col, out_ty), align=8)

    # -- the pipeline's main loop, CUTLASS-style --
    def copy_plan(self) -> _CopyPlan:
        """The loop-invariant part of every cp.async a thread issues per K-tile, computed once
        before the loop (module doc, build_async): per operand one source index at K-tile 0,
        one LDS offset, the column test (B) and the per-round residue (A: rows left in M).
        An operand row whose vectors the threads do not step evenly (B of 192 columns: 24
        vectors) is copied in panels (variants/gemm.py copy_panel, 8 vectors of it), each panel
        one more _CopyOperand at a constant column offset: the same walk, panel after panel."""
        s, T, vw = self.spec, self.geo.threads, self.spec.vector_width
        ops = []
        for which in ("A", "B"):
            rows, cols = (s.block_m, s.block_k) if which == "A" else (s.block_k, s.block_n)
            ld = self.lda if which == "A" else self.ldb
            vpr = copy_panel(T, cols, s.wgmma)  # vectors a panel row (all of the row: one panel)
            chunks = rows * vpr
            if T % vpr:  # a work-item's chunks would change column from round to round
                raise CapabilityError(f"gemm stages: {T} threads do not step whole {vpr * vw}-element rows")
            r0, v = self.tid // vpr, self.tid % vpr
            dr = T // vpr  # rows between a work-item's rounds
            for panel in range(cols // (vpr * vw)):
                def vc(panel=panel) -> Sym:  # the work-item's column in the tile, emitted where used
                    return v * vw if panel == 0 else v * vw + panel * vpr * vw

                if s.wgmma:  # swizzled: rows dr (a multiple of 8) apart keep the chunk's swizzle
                    lds = s.lds_a_index(r0, vc()) if which == "A" else s.lds_b_index(r0, vc())
                    ld = SWIZZLE_ELEMS
                else:
                    lds = r0 * ld + vc() + (0 if which == "A" else s.block_m * self.lda)
                if which == "A":  # rows of A: M; K at the column
                    rem = self.M - (self.row0 + r0)  # rounds it with it * dr < rem are inside M (signed)
                    src = (self.row0 + r0) * self.K + vc()
                    step, fixed, koff = self.K * dr, None, vc()
                else:  # rows of B: K; N at the column (a multiple of 8: all of a vector in or out)
                    rem = None
                    src = r0 * self.N + (self.col0 + vc())
                    step, fixed, koff = self.N * dr, (self.col0 + vc()).lt(self.N), r0
                ops.append(_CopyOperand(which, -(-chunks // T), chunks, dr, ld, lds, src, step, rem, fixed, koff))
        return _CopyPlan(tuple(ops))

    def issue_copies(self, plan: _CopyPlan, kt: Sym, stage_off: Sym) -> None:
        """cp.async K-tile kt into the stage at LDS element offset stage_off, from the plan: per copy
        one index add, one residue test and its negation, cp.async's ignore-src predicate (16 zero
        bytes, NvptxKernel.async_copy16_unless). A tile past K (the
        pipeline's last S - 1 iterations) copies 0 bytes of every chunk: zeros into a stage nobody
        reads, in place of a branch that would cut the loop body in two basic blocks (ptxas then
        cannot interleave the copies with the mma.sync of the same iteration)."""
        s, b, kb = self.spec, self.b, self.kb
        k0 = kt * s.block_k
        for op in plan.ops:
            base = op.src + k0 * (1 if op.which == "A" else self.N)
            if op.which == "A":  # every round of a work-item: the same K columns
                k_ok = b.icmp_signed("<", (k0 + op.koff).v, self.K.v)
                k_left = None
            else:  # every round: its own K row; rows it * dr < K - k0 - r0 are inside
                k_ok, k_left = op.fixed, self.K - k0 - op.koff
            for it in range(op.rounds):
                guard = None
                if op.chunks % self.geo.threads and it == op.rounds - 1:  # a partial last round
                    guard = kb.if_then(self.tid.lt(op.chunks - it * self.geo.threads), name="cpa")
                    guard.__enter__()
                if op.which == "A":
                    ok = b.and_(k_ok, b.icmp_signed("<", _c32(it * op.dr), op.rem.v))
                else:
                    ok = b.and_(k_ok, b.icmp_signed("<", _c32(it * op.dr), k_left.v))
                # no address clamp: a copy that ignores its source reads nothing (PTX ISA cp.async
                # ignore-src; CUTLASS's zfill and Triton's masked copies pass the address as is),
                # and the index (non-negative, zero-extended) stays within S tiles of the tensor
                src = b.gep(self.A if op.which == "A" else self.B, [b.zext((base + op.step * it).v, ir.IntType(64))],
                            source_etype=I16)
                kb.async_copy16_unless(self.gep(self.lds, stage_off + op.lds + it * op.dr * op.ld), src, b.not_(ok))
                if guard is not None:
                    guard.__exit__(None, None, None)

    def load_fragments(self, stage_off: Sym, ks: int) -> tuple[list[ir.Value], list[ir.Value]]:
        """A and B fragments of k-step ks of the stage at stage_off: ldmatrix.x4 per 16x16 A tile,
        ldmatrix.x4.trans per pair of 16x8 B tiles (.x2.trans for an odd one); module doc.
        Addresses: one lane pointer per operand and stage (its warp and lane part precomputed),
        every tile and k-step a constant element offset from it, which ptxas folds into the
        ldmatrix's immediate ([R+imm]: no address arithmetic per fragment)."""
        s, g, ins, kb = self.spec, self.geo, self.instr, self.kb
        k0 = ks * ins.k
        a_ptr = self.gep(self.lds, stage_off + self.a_lane)
        b_ptr = self.gep(self.lds, stage_off + self.b_lane)

        def at(p: ir.Value, off: int) -> ir.Value:
            return self.gep(p, self.S(_c32(off)))

        afr = [self._regs_to_bits(kb.ldmatrix(at(a_ptr, i * ins.m * self.lda + k0), 4, False))
               for i in range(g.tiles_m)]
        bfr = []
        b0 = s.block_m * self.lda + k0 * self.ldb  # B's stage offset and k-step row
        for t in range(0, g.tiles_n, 2):
            if t + 1 < g.tiles_n:  # b_lane includes the lane's half (the second N-tile): .x4
                d = kb.ldmatrix(at(b_ptr, b0 + t * ins.n), 4, True)
                bfr += [self._regs_to_bits(d[0:2]), self._regs_to_bits(d[2:4])]
            else:  # .x2: lanes 0-15 give the addresses, of the one N-tile
                d = kb.ldmatrix(self.gep(self.lds, stage_off + self.b_lane_x2 + (b0 + t * ins.n)), 2, True)
                bfr.append(self._regs_to_bits(d))
        return afr, bfr

    def smin(self, x: Sym, y: Sym) -> Sym:
        return self.S(self.b.select(self.b.icmp_signed("<", x.v, y.v), x.v, y.v))

    def k_slice(self, ktiles: Sym) -> tuple[Sym | None, Sym]:
        """(first K-tile, K-tiles) of this work-group: all of K, first None (the IR of split_k 1 is
        the kernel's from before split-K), or with split_k > 1 its slice."""
        s = self.spec
        if s.split_k == 1:
            return None, ktiles
        per_z = (ktiles + (s.split_k - 1)) // s.split_k  # K-tiles [z * per, min(ktiles, (z + 1) * per))
        first_kt = self.smin(self.z * per_z, ktiles)  # clamped: an empty slice copies within S tiles of K
        return first_kt, self.smin(first_kt + per_z, ktiles) - first_kt

    def trap_misaligned(self) -> None:
        """Trap unless K and N are multiples of 8: every 16-byte copy is a whole row piece."""
        b = self.b
        with self.kb.if_then(b.icmp_unsigned("!=", b.and_(b.or_(self.K.v, self.N.v), _c32(7)), _c32(0)),
                             name="misaligned"):
            self.kb.trap()

    def build_async(self, ktiles: Sym) -> None:
        """The main loop (module doc): invariant copy plan, branch-free copies, fragments of the next
        k-step read while this one's mma.sync issue, one wait + barrier per K-tile placed after the
        tile's last fragment read, so the last k-step's mma.sync run across it. With split_k > 1
        the loop runs this work-group's K slice and reduce_split meets the other slices."""
        s, g, ins, kb, b = self.spec, self.geo, self.instr, self.kb, self.b
        first_kt, ktiles = self.k_slice(ktiles)
        S, KS = s.stages, s.block_k // ins.k
        per = s.block_m * self.lda + s.b_tile_elems  # elements per stage
        self.trap_misaligned()
        lane, wm0, wn0 = self.warp_origin()
        row8 = lane % 8 + (lane // 8) % 2 * 8  # the row (A) / K row (B) this lane addresses
        half = (lane // 16) * 8  # A: K + 8 for matrices 2, 3; B: the second N-tile
        # lane parts of the ldmatrix addresses (load_fragments): A row, K half and warp row; B K row,
        # the lane's N-tile of a pair (.x4) or none (.x2: lanes 16-31's addresses are unused) and warp column
        self.a_lane = (row8 + wm0) * self.lda + half
        self.b_lane = row8 * self.ldb + half + wn0
        self.b_lane_x2 = row8 * self.ldb + wn0
        plan = self.copy_plan()
        for st in range(S - 1):  # tiles past K copy zeros (issue_copies): no branch here either
            self.issue_copies(plan, self.S(_c32(st)) if first_kt is None else first_kt + st, self.S(_c32(st * per)))
            kb.async_commit()
        kb.async_wait(S - 2)
        kb.barrier()
        first = self.load_fragments(self.S(_c32(0)), 0)
        nt = g.tiles_m * g.tiles_n
        zero = [ir.Constant(ir.VectorType(F32, ins.acc_per_lane), None)] * nt

        def ring(off: Sym) -> Sym:  # the next stage's offset: stages 0 .. S-1, then 0 again
            return self.S(b.select(b.icmp_unsigned("==", (off + per).v, _c32(S * per)), _c32(0), (off + per).v))

        def k_tile(kt: Sym, vals: list[ir.Value]) -> list[ir.Value]:
            acc, rd, wr = vals[:nt], self.S(vals[nt]), self.S(vals[nt + 1])
            frag = (vals[nt + 2:nt + 2 + g.tiles_m], vals[nt + 2 + g.tiles_m:])
            for ks in range(KS):
                if ks == 0:  # K-tile kt + S - 1 into the stage every warp finished before the last barrier
                    self.issue_copies(plan, (kt if first_kt is None else first_kt + kt) + (S - 1), wr)
                nxt = self.load_fragments(rd, ks + 1) if ks + 1 < KS else None
                acc = [call_matrix(kb, self.mma_fn, ins, frag[0][i], frag[1][t], acc[i * g.tiles_n + t])
                       for i in range(g.tiles_m) for t in range(g.tiles_n)]
                if ks == max(KS - 2, 0):  # this tile's last fragment read is issued: next tile's turn
                    kb.async_commit()
                    kb.async_wait(S - 2)  # K-tile kt + 1 has landed (this thread's copies) ...
                    kb.barrier()  # ... every thread's; every warp is done reading stage kt % S
                    rd, wr = ring(rd), ring(wr)
                if ks == KS - 1:
                    nxt = self.load_fragments(rd, 0)  # K-tile kt + 1's first k-step
                frag = nxt
            return acc + [rd.v, wr.v] + frag[0] + frag[1]

        carried = zero + [_c32(0), _c32((S - 1) * per)] + first[0] + first[1]
        acc = kb.loop(ktiles, carried, k_tile, name="k")[:nt]
        kb.async_wait(0)  # no copy may still target shared memory when the block exits
        if s.split_k > 1:
            acc = self.reduce_split(acc)
        self.epilogue_pairs(acc)
        self.b.ret_void()

    # -- the warpgroup pipeline (sm_90a: cp.async into swizzled stages + wgmma.mma_async) ------
    def descriptor(self, base: Sym, lbo: int, sbo: int) -> ir.Value:
        """A wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor Format"): start
        address >> 4 in bits 0..13, leading / stride dimension byte offsets >> 4 in bits 16..29 /
        32..45, base offset 0 (every atom starts on a 1024-byte boundary: build rounds the base up), 128-byte
        swizzle (1) in bits 62..63. ``base`` is a byte address; a k-step or m64 tile adds to the
        start field only (the 16-byte units of its byte offset), as the swizzle is of address bits."""
        i64 = ir.IntType(64)
        start = self.b.zext((base // 16).v, i64)
        return self.b.or_(start, ir.Constant(i64, descriptor_bits(lbo, sbo)))

    def build_wgmma(self, ktiles: Sym) -> None:
        """The warpgroup main loop (module doc, "The warpgroup pipeline"). Per K-tile kt:
             cp.async wait (copy_ahead - 1 pending: tile kt landed); fence.proxy.async; barrier
             cp.async K-tile kt + copy_ahead -> its stage (last read by tile kt - 1 - in_flight,
             whose wgmma every warpgroup has waited for before the barrier); commit
             wgmma.fence; per k-step, per m64 tile: wgmma m64nNk16 from the stage's descriptors;
             commit; wait (in_flight pending)
           then wait for every wgmma (the accumulators pass through the wait) and every copy."""
        s, g, kb, b = self.spec, self.geo, self.kb, self.b
        first_kt, ktiles = self.k_slice(ktiles)
        S, D, W = s.stages, s.copy_ahead, s.wgmma_in_flight
        KS = s.block_k // WGMMA_K
        per = s.block_m * self.lda + s.b_tile_elems  # elements per stage (a multiple of 512: 1024 bytes)
        self.trap_misaligned()
        base = self.S(kb.shared_address(self.lds))  # 1024-byte aligned (build): base offset 0
        group = self.tid // (WARPGROUP * g.wave_size)
        a_rows = g.tiles_m * WGMMA_M  # rows of A one warpgroup multiplies
        # A: K-major, 128-byte rows, 8-row atoms 1024 bytes apart (SBO); LBO unused for a swizzled
        # K-major operand whose K (32 bytes a k-step) stays inside one swizzle row (PTX ISA: 1).
        # B: N-major; 8 K rows an atom 1024 bytes apart (SBO), 64-column chunks block_k rows apart (LBO).
        a_desc = self.descriptor(base + group * (a_rows * SWIZZLE_ELEMS * 2), 16, 1024)
        b_desc = self.descriptor(base + s.block_m * SWIZZLE_ELEMS * 2, SWIZZLE_ELEMS * s.block_k * 2, 1024)
        i64 = ir.IntType(64)

        def at(desc: ir.Value, stage: Sym, byte_off: int) -> ir.Value:
            return b.add(desc, b.zext((stage // 8 + byte_off // 16).v, i64))  # stage: elements

        plan = self.copy_plan()
        for st in range(D):  # tiles past K copy zeros (issue_copies)
            self.issue_copies(plan, self.S(_c32(st)) if first_kt is None else first_kt + st, self.S(_c32(st * per)))
            kb.async_commit()
        acc_n = s.block_n // 2
        zero = [ir.Constant(F32, 0.0)] * (acc_n * g.tiles_m)

        def ring(off: Sym) -> Sym:
            return self.S(b.select(b.icmp_unsigned("==", (off + per).v, _c32(S * per)), _c32(0), (off + per).v))

        def k_tile(kt: Sym, vals: list[ir.Value]) -> list[ir.Value]:
            acc, rd, wr = vals[:-2], self.S(vals[-2]), self.S(vals[-1])
            kb.async_wait(D - 1)  # K-tile kt has landed (this thread's copies) ...
            kb.fence_proxy_async()  # ... and is visible to the async proxy ...
            kb.barrier()  # ... every thread's; every warpgroup has waited for tile kt - 1 - W's wgmma
            self.issue_copies(plan, (kt if first_kt is None else first_kt + kt) + D, wr)
            kb.async_commit()
            kb.wgmma_fence()
            for ks in range(KS):
                for j in range(g.tiles_m):
                    part = acc[j * acc_n:(j + 1) * acc_n]
                    got = kb.wgmma(s.block_n, s.in_dtype, part,
                                   at(a_desc, rd, j * WGMMA_M * SWIZZLE_ELEMS * 2 + ks * 32),
                                   at(b_desc, rd, ks * WGMMA_K * SWIZZLE_ELEMS * 2), trans_b=True)
                    acc = acc[:j * acc_n] + got + acc[(j + 1) * acc_n:]
            kb.wgmma_commit()
            if W:
                kb.wgmma_wait(W)
            else:
                acc = kb.wgmma_wait(0, acc)
            return acc + [ring(rd).v, ring(wr).v]

        carried = zero + [_c32(0), _c32(D % S * per)]
        acc = kb.loop(ktiles, carried, k_tile, name="k")[:-2]
        acc = kb.wgmma_wait(0, acc)
        kb.async_wait(0)  # no copy may still target shared memory when the block exits
        vec_ty = ir.VectorType(F32, 4)
        frags = []  # fragment (j, n8 slice f): accumulators 4f .. 4f + 3 of m64 tile j
        for j in range(g.tiles_m):
            for f in range(g.tiles_n):
                v = ir.Constant(vec_ty, None)
                for r in range(4):
                    v = b.insert_element(v, acc[j * acc_n + 4 * f + r], _c32(r))
                frags.append(v)
        if s.split_k > 1:
            frags = self.reduce_split(frags)
        self.epilogue_pairs(frags)
        self.b.ret_void()

    def reduce_split(self, acc: list[ir.Value]) -> list[ir.Value]:
        """Split-K's serial reduction (docs/lowering.md "Split-K"); returns the tile's sums in the
        last work-group of the tile to arrive, every other one returns from the kernel.

        W (the workspace): tiles x split_k partial tiles of bm x bn f32, then one 32-bit counter
        per tile. A partial is stored in register order, not C's: fragment f of thread t at
        ((tile * split_k + z) * nt + f) * threads * 4 + t * 4, one 16-byte st.global.cg a lane, so
        a warp's store is 512 contiguous bytes and the reducer, the same thread of another CTA of
        the same tile, reads back exactly its own fragment layout.
          1. every thread stores its partial; bar.sync (each thread's stores precede thread 0's
             next instructions in causality order: PTX ISA, barriers synchronize)
          2. thread 0: fence.acq_rel.gpu; atom.relaxed.gpu.add counter, 1 (a release pattern:
             the CTA's stores before the counter's new value); fence.acq_rel.gpu (with the atom
             before it an acquire pattern: every earlier arrival's release, through the chain of
             atomic adds on the counter, happens before what follows); old value -> shared
          3. bar.sync; every thread: last = (old == split_k - 1); the others return
          4. the last: thread 0 puts the counter back to 0 (the next launch, in stream order,
             finds the workspace as this one did); every thread reads the split_k partials with
             ld.global.cg and adds them in the fixed order z = 0, 1, .. split_k - 1 (its own
             included, read back: the same sum whichever CTA arrives last), then the epilogue."""
        s, g, ins, kb, b = self.spec, self.geo, self.instr, self.kb, self.b
        nt, T = len(acc), g.threads
        if ins.acc_per_lane != 4:  # one 16-byte store / load per fragment and lane (mma.sync m16n8: 4 f32)
            raise CapabilityError(f"gemm split_k: {ins.mnemonic} keeps {ins.acc_per_lane} results a lane, not 4")
        tiles_m = (self.M + (s.block_m - 1)) // s.block_m
        tiles = tiles_m * ((self.N + (s.block_n - 1)) // s.block_n)
        f32 = lambda idx: self.gep(self.W, idx, F32)  # noqa: E731

        def slot(z: Sym | int, f: int) -> Sym:  # float index of fragment f of this thread, slice z
            return ((self.tile * s.split_k + z) * nt + f) * (T * 4) + self.tid * 4

        for f, v in enumerate(acc):
            kb.store_cg_v4f32(f32(slot(self.z, f)), v)
        kb.barrier()
        flag = self.gep(self.lds, self.S(_c32(0)), I32)  # the stages are idle: async_wait(0), barrier
        counter = f32(tiles * (s.split_k * s.block_m * s.block_n) + self.tile)
        with kb.if_then(b.icmp_unsigned("==", self.tid.v, _c32(0)), name="arrive"):
            kb.fence_acq_rel_gpu()
            old = kb.atomic_add_gpu(counter, _c32(1))
            kb.fence_acq_rel_gpu()
            b.store(old, flag, align=4)
        kb.barrier()
        arrived = b.load(flag, typ=I32, align=4)
        with kb.if_then(b.icmp_unsigned("!=", arrived, _c32(s.split_k - 1)), name="notlast"):
            b.ret_void()
        with kb.if_then(b.icmp_unsigned("==", self.tid.v, _c32(0)), name="reset"):
            b.store(_c32(0), counter, align=4)

        def total(f: int) -> ir.Value:
            parts = [kb.load_cg_v4f32(f32(slot(z, f))) for z in range(s.split_k)]
            out = parts[0]
            for p in parts[1:]:
                out = b.fadd(out, p)
            return out

        return _SumsOnUse(total, nt)

    # -- the kernel ---------------------------------------------------------------------
    def build(self) -> None:
        s, g, kb = self.spec, self.geo, self.kb
        params = kb.define_kernel(s.launch_formulas().args)
        if s.split_k > 1:
            self.A, self.B, self.C, self.W, m, n, k = params
        else:
            self.A, self.B, self.C, m, n, k = params
        b = self.b
        self.M, self.N, self.K = self.S(m), self.S(n), self.S(k)
        stages = s.stages or (2 if s.double_buffer else 1)
        per = s.block_m * self.lda + s.b_tile_elems
        if s.wgmma:  # the swizzle atoms need 1024-byte alignment: the base rounded up inside the array
            raw = kb.dynamic_shared_array("gemm_lds", I16, stages * per + WGMMA_ALIGN // 2, 2)
            addr = self.S(kb.shared_address(raw))
            pad = (self.S(_c32(WGMMA_ALIGN)) - addr % WGMMA_ALIGN) % WGMMA_ALIGN  # bytes, 0 if aligned
            self.lds = self.gep(raw, pad // 2)
        elif s.dynamic_lds:
            self.lds = kb.dynamic_shared_array("gemm_lds", I16, stages * per, 2)
        else:
            self.lds = kb.shared_array("gemm_lds", I16, stages * per, 2)
        self.tid = self.S(kb.workitem_id())
        gid = self.S(kb.workgroup_id())
        if s.split_k > 1:  # the K slices of one tile are neighbours in launch order
            self.z, gid = gid % s.split_k, gid // s.split_k
        self.tile = gid
        tiles_n = (self.N + (s.block_n - 1)) // s.block_n
        if s.group_m == 1:  # row-major tiles
            self.row0 = (gid // tiles_n) * s.block_m
            self.col0 = (gid % tiles_n) * s.block_n
        else:
            tm, tn = self.grouped_tile(gid, tiles_n)
            self.row0, self.col0 = tm * s.block_m, tn * s.block_n
        ktiles = (self.K + (s.block_k - 1)) // s.block_k
        if s.wgmma:
            self.build_wgmma(ktiles)
            return
        if s.stages:
            self.build_async(ktiles)
            return
        if self.instr is None:
            zero = [ir.Constant(F32, 0.0)] * (g.thread_m * g.thread_n)
        else:
            zero = [ir.Constant(ir.VectorType(F32, self.instr.acc_per_lane), None)] * (g.tiles_m * g.tiles_n)
        if self.instr is not None and kb.target.is_amdgpu:
            self.epilogue(self.build_amd(ktiles, zero))
            b.ret_void()
            return
        if s.double_buffer:
            with kb.if_then(self.S(_c32(0)).lt(ktiles), name="pro"):
                self.stage_tile(self.S(_c32(0)), 0)
            kb.barrier()

        def k_tile(kt: Sym, acc: list[ir.Value]) -> list[ir.Value]:
            if s.double_buffer:
                nxt = kt + 1
                with kb.if_then(nxt.lt(ktiles), name="pre"):
                    self.stage_tile(nxt, nxt % 2)
                acc = self.compute(kt % 2, acc)
                kb.barrier()
            else:
                self.stage_tile(kt, 0)
                kb.barrier()
                acc = self.compute(0, acc)
                kb.barrier()
            return acc

        acc_phis = kb.loop(ktiles, zero, k_tile, name="k")
        self.epilogue(acc_phis)
        b.ret_void()


def wgmma_mnemonic(spec: GemmSpec) -> str:
    """The PTX instruction the warpgroup pipeline issues (N = block_n), as the PTX prints it."""
    return nvptx.wgmma_mnemonic(spec.block_n, spec.in_dtype)


def lower_gemm(spec: GemmSpec, target: Target, lane: lanes.Lane) -> LoweredKernel:
    target, lane = Target.parse(target), lanes.get_lane(lane)
    if not isinstance(spec, GemmSpec):
        raise TypeError(f"lower_gemm needs a GemmSpec, got {type(spec).__name__}")
    # Refuse on capability before the arch-dependent layout: gfx1250 on llvm20 names the op.
    lanes.require(lane, capability=f"target:{target.processor}", op=f"gemm for {target.id}")
    if spec.path != "fma":
        # mfma / wmma are AMDGPU instructions, mma (mma.sync) an NVPTX one
        if (spec.path == "mma") == target.is_amdgpu:
            raise CapabilityError(f"gemm path {spec.path} is not available on {target.processor}")
        instr = mma.select(target.processor, spec.path, spec.in_dtype, spec.mma)
        lanes.require(lane, capability=instr.capability, op=f"gemm {spec.path} ({instr.mnemonic_for(target.processor)})")
    if spec.stages:
        lanes.require(lane, capability="async-copy:sm_90", op=f"gemm stages={spec.stages} (cp.async + ldmatrix)")
    if spec.wgmma:
        lanes.require(lane, capability="wgmma:sm_90a", op="gemm wgmma (sm_90a wgmma.mma_async)")
    geo = spec.geometry(target)
    low = _GemmLowering(spec, target, lane, geo)
    low.build()
    meta = {
        "path": spec.path,
        "instruction": (wgmma_mnemonic(spec) if spec.wgmma
                        else low.instr.mnemonic_for(target.processor) if low.instr else None),
        "block_m": spec.block_m, "block_n": spec.block_n, "stages": spec.stages, "group_m": spec.group_m,
        **({"wgmma": True} if spec.wgmma else {}),
        "geometry": {k: v for k, v in vars(geo).items()},
    }
    return low.kb.lowered("gemm", meta)


def paths_for(processor: str, in_dtype: str = "f16") -> tuple[str, ...]:
    """The gemm paths the lowering implements on a processor (lane capabilities aside)."""
    matrix = tuple(p for p in ("mfma", "wmma", "mma") if mma.shapes_for(processor, p, in_dtype))
    return matrix + ("fma",)
