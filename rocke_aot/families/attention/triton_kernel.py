"""Flash-attention forward as a @triton.jit kernel, written here from the definition (FlashAttention-2's
online softmax, in the spirit of Triton's fused-attention tutorial): imports triton and nothing else.

    attention_fwd_kernel   one program per (BLOCK_M query rows, batch x query head; or, PACK_GQA, batch x
        KV head, the rows its query heads' positions: "pack" below): Q tile held in
        registers, K and V tiles of BLOCK_N keys streamed (Triton stages them through shared memory /
        LDS and pipelines num_stages deep), S = Q K^T on the matrix units in f32, the running max
        m and sum l per row (the scale, times log2(e), applied as one multiply-add before exp2),
        P rounded to the input dtype for P V, O = acc / l at the end
    layout  dense (VARLEN 0): Q, O [batch, seqlen_q, heads_q, HEAD_DIM], K, V [batch, seqlen_k,
        heads_kv, HEAD_DIM] (BSHD). VARLEN 1: the sequences packed (flash-attn's varlen layout):
        Q, O [total_q, heads_q, HEAD_DIM], sequence b's rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]
        (i32 [batch + 1] prefix sums), K, V likewise by cu_seqlens_k; seqlen_q / seqlen_k are the
        longest (the grid), every program past its sequence's end writes nothing.
        PAGED 1: K, V in blocks [num_blocks, block_size, heads_kv, HEAD_DIM]; sequence b's key t in
        block block_table[b, t // block_size] (i32 [batch, table_width]), row t % block_size; its key
        count cu_seqlens_k[b+1] - cu_seqlens_k[b] (VARLEN) or seqlen_k.
        Query head h reads KV head h // (heads_q // heads_kv) (MHA/GQA/MQA)
    pack    PACK_GQA 0: one program per (BLOCK_M query positions, batch x query head). PACK_GQA 1 (GQA
        decode): one program per (BLOCK_M rows, batch x KV head hk), the rows the (query position, query
        head) pairs of hk's group = heads_q // heads_kv heads, row r position r // group of head
        hk * group + r % group (position-major: at one query token the rows are the group's heads,
        consecutive in Q and O); K/V of hk streamed once for the whole group instead of once per query
        head, and the tile's rows group x seqlen_q instead of seqlen_q. The grid: ceil(seqlen_q x group /
        BLOCK_M) x batch * heads_kv. The mask, the loop bounds and the LSE index use each row's own
        position and head (the rows stay in position order)
    mask    CAUSAL (constexpr): key j visible to query i when j <= i + len_k - len_q (per sequence);
        window (a runtime int, 0 = none): also i + len_k - len_q - j < window; the loop visits only
        the key blocks the mask can leave, in two kinds: the blocks every row of the tile sees whole
        run without a mask (no per-score test, unmasked loads), the blocks on an edge of the mask
        (the diagonal band, the window's far edge, the keys' end) with it; a row that sees no key
        writes 0 (and LSE -inf). Causal tiles start heaviest first (the last query block's program
        runs first), so the grid's last wave is its lightest
    lse     lse_rows > 0 (a runtime int: heads_q * total_q, or 0 for none): also write the natural
        log-sum-exp of every row, f32: dense [batch, heads_q, seqlen_q], VARLEN [heads_q, total_q]
        (flash-attn's softmax_lse layouts)
    scale   scale_bits: the float32 bits of the softmax scale (an i32, bitcast here: the launch
        contract's scalars are integers); every int argument is do_not_specialize, so one
        compiled kernel serves every shape of its config
    attention(q, k, v, causal, window, scale)   torch tensors in, O out: the launch a GPU host makes
"""

import struct

import triton
import triton.language as tl


@triton.jit
def _kv_blocks(acc, l_i, m_i, q, k_ptr, v_ptr, block_table, b, table_width, block_size, k_start, kv_row, hk,
               len_k, diag, window, qk_scale, lo, hi, lo2, hi2, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, PAGED: tl.constexpr, MASKED: tl.constexpr):
    """Fold the key blocks [lo, hi), then [lo2, hi2) (block starts, multiples of BLOCK_N; one loop) into
    the running (acc, l, m). MASKED 0: every key of every block is visible to every row of the tile (the
    caller proved it), so the loads and the scores go unmasked; MASKED 1: the blocks on a mask's edge
    (the causal diagonal, the window's far edge, the end of the keys), each score tested."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # dense KV: a block's keys are one strided run, so its addresses are one 64-bit base (a scalar) plus
    # 32-bit offsets inside the block that no iteration changes (less address arithmetic per load)
    k_in = offs_n[None, :] * kv_row + offs_d[:, None]  # K as [HEAD_DIM, BLOCK_N]
    v_in = offs_n[:, None] * kv_row + offs_d[None, :]  # V as [BLOCK_N, HEAD_DIM]
    first = tl.maximum(hi - lo, 0) // BLOCK_N  # blocks in the first range (lo, hi multiples of BLOCK_N)
    blocks = first
    if MASKED:
        blocks += (tl.maximum(hi2 - lo2, 0) + BLOCK_N - 1) // BLOCK_N
    for i in range(0, blocks):
        if MASKED:
            start_n = tl.where(i < first, lo + i * BLOCK_N, lo2 + (i - first) * BLOCK_N)
        else:
            start_n = lo + i * BLOCK_N
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + offs_n
        col_ok = cols < len_k
        if PAGED:
            if MASKED:
                blk = tl.load(block_table + b * table_width + cols // block_size, mask=col_ok, other=0)
            else:
                blk = tl.load(block_table + b * table_width + cols // block_size)
            k_rows = (blk.to(tl.int64) * block_size + cols % block_size) * kv_row + hk * HEAD_DIM
            k_at = k_ptr + k_rows[None, :] + offs_d[:, None]
            v_at = v_ptr + k_rows[:, None] + offs_d[None, :]
        else:
            base = (k_start + start_n).to(tl.int64) * kv_row + hk * HEAD_DIM
            k_at = k_ptr + base + k_in
            v_at = v_ptr + base + v_in
        if MASKED:
            k = tl.load(k_at, mask=col_ok[None, :], other=0.0)
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= diag[:, None])
            keep = keep & ((window <= 0) | (diag[:, None] - cols[None, :] < window))
            s = tl.where(keep, tl.dot(q, k) * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet
            p = tl.math.exp2(s - m_use[:, None])
            v = tl.load(v_at, mask=col_ok[:, None], other=0.0)
        else:
            k = tl.load(k_at)
            qk = tl.dot(q, k)
            # the scale is positive: the row max of the scaled scores is the scaled row max, and
            # qk * scale - m is one fused multiply-add per score
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            m_use = m_new  # finite: every row saw a key of this block
            p = tl.math.exp2(qk * qk_scale - m_use[:, None])
            v = tl.load(v_at)
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "window", "scale_bits", "lse_rows",
                               "block_size", "table_width"])
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_seqlens_q, cu_seqlens_k, block_table,
                         seqlen_q, seqlen_k, heads_q, heads_kv, window, scale_bits, lse_rows, block_size,
                         table_width, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, VARLEN: tl.constexpr, PAGED: tl.constexpr, PACK_GQA: tl.constexpr):
    if CAUSAL:
        # the heaviest query blocks (the most keys under the mask) start first: the last wave is light
        start_m = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        start_m = tl.program_id(0)
    bh = tl.program_id(1)
    if PACK_GQA:
        # one program per (sequence, KV head): its rows are the group's (query position, query head) pairs
        group = heads_q // heads_kv
        b = bh // heads_kv
        hk = bh % heads_kv
    else:
        b = bh // heads_q
        h = bh % heads_q
        hk = h // (heads_q // heads_kv)
    if VARLEN:
        q_start = tl.load(cu_seqlens_q + b)
        len_q = tl.load(cu_seqlens_q + b + 1) - q_start
        k_start = tl.load(cu_seqlens_k + b)
        len_k = tl.load(cu_seqlens_k + b + 1) - k_start
    else:
        q_start = b * seqlen_q
        len_q = seqlen_q
        k_start = b * seqlen_k
        len_k = seqlen_k
    # log2(e) folded into the scale: the softmax runs on exp2
    qk_scale = scale_bits.to(tl.float32, bitcast=True) * 1.4426950408889634
    q_row = heads_q * HEAD_DIM  # elements between two positions of a sequence
    kv_row = heads_kv * HEAD_DIM

    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    if PACK_GQA:
        # row r: query position r // group of query head hk * group + r % group (position-major: at one
        # query position the rows are the group's heads, consecutive in Q and O)
        n_rows = len_q * group
        offs_q = offs_m // group
        offs_h = hk * group + offs_m % group
        t0 = m0 // group  # the tile's first and last rows' positions
        t_last = (tl.minimum(m0 + BLOCK_M, n_rows) - 1) // group
    else:
        n_rows = len_q
        offs_q = offs_m
        offs_h = h
        t0 = m0
        t_last = tl.minimum(m0 + BLOCK_M, len_q) - 1  # the tile's last row in its sequence
    row_ok = offs_m < n_rows
    q_rows = (q_start + offs_q).to(tl.int64) * q_row + offs_h * HEAD_DIM
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    shift = len_k - len_q
    diag = offs_q + shift  # the last key each row sees under the causal mask

    # The keys the tile's rows can see, [lo, hi): the causal mask ends them at the last row's diagonal,
    # a sliding window starts them at the block of the first row's first visible key. Inside it, the
    # blocks every row sees whole, [lo_u, hi_u): below the first row's diagonal, within the last row's
    # window, before the end of the keys. Those run unmasked; the edges [lo, lo_u) and [hi_u, hi) masked.
    # (Rows are in position order, packed or not: the first row's position is the least, the last's the
    # greatest.)
    hi = len_k
    hi_u = len_k
    if CAUSAL:
        hi = tl.minimum(len_k, tl.maximum(0, t_last + shift + 1))
        hi_u = tl.minimum(len_k, tl.maximum(0, t0 + shift + 1))
    hi_u = (hi_u // BLOCK_N) * BLOCK_N
    lo = tl.where(window > 0, (tl.maximum(0, t0 + shift - window + 1) // BLOCK_N) * BLOCK_N, 0)
    lo_u = tl.where(window > 0, ((tl.maximum(0, t_last + shift - window + 1) + BLOCK_N - 1) // BLOCK_N) * BLOCK_N, 0)
    none_whole = lo_u >= hi_u
    lo_u = tl.where(none_whole, lo, lo_u)
    hi_u = tl.where(none_whole, lo, hi_u)
    past_end = m0 >= n_rows  # a block past its sequence's end: no keys, writes nothing
    lo = tl.where(past_end, 0, lo)
    lo_u = tl.where(past_end, 0, lo_u)
    hi_u = tl.where(past_end, 0, hi_u)
    hi = tl.where(past_end, 0, hi)

    acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_ptr, v_ptr, block_table, b, table_width, block_size, k_start,
                               kv_row, hk, len_k, diag, window, qk_scale, lo_u, hi_u, 0, 0, HEAD_DIM, BLOCK_N,
                               CAUSAL, PAGED, 0)
    acc, l_i, m_i = _kv_blocks(acc, l_i, m_i, q, k_ptr, v_ptr, block_table, b, table_width, block_size, k_start,
                               kv_row, hk, len_k, diag, window, qk_scale, lo, lo_u, hi_u, hi, HEAD_DIM, BLOCK_N,
                               CAUSAL, PAGED, 1)
    if lse_rows > 0:
        # natural log: (m + log2 l) / log2(e); a row that saw no key: -inf
        lse = tl.where(l_i > 0.0, (m_i + tl.math.log2(tl.maximum(l_i, 1e-30))) * 0.6931471805599453,
                       float("-inf"))
        if VARLEN:
            lse_off = offs_h.to(tl.int64) * (lse_rows // heads_q) + q_start + offs_q
        else:
            lse_off = (b * heads_q + offs_h).to(tl.int64) * seqlen_q + offs_q
        tl.store(lse_ptr + lse_off, lse, mask=row_ok)
    l_i = tl.where(l_i == 0.0, 1.0, l_i)  # a row that saw no key: acc is 0, so O = 0
    out = acc / l_i[:, None]
    tl.store(o_ptr + q_rows[:, None] + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None])


def scale_bits(scale: float) -> int:
    """The float32 bits of ``scale`` as the kernel's i32 argument."""
    return struct.unpack("<i", struct.pack("<f", scale))[0]


def attention(q, k, v, causal=False, window=0, scale=None, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2,
              pack_gqa=False):
    """O for torch tensors q [B, Sq, Hq, D], k / v [B, Sk, Hkv, D] (contiguous, dense), as the family
    launches it (``pack_gqa``: one program per KV head, its group's query heads in the tile's rows)."""
    import torch

    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    none = torch.empty(1, device=q.device, dtype=torch.int32)  # the unused LSE, cu_seqlens and table
    sc = D ** -0.5 if scale is None else scale
    pack = Hq // Hkv if pack_gqa else 1
    grid = (triton.cdiv(Sq * pack, BLOCK_M), B * (Hq // pack), 1)
    attention_fwd_kernel[grid](q, k, v, o, none.float(), none, none, none, Sq, Sk, Hq, Hkv, window, scale_bits(sc),
                               0, 0, 0, HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=int(causal), VARLEN=0,
                               PAGED=0, PACK_GQA=int(pack_gqa), num_warps=num_warps, num_stages=num_stages)
    return o
