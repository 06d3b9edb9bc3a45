"""The gemm's asynchronous pipeline (sm_90 mma.sync): cp.async into LDS stages, ldmatrix, split-K.

    build_async(ktiles)  (spec.stages = S in 2..4; GemmSpec.stages), after lower.py's entry:
           entry:  trap unless K and N are multiples of 8 (16-byte aligned rows: the
                   selection refuses such problems, a direct launch must not misread)
           copy plan (copy_plan, once): per operand the work-item's source index at K-tile 0,
                   its LDS offset in a stage, B's column test and A's rows left in M; its
                   rounds are dr = threads / vectors-per-row rows apart, so a round adds a
                   constant LDS offset and it * dr * K (A) / N (B) to the source; a row of
                   vectors the threads do not step evenly (B of block_n 192: 24) goes in
                   panels of 8 vectors, one plan entry each (families/gemm/spec.py copy_panel)
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
                   whole 32-byte sectors (families/gemm/spec.py quad_stores, epilogue_quads)
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

The warpgroup pipeline (lower_warpgroup.py) reuses the copy plan, the split-K reduction and the
paired / quad epilogue of this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import llvmlite.ir as ir

from rocke_aot.aot.lower.matrix import call_matrix
from rocke_aot.aot.lower.module import F32, I16, I32, Sym
from rocke_aot.aot.lower.nvptx import NvptxKernel
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.errors import CapabilityError
from rocke_aot.families.gemm.lower_common import OUT_TYPES, GemmLoweringBase, c32
from rocke_aot.families.gemm.spec import SWIZZLE_ELEMS, copy_panel, quad_stores


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


class Accumulators(Protocol):
    """What an epilogue reads of a tile's accumulators: a list, or split-K's sums on use."""

    def __len__(self) -> int: ...

    def __getitem__(self, f: int, /) -> ir.Value: ...


class _SumsOnUse:
    """The split-K tile's sums as the epilogue's accumulator list, each fragment's loads and adds
    emitted where the epilogue first reads it: emitted all before the epilogue, ptxas kept every
    load in flight (4 x 32 x 4 floats at 128x128, split 4) and spilled 1.1 KB; read next to their
    stores (the loads are ordered behind the previous stores by their memory clobber), no spills."""

    def __init__(self, emit, count: int):
        self.emit, self.count = emit, count
        self.done: dict[int, ir.Value] = {}

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, f: int) -> ir.Value:
        if f not in self.done:
            self.done[f] = self.emit(f)
        return self.done[f]


class AsyncPipeline(GemmLoweringBase):
    """The asynchronous pipeline (module doc): copy plan, cp.async, ldmatrix, split-K, epilogue."""

    @property
    def nv(self) -> NvptxKernel:
        """The kernel module as NVPTX's: cp.async, ldmatrix, split-K and wgmma are sm_90's (the spec
        gives stages, split_k and wgmma to the mma path only, which is NVIDIA's)."""
        assert isinstance(self.kb, NvptxKernel), "the asynchronous pipeline lowers for NVPTX only"
        return self.kb

    # -- the asynchronous pipeline (sm_90: cp.async + ldmatrix) ---------------------------
    def _regs_to_bits(self, regs: list[ir.Value]) -> ir.Value:
        vec = ir.Constant(ir.VectorType(I32, len(regs)), None)
        for i, r in enumerate(regs):
            vec = self.b.insert_element(vec, r, c32(i))
        return self.b.bitcast(vec, ir.VectorType(I16, 2 * len(regs)))

    def epilogue_pairs(self, acc: Accumulators) -> None:
        """mma.sync results c0,c1 (c2,c3) are columns 2t, 2t+1 of one row: a 2-element store
        (N is even here, so both columns are in or out together and the store is aligned).
        A 2-byte output takes the quad path (``quad_stores``) where the warp's tile allows it."""
        s, g, ins, b = self.spec, self.geo, self.mma_instr, self.b
        if quad_stores(s, g):
            self.epilogue_quads(acc)
            return
        out_ty = OUT_TYPES[s.out_dtype]
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
                            x = b.extract_element(vec, c32(r + e))
                            pair = b.insert_element(pair, x if out_ty is F32 else b.fptrunc(x, out_ty), c32(e))
                        b.store(pair, self.gep(self.C, row * self.N + col, out_ty), align=2 * DTYPE_BYTES[s.out_dtype])

    def epilogue_quads(self, acc: Accumulators) -> None:
        """2-byte outputs, two n-tiles (t, t+1) at a time: a lane's pair is 4 bytes, so a
        quad's pairs of one row fill only half of a 32-byte sector per store; the H200 ran the
        f16-output kernels up to 1.3x slower than their f32-output twins (run 13, short K,
        where the epilogue is most of the time). Lanes 2j and 2j+1 of a quad swap one pair
        (one shfl.bfly 1): the even lane then holds columns 4j..4j+3 of tile t, the odd one
        the same columns of tile t+1, and the quad writes 8-byte stores that fill whole sectors
        (32 contiguous bytes a row), half as many stores as pairs. Columns come in groups of 4
        and N % 8 == 0 on this path (build_async traps otherwise), so a group is in or out
        whole; the shuffle runs on every lane, before the bounds check."""
        s, g, ins, b = self.spec, self.geo, self.mma_instr, self.b
        out_ty = OUT_TYPES[s.out_dtype]
        lane, wm0, wn0 = self.warp_origin()
        odd_s = lane % 2
        odd = b.icmp_unsigned("!=", odd_s.v, c32(0))
        half_ty = ir.VectorType(out_ty, 2)
        shfl = self.kb.declare("shfl_bfly_i32")

        def pack(vec: ir.Value, r: int) -> ir.Value:
            pair = ir.Constant(half_ty, None)
            for e in range(2):
                pair = b.insert_element(pair, b.fptrunc(b.extract_element(vec, c32(r + e)), out_ty), c32(e))
            return b.bitcast(pair, I32)

        for i in range(g.tiles_m):
            for t in range(0, g.tiles_n, 2):
                va, vb = acc[i * g.tiles_n + t], acc[i * g.tiles_n + t + 1]
                for r in range(0, ins.acc_per_lane, 2):
                    dr, dc = ins.d_coord(lane, r)
                    pa, pb = pack(va, r), pack(vb, r)
                    got = b.call(shfl, [c32(-1), b.select(odd, pa, pb), c32(1), c32(0x1F)])
                    quad = b.insert_element(ir.Constant(ir.VectorType(I32, 2), None), b.select(odd, got, pa), c32(0))
                    quad = b.insert_element(quad, b.select(odd, pb, got), c32(1))
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
        vectors) is copied in panels (families/gemm/spec.py copy_panel, 8 vectors of it), each panel
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
        s, b, kb = self.spec, self.b, self.nv
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
                    assert op.rem is not None, "copy_plan bounds A's rounds by rem"
                    ok = b.and_(k_ok, b.icmp_signed("<", c32(it * op.dr), op.rem.v))
                else:
                    assert k_left is not None, "set above for B"
                    ok = b.and_(k_ok, b.icmp_signed("<", c32(it * op.dr), k_left.v))
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
        s, g, ins, kb = self.spec, self.geo, self.mma_instr, self.nv
        k0 = ks * ins.k
        a_ptr = self.gep(self.lds, stage_off + self.a_lane)
        b_ptr = self.gep(self.lds, stage_off + self.b_lane)

        def at(p: ir.Value, off: int) -> ir.Value:
            return self.gep(p, self.S(c32(off)))

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
        with self.kb.if_then(b.icmp_unsigned("!=", b.and_(b.or_(self.K.v, self.N.v), c32(7)), c32(0)),
                             name="misaligned"):
            self.nv.trap()

    def build_async(self, ktiles: Sym) -> None:
        """The main loop (module doc): invariant copy plan, branch-free copies, fragments of the next
        k-step read while this one's mma.sync issue, one wait + barrier per K-tile placed after the
        tile's last fragment read, so the last k-step's mma.sync run across it. With split_k > 1
        the loop runs this work-group's K slice and reduce_split meets the other slices."""
        s, g, ins, kb, b = self.spec, self.geo, self.mma_instr, self.nv, self.b
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
            self.issue_copies(plan, self.S(c32(st)) if first_kt is None else first_kt + st, self.S(c32(st * per)))
            kb.async_commit()
        kb.async_wait(S - 2)
        kb.barrier()
        first = self.load_fragments(self.S(c32(0)), 0)
        nt = g.tiles_m * g.tiles_n
        zero = [ir.Constant(ir.VectorType(F32, ins.acc_per_lane), None)] * nt

        def ring(off: Sym) -> Sym:  # the next stage's offset: stages 0 .. S-1, then 0 again
            return self.S(b.select(b.icmp_unsigned("==", (off + per).v, c32(S * per)), c32(0), (off + per).v))

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
                assert nxt is not None, "every k-step but the last loads the next one's; the last, the next tile's"
                frag = nxt
            return acc + [rd.v, wr.v] + frag[0] + frag[1]

        carried = zero + [c32(0), c32((S - 1) * per)] + first[0] + first[1]
        acc = kb.loop(ktiles, carried, k_tile, name="k")[:nt]
        kb.async_wait(0)  # no copy may still target shared memory when the block exits
        self.epilogue_pairs(self.reduce_split(acc) if s.split_k > 1 else acc)
        self.b.ret_void()

    def reduce_split(self, acc: list[ir.Value]) -> Accumulators:
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
        s, g, ins, kb, b = self.spec, self.geo, self.mma_instr, self.nv, self.b
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
        flag = self.gep(self.lds, self.S(c32(0)), I32)  # the stages are idle: async_wait(0), barrier
        counter = f32(tiles * (s.split_k * s.block_m * s.block_n) + self.tile)
        kb.last_arriver(b.icmp_unsigned("==", self.tid.v, c32(0)), counter, flag, lambda: c32(s.split_k - 1))
        with kb.if_then(b.icmp_unsigned("==", self.tid.v, c32(0)), name="reset"):
            b.store(c32(0), counter, align=4)

        def total(f: int) -> ir.Value:
            parts = [kb.load_cg_v4f32(f32(slot(z, f))) for z in range(s.split_k)]
            out = parts[0]
            for p in parts[1:]:
                out = b.fadd(out, p)
            return out

        return _SumsOnUse(total, nt)
