"""The conv_dgrad_patch family: dX of a patch embedding (stride == filter == P, no padding).

    forward:  Y[n, i, j, k] = sum_{r, s, c} X[n, i*P + r, j*P + s, c] * W[k, r, s, c]
    dgrad:    dX[n, i*P + r, j*P + s, c] = sum_k dY[n, i, j, k] * W[k, r, s, c]
              for i < Hp = H // P, j < Wp = W // P; every other dX element (the border no
              patch covers when P does not divide H or W) is zero.
    Patches do not overlap, so the dgrad is ONE GEMM with no tap reduction:
        dY[pixels, K] x W[K, P*P*C]  (the KRSC weight tensor already is that operand)
    followed by a pixel shuffle: GEMM column (r, s, c) of pixel (i, j) lands at
    dX[n, i*P + r, j*P + s, c].
    baked: dtype, C, P; runtime kernel args: N, H, W (of dX) and K (dY channels)

    lower_conv_dgrad_patch(spec, target, lane)
      kernel(dY, Wt, dX, N, H, W, K)    1-D grid = main blocks + border blocks
                                      (ConvDgradPatchSpec.launch_formulas)
        main block (n, i0, j0, r0): ROWS = tile_h x tile_w dY pixels, COLS = r_blk*P*C GEMM
            columns (patch rows r0 .. r0+r_blk-1, contiguous in W's (r, s, c) order) padded
            to whole 16-column tiles; for each K chunk: stage dY[rows][k_chunk] and
            W[k_chunk][cols] into LDS (zero past K and past the real columns; rows padded by
            ConvDgradPatchSpec.lds_row_pad on mma, its lds_a_index / lds_b_index); barrier;
            acc += A x B (TileGemm.step); barrier.  Epilogue: the pixel-shuffled store,
            guarded by i < Hp, j < Wp, col < r_blk*P*C.
            On AMD's matrix paths (mfma / wmma) the K-chunk loop is _conv_ir's amd_chunks (issue
            37): every K chunk wholly inside K (k0 + k_chunk <= K) runs without bounds tests, its
            loads issued before the previous chunk's compute; the K tail (one chunk) is the
            checked edge loop. dY is staged in vectors of gcd(k_chunk, 8) channels (one pixel's
            K is contiguous), W in vectors of ConvDgradPatchSpec.w_vector: gcd(P*C, 8) columns
            (a patch row's P*C columns are contiguous), or wider where every vector stays
            aligned to its width from W's base (ViT-L/14's p14c3 r7: 4, the blocks of r0 = 7
            starting 2 elements into one, those 2 staged into B's slack columns); transposed B
            stores K-row pairs as 4-byte words. Rows past the
            image (i >= Hp or j >= Wp) read the last pixel and padded columns (col >= r_blk*P*C)
            column 0: their products land in rows / columns of the tile that are never stored
            (a row of A reaches only that row of the product, a column of B only that column).
        border block b: a grid-stride loop over the N * (H*W - Hp*P*Wp*P) * C border
            elements (rows >= Hp*P, then columns >= Wp*P of the covered rows), storing 0.
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot import lanes
from rocke_aot.aot.families._conv_ir import OUT, ConvLowering, Operand, Unit, c32, loop, lower_conv, udiv, urem, wide
from rocke_aot.aot.lower.module import LoweredKernel, Sym
from rocke_aot.families.conv_dgrad_patch.spec import BORDER_ELEMS_PER_BLOCK, MAX_BORDER_BLOCKS, ConvDgradPatchSpec
from rocke_aot.targets import Target


class _PatchLowering(ConvLowering):
    FAMILY = "conv_dgrad_patch"
    SPEC = ConvDgradPatchSpec
    RUNTIME_ARGS = ["N", "H", "W", "K"]

    @staticmethod
    def tile(spec: ConvDgradPatchSpec) -> tuple[int, int]:
        return spec.rows, spec.cols_padded

    def build(self) -> None:
        s = self.spec
        (dY, Wt, dX, n_arg, h_arg, w_arg, k_arg), gid = self.start(
            s.launch_formulas().args, "patch_lds", s.lds_elems())
        self.dY, self.Wt, self.dX = dY, Wt, dX
        self.N, self.H, self.W, self.K = self.S(n_arg), self.S(h_arg), self.S(w_arg), self.S(k_arg)
        self.Hp, self.Wp = self.H // s.p, self.W // s.p
        nth = (self.Hp + (s.tile_h - 1)) // s.tile_h
        ntw = (self.Wp + (s.tile_w - 1)) // s.tile_w
        nrb = s.p // s.r_blk
        main = self.N * nth * ntw * nrb
        with self.b.if_else(gid.lt(main)) as (then, otherwise):
            with then:
                rb, rest = gid % nrb, gid // nrb
                tj, rest = urem(rest, ntw), udiv(rest, ntw)
                ti, n = urem(rest, nth), udiv(rest, nth)
                self._main(n, ti * s.tile_h, tj * s.tile_w, rb * s.r_blk)
            with otherwise:
                self._border(gid - main)
        self.b.ret_void()

    # -- the GEMM blocks ----------------------------------------------------------------------
    def _main(self, n: Sym, i0: Sym, j0: Sym, r0: Sym) -> None:
        s, kb = self.spec, self.kb
        self.n, self.i0, self.j0, self.r0 = n, i0, j0, r0
        a_size = s.rows * s.k_chunk
        nchunks = (self.K + (s.k_chunk - 1)) // s.k_chunk

        if self.amd_path():
            kfull = self.K // s.k_chunk  # the whole K chunks; the tail (if any) is the edge loop

            def compute(acc):
                return self.step(acc, s.k_chunk, s.lds_a_index, s.lds_b_index)

            acc = self.amd_chunks(self._operands, nchunks, kfull, self.zero(), compute)
            self.epilogue(acc, self._store)
            return

        def chunk(ci: Sym, acc):
            k0 = ci * s.k_chunk
            self.copy_to_lds(a_size, lambda e: self._dy_elem(e, k0))
            self.copy_to_lds(s.k_chunk * s.cols_padded, lambda e: self._w_elem(e, k0))
            kb.barrier()
            acc = self.step(acc, s.k_chunk, s.lds_a_index, s.lds_b_index)
            kb.barrier()
            return acc

        acc = loop(kb, nchunks, self.zero(), chunk, "kchunk")
        self.epilogue(acc, self._store)

    def _operands(self, checked: bool) -> list[Operand]:
        """One K chunk's staging on the AMD path: dY[rows][k_chunk] and W[k_chunk][cols_padded]
        (lds_a_index / lds_b_index). The K tail (checked) reads dY element by element (K is a
        runtime value: a vector may cross it) and zeroes W's rows past K."""
        s, b = self.spec, self.b
        va = 1 if checked else wide(s.k_chunk)
        kpv = s.k_chunk // va  # vectors a dY row

        def a_unit(u: Sym, ci: Sym, chk: bool) -> list[Unit]:
            row, kk = u // kpv, (u % kpv) * va
            i, j = self._pixel(row)
            i, j = self.smin(i, self.Hp - 1), self.smin(j, self.Wp - 1)  # rows past the image: never stored
            ok = (ci * s.k_chunk + kk).lt(self.K) if chk else None
            off = ((self.n * self.Hp + i) * self.Wp + j) * self.K + kk
            return [Unit(off, ok, s.lds_a_index(row, kk))]

        vb, slack = s.w_vector if s.lds_b_transposed else (wide(s.p * s.c), 0)
        # slack: the block's vectors are the aligned grid's (spec.w_vector), its first one
        # starting shift = (r0*P*C) % vb elements before its column 0; nvec of them cover its
        # columns (the padded columns past them are never written: never stored either)
        cpv = s.cols_padded // vb if not slack else -(-(s.cols + slack) // vb)  # vectors a K row
        pair = s.lds_b_transposed
        # the block's aligned start r0*P*C - shift, as a mask: non-negative and bounded for LLVM, so
        # every load keeps the saddr form (r0*P*C + col - shift made half of them 64-bit adds on gfx90a)
        aligned: tuple[Sym, Sym] | None = None
        if slack:
            rpc = self.r0 * (s.p * s.c)
            aligned = (Sym(b, b.and_(rpc.v, c32(-vb))), rpc % vb)

        def b_unit(u: Sym, ci: Sym, chk: bool) -> list[Unit]:
            # pairs walk K first: neighbouring lanes store neighbouring words of a column row
            kp, cv = (u // cpv, u % cpv) if not pair else (u % (s.k_chunk // 2), u // (s.k_chunk // 2))
            col = cv * vb
            if aligned is None:
                colc = Sym(b, b.select(col.lt(s.cols), col.v, c32(0)))  # padded columns: never stored
            else:
                start, shift = aligned
                first = start + col  # a multiple of vb, inside the K row (spec.w_vector)
                col = col - shift  # its block column: -shift .. -1 the slack columns, past cols - 1 padding
            out = []
            for p in range(2 if pair else 1):
                kk = kp * 2 + p if pair else kp
                ok = (ci * s.k_chunk + kk).lt(self.K) if chk else None
                if aligned is None:
                    off = kk * (s.p * s.p * s.c) + self.r0 * (s.p * s.c) + colc
                else:
                    off = kk * (s.p * s.p * s.c) + first
                out.append(Unit(off, ok, s.lds_b_index(kk, col), s.lds_b_stride if pair else 1))
            return out

        units = s.k_chunk // 2 * cpv if pair else s.k_chunk * cpv
        return [Operand(s.rows * kpv, va, a_unit, self.dY, s.k_chunk),
                Operand(units, vb, b_unit, self.Wt, s.k_chunk * s.p * s.p * s.c, pair)]

    def _pixel(self, row: Sym) -> tuple[Sym, Sym]:
        return self.i0 + row // self.spec.tile_w, self.j0 + row % self.spec.tile_w

    def _dy_elem(self, e: Sym, k0: Sym):
        s = self.spec
        row, kk = e // s.k_chunk, e % s.k_chunk
        i, j = self._pixel(row)
        k = k0 + kk
        ok = self.kb.all_of(i.lt(self.Hp), j.lt(self.Wp), k.lt(self.K))
        idx = ((self.n * self.Hp + i) * self.Wp + j) * self.K + k
        return self.guarded_load(self.dY, idx, ok), s.lds_a_staged(e, row)

    def _w_elem(self, e: Sym, k0: Sym):
        s = self.spec
        kk, col = e // s.cols_padded, e % s.cols_padded
        k = k0 + kk
        ok = self.kb.all_of(col.lt(s.cols), k.lt(self.K))
        # The block's columns are patch rows r0 .. r0+r_blk-1 of W[k] in (r, s, c) order.
        idx = k * (s.p * s.p * s.c) + self.r0 * (s.p * s.c) + col
        return self.guarded_load(self.Wt, idx, ok), s.lds_b_staged(e, kk)

    def _store(self, row: Sym, col: Sym, value) -> None:
        s = self.spec
        i, j = self._pixel(row)
        with self.b.if_then(self.kb.all_of(i.lt(self.Hp), j.lt(self.Wp), col.lt(s.cols))):
            rr = col // (s.p * s.c)
            q = (col // s.c) % s.p
            c = col % s.c
            h = i * s.p + self.r0 + rr
            w = j * s.p + q
            self.store_out(self.dX, ((self.n * self.H + h) * self.W + w) * s.c + c, value)

    # -- the border blocks ----------------------------------------------------------------------
    def _border(self, bid: Sym) -> None:
        s, b = self.spec, self.b
        T = self.geo.threads
        hc, wc = self.Hp * s.p, self.Wp * s.p
        below = (self.H - hc) * self.W  # pixels in the rows no patch covers
        cw = self.W - wc  # uncovered columns of the covered rows
        per_img = (self.H * self.W - hc * wc) * s.c
        total = self.N * per_img
        nb = (total + (BORDER_ELEMS_PER_BLOCK - 1)) // BORDER_ELEMS_PER_BLOCK
        nb = Sym(b, b.select(nb.lt(MAX_BORDER_BLOCKS), nb.v, c32(MAX_BORDER_BLOCKS)))
        stride = nb * T
        e0 = bid * T + self.tid
        # A zero divisor is never used by a live element, but udiv by 0 is undefined, so
        # divide by max(x, 1): per_img = 0 means no border blocks are launched at all.
        one = c32(1)
        safe_img = Sym(b, b.select(per_img.lt(1), one, per_img.v))
        safe_cw = Sym(b, b.select(cw.lt(1), one, cw.v))
        iters = Sym(b, b.select(e0.lt(total), udiv(total - e0 + (stride - 1), stride).v, c32(0)))
        zero = ir.Constant(OUT[s.dtype], 0.0)

        def body(it: Sym, carried):
            e = e0 + _mul(it, stride)
            n, rem = udiv(e, safe_img), urem(e, safe_img)
            c, pix = rem % s.c, rem // s.c
            in_below = pix.lt(below)
            pb = pix - below
            h = b.select(in_below, (hc + udiv(pix, self.W)).v, udiv(pb, safe_cw).v)
            w = b.select(in_below, urem(pix, self.W).v, (wc + urem(pb, safe_cw)).v)
            idx = ((n * self.H + Sym(b, h)) * self.W + Sym(b, w)) * s.c + c
            b.store(zero, self.gep(self.dX, idx, OUT[s.dtype]))
            return carried

        loop(self.kb, iters, [], body, "border")


def _mul(a: Sym, o: Sym) -> Sym:
    return Sym(a.b, a.b.mul(a.v, o.v))


def lower_conv_dgrad_patch(spec: ConvDgradPatchSpec, target: Target, lane: lanes.Lane) -> LoweredKernel:
    return lower_conv(_PatchLowering, spec, target, lane)
