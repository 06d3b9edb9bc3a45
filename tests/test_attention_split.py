"""The native attention's split-KV decode kernel (AttentionSpec.split_kv, rocke_aot/families/attention/lower.py
"split-KV"), without a GPU: its lowered IR run on the CPU emulation (tests/_host_sim.py; for sm_90 the weak
memory model of the last arriver's fences, atomic and .cg accesses) for gfx942 / gfx950 (MFMA), gfx1250 (WMMA)
and sm_90 (mma.sync) with the arguments its launch contract binds (the workspace zero-filled, as the runner
does), against the float64 reference of the family within its error bound, the LSE against the reference's
log-sum-exp; and the table's admission and the model's preference for it on decode."""

from __future__ import annotations

import numpy as np
import pytest
from _host_sim import CpuGrid

from rocke_aot.aot.lower import lower
from rocke_aot.families.attention.native import AttentionSpec
from rocke_aot.families.attention.problem import AttentionProblem

PATHS = {"gfx942": ("mfma", 64), "gfx950": ("mfma", 64), "gfx1250": ("wmma", 32), "sm_90": ("mma", 32)}


def first_spec(arch: str, p: AttentionProblem, knob: str) -> AttentionSpec:
    """The first spec of the arch's table with ``knob`` set (split_kv, pack_gqa) that accepts ``p``."""
    from rocke_aot.aot.families import get_family as aot_family
    from rocke_aot.variants import table

    fam = aot_family("attention")
    lane = "llvm24" if arch == "gfx1250" else "llvm22"
    for spec in table.enumerate_specs("attention", arch, lane):
        if getattr(spec, knob) and fam.model.accepts(spec, p) is None:
            return spec
    raise AssertionError(f"no {knob} attention spec accepts {p} on {arch}")


def _split_spec(arch: str, p: AttentionProblem) -> AttentionSpec:
    return first_spec(arch, p, "split_kv")


def _run(arch: str, p: AttentionProblem, seed: int, order=None, spec=None):
    from rocke_aot.families.attention.reference import REFERENCE
    from rocke_aot.runner import reference as runner_ref
    from rocke_aot.variants.families import get_family

    spec = spec or _split_spec(arch, p)
    k = lower("attention", spec, arch, "llvm22")
    plan = get_family("attention").launch(spec, p, arch)
    access = {a.name: a.access for a in spec.launch_formulas().args}
    rng = np.random.default_rng(seed)
    vals, args, bufs = {}, [], {}
    for a in plan.args:
        if a.kind == "scalar":
            args.append(a.value)
            continue
        got = REFERENCE.inputs(p, a.name, a.dtype, a.value, rng)
        if access[a.name] == "workspace":  # launch.py: zero-filled by the runner
            bits = np.zeros(a.value, dtype=np.float32)
        elif a.name in ("O", "LSE"):  # outputs poisoned (NaN): an unwritten element fails
            bits = np.full(max(1, a.value), 0xFFFF if a.name == "O" else np.nan, dtype=runner_ref.storage_dtype(a.dtype))
        elif got is None:
            bits, vals[a.name] = runner_ref.inputs(a.dtype, a.value, rng)
        else:
            bits, vals[a.name] = got
        bits = np.ascontiguousarray(bits) if bits.size else np.zeros(1, dtype=bits.dtype)
        bufs[a.name] = bits
        args.append(bits)
    sim = CpuGrid(k, wave_size=PATHS[arch][1])
    sim.launch(plan.grid[0], *args, order=order)
    return spec, (sim, plan, args), vals, bufs


def _check(p: AttentionProblem, vals, bufs) -> None:
    from rocke_aot.families.attention.reference import compute, compute_lse, error_bound
    from rocke_aot.runner import reference as runner_ref

    got = runner_ref.decode(bufs["O"][:p.total_q * p.heads_q * p.head_dim], p.dtype)
    want = compute(p, vals)
    lim = error_bound(p, vals, want, p.dtype)
    assert np.isfinite(got).all(), "unwritten or non-finite outputs"
    bad = np.abs(got - want) > lim
    assert not bad.any(), f"{int(bad.sum())} of {got.size} outside the bound, max err {np.abs(got - want).max():.3g}"
    if p.lse:
        lse_got, lse_want = bufs["LSE"][:p.lse_rows].astype(np.float64), compute_lse(p, vals)
        assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_want)), "rows with no key differ (-inf)"
        fin = np.isfinite(lse_want)
        assert fin.any() and np.isfinite(lse_got[fin]).all()
        err = np.abs(lse_got[fin] - lse_want[fin])
        assert (err <= 1e-4 * (1 + np.abs(lse_want[fin]))).all(), f"LSE max err {err.max():.3g}"


def _counters_back_at_zero(spec: AttentionSpec, bufs) -> None:
    """Each tile's arrival counter (the first of the 4 words closing split 0's region) is 0 again: the next
    launch finds the workspace as the runner's zero fill left it."""
    w = spec.workspace_words_per_group
    assert not bufs["W"].view(np.int32)[w - 4::w].any()


CASES = [  # (arch, problem): decode (1..a few queries a sequence), keys split into kv_splits chunks at launch
    # paged, ragged key lengths (one shorter than a chunk: its later chunks see no key), GQA, LSE
    ("sm_90", dict(batch=2, seqlen_q=1, seqlen_k=600, heads_q=2, heads_kv=1, head_dim=64, kv_layout="paged",
                   block_size=16, seqlens_q=[1, 1], seqlens_k=[37, 600], lse=True)),
    # contiguous, equal lengths no multiple of a chunk or a block, MQA, causal with 2 queries, bf16
    ("gfx942", dict(batch=1, seqlen_q=2, seqlen_k=601, heads_q=4, heads_kv=2, head_dim=64, causal=True,
                    dtype="bf16")),
    # packed varlen contiguous, an empty key sequence (LSE -inf, O 0), GQA, LSE
    ("gfx950", dict(batch=2, seqlen_q=3, seqlen_k=300, heads_q=2, heads_kv=1, head_dim=128, lse=True,
                    seqlens_q=[3, 1], seqlens_k=[300, 0])),
    # paged with equal lengths, WMMA, block size 64, a sliding window
    ("gfx1250", dict(batch=1, seqlen_q=1, seqlen_k=600, heads_q=2, heads_kv=2, head_dim=64, kv_layout="paged",
                     block_size=64, window=300)),
]


# the protocol tests below: the table's sm_90 split-KV tile at head dim 64, packed varlen
ONE_WARP = AttentionSpec(path="mma", head_dim=64, warps=1, block_n=16, varlen=1, split_kv=1)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[a for a, _ in CASES])
def test_the_emulated_split_kernel_is_sdpa(i):
    arch, shape = CASES[i]
    p = AttentionProblem(**shape)
    spec, plan, vals, bufs = _run(arch, p, 80 + i)
    env = spec.launch_formulas().env(p)
    assert env["kv_splits"] >= 2, env  # the keys are split, every case
    _check(p, vals, bufs)
    _counters_back_at_zero(spec, bufs)


def test_every_arrival_order_gives_the_same_bits_on_one_workspace():
    """The last arriver adds the splits in the order z = 0, 1, ..: the same bits whichever work-group of a
    tile arrives last (forward, reversed and shuffled orders), each launch on the workspace the one before
    left (the runner's one zero fill serves every launch in stream order: the counters are back at 0)."""
    p = AttentionProblem(batch=2, seqlen_q=1, seqlen_k=600, heads_q=2, heads_kv=1, head_dim=64, lse=True,
                         seqlens_q=[1, 1], seqlens_k=[600, 300])
    spec, (sim, plan, args), vals, bufs = _run("sm_90", p, 5, spec=ONE_WARP)
    _check(p, vals, bufs)
    first = bufs["O"].copy(), bufs["LSE"].copy()
    grid = plan.grid[0]
    assert grid == 2 * 2 * 3  # three splits a tile
    for order in (list(range(grid))[::-1], list(np.random.default_rng(3).permutation(grid))):
        _counters_back_at_zero(spec, bufs)
        bufs["O"][:] = 0xFFFF
        bufs["LSE"][:] = np.nan
        sim.launch(grid, *args, order=order)
        assert np.array_equal(bufs["O"], first[0]) and np.array_equal(bufs["LSE"], first[1], equal_nan=True)


@pytest.mark.parametrize("dropped", ["release", "acquire"])
def test_the_last_arriver_without_its_fences_fails_the_simulation(monkeypatch, dropped):
    """The sm_90 simulator's memory model (tests/_host_sim.py) checks the protocol: without the release
    fence the last arriver reads partials not yet published (the workspace's zeros: wrong numbers), without
    the acquire fence its .cg reads are reported as unordered."""
    from rocke_aot.aot.lower.nvptx import NvptxKernel

    p = AttentionProblem(batch=1, seqlen_q=1, seqlen_k=600, heads_q=2, heads_kv=1, head_dim=64, seqlens_k=[600])
    fence = NvptxKernel.fence_acq_rel_gpu
    calls = []

    def mutated(self):  # reduce_splits emits the release fence first, then the acquire fence
        calls.append(1)
        if dropped != ("release" if len(calls) % 2 else "acquire"):
            fence(self)

    monkeypatch.setattr(NvptxKernel, "fence_acq_rel_gpu", mutated)
    why = "outside the bound" if dropped == "release" else r"memory-model violations"
    with pytest.raises(AssertionError, match=why):
        _, _, vals, bufs = _run("sm_90", p, 9, spec=ONE_WARP)
        _check(p, vals, bufs)


def test_admission_and_the_model_prefer_the_split_kernel_where_the_gpu_would_idle():
    """The table admits a split-KV spec for every layout; it refuses a prefill by name; kv_splits is the
    launch's (one build, every length); selection ranks it first for a decode whose query tiles leave CUs
    idle (1 sequence x 32 heads on 132 SMs / 304 CUs), and the unsplit kernel first where the batch fills
    the GPU (128 sequences x 32 heads: the split's workspace round trip costs, nothing is gained)."""
    from rocke_aot.arch import arch_info
    from rocke_aot.variants import table
    from rocke_aot.variants.families import get_family

    fam = get_family("attention")
    split = next(s for s in table.enumerate_specs("attention", "sm_90", "llvm22")
                 if s.split_kv and not s.pack_gqa
                 and (s.dtype, s.head_dim, s.causal, s.layout) == ("f16", 128, 1, False))
    prefill = AttentionProblem(batch=1, seqlen_q=4096, seqlen_k=4096, heads_q=32, heads_kv=8, head_dim=128,
                               causal=True)
    assert "prefill, served by the unsplit kernel" in fam.model.accepts(split, prefill)
    env = lambda p: split.launch_formulas().env(p)  # noqa: E731
    short = AttentionProblem(batch=1, seqlen_q=1, seqlen_k=300, heads_q=32, heads_kv=8, head_dim=128, causal=True)
    long = AttentionProblem(batch=1, seqlen_q=1, seqlen_k=32768, heads_q=32, heads_kv=8, head_dim=128, causal=True)
    big = AttentionProblem(batch=128, seqlen_q=1, seqlen_k=4096, heads_q=32, heads_kv=8, head_dim=128, causal=True)
    assert (env(short)["kv_splits"], env(long)["kv_splits"], env(big)["kv_splits"]) == (2, 19, 1)
    for arch, lane in (("sm_90", "llvm22"), ("gfx942", "llvm22")):
        info = arch_info(arch)
        dense = [s for s in table.enumerate_specs("attention", arch, lane)  # GQA packing: test_attention_gqa_pack
                 if (s.dtype, s.head_dim, s.causal, s.layout) == ("f16", 128, 1, False) and not s.pack_gqa]

        def best(p, dense=dense, info=info):
            ok = [s for s in dense if fam.model.accepts(s, p) is None]
            return max(ok, key=lambda s: fam.model.efficiency(s, p, info).total)

        one = AttentionProblem(batch=1, seqlen_q=1, seqlen_k=8192, heads_q=32, heads_kv=8, head_dim=128, causal=True)
        assert best(one).split_kv == 1, arch
        assert best(big).split_kv == 0, arch
        assert sum(s.split_kv and not s.pack_gqa for s in table.enumerate_specs("attention", arch, lane)) == 48
