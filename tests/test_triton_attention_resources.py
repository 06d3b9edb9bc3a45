"""A Triton-built sm_90 triton_attention kernel's registers and shared memory reach the time model's
residency (issue 38: were the 8-warp 128-row tiles credited with blocks an SM cannot hold?).

Built here by the llvm22 lane's Triton 3.6 through the project's builder (the tiles the H100's fourth
call measured: 128 x 64 on 8 warps, 64 x 64 on 4, 128 x 128 on 8), then checked against references the
code under test did not produce:

    registers   cuobjdump --dump-resource-usage on the stored cubin ("REG:N": NVIDIA's own reader of it)
    shared      Triton's own metadata file of the entry ("shared": the dynamic shared memory the launch
                asks for) plus cuobjdump's static "SHARED" less the 1 KiB window the system reserves
    residency   the H100's documented limits, computed here by hand: 65536 registers an SM, allocated
                per warp in units of 256 (CUDA C++ Programming Guide, compute capability 9.0 table;
                the occupancy calculator's allocation granularity), 228 KiB of shared memory an SM with
                1 KiB reserved per block and 128-byte allocation, 64 warps and 32 blocks an SM

and the estimate a select gives the stored candidate equals the hardware model's at that residency
(the candidate's recorded resources are what the model reads: nothing falls back to the spec's).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.builder import build
from rocke_aot.cache.store import Store
from rocke_aot.families.attention.counts import attention_counts
from rocke_aot.families.attention.problem import AttentionProblem
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import hw_model, perf, selection, table
from rocke_aot.variants.families import get_family

SM90 = Target.parse("sm_90")
# H100 SXM (compute capability 9.0), CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability" and the occupancy calculator's allocation rules
REGS_PER_SM, REG_UNIT_PER_WARP = 65536, 256
SMEM_PER_SM, SMEM_RESERVED_PER_BLOCK, SMEM_UNIT = 228 * 1024, 1024, 128
WARPS_PER_SM, BLOCKS_PER_SM = 64, 32
TILES = ((128, 64, 8, 3), (64, 64, 4, 3), (128, 128, 8, 2))  # BLOCK_M, BLOCK_N, num_warps, num_stages
LLAMA = AttentionProblem(batch=1, seqlen_q=4096, seqlen_k=4096, heads_q=32, heads_kv=8, head_dim=128, dtype="f16",
                         causal=True)


def _cuobjdump() -> str:
    path = Path(sys.executable).with_name("cuobjdump")
    if not path.is_file():
        pytest.fail("no cuobjdump beside the interpreter: run `bash scripts/setup.sh --only ptxas`")
    return str(path)


@pytest.fixture(scope="module")
def built(tmp_path_factory, all_toolchains):
    if not tcs.toolchains_for_lane(get_lane("llvm22"), all_toolchains, consumes="triton"):
        pytest.fail("no Triton on the llvm22 lane here: `rocke-aot toolchain install triton==3.6.0 --python python3.12`")
    tmp = tmp_path_factory.mktemp("tri-att")
    url = str(tmp / "cache.sqlite")
    out = {}
    with Store.open(url) as store:
        for bm, bn, w, s in TILES:
            where = {"HEAD_DIM": "128", "dtype": "f16", "CAUSAL": "1", "VARLEN": "0", "PAGED": "0", "PACK_GQA": "0",
                     "BLOCK_M": str(bm), "BLOCK_N": str(bn), "num_warps": str(w), "num_stages": str(s)}
            summary = build(arches=[SM90], families=["triton_attention"], lanes=["llvm22"], store=store,
                            toolchains=all_toolchains, where=where, jobs=1)
            assert summary["built"] == 1 and not summary["failed"], summary
        cands = {(c.spec["BLOCK_M"], c.spec["BLOCK_N"], c.spec["num_warps"], c.spec["num_stages"]): c
                 for c in store.candidates("triton_attention", SM90, ["llvm22"])}
        for tile, cand in cands.items():
            art = store.get(cand.key)
            cubin = tmp / f"{cand.key[:12]}.cubin"
            cubin.write_bytes(art.code_object)
            usage = subprocess.run([_cuobjdump(), "--dump-resource-usage", str(cubin)], capture_output=True,
                                   text=True, check=True).stdout
            entry = store.triton_entry(art.metadata["triton"]["key"])
            meta = json.loads(store.get_blob(entry["attention_fwd_kernel.json"].blob_sha256))
            out[tile] = {"cand": cand, "usage": usage, "triton": meta}
    assert sorted(out) == sorted(TILES)
    return out


def _usage(text: str, field: str) -> int:
    found = re.findall(rf"\b{field}:(\d+)\b", text)
    assert len(found) == 1, text  # one kernel in the cubin
    return int(found[0])


def _by_hand(regs: int, smem: int, warps: int) -> dict[str, int]:
    per_warp = -(-regs * 32 // REG_UNIT_PER_WARP) * REG_UNIT_PER_WARP
    per_block = -(-(smem + SMEM_RESERVED_PER_BLOCK) // SMEM_UNIT) * SMEM_UNIT
    return {"registers": REGS_PER_SM // (per_warp * warps), "shared": SMEM_PER_SM // per_block,
            "warps": WARPS_PER_SM // warps, "blocks": BLOCKS_PER_SM}


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
def test_recorded_resources_are_what_cuobjdump_and_triton_report(built, tile):
    got = built[tile]
    res, usage = got["cand"].resources, got["usage"]
    assert res.vgprs == _usage(usage, "REG")
    # the kernel's static shared memory is the 1 KiB window alone (cuobjdump counts it); the rest is
    # Triton's dynamic shared memory, which the launch asks for and residency must count
    assert _usage(usage, "SHARED") == SMEM_RESERVED_PER_BLOCK
    assert res.lds_bytes == got["triton"]["shared"] > 0
    assert res.workgroup_size == 32 * got["triton"]["num_warps"] == 32 * tile[2]
    assert res.private_segment_bytes == _usage(usage, "STACK")


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
def test_residency_is_the_register_and_shared_limited_count(built, tile):
    got = built[tile]
    cand = got["cand"]
    regs, smem, warps = _usage(got["usage"], "REG"), got["triton"]["shared"], tile[2]
    limits = _by_hand(regs, smem, warps)
    want = min(limits.values())
    assert cand.resources.groups_per_cu == want
    work = get_family("triton_attention").model.work(_spec(cand), LLAMA, SM90)
    assert perf.resident_groups(SM90.info, work, cand.resources) == want
    if tile[2] == 8:
        # the 8-warp tiles: one block an SM, by registers alone (no second block's registers fit), and
        # by shared memory alone as well
        assert limits["registers"] == 1 and limits["shared"] == 1
    else:  # 64 x 64 on 4 warps: two blocks, both limits allow exactly two
        assert limits["registers"] == 2 and limits["shared"] == 2


def _spec(cand):
    for s in table.enumerate_specs("triton_attention", SM90, get_lane("llvm22")):
        if s.to_dict() == dict(cand.spec):
            return s
    raise AssertionError(f"no table spec is {dict(cand.spec)}")


def test_the_select_estimate_uses_that_residency(built):
    facts = hw_model.facts_for("sm_90")
    assert isinstance(facts, hw_model.HardwareFacts)
    selection.clear_verdicts()
    ranking = selection.rank([g["cand"] for g in built.values()], LLAMA, SM90)
    assert not ranking.rejected
    for choice in ranking.accepted:
        tile = next(t for t, g in built.items() if g["cand"].key == choice.candidate.key)
        got = built[tile]
        spec = _spec(got["cand"])
        counts = attention_counts(spec, LLAMA, SM90, int(facts.lds_banks))
        if get_family("triton_attention").model.reads_schedule:  # ptxas's schedule, as estimate_hw takes it
            counts, why = hw_model.with_schedule(counts, got["cand"].resources.schedule, facts)
            assert why is None, why
        groups = min(_by_hand(_usage(got["usage"], "REG"), got["triton"]["shared"], tile[2]).values())
        tiles = -(-LLAMA.seqlen_q // tile[0]) * LLAMA.batch * LLAMA.heads_q
        want = hw_model.estimate(counts, tiles, groups, facts).ms
        assert choice.estimate_ms == pytest.approx(want, rel=1e-12), tile
