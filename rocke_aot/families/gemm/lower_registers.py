"""The gemm's register-staged pipeline: tiles move global -> registers -> LDS, every path, stages 0.

    build_registers(ktiles)   (after lower.py's entry: kernel(A, B, C, M, N, K), the tile of this
                              work-group, zeroed accumulators)
           [double buffer: stage K-tile 0 into LDS stage 0; barrier]
           loop kt < ceil(K/bk):
               single: stage K-tile kt -> LDS; barrier; compute; barrier
               double: stage K-tile kt+1 -> LDS stage (kt+1)&1 (if any); compute stage kt&1;
                       barrier    (one barrier: the stage written was last read before it)
           exit:   every accumulator element, guarded by row < M and col < N, converted, stored
      AMD matrix paths (mfma / wmma, stages 0): build_amd instead of the loop above -- an
           interior loop over K // bk (blocks inside M and N) with no bounds test, unrolled by
           2, each K-tile's loads issued a step ahead into alternating register sets, two
           waits a step, one barrier a step when double buffered; then a checked edge loop
           (docs/lowering.md "The AMD main loop")
      compute:
           fma        each thread a thread_m x thread_n micro tile, llvm.fmuladd.f32
           mfma/wmma/mma  each wave (a warp on sm_90) tiles_m x tiles_n instruction tiles;
                      the fragment of lane l is read from LDS at the coordinates
                      mma.MmaInstr.a_coord/b_coord give, the instruction is called through
                      aot/lower/matrix.py (its operand convention), results are stored at
                      d_coord. mma (sm_90 mma.sync m16n8k16) is the same code with its maps.

Global loads: each thread moves vector_width contiguous elements (along K for A, N for B);
a vector wholly inside the matrix is one <vw x i16> load, a vector at an edge (M, N or the
K tail) falls back to per-element loads whose address is clamped to 0 when out of range,
so no load ever leaves the tensor and missing elements read as zero. On AMD the matrix paths'
interior loop (build_amd) loads without checks; its edge loop and the fma path's stage_tile
check as above. Data stays as i16 bits until the arithmetic, so f16 and bf16 share every load
and LDS path.
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower.amdgpu import AmdgpuKernel
from rocke_aot.aot.lower.matrix import call_matrix
from rocke_aot.aot.lower.module import F32, I16, Sym
from rocke_aot.errors import CapabilityError
from rocke_aot.families.gemm.lower_common import OUT_TYPES, GemmLoweringBase, StagedChunk, c32
from rocke_aot.families.gemm.spec import amd_b_pair_width
from rocke_aot.mma import MmaInstr


class RegisterStaged(GemmLoweringBase):
    """The register-staged pipeline (module doc): staging, the AMD main loop, compute, epilogue."""

    @property
    def akb(self) -> AmdgpuKernel:
        """The kernel module as the AMD main loop needs it (counter waits, LDS-only barriers)."""
        if not isinstance(self.kb, AmdgpuKernel):
            raise CapabilityError(f"{self.spec.kernel_name}: the AMD main loop on a non-AMDGPU target")
        return self.kb

    @property
    def ins(self) -> MmaInstr:
        """The matrix instruction (the matrix paths' fragment helpers only)."""
        if self.instr is None:
            raise CapabilityError(f"{self.spec.kernel_name}: no matrix instruction on the fma path")
        return self.instr

    # -- global -> LDS ------------------------------------------------------------------
    def load_vec(self, ptr: ir.Value, base: Sym, row_ok: ir.Value, col: Sym, limit: Sym, vw: int) -> ir.Value:
        """vw i16 at ptr[base + 0..vw-1]; zero where row_ok is false or col+e >= limit."""
        b = self.b
        if vw == 1:
            ok = self.kb.all_of(row_ok, col.lt(limit))
            idx = b.select(ok, base.v, c32(0))
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
                idx = b.select(ok, (base + e).v, c32(0))
                x = b.load(self.gep(ptr, self.S(idx)), typ=I16, align=2)
                v = b.insert_element(v, b.select(ok, x, ir.Constant(I16, 0)), c32(e))
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
                move(StagedChunk(which, r, v, grow, gld, row_ok, gcol, limit, ptr, off, ld))
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

        def move(ch: StagedChunk) -> None:
            base = ch.grow * ch.gld + ch.gcol
            if checked:
                val = self.load_vec(ch.ptr, base, ch.row_ok, ch.gcol, ch.limit, vw)
            else:  # the tile is inside the matrix: every vector is
                val = self.b.load(self.gep(ch.ptr, base), typ=I16 if vw == 1 else ir.VectorType(I16, vw), align=2)
            if ch.which == "B" and s.b_lds == "nk":  # transposed: element e to column row v*vw+e
                for e in range(vw):
                    x = val if vw == 1 else self.b.extract_element(val, c32(e))
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
        K and K+1, adjacent in a column row: one ds_write_b32, merged into ds_write2_b32), of
        amd_b_pair_width elements each (vector_width, or half of it where the tile has fewer
        pairs than work-items). The last field is the unit's vector width."""
        s, T = self.spec, self.geo.threads
        out = []
        for which in ("A", "B"):
            rows, cols = (s.block_m, s.block_k) if which == "A" else (s.block_k, s.block_n)
            pair = 2 if which == "B" and s.b_lds == "nk" else 1
            vw = amd_b_pair_width(s, T) if pair == 2 else s.vector_width
            vpr = cols // vw
            chunks = rows // pair * vpr
            for it in range(-(-chunks // T)):
                out.append((which, pair, chunks, vpr, self.lda if which == "A" else self.ldb, it, vw))
        return out

    def amd_load(self, kt: Sym, checked: bool) -> list[tuple]:
        """Global loads of K-tile kt, every unit of amd_units: [(unit, LDS row, vector, [values])].
        A work-item past the last chunk of a round takes the last chunk again (the same values to
        the same LDS words: no branch in the loop). ``checked``: each vector through load_vec
        (zero outside the matrix); unchecked: the tile is wholly inside A and B (the interior)."""
        s, b, T = self.spec, self.b, self.geo.threads
        out = []
        for unit in self.amd_units():
            which, pair, chunks, vpr, _ld, it, vw = unit
            vty = I16 if vw == 1 else ir.VectorType(I16, vw)
            c = self.tid + it * T
            if (it + 1) * T > chunks:
                c = self.S(b.select(c.lt(chunks), c.v, c32(chunks - 1)))
            # a pair unit walks K first: lanes next to each other store to K words next to each
            # other (the column rows 8 apart are the same bank: 4-way at block_k 32, not 16-way)
            r, v = (c // vpr, c % vpr) if pair == 1 else (c % (s.block_k // 2), c // (s.block_k // 2))
            vals = []
            for p in range(pair):
                if which == "A":
                    grow, gcol = self.row0 + r, kt * s.block_k + v * vw
                    row_ok, limit, gld, ptr = grow.lt(self.M), self.K, self.K, self.A
                    off, step = (self.row0 + r) * self.K + v * vw, kt * s.block_k
                else:
                    grow, gcol = kt * s.block_k + r * pair + p, self.col0 + v * vw
                    row_ok, limit, gld, ptr = grow.lt(self.K), self.N, self.N, self.B
                    off, step = (r * pair + p) * self.N + self.col0 + v * vw, kt * s.block_k * self.N
                if checked:
                    vals.append(self.load_vec(ptr, grow * gld + gcol, row_ok, gcol, limit, vw))
                else:
                    vals.append(b.load(self.split_address(ptr, off, step), typ=vty, align=2))
            out.append((unit, r, v, vals))
        return out

    def split_address(self, ptr: ir.Value, off: Sym, step: Sym) -> ir.Value:
        """&ptr[off + step] as two 64-bit steps, each index zero-extended (every index here is
        non-negative and below 2^31 elements; a sign extension costs a shift per load a step):
        the work-item's own element of the K-tile 0 (``off``, loop-invariant: its pointer is
        made once, before the loop) then the K-tile's offset (``step``, uniform: a scalar), one
        64-bit add a load a step."""
        i64 = ir.IntType(64)
        lane = self.b.gep(ptr, [self.b.zext(off.v, i64)], source_etype=I16)
        return self.b.gep(lane, [self.b.zext(step.v, i64)], source_etype=I16)

    def amd_store(self, loaded: list[tuple], stage: Sym | int, wait: bool = True) -> None:
        """The values amd_load returned into LDS stage ``stage``: A and B (kn) one vector store
        each (aligned to its width); B (nk) per column e of the unit, K rows 2r and 2r+1 as one
        <2 x i16> store at column row v*vw+e."""
        s, b = self.spec, self.b
        if wait:  # the loads are done (wait False: the caller waited, and later loads are in flight)
            self.akb.wait_zero("load")
        a_off = self.stage_base(stage)
        for (which, pair, _chunks, _vpr, ld, _it, vw), r, v, vals in loaded:
            off = a_off if which == "A" else a_off + s.block_m * self.lda
            if pair == 1:
                b.store(vals[0], self.gep(self.lds, off + r * ld + v * vw), align=2 * vw)
                continue
            two = ir.VectorType(I16, 2)
            first = off + (v * vw) * ld + r * 2  # column row v*vw; column e is e*ld further: one
            for e in range(vw):                   # base for every store (ds_write2_b32 pairs them)
                x0, x1 = ((val if vw == 1 else b.extract_element(val, c32(e))) for val in vals)
                w = b.insert_element(b.insert_element(ir.Constant(two, None), x0, c32(0)), x1, c32(1))
                b.store(w, self.gep(self.lds, first + e * ld), align=4)

    def build_amd(self, ktiles: Sym, zero: list[ir.Value]) -> list[ir.Value]:
        """The AMD matrix paths' main loop (mfma / wmma, stages 0); returns the accumulators.

          kfull = K // block_k if the block's rows and columns lie inside M and N, else 0
          [kfull > 0: K-tile 0 -> registers -> LDS stage 0; K-tile min(1, kfull - 1) -> registers]
          barrier
          interior loop over step pairs (kt, kt + 1), kt = 0, 2, .. < kfull - 1 (no edge test in
          it), unrolled by 2 so that every LDS offset and register set is a constant:
              step kt, reading stage r = 0 (single buffer: always 0), writing w = 1 (single: 0):
                  LDS fragment reads of stage r (every k-step's)
                  | wait: LDS reads done and the loads of K-tile kt + 1 (issued a step ago)
                  | global loads of K-tile min(kt + 2, kfull - 1) into the other register set
                  | MFMAs | [single buffer: barrier] | K-tile kt + 1's registers -> stage w; barrier
              step kt + 1: the same with the stages and register sets swapped
              ("|": llvm.amdgcn.sched.barrier 0, a scheduling fence; the wait: AmdgpuKernel.wait_zero)
          kfull odd: a last step, compute stage 0 (K-tile kfull - 1); barrier (nothing to load)
          edge loop kt in kfull .. ceil(K / block_k): the checked tile (zero outside the matrices)
              -> registers -> LDS stage 0; barrier; compute; barrier
        Two waits a step: the one above and the LDS stores' before the barrier (the barrier's
        fences order LDS only: barrier_lds). Double buffer: one barrier a step (the stage
        written was last read in the step before, ahead of the barrier that ended it); single:
        two (the reads of stage 0 done before it is overwritten). The last pair's loads ahead
        reload K-tile kfull - 1 (no branch around the loads) into registers nobody stores, or
        (kfull odd) the tile the last step reads. The edge loop runs for the blocks on the M / N
        edge (every K-tile) and for a K tail (one)."""
        s, kb, b = self.spec, self.kb, self.b
        inside = kb.all_of(b.icmp_unsigned("<=", (self.row0 + s.block_m).v, self.M.v),
                           b.icmp_unsigned("<=", (self.col0 + s.block_n).v, self.N.v))
        kfull = self.S(b.select(inside, (self.K // s.block_k).v, c32(0)))
        last = kfull - 1
        entry = b.block
        with kb.if_then(self.S(c32(0)).lt(kfull), name="pro"):
            self.amd_store(self.amd_load(self.S(c32(0)), checked=False), 0)
            # K-tile 1 (0 if it is the only one) into registers, ahead
            one = self.S(b.select(self.S(c32(1)).lt(kfull), c32(1), c32(0)))
            template, loaded = self.amd_load(one, checked=False), b.block
        phis = []  # undefined where there is no interior K-tile (the loop does not run)
        for v in (x for _u, _r, _v, vals in template for x in vals):
            phi = b.phi(v.type)
            phi.add_incoming(v, loaded)
            phi.add_incoming(ir.Constant(v.type, None), entry)
            phis.append(phi)
        self.akb.barrier_lds()

        def values(carried: list[ir.Value]) -> list[list[ir.Value]]:
            it = iter(carried)
            return [[next(it) for _ in vals] for _u, _r, _v, vals in template]

        def step(kt: Sym, stage: int, acc: list[ir.Value], held: list[list[ir.Value]]) -> tuple[list, list]:
            # held: K-tile kt + 1's values, loaded a step ago; this step loads min(kt + 2, kfull - 1)
            nxt = kt + 2
            nxt = self.S(b.select(nxt.lt(kfull), nxt.v, last.v))
            b.call(kb.declare("sched_barrier"), [c32(0)])
            acc, regs = self.compute_amd(stage if s.double_buffer else 0, acc,
                                         issue=lambda: self.amd_load(nxt, checked=False), wait_loads=True)
            if not s.double_buffer:
                self.akb.barrier_lds()  # every wave's reads of stage 0 are done before it is overwritten
            # held's values at this step's units (the same unit, row, vector: made in the loop)
            self.amd_store([(u, r, v, vals) for (u, r, v, _x), vals in zip(regs, held)],
                           1 - stage if s.double_buffer else 0, wait=False)
            self.akb.barrier_lds()
            return acc, [vals for _u, _r, _v, vals in regs]

        def pair(j: Sym, carried: list[ir.Value]) -> list[ir.Value]:
            kt = j * 2  # steps kt (stage 0) and kt + 1 (stage 1): constant stage offsets and
            acc, held = carried[:len(zero)], values(carried[len(zero):])  # register sets
            acc, ahead = step(kt, 0, acc, held)
            acc, held = step(kt + 1, 1, acc, ahead)
            return acc + [x for vals in held for x in vals]

        def odd(_i: Sym, acc: list[ir.Value]) -> list[ir.Value]:
            acc = self.compute_amd(0, acc)  # K-tile kfull - 1 (even: stage 0); nothing left to load
            self.akb.barrier_lds()
            return acc

        acc = kb.loop(kfull // 2, zero + phis, pair, name="k")[:len(zero)]
        acc = kb.loop(kfull % 2, acc, odd, name="kodd")

        def edge(i: Sym, acc: list[ir.Value]) -> list[ir.Value]:
            self.amd_store(self.amd_load(kfull + i, checked=True), 0)
            self.akb.barrier_lds()
            acc = self.compute_amd(0, acc)
            self.akb.barrier_lds()
            return acc

        return kb.loop(ktiles - kfull, acc, edge, name="kedge")

    def runs(self, per_lane: int, run: int, index) -> ir.Value:
        """A <per_lane x i16> fragment read as runs of ``run`` elements: element j at LDS
        index(j) (a Sym), one <run x i16> load per run (run 1: one element each)."""
        vec = ir.Constant(ir.VectorType(I16, per_lane), None)
        for j in range(0, per_lane, run):
            if run == 1:
                vec = self.b.insert_element(vec, self.lds_load(index(j)), c32(j))
                continue
            got = self.b.load(self.gep(self.lds, index(j)), typ=ir.VectorType(I16, run), align=2 * run)
            for e in range(run):
                vec = self.b.insert_element(vec, self.b.extract_element(got, c32(e)), c32(j + e))
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
            afr, bfr = self.fragments(ks * ins.k, a_off, b_off, lane, wm0, wn0)
            return [call_matrix(self.kb, self.mma_fn, ins, afr[i], bfr[t], out[i * g.tiles_n + t])
                    for i in range(g.tiles_m) for t in range(g.tiles_n)]

        steps = s.block_k // ins.k
        return k_step(0, list(acc)) if steps == 1 else self.kb.loop(steps, list(acc), k_step, name="ks")

    def compute_amd(self, stage: int, acc: list[ir.Value], issue=None, wait_loads: bool = False):
        """compute() for the AMD main loop: every k-step's fragments read first, the last k-step's
        first, then the matrix instructions in k order. The first instruction needs the last read
        (LDS returns in order): one LDS wait a step before the matrix instructions, where reads
        interleaved with them made the backend wait before each k-step's (gfx950 128x128: 4 a
        step, 1 so)."""
        s, g, ins = self.spec, self.geo, self.ins
        a_off = self.stage_base(stage)
        b_off = a_off + s.block_m * self.lda
        lane, wm0, wn0 = self.warp_origin()
        frags = {ks: self.fragments(ks * ins.k, a_off, b_off, lane, wm0, wn0, reverse=True)
                 for ks in reversed(range(s.block_k // ins.k))}
        fence = self.kb.declare("sched_barrier")
        if wait_loads:  # one wait for the reads and the loads issued a step ago, then this step's loads
            self.akb.wait_zero("lds", "load")
            issued = issue() if issue is not None else None
            self.b.call(fence, [c32(0)])
        else:
            if issue is not None:
                self.b.call(fence, [c32(0)])
            issued = issue() if issue is not None else None
            self.akb.wait_zero("lds")
        out = list(acc)
        for ks in sorted(frags):
            afr, bfr = frags[ks]
            out = [call_matrix(self.kb, self.mma_fn, ins, afr[i], bfr[t], out[i * g.tiles_n + t])
                   for i in range(g.tiles_m) for t in range(g.tiles_n)]
        return out if issue is None else (out, issued)

    def fragments(self, k0: Sym | int, a_off: Sym, b_off: Sym, lane: Sym, wm0: Sym, wn0: Sym,
                  reverse: bool = False) -> tuple[list[ir.Value], list[ir.Value]]:
        """The A (tiles_m) and B (tiles_n) fragments at K offset k0, read from LDS in that order
        (``reverse``: B's last tile first, A's first tile last)."""
        g = self.geo
        if reverse:
            bfr = [self.b_fragment(k0, b_off, lane, wn0, t) for t in reversed(range(g.tiles_n))][::-1]
            afr = [self.a_fragment(k0, a_off, lane, wm0, i) for i in reversed(range(g.tiles_m))][::-1]
            return afr, bfr
        afr = [self.a_fragment(k0, a_off, lane, wm0, i) for i in range(g.tiles_m)]
        return afr, [self.b_fragment(k0, b_off, lane, wn0, t) for t in range(g.tiles_n)]

    def a_fragment(self, k0: Sym | int, a_off: Sym, lane: Sym, wm0: Sym, i: int) -> ir.Value:
        """A fragment of instruction tile i (rows wm0 + i * m ..) at K offset k0, as a_run-element LDS loads."""
        ins = self.ins
        vec = ir.Constant(ir.VectorType(I16, ins.a_per_lane), None)
        for j in range(0, ins.a_per_lane, self.a_run):
            r, c = ins.a_coord(lane, j)
            idx = a_off + (wm0 + i * ins.m + r) * self.lda + (c + k0)
            if self.a_run == 1:
                vec = self.b.insert_element(vec, self.lds_load(idx), c32(j))
                continue
            run = self.b.load(self.gep(self.lds, idx), typ=ir.VectorType(I16, self.a_run),
                              align=2 * self.a_run)
            for e in range(self.a_run):
                vec = self.b.insert_element(vec, self.b.extract_element(run, c32(e)), c32(j + e))
        return vec

    def b_fragment(self, k0: Sym | int, b_off: Sym, lane: Sym, wn0: Sym, t: int) -> ir.Value:
        """B fragment of instruction tile t (columns wn0 + t * n ..) at K offset k0: runs of b_run
        (b_lds nk) or element loads (kn)."""
        ins = self.ins
        if self.spec.b_lds == "nk":
            return self.runs(ins.b_per_lane, self.b_run, lambda j: (
                lambda c, kr: b_off + (wn0 + t * ins.n + c) * self.ldb + (kr + k0))(*self.b_cn(lane, j)))
        vec = ir.Constant(ir.VectorType(I16, ins.b_per_lane), None)
        for j in range(ins.b_per_lane):
            kr, c = ins.b_coord(lane, j)
            x = self.lds_load(b_off + (kr + k0) * self.ldb + (wn0 + t * ins.n + c))
            vec = self.b.insert_element(vec, x, c32(j))
        return vec

    # -- epilogue -----------------------------------------------------------------------
    def store_out(self, row: Sym, col: Sym, value: ir.Value) -> None:
        b = self.b
        with self.kb.if_then(self.kb.all_of(row.lt(self.M), col.lt(self.N)), name="st"):
            out_ty = OUT_TYPES[self.spec.out_dtype]
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
                    x = self.b.extract_element(vec, c32(r))
                    self.store_out(self.row0 + wm0 + i * ins.m + dr, self.col0 + wn0 + t * ins.n + dc, x)

    def build_registers(self, ktiles: Sym) -> None:
        """The register-staged main loop and epilogue (the module doc's pipeline), after build's entry."""
        s, g, kb = self.spec, self.geo, self.kb
        b = self.b
        if self.instr is None:
            zero = [ir.Constant(F32, 0.0)] * (g.thread_m * g.thread_n)
        else:
            zero = [ir.Constant(ir.VectorType(F32, self.instr.acc_per_lane), None)] * (g.tiles_m * g.tiles_n)
        if self.instr is not None and kb.target.is_amdgpu:
            self.epilogue(self.build_amd(ktiles, zero))
            b.ret_void()
            return
        if s.double_buffer:
            with kb.if_then(self.S(c32(0)).lt(ktiles), name="pro"):
                self.stage_tile(self.S(c32(0)), 0)
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
