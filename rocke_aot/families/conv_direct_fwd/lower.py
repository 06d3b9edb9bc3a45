"""The conv_direct_fwd family: NHWC forward convolution, direct (no im2col buffer).

    Y[n, oh, ow, k] = sum_{r, s, c} X[n, oh*u - p + r*d, ow*v - q + s*e, c] * W[k, r, s, c]
    X: N x H x W x C (NHWC), W: K x R x S x C (KRSC), Y: N x OH x OW x K (NHWK)
    baked: dtype, C, K, R, S, stride, padding, dilation; runtime kernel args: N, H, W

    lower_conv_direct_fwd(spec, target, lane)
      1. refuse before any IR: target capability, matrix path capability, spec.geometry
      2. kernel(X, Wt, Y, N, H, W)       1-D grid: N * ceil(OH/tile_h) * ceil(OW/tile_w)
                                                      * ceil(K/tile_k) blocks
                                         (ConvDirectFwdSpec.launch_formulas)
           block (n, oh0, ow0, k0) owns a tile_h x tile_w x tile_k output tile = a GEMM tile
           of ROWS = tile_h*tile_w pixels x COLS = tile_k channels
           for each input-channel chunk c0 (C / c_chunk of them):
               stage the input halo [halo_h][halo_w][c_chunk] (zero outside the image:
               that is the padding) and the weights [tile_k][R*S][c_chunk] into LDS; barrier
               for each filter tap (r, s):  acc += A_tap x B_tap  (TileGemm.step)
                   A_tap[row][cc] = halo[py*u + r*d][px*v + s*e][cc]   (row = py*tile_w + px)
                   B_tap[cc][col] = wts[col][r*S + s][cc]
               barrier
           epilogue: guarded by oh < OH, ow < OW, k < K; converted to dtype; stored NHWK
         On AMD's matrix paths (mfma / wmma) the chunk loop is _conv_ir's amd_chunks (issue 37):
           staged in vectors of vw = gcd(c_chunk, 8) channels (a halo pixel's or a weight tap's
           chunk is contiguous in NHWC / KRSC: c_chunk divides C), the next chunk's loads issued
           before this chunk's taps; a block whose input halo lies inside the image runs every
           chunk without bounds tests, the others (padding) test each vector's pixel once.
           Weight rows past K (the last K tile) read row K-1: their output columns are never
           stored, and a column of B reaches only that column of the product.
"""

from __future__ import annotations

from rocke_aot import lanes
from rocke_aot.aot.families._conv_ir import ConvLowering, Operand, Unit, c32, loop, lower_conv, udiv, urem, wide
from rocke_aot.aot.lower.module import LoweredKernel, Sym
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.targets import Target


class _FwdLowering(ConvLowering):
    FAMILY = "conv_direct_fwd"
    SPEC = ConvDirectFwdSpec
    RUNTIME_ARGS = ["N", "H", "W"]

    @staticmethod
    def tile(spec: ConvDirectFwdSpec) -> tuple[int, int]:
        return spec.tile_h * spec.tile_w, spec.tile_k

    def build(self) -> None:
        s, kb = self.spec, self.kb
        halo = s.halo_h * s.halo_w * s.c_chunk
        (X, Wt, Y, n_arg, h_arg, w_arg), gid = self.start(s.launch_formulas().args, "conv_lds",
                                                          halo + s.tile_k * s.r * s.s * s.c_chunk)
        self.H, self.W = self.S(h_arg), self.S(w_arg)
        # Output extent from the runtime H, W (the launch contract's grid is zero when empty).
        self.OH = (self.H + (2 * s.pad_h - s.dil_h * (s.r - 1) - 1)) // s.stride_h + 1
        self.OW = (self.W + (2 * s.pad_w - s.dil_w * (s.s - 1) - 1)) // s.stride_w + 1
        nkt = -(-s.k // s.tile_k)
        ntw = (self.OW + (s.tile_w - 1)) // s.tile_w
        nth = (self.OH + (s.tile_h - 1)) // s.tile_h
        kt, rest = gid % nkt, gid // nkt
        tw_i, rest = urem(rest, ntw), udiv(rest, ntw)
        th_i, n = urem(rest, nth), udiv(rest, nth)
        self.n, self.k0 = n, kt * s.tile_k
        self.oh0, self.ow0 = th_i * s.tile_h, tw_i * s.tile_w
        self.X, self.Wt = X, Wt
        rs = s.r * s.s

        def operands(t: Sym | int):
            r, q = t // s.s, t % s.s
            return (lambda row, kk: s.lds_a_index(row, kk, r, q), lambda kk, col: s.lds_b_index(kk, col, t))

        group = self.taps_per_wait()

        def taps(acc_t):
            if group > 1:  # the taps unrolled here, `group` of them a wait
                for t0 in range(0, rs, group):
                    acc_t = self.steps(acc_t, s.c_chunk, [operands(t) for t in range(t0, min(t0 + group, rs))])
                return acc_t

            def tap(t: Sym, acc_i):
                return self.steps(acc_i, s.c_chunk, [operands(t)])

            return loop(kb, rs, acc_t, tap, "tap")

        if self.amd_path():
            b = self.b
            ih0, iw0 = self.oh0 * s.stride_h, self.ow0 * s.stride_w  # + halo row / column - padding
            inside = kb.all_of(b.icmp_unsigned(">=", ih0.v, c32(s.pad_h)),
                               b.icmp_unsigned("<=", (ih0 + (s.halo_h - s.pad_h)).v, self.H.v),
                               b.icmp_unsigned(">=", iw0.v, c32(s.pad_w)),
                               b.icmp_unsigned("<=", (iw0 + (s.halo_w - s.pad_w)).v, self.W.v))
            kfull = self.S(b.select(inside, c32(s.c // s.c_chunk), c32(0)))
            acc = self.amd_chunks(self._operands, s.c // s.c_chunk, kfull, self.zero(), taps)
        else:
            acc = loop(kb, s.c // s.c_chunk, self.zero(), self._chunk_by_element(halo, taps), "cchunk")
        self.Y = Y
        self.epilogue(acc, self._store)
        self.b.ret_void()

    def taps_per_wait(self) -> int:
        """The filter taps whose fragments are read before one LDS wait: on gfx1250 a filter row
        (S taps: 3 waits a chunk of a 3x3 filter where each tap waited, llvm22 100 -> 97
        instructions and 12 -> 6 waits a chunk, 126 -> 146 VGPRs; the whole filter, 9 taps: 96,
        4 waits, 242 VGPRs); on gfx9 the whole filter (R*S taps; issue 37's fifth conv step: with
        the taps' A reads at one base address, spec.lds_a_index, they pair into ds_read2_b64 within
        the group as they did across the backend's own waits; llvm22 gfx942 cc8 41 -> 37
        instructions and 7 -> 3 waits a chunk, 66 -> 86 VGPRs; cc16 64 -> 56, 11 -> 3, 68 -> 124;
        gfx950 cc16 54 -> 47, 10 -> 3); 1 on the other paths."""
        if not self.amd_path():
            return 1
        return self.spec.r * self.spec.s if self.target.processor.startswith("gfx9") else self.spec.s

    def _operands(self, checked: bool) -> list[Operand]:
        """One chunk's staging on the AMD path: the halo [halo_h][halo_w][c_chunk] and the
        weights [tile_k][R*S][c_chunk], vectors of vw channels (LDS index = unit * vw)."""
        s = self.spec
        vw, rs = wide(s.c_chunk), s.r * s.s
        cpv = s.c_chunk // vw  # vectors a pixel / tap
        halo = s.halo_h * s.halo_w * s.c_chunk

        def x_unit(u: Sym, ci: Sym, chk: bool) -> list[Unit]:
            hy, hx, cv = u // (s.halo_w * cpv), (u // cpv) % s.halo_w, u % cpv
            ih = self.oh0 * s.stride_h + hy - s.pad_h
            iw = self.ow0 * s.stride_w + hx - s.pad_w
            ok = self.kb.all_of(ih.lt(self.H), iw.lt(self.W)) if chk else None
            off = ((self.n * self.H + ih) * self.W + iw) * s.c + cv * vw
            return [Unit(off, ok, u * vw)]

        def w_unit(u: Sym, ci: Sym, chk: bool) -> list[Unit]:
            kl, t, cv = u // (rs * cpv), (u // cpv) % rs, u % cpv
            k = self.smin(self.k0 + kl, s.k - 1)  # rows past K: columns never stored
            return [Unit((k * rs + t) * s.c + cv * vw, None, u * vw + halo)]

        return [Operand(s.halo_h * s.halo_w * cpv, vw, x_unit, self.X, s.c_chunk, runtime_offsets=True),
                Operand(s.tile_k * rs * cpv, vw, w_unit, self.Wt, s.c_chunk)]

    def _chunk_by_element(self, halo: int, taps):
        s, kb = self.spec, self.kb
        rs = s.r * s.s

        def chunk(ci: Sym, acc):
            c0 = ci * s.c_chunk
            self.copy_to_lds(halo, lambda e: self._halo_elem(e, c0))
            self.copy_to_lds(s.tile_k * rs * s.c_chunk, lambda e: self._weight_elem(e, c0, halo))
            kb.barrier()
            acc = taps(acc)
            kb.barrier()
            return acc

        return chunk

    def _halo_elem(self, e: Sym, c0: Sym):
        s = self.spec
        hy = e // (s.halo_w * s.c_chunk)
        hx = (e // s.c_chunk) % s.halo_w
        cc = e % s.c_chunk
        # Negative coordinates wrap to huge unsigned values, so one unsigned compare per
        # axis rejects both sides of the image: that zero fill is the padding.
        ih = self.oh0 * s.stride_h + hy - s.pad_h
        iw = self.ow0 * s.stride_w + hx - s.pad_w
        ok = self.kb.all_of(ih.lt(self.H), iw.lt(self.W))
        idx = ((self.n * self.H + ih) * self.W + iw) * s.c + c0 + cc
        return self.guarded_load(self.X, idx, ok), e

    def _weight_elem(self, e: Sym, c0: Sym, halo: int):
        s = self.spec
        rs = s.r * s.s
        kl = e // (rs * s.c_chunk)
        t = (e // s.c_chunk) % rs
        cc = e % s.c_chunk
        k = self.k0 + kl
        idx = (k * rs + t) * s.c + c0 + cc
        return self.guarded_load(self.Wt, idx, k.lt(s.k)), e + halo

    def _store(self, row: Sym, col: Sym, value) -> None:
        s = self.spec
        oh = self.oh0 + row // s.tile_w
        ow = self.ow0 + row % s.tile_w
        k = self.k0 + col
        with self.b.if_then(self.kb.all_of(oh.lt(self.OH), ow.lt(self.OW), k.lt(s.k))):
            self.store_out(self.Y, ((self.n * self.OH + oh) * self.OW + ow) * s.k + k, value)


def lower_conv_direct_fwd(spec: ConvDirectFwdSpec, target: Target, lane: lanes.Lane) -> LoweredKernel:
    return lower_conv(_FwdLowering, spec, target, lane)
