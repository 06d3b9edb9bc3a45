"""SDPA forward from its definition, in float64: O = softmax(Q K^T * scale + mask) V (and the LSE).

    sdpa(problem, q, k, v) -> (o, lse)
        q [batch, seqlen_q, heads_q, head_dim], k / v [batch, seqlen_k, heads_kv, head_dim]
        (float64 arrays); per sequence b, query head h, KV head h // group, with the problem's
        lengths (seqlens_q / seqlens_k: rows past a sequence's length are neither read nor written):
            S[i, j] = scale * sum_d q[b, i, h, d] k[b, j, h_kv, d]
            S[i, j] = -inf where the mask hides key j from query i (problem.py: causal aligned at
                      the bottom right, sliding window of ``window`` keys)
            P = exp(S - max_j S) / sum_j exp(S - max_j S);  O[b, i, h] = sum_j P[i, j] v[b, j, h_kv]
            LSE[b, h, i] = log(sum_j exp(S[i, j]))
        a query that sees no key: O = 0, LSE = -inf
    gather_paged(blocks, block_table, lengths) -> the contiguous K (or V) a paged cache holds
    padded(problem, inputs) -> (q, k, v) as sdpa takes them, from the kernel's flat buffers in the
        problem's layout (problem.py: dense BSHD, packed varlen by cu_seqlens, paged by a block table);
        packed(problem, o) / packed_lse(problem, lse): sdpa's outputs in the kernel's layout
    index_input(problem, name, dtype, count, rng) -> the i32 index arrays a launch reads (cu_seqlens_q,
        cu_seqlens_k: the prefix sums of the lengths; block_table: distinct pool blocks in shuffled
        order), the Reference's ``inputs`` (the runner fills every other input with uniform values)
    visible_pairs(problem) -> the (query, key) pairs the mask leaves, summed over heads: 4 *
        head_dim flops each (Q K^T and P V), what TFLOP/s counts (causal: about half)
    REFERENCE  the family's Reference (variants/families.py): the runner checks every O of a problem,
        dense, varlen or paged, against ``sdpa`` within ``error_bound`` (the LSE output is checked by
        the tests: compute_lse)

numpy is imported inside the functions: a service host loads this family half without it.

Error bound of a correct flash-attention kernel (f32 S and accumulators, P rounded to the input
dtype before P V, online softmax; u = 2^-24, u_p = the unit roundoff of the input dtype, u_out
of the output's), per output row of length L = the keys it sees:
    each exponent s_j - m: the f32 dot over head_dim products (Higham's gamma_D * scale *
        sum_d |q_d k_d|), the scale's two roundings (2u |s_j|), the subtraction (u |s_j - m|),
        the hardware exp2 (2^-21 relative, as the softmax reference), counted twice (a term
        and the running max)
    P to the input dtype (u_p), the sums of P and of P V in f32 (gamma_L each), one rescale of
        the accumulators per key block (at most L of them: 2^-21 + 2u each)
    E = all of the above, relative;  |o - O| <= 2 * (E * (sum_j P_j |v_j| + |O|)) + u_out |O| + 2^-24
(the factor 2 covers the second-order terms; tests/test_attention.py checks that a kernel whose
scale is off by 1% (f16; 10% in bf16) fails it and that the reference's own f16 rounding passes it).
"""

from __future__ import annotations

from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.variants.families import Reference

EXP2_REL = 2.0**-21  # the hardware exp2's relative error (families/triton_softmax/reference.py SOFTMAX_EXP_REL)
U = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}


def _mask(problem: Any, lq: int, lk: int):
    import numpy as np

    i = np.arange(lq)[:, None] + (lk - lq)  # the diagonal: the key aligned with query i
    j = np.arange(lk)[None, :]
    keep = np.ones((lq, lk), dtype=bool)
    if problem.causal:
        keep &= j <= i
    if problem.window:
        keep &= i - j < problem.window
    return keep


def sdpa(problem: Any, q, k, v, scale: float | None = None):
    """(O [batch, seqlen_q, heads_q, head_dim], LSE [batch, heads_q, seqlen_q]) in float64."""
    import numpy as np

    p = problem
    scale = p.softmax_scale if scale is None else scale
    q = np.asarray(q, dtype=np.float64).reshape(p.batch, p.seqlen_q, p.heads_q, p.head_dim)
    k = np.asarray(k, dtype=np.float64).reshape(p.batch, p.seqlen_k, p.heads_kv, p.head_dim)
    v = np.asarray(v, dtype=np.float64).reshape(p.batch, p.seqlen_k, p.heads_kv, p.head_dim)
    o = np.zeros_like(q)
    lse = np.full((p.batch, p.heads_q, p.seqlen_q), -np.inf)
    lens_q, lens_k = p.lengths()
    for b in range(p.batch):
        lq, lk = lens_q[b], lens_k[b]
        if lq == 0:
            continue
        keep = _mask(p, lq, lk)
        for h in range(p.heads_q):
            hk = h // p.group
            s = scale * (q[b, :lq, h, :] @ k[b, :lk, hk, :].T)
            s = np.where(keep, s, -np.inf)
            m = s.max(axis=1, initial=-np.inf)
            seen = np.isfinite(m)
            e = np.exp(s - np.where(seen, m, 0.0)[:, None])
            tot = e.sum(axis=1)
            probs = e / np.where(seen, tot, 1.0)[:, None]
            o[b, :lq, h, :] = probs @ v[b, :lk, hk, :]
            lse[b, h, :lq] = np.where(seen, m + np.log(np.where(seen, tot, 1.0)), -np.inf)
    return o, lse


def gather_paged(blocks, block_table, lengths, block_size: int):
    """The contiguous [batch, max(lengths), heads, dim] tensor a paged cache holds: sequence b's
    token t lives in block block_table[b, t // block_size], row t % block_size."""
    import numpy as np

    blocks = np.asarray(blocks)
    table = np.asarray(block_table)
    longest = max(lengths) if len(lengths) else 0
    out = np.zeros((len(lengths), longest) + blocks.shape[2:], dtype=blocks.dtype)
    for b, n in enumerate(lengths):
        t = np.arange(n)
        out[b, :n] = blocks[table[b, t // block_size], t % block_size]
    return out


def cu_seqlens(lengths) -> Any:
    """The prefix sums [0, l0, l0 + l1, ...] (i32), what a varlen kernel reads."""
    import numpy as np

    return np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int32)


def block_table(problem: Any, rng: Any) -> Any:
    """A block table [batch, table_width] (i32) giving every sequence's blocks distinct blocks of the pool
    in shuffled order (entries past a sequence's blocks: 0, never read)."""
    import numpy as np

    p = problem
    table = np.zeros((p.batch, p.table_width), dtype=np.int32)
    if not p.paged:
        return table
    perm = rng.permutation(p.num_blocks)
    n = 0
    for b, lk in enumerate(p.lengths()[1]):
        nb = -(-lk // p.block_size)
        table[b, :nb] = perm[n:n + nb]
        n += nb
    return table


def index_input(problem: Any, name: str, dtype: str, count: int, rng: Any):
    """The Reference's ``inputs``: the i32 index arrays of the kernel's launch (cu_seqlens_q / _k, the
    block table) as (storage, float64 values); None for every other argument (uniform values)."""
    import numpy as np

    p = problem
    if name == "cu_seqlens_q":
        arr = cu_seqlens(p.lengths()[0])
    elif name == "cu_seqlens_k":
        arr = cu_seqlens(p.lengths()[1])
    elif name == "block_table":
        arr = block_table(p, rng).ravel()
    else:
        return None
    arr = arr[:count] if count else arr[:0]
    if arr.size != count or dtype != "i32":
        raise SpecError(f"attention argument {name}: the launch holds {count} {dtype}, the problem {arr.size} i32")
    return arr.astype(np.int32), arr.astype(np.float64)


def padded(problem: Any, inputs: Any):
    """(q, k, v) as [batch, seqlen, heads, head_dim] float64 (rows past a sequence's length 0) from the
    kernel's flat buffers by launch name: Q, K, V and, as the problem's layout needs them,
    cu_seqlens_q / cu_seqlens_k (packed sequences) and block_table (paged KV)."""
    import numpy as np

    p = problem
    lens_q, lens_k = p.lengths()
    q: Any = np.asarray(inputs["Q"], dtype=np.float64).reshape(p.total_q, p.heads_q, p.head_dim)
    k: Any = np.asarray(inputs["K"], dtype=np.float64).reshape(p.kv_rows, p.heads_kv, p.head_dim)
    v: Any = np.asarray(inputs["V"], dtype=np.float64).reshape(p.kv_rows, p.heads_kv, p.head_dim)
    if not p.varlen:
        q = q.reshape(p.batch, p.seqlen_q, p.heads_q, p.head_dim)
    else:
        q = _unpack(q, np.asarray(inputs["cu_seqlens_q"]).astype(np.int64), lens_q, p.seqlen_q)
    if p.paged:
        table = np.asarray(inputs["block_table"]).astype(np.int64).reshape(p.batch, p.table_width)
        blocks = (p.num_blocks, p.block_size, p.heads_kv, p.head_dim)
        k = _pad(gather_paged(k.reshape(blocks), table, lens_k, p.block_size), p.seqlen_k)
        v = _pad(gather_paged(v.reshape(blocks), table, lens_k, p.block_size), p.seqlen_k)
    elif not p.varlen:
        k = k.reshape(p.batch, p.seqlen_k, p.heads_kv, p.head_dim)
        v = v.reshape(p.batch, p.seqlen_k, p.heads_kv, p.head_dim)
    else:
        cu = np.asarray(inputs["cu_seqlens_k"]).astype(np.int64)
        k, v = _unpack(k, cu, lens_k, p.seqlen_k), _unpack(v, cu, lens_k, p.seqlen_k)
    return q, k, v


def _pad(x, longest: int):
    import numpy as np

    out = np.zeros((x.shape[0], longest) + x.shape[2:], dtype=x.dtype)
    out[:, :x.shape[1]] = x
    return out


def _unpack(x, cu, lengths, longest: int):
    import numpy as np

    out = np.zeros((len(lengths), longest) + x.shape[1:], dtype=x.dtype)
    for b, n in enumerate(lengths):
        out[b, :n] = x[cu[b]:cu[b] + n]
    return out


def packed(problem: Any, o):
    """O [batch, seqlen_q, heads_q, head_dim] in the kernel's layout: as is (dense) or packed
    [total_q, heads_q, head_dim] (variable lengths)."""
    import numpy as np

    p = problem
    if not p.varlen:
        return o
    return np.concatenate([o[b, :n] for b, n in enumerate(p.lengths()[0])] or [o[:0, 0]], axis=0)


def packed_lse(problem: Any, lse):
    """LSE [batch, heads_q, seqlen_q] in the kernel's layout: as is, or [heads_q, total_q] (varlen)."""
    import numpy as np

    p = problem
    if not p.varlen:
        return lse
    cols = [lse[b, :, :n] for b, n in enumerate(p.lengths()[0])]
    return np.concatenate(cols, axis=1) if cols else lse[0, :, :0]


def visible_pairs(problem: Any) -> int:
    """(query, key) pairs the mask leaves, over every sequence and query head."""
    total = 0
    lens_q, lens_k = problem.lengths()
    for lq, lk in zip(lens_q, lens_k):
        for i in range(lq):
            diag = i + lk - lq
            hi = min(lk, diag + 1) if problem.causal else lk
            lo = max(0, diag - problem.window + 1) if problem.window else 0
            total += max(0, hi - lo)
    return total * problem.heads_q


def flops(problem: Any) -> int:
    return 4 * problem.head_dim * visible_pairs(problem)


def compute(problem: Any, inputs: Any):
    """The Reference's compute: the kernel's flat float64 buffers -> O, flat, in the kernel's layout."""
    o, _ = sdpa(problem, *padded(problem, inputs))
    return packed(problem, o).ravel()


def compute_lse(problem: Any, inputs: Any):
    """The LSE the kernel writes (problem.lse), flat, in its layout."""
    _, lse = sdpa(problem, *padded(problem, inputs))
    return packed_lse(problem, lse).ravel()


def error_bound(problem: Any, inputs: Any, reference: Any, out_dtype: str, in_dtype: str | None = None):
    """The largest error per output element of a correct kernel (module doc), flat like O."""
    import numpy as np

    p = problem
    u, up, uo = 2.0**-24, U[in_dtype or p.dtype], U[out_dtype]
    q, k, v = padded(p, inputs)
    o = np.asarray(reference, dtype=np.float64).reshape(p.total_q, p.heads_q, p.head_dim)
    o = _unpack(o, cu_seqlens(p.lengths()[0]), p.lengths()[0], p.seqlen_q) if p.varlen else o.reshape(q.shape)
    scale = p.softmax_scale
    gd = p.head_dim * u / (1 - p.head_dim * u)
    out = np.zeros_like(o)
    lens_q, lens_k = p.lengths()
    for b in range(p.batch):
        lq, lk = lens_q[b], lens_k[b]
        if lq == 0:
            continue
        keep = _mask(p, lq, lk)
        gl = lk * u / (1 - lk * u)
        for h in range(p.heads_q):
            hk = h // p.group
            s = scale * (q[b, :lq, h, :] @ k[b, :lk, hk, :].T)
            sa = scale * (np.abs(q[b, :lq, h, :]) @ np.abs(k[b, :lk, hk, :]).T)
            s = np.where(keep, s, -np.inf)
            m = s.max(axis=1, initial=-np.inf)
            seen = np.isfinite(m)
            mm = np.where(seen, m, 0.0)[:, None]
            e = np.where(keep, np.exp(s - mm), 0.0)
            probs = e / np.where(seen, e.sum(axis=1), 1.0)[:, None]
            per = np.where(keep, gd * sa + 2 * u * np.abs(np.where(keep, s, 0.0))
                           + u * np.abs(np.where(keep, s, 0.0) - mm), 0.0)
            expo = 2 * (per.max(axis=1, initial=0.0) + EXP2_REL)
            rel = expo + up + 2 * gl + lk * (EXP2_REL + 2 * u)
            pv = probs @ np.abs(v[b, :lk, hk, :])
            oo = np.abs(o[b, :lq, h, :])
            out[b, :lq, h, :] = 2 * rel[:, None] * (pv + oo) + uo * oo + 2.0**-24
    return packed(p, out).ravel()


REFERENCE = Reference(output="O", compute=compute, flops=flops, bound=error_bound, inputs=index_input)

__all__ = ["REFERENCE", "block_table", "compute", "compute_lse", "cu_seqlens", "error_bound", "flops",
           "gather_paged", "index_input", "packed", "packed_lse", "padded", "sdpa", "visible_pairs"]
