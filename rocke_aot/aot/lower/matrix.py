"""One matrix-instruction call, whatever the instruction's calling convention.

    call_matrix(kb, fn, instr, a_bits, b_bits, acc) -> acc'
        a_bits  <a_per_lane x i16>   lane's A fragment, element j at instr.a_coord(lane, j)
        b_bits  <b_per_lane x i16>   lane's B fragment, element j at instr.b_coord(lane, j)
        acc     <acc_per_lane x float>   result register r at instr.d_coord(lane, r)

The families (gemm, the conv tile GEMM) build fragments in this one register form from the
instruction's coordinate maps (rocke_aot/mma.py); only here do the operands take the
intrinsic's own shape, read from the lane's profile declaration:

    mfma  (A, B, C, cbsz, abid, blgp)                      vectors as they are
    wmma  (neg_a, A, neg_b, B, c_mod, C, reuse_a, reuse_b)   vectors as they are
    mma   (a0..a3, b0..b1, c0..c3) -> {d0..d3}   NVPTX mma.sync: each .b32 register holds two
          16-bit elements, the lower index in the low half (PTX ISA), which is what bitcasting
          <8 x i16> to <4 x i32> gives on little-endian NVPTX; the result struct goes back to
          a <4 x float> so accumulators look alike on every target.
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower.module import I1, I16, I32, KernelModule, parse_type


def _c32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


def _registers(b: ir.IRBuilder, bits: ir.Value, types: list[ir.Type]) -> list[ir.Value]:
    """Split <2n x i16> into n 32-bit registers of the declared types (i32 or <2 x half>)."""
    words = b.bitcast(bits, ir.VectorType(I32, len(types)))
    return [b.bitcast(b.extract_element(words, _c32(i)), ty) for i, ty in enumerate(types)]


def call_matrix(kb: KernelModule, fn: ir.Function, instr, a_bits: ir.Value, b_bits: ir.Value,
                acc: ir.Value) -> ir.Value:
    """acc + A x B for one instruction tile, operands in register form (see module doc)."""
    b = kb.ir_builder()
    params = [parse_type(p) for p in kb.profile.intrinsic(instr.key).params]
    if instr.kind == "mfma":
        return b.call(fn, [b.bitcast(a_bits, params[0]), b.bitcast(b_bits, params[1]), acc,
                           _c32(0), _c32(0), _c32(0)])  # cbsz, abid, blgp
    if instr.kind == "wmma":
        f = ir.Constant(I1, 0)
        return b.call(fn, [f, b.bitcast(a_bits, params[1]), f, b.bitcast(b_bits, params[3]),
                           ir.Constant(I16, 0), acc, f, f])
    if instr.kind == "mma":
        na, nb = instr.a_per_lane // 2, instr.b_per_lane // 2
        nacc = instr.acc_per_lane
        if len(params) != na + nb + nacc:
            raise AssertionError(f"{fn.name}: {len(params)} operands, expected {na + nb + nacc}")
        args = (_registers(b, a_bits, params[:na]) + _registers(b, b_bits, params[na:na + nb])
                + [b.extract_element(acc, _c32(r)) for r in range(nacc)])
        res = b.call(fn, args)
        out = ir.Constant(acc.type, None)
        for r in range(nacc):
            out = b.insert_element(out, b.extract_value(res, r), _c32(r))
        return out
    raise AssertionError(f"no calling convention for matrix instruction kind {instr.kind!r}")
