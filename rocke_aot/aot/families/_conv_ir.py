"""What the two convolution lowerers share: a block-tile GEMM engine on LDS operands.

Both conv families are, per block, a GEMM tile: ROWS x COLS outputs accumulated over a
reduction staged through LDS chunk by chunk. The family says where its operands live:

    family (rocke_aot/families/conv_direct_fwd/lower.py, rocke_aot/families/conv_dgrad_patch/lower.py)
        a_addr(row: Sym, kk: Sym|int) -> Sym      LDS index of A[row][kk] for the current step
        b_addr(kk, col: Sym|int)      -> Sym      LDS index of B[kk][col]
        store(row: Sym, col: Sym, f32 value)      guarded epilogue store
    TileGemm (this module)
        zero() -> accumulators
        step(acc, ksteps) -> acc      ksteps reduction indices from the current LDS contents
            fma   thread t: row t % ROWS, columns (t // ROWS) * per + 0..per-1;
                  llvm.fmuladd.f32 per (kk, column)
            mfma/wmma/mma  wave (warp) w: tiles w, w + W, ... of the ROWS x COLS tile; fragment
                  element j of lane l read at mma.MmaInstr.a_coord / b_coord (rocke_aot/mma.py),
                  the instruction called through aot/lower/matrix.py; results stored at d_coord
        epilogue(acc)                 every accumulator through the family's store()
    loop(b, count, carried, body)     a counted loop whose carried values are phis
    the AMD matrix paths' main loop (issue 37; ConvLowering.amd_chunks, the shape of gemm's
    build_amd): the family describes one reduction chunk's staging as Operands -- units of vw
    contiguous elements (vw from the spec: the key covers it) of one tensor whose base advances
    a fixed step a chunk (uniform: a scalar pointer), each unit a per-unit i32 offset
    (loop-invariant, hoisted), its LDS index and, on the checked path, one validity predicate
    for the whole vector --
          kfull = the chunks that need no bounds test (the family says: conv_direct_fwd all
                  of them where the block's input halo lies inside the image, else 0;
                  conv_dgrad_patch the whole K chunks, K // k_chunk)
          [kfull > 0: chunk 0 -> registers -> LDS; barrier]
          interior loop ci < kfull (no bounds test):
              global loads of chunk min(ci + 1, kfull - 1) into registers   (issued first)
              compute (LDS reads, matrix instructions); barrier; registers -> LDS; barrier
            gfx9: the loop runs ci < kfull - 1 and loads chunk ci + 1 (no clamp: the chunk
              offsets are its induction), then [kfull > 0: compute the last whole chunk; barrier]
            gfx1250: the loop carries each operand's chunk base, advanced by its step after the
              stores while ci + 2 < kfull (the clamp as one select a chunk)
          edge loop ci in kfull .. nchunks: the checked chunk (zero where invalid) -> LDS;
              barrier; compute; barrier
      waits by need (issue 37, as gemm's compute_amd): a step reads every fragment first, then
      ONE LDS wait (AmdgpuKernel.wait_zero "lds", gfx9: where the step has more than one
      fragment pair) before its matrix instructions; the registers go to LDS after ONE wait for
      the chunk's loads (wait_zero "load"); the barriers are LDS-only (barrier_lds)
    fma and NVPTX mma keep the element-wise copy below (copy_to_lds).
    lower_conv(cls, spec, target, lane)  what both lowerers do around their build(): the
                  refusals before any IR (target, matrix path), the geometry, and the
                  LoweredKernel with its metadata (KernelModule.lowered, as gemm); the
                  family's ConvLowering subclass names FAMILY, SPEC, RUNTIME_ARGS
                  and its tile (ROWS, COLS)

Loads from global memory never leave a tensor: an out-of-range element's address is
replaced by 0 and its value by zero (``guarded_load``). Offsets are i32 (tensors below
2 GiB, aot.lower.module.MAX_TENSOR_BYTES). Data stays as raw bits (i16 for f16/bf16)
until the arithmetic, so f16 and bf16 share every load and LDS path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import gcd

import llvmlite.ir as ir

from rocke_aot import lanes, mma
from rocke_aot.aot.lower import kernel_for
from rocke_aot.aot.lower.amdgpu import AmdgpuKernel
from rocke_aot.aot.lower.matrix import call_matrix
from rocke_aot.aot.lower.module import BF16, F16, F32, I16, I32, KernelModule, LoweredKernel, Sym
from rocke_aot.dtypes import DTYPE_BYTES, MAX_TENSOR_BYTES
from rocke_aot.errors import CapabilityError
from rocke_aot.targets import Target
from rocke_aot.variants.conv import ConvGeometry, ConvSpecBase

ELEM = {"f16": I16, "bf16": I16, "f32": F32}  # how a tensor element travels (raw bits)
OUT = {"f16": F16, "bf16": BF16, "f32": F32}
ELEM_INDEX_MASK = (MAX_TENSOR_BYTES + 1) // 2 - 1  # every 16-bit element index of a tensor fits these bits


def c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def udiv(a: Sym, d: Sym) -> Sym:
    """a / d, both runtime values (Sym's own // takes a constant divisor)."""
    return Sym(a.b, a.b.udiv(a.v, d.v))


def urem(a: Sym, d: Sym) -> Sym:
    return Sym(a.b, a.b.urem(a.v, d.v))


def wide(n: int) -> int:
    """The widest vector (1, 2, 4 or 8 16-bit elements: up to 16 bytes) that divides ``n``."""
    return gcd(n, 8)


@dataclass(frozen=True)
class Unit:
    """One staged vector of an Operand: ptr[chunk * step + off + 0..vw-1] -> LDS[lds + e * lds_step]
    (ptr, step: its Operand's).

    off is the work-item's i32 offset (loop-invariant: hoisted out of the main loop); ``ok`` (the
    checked path) says the whole vector is valid, else it reads ptr[chunk * step] and stages
    zeros."""

    off: Sym
    ok: ir.Value | None
    lds: Sym
    lds_step: int = 1


@dataclass(frozen=True)
class Operand:
    """``count`` units of ``vw`` elements a chunk of tensor ``ptr``, which advances ``step``
    elements a chunk (the chunk's base is uniform over the block: a scalar pointer);
    ``at(unit, chunk, checked)`` -> its Units: one, or two (``pair``: K rows 2r and 2r + 1 of a
    transposed LDS operand, their elements paired into one 4-byte LDS store each).
    ``runtime_offsets``: the family says its unit offsets depend on runtime extents (load_units
    then states their sign bit clear)."""

    count: int
    vw: int
    at: Callable[[Sym, Sym, bool], list[Unit]]
    ptr: ir.Value
    step: int
    pair: bool = False
    runtime_offsets: bool = False  # its offsets grow with runtime extents (LLVM cannot bound them)


def loop(kb: KernelModule, count: Sym | int, carried: Sequence[ir.Value],
         body: Callable[[Sym, list[ir.Value]], list[ir.Value]], name: str) -> list[ir.Value]:
    """for i in range(count): carried = body(i, carried); returns the final carried values.

    ``count`` may be a runtime Sym; the trip test is at the head, so a zero count runs
    nothing. ``body`` may create blocks; it must return one value per carried value.
    """
    b = kb.ir_builder()
    pre = b.block
    head = kb.kernel_function().append_basic_block(f"{name}_head")
    body_bb = kb.kernel_function().append_basic_block(f"{name}_body")
    done = kb.kernel_function().append_basic_block(f"{name}_done")
    b.branch(head)
    b.position_at_end(head)
    i_phi = b.phi(I32, name=name)
    phis = [b.phi(v.type) for v in carried]
    limit = count.v if isinstance(count, Sym) else c32(count)
    b.cbranch(b.icmp_unsigned("<", i_phi, limit), body_bb, done)
    b.position_at_end(body_bb)
    out = body(Sym(b, i_phi), list(phis))
    if len(out) != len(phis):
        raise AssertionError("loop body must return one value per carried value")
    nxt = b.add(i_phi, c32(1))
    latch = b.block
    b.branch(head)
    i_phi.add_incoming(c32(0), pre)
    i_phi.add_incoming(nxt, latch)
    for phi, init, new in zip(phis, carried, out):
        phi.add_incoming(init, pre)
        phi.add_incoming(new, latch)
    b.position_at_end(done)
    return list(phis)


class ConvLowering:
    """Shared state and helpers of one conv kernel being lowered.

    A family subclass sets the class attributes below, implements build() (emit the kernel) and
    tile(spec) -> (ROWS, COLS); lower_conv drives it.
    """

    FAMILY: str
    SPEC: type[ConvSpecBase]
    RUNTIME_ARGS: list[str]

    @staticmethod
    def tile(spec) -> tuple[int, int]:
        raise NotImplementedError

    def build(self) -> None:
        """Emit the whole kernel into self.kb (lower_conv packages it)."""
        raise NotImplementedError

    def __init__(self, spec, target: Target, lane, geo: ConvGeometry, rows: int, cols: int):
        self.spec, self.geo, self.target = spec, geo, target
        self.rows, self.cols = rows, cols
        self.kb = kernel_for(spec.kernel_name, target, lane, geo.threads)
        self.elem = ELEM[spec.dtype]
        self.instr = mma.INSTRS[geo.instr] if geo.instr else None
        if self.instr is not None:
            self.mma_fn = self.kb.matrix_op(self.instr.key, self.instr.capability,
                                            op=f"{spec.family} {spec.path} ({self.instr.mnemonic})")
            self.ntn = cols // self.instr.n
            self.ntiles = (rows // self.instr.m) * self.ntn
            self.waves = geo.threads // geo.wave_size
            # When the waves do not divide the tiles, the last round's spare slots compute a
            # duplicate tile (t mod ntiles, so every mma stays wave-uniform) and store nothing.
            self.tiles_per_wave = -(-self.ntiles // self.waves)
            self.spare = self.tiles_per_wave * self.waves != self.ntiles
        else:
            self.fmuladd = self.kb.declare("fmuladd_f32")
            self.per = geo.per_thread
            if geo.threads * self.per != rows * cols:
                raise AssertionError("fma geometry must cover the tile exactly")

    # -- small helpers ------------------------------------------------------------------
    @property
    def b(self) -> ir.IRBuilder:
        return self.kb.ir_builder()

    def start(self, params: list, lds_name: str, lds_elems: int) -> tuple[list[ir.Argument], Sym]:
        """Define the kernel, its thread id (self.tid) and LDS (self.lds); -> (args, block id)."""
        args = self.kb.define_kernel(params)
        self.tid = self.S(self.kb.workitem_id())
        gid = self.S(self.kb.workgroup_id())
        self.lds = self.kb.shared_array(lds_name, self.elem, lds_elems, DTYPE_BYTES[self.spec.dtype])
        return args, gid

    def S(self, v: ir.Value | int) -> Sym:
        return Sym(self.b, c32(v) if isinstance(v, int) else v)

    def gep(self, base: ir.Value, idx: Sym, ty: ir.Type) -> ir.Value:
        return self.b.gep(base, [idx.v], source_etype=ty)

    def guarded_load(self, ptr: ir.Value, idx: Sym, ok: ir.Value) -> ir.Value:
        """ptr[idx] as raw bits where ``ok``, else zero; the address is 0 when not ok."""
        b = self.b
        safe = b.select(ok, idx.v, c32(0))
        v = b.load(self.gep(ptr, self.S(safe), self.elem), typ=self.elem, align=DTYPE_BYTES[self.spec.dtype])
        return b.select(ok, v, ir.Constant(self.elem, 0 if self.elem is I16 else 0.0))

    def lds_store(self, lds: ir.Value, idx: Sym, value: ir.Value) -> None:
        self.b.store(value, self.gep(lds, idx, self.elem), align=DTYPE_BYTES[self.spec.dtype])

    def lds_load(self, lds: ir.Value, idx: Sym) -> ir.Value:
        return self.b.load(self.gep(lds, idx, self.elem), typ=self.elem, align=DTYPE_BYTES[self.spec.dtype])

    def to_f32(self, bits: ir.Value) -> ir.Value:
        return self.kb.bits_to_f32(bits, self.spec.dtype)

    def store_out(self, ptr: ir.Value, idx: Sym, value: ir.Value) -> None:
        ty = OUT[self.spec.dtype]
        v = value if ty is F32 else self.b.fptrunc(value, ty)
        self.b.store(v, self.gep(ptr, idx, ty), align=DTYPE_BYTES[self.spec.dtype])

    def copy_to_lds(self, total: int, fn: Callable[[Sym], tuple[ir.Value, Sym]]) -> None:
        """Every thread moves elements e = tid, tid + T, ... < total; fn(e) -> (value, lds index)."""
        T = self.geo.threads
        for it in range(-(-total // T)):
            e = self.tid + it * T
            guard = None
            if (it + 1) * T > total:
                guard = self.b.if_then(e.lt(total))
                guard.__enter__()
            value, idx = fn(e)
            self.lds_store(self.lds, idx, value)
            if guard is not None:
                guard.__exit__(None, None, None)

    # -- the AMD main loop (issue 37) -----------------------------------------------------------
    @property
    def akb(self) -> AmdgpuKernel:
        """The kernel as AmdgpuKernel (the AMD paths' waits and LDS-only barriers)."""
        if not isinstance(self.kb, AmdgpuKernel):
            raise AssertionError(f"{self.target.id}: not an AMDGPU kernel")
        return self.kb

    def amd_path(self) -> bool:
        """The AMD matrix paths stage through amd_chunks; fma and NVPTX keep copy_to_lds."""
        return self.instr is not None and self.target.is_amdgpu

    def smin(self, x: Sym, y: Sym | int) -> Sym:
        yv = y.v if isinstance(y, Sym) else c32(y)
        return Sym(self.b, self.b.select(self.b.icmp_unsigned("<", x.v, yv), x.v, yv))

    def chunk_base(self, op: Operand, chunk: Sym) -> ir.Value:
        """Operand ``op``'s tensor at chunk ``chunk``: ptr + chunk * step (uniform)."""
        b = self.b
        return b.gep(op.ptr, [b.zext((chunk * op.step).v, ir.IntType(64))], source_etype=I16)

    def load_units(self, ops: list[Operand], chunk: Sym, checked: bool,
                   bases: Sequence[ir.Value] | None = None) -> list[tuple]:
        """Every unit work-item tid moves (units tid, tid + T, ...; a work-item past the last unit
        of a round takes the last one again: the same values to the same LDS words, no branch)
        loaded into registers: [(operand, units, values)]. ``bases``: each operand's chunk_base,
        where the caller carries it (the interior loop)."""
        b, T = self.b, self.geo.threads
        out = []
        for n_op, op in enumerate(ops):
            base = bases[n_op] if bases is not None else self.chunk_base(op, chunk)
            vty = I16 if op.vw == 1 else ir.VectorType(I16, op.vw)
            zero = ir.Constant(vty, 0 if op.vw == 1 else None)
            rounds = -(-op.count // T)
            # An operand whose offsets grow with runtime extents (conv_direct_fwd's input: N, H, W)
            # has the offset's sign bit stated clear (a tensor holds < 2**30 16-bit elements,
            # MAX_TENSOR_BYTES): off * 2 then fits 32 bits, so each load takes the saddr form (the
            # chunk's SGPR base + a 32-bit VGPR offset) with no 64-bit add a load in the loop
            # (gfx1250 conv_fwd's halo: 4 v_lshl_add_u64 a chunk, their v_nop hazards and
            # s_wait_xcnt; llvm22 110 -> 100 instructions a chunk). The AND is loop-invariant,
            # hoisted with the offset. Offsets LLVM bounds already (the weights: constant extents)
            # take that form without it; stated there too, it only moved registers (gfx1250 llvm24
            # dgrad p14c4 205 -> 213 instructions a chunk); and a chunk base one load uses is
            # re-associated by LICM into the work-item's own 64-bit pointer whatever the range
            # (conv_dgrad_patch's dY), so dgrad states none
            shared = op.runtime_offsets and rounds > 1
            for it in range(rounds):
                u = self.tid + it * T
                if (it + 1) * T > op.count:
                    u = self.smin(u, op.count - 1)
                units = op.at(u, chunk, checked)
                vals = []
                for un in units:
                    off = un.off if un.ok is None else Sym(b, b.select(un.ok, un.off.v, c32(0)))
                    if shared:
                        off = Sym(b, b.and_(off.v, c32(ELEM_INDEX_MASK)))
                    v = b.load(b.gep(base, [b.zext(off.v, ir.IntType(64))], source_etype=I16), typ=vty, align=2)
                    if un.ok is not None:
                        v = b.select(un.ok, v, zero if op.vw > 1 else ir.Constant(I16, 0))
                    vals.append(v)
                out.append((op, units, vals))
        return out

    def store_units(self, loaded: list[tuple]) -> None:
        """The registers of load_units into LDS: one vector store a unit (aligned to its width),
        element stores where the vector is transposed in LDS, 4-byte stores for pairs; after ONE
        wait for every load (AmdgpuKernel.wait_zero "load": the LDS-only barriers no longer wait
        for them, and the backend's own waits were one a store, gfx1250's 22 b32 stores 22)."""
        b = self.b
        self.akb.wait_zero("load")
        for op, units, vals in loaded:
            un = units[0]
            if op.pair:
                two = ir.VectorType(I16, 2)
                for e in range(op.vw):
                    x0, x1 = (v if op.vw == 1 else b.extract_element(v, c32(e)) for v in vals)
                    w = b.insert_element(b.insert_element(ir.Constant(two, None), x0, c32(0)), x1, c32(1))
                    b.store(w, self.gep(self.lds, un.lds + e * un.lds_step, I16), align=4)
            elif un.lds_step == 1 or op.vw == 1:
                b.store(vals[0], self.gep(self.lds, un.lds, I16), align=2 * op.vw)
            else:
                for e in range(op.vw):
                    b.store(b.extract_element(vals[0], c32(e)), self.gep(self.lds, un.lds + e * un.lds_step, I16),
                            align=2)

    def amd_chunks(self, ops: Callable[[bool], list[Operand]], nchunks: Sym | int, kfull: Sym,
                   acc: list[ir.Value], compute: Callable[[list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
        """The reduction over ``nchunks`` chunks (module docstring): chunks 0 .. kfull-1 in an
        interior loop without bounds tests, the next chunk's loads issued before the current
        chunk's compute; then chunks kfull .. nchunks-1 in the checked edge loop."""
        kb, b = self.kb, self.b
        n = nchunks if isinstance(nchunks, Sym) else self.S(nchunks)
        with kb.if_then(self.S(0).lt(kfull), name="pro"):
            self.store_units(self.load_units(ops(False), self.S(0), False))
        self.akb.barrier_lds()
        # gfx9: the interior loop runs kfull - 1 chunks and loads chunk ci + 1 (there always is one:
        # no clamp, so the chunk offsets are the loop's induction, strength-reduced by LLVM), the last
        # whole chunk peeled after it (llvm22: conv_fwd cc8 52 -> 47, cc16 68 -> 64 instructions a
        # chunk on gfx942, dgrad p14c3 42 -> 39). gfx1250 keeps one loop over kfull chunks loading
        # min(ci + 1, kfull - 1): peeled, LLVM lays its loops out nested (the fwd 110 -> 118)
        peel = self.target.processor.startswith("gfx9")
        if peel:
            trips = self.S(b.select(self.S(0).lt(kfull), (kfull - 1).v, c32(0)))
        else:
            trips, last = kfull, kfull - 1

        # gfx1250: each operand's chunk base is carried by the loop, advanced by its step while a
        # chunk is left to load (the clamp as one uniform select a chunk: llvm22 conv_fwd's
        # offsets recomputed from the clamped index, 8 scalar instructions a chunk with an
        # s_wait_kmcnt, -> 4)
        nacc = len(acc)
        carried = list(acc)
        if not peel:
            first = self.S(b.select(self.S(1).lt(kfull), c32(1), last.v))
            carried += [self.chunk_base(op, first) for op in ops(False)]

        def interior(ci: Sym, car: list[ir.Value]) -> list[ir.Value]:
            acc_i, bases = car[:nacc], car[nacc:]
            if peel:
                regs = self.load_units(ops(False), ci + 1, False)
            else:
                regs = self.load_units(ops(False), ci + 1, False, bases)
            acc_i = compute(acc_i)
            self.akb.barrier_lds()
            self.store_units(regs)
            if not peel:  # after the loads' wait (a fence): an SGPR base rewritten while a load that
                # reads it is in flight costs an s_wait_xcnt (gfx1250), two a chunk
                more = (ci + 2).lt(kfull)
                i64 = ir.IntType(64)
                bases = [b.gep(p, [b.select(more, ir.Constant(i64, op.step), ir.Constant(i64, 0))], source_etype=I16)
                         for p, op in zip(bases, ops(False))]
            self.akb.barrier_lds()
            return acc_i + bases

        acc = loop(kb, trips, carried, interior, "chunk")[:nacc]
        if peel:
            pre = b.block
            with kb.if_then(self.S(0).lt(kfull), name="last"):
                acc_l = compute(acc)
                self.akb.barrier_lds()
                done = b.block
            merged = []
            for v0, v1 in zip(acc, acc_l):
                phi = b.phi(v0.type)
                phi.add_incoming(v1, done)
                phi.add_incoming(v0, pre)
                merged.append(phi)
            acc = merged

        def edge(i: Sym, acc_e: list[ir.Value]) -> list[ir.Value]:
            self.store_units(self.load_units(ops(True), kfull + i, True))
            self.akb.barrier_lds()
            acc_e = compute(acc_e)
            self.akb.barrier_lds()
            return acc_e

        return loop(kb, n - kfull, acc, edge, "chunkedge")

    # -- the tile GEMM ------------------------------------------------------------------------
    def acc_type(self) -> ir.Type:
        return F32 if self.instr is None else ir.VectorType(F32, self.instr.acc_per_lane)

    def zero(self) -> list[ir.Value]:
        if self.instr is None:
            return [ir.Constant(F32, 0.0)] * self.per
        return [ir.Constant(self.acc_type(), None)] * self.tiles_per_wave

    def fma_coords(self) -> tuple[Sym, list[Sym]]:
        row = self.tid % self.rows
        col0 = (self.tid // self.rows) * self.per
        return row, [col0 + j for j in range(self.per)]

    def mma_slot(self, i: int) -> Sym:
        """The tile index of this wave's i-th slot (may be >= ntiles in a spare slot)."""
        return self.tid // self.geo.wave_size + i * self.waves

    def mma_tile(self, i: int) -> tuple[Sym, Sym]:
        """(row0, col0) of the tile this wave computes in its i-th slot."""
        ins = self.instr
        assert ins is not None, "the wave tiles are the matrix paths' (geometry.instr set)"
        t = self.mma_slot(i)
        if self.spare and (i + 1) * self.waves > self.ntiles:
            t = t % self.ntiles
        return (t // self.ntn) * ins.m, (t % self.ntn) * ins.n

    def step(self, acc: list[ir.Value], ksteps: int,
             a_addr: Callable[[Sym, Sym | int], Sym], b_addr: Callable[[Sym | int, Sym], Sym]) -> list[ir.Value]:
        """acc += A[:, 0:ksteps] x B[0:ksteps, :] from LDS (this block's ROWS x COLS tile)."""
        return self.steps(acc, ksteps, [(a_addr, b_addr)])

    def steps(self, acc: list[ir.Value], ksteps: int,
              operands: Sequence[tuple[Callable[[Sym, Sym | int], Sym], Callable[[Sym | int, Sym], Sym]]]
              ) -> list[ir.Value]:
        """step() for each (a_addr, b_addr) in turn (conv_direct_fwd's filter taps); on AMD every
        fragment of every one of them is read before the first matrix instruction, behind ONE wait."""
        out = list(acc)
        if self.instr is None:
            for a_addr, b_addr in operands:
                out = self._fma_step(out, ksteps, a_addr, b_addr)
            return out
        return self._matrix_step(out, ksteps, operands)

    def _fma_step(self, out: list[ir.Value], ksteps: int,
                  a_addr: Callable[[Sym, Sym | int], Sym], b_addr: Callable[[Sym | int, Sym], Sym]) -> list[ir.Value]:
        b = self.b
        row, cols = self.fma_coords()
        for kk in range(ksteps):
            a = self.to_f32(self.lds_load(self.lds, a_addr(row, kk)))
            for j, col in enumerate(cols):
                bv = self.to_f32(self.lds_load(self.lds, b_addr(kk, col)))
                out[j] = b.call(self.fmuladd, [a, bv, out[j]])
        return out

    def _matrix_step(self, out: list[ir.Value], ksteps: int,
                     operands: Sequence[tuple[Callable[[Sym, Sym | int], Sym], Callable[[Sym | int, Sym], Sym]]]
                     ) -> list[ir.Value]:
        b = self.b
        ins = self.instr
        assert ins is not None
        if ksteps % ins.k:
            raise AssertionError(f"{ksteps} reduction steps are not whole {ins.mnemonic} K={ins.k}")
        lane = self.tid % self.geo.wave_size

        def fragments(o: int, ks: int, i: int) -> tuple[ir.Value, ir.Value]:
            a_addr, b_addr = operands[o]
            r0, c0 = self.mma_tile(i)
            va = ir.Constant(ir.VectorType(I16, ins.a_per_lane), None)
            vb = ir.Constant(ir.VectorType(I16, ins.b_per_lane), None)
            for j in range(ins.a_per_lane):
                r, kk = ins.a_coord(lane, j)
                va = b.insert_element(va, self.lds_load(self.lds, a_addr(r0 + r, kk + ks * ins.k)), c32(j))
            for j in range(ins.b_per_lane):
                kr, c = ins.b_coord(lane, j)
                vb = b.insert_element(vb, self.lds_load(self.lds, b_addr(kr + ks * ins.k, c0 + c)), c32(j))
            return va, vb

        slots = [(o, ks, i) for o in range(len(operands)) for ks in range(ksteps // ins.k)
                 for i in range(self.tiles_per_wave)]
        if not self.target.is_amdgpu:
            for o, ks, i in slots:
                out[i] = call_matrix(self.kb, self.mma_fn, ins, *fragments(o, ks, i), out[i])
            return out
        # AMD (issue 37, gemm's compute_amd): every fragment read first, the first matrix
        # instruction's last (LDS returns in order), then ONE wait for the reads and the matrix
        # instructions in order -- reads interleaved with them made the backend wait before each
        # gfx9 with one fragment pair a step (conv_direct_fwd cc8: one a filter tap) is left to the
        # backend: its wait is the same one, and the fences would keep the unrolled taps' reads
        # apart (ds_read2 pairs across taps: gfx942 llvm22 cc8 52 instructions a chunk, 58 with
        # them); gfx1250 waits fewer with the fences at one pair too (its fwd 16 -> 14, dgrad
        # p16c3 13 -> 5 a chunk, llvm22; bench/conv_amd_isa.py)
        frags = {slot: fragments(*slot) for slot in reversed(slots)}
        if len(slots) > 1 or not self.target.processor.startswith("gfx9"):
            self.akb.wait_zero("lds")
        for o, ks, i in slots:
            out[i] = call_matrix(self.kb, self.mma_fn, ins, *frags[(o, ks, i)], out[i])
        return out

    def epilogue(self, acc: list[ir.Value], store: Callable[[Sym, Sym, ir.Value], None]) -> None:
        if self.instr is None:
            row, cols = self.fma_coords()
            for j, col in enumerate(cols):
                store(row, col, acc[j])
            return
        ins = self.instr
        lane = self.tid % self.geo.wave_size
        for i in range(self.tiles_per_wave):
            guard = None
            if self.spare and (i + 1) * self.waves > self.ntiles:
                guard = self.b.if_then(self.mma_slot(i).lt(self.ntiles))
                guard.__enter__()
            r0, c0 = self.mma_tile(i)
            for r in range(ins.acc_per_lane):
                dr, dc = ins.d_coord(lane, r)
                store(r0 + dr, c0 + dc, self.b.extract_element(acc[i], c32(r)))
            if guard is not None:
                guard.__exit__(None, None, None)


def lower_conv(cls: type[ConvLowering], spec, target: Target, lane: lanes.Lane) -> LoweredKernel:
    """Lower ``spec`` with the family's ConvLowering subclass ``cls``."""
    family = cls.FAMILY
    if not isinstance(spec, cls.SPEC):
        raise TypeError(f"lower_{family} needs a {cls.SPEC.__name__}, got {type(spec).__name__}")
    # Refuse on capability first: gfx1250 on llvm20 names the op, before any geometry.
    lanes.require(lane, capability=f"target:{target.processor}", op=f"{family} for {target.id}")
    if spec.path != "fma":
        # mfma / wmma are AMDGPU instructions, mma (mma.sync) an NVPTX one
        if (spec.path == "mma") == target.is_amdgpu:
            raise CapabilityError(f"{family} path {spec.path} is not available on {target.processor}")
        instr = mma.select(target.processor, spec.path, spec.dtype)
        lanes.require(lane, capability=instr.capability, op=f"{family} {spec.path} ({instr.mnemonic})")
    geo = spec.geometry(target)
    low = cls(spec, target, lane, geo, *cls.tile(spec))
    low.build()
    meta = {
        "path": spec.path,
        "instruction": low.instr.mnemonic if low.instr else None,
        "runtime_args": list(cls.RUNTIME_ARGS),
        "baked": spec.baked(),
        "geometry": {k: v for k, v in vars(geo).items()},
    }
    return low.kb.lowered(family, meta)
