"""The hardware-fact time model (variants/hw_model.py) and the counts it reads (variants/counts.py):
counts against the lowerer's own rules and hand arithmetic, facts files that fail closed, the
refusal where a fact is not public, and the issue's gfx1250 example."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocke_aot import mma
from rocke_aot.candidates import Candidate, Resources
from rocke_aot.errors import SpecError
from rocke_aot.families.gemm import counts as gcounts
from rocke_aot.families.gemm.lower_common import a_fragment_run
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import counts, hw_model, perf, table
from rocke_aot.variants.problems import GemmProblem
from rocke_aot.variants.selection import rank

FACTS = Path(__file__).resolve().parents[1] / "rocke_aot" / "variants" / "hw_facts"


@pytest.mark.parametrize("key", sorted(mma.INSTRS))
@pytest.mark.parametrize("stride", [16, 24, 32, 40, 64, 72])
def test_a_run_is_the_lowerers_rule(key, stride):
    ins = mma.INSTRS[key]
    assert counts.a_run(ins, stride) == a_fragment_run(ins, stride)


def test_lds_cycles_agree_with_the_bank_rule():
    """Element accesses (one 4-byte word or less per lane) cost perf.bank_degree's wavefronts;
    a conflict-free 8-byte-per-lane access of 32 lanes is 256 bytes: two cycles of 128."""
    for addrs in ([4 * i for i in range(32)], [128 * i for i in range(32)], [0] * 32, [2 * i for i in range(32)]):
        assert counts.lds_cycles([(a, 2) for a in addrs]) == perf.bank_degree(addrs)
    assert counts.lds_cycles([(8 * i, 8) for i in range(32)]) == 2
    assert counts.lds_cycles([(8 * i, 8) for i in range(64)], banks=32) == 4


def test_gemm_counts_by_hand():
    """sm_90 mma 64x64x32, 4 warps (2x2 of 32x32 warp tiles: 2 x 4 m16n8 tiles), vector 4, single
    buffer, K = 1024: A and B are 64x32 and 32x64 f16 = 512 vectors each over 128 threads."""
    s = GemmSpec(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4, path="mma",
                 double_buffer=False, vector_width=4)
    c = gcounts.gemm_counts(s, GemmProblem(1024, 1024, 1024), Target.parse("sm_90"))
    assert (c.threads, c.warps, c.steps) == (128, 4, 32)
    assert c.global_loads == c.lds_writes == c.serial_loads == 4 + 4
    assert c.mma == 2 * 4 * 2  # tiles_m x tiles_n x (block_k / 16)
    # per k-step: 2 A fragments of 4 32-bit loads (pairs), 4 B fragments of 4 16-bit loads
    assert c.lds_reads == 2 * (2 * 4 + 4 * 4)
    assert c.lds_read_wavefronts == c.lds_reads  # padded rows: every fragment load conflict free
    assert c.staged_bytes == (64 + 64) * 32 * 2 and c.barriers == 2
    assert c.unique_bytes == (1024 * 1024 * 2) * 2 + 1024 * 1024 * 4


def test_global_wavefronts_by_hand():
    """The 128-byte lines the staging loads of one warp touch per step, by hand: 64x64x32, 4
    warps, vector 4 (8 bytes a lane), K = N = 1024 f16. A: 64 rows x 8 vectors over 128 threads
    = 4 rounds; a warp's 32 vectors are 4 rows of 64 bytes, 2048 bytes apart: 4 lines a round.
    B: 32 rows x 16 vectors = 4 rounds; a warp's 32 vectors are 2 rows of 128 bytes: 2 lines a
    round. 4 x 4 + 4 x 2 = 24. With block_k 64: A rows of 128 bytes (8 rounds of 2 lines), B 64
    rows (8 rounds of 2): 32."""
    sm90 = Target.parse("sm_90")
    s = GemmSpec(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4, path="mma",
                 double_buffer=False, vector_width=4)
    assert gcounts.gemm_counts(s, GemmProblem(1024, 1024, 1024), sm90).global_wavefronts == 4 * 4 + 4 * 2
    s64 = GemmSpec(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=64, waves=4, path="mma",
                   double_buffer=False, vector_width=4)
    assert gcounts.gemm_counts(s64, GemmProblem(1024, 1024, 1024), sm90).global_wavefronts == 8 * 2 + 8 * 2
    # element loads (conv staging): 32 lanes x 2 bytes in one line, or one line per 8-channel pixel
    assert counts.global_lines(32, 32, 32, 1, 2, lambda e: e) == 1
    assert counts.global_lines(32, 32, 32, 1, 2, lambda e: (e // 8) * 64 + e % 8) == 4


def test_global_lines_cost_lds_cycles_where_l1_and_lds_share_a_datapath():
    """sm_90 (one L1/shared array, NVIDIA) adds the staging loads' lines to the LDS term; gfx942
    (LDS apart from the vector L1, AMD) does not."""
    s = GemmSpec(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4, path="mma",
                 double_buffer=False, vector_width=4)
    c = gcounts.gemm_counts(s, GemmProblem(1024, 1024, 1024), Target.parse("sm_90"))
    nv, amd = hw_model.facts_for("sm_90"), hw_model.facts_for("gfx942")
    assert nv.l1_shares_lds_datapath and not amd.l1_shares_lds_datapath
    t = hw_model.step_terms(c, 3, nv)
    assert t["lds"] == 3 * c.warps * (c.lds_read_wavefronts + c.lds_write_wavefronts + c.global_wavefronts)
    a = gcounts.gemm_counts(GemmSpec(**{**s.to_dict(), "path": "mfma"}), GemmProblem(1024, 1024, 1024),
                           Target.parse("gfx942"))
    assert a.global_wavefronts > 0
    assert hw_model.step_terms(a, 3, amd)["lds"] == 3 * a.warps * (a.lds_read_wavefronts + a.lds_write_wavefronts)
    doc = _facts_doc()
    for bad in ({"value": 1, "source": "x"}, {"value": True}, "yes"):
        with pytest.raises(SpecError):
            hw_model.parse_facts({**doc, "l1_shares_lds_datapath": bad}, "test")


def _facts_doc(**over):
    doc = json.loads((FACTS / "gfx942.json").read_text())
    doc["facts"].update(over)
    return doc


def test_facts_files_parse_and_every_number_has_a_source():
    for p in FACTS.glob("*.json"):
        doc = json.loads(p.read_text())
        got = hw_model.parse_facts(doc, p.name)
        assert doc["processor"] == p.stem
        for name, f in doc["facts"].items():
            assert f["source"], (p.name, name)
        if isinstance(got, hw_model.HardwareFacts):
            assert set(got.values) == set(hw_model.REQUIRED)
            # every matrix instruction the arch's tables use has cycles
            assert {k for (proc, _, _), v in mma._BY_ARCH.items() if proc == p.stem for k in v.values()} \
                <= set(got.matrix_cycles)


@pytest.mark.parametrize("bad", [{"cus": {"value": -1, "source": "x"}}, {"cus": {"value": 304}},
                                 {"cus": {"value": True, "source": "x"}}, {"made_up": {"value": 1, "source": "x"}}])
def test_malformed_facts_fail_closed(bad):
    with pytest.raises(SpecError):
        hw_model.parse_facts(_facts_doc(**bad), "test")


def test_a_fact_not_public_refuses_with_its_reason():
    got = hw_model.parse_facts(_facts_doc(clock_mhz={"value": None, "source": "not public: no product"}), "t")
    assert isinstance(got, hw_model.Refusal) and "clock_mhz (not public: no product)" in got.reason
    assert isinstance(hw_model.facts_for("gfx1250"), hw_model.Refusal)
    assert isinstance(hw_model.facts_for("gfx942"), hw_model.HardwareFacts)


def test_matrix_cycles_match_the_data_sheet_peak():
    """cycles x CUs x matrix units / clock reproduces each data sheet's dense FP16 peak (1%)."""
    peaks = {"gfx90a": ("mfma_f32_32x32x8f16", 383e12 / 2), "gfx942": ("mfma_f32_32x32x8f16", 1307.4e12),
             "gfx950": ("mfma_f32_32x32x16_f16", 2516.6e12)}
    for proc, (key, peak) in peaks.items():
        f = hw_model.facts_for(proc)
        ins = mma.INSTRS[key]
        flops = 2 * ins.m * ins.n * ins.k / f.matrix_cycles[key] * f.matrix_units * f.cus * f.clock_mhz * 1e6
        assert flops == pytest.approx(peak, rel=0.01), proc


def _cands(arch: str) -> list[Candidate]:
    return [Candidate(s.kernel_name, "-", "gemm", s.to_dict(), Target.parse(arch), get_lane("llvm22"), "default", "g", True,
                      Resources(*([None] * 9)), None) for s in table.enumerate_specs("gemm", arch, "llvm22")]


def test_gfx1250_4096_cubed_no_longer_picks_a_32x32x32_tile():
    """Issue 26: on the gfx1250 tables a 4096^3 gemm put a 32x32x32, 4-wave tile first (tile
    efficiency 1.0 everywhere, then occupancy). gfx1250 has no public CU count or clock, so no
    time is estimated; the efficiency order's reuse rule (bytes staged per MAC) now decides."""
    r = rank(_cands("gfx1250"), GemmProblem(4096, 4096, 4096), Target.parse("gfx1250"))
    assert r.model == "efficiency" and "not public" in r.note
    best = r.best.candidate.spec
    assert (best["block_m"], best["block_n"]) == (128, 128)
    worst_reuse = max(ch.reuse for ch in r.accepted)
    assert r.best.reuse == min(ch.reuse for ch in r.accepted) < worst_reuse


def test_gfx942_ranks_by_estimate_with_a_bound():
    r = rank(_cands("gfx942"), GemmProblem(4096, 4096, 4096), Target.parse("gfx942"))
    assert r.model == "hardware" and r.note is None
    est = [ch.estimate_ms for ch in r.accepted]
    assert est == sorted(est) and all(e > 0 for e in est)
    best = r.best.candidate.spec
    # since issue 37 (the AMD main loop: padded A rows, B staged as K pairs, one exposed load
    # latency a step) a 128 x 64 tile of 2 waves can come first; never a small one
    assert best["block_m"] * best["block_n"] >= 128 * 64 and r.best.bound in ("issue", "compute", "lds", "latency")


PROBE_RAW = Path(__file__).resolve().parents[1] / "bench" / "results" / "bench-raw" / "h200-l2-probe" / "l2-probe.json"


STREAM_RAW = Path(__file__).resolve().parents[1] / "bench" / "results" / "bench-raw" / "h200-run18" / "l2-stream.json"


def test_sm_90_l2_bandwidth_is_the_stream_probes_plateau():
    """l2_bytes_per_clk is bench/l2_stream_probe.py's H200 run: the median of its L2-resident
    (24 MiB) rows at 16 and 32 warps per SM with 4 and 8 stages, where more bytes in flight no
    longer raise the rate; the same copies from a 1 GiB footprint reach at least 90% of the data
    sheet's HBM bandwidth (the method moves what the memory can), and the L2 rows at 2 stages
    rise with warps (bytes in flight) up to the plateau."""
    import statistics

    raw = json.loads(STREAM_RAW.read_text())
    assert raw["device"] == "NVIDIA H200" and raw["sms"] == 132
    rate = "bytes_per_sm_per_clk_at_1980"
    plateau = [r[rate] for r in raw["rows"] if r["where"] == "L2" and r["footprint"] == 24 << 20
               and r["warps_per_sm"] >= 16 and r["stages"] >= 4]
    assert len(plateau) == 4 and max(plateau) / min(plateau) < 1.05
    f = hw_model.facts_for("sm_90")
    assert f.l2_bytes_per_clk == round(statistics.median(plateau), 1)
    src = f.sources["l2_bytes_per_clk"]
    assert src.startswith("microbenchmark: bench/l2_stream_probe.py") and "h200-run18/l2-stream.json" in src
    hbm = max(r["gbps"] for r in raw["rows"] if r["where"] == "HBM")
    assert hbm >= 0.9 * f.hbm_gbps
    two = sorted((r for r in raw["rows"] if r["where"] == "L2" and r["footprint"] == 24 << 20 and r["stages"] == 2),
                 key=lambda r: r["warps_per_sm"])
    assert [r[rate] for r in two] == sorted(r[rate] for r in two) and two[0][rate] < 0.7 * f.l2_bytes_per_clk


def test_sm_90_memory_facts_are_the_h200_probes_measurements():
    """global_latency is bench/l2_probe.py's H200 run (the device's
    numbers, not this code's), and the data bear out what their sources say: the L2-resident
    loaded latency is flat from 4 to 64 warps per SM and every rate is bytes in flight over it
    (Little's law: latency-bound, so the highest rate is a lower bound of the L2's limit), with
    64- and 128-byte pieces alike there; from HBM 64-byte pieces are slower at every count."""
    import statistics

    raw = json.loads(PROBE_RAW.read_text())
    assert raw["device"] == "NVIDIA H200" and raw["sms"] == 132
    l2 = [r for r in raw["rows"] if r["where"] == "L2"]
    hbm = [r for r in raw["rows"] if r["where"] == "HBM"]
    assert len(l2) == len(hbm) == 10
    f = hw_model.facts_for("sm_90")
    assert f.global_latency == round(statistics.median(r["cycles_per_load_median"] for r in l2))
    # the latency-bound probe's highest rate is below the L2's limit the stream probe measures
    assert max(r["bytes_per_sm_per_clk_at_1980"] for r in l2) < 1.35 * f.l2_bytes_per_clk
    src = f.sources["global_latency"]
    assert src.startswith("microbenchmark: bench/l2_probe.py") and "2026-12-03" in src
    assert "bench/results/bench-raw/h200-l2-probe/l2-probe.json" in src and "--json $OUT/l2-probe.json" in src
    lat = [r["cycles_per_load_median"] for r in l2]
    assert max(lat) / min(lat) < 1.05  # no queueing from 4 to 64 warps per SM
    for seg in (64, 128):
        rows = sorted((r for r in l2 if r["seg_bytes"] == seg), key=lambda r: r["warps_per_sm"])
        lo, hi = rows[0], rows[-1]
        grew = hi["bytes_per_sm_per_clk_at_1980"] / lo["bytes_per_sm_per_clk_at_1980"]
        assert grew == pytest.approx(hi["bytes_in_flight_per_sm"] / lo["bytes_in_flight_per_sm"], rel=0.05)
    by = {(r["where"], r["seg_bytes"], r["warps_per_sm"]): r["bytes_per_sm_per_clk_at_1980"] for r in raw["rows"]}
    for w in (4, 8, 16, 32, 64):
        assert by[("L2", 64, w)] == pytest.approx(by[("L2", 128, w)], rel=0.03)
        assert by[("HBM", 64, w)] < by[("HBM", 128, w)]


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("k", [32, 64, 96, 128, 320, 4096])
def test_async_pipeline_latencies_follow_its_schedule(stages, k):
    """The latencies a block of the cp.async pipeline waits in all, against an event walk of the
    lowering's schedule (families/gemm/lower.py docstring): the prologue issues K-tiles 0..S-2 at
    once; iteration kt waits for tile kt, then issues tile kt+S-1. With compute taking no time,
    tile j lands one latency after it is issued, so the last tile lands at the chain's end."""
    spec = GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32,
                    waves=4, vector_width=8, stages=stages)
    steps = -(-k // 32)
    ready: list[float] = []
    for j in range(steps):  # in units of one global latency
        issued = 0.0 if j < stages - 1 else ready[j - (stages - 1)]
        ready.append(issued + 1.0)
    c = gcounts.gemm_counts(spec, GemmProblem(64, 64, k), Target.parse("sm_90"))
    assert c.steps == steps
    assert c.serial_loads * c.steps == pytest.approx(ready[-1])


def test_sm_90_mma_sync_cycles_are_the_microbenchmarks_peak():
    """The H200's mma.sync cycles reproduce the rate bench/mma_peak_h200.py measured (the raw
    file of run 9), not the whitepaper's wgmma peak."""
    raw = json.loads((Path(__file__).parent.parent / "bench/results/bench-raw/h200-run9/mma-peak.json").read_text())
    f = hw_model.facts_for("sm_90")
    for key in ("mma_f32_16x8x16_f16", "mma_f32_16x8x16_bf16"):
        ins = mma.INSTRS[key]
        flops = 2 * ins.m * ins.n * ins.k / f.matrix_cycles[key] * f.matrix_units * f.cus * f.clock_mhz * 1e6
        assert flops == pytest.approx(raw["mma_sync_peak_tflops"] * 1e12, rel=0.005)


def test_sm_90_wgmma_cycles_follow_from_the_whitepaper_peak():
    """The wgmma unit (a warp's 16x8x16 quarter, 2048 FMA) at the Hopper whitepaper's dense FP16
    989.4 TFLOPS, 132 SMs x 4 Tensor Cores at its 1,830 MHz boost (the numbers its source states);
    the model's peak at the data sheet clock sits above what cuBLAS's wgmma kernel measured on
    this H200 (run 9's raw file) and that above the measured mma.sync rate."""
    f = hw_model.facts_for("sm_90")
    fma_per_clk = 989.4e12 / 2 / (132 * 4 * 1830e6)  # per Tensor Core
    raw = json.loads((Path(__file__).parent.parent / "bench/results/bench-raw/h200-run9/mma-peak.json").read_text())
    for key in ("wgmma_f32_m64n8k16_f16", "wgmma_f32_m64n8k16_bf16"):
        assert f.matrix_cycles[key] == pytest.approx(16 * 8 * 16 / fma_per_clk, rel=0.005)
        for fact in ("1,830 MHz", "989.4", "132 SMs", "4 Tensor Cores") if key.endswith("_f16") else ("989.4",):
            assert fact in f.sources[f"matrix:{key}"], (key, fact)
        model_peak = 2 * 16 * 8 * 16 / f.matrix_cycles[key] * f.matrix_units * f.cus * f.clock_mhz * 1e6
        assert raw["mma_sync_peak_tflops"] * 1e12 < raw["torch_8192_tflops"] * 1e12 < model_peak


@pytest.mark.parametrize("tile", [(128, 128, 64, 4), (128, 256, 64, 8), (64, 64, 32, 4), (192, 128, 64, 8),
                                  (128, 192, 64, 8)])
def test_async_copy_int_ops_are_the_loop_ir(tile):
    """GEMM_ASYNC_OPS_PER_COPY against the IR the lowerer emits for one K-tile's copies in the
    main loop (families/gemm/lower_async.py issue_copies): the instructions before the loop body's last
    cp.async, per copy, are the constant plus the per-operand ones (the tile's K offset and
    bases) spread over the copies -- under one more per copy."""
    from rocke_aot.aot.lower import lower

    bm, bn, bk, w = tile
    spec = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=bm, block_n=bn, block_k=bk, waves=w,
                    vector_width=8, stages=3, group_m=8)
    body = lower("gemm", spec, "sm_90", "llvm22").ir.split("k.body:", 1)[1].splitlines()
    last = max(i for i, line in enumerate(body) if "cp.async.cg" in line)
    copies = sum("cp.async.cg" in line for line in body[:last + 1])
    ops = sum(1 for line in body[:last + 1] if line.strip() and "cp.async.cg" not in line)
    c = gcounts.gemm_counts(spec, GemmProblem(4096, 4096, 4096), Target.parse("sm_90"))
    assert copies == c.global_loads
    assert gcounts.GEMM_ASYNC_OPS_PER_COPY <= ops / copies < gcounts.GEMM_ASYNC_OPS_PER_COPY + 1.5


# -- the conv engine's fragment reads and a block's own chain (docs/selection.md, "conv_direct_fwd:
#    what the counts and the chain missed") --

_SM90_MMA = mma.INSTRS["mma_f32_16x8x16_f16"]


def test_conv_fragment_loads_merge_where_pairs_are_consecutive_and_aligned():
    """By hand, mma.sync m16n8k16 (PTX ISA fragment layout, rocke_aot/mma.py): lane l holds A
    elements (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1), then the same at K + 8 (g = l // 4,
    t = l % 4), and B elements (2t, g), (2t+1, g), then K + 8. Each pair is two consecutive K
    at an even K. Where K is the contiguous index (conv_direct_fwd's halo [..][c_chunk] and
    weights [col][tap][c_chunk], conv_dgrad_patch's A [row][k_chunk + 8]) a pair is one 4-byte
    aligned word: one load of 2 elements; where K strides rows (conv_dgrad_patch's B
    [k_chunk][cols + 8]) nothing merges; an odd row stride misaligns every other row."""
    from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
    from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec

    fwd = ConvDirectFwdSpec(path="mma", c=64, k=64, tile_h=8, tile_w=8, tile_k=64, c_chunk=16)
    dg = ConvDgradPatchSpec(path="mma", c=3, p=14, tile_h=4, tile_w=4, r_blk=14, k_chunk=16)
    ins = _SM90_MMA
    run = counts.merged_run
    assert run(ins.a_coord, ins.a_per_lane, 32, fwd.lds_a_index, 2) == 2
    assert run(ins.b_coord, ins.b_per_lane, 32, fwd.lds_b_index, 2) == 2
    assert run(ins.a_coord, ins.a_per_lane, 32, dg.lds_a_index, 2) == 2
    assert run(ins.b_coord, ins.b_per_lane, 32, dg.lds_b_index, 2) == 1
    assert run(ins.a_coord, ins.a_per_lane, 32, lambda r, k: r * 17 + k, 2) == 1  # odd rows: misaligned
    assert run(ins.a_coord, ins.a_per_lane, 32, lambda r, k: r * 16 + k, 2) == 2


def test_a_fragment_two_tiles_of_a_wave_share_is_loaded_once():
    """By hand: 2 x 2 tiles over 2 waves, 2 tiles a wave: wave 0 computes tiles 0 and 2 (row
    tiles 0 and 1, column tile 0), wave 1 tiles 1 and 3: 2 A and 1 B fragment each. One row tile
    of 74 over 8 waves, 10 slots a wave (the last round's spare slots wrap to tiles 0..5): 1 A
    and 10 B fragments. conv_direct_fwd gives each wave one tile: 1 and 1."""
    assert counts.distinct_fragments(4, 2, 2, 2) == (2.0, 1.0)
    assert counts.distinct_fragments(74, 74, 8, 10) == (1.0, 10.0)
    assert counts.distinct_fragments(32, 8, 32, 1) == (1.0, 1.0)


def test_conv_dgrad_patch_fragment_reads_are_the_sass_count():
    """conv_dgrad_patch f16 p14 c3 mma t4x4 r14 kc16 on sm_90: 16 rows (one row tile), 592 padded
    columns = 74 column tiles over 8 warps, 10 a warp: per step a warp reads A once (4 pairs)
    and 10 B fragments of 4 single elements: 44 LDS, as cuobjdump -sass of its cubin lists in the
    K loop (4 LDS and 40 LDS.U16 beside 10 HMMA.16816.F32, CUDA 13 ptxas; docs/selection.md)."""
    from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
    from rocke_aot.variants.families import get_family

    spec = ConvDgradPatchSpec(dtype="f16", c=3, p=14, tile_h=4, tile_w=4, r_blk=14, k_chunk=16, path="mma")
    fam = get_family("conv_dgrad_patch")
    p = fam.problem_from({"c": 3, "dtype": "f16", "h": 448, "k": 1024, "n": 4, "p": 14, "w": 448})
    c = fam.model.counts(spec, p, Target.parse("sm_90"), 32)
    assert (c.mma, c.lds_reads) == (10, 4 + 10 * 4)


def test_conv_direct_fwd_fragment_reads_are_the_ptx(llvm22):
    """conv_direct_fwd's per-step fragment reads against the PTX LLVM emits for the tap loop (one
    tap, 9 taps a step): a 32-bit ld.shared, or a pair of 16-bit ones at [x] and [x+2] (ptxas
    makes one LDS of each pair: cuobjdump -sass shows 6 LDS per HMMA.16816.F32), is one load."""
    import re

    from rocke_aot.aot.compiler import compile_llvmlite
    from rocke_aot.aot.lower import lower
    from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
    from rocke_aot.variants.families import get_family

    fam = get_family("conv_direct_fwd")
    for tk in (64, 16):
        spec = ConvDirectFwdSpec(dtype="f16", c=64, k=64, tile_h=8, tile_w=8, tile_k=tk, c_chunk=16, path="mma")
        ptx = compile_llvmlite(llvm22.python, lower("conv_direct_fwd", spec, "sm_90", "llvm22").ir, "sm_90").ptx
        wide = len(re.findall(r"\bld\.shared\.b32\b", ptx))
        halves = re.findall(r"\bld\.shared\.b16\s+%\w+,\s*\[(%\w+)(\+2)?\]", ptx)
        assert sorted(h for h in halves if h[1]) == sorted((b, "+2") for b, _ in halves if not _)  # pairs
        assert len(re.findall(r"\bmma\.sync\.aligned\b", ptx)) == 1  # one tap of one k-step
        c = fam.model.counts(spec, fam.problem_from({"c": 64, "k": 64, "r": 3, "s": 3, "n": 8, "h": 56, "w": 56}), Target.parse("sm_90"), 32)
        assert c.lds_reads == 9 * (wide + len(halves) // 2) == 9 * 6


def test_a_block_alone_takes_its_own_throughput():
    """One block's chain: a block of 32 warps whose step is 141 LDS cycles a warp cannot finish
    a step in less than 32 x 141 cycles of the CU's one shared-memory data path, even alone;
    single-buffered, its own staging latencies come on top (nothing else of its own to overlap
    them with). With 3 such blocks resident the throughput term triples, the chain does not."""
    f = hw_model.facts_for("sm_90")
    c = counts.KernelCounts(
        threads=1024, wave_size=32, steps=4, instr="mma_f32_16x8x16_f16", mma=9, lds_reads=54,
        lds_read_wavefronts=108, fma=0, cvt=0, global_loads=11, lds_writes=11, lds_write_wavefronts=11,
        global_wavefronts=22, serial_loads=3, int_ops=100, staged_bytes=21632, barriers=2, double_buffer=False,
        store_bytes=8192, stores=4, unique_bytes=1, macs=1)
    one = hw_model.step_terms(c, 1, f)
    assert one["lds"] == 32 * 141
    chain = 3 * f.global_latency + 2 * f.barrier_latency + f.lds_latency
    assert one["latency"] == pytest.approx(32 * 141 + chain)
    three = hw_model.step_terms(c, 3, f)
    assert three["lds"] == 3 * 32 * 141 and three["latency"] == one["latency"]


def test_a_phased_block_adds_its_matrix_and_vector_time():
    """KernelCounts.phased (attention: S = Q K^T, its softmax, P V in turn, the warps held at one phase by
    the step's barriers): one block's chain holds its matrix term plus its vector term, by hand from the
    facts (8 warps of 64 mma.sync m16n8k16 at 6.71 cycles on 4 tensor cores; 256 threads of 256 FMA on 128
    lanes); unphased, the larger alone. The throughput terms are the same either way, and a second resident
    block doubles them, not the chain."""
    f = hw_model.facts_for("sm_90")
    kw = dict(threads=256, wave_size=32, steps=4, instr="mma_f32_16x8x16_f16", mma=64, lds_reads=0,
              lds_read_wavefronts=0, fma=256, cvt=0, global_loads=0, lds_writes=0, lds_write_wavefronts=0,
              global_wavefronts=0, serial_loads=0, int_ops=0, staged_bytes=0, barriers=2, double_buffer=True,
              store_bytes=0, stores=0, unique_bytes=1, macs=1)
    matrix, vector = 8 * 64 * 6.71 / 4, 256 * 256 / 128  # 858.88 and 512 cycles of one block
    issue = 8 * (64 + 256 + 2) / 4
    assert issue < matrix  # the matrix term is the largest of one block's own
    chain = 2 * f.barrier_latency + f.lds_latency
    plain, phased = counts.KernelCounts(**kw), counts.KernelCounts(**kw, phased=True)
    for g in (1, 2):
        a, b = hw_model.step_terms(plain, g, f), hw_model.step_terms(phased, g, f)
        assert a["matrix"] == b["matrix"] == pytest.approx(g * matrix)
        assert a["vector"] == b["vector"] == pytest.approx(g * vector)
        assert a["latency"] == pytest.approx(matrix + chain)
        assert b["latency"] == pytest.approx(matrix + vector + chain)
        assert {k: a[k] for k in a if k != "latency"} == {k: b[k] for k in b if k != "latency"}


def test_attention_counts_are_phased_and_gemm_counts_are_not():
    from rocke_aot.families.attention.counts import attention_counts, native_counts
    from rocke_aot.families.attention.native import AttentionSpec
    from rocke_aot.families.attention.problem import AttentionProblem
    t = Target.parse("sm_90")
    p = AttentionProblem(batch=1, seqlen_q=512, seqlen_k=512, heads_q=8, heads_kv=8, head_dim=128, causal=True)
    tri = next(s for s in table.enumerate_specs("triton_attention", t, get_lane("llvm22"))
               if s.HEAD_DIM == 128 and s.CAUSAL and not (s.VARLEN or s.PAGED or s.PACK_GQA))
    assert attention_counts(tri, p, t).phased
    nat = AttentionSpec(dtype="f16", head_dim=128, causal=1, warps=4, path="mma", block_n=32)
    assert native_counts(nat, p, t).phased
    gemm = GemmSpec(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4, path="mma",
                    double_buffer=False, vector_width=4)
    assert not gcounts.gemm_counts(gemm, GemmProblem(1024, 1024, 1024), t).phased


@pytest.mark.parametrize("bm,bn,bk,waves", [(128, 128, 64, 4), (256, 128, 64, 8), (64, 64, 32, 4)])
def test_async_copies_write_both_operands_into_lds(bm, bn, bk, waves):
    """The cp.async pipeline lands A's and B's tiles in shared memory: per warp and step, the
    LDS write wavefronts are the staged bytes over the warps in 128-byte lines (16 bytes a lane,
    rows of 16-byte chunks without conflicts), both operands -- the count once held B's alone."""
    from rocke_aot.families.gemm.spec import GemmSpec
    from rocke_aot.targets import Target
    from rocke_aot.variants.problems import GemmProblem

    spec = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=bm, block_n=bn, block_k=bk, waves=waves,
                    vector_width=8, stages=3, group_m=8)
    c = gcounts.gemm_counts(spec, GemmProblem(m=4096, n=4096, k=4096, dtype="f16"), Target.parse("sm_90"))
    assert c.lds_write_wavefronts == (bm + bn) * bk * 2 / (waves * 128)


def test_a_192_row_tile_is_counted_and_fills_the_waves_of_3072_cubed():
    """The 192 x 128 tile (GemmSpec WAVE_FILL_BLOCKS): 16 x 24 = 384 tiles on 3072^3 (the launch
    contract's count), 4 x 2 warps of 3 x 8 mma.sync tiles, 6 + 4 copies a thread per 64-deep step
    (192 and 64 rows of 8 vectors, 16 vectors over 256 threads); at one block a CU both it and
    256 x 128 take 3 rounds of tiles (384 and 288 over 132), its rounds 3/4 as long: the model
    puts it below 256 x 128 at the same depth."""
    sm90 = Target.parse("sm_90")
    p = GemmProblem(3072, 3072, 3072, "f16", "f16")
    wide = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=192, block_n=128, block_k=64, waves=8,
                    vector_width=8, stages=3, group_m=8)
    assert wide.launch_formulas().tiles(p) == 384
    c = gcounts.gemm_counts(wide, p, sm90)
    assert (c.mma, c.global_loads, c.steps, c.macs) == (3 * 8 * 4, 6 + 4, 48, 192 * 128 * 64)
    assert c.staged_bytes == (192 + 128) * 64 * 2 and c.store_bytes == 192 * 128 * 2
    r = rank([ch for ch in _cands("sm_90") if ch.spec["in_dtype"] == "f16" and ch.spec["out_dtype"] == "f16"],
             p, sm90)
    est = {ch.candidate.key: ch.estimate_ms for ch in r.accepted}
    for bk in (32, 64):
        assert est[f"gemm_f16_f16_mma_192x128x{bk}_w8_v8_s3_g8"] < est[f"gemm_f16_f16_mma_256x128x{bk}_w8_v8_s3_g8"]


def test_conv_direct_fwd_counts_shared_across_channel_counts():
    """fwd_counts caches a spec's per-step counts under its layout (counts.layout_of: c, k and the
    padding fixed): every admitted spec of the ResNet-50 layers (bench/problems/models/resnet50.json)
    on gfx942 and sm_90 counts the same through the shared entry as through its own."""
    from rocke_aot.aot.builder import Workload
    from rocke_aot.families.conv_direct_fwd import counts as C
    from rocke_aot.variants import models as M

    work = Workload(Path(__file__).resolve().parents[1] / "bench" / "problems" / "models" / "resnet50.json")
    for arch in ("gfx942", "sm_90"):
        target = Target.parse(arch)
        specs, _ = work.specs("conv_direct_fwd", target, "llvm22")
        assert len(specs) > 100
        for spec in specs[::7]:
            assert C._fwd_static(C.layout_of(spec), target, 32) == C._fwd_static.__wrapped__(spec, target, 32), spec
            if spec.path != "fma":  # the model's fragment wavefronts and threads through the layout too
                assert M._wavefronts_per_instr(C.layout_of(spec), target) == \
                    M._wavefronts_per_instr.__wrapped__(spec, target), spec
            assert M.geometry_of(C.layout_of(spec), target) == spec.geometry(target), spec


def test_gemm_lines_at_line_equivalent_strides():
    """gemm's global-line count is memoized at line-equivalent strides (variants/counts.py
    line_stride): for specs of every pipeline on sm_90 and gfx942 and strides around and far past
    the rows' width, the count through it equals the count at the stride itself."""
    from rocke_aot.families.gemm import counts as G
    from rocke_aot.variants.table import enumerate_specs

    strides = (64, 96, 200, 256, 264, 1000, 1024, 1032, 4096, 4104, 11008, 14336)
    for arch in ("sm_90", "gfx942"):
        target = Target.parse(arch)
        specs = list(enumerate_specs("gemm", arch, "llvm22"))
        for spec in specs[:: max(1, len(specs) // 40)]:
            for k, n in zip(strides, reversed(strides)):
                assert G.gemm_lines(spec, target, k, n) == G._gemm_lines.__wrapped__(spec, target, k, n), (spec, k, n)


def _lines_by_element(threads, wave, total, vec, eb, offset, run=1):
    """The reference for global_lines: every vector of the first warp of each round, one by one."""
    out = 0
    for it in range(-(-total // threads)):
        lanes = range(it * threads, min(it * threads + min(wave, threads), total))
        out += len({line for c in lanes
                    for line in range(offset(c) * eb // 128, (offset(c) * eb + vec * eb - 1) // 128 + 1)})
    return out


def test_line_runs_count_the_lines_vector_by_vector(monkeypatch):
    """global_lines counts a caller's contiguous runs (a channel chunk of NHWC, a row of a gemm
    tile) as one span each: for the specs the ResNet-50 layers admit (conv_direct_fwd), the
    patch layers' (conv_dgrad_patch) and every gemm pipeline's, on sm_90 and gfx942, the lines
    equal those of the element-by-element reference above."""
    from rocke_aot.aot.builder import Workload
    from rocke_aot.families.conv_dgrad_patch import counts as P
    from rocke_aot.families.conv_direct_fwd import counts as C
    from rocke_aot.families.gemm import counts as G
    from rocke_aot.variants.table import enumerate_specs

    models = Path(__file__).resolve().parents[1] / "bench" / "problems" / "models"
    cases = []
    for arch in ("sm_90", "gfx942"):
        target = Target.parse(arch)
        work = Workload(models / "resnet50.json")
        specs, _ = work.specs("conv_direct_fwd", target, "llvm22")
        cases += [(C._fwd_lines.__wrapped__, C, (s, target, w, c)) for s in specs[::17] for w, c in ((56, 64), (14, 256))]
        patch = list(enumerate_specs("conv_dgrad_patch", arch, "llvm22"))
        cases += [(P._patch_lines.__wrapped__, P, (s, target, 230, 64)) for s in patch[:: max(1, len(patch) // 12)]]
        gemm = list(enumerate_specs("gemm", arch, "llvm22"))
        cases += [(G._gemm_lines.__wrapped__, G, (s, target, 1032, 4104)) for s in gemm[:: max(1, len(gemm) // 12)]]
    assert len(cases) > 40
    for fn, mod, args in cases:
        got = fn(*args)
        with monkeypatch.context() as m:
            m.setattr(mod, "global_lines", _lines_by_element)
            assert got == fn(*args), args


def test_lds_cycles_of_back_to_back_lanes():
    """lds_cycles' count for lanes back to back (a staging copy's) equals the rule counted word by
    word: the most distinct 4-byte words one of the banks serves."""
    import random

    def by_word(spans, banks):
        words = {w for s, n in spans for w in range(s // 4, -(-(s + n) // 4))}
        return max([sum(1 for w in words if w % banks == b) for b in range(banks)])

    rnd = random.Random(7)
    for _ in range(300):
        size, lanes, banks = rnd.choice((1, 2, 4, 8, 16)), rnd.choice((1, 7, 32, 64)), rnd.choice((32, 64))
        start = rnd.randrange(0, 4096)
        spans = [(start + i * size, size) for i in range(lanes)]
        assert counts.lds_cycles(iter(spans), banks) == by_word(spans, banks), (size, lanes, banks, start)
    assert counts.lds_cycles(iter([(0, 2), (256, 2)]), 32) == 2  # not back to back: the word-by-word path
    assert counts.lds_cycles(iter([]), 32) == 0
