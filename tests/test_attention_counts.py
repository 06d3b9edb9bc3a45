"""The native attention kernel's counts for the hardware time model (families/attention/counts.py
native_counts): checked against what ptxas emits, and the ranking they give checked from each arch's
facts (variants/hw_facts/<arch>.json), never from a measured time.

    the sm_90 SASS of two built kernels   each step loop's HMMA, LDG, LDS, STS, BAR, MUFU and SHFL per warp
                                          against the counts (the compiler's output, not the model's)
    split-KV vs unsplit, per arch          a decode whose query tiles are far fewer than the CUs of the
                                          arch's facts ranks the split kernel first; one whose batch fills
                                          every CU several times over ranks the unsplit kernel first
"""

from __future__ import annotations

import collections
from datetime import datetime, timezone

import pytest

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.families.attention.counts import native_counts
from rocke_aot.families.attention.native import AttentionSpec
from rocke_aot.families.attention.problem import AttentionProblem
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import hw_model, selection, table

HEADS_Q, HEADS_KV = 32, 8


def _candidates(arch: str, lane: str) -> list[Candidate]:
    t, ln = Target.parse(arch), get_lane(lane)
    return [Candidate(f"attention-{arch}-{i:04d}", "0" * 64, "attention", s.to_dict(), t, ln, "release", "g", True,
                      Resources(*([None] * 9)), datetime(2026, 12, 6, tzinfo=timezone.utc))
            for i, s in enumerate(table.enumerate_specs("attention", t, ln))]


def _decode(batch: int) -> AttentionProblem:
    return AttentionProblem(batch=batch, seqlen_q=1, seqlen_k=8192, heads_q=HEADS_Q, heads_kv=HEADS_KV,
                            head_dim=128, causal=True)


@pytest.mark.parametrize("arch", ["sm_90", "gfx90a", "gfx942", "gfx950"])
def test_split_kv_first_where_the_sequences_leave_cus_idle_and_not_where_they_fill_them(arch):
    """From the arch's facts alone: batch x heads_kv far below its CU count (one sequence: 8 KV heads,
    32 query tiles) ranks the split-KV kernel first by the hardware model's estimate; a batch whose query
    tiles fill every CU at least eight times over (kv_splits 1: the split kernel's chunk is the whole
    sequence, its partials' round trip a pure cost) ranks the unsplit kernel first."""
    facts = hw_model.facts_for(arch)
    assert isinstance(facts, hw_model.HardwareFacts), facts
    cus = int(facts.cus)
    few = _decode(1)
    many = _decode(-(-8 * cus // HEADS_Q))
    assert few.batch * HEADS_KV * 8 <= cus and many.batch * HEADS_Q >= 8 * cus
    every = _candidates(arch, "llvm22")
    cands = [c for c in every if not c.spec.get("pack_gqa")]  # the packed kernels: the next test
    for p, split_first in ((few, True), (many, False)):
        r = selection.rank(cands, p, Target.parse(arch))
        assert r.model == "hardware", r.note
        first = r.accepted[0]
        assert first.model == "hardware" and first.estimate_ms is not None, first.fallback
        assert bool(first.spec.split_kv) is split_first, (arch, p.batch, [(c.spec.kernel_name, c.estimate_ms)
                                                                          for c in r.accepted[:4]])
        other = min(c.estimate_ms for c in r.accepted if bool(c.spec.split_kv) is not split_first)
        assert other > first.estimate_ms


@pytest.mark.parametrize("arch", ["sm_90", "gfx90a", "gfx942", "gfx950"])
def test_gqa_decode_ranks_a_packed_kernel_first(arch):
    """GQA decode (32 query heads over 8 KV heads, one token a sequence): a packed work-group stages
    its KV head once for the group's 4 query heads where every unpacked one stages it per query head,
    and fills 4 of its 16 rows where an unpacked one fills 1; so from the arch's facts a packed spec
    ranks first at one sequence and at a batch that fills every CU, and MHA (group 1: nothing to pack)
    ranks no packed spec above the best unpacked one."""
    cus = int(hw_model.facts_for(arch).cus)
    cands = _candidates(arch, "llvm22")
    assert any(c.spec.get("pack_gqa") for c in cands)
    for p in (_decode(1), _decode(-(-8 * cus // HEADS_Q))):
        r = selection.rank(cands, p, Target.parse(arch))
        assert r.accepted[0].spec.pack_gqa, (arch, p.batch, [(c.spec.kernel_name, c.estimate_ms)
                                                            for c in r.accepted[:4]])
    mha = AttentionProblem(batch=1, seqlen_q=1, seqlen_k=8192, heads_q=HEADS_KV, heads_kv=HEADS_KV, head_dim=128,
                           causal=True)
    r = selection.rank(cands, mha, Target.parse(arch))
    best_packed = min((c.estimate_ms for c in r.accepted if c.spec.pack_gqa), default=None)
    assert best_packed is None or best_packed >= min(c.estimate_ms for c in r.accepted if not c.spec.pack_gqa)


def test_a_decode_token_pays_for_the_whole_16_row_tile_and_the_split_for_its_combination():
    """One query token per sequence: every warp's instructions compute 16 query rows (the matrix work of
    a step does not shrink with seqlen_q); the split kernel's chain adds its combination's loads, one
    round trip per split for the row max, the row sum and each O fragment, beyond the unsplit epilogue."""
    t = Target.parse("sm_90")
    one = _decode(1)
    full = AttentionProblem(batch=1, seqlen_q=64, seqlen_k=8192, heads_q=HEADS_Q, heads_kv=HEADS_KV, head_dim=128,
                            causal=True)
    w4 = AttentionSpec(dtype="f16", head_dim=128, causal=1, warps=4, path="mma", block_n=16)
    assert native_counts(w4, one, t).mma == native_counts(w4, full, t).mma == 2 * 16 * 16 * 128 / (16 * 8 * 16)
    split = AttentionSpec(dtype="f16", head_dim=128, causal=1, warps=1, path="mma", block_n=16, split_kv=1)
    ks = split.launch_formulas().env(one)["kv_splits"]
    c = native_counts(split, one, t)
    assert ks > 1 and c.epilogue_latencies == 1 + 3 + (2 + 128 // 8) * ks
    assert c.steps == -(-(-(-8192 // ks)) // 16)
    assert native_counts(AttentionSpec(dtype="f16", head_dim=128, causal=1, warps=1, path="mma", block_n=16),
                         one, t).epilogue_latencies == 1


@pytest.fixture(scope="module")
def sass_loops():
    """The step loop (the backward branch holding HMMA) of two sm_90 builds, opcode counts."""
    from rocke_aot.aot import sass
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.builder.run import build_one

    lane, target = get_lane("llvm22"), Target.parse("sm_90")
    tc = tcs.toolchain_for(lane, target)
    tool = sass.find_cuobjdump()
    out = {}
    for w, n in ((1, 16), (4, 64)):
        spec = AttentionSpec(dtype="f16", head_dim=128, causal=1, warps=w, path="mma", block_n=n)
        built = build_one("attention", spec.to_dict(), target, lane, tc)
        ins = sass.instructions(sass.disassemble(built.code_object, tool), spec.kernel_name)
        loops = []
        for a, text in ins:
            m = sass._BACK_BRANCH.search(text)
            if m and int(m.group(1), 16) < a:
                body = [x for b, x in ins if int(m.group(1), 16) <= b <= a]
                ops = collections.Counter(sass._opcode(x)[0].split(".")[0] for x in body)
                if ops["HMMA"]:
                    loops.append(ops)
        assert len(loops) == 2, loops  # the unmasked loop and the masked one (lower.py registers)
        out[spec] = loops
    return out


def test_the_counts_are_what_ptxas_issues_a_step(sass_loops):
    """Per warp and K/V block, the counts against the sm_90 SASS of both loops (unmasked, masked): matrix
    instructions, staging loads and barriers exactly; exp2 (MUFU) one per S element of a lane (block_n / 8
    n8 tiles x 4 accumulators) and one alpha for each of its two rows; the shared-memory reads are the K
    and V^T fragments only and the stores the staging's only (the softmax in registers: no S, P or alpha
    in shared memory); the row max by SHFL, two a row."""
    p = _decode(4)
    for spec, loops in sass_loops.items():
        c = native_counts(spec, p, Target.parse("sm_90"))
        for ops in loops:
            assert ops["HMMA"] == c.mma, (spec.kernel_name, ops["HMMA"], c.mma)
            assert ops["LDG"] == c.global_loads
            assert ops["BAR"] == c.barriers == 2
            assert ops["MUFU"] == spec.block_n // 8 * 4 + 2
            assert ops["SHFL"] == 2 * 2
            assert ops["LDS"] == c.lds_reads, (spec.kernel_name, ops["LDS"], c.lds_reads)
            assert ops["STS"] == c.lds_writes, (spec.kernel_name, ops["STS"], c.lds_writes)
