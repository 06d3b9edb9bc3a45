"""The gemm's warpgroup pipeline (spec.wgmma, sm_90a wgmma.mma_async): swizzled stages, descriptors.

    build_wgmma(ktiles)  (after lower.py's entry; docs/lowering.md has the layouts):
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

It is the asynchronous pipeline (lower_async.py) with the tensor cores reading the operands from
shared memory: the copy plan, the split-K reduction and the epilogue are that module's.
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower import nvptx
from rocke_aot.aot.lower.module import F32, Sym
from rocke_aot.errors import CapabilityError
from rocke_aot.families.gemm.lower_async import AsyncPipeline
from rocke_aot.families.gemm.lower_common import c32
from rocke_aot.families.gemm.spec import SWIZZLE_ELEMS, WGMMA_M, GemmSpec
from rocke_aot.mma import WARPGROUP, WGMMA_K

SWIZZLE_128B = 1  # the descriptor's swizzle mode for 128-byte swizzling (bits 62..63)


def descriptor_bits(lbo: int, sbo: int) -> int:
    """The constant part of a wgmma matrix descriptor: leading and stride dimension byte offsets
    (16-byte multiples, stored >> 4 in bits 16..29 and 32..45), base offset 0 (bits 49..51) and the
    128-byte swizzle mode in bits 62..63; the start address (bits 0..13) is added per operand."""
    if lbo % 16 or sbo % 16 or not (0 <= lbo >> 4 < 1 << 14 and 0 <= sbo >> 4 < 1 << 14):
        raise CapabilityError(f"wgmma descriptor offsets {lbo}, {sbo}: 16-byte multiples below 256 KiB")
    return (lbo >> 4) << 16 | (sbo >> 4) << 32 | SWIZZLE_128B << 62


def wgmma_mnemonic(spec: GemmSpec) -> str:
    """The PTX instruction the warpgroup pipeline issues (N = block_n), as the PTX prints it."""
    return nvptx.wgmma_mnemonic(spec.block_n, spec.in_dtype)


class WarpgroupPipeline(AsyncPipeline):
    """The warpgroup pipeline (module doc): the asynchronous pipeline's copies, wgmma's compute."""

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
        s, g, kb, b = self.spec, self.geo, self.nv, self.b
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
            self.issue_copies(plan, self.S(c32(st)) if first_kt is None else first_kt + st, self.S(c32(st * per)))
            kb.async_commit()
        acc_n = s.block_n // 2
        zero = [ir.Constant(F32, 0.0)] * (acc_n * g.tiles_m)

        def ring(off: Sym) -> Sym:
            return self.S(b.select(b.icmp_unsigned("==", (off + per).v, c32(S * per)), c32(0), (off + per).v))

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

        carried = zero + [c32(0), c32(D % S * per)]
        acc = kb.loop(ktiles, carried, k_tile, name="k")[:-2]
        acc = kb.wgmma_wait(0, acc)
        kb.async_wait(0)  # no copy may still target shared memory when the block exits
        vec_ty = ir.VectorType(F32, 4)
        frags = []  # fragment (j, n8 slice f): accumulators 4f .. 4f + 3 of m64 tile j
        for j in range(g.tiles_m):
            for f in range(g.tiles_n):
                v = ir.Constant(vec_ty, None)
                for r in range(4):
                    v = b.insert_element(v, acc[j * acc_n + 4 * f + r], c32(r))
                frags.append(v)
        self.epilogue_pairs(self.reduce_split(frags) if s.split_k > 1 else frags)
        self.b.ret_void()
