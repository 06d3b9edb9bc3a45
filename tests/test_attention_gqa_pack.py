"""GQA packing of the native attention's split-KV decode kernel (AttentionSpec.pack_gqa, docs/attention.md
"GQA-packed decode"): one work-group's rows are the (query position, query head) pairs of one KV head's
group, so K/V are read once for the group. The lowered IR run on the CPU emulation (tests/_host_sim.py)
for sm_90 (mma.sync) and gfx942 / gfx950 (MFMA) / gfx1250 (WMMA) against the float64 reference of the
family within its error bound (the LSE against the reference's log-sum-exp); admission by name and the
model's preference for it on GQA decode."""

from __future__ import annotations

import pytest
from test_attention_split import _check, _counters_back_at_zero, _run, first_spec

from rocke_aot.families.attention.native import AttentionSpec
from rocke_aot.families.attention.problem import AttentionProblem


def _packed(arch: str, p: AttentionProblem) -> AttentionSpec:
    return first_spec(arch, p, "pack_gqa")


CASES = [  # (arch, problem): group x seqlen_q rows in one tile, keys split at launch
    # GQA group 4 (32/8's tile, 2 KV heads), decode, paged, ragged key lengths (one shorter than a chunk),
    # causal, LSE
    ("sm_90", dict(batch=2, seqlen_q=1, seqlen_k=600, heads_q=8, heads_kv=2, head_dim=64, kv_layout="paged",
                   block_size=16, seqlens_q=[1, 1], seqlens_k=[37, 600], causal=True, lse=True)),
    # GQA 28/4 (group 7) with 2 queries (14 of 16 rows), causal, contiguous, bf16
    ("sm_90", dict(batch=1, seqlen_q=2, seqlen_k=301, heads_q=28, heads_kv=4, head_dim=64, causal=True,
                   dtype="bf16")),
    # MQA (group 4), 4 queries a sequence (16 rows), causal, packed varlen with ragged lengths, an empty key
    # sequence (LSE -inf, O 0)
    ("sm_90", dict(batch=2, seqlen_q=4, seqlen_k=300, heads_q=4, heads_kv=1, head_dim=64, causal=True, lse=True,
                   seqlens_q=[4, 3], seqlens_k=[300, 0])),
    # GQA 32/8 decode, contiguous, causal
    ("gfx942", dict(batch=1, seqlen_q=1, seqlen_k=300, heads_q=32, heads_kv=8, head_dim=64, causal=True)),
    ("gfx942", dict(batch=1, seqlen_q=2, seqlen_k=301, heads_q=28, heads_kv=4, head_dim=128, causal=True,
                    dtype="bf16")),
    ("gfx942", dict(batch=2, seqlen_q=3, seqlen_k=300, heads_q=5, heads_kv=1, head_dim=64, causal=True, lse=True,
                    seqlens_q=[3, 2], seqlens_k=[300, 0])),
    # paged varlen, MQA 8/1 with 2 queries, a sliding window (MFMA gfx950, WMMA gfx1250)
    ("gfx950", dict(batch=2, seqlen_q=2, seqlen_k=600, heads_q=8, heads_kv=1, head_dim=64, kv_layout="paged",
                    block_size=64, seqlens_q=[2, 1], seqlens_k=[600, 333], window=300, causal=True)),
    ("gfx1250", dict(batch=1, seqlen_q=1, seqlen_k=600, heads_q=16, heads_kv=2, head_dim=64, causal=True)),
]


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{a}-{s['heads_q']}x{s['heads_kv']}-q{s['seqlen_q']}"
                                                      for a, s in CASES])
def test_the_emulated_packed_kernel_is_sdpa(i):
    arch, shape = CASES[i]
    p = AttentionProblem(**shape)
    spec = _packed(arch, p)
    spec, _, vals, bufs = _run(arch, p, 380 + i, spec=spec)
    env = spec.launch_formulas().env(p)
    assert env["kv_splits"] >= 2, env
    assert env["qtiles"] == p.batch * p.heads_kv  # one tile per (sequence, KV head): the group in its rows
    _check(p, vals, bufs)
    _counters_back_at_zero(spec, bufs)


def test_packing_is_a_knob_old_specs_keep_their_dicts_and_admission_is_by_name():
    from rocke_aot.errors import SpecError
    from rocke_aot.variants.families import get_family

    old = AttentionSpec(path="mma", head_dim=128, warps=1, block_n=16, split_kv=1)
    assert "pack_gqa" not in old.to_dict() and "pack_gqa" not in AttentionSpec().to_dict()
    packed = AttentionSpec(path="mma", head_dim=128, warps=1, block_n=16, split_kv=1, pack_gqa=1)
    assert packed.to_dict()["pack_gqa"] == 1 and packed.kernel_name.endswith("_splitkv_packgqa")
    assert AttentionSpec.from_dict(packed.to_dict()) == packed
    with pytest.raises(SpecError, match="split-KV"):
        AttentionSpec(pack_gqa=1)
    fam = get_family("attention")
    too_many = AttentionProblem(batch=1, seqlen_q=5, seqlen_k=900, heads_q=32, heads_kv=8, head_dim=128)
    assert "do not fit" in fam.model.accepts(packed, too_many)
    assert fam.model.accepts(old, too_many) is None  # the unpacked split kernel takes it
    prefill = AttentionProblem(batch=1, seqlen_q=4096, seqlen_k=4096, heads_q=32, heads_kv=8, head_dim=128)
    assert "prefill" in fam.model.accepts(packed, prefill)
    # the grid runs over KV heads: 4 sequences x 8 KV heads, each split over the keys
    p = AttentionProblem(batch=4, seqlen_q=1, seqlen_k=8192, heads_q=32, heads_kv=8, head_dim=128)
    env, env_old = packed.launch_formulas().env(p), old.launch_formulas().env(p)
    assert (env["qtiles"], env_old["qtiles"]) == (32, 128)
    assert env["tiles"] == 32 * env["kv_splits"] and env["kv_splits"] == 19


def test_the_model_prefers_the_packed_kernel_for_gqa_decode():
    """Selection (the model's efficiency) ranks a packed spec first for GQA decode (1 of 16 rows busy
    unpacked, 4 packed), on sm_90 and gfx942; an MHA problem (group 1) gains nothing and the unpacked
    split is not ranked below it."""
    from rocke_aot.arch import arch_info
    from rocke_aot.variants import table
    from rocke_aot.variants.families import get_family

    fam = get_family("attention")
    for arch, lane in (("sm_90", "llvm22"), ("gfx942", "llvm22")):
        info = arch_info(arch)
        dense = [s for s in table.enumerate_specs("attention", arch, lane)
                 if (s.dtype, s.head_dim, s.causal, s.layout) == ("f16", 128, 1, False)]

        def best(p, dense=dense, info=info):
            ok = [s for s in dense if fam.model.accepts(s, p) is None]
            return max(ok, key=lambda s: fam.model.efficiency(s, p, info).total)

        for b in (1, 8, 64):
            gqa = AttentionProblem(batch=b, seqlen_q=1, seqlen_k=8192, heads_q=32, heads_kv=8, head_dim=128,
                                   causal=True)
            assert best(gqa).pack_gqa == 1, (arch, b)
        mha = AttentionProblem(batch=1, seqlen_q=1, seqlen_k=8192, heads_q=32, heads_kv=32, head_dim=128, causal=True)
        e = {s.pack_gqa: fam.model.efficiency(s, mha, info).total for s in dense if s.split_kv}
        assert e[0] >= e[1], (arch, e)
