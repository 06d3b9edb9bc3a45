"""triton_attention's kernel (rocke_aot/families/attention/triton_kernel.py) run on this CPU by Triton's own
interpreter (TRITON_INTERPRET=1, the llvm24 lane's Triton 3.9: the same @triton.jit source the builds
compile), launched with the arguments the family's launch contract binds for the problem (its scalars,
its buffer sizes) and the index arrays its Reference generates (cu_seqlens, a shuffled block table),
against the float64 reference (rocke_aot/families/attention/reference.py: softmax(Q K^T * scale + mask) V
from the definition, the paged cache gathered by numpy) within the family's error bound; the LSE output
against the reference's log-sum-exp.

Covered: dense (GQA, MQA, MHA), packed variable lengths with empty sequences, sequences shorter than a
block and lengths no multiple of the block, causal rows that see no key (O 0, LSE -inf), sliding window,
paged KV (block sizes 16/32/64, shuffled tables, a pool with spare blocks) with equal and variable
lengths, decode (one query token), the LSE output in the dense and the packed layout; f16 only (the
interpreter's tl.dot multiplies bf16 operands as their raw uint16 storage: bf16 is checked on the GPU,
tests/test_attention_gpu.py).

Every case runs in one subprocess (``python tests/test_attention_triton.py worker IN OUT``: this
interpreter with the lane's site-packages appended, importing Triton once).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

WORKER_ARGS = 4  # argv: script, "worker", in.npz, out.npz


def _worker(inp: str, out: str) -> None:
    """Run every case of ``inp`` under Triton's interpreter; the outputs into ``out``."""
    os.environ["TRITON_INTERPRET"] = "1"
    import triton.language as tl
    from triton.runtime import interpreter

    from rocke_aot.families.attention.triton_kernel import attention_fwd_kernel

    # pointers are host addresses of numpy arrays (no torch here): nothing to copy to or from a device
    interpreter.GridExecutor._init_args_hst = lambda self, args, kwargs: (list(args), dict(kwargs))
    interpreter.GridExecutor._restore_args_dev = lambda self, *a: None
    types = {"f16": tl.float16, "bf16": tl.bfloat16, "f32": tl.float32, "i32": tl.int32}

    class Ptr:
        def __init__(self, arr, dtype):
            self.arr, self.dtype = arr, types[dtype]

        def data_ptr(self):
            return self.arr.ctypes.data

    data = dict(np.load(inp))
    cases = json.loads(str(data.pop("cases")))
    results = {}
    for i, case in enumerate(cases):
        args = []
        for name, kind, dtype in case["args"]:
            if kind == "pointer":
                arr = data[f"{i}:{name}"]
                if arr.size == 0:  # the interpreter needs a real address, as a device allocation has
                    arr = np.zeros(1, dtype=arr.dtype)
                data[f"{i}:{name}"] = arr
                args.append(Ptr(arr, dtype))
            else:
                args.append(case["scalars"][name])
        attention_fwd_kernel[tuple(case["grid"])](*args, **case["constexprs"])
        for name in ("O", "LSE"):
            results[f"{i}:{name}"] = data[f"{i}:{name}"]
    np.savez(out, **results)


if __name__ == "__main__" and len(sys.argv) == WORKER_ARGS and sys.argv[1] == "worker":
    _worker(sys.argv[2], sys.argv[3])
    sys.exit(0)

import pytest  # noqa: E402

from rocke_aot.families.attention.problem import AttentionProblem  # noqa: E402
from rocke_aot.families.attention.reference import (  # noqa: E402
    REFERENCE,
    compute,
    compute_lse,
    error_bound,
    padded,
    sdpa,
)
from rocke_aot.runner import reference as runner_ref  # noqa: E402
from rocke_aot.targets import Target  # noqa: E402
from rocke_aot.variants.families import get_family  # noqa: E402

FAM = "triton_attention"

# (problem, the table's layout it needs). Lengths are no multiple of the blocks (64 / 128 rows here).
CASES = [
    dict(batch=2, seqlen_q=70, seqlen_k=130, heads_q=4, heads_kv=2, head_dim=64, causal=True, lse=True),
    dict(batch=1, seqlen_q=100, seqlen_k=100, heads_q=3, heads_kv=1, head_dim=64, window=37),
    dict(batch=1, seqlen_q=90, seqlen_k=33, heads_q=2, heads_kv=2, head_dim=128, causal=True, lse=True),
    dict(batch=4, seqlen_q=70, seqlen_k=130, heads_q=4, heads_kv=2, head_dim=64, causal=True, lse=True,
         seqlens_q=[70, 0, 1, 33], seqlens_k=[130, 5, 64, 33]),
    dict(batch=2, seqlen_q=40, seqlen_k=17, heads_q=2, heads_kv=1, head_dim=64, causal=True, lse=True,
         seqlens_q=[40, 3], seqlens_k=[17, 0]),
    dict(batch=3, seqlen_q=1, seqlen_k=150, heads_q=8, heads_kv=2, head_dim=64, causal=True, lse=True,
         kv_layout="paged", block_size=16),
    dict(batch=3, seqlen_q=64, seqlen_k=77, heads_q=4, heads_kv=4, head_dim=64, causal=True, lse=True,
         kv_layout="paged", block_size=32, seqlens_q=[5, 0, 64], seqlens_k=[77, 20, 64], num_blocks=12),
    dict(batch=2, seqlen_q=3, seqlen_k=200, heads_q=2, heads_kv=1, head_dim=128, window=50,
         kv_layout="paged", block_size=64, seqlens_q=[3, 1], seqlens_k=[200, 0]),
    # longer than a few blocks: tiles with key blocks every row sees whole (the unmasked loop) beside
    # blocks on the mask's edges (the diagonal band, the window's far edge, the keys' end)
    dict(batch=1, seqlen_q=300, seqlen_k=300, heads_q=2, heads_kv=1, head_dim=64, causal=True, lse=True),
    dict(batch=1, seqlen_q=260, seqlen_k=400, heads_q=2, heads_kv=2, head_dim=64, window=150, lse=True),
    dict(batch=1, seqlen_q=300, seqlen_k=300, heads_q=1, heads_kv=1, head_dim=64, causal=True, window=250),
    dict(batch=2, seqlen_q=300, seqlen_k=330, heads_q=2, heads_kv=1, head_dim=64, causal=True,
         seqlens_q=[300, 150], seqlens_k=[330, 200]),
    dict(batch=2, seqlen_q=130, seqlen_k=260, heads_q=4, heads_kv=2, head_dim=64, causal=True,
         kv_layout="paged", block_size=16),
]
WHOLE_AND_EDGE = range(8, 13)  # the cases above whose tiles have both kinds of key block


def _spec(p: AttentionProblem):
    """The sm_90 table's spec for the problem (the first the family's model accepts)."""
    from rocke_aot.variants import table

    for spec in table.enumerate_specs(FAM, "sm_90", "llvm22"):
        if get_family(FAM).model.accepts(spec, p) is None:
            return spec
    raise AssertionError(f"no triton_attention spec accepts {p}")


def _lane_site_packages() -> Path:
    from rocke_aot.aot.toolchains.triton24 import library_in_venv
    from rocke_aot.paths import home

    lib = library_in_venv(home() / "lanes" / "llvm24")
    assert lib is not None, "the llvm24 lane (triton 3.9) is not installed: bash scripts/setup.sh --only lanes"
    return lib.parents[4]  # site-packages/triton/backends/amd/lib/<library>


def _launch_all(pairs, tmp):
    """Launch every (problem, spec, seed) under the interpreter: (problems, their inputs by launch name,
    the outputs (O, LSE) per pair)."""
    fam = get_family(FAM)
    arrays, cases, problems, values = {}, [], [], []
    for i, (p, spec, seed) in enumerate(pairs):
        plan = fam.launch(spec, p, "sm_90")
        rng = np.random.default_rng(seed)
        vals, args = {}, []
        for a in plan.args:
            if a.name in ("global_scratch", "profile_scratch"):
                continue
            if a.kind == "scalar":
                args.append((a.name, "scalar", a.dtype))
                continue
            args.append((a.name, "pointer", a.dtype))
            got = REFERENCE.inputs(p, a.name, a.dtype, a.value, rng)
            if a.name in ("O", "LSE"):  # outputs: poisoned (NaN), an unwritten element fails
                bits = np.full(a.value, 0xFFFF if a.name == "O" else np.nan,
                               dtype=runner_ref.storage_dtype(a.dtype))
            elif got is None:
                bits, vals[a.name] = runner_ref.inputs(a.dtype, a.value, rng)
            else:
                bits, vals[a.name] = got
            arrays[f"{i}:{a.name}"] = np.ascontiguousarray(bits)
        cases.append({"args": args, "grid": list(plan.grid), "constexprs": spec.config,
                      "scalars": {a.name: a.value for a in plan.args if a.kind == "scalar"}})
        problems.append(p)
        values.append(vals)
    inp, out = tmp / "in.npz", tmp / "out.npz"
    np.savez(inp, cases=np.array(json.dumps(cases)), **arrays)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    code = (f"import sys; sys.path.append({str(_lane_site_packages())!r}); sys.argv = {['x', 'worker', str(inp), str(out)]!r}; "
            f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    res = dict(np.load(out))
    return problems, values, [(res[f"{i}:O"], res[f"{i}:LSE"]) for i in range(len(pairs))]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every case launched by the interpreter: (problems, their inputs by launch name, the outputs)."""
    pairs = []
    for i, kw in enumerate(CASES):
        p = AttentionProblem(**kw)
        pairs.append((p, _spec(p), 100 + i))
    return _launch_all(pairs, tmp_path_factory.mktemp("attn_interp"))


# head dim 128, several tiles long (causal; a window not causal; both): each run by every dense tile of
# the sm_90 and the gfx942 tables (128 x 128 on 8 warps, the 16-row decode tile, AMD's 64 x 32 ...)
TILE_CASES = [
    dict(batch=1, seqlen_q=300, seqlen_k=300, heads_q=2, heads_kv=1, head_dim=128, causal=True, lse=True),
    dict(batch=1, seqlen_q=260, seqlen_k=400, heads_q=1, heads_kv=1, head_dim=128, window=150),
    dict(batch=1, seqlen_q=3, seqlen_k=290, heads_q=2, heads_kv=1, head_dim=128, causal=True, window=200),
]


def _table_specs(p: AttentionProblem, packed: bool | None = None, by=("BLOCK_M", "BLOCK_N")):
    """The specs of the sm_90 and gfx942 tables that accept ``p`` (only packed or unpacked ones where
    ``packed`` says), one per distinct value of the ``by`` fields."""
    from rocke_aot.variants import table

    fam, out = get_family(FAM), {}
    for arch, lane in (("sm_90", "llvm22"), ("gfx942", "llvm24")):
        for spec in table.enumerate_specs(FAM, arch, lane):
            if (packed is None or bool(spec.PACK_GQA) == packed) and fam.model.accepts(spec, p) is None:
                out.setdefault(tuple(getattr(spec, f) for f in by), spec)
    return list(out.values())


@pytest.fixture(scope="module")
def ran_tiles(tmp_path_factory):
    pairs = [(p, spec, 200 + i) for i, kw in enumerate(TILE_CASES)
             for p in [AttentionProblem(**kw)] for spec in _table_specs(p)]
    return pairs, _launch_all(pairs, tmp_path_factory.mktemp("attn_tiles"))


def test_every_dense_tile_matches_the_reference_on_the_interpreter(ran_tiles):
    pairs, (problems, values, outs) = ran_tiles
    tiles = {(spec.BLOCK_M, spec.BLOCK_N) for _, spec, _ in pairs}
    assert {(128, 128), (16, 128), (64, 64), (128, 64), (64, 32)} <= tiles, tiles
    for (p, spec, _), vals, (o_bits, lse_got) in zip(pairs, values, outs):
        _check(p, vals, o_bits, lse_got, f"{spec.config} {p}")


# GQA-packed (PACK_GQA 1): a KV head's group of query heads x the query positions in one tile's rows. Decode
# and a few speculative tokens, every layout: dense (group 4 causal; MQA 16/1 filling the 16-row tile;
# 12/3 x 3 tokens causal with a window), packed varlen (ragged, an empty sequence, a sequence with no key,
# causal rows that see no key: more queries than keys), paged (equal lengths, block 16; variable lengths,
# block 32 / 64, a pool with spare blocks, a window), each with the LSE output; head dims 64, 128, 256.
PACK_CASES = [
    dict(batch=3, seqlen_q=1, seqlen_k=150, heads_q=8, heads_kv=2, head_dim=64, causal=True, lse=True),
    dict(batch=2, seqlen_q=1, seqlen_k=70, heads_q=16, heads_kv=1, head_dim=64, lse=True),
    dict(batch=2, seqlen_q=3, seqlen_k=200, heads_q=12, heads_kv=3, head_dim=128, causal=True, window=50, lse=True),
    dict(batch=4, seqlen_q=5, seqlen_k=130, heads_q=6, heads_kv=2, head_dim=64, causal=True, lse=True,
         seqlens_q=[5, 0, 1, 3], seqlens_k=[130, 5, 0, 2]),
    dict(batch=3, seqlen_q=1, seqlen_k=150, heads_q=16, heads_kv=2, head_dim=64, causal=True, lse=True,
         kv_layout="paged", block_size=16),
    dict(batch=3, seqlen_q=2, seqlen_k=77, heads_q=8, heads_kv=1, head_dim=256, causal=True, lse=True,
         kv_layout="paged", block_size=32, seqlens_q=[2, 1, 0], seqlens_k=[77, 0, 40], num_blocks=8),
    dict(batch=2, seqlen_q=4, seqlen_k=200, heads_q=8, heads_kv=2, head_dim=128, window=30, lse=True,
         kv_layout="paged", block_size=64, seqlens_q=[4, 1], seqlens_k=[200, 3]),
]


def _packed_specs(p: AttentionProblem):
    """The packed specs of the sm_90 and gfx942 tables that accept ``p``, one per distinct tile."""
    out = _table_specs(p, packed=True, by=("BLOCK_M", "BLOCK_N", "num_warps"))
    assert out, f"no packed spec accepts {p}"
    return out


@pytest.fixture(scope="module")
def ran_packed(tmp_path_factory):
    pairs = [(p, spec, 300 + i) for i, kw in enumerate(PACK_CASES)
             for p in [AttentionProblem(**kw)] for spec in _packed_specs(p)]
    return pairs, _launch_all(pairs, tmp_path_factory.mktemp("attn_packed"))


def _check(p: AttentionProblem, vals, o_bits, lse_got, what: str) -> None:
    got = runner_ref.decode(o_bits, p.dtype)
    want = compute(p, vals)
    lim = error_bound(p, vals, want, p.dtype)
    assert got.size == want.size == p.total_q * p.heads_q * p.head_dim
    assert np.isfinite(got).all(), f"{what}: unwritten or non-finite outputs"
    bad = np.abs(got - want) > lim
    assert not bad.any(), f"{what}: {int(bad.sum())} of {got.size} outside the bound, max {np.abs(got - want).max():.3g}"
    if p.lse:
        lse_want = compute_lse(p, vals)
        assert lse_got.size == lse_want.size == p.heads_q * p.total_q
        assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_want)), f"{what}: -inf rows differ"
        fin = np.isfinite(lse_want)
        assert np.isfinite(lse_got[fin]).all(), f"{what}: a finite LSE row came out non-finite"
        err = np.abs(lse_got[fin] - lse_want[fin])
        assert (err <= _lse_bound(p, vals, lse_want)[fin]).all(), f"{what}: LSE max err {err.max():.3g}"


def test_the_gqa_packed_kernel_matches_the_reference_on_the_interpreter(ran_packed):
    """Every packed tile of the sm_90 and gfx942 tables on every case of its layout: O and the LSE against
    the float64 reference, each row's (position, head) written where the reference has it."""
    pairs, (problems, values, outs) = ran_packed
    tiles = {(spec.BLOCK_M, spec.BLOCK_N) for _, spec, _ in pairs}
    assert {(16, 128), (16, 64), (16, 32)} <= tiles, tiles
    assert {(spec.VARLEN, spec.PAGED) for _, spec, _ in pairs} == {(0, 0), (1, 0), (0, 1), (1, 1)}
    for (p, spec, _), vals, (o_bits, lse_got) in zip(pairs, values, outs):
        assert spec.PACK_GQA == 1 and p.group * p.seqlen_q <= spec.BLOCK_M
        _check(p, vals, o_bits, lse_got, f"{spec.config} w{spec.num_warps} {p}")


def test_the_packed_cases_reach_the_edges_they_name(ran_packed):
    """Rows that see no key (O 0, LSE -inf) under packing; a tile filled to its last row (16/1 decode); a
    shuffled table; and the packed launch reads each KV head once per group: its grid is batch x heads_kv
    programs, the unpacked one's batch x heads_q."""
    pairs, (problems, values, outs) = ran_packed
    assert any(p.lse and np.isneginf(compute_lse(p, vals)).any() for p, vals in zip(problems, values))
    assert any(p.group * p.seqlen_q == spec.BLOCK_M for p, spec, _ in pairs)
    fam = get_family(FAM)
    for p, spec, _ in pairs:
        plan = fam.launch(spec, p, "sm_90")
        assert tuple(plan.grid) == (-(-p.seqlen_q * p.group // spec.BLOCK_M), p.batch * p.heads_kv, 1)


def _lse_bound(p: AttentionProblem, vals, want):
    """|LSE - lse| of a correct f32 kernel, per row: the exponents' error (the f32 dot, Higham's gamma_D
    * scale * sum_d |q_d k_d|, and the scale's roundings) plus the f32 sum of L terms (gamma_L), the
    hardware exp2 / log2 (2^-21 relative each), and the final rounding (u |LSE|); x2 for second order."""
    q, k, _ = padded(p, vals)
    u = 2.0**-24
    gd = p.head_dim * u / (1 - p.head_dim * u)
    out = np.zeros((p.batch, p.heads_q, p.seqlen_q))
    lens_q, lens_k = p.lengths()
    for b in range(p.batch):
        lq, lk = lens_q[b], lens_k[b]
        for h in range(p.heads_q):
            sa = p.softmax_scale * (np.abs(q[b, :lq, h]) @ np.abs(k[b, :lk, h // p.group]).T)
            per = (gd * sa + 4 * u * sa).max(axis=1, initial=0.0)
            out[b, h, :lq] = 2 * (per + 2 * lk * u + 4 * 2.0**-21)
    from rocke_aot.families.attention.reference import packed_lse

    return packed_lse(p, out).ravel() + u * np.abs(np.where(np.isfinite(want), want, 0.0))


@pytest.mark.parametrize("i", range(len(CASES)))
def test_the_triton_kernel_matches_the_reference_on_the_interpreter(ran, i):
    problems, values, outs = ran
    p, vals = problems[i], values[i]
    o_bits, lse_got = outs[i]
    if not p.lse:
        assert p.lse_rows == 0
    _check(p, vals, o_bits, lse_got, f"case {i}")


def test_the_cases_reach_the_edges_they_name(ran):
    """What the cases are meant to cover happens: rows with no key, empty sequences, lengths that are no
    multiple of the blocks, a pool larger than the blocks used, shuffled tables."""
    problems, values, outs = ran
    no_key = [i for i, p in enumerate(problems) if p.lse and np.isneginf(compute_lse(p, values[i])).any()]
    assert {2, 4} <= set(no_key), no_key
    assert any(0 in p.lengths()[0] for p in problems) and any(0 in p.lengths()[1] for p in problems)
    p6 = problems[6]
    assert p6.num_blocks == 12 > sum(-(-n // 32) for n in p6.lengths()[1])
    table = values[6]["block_table"].reshape(p6.batch, p6.table_width)
    assert not np.array_equal(table[0, :3], np.arange(3)), "the block table is not shuffled"
    # a wrong table is caught: the same kernel output against a reference whose table rows are swapped
    o = runner_ref.decode(outs[6][0], p6.dtype)
    swapped = dict(values[6], block_table=table[[2, 1, 0]].ravel())
    want, lim = compute(p6, values[6]), None
    wrong = compute(p6, swapped)
    lim = error_bound(p6, values[6], want, p6.dtype)
    assert (np.abs(o - want) <= lim).all() and (np.abs(o - wrong) > lim).any()


def _block_kinds(p: AttentionProblem, bm: int, bn: int) -> set[tuple[str, ...]]:
    """Per (sequence, query tile): which kinds of key block its rows have, from the mask's definition
    (the reference's): "whole" (every row of the tile in its sequence sees every key of the block, no
    key past the end), "edge" (some, not all)."""
    from rocke_aot.families.attention.reference import _mask

    out = set()
    lens_q, lens_k = p.lengths()
    for lq, lk in zip(lens_q, lens_k):
        keep = _mask(p, lq, lk)
        for m0 in range(0, lq, bm):
            kinds = []
            for n0 in range(0, lk, bn):
                tile = keep[m0:m0 + bm, n0:n0 + bn]
                full = tile.all() and n0 + bn <= lk
                kinds.append("whole" if full else "edge" if tile.any() else "none")
            out.add(tuple(sorted(set(kinds))))
    return out


def test_the_long_cases_have_tiles_with_whole_and_edge_key_blocks(ran):
    """The long cases reach both loops of the kernel: some query tile of each (at the tile the case's
    spec runs) has key blocks all its rows see whole and blocks on the mask's edge."""
    problems, _, _ = ran
    for i in WHOLE_AND_EDGE:
        p = problems[i]
        spec = _spec(p)
        kinds = _block_kinds(p, spec.BLOCK_M, spec.BLOCK_N)
        assert any({"whole", "edge"} <= set(k) for k in kinds), (i, kinds)
    # and a case whose causal window leaves some tile with no whole block at all (the edges only)
    assert any(set(k) <= {"edge", "none"} and "edge" in k
               for k in _block_kinds(problems[10], _spec(problems[10]).BLOCK_M, _spec(problems[10]).BLOCK_N))


def test_the_table_serves_every_layout_and_each_spec_refuses_the_others_by_name():
    fam = get_family(FAM)
    for arch, extra, pextra in (("sm_90", 6, 2), ("gfx942", 0, 0)):
        from rocke_aot.families.attention.triton import configs

        every = configs(Target.parse(arch))
        cfgs = [c for c in every if not c["PACK_GQA"]]
        # 3 head dims x (2 dense + 1 varlen + 2 paged tiles) x causal, and on CUDA 6 more dense tiles at
        # head dim 128 (x causal)
        assert len(cfgs) == 30 + 2 * extra
        dense128 = {(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"]) for c in cfgs
                    if c["HEAD_DIM"] == 128 and not c["VARLEN"] and not c["PAGED"]}
        assert len(dense128) == 2 + extra and all(c["BLOCK_N"] <= c["HEAD_DIM"] for c in every)
        if arch == "sm_90":
            # the fused-attention tutorial's Hopper tiles (its autotune space less its 8-warp tiles under
            # 128 x 128), beside the fourth call's four
            assert {(128, 128, 8, 3), (64, 128, 4, 3), (64, 64, 4, 2), (64, 32, 4, 3)} < dense128
        assert {(c["VARLEN"], c["PAGED"]) for c in cfgs} == {(0, 0), (1, 0), (0, 1), (1, 1)}
        # GQA-packed: 3 head dims x 4 layouts x causal on a 16-row tile, and on CUDA a second dense tile at
        # head dim 128 (x causal)
        packed = [c for c in every if c["PACK_GQA"]]
        assert len(packed) == 24 + pextra and {c["BLOCK_M"] for c in packed} == {16}
        assert {(c["VARLEN"], c["PAGED"], c["CAUSAL"]) for c in packed if c["HEAD_DIM"] == 256} == \
            {(v, g, c) for v in (0, 1) for g in (0, 1) for c in (0, 1)}
    base = dict(batch=2, seqlen_q=64, seqlen_k=64, heads_q=4, heads_kv=2, head_dim=64)
    dense = fam.spec_from({"dtype": "f16", "HEAD_DIM": 64, "BLOCK_M": 64, "BLOCK_N": 64, "CAUSAL": 0, "VARLEN": 0,
                           "PAGED": 0, "num_warps": 4, "num_stages": 3})
    paged = fam.spec_from({**dense.to_dict(), "PAGED": 1})
    varlen = fam.spec_from({**dense.to_dict(), "VARLEN": 1})
    pp = AttentionProblem(**base, kv_layout="paged", block_size=16)
    pv = AttentionProblem(**base, seqlens_q=[64, 3])
    assert fam.model.accepts(dense, AttentionProblem(**base, lse=True)) is None  # LSE: every spec
    assert "paged" in fam.model.accepts(dense, pp) and fam.model.accepts(paged, pp) is None
    assert "variable" in fam.model.accepts(dense, pv) and fam.model.accepts(varlen, pv) is None
    assert "contiguous" in fam.model.accepts(paged, pv)
    # the specs differ in their keys (the constexprs are spec fields)
    assert len({dense.to_dict().__repr__(), paged.to_dict().__repr__(), varlen.to_dict().__repr__()}) == 3


def test_gqa_packing_is_a_knob_admitted_by_name():
    """PACK_GQA 1 takes GQA problems whose group x seqlen_q rows fit the tile, in every layout; it refuses
    MHA (nothing to pack) and rows past the tile (a prefill, or too many speculative tokens) by name, and
    the unpacked spec of the same tile still takes them. The launch: one program per (sequence, KV head)."""
    fam = get_family(FAM)
    spec = fam.spec_from({"dtype": "f16", "HEAD_DIM": 128, "BLOCK_M": 16, "BLOCK_N": 128, "CAUSAL": 1, "VARLEN": 0,
                          "PAGED": 0, "PACK_GQA": 1, "num_warps": 4, "num_stages": 3})
    unpacked = fam.spec_from({**spec.to_dict(), "PACK_GQA": 0})
    base = dict(batch=64, seqlen_q=1, seqlen_k=2048, heads_q=32, heads_kv=8, head_dim=128, causal=True)
    decode = AttentionProblem(**base)
    assert fam.model.accepts(spec, decode) is None and fam.model.accepts(unpacked, decode) is None
    assert fam.model.accepts(spec, AttentionProblem(**{**base, "seqlen_q": 4})) is None  # 4 x 4 = 16 rows
    mha = AttentionProblem(**{**base, "heads_kv": 32})
    assert "one query head per KV head" in fam.model.accepts(spec, mha) and fam.model.accepts(unpacked, mha) is None
    five = AttentionProblem(**{**base, "seqlen_q": 5})
    assert "4 query heads x 5 positions = 20 do not fit" in fam.model.accepts(spec, five)
    assert fam.model.accepts(unpacked, five) is None
    prefill = AttentionProblem(**{**base, "seqlen_q": 2048})
    assert "served by the unpacked kernels" in fam.model.accepts(spec, prefill)
    # the other layouts, packed and refusing the others' problems as the unpacked specs do
    paged = fam.spec_from({**spec.to_dict(), "PAGED": 1})
    pp = AttentionProblem(**base, kv_layout="paged", block_size=16)
    assert fam.model.accepts(paged, pp) is None and "paged" in fam.model.accepts(spec, pp)
    # 64 sequences x 8 KV heads (2048 programs unpacked: one per query head)
    plan, plan_u = fam.launch(spec, decode, "sm_90"), fam.launch(unpacked, decode, "sm_90")
    assert tuple(plan.grid) == (1, 512, 1) and tuple(plan_u.grid) == (1, 2048, 1)
    env = spec.launch_formulas().env(decode)
    assert (env["pack"], env["rows"], env["tiles"]) == (4, 4, 512)
    assert unpacked.launch_formulas().env(decode)["tiles"] == 2048
    # the efficiency model's row granularity: 4 of 16 rows packed, 1 of 16 unpacked
    from rocke_aot.arch import arch_info

    e, e_u = (fam.model.efficiency(s, decode, arch_info("sm_90")) for s in (spec, unpacked))
    assert (e.dims[0].size, e_u.dims[0].size) == (4, 1) and e.total == pytest.approx(4 * e_u.total)


def test_the_derived_fields_and_the_packed_reference():
    p = AttentionProblem(batch=3, seqlen_q=5, seqlen_k=70, heads_q=4, heads_kv=2, head_dim=64, kv_layout="paged",
                         block_size=16, seqlens_q=[5, 0, 2], seqlens_k=[70, 3, 0], lse=True)
    assert (p.total_q, p.num_blocks, p.kv_rows, p.table_width, p.lse_rows) == (7, 5 + 1, 96, 5, 28)
    assert AttentionProblem(**json.loads(json.dumps(p.__dict__))) == p
    with pytest.raises(Exception, match="cannot hold them"):
        AttentionProblem(**{**p.__dict__, "num_blocks": 5, "kv_rows": 0})
    with pytest.raises(Exception, match="derived"):
        AttentionProblem(**{**p.__dict__, "total_q": 8})
    # the packed reference is the padded one, row for row
    rng = np.random.default_rng(5)
    vals = {}
    for name, n in (("Q", p.total_q * 4 * 64), ("K", p.kv_rows * 2 * 64), ("V", p.kv_rows * 2 * 64)):
        vals[name] = rng.uniform(-1, 1, n)
    for name, n in (("cu_seqlens_q", 4), ("cu_seqlens_k", 4), ("block_table", 15)):
        vals[name] = REFERENCE.inputs(p, name, "i32", n, rng)[1]
    assert list(vals["cu_seqlens_q"]) == [0, 5, 5, 7]
    q, k, v = padded(p, vals)
    o, lse = sdpa(p, q, k, v)
    packed_o = compute(p, vals).reshape(7, 4, 64)
    np.testing.assert_array_equal(packed_o[:5], o[0, :5])
    np.testing.assert_array_equal(packed_o[5:], o[2, :2])
    assert np.isneginf(compute_lse(p, vals).reshape(4, 7)[:, 5:]).all()  # sequence 2 sees no key
    assert math.isfinite(lse[0, 0, 0])


def test_the_bench_runner_fills_the_index_arguments_from_the_family_and_checks_o_against_them():
    """`bench --run-from-cache`'s buffers (runner/run.py): the i32 arguments get the family's values
    (Reference.inputs: prefix sums, a table of distinct pool blocks), every other input uniform data;
    and the runner's expected O for those buffers is the reference of the gathered cache."""
    from rocke_aot.runner.run import _Buffers

    class Host:  # a runtime whose device memory is host memory
        def __init__(self):
            self.mem = {}

        def alloc(self, n):
            self.mem[len(self.mem) + 1] = None
            return len(self.mem)

        def upload(self, ptr, host):
            self.mem[ptr] = np.array(host, copy=True)

    p = AttentionProblem(batch=3, seqlen_q=9, seqlen_k=70, heads_q=4, heads_kv=2, head_dim=64, causal=True,
                         kv_layout="paged", block_size=16, seqlens_q=[9, 0, 2], seqlens_k=[70, 3, 40])
    sem = runner_ref.semantics(FAM)
    rt = Host()
    bufs = _Buffers(rt, 0, p, sem)
    plan = get_family(FAM).launch(_spec(p), p, "sm_90")
    vals = {}
    for a in plan.args:
        if a.kind == "global_pointer" and a.name != "O":
            ptr = bufs.input(a.name, a.dtype, a.value)
            vals[a.name] = bufs.values[(a.name, a.dtype, a.value)]
            if a.dtype == "i32":
                assert rt.mem[ptr].dtype == np.int32
    assert list(vals["cu_seqlens_q"]) == [0, 9, 9, 11] and list(vals["cu_seqlens_k"]) == [0, 70, 73, 113]
    table = vals["block_table"].reshape(3, p.table_width).astype(int)
    used = [table[0, :5], table[1, :1], table[2, :3]]
    assert sorted(np.concatenate(used)) == list(range(p.num_blocks))  # every pool block once
    assert np.abs(vals["Q"]).max() <= 1 and vals["Q"].size == p.total_q * 4 * 64
    want, lim = sem.expected(p, vals, p.dtype)
    np.testing.assert_array_equal(want, compute(p, vals))
    assert want.size == p.total_q * p.heads_q * p.head_dim and (lim > 0).all()


@pytest.mark.parametrize("arch,lane", [("sm_90", "llvm22"), ("gfx90a", "llvm24"), ("gfx942", "llvm24"),
                                       ("gfx950", "llvm24"), ("gfx1250", "llvm24")])
def test_selection_ranks_a_packed_spec_first_on_the_gqa_decode_batches(arch, lane):
    """From the model alone (the hardware-fact model where the arch's facts are public, else the efficiency
    order; no measured time, nothing hard-coded): on the decode batches of bench/problems/models/
    attention.json (64 sequences x 1 token, 32/8 heads, dense and paged, equal and ragged lengths) and a
    4-token speculative step, a packed program stages its KV head once for the group's 4 query heads
    where the unpacked ones stage it per query head, so a packed spec is ranked first; an MHA decode has
    no packed candidate (refused by name)."""
    from datetime import datetime, timezone

    from rocke_aot.candidates import Candidate, Resources
    from rocke_aot.lanes import get_lane
    from rocke_aot.variants import selection, table

    t, ln = Target.parse(arch), get_lane(lane)
    cands = [Candidate(f"{FAM}-{arch}-{i:04d}", "0" * 64, FAM, s.to_dict(), t, ln, "release", "g", True,
                       Resources(*([None] * 9)), datetime(2026, 12, 6, tzinfo=timezone.utc), "3.6.0")
             for i, s in enumerate(table.enumerate_specs(FAM, t, ln))]
    doc = json.loads((Path(__file__).resolve().parents[1] / "bench/problems/models/attention.json").read_text())
    decodes = [AttentionProblem(**d) for d in doc[FAM] if d["seqlen_q"] == 1 and d["heads_q"] > d["heads_kv"]]
    assert len(decodes) == 3 and {p.kv_layout for p in decodes} == {"contiguous", "paged"}
    spec4 = AttentionProblem(batch=64, seqlen_q=4, seqlen_k=2048, heads_q=32, heads_kv=8, head_dim=128, causal=True)
    for p in [*decodes, spec4]:
        r = selection.rank(cands, p, t)
        assert r.model == ("efficiency" if arch == "gfx1250" else "hardware"), r.note
        top = r.accepted[0]
        assert top.spec.PACK_GQA == 1, (arch, p, [(c.spec.config, c.estimate_ms) for c in r.accepted[:4]])
        if top.estimate_ms is not None:
            assert top.estimate_ms < min(c.estimate_ms for c in r.accepted if not c.spec.PACK_GQA)
    mha = AttentionProblem(batch=64, seqlen_q=1, seqlen_k=2048, heads_q=32, heads_kv=32, head_dim=128, causal=True)
    r = selection.rank(cands, mha, t)
    assert r.accepted and not any(c.spec.PACK_GQA for c in r.accepted)
    assert any("one query head per KV head" in j.detail for j in r.rejected)
