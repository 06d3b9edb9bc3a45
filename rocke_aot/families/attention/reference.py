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
    visible_pairs(problem) -> the (query, key) pairs the mask leaves, summed over heads: 4 *
        head_dim flops each (Q K^T and P V), what TFLOP/s counts (causal: about half)
    REFERENCE  the family's Reference (variants/families.py): the runner checks every output of a
        dense problem against ``sdpa`` within ``error_bound``

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

EXP2_REL = 2.0**-21  # the hardware exp2's relative error (runner/reference.py SOFTMAX_EXP_REL)
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


def _dense(problem: Any) -> None:
    if problem.kv_layout != "contiguous" or problem.varlen or problem.lse:
        raise SpecError("the runner's generic verify fills every pointer input with uniform values: it checks dense "
                        "problems (contiguous KV, equal lengths, no LSE output); paged, ragged and LSE problems are "
                        "checked by tests/test_attention.py and the gpu tests, which build block tables themselves")


def compute(problem: Any, inputs: Any):
    """The Reference's compute: the runner's flat float64 Q, K, V -> the flat O."""
    _dense(problem)
    o, _ = sdpa(problem, inputs["Q"], inputs["K"], inputs["V"])
    return o.ravel()


def error_bound(problem: Any, inputs: Any, reference: Any, out_dtype: str, in_dtype: str | None = None):
    """The largest error per output element of a correct kernel (module doc), flat like O."""
    import numpy as np

    p = problem
    u, up, uo = 2.0**-24, U[in_dtype or p.dtype], U[out_dtype]
    q = np.asarray(inputs["Q"], dtype=np.float64).reshape(p.batch, p.seqlen_q, p.heads_q, p.head_dim)
    k = np.asarray(inputs["K"], dtype=np.float64).reshape(p.batch, p.seqlen_k, p.heads_kv, p.head_dim)
    v = np.asarray(inputs["V"], dtype=np.float64).reshape(p.batch, p.seqlen_k, p.heads_kv, p.head_dim)
    o = np.asarray(reference, dtype=np.float64).reshape(q.shape)
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
    return out.ravel()


REFERENCE = Reference(output="O", compute=compute, flops=flops, bound=error_bound)

__all__ = ["REFERENCE", "compute", "error_bound", "flops", "gather_paged", "sdpa", "visible_pairs"]
