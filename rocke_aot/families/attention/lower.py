"""The lowerer half of the native attention family: AttentionSpec -> LLVM IR through the shared toolkit.

    lower_attention(spec, target, lane) -> LoweredKernel
      kernel(Q, K, V, O, seqlen_q, seqlen_k, heads_q, heads_kv, window, scale_bits)
      work-group g: query block g % nqb, (batch, head) g // nqb; warp w: rows r0 = block * BLOCK_M + 16 w
      Q fragments (A of S = Q K^T) for every instr.k slice of the head dim: loaded once, in registers
      for each K/V block of BLOCK_N = spec.block_n keys (up to the block's last diagonal when causal):
        stage               the work-group copies the block's K rows and V rows into LDS: 16-byte
                            vectors (8 elements of one key row), work-item t takes vectors t, t + T, ..;
                            one global load each, K stored row-major [key][d] (one 16-byte LDS store),
                            V transposed [d][key] (8 two-byte stores); rows past seqlen_k are zeros;
                            each LDS row padded by KV_PAD elements; barrier
      the online softmax in registers (register_plan, plan.py: decided from the instruction's coordinate
      maps; every unsplit kernel):
        AMDGPU (mfma / wmma)  S^T = K Q^T (K fragments A from LDS, Q^T fragments B in registers): each
                            lane's accumulators are one query row's (a D column); P^T's B fragments are
                            those accumulators converted, O^T += V^T P^T (V^T fragments A from LDS);
                            v_max_f32, the row max over the lanes of a row by ds_bpermute, v_exp_f32;
                            gfx950's MFMA 16x16x32 (block_n 32 / 64): P^T's fragment element j is the
                            lane's j-th accumulator of the 32-key slice and V^T's A fragment reads the
                            same keys (plan.paired: the natural order does not compose with kpl 8)
        sm_90 (mma.sync m16n8k16)  S = Q K^T (Q fragments A in registers, K fragments B from LDS, runs
                            of consecutive elements one vector read: gemm's a_fragment_run over the (n, k)
                            map): each lane's accumulators are in rows lane / 4 and lane / 4 + 8 of the
                            warp's 16 (c0 c1, c2 c3), the C layout of two adjacent n8 tiles is the A
                            layout of one k16 slice, so P's A fragments are S's accumulators converted;
                            O += P V (V^T fragments B from LDS); max.f32, the row max over the quad
                            (lane ^ 1, lane ^ 2) by shfl.sync.bfly, ex2.approx
      per row of a lane: scale (x log2 e), mask (keys past seqlen_k, causal at the bottom right, the
      window), the running max m, alpha = exp2(m_old - m_new), P = exp2(s - m_new), the row sum per lane
      until the end (reduced once over the row's lanes); two barriers a block; blocks every row of the
      work-group sees whole run a loop without masks or staging guards, the rest (diagonal, tail, any
      window) a masked loop; O stored as each lane's runs of head-dim elements. LDS holds K and V^T only.
    split-KV keeps the softmax through shared memory (step below), on every target:
        S = Q K^T           instr.n keys at a time, K fragments (B) from LDS
        S -> LDS            by the instruction's d_coord (f32); barrier
        online softmax      lane l < 16 takes row l: as above; P written back to LDS in the input
                            dtype, alpha beside it; barrier
        O = O * alpha + P V P fragments (A) and V^T fragments (B) from LDS, vector reads as for K;
                            barrier (every warp is done with K, V, S, P before the next block)
      O = O / l (0 where a row saw no key), stored in the input dtype for rows < seqlen_q
    split-KV (spec.split_kv; reduce_splits, docs/attention.md "Split-KV decode"): kernel(..., kv_splits, W);
      work-group g: split z = g % kv_splits of tile g // kv_splits, keys [z per, min(hi, (z + 1) per));
      partial O / m / l to W, arrival on the tile's counter (fence, atomic, fence: the split-K gemm's
      protocol), the last arriver combines z = 0, 1, .. in order and runs the epilogue below
    LDS: spec.lds_layout() (K, V^T; split-KV also S, P, alpha); static arrays on AMD, one dynamic shared array on sm_90
    (past the 48 KiB of static shared data; the launch contract's dynamic_shared_bytes).
    Every index is 32-bit (accepts refuses tensors over 2 GiB). The 16-byte K/V loads assume 16-byte
    aligned K and V base pointers (every torch allocation is; a row is head_dim >= 64 elements).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llvmlite.ir as ir

from rocke_aot.aot.lower import LoweredKernel, kernel_for
from rocke_aot.aot.lower.matrix import call_matrix
from rocke_aot.aot.lower.module import BF16, F16, F32, I16, I32, Sym
from rocke_aot.families.attention.native import KV_PAD, ROWS, AttentionSpec
from rocke_aot.families.attention.plan import RegisterPlan, b_nk, lds_operand, register_plan
from rocke_aot.families.attention.plan import dmap as plan_dmap
from rocke_aot.families.gemm.lower_common import a_fragment_run
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target

LOG2E = 1.4426950408889634
VEC = 8  # i16 elements a staging copy moves (16 bytes)


def lower_attention(spec: AttentionSpec, target: Target, lane: Lane) -> LoweredKernel:
    g = spec.geometry(target)
    ins, wave, BN, D = g.instr, g.wave, g.block_n, spec.head_dim
    T = g.threads
    LDK, LDV = D + KV_PAD, BN + KV_PAD  # LDS row strides (i16) of the K tile and the V^T tile
    kb = kernel_for(spec.kernel_name, target, lane, T)
    args = kb.define_kernel(spec.launch_formulas().args)
    if spec.split_kv:  # split-KV: the unsplit kernel's arguments, then kv_splits and the workspace
        *args, KS, W = args
    if spec.layout:
        Qp, Kp, Vp, Op, LSEp, CUQ, CUK, BT, SQ, SK, HQ, HKV, WIN, SB, LROWS, BS, TW = args
    else:
        Qp, Kp, Vp, Op, SQ, SK, HQ, HKV, WIN, SB = args
    b = kb.ir_builder()
    mfn = kb.matrix_op(ins.key, ins.capability, "attention")
    exp2 = ir.Function(kb.module, ir.FunctionType(F32, [F32]), "llvm.exp2.f32")
    c32 = lambda v: ir.Constant(I32, v)  # noqa: E731
    f32 = lambda v: ir.Constant(F32, v)  # noqa: E731
    neg_inf = f32(float("-inf"))

    arrays = {}
    if target.is_amdgpu:  # static LDS arrays
        for name, n, eb in spec.lds_layout():
            arrays[name] = kb.shared_array(name, F32 if eb == 4 else I16, n, eb)
        got = kb.lds_bytes
    else:  # sm_90: one dynamic shared array (past the 48 KiB of static shared data), the arrays at
        # their 16-byte aligned offsets in it; the launch contract asks for its bytes
        dyn = kb.dynamic_shared_array("attn_lds", I16, spec.lds_bytes() // 2, 2)
        off = 0
        for name, n, eb in spec.lds_layout():
            off = (off + 15) // 16 * 16
            arrays[name] = b.gep(dyn, [c32(off)], source_etype=ir.IntType(8))
            off += n * eb
        got = kb.dynamic_lds_bytes
    k_lds, vt_lds, s_lds, p_lds, a_lds = (arrays.get(n) for n in ("attn_k", "attn_vt", "attn_s", "attn_p", "attn_alpha"))
    if got != spec.lds_bytes():
        raise AssertionError(f"LDS {got} bytes, the spec's layout says {spec.lds_bytes()}")

    tid = kb.sym(kb.workitem_id())
    ln = tid % wave
    warp = tid // wave
    pid = kb.sym(kb.workgroup_id())
    sq, sk, hq, hkv = (kb.sym(x) for x in (SQ, SK, HQ, HKV))
    if spec.pack_gqa:  # a (sequence, KV head)'s rows: its group's query heads x seqlen_q
        grp = hq // hkv  # query heads per KV head
        nqb = (sq * grp + (g.block_m - 1)) // g.block_m
    else:
        nqb = (sq + (g.block_m - 1)) // g.block_m
    if spec.split_kv:  # work-group pid: split z = pid % kv_splits of query tile pid // kv_splits
        ks = kb.sym(KS)
        z, tile = pid % ks, pid // ks
    else:
        tile = pid
    qblk = tile % nqb
    bh = tile // nqb
    if spec.pack_gqa:  # tile: (sequence, KV head); row r is query position r // grp of head hk * grp + r % grp
        bidx, hk = bh // hkv, bh % hkv
        h = hk * grp  # the group's first query head
    else:
        bidx, h = bh // hq, bh % hq
        grp = hq // hkv
        hk = h // grp
    q_stride, kv_stride = hq * D, hkv * D

    def ld32(ptr: ir.Value, idx: Sym) -> Sym:
        return kb.sym(b.load(b.gep(ptr, [idx.v], source_etype=I32), typ=I32, align=4))

    if spec.varlen:  # sequence bidx: rows cu[bidx] .. cu[bidx + 1] of the packed tensors
        q_start = ld32(CUQ, bidx)
        len_q = ld32(CUQ, bidx + 1) - q_start
        k_start = ld32(CUK, bidx)
        len_k = ld32(CUK, bidx + 1) - k_start
    else:
        q_start, len_q, k_start, len_k = bidx * sq, sq, bidx * sk, sk
    LQ, LK = len_q.v, len_k.v  # this sequence's lengths (seqlen_q / seqlen_k: the grid's longest)
    q_base = q_start * q_stride + h * D

    @dataclass
    class QRow:
        """Tile row ``row``: ok() in this sequence, at() the Q / O offset of its element 0, pos its query
        position, head its query head; packed (GQA): position row // grp of query head h + row % grp, rows
        past grp x len_q out (emitted where used, in the unpacked kernel's order)."""
        row: Sym

        def __post_init__(self) -> None:
            packed = spec.pack_gqa
            self.pos: Sym = self.row // grp if packed else self.row
            self.j: Sym = self.row % grp if packed else self.row  # the head within the group (packed only)

        def ok(self) -> ir.Value:
            return self.row.lt(len_q * grp) if spec.pack_gqa else self.row.lt(len_q)

        def at(self) -> Sym:
            return q_base + self.pos * q_stride + self.j * D if spec.pack_gqa else q_base + self.row * q_stride

        @property
        def head(self) -> Sym:
            return h + self.j if spec.pack_gqa else h

    kv_base = k_start * kv_stride + hk * D
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

    def lds_fragment(arr: ir.Value, per: int, coord, run: int, index) -> ir.Value:
        """A fragment of ``per`` i16 from LDS: element j at index(*coord(ln, j)); ``run`` consecutive
        elements (a_fragment_run: same row, consecutive and aligned columns) one vector load."""
        els: list[ir.Value] = []
        for j in range(0, per, run):
            idx = index(*coord(ln, j))
            if run == 1:
                els.append(b.load(b.gep(arr, [idx.v], source_etype=I16), typ=I16, align=2))
                continue
            v = b.load(b.gep(arr, [idx.v], source_etype=I16), typ=ir.VectorType(I16, run), align=2 * run)
            els.extend(b.extract_element(v, c32(e)) for e in range(run))
        return vec(per, els, I16)

    nk = b_nk(ins)  # a B operand stored (n, k) in LDS, k contiguous: K for S, V^T for P V
    k_run = a_fragment_run(ins, LDK, nk, ins.b_per_lane)
    v_run = a_fragment_run(ins, LDV, nk, ins.b_per_lane)
    p_run = a_fragment_run(ins, BN)

    zero_acc = ir.Constant(ir.VectorType(F32, ins.acc_per_lane), [0.0] * ins.acc_per_lane)

    # Q fragments: A of S = Q K^T, one per instr.k slice of the head dim (read once, from global)
    qfrag = []
    for kc in range(D // ins.k):
        els = []
        for j in range(ins.a_per_lane):
            r, c = ins.a_coord(ln, j)
            q = QRow(row0 + r)
            els.append(load16(Qp, q.at() + (kc * ins.k + c), q.ok()))
        qfrag.append(vec(ins.a_per_lane, els, I16))

    # the key range of this block: up to its last row's diagonal when causal
    shift = b.sub(LK, LQ)
    if spec.causal and spec.pack_gqa:  # decode: a tile holds every position (accepts), the rows mask their own
        hi = LK
    elif spec.causal:
        last = b.add(c32(g.block_m), b.add(b.mul(qblk.v, c32(g.block_m)), shift))
        last = b.select(b.icmp_signed(">", last, c32(0)), last, c32(0))
        hi = b.select(b.icmp_signed("<", last, LK), last, LK)
    else:
        hi = LK
    if spec.varlen:  # a block past its sequence's end: no keys (and nothing stored)
        hi = b.select(b.icmp_signed("<", b.mul(qblk.v, c32(g.block_m)), (len_q * grp).v if spec.pack_gqa else LQ),
                      hi, c32(0))
    kstart = None
    if spec.split_kv:  # keys [z * per, min(hi, (z + 1) * per)), per: ceil(seqlen_k / kv_splits) in whole blocks
        per = (((sk + (ks - 1)) // ks) + (BN - 1)) // BN * BN
        kstart = z * per
        end = b.add(kstart.v, per.v)
        end = b.select(b.icmp_signed("<", end, hi), end, hi)
        span = b.sub(end, kstart.v)
        span = b.select(b.icmp_signed(">", span, c32(0)), span, c32(0))  # a chunk past the keys: none
        trips = (kb.sym(span) + (BN - 1)) // BN
    else:
        trips = kb.sym(hi) + (BN - 1)
        trips = trips // BN

    my_row = ln % ROWS  # the softmax row this lane takes (lanes >= 16 repeat rows and write nothing)
    q_mine = QRow(row0 + my_row)
    qi = q_mine.pos  # the row's query position
    diag = b.add(qi.v, shift)  # signed: the last key row qi sees when causal
    writer = ln.lt(ROWS)

    vpr = D // VEC  # 16-byte vectors per key row
    chunks = BN * vpr
    vty = ir.VectorType(I16, VEC)
    zero_vec = ir.Constant(vty, [0] * VEC)

    # key rows of V one work-item transposes: 4 elements of a V^T row, one 8-byte LDS store (AMDGPU); sm_90
    # one, K's and V's vectors of a row in one round as before (ptxas -v, head dim 256 at w1 n16: separate
    # rounds or four V vectors in flight spill 64 bytes where this spills main's 32)
    VR = 4 if target.is_amdgpu else 1

    def stage(k0: Sym, guarded: bool = True) -> None:
        """Key rows k0 .. k0+BN-1 of K and V into LDS, 16-byte global loads (8 elements of one key row);
        K row-major [key][d]: work-item t moves vectors t, t + T, .. (one 16-byte LDS store each);
        V transposed [d][key] (the B / A fragments of P V / V^T P^T): work-item t takes the same
        vector of VR consecutive key rows and stores each of its 8 head-dim elements' VR keys as one
        8-byte LDS store; rows past seqlen_k are zeros (``guarded``; a block wholly below seqlen_k
        needs no check)."""

        def load(ptr: ir.Value, key: Sym, v: Sym) -> ir.Value:
            ok = key.lt(len_k) if guarded else None
            if spec.paged:  # key t of sequence bidx: block block_table[bidx, t // block_size], row t % block_size
                bs = kb.sym(BS)
                slot = bidx * kb.sym(TW) + key // bs
                blk = ld32(BT, kb.sym(b.select(ok, slot.v, c32(0))) if ok is not None else slot)
                at = (blk * bs + key % bs) * kv_stride + hk * D + v * VEC
            else:
                at = kv_base + key * kv_stride + v * VEC
            src = b.select(ok, at.v, c32(0)) if ok is not None else at.v
            x = b.load(b.gep(ptr, [src], source_etype=I16), typ=vty, align=16)
            return b.select(ok, x, zero_vec) if ok is not None else x

        def rounds(n: int, name: str, body) -> None:
            for rnd in range(-(-n // T)):
                c = tid + rnd * T
                if n % T and (rnd + 1) * T > n:
                    with kb.if_then(c.lt(n), name):
                        body(c)
                else:
                    body(c)

        def k_vec(c: Sym) -> None:
            r, v = c // vpr, c % vpr
            b.store(load(Kp, k0 + r, v), b.gep(k_lds, [(r * LDK + v * VEC).v], source_etype=I16), align=16)

        def v_vecs(c: Sym) -> None:
            r, v = (c // vpr) * VR, c % vpr
            rows = [load(Vp, k0 + r + q, v) for q in range(VR)]
            for e in range(VEC):
                els = [b.extract_element(x, c32(e)) for x in rows]
                b.store(vec(VR, els, I16) if VR > 1 else els[0],
                        b.gep(vt_lds, [((v * VEC + e) * LDV + r).v], source_etype=I16), align=2 * VR)

        def kv_vecs(c: Sym) -> None:
            k_vec(c)
            v_vecs(c)

        if VR == 1:  # K's and V's vector of the same key row in one round, as many in flight as before
            rounds(chunks, "stg", kv_vecs)
        else:
            rounds(chunks, "stgk", k_vec)
            rounds(chunks // VR, "stgv", v_vecs)

    def registers(plan: RegisterPlan) -> LoweredKernel:
        """The online softmax in registers (register_plan). AMDGPU (plan.transposed): S^T = K Q^T and
        O^T = V^T P^T, K and V^T fragments A from LDS, Q^T fragments B in registers, a lane's S^T
        accumulators all of one query row (its column); sm_90 (mma.sync m16n8k16): S = Q K^T and O = P V,
        Q fragments A in registers, K and V^T fragments B from LDS, a lane's accumulators in two rows
        (plan.rows: lane / 4 and lane / 4 + 8). Either way P's fragments are S's accumulators converted, as
        they stand (plan.gather); the row max over the lanes of a row by plan.masks shuffles (ds_bpermute /
        shfl.sync.bfly), the row sum per lane (reduced once, after the loops). Blocks wholly visible to every
        row of the work-group (below seqlen_k, below the first row's diagonal when causal, no window) run a
        loop with no masks; the rest a loop with them."""
        tp = plan.transposed
        tile = plan.tile(ins)
        dmap = plan_dmap(ins, tp)
        nrows = len(plan.rows)
        row_of = {r: c for c, grp in enumerate(plan.rows) for r in grp}
        qrows = [row0 + dmap(ln, grp[0])[1] for grp in plan.rows]  # this lane's query rows
        qdiags = [b.add(q.v, shift) for q in qrows]  # signed: the last key each sees when causal
        tiles_s, tiles_o = BN // tile, D // tile
        if target.is_amdgpu:  # v_exp_f32, v_max_f32
            exp2_hw, vmax = kb.declare("amdgcn_exp2_f32"), kb.declare("maxnum_f32")
        else:  # ex2.approx.f32, max.f32
            exp2_hw, vmax = exp2, kb.declare("maxnum_f32")

        def bfrag_q(kc: int) -> ir.Value:  # Q^T as B: element j = Q[row b_n(j)][kc * k + b_k(j)]
            els = []
            for j in range(ins.b_per_lane):
                kk, nn = ins.b_coord(ln, j)
                row = row0 + nn
                els.append(load16(Qp, q_base + row * q_stride + (kc * ins.k + kk), row.lt(len_q)))
            return vec(ins.b_per_lane, els, I16)

        # the operands: S^T = K Q^T (K as A, Q^T as B) or S = Q K^T (Q as A, K as B); K and V^T fragments from
        # LDS by a (key or head-dim, contiguous index) map and its vector runs
        qops = [bfrag_q(kc) for kc in range(D // ins.k)] if tp else qfrag
        lds_per, lds_coord = lds_operand(ins, tp)
        v_coord = lds_coord
        if plan.paired:  # V^T's element j: the key of P^T's element j (the lane's accumulator gather[0][j])
            def v_coord(lane_, j):
                t_, r_ = plan.gather[0][j]
                return ins.a_coord(lane_, j)[0], t_ * tile + dmap(lane_, r_)[0]
        a_k_run = a_fragment_run(ins, LDK, lds_coord, lds_per)
        a_v_run = a_fragment_run(ins, LDV, v_coord, lds_per)

        def mm(kv: ir.Value, other: ir.Value, acc: ir.Value) -> ir.Value:  # kv: the K / V^T fragment
            return call_matrix(kb, mfn, ins, kv, other, acc) if tp else call_matrix(kb, mfn, ins, other, kv, acc)

        def reduce(v: ir.Value, op) -> ir.Value:
            for mk in plan.masks:
                v = op(v, kb.shuffle_xor(v, ln.v, mk))
            return v

        def fmax(x: ir.Value, y: ir.Value) -> ir.Value:
            return b.call(vmax, [x, y])

        def step(k0: Sym, carried: list, masked: bool) -> list:
            m_old, l_old, accs = carried[:nrows], carried[nrows:2 * nrows], carried[2 * nrows:]
            stage(k0, guarded=masked)
            kb.barrier()
            s_t = []  # S tiles: keys t * tile .. of this block x the warp's 16 query rows
            for t in range(tiles_s):
                acc = zero_acc
                for kc in range(D // ins.k):
                    kf = lds_fragment(k_lds, lds_per, lds_coord, a_k_run,
                                      lambda m_, k_, t=t, kc=kc: (m_ + t * tile) * LDK + (k_ + kc * ins.k))
                    acc = mm(kf, qops[kc], acc)
                s_t.append(acc)
            vals = {}
            mx: list[Any] = [None] * nrows
            for t in range(tiles_s):
                for r in range(ins.acc_per_lane):
                    c = row_of[r]
                    x = b.fmul(b.extract_element(s_t[t], c32(r)), qk_scale)
                    if masked:
                        key = (k0 + t * tile + dmap(ln, r)[0]).v
                        keep = b.icmp_signed("<", key, LK)
                        if spec.causal:
                            keep = b.and_(keep, b.icmp_signed("<=", key, qdiags[c]))
                        in_win = b.icmp_signed("<", b.sub(qdiags[c], key), WIN)
                        keep = b.and_(keep, b.or_(b.icmp_signed("<=", WIN, c32(0)), in_win))
                        x = b.select(keep, x, neg_inf)
                    vals[t, r] = x
                    mx[c] = x if mx[c] is None else fmax(mx[c], x)
            m_new, m_use, alpha = [], [], []
            for c in range(nrows):
                m_new.append(fmax(reduce(mx[c], fmax), m_old[c]))
                m_use.append(b.select(b.fcmp_ordered("==", m_new[c], neg_inf), f32(0.0), m_new[c])
                             if masked else m_new[c])
                alpha.append(b.call(exp2_hw, [b.fsub(m_old[c], m_use[c])]))
            total: list[Any] = [None] * nrows
            bits = {}
            for (t, r), x in vals.items():
                c = row_of[r]
                p = b.call(exp2_hw, [b.fsub(x, m_use[c])])
                total[c] = p if total[c] is None else b.fadd(total[c], p)
                bits[t, r] = to_bits(p)
            l_new = [b.fadd(b.fmul(l_old[c], alpha[c]), total[c]) for c in range(nrows)]
            pb = [vec(len(plan.gather[kc]), [bits[tr] for tr in plan.gather[kc]], I16) for kc in range(BN // ins.k)]
            if nrows == 1:
                scale = b.insert_element(ir.Constant(zero_acc.type, None), alpha[0], c32(0))
                scale = b.shuffle_vector(scale, ir.Constant(zero_acc.type, None),
                                         ir.Constant(ir.VectorType(I32, ins.acc_per_lane), [0] * ins.acc_per_lane))
            else:
                scale = vec(ins.acc_per_lane, [alpha[row_of[r]] for r in range(ins.acc_per_lane)], F32)
            out = []
            for dt in range(tiles_o):
                acc = b.fmul(accs[dt], scale)
                for kc in range(BN // ins.k):
                    vf = lds_fragment(vt_lds, lds_per, v_coord, a_v_run,
                                      lambda m_, k_, dt=dt, kc=kc: (m_ + dt * tile) * LDV + (k_ + kc * ins.k))
                    acc = mm(vf, pb[kc], acc)
                out.append(acc)
            kb.barrier()  # every warp has read K and V before the next block is staged
            return [*m_new, *l_new, *out]

        # blocks every row of the work-group sees whole: below seqlen_k // BN and, when causal, below
        # (first row + shift + 1) // BN; none with a window (it masks keys from below)
        full = b.udiv(LK, c32(BN))
        if spec.causal:
            lim = b.add(b.add(b.mul(qblk.v, c32(g.block_m)), shift), c32(1))
            lim = b.select(b.icmp_signed(">", lim, c32(0)), lim, c32(0))
            lim = b.udiv(lim, c32(BN))
            full = b.select(b.icmp_unsigned("<", lim, full), lim, full)
        full = b.select(b.icmp_signed("<=", WIN, c32(0)), full, c32(0))
        full = kb.sym(b.select(b.icmp_unsigned("<", full, trips.v), full, trips.v))
        init = [neg_inf] * nrows + [f32(0.0)] * nrows + [zero_acc] * tiles_o
        mid = kb.loop(full, init, lambda it, c: step(it * BN, c, False), "kv")
        final = kb.loop(trips - full, mid, lambda it, c: step((full + it) * BN, c, True), "kvm")
        fins = [(final[c], reduce(final[nrows + c], b.fadd)) for c in range(nrows)]  # each row's m, l
        first = b.icmp_unsigned("==", b.and_(ln.v, c32(sum(plan.masks))), c32(0))  # one lane per row
        for c, grp in enumerate(plan.rows):
            qrow = qrows[c]
            m_fin, l_fin = fins[c]
            if spec.layout:
                lse = natural_lse(m_fin, l_fin)
                want = kb.all_of(first, qrow.lt(len_q), b.icmp_signed(">", LROWS, c32(0)))
                with kb.if_then(want, "lse"):
                    lse_at: Sym = (h * (kb.sym(LROWS) // hq) + q_start + qrow) if spec.varlen else bh * sq + qrow
                    b.store(lse, b.gep(LSEp, [lse_at.v], source_etype=F32), align=4)
            inv = b.select(b.fcmp_ordered(">", l_fin, f32(0.0)), b.fdiv(f32(1.0), l_fin), f32(0.0))
            with kb.if_then(qrow.lt(len_q), "st"):
                run = plan.store_run
                for dt in range(tiles_o):
                    acc = final[2 * nrows + dt]
                    for i0 in range(0, len(grp), run):
                        els = [to_bits(b.fmul(b.extract_element(acc, c32(r)), inv)) for r in grp[i0:i0 + run]]
                        at = q_base + qrow * q_stride + (dt * tile + dmap(ln, grp[i0])[0])
                        if run == 1:
                            b.store(els[0], b.gep(Op, [at.v], source_etype=I16), align=2)
                        else:
                            b.store(vec(run, els, I16), b.gep(Op, [at.v], source_etype=I16), align=2 * run)
        b.ret_void()
        return kb.lowered("attention", {"threads": g.threads, "block_m": g.block_m, "block_n": BN, "instr": ins.key,
                                        "k_run": a_k_run, "v_run": a_v_run, "softmax": "registers"})

    def natural_lse(m_fin: ir.Value, l_fin: ir.Value) -> ir.Value:
        """The natural log-sum-exp of a row, (m + log2 l) ln 2, -inf if it saw no key.
        ln l from its bits (NVPTX has no f32 log2 libcall): l = 2^e m, m in [1, 2), l >= 1 where seen;
        ln m = 2 atanh(t), t = (m - 1) / (m + 1) in [0, 1/3]: the series to t^11 (error < 2e-7)"""
        seen = b.fcmp_ordered(">", l_fin, f32(0.0))
        lbits = b.bitcast(l_fin, I32)
        e = b.sitofp(b.sub(b.lshr(lbits, c32(23)), c32(127)), F32)
        mant = b.bitcast(b.or_(b.and_(lbits, c32(0x7FFFFF)), c32(0x3F800000)), F32)
        t = b.fdiv(b.fsub(mant, f32(1.0)), b.fadd(mant, f32(1.0)))
        t2 = b.fmul(t, t)
        poly = f32(1.0 / 11)
        for c in (1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1.0):
            poly = b.fadd(b.fmul(poly, t2), f32(c))
        ln_m = b.fmul(b.fmul(f32(2.0), t), poly)
        ln2 = f32(0.6931471805599453)
        return b.select(seen, b.fadd(b.fmul(b.fadd(m_fin, e), ln2), ln_m), neg_inf)

    if not spec.split_kv:  # the softmax in registers (below: split-KV's, through shared memory)
        plan = register_plan(ins, BN)
        if plan is None:
            raise AssertionError(f"{ins.key}: its D layout does not give P's fragments in registers")
        return registers(plan)

    def step(it, carried):
        m_old, l_old, accs = carried[0], carried[1], carried[2:]
        k0 = it * BN if kstart is None else kstart + it * BN
        stage(k0)
        kb.barrier()
        # S = Q K^T, instr.n keys at a time, K fragments from LDS, S into LDS
        for nt in range(BN // ins.n):
            acc = zero_acc
            for kc in range(D // ins.k):
                kf = lds_fragment(k_lds, ins.b_per_lane, nk, k_run,
                                  lambda n_, k_, nt=nt, kc=kc: (n_ + nt * ins.n) * LDK + (k_ + kc * ins.k))
                acc = call_matrix(kb, mfn, ins, qfrag[kc], kf, acc)
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
            keep = b.and_(b.icmp_signed("<", key, LK), q_mine.ok())
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
        # O = O * alpha + P V: P fragments (A) and V^T fragments (B) from LDS
        out = []
        pfrag = [lds_fragment(p_lds, ins.a_per_lane, ins.a_coord, p_run,
                              lambda r_, c_, kc=kc: (warp * ROWS + r_) * BN + (c_ + kc * ins.k))
                 for kc in range(BN // ins.k)]
        for dt in range(D // ins.n):
            acc = accs[dt]
            for r in range(ins.acc_per_lane):
                rr, _ = ins.d_coord(ln, r)
                a = b.load(b.gep(a_lds, [(warp * ROWS + rr).v], source_etype=F32), typ=F32, align=4)
                acc = b.insert_element(acc, b.fmul(b.extract_element(acc, c32(r)), a), c32(r))
            for kc in range(BN // ins.k):
                vf = lds_fragment(vt_lds, ins.b_per_lane, nk, v_run,
                                  lambda n_, k_, dt=dt, kc=kc: (n_ + dt * ins.n) * LDV + (k_ + kc * ins.k))
                acc = call_matrix(kb, mfn, ins, pfrag[kc], vf, acc)
            out.append(acc)
        kb.barrier()  # every warp has read K, V, S, P and alpha before the next step writes them
        return [m_new, l_new, *out]

    def reduce_splits(m_fin: ir.Value, l_fin: ir.Value, accs: list) -> tuple[ir.Value, ir.Value, Any]:
        """split-KV: this work-group's partial (O unnormalized, each row's m and l) to the workspace, the
        arrival on the tile's counter, and in the last of the tile's kv_splits work-groups to arrive the
        combination in the fixed order z = 0, 1, ..: M = max m_z, L = sum 2^(m_z - M) l_z, O = sum
        2^(m_z - M) O_z (the epilogue divides by L); every other work-group returns (module doc)."""
        apl, bm = ins.acc_per_lane, g.block_m
        q4, R = apl // 4, spec.workspace_words_per_group
        if apl % 4:
            raise AssertionError(f"split-KV stores 4 accumulators a lane at a time; {ins.key} keeps {apl}")
        at = lambda i: b.gep(W, [i.v], source_etype=F32)  # noqa: E731
        tid0 = b.icmp_unsigned("==", tid.v, c32(0))

        def part_at(grp: Sym, f: int, q: int) -> Sym:  # fragment f, quad q of this thread: register order
            return grp * R + ((f * q4 + q) * T + tid) * 4

        def ml_at(grp: Sym, row: Sym) -> Sym:  # (m, l, 0, 0) of one row
            return grp * R + bm * D + row * 4

        for f, acc in enumerate(accs):
            for q in range(q4):
                kb.store_cg_v4f32(at(part_at(pid, f, q)),
                                  vec(4, [b.extract_element(acc, c32(4 * q + e)) for e in range(4)], F32))
        with kb.if_then(writer, "ml"):
            kb.store_cg_v4f32(at(ml_at(pid, warp * ROWS + my_row)), vec(4, [m_fin, l_fin, f32(0.0), f32(0.0)], F32))
        kb.barrier()
        first = tile * ks
        counter = at(first * R + bm * (D + 4))  # in split 0's region, a word no partial uses
        flag = b.gep(s_lds, [c32(bm)], source_etype=F32)  # S's LDS is idle after the loop's last barrier
        kb.last_arriver(tid0, counter, flag, lambda: (ks - 1).v)
        with kb.if_then(tid0, "reset"):  # the workspace as the launch found it (launch.py "workspace")
            b.store(c32(0), counter, align=4)

        def stats(zz: Sym, row: Sym) -> tuple[ir.Value, ir.Value]:
            v = kb.load_cg_v4f32(at(ml_at(first + zz, row)))
            return b.extract_element(v, c32(0)), b.extract_element(v, c32(1))

        mine = warp * ROWS + my_row

        def row_max(it, c):
            m_z, _ = stats(it, mine)
            return [b.select(b.fcmp_ordered(">", m_z, c[0]), m_z, c[0])]

        m_all = kb.loop(ks, [neg_inf], row_max, "splitmax")[0]
        m_use = b.select(b.fcmp_ordered("==", m_all, neg_inf), f32(0.0), m_all)

        def row_sum(it, c):
            m_z, l_z = stats(it, mine)
            return [b.fadd(c[0], b.fmul(b.call(exp2, [b.fsub(m_z, m_use)]), l_z))]

        l_all = kb.loop(ks, [f32(0.0)], row_sum, "splitsum")[0]
        with kb.if_then(writer, "mw"):
            b.store(m_use, b.gep(s_lds, [mine.v], source_etype=F32), align=4)
        kb.barrier()
        rows = [warp * ROWS + ins.d_coord(ln, r)[0] for r in range(apl)]
        m_row = [b.load(b.gep(s_lds, [rw.v], source_etype=F32), typ=F32, align=4) for rw in rows]

        class _OnUse:  # fragment dt's sum over the splits, emitted where the epilogue reads it (one
            # fragment's loop at a time: 4-8 f32 carried, not the whole O row block)
            def __getitem__(self, f: int) -> ir.Value:
                def combine(it, c):
                    grp, acc = first + it, c[0]
                    w = [b.call(exp2, [b.fsub(stats(it, rw)[0], m_row[r])]) for r, rw in enumerate(rows)]
                    for q in range(q4):
                        part = kb.load_cg_v4f32(at(part_at(grp, f, q)))
                        for e in range(4):
                            r = 4 * q + e
                            x = b.fadd(b.extract_element(acc, c32(r)), b.fmul(w[r], b.extract_element(part, c32(e))))
                            acc = b.insert_element(acc, x, c32(r))
                    return [acc]

                return kb.loop(ks, [zero_acc], combine, "splitcombine")[0]

        return m_all, l_all, _OnUse()

    final = kb.loop(trips, [neg_inf, f32(0.0)] + [zero_acc] * (D // ins.n), step, "kv")
    m_fin, l_fin, accs = final[0], final[1], final[2:]
    if spec.split_kv:
        m_fin, l_fin, accs = reduce_splits(m_fin, l_fin, accs)
    if spec.layout:  # the natural log-sum-exp of each row when lse_rows > 0
        lse = natural_lse(m_fin, l_fin)
        want = kb.all_of(writer, q_mine.ok(), b.icmp_signed(">", LROWS, c32(0)))
        with kb.if_then(want, "lse"):
            # dense [batch, heads_q, seqlen_q]; varlen [heads_q, total_q] (flash-attn's softmax_lse layouts)
            if not spec.pack_gqa:
                lse_at: Sym = (h * (kb.sym(LROWS) // hq) + q_start + qi) if spec.varlen else bh * sq + qi
            else:
                lse_at = (q_mine.head * (kb.sym(LROWS) // hq) + q_start + qi) if spec.varlen else \
                    (bidx * hq + q_mine.head) * sq + qi
            b.store(lse, b.gep(LSEp, [lse_at.v], source_etype=F32), align=4)
    # 1 / l per row through LDS (the alpha slots), 0 where a row saw no key
    inv = b.select(b.fcmp_ordered(">", l_fin, f32(0.0)), b.fdiv(f32(1.0), l_fin), f32(0.0))
    with kb.if_then(writer, "lw"):
        b.store(inv, b.gep(a_lds, [(warp * ROWS + my_row).v], source_etype=F32), align=4)
    kb.barrier()
    for dt in range(D // ins.n):
        acc = accs[dt]
        for r in range(ins.acc_per_lane):
            rr, cc = ins.d_coord(ln, r)
            row = row0 + rr
            scale = b.load(b.gep(a_lds, [(warp * ROWS + rr).v], source_etype=F32), typ=F32, align=4)
            v = to_bits(b.fmul(b.extract_element(acc, c32(r)), scale))
            q = QRow(row)
            with kb.if_then(q.ok(), "st"):
                idx = q.at() + (dt * ins.n + cc)
                b.store(v, b.gep(Op, [idx.v], source_etype=I16), align=2)
    b.ret_void()
    return kb.lowered("attention", {"threads": g.threads, "block_m": g.block_m, "block_n": BN, "instr": ins.key,
                                         "k_run": k_run, "v_run": v_run, "p_run": p_run})


__all__ = ["lower_attention"]
