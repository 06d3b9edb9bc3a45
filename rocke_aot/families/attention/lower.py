"""The lowerer half of the native attention family: AttentionSpec -> LLVM IR through the shared toolkit.

    lower_attention(spec, target, lane) -> LoweredKernel
      kernel(Q, K, V, O, seqlen_q, seqlen_k, heads_q, heads_kv, window, scale_bits)
      work-group g: query block g % nqb, (batch, head) g // nqb; warp w: rows r0 = block * BLOCK_M + 16 w
      Q fragments (A of S = Q K^T) for every instr.k slice of the head dim: loaded once, in registers
      for each K/V block of BLOCK_N keys (up to the block's last diagonal when causal):
        S = Q K^T           instr.n keys at a time, K fragments (B) read from global (0 past seqlen_k)
        S -> LDS            by the instruction's d_coord (f32)
        online softmax      lane l < 16 of the warp takes row l: scale (x log2 e), mask (keys past
                            seqlen_k, causal at the bottom right, the window), the running max m and
                            sum l, alpha = exp2(m_old - m_new); P = exp2(s - m_new) written back to LDS
                            in the input dtype, alpha beside it
        O = O * alpha + P V P fragments (A) from LDS by a_coord, V fragments (B) from global
      O = O / l (0 where a row saw no key), stored in the input dtype for rows < seqlen_q
    Every index is 32-bit (accepts refuses tensors over 2 GiB).
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower import LoweredKernel, kernel_for
from rocke_aot.aot.lower.matrix import call_matrix
from rocke_aot.aot.lower.module import BF16, F16, F32, I16, I32
from rocke_aot.families.attention.native import ROWS, AttentionSpec
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target

LOG2E = 1.4426950408889634


def lower_attention(spec: AttentionSpec, target: Target, lane: Lane) -> LoweredKernel:
    g = spec.geometry(target)
    ins, wave, BN, D, W = g.instr, g.wave, g.block_n, spec.head_dim, spec.warps
    kb = kernel_for(spec.kernel_name, target, lane, g.threads)
    Qp, Kp, Vp, Op, SQ, SK, HQ, HKV, WIN, SB = kb.define_kernel(spec.launch_formulas().args)
    b = kb.ir_builder()
    mfn = kb.matrix_op(ins.key, ins.capability, "attention")
    exp2 = ir.Function(kb.module, ir.FunctionType(F32, [F32]), "llvm.exp2.f32")
    c32 = lambda v: ir.Constant(I32, v)  # noqa: E731
    f32 = lambda v: ir.Constant(F32, v)  # noqa: E731
    neg_inf = f32(float("-inf"))

    s_lds = kb.shared_array("attn_s", F32, W * ROWS * BN, 4)
    p_lds = kb.shared_array("attn_p", I16, W * ROWS * BN, 2)
    a_lds = kb.shared_array("attn_alpha", F32, W * ROWS, 4)

    tid = kb.sym(kb.workitem_id())
    ln = tid % wave
    warp = tid // wave
    pid = kb.sym(kb.workgroup_id())
    sq, sk, hq, hkv, win = (kb.sym(x) for x in (SQ, SK, HQ, HKV, WIN))
    nqb = (sq + (g.block_m - 1)) // g.block_m
    qblk = pid % nqb
    bh = pid // nqb
    bidx, h = bh // hq, bh % hq
    hk = h // (hq // hkv)
    q_stride, kv_stride = hq * D, hkv * D
    q_base = bidx * sq * q_stride + h * D
    kv_base = bidx * sk * kv_stride + hk * D
    row0 = qblk * g.block_m + warp * ROWS
    qk_scale = b.fmul(b.bitcast(SB, F32), f32(LOG2E))

    def load16(ptr: ir.Value, idx, ok: ir.Value) -> ir.Value:
        safe = b.select(ok, idx.v, c32(0))
        v = b.load(b.gep(ptr, [safe], source_etype=I16), typ=I16, align=2)
        return b.select(ok, v, ir.Constant(I16, 0))

    def vec(n: int, elems: list[ir.Value], ty: ir.Type) -> ir.Value:
        out = ir.Constant(ir.VectorType(ty, n), None)
        for j, e in enumerate(elems):
            out = b.insert_element(out, e, c32(j))
        return out

    def to_bits(x: ir.Value) -> ir.Value:
        return b.bitcast(b.fptrunc(x, F16 if spec.dtype == "f16" else BF16), I16)

    zero_acc = ir.Constant(ir.VectorType(F32, ins.acc_per_lane), [0.0] * ins.acc_per_lane)

    # Q fragments: A of S = Q K^T, one per instr.k slice of the head dim
    qfrag = []
    for kc in range(D // ins.k):
        els = []
        for j in range(ins.a_per_lane):
            r, c = ins.a_coord(ln, j)
            row = row0 + r
            els.append(load16(Qp, q_base + row * q_stride + (kc * ins.k + c), row.lt(sq)))
        qfrag.append(vec(ins.a_per_lane, els, I16))

    # the key range of this block: up to its last row's diagonal when causal
    shift = b.sub(SK, SQ)
    if spec.causal:
        last = b.add(c32(g.block_m), b.add(b.mul(qblk.v, c32(g.block_m)), shift))
        last = b.select(b.icmp_signed(">", last, c32(0)), last, c32(0))
        hi = b.select(b.icmp_signed("<", last, SK), last, SK)
    else:
        hi = SK
    trips = kb.sym(hi) + (BN - 1)
    trips = trips // BN

    my_row = ln % ROWS  # the softmax row this lane takes (lanes >= 16 repeat rows and write nothing)
    qi = row0 + my_row
    diag = b.add(qi.v, shift)  # signed: the last key row qi sees when causal
    writer = ln.lt(ROWS)

    def step(it, carried):
        m_old, l_old, accs = carried[0], carried[1], carried[2:]
        k0 = it * BN
        # S = Q K^T, instr.n keys at a time, into LDS
        for nt in range(BN // ins.n):
            acc = zero_acc
            for kc in range(D // ins.k):
                els = []
                for j in range(ins.b_per_lane):
                    kk, nn = ins.b_coord(ln, j)
                    key = k0 + nt * ins.n + nn
                    els.append(load16(Kp, kv_base + key * kv_stride + (kc * ins.k + kk), key.lt(sk)))
                acc = call_matrix(kb, mfn, ins, qfrag[kc], vec(ins.b_per_lane, els, I16), acc)
            for r in range(ins.acc_per_lane):
                rr, cc = ins.d_coord(ln, r)
                slot = (warp * ROWS + rr) * BN + (nt * ins.n + cc)
                b.store(b.extract_element(acc, c32(r)), b.gep(s_lds, [slot.v], source_etype=F32), align=4)
        kb.barrier()
        # online softmax: lane l < 16 takes row l of its warp
        svals = []
        mx = neg_inf
        for c in range(BN):
            slot = (warp * ROWS + my_row) * BN + c
            s = b.fmul(b.load(b.gep(s_lds, [slot.v], source_etype=F32), typ=F32, align=4), qk_scale)
            key = (k0 + c).v
            keep = b.and_(b.icmp_signed("<", key, SK), qi.lt(sq))
            if spec.causal:
                keep = b.and_(keep, b.icmp_signed("<=", key, diag))
            in_win = b.icmp_signed("<", b.sub(diag, key), WIN)
            keep = b.and_(keep, b.or_(b.icmp_signed("<=", WIN, c32(0)), in_win))
            s = b.select(keep, s, neg_inf)
            svals.append(s)
            mx = b.select(b.fcmp_ordered(">", s, mx), s, mx)
        m_new = b.select(b.fcmp_ordered(">", mx, m_old), mx, m_old)
        m_use = b.select(b.fcmp_ordered("==", m_new, neg_inf), f32(0.0), m_new)
        alpha = b.call(exp2, [b.fsub(m_old, m_use)])
        total = f32(0.0)
        pbits = []
        for s in svals:
            p = b.call(exp2, [b.fsub(s, m_use)])
            total = b.fadd(total, p)
            pbits.append(to_bits(p))
        l_new = b.fadd(b.fmul(l_old, alpha), total)
        with kb.if_then(writer, "pw"):
            for c, pb in enumerate(pbits):
                slot = (warp * ROWS + my_row) * BN + c
                b.store(pb, b.gep(p_lds, [slot.v], source_etype=I16), align=2)
            b.store(alpha, b.gep(a_lds, [(warp * ROWS + my_row).v], source_etype=F32), align=4)
        kb.barrier()
        # O = O * alpha + P V
        out = []
        pfrag = []
        for kc in range(BN // ins.k):
            els = []
            for j in range(ins.a_per_lane):
                r, c = ins.a_coord(ln, j)
                slot = (warp * ROWS + r) * BN + (kc * ins.k + c)
                els.append(b.load(b.gep(p_lds, [slot.v], source_etype=I16), typ=I16, align=2))
            pfrag.append(vec(ins.a_per_lane, els, I16))
        for dt in range(D // ins.n):
            acc = accs[dt]
            for r in range(ins.acc_per_lane):
                rr, _ = ins.d_coord(ln, r)
                a = b.load(b.gep(a_lds, [(warp * ROWS + rr).v], source_etype=F32), typ=F32, align=4)
                acc = b.insert_element(acc, b.fmul(b.extract_element(acc, c32(r)), a), c32(r))
            for kc in range(BN // ins.k):
                els = []
                for j in range(ins.b_per_lane):
                    kk, nn = ins.b_coord(ln, j)
                    key = k0 + kc * ins.k + kk
                    els.append(load16(Vp, kv_base + key * kv_stride + (dt * ins.n + nn), key.lt(sk)))
                acc = call_matrix(kb, mfn, ins, pfrag[kc], vec(ins.b_per_lane, els, I16), acc)
            out.append(acc)
        kb.barrier()  # every warp has read S, P and alpha before the next step writes them
        return [m_new, l_new, *out]

    final = kb.loop(trips, [neg_inf, f32(0.0)] + [zero_acc] * (D // ins.n), step, "kv")
    l_fin = final[1]
    # 1 / l per row through LDS (the alpha slots), 0 where a row saw no key
    inv = b.select(b.fcmp_ordered(">", l_fin, f32(0.0)), b.fdiv(f32(1.0), l_fin), f32(0.0))
    with kb.if_then(writer, "lw"):
        b.store(inv, b.gep(a_lds, [(warp * ROWS + my_row).v], source_etype=F32), align=4)
    kb.barrier()
    for dt in range(D // ins.n):
        acc = final[2 + dt]
        for r in range(ins.acc_per_lane):
            rr, cc = ins.d_coord(ln, r)
            row = row0 + rr
            scale = b.load(b.gep(a_lds, [(warp * ROWS + rr).v], source_etype=F32), typ=F32, align=4)
            v = to_bits(b.fmul(b.extract_element(acc, c32(r)), scale))
            with kb.if_then(row.lt(sq), "st"):
                idx = q_base + row * q_stride + (dt * ins.n + cc)
                b.store(v, b.gep(Op, [idx.v], source_etype=I16), align=2)
    b.ret_void()
    return kb.lowered("attention", {"threads": g.threads, "block_m": g.block_m, "block_n": BN, "instr": ins.key})


__all__ = ["lower_attention"]
