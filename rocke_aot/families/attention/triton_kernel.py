"""Flash-attention forward as a @triton.jit kernel, written here from the definition (FlashAttention-2's
online softmax, in the spirit of Triton's fused-attention tutorial): imports triton and nothing else.

    attention_fwd_kernel   one program per (BLOCK_M query rows, batch x query head): Q tile held in
        registers, K and V tiles of BLOCK_N keys streamed (Triton stages them through shared memory /
        LDS and pipelines num_stages deep), S = Q K^T on the matrix units in f32, the running max
        m and sum l per row, P rounded to the input dtype for P V, O = acc / l at the end
    layout  BSHD, contiguous: Q, O [batch, seqlen_q, heads_q, HEAD_DIM], K, V [batch, seqlen_k,
        heads_kv, HEAD_DIM]; query head h reads KV head h // (heads_q // heads_kv) (MHA/GQA/MQA)
    mask    CAUSAL (constexpr): key j visible to query i when j <= i + seqlen_k - seqlen_q; window
        (a runtime int, 0 = none): also i + seqlen_k - seqlen_q - j < window; the loop visits only
        the key blocks the mask can leave; a row that sees no key writes 0
    scale   scale_bits: the float32 bits of the softmax scale (an i32, bitcast here: the launch
        contract's scalars are integers); every int argument is do_not_specialize, so one
        compiled kernel serves every shape of its config
    attention(q, k, v, causal, window, scale)   torch tensors in, O out: the launch a GPU host makes
"""

import struct

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "window", "scale_bits"])
def attention_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seqlen_q, seqlen_k, heads_q, heads_kv, window, scale_bits,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // heads_q
    h = bh % heads_q
    hk = h // (heads_q // heads_kv)
    # log2(e) folded into the scale: the softmax runs on exp2
    qk_scale = scale_bits.to(tl.float32, bitcast=True) * 1.4426950408889634
    q_row = heads_q * HEAD_DIM  # elements between two positions of a sequence
    kv_row = heads_kv * HEAD_DIM
    q_base = q_ptr + b.to(tl.int64) * seqlen_q * q_row + h * HEAD_DIM
    o_base = o_ptr + b.to(tl.int64) * seqlen_q * q_row + h * HEAD_DIM
    k_base = k_ptr + b.to(tl.int64) * seqlen_k * kv_row + hk * HEAD_DIM
    v_base = v_ptr + b.to(tl.int64) * seqlen_k * kv_row + hk * HEAD_DIM

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q
    q = tl.load(q_base + offs_m[:, None] * q_row + offs_d[None, :], mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    shift = seqlen_k - seqlen_q
    diag = offs_m + shift  # the last key each row sees under the causal mask

    hi = seqlen_k
    if CAUSAL:
        hi = tl.minimum(seqlen_k, tl.maximum(0, (start_m + 1) * BLOCK_M + shift))
    # a sliding window starts at the block of the first row's first visible key
    lo_w = tl.maximum(0, start_m * BLOCK_M + shift - window + 1)
    lo = tl.where(window > 0, (lo_w // BLOCK_N) * BLOCK_N, 0)
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < seqlen_k
        k = tl.load(k_base + cols[None, :] * kv_row + offs_d[:, None], mask=col_ok[None, :], other=0.0)
        s = tl.dot(q, k) * qk_scale
        keep = col_ok[None, :] & row_ok[:, None]
        if CAUSAL:
            keep = keep & (cols[None, :] <= diag[:, None])
        keep = keep & ((window <= 0) | (diag[:, None] - cols[None, :] < window))
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with nothing seen yet
        p = tl.math.exp2(s - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(v_base + cols[:, None] * kv_row + offs_d[None, :], mask=col_ok[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    l_i = tl.where(l_i == 0.0, 1.0, l_i)  # a row that saw no key: acc is 0, so O = 0
    out = acc / l_i[:, None]
    tl.store(o_base + offs_m[:, None] * q_row + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None])


def scale_bits(scale: float) -> int:
    """The float32 bits of ``scale`` as the kernel's i32 argument."""
    return struct.unpack("<i", struct.pack("<f", scale))[0]


def attention(q, k, v, causal=False, window=0, scale=None, BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2):
    """O for torch tensors q [B, Sq, Hq, D], k / v [B, Sk, Hkv, D] (contiguous), as the family launches it."""
    import torch

    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    sc = D ** -0.5 if scale is None else scale
    grid = (triton.cdiv(Sq, BLOCK_M), B * Hq, 1)
    attention_fwd_kernel[grid](q, k, v, o, Sq, Sk, Hq, Hkv, window, scale_bits(sc), HEAD_DIM=D, BLOCK_M=BLOCK_M,
                               BLOCK_N=BLOCK_N, CAUSAL=int(causal), num_warps=num_warps, num_stages=num_stages)
    return o
