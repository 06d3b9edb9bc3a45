"""Selection against measured times: the package's own rank() replayed over every candidate an
H200 timed (bench/results/bench-raw/h200-run6 and h200-run7: two measurements, 15 repeats each, taken
with the constants shipped now).

The reference is the GPU's measured times, which no code here produced: a problem's quality is
its fastest measured candidate's time over the time of the candidate rank() puts first.

Two kinds of problem set, named as such in every test:
    hold-out   bench/problems/holdout-*.json: problems no fit has seen (out of sample). The goal
               (median >= 0.95, none below 0.7) is claimed on these; these are the figures the
               docs quote (docs/bench.md "The goal and where it stands").
    in-sample  the "quality" sets: the problems bench/fit_perf.py fitted the shipped constants
               (variants/perf_constants/sm_90.json) on. Meeting the goal there says the fit holds
               on its own data, nothing about new problems: a regression guard, not a quality claim.
Separately, the replay is checked to be the device's own ranking (each problem's quality equal to
the figure the run's summary recorded): a consistency check of the replay, not a quality figure,
since the device computed that figure with this same rank(). A change to the time model, the work
models, the residency rules, the grid or the constants that makes the ranking worse on these 78
problems fails here before it reaches a device (docs/bench.md)."""

from __future__ import annotations

import gzip
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank

RAW = Path(__file__).resolve().parents[1] / "bench" / "results" / "bench-raw"
RUNS = ("h200-run6", "h200-run7")
SM90 = Target.parse("sm_90")
FAMILIES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")


def _load(run: str, name: str) -> dict:
    for p in (RAW / run / f"{name}.json", RAW / run / f"{name}.json.gz"):
        if p.exists():
            return json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())
    raise FileNotFoundError(name)


def _specs(family: str) -> dict[str, dict]:
    return {s.kernel_name: s.to_dict() for s in table.enumerate_specs(family, "sm_90", "llvm22")}


def _replay(family: str, doc: dict, model: str = "fitted") -> list[float]:
    # the default: the fitted model, which "auto" was on sm_90 when runs 4-8 ranked on the device
    specs, entry = _specs(family), get_family(family)
    fields = set(Resources.__dataclass_fields__)
    out = []
    for pr in doc["problems"]:
        rows = [r for r in pr["results"] if r["median_ms"] and not r["error"]]
        cands = [Candidate(r["key"], r["key"], family, specs[r["kernel"]], Target.parse("sm_90"), get_lane(r["lane"]), "default", "g", True,
                           Resources(**{k: v for k, v in r["resources"].items() if k in fields}),
                           datetime(2026, 12, 2, tzinfo=timezone.utc)) for r in rows]
        best = rank(cands, entry.problem_from(pr["problem"]), SM90, model=model).best
        times = {r["key"]: r["median_ms"] for r in rows}
        out.append(min(times.values()) / times[best.key])
    return out


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("which", ["quality", "holdout"])
def test_the_replay_is_the_devices_own_ranking(run, family, which):
    """Consistency, not quality: the device computed these figures with this same rank()."""
    doc = _load(run, f"{which}-{family}")
    got = _replay(family, doc)
    recorded = [p["selection_quality"] for p in doc["problems"]]
    assert len(got) >= 5 and got == pytest.approx(recorded, rel=1e-9)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("family", FAMILIES)
def test_quality_goal_out_of_sample_on_the_hold_out_problems(run, family):
    """Issue 13's goal on problems no fit has seen: median >= 0.95, none below 0.7, every family,
    both runs (the figures docs/bench.md quotes: gemm 0.991 / 0.765 and 0.996 / 0.765, conv_direct_fwd
    0.974 / 0.859 and 0.974 / 0.870, conv_dgrad_patch 0.990 / 0.840 and 0.997 / 0.807)."""
    q = _replay(family, _load(run, f"holdout-{family}"))
    assert len(q) >= 5
    assert statistics.median(q) >= 0.95, sorted(q)
    assert min(q) >= 0.7, sorted(q)


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("family", FAMILIES)
def test_in_sample_the_fit_still_meets_the_goal_on_its_own_problems(run, family):
    """In-sample (the problems the constants were fitted on): a regression guard for the fit, not a
    quality claim (module doc)."""
    q = _replay(family, _load(run, f"quality-{family}"))
    assert len(q) >= 7
    assert statistics.median(q) >= 0.95, sorted(q)
    assert min(q) >= 0.7, sorted(q)


def test_a_worse_ranking_fails_the_goal(monkeypatch):
    """The goal check can fail: ranking by tile efficiency alone (the rule of arches without
    measured constants, and of the first H100 qualification) misses it on the same times
    (in-sample set: the efficiency rule fits nothing, so for it no set is in-sample)."""
    q = _replay("conv_dgrad_patch", _load(RUNS[0], "quality-conv_dgrad_patch"), model="efficiency")
    assert statistics.median(q) < 0.95 or min(q) < 0.7, sorted(q)


# -- the hardware-fact model (variants/hw_model.py, variants/hw_facts/sm_90.json): constants from
#    NVIDIA's published H200 numbers, public microbenchmarks and the H200's own memory probe
#    (bench/l2_probe.py: global_latency, l2_bytes_per_clk) only, never fitted to these runs --

# conv_direct_fwd's problem set missed the median goal from the probe's measured latency (0.899 /
# 0.895 in runs 6 / 7) until the conv engine's fragment loads were counted as the compiler merges
# them and a block's chain took its own throughput terms (docs/selection.md, "conv_direct_fwd: what
# the counts and the chain missed"): 0.951 / 0.943. It is still missed on the newer runs 12 and 13
# (0.921 / 0.920), which bench/replay_models.py reports.
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("family, which", [(f, w) for f in FAMILIES for w in ("quality", "holdout")])
def test_hardware_facts_alone_reach_the_median_goal(run, family, which):
    """Issue 26's goal for the hardware-fact model: median >= 0.93 on the problem set and on the
    hold-out set of every family, in both runs (docs/selection.md has the table beside the
    fitted model's)."""
    q = _replay(family, _load(run, f"{which}-{family}"), model="hardware")
    assert statistics.median(q) >= 0.93, (which, sorted(q))


def test_hardware_facts_alone_leave_no_problem_below_the_floor():
    """The other half of the goal: no problem below 0.7 with hardware facts alone, in both runs,
    on every family's problem and hold-out sets. Two gemm hold-out problems (m=512 n=4096 k=1024,
    m=4096 n=512 k=2048) were at 0.57-0.58 with the papers' global latency (480 cycles) and no
    line count; the counts' 128-byte lines through the L1/shared data path
    (variants/counts.py global_wavefronts) lifted them, and so does, without that count, the
    H200 probe's measured loaded latency (331 cycles): docs/selection.md."""
    below = {}
    for run in RUNS:
        for family in FAMILIES:
            for which in ("quality", "holdout"):
                q = _replay(family, _load(run, f"{which}-{family}"), model="hardware")
                below[(run, family, which)] = sorted(x for x in q if x < 0.7)
    assert all(v == [] for v in below.values()), below


# -- runs 18 and 20: the gemm sets with split-K (128 x 128 at split 1, 2, 4) and the 192-wide tiles,
#    every candidate timed on the H200 (docs/selection.md "Runs 18 and 20", "The step's one rule") --
SPLIT_RUNS = ("h200-run18", "h200-run20")


@pytest.mark.parametrize("run", SPLIT_RUNS)
@pytest.mark.parametrize("which", ["quality", "holdout"])
def test_hardware_facts_rank_split_k_and_192_wide_tiles(run, which):
    """Issue 27's bar for the time model that learned split-K and the 192-wide tiles: median >= 0.95
    on the gemm problem and hold-out sets of both runs (the throughput terms combined by their
    plain max gave 0.922 / 0.924 and 0.935 / 0.933)."""
    q = _replay("gemm", _load(run, f"{which}-gemm"), model="hardware")
    assert statistics.median(q) >= 0.95, (which, sorted(q))


def test_hardware_facts_leave_no_split_k_problem_below_the_floor_in_run_20():
    """None below 0.7 in run 20's gemm sets (m=8 n=1024 k=1024 was at 0.600: split 4 picked, its
    last arriver's reduction not on the kernel's critical path). Run 18 has one, m=17 n=4099 k=33
    at 0.672, a 4.6 MFLOP problem whose candidates all measured 10-17 us: docs/selection.md."""
    for which in ("quality", "holdout"):
        q = _replay("gemm", _load("h200-run20", f"{which}-gemm"), model="hardware")
        assert min(q) >= 0.7, (which, sorted(q))


@pytest.mark.parametrize("run", SPLIT_RUNS)
def test_split_k_loses_where_its_reduction_is_the_tail(run):
    """m=8 n=1024 k=1024: 8 output tiles of 128 x 128 split 4 ways fill 32 SMs with 4 K-tiles each,
    and the last arriver of each tile then reads 4 x 64 KiB of partials alone. Both runs measured
    the unsplit 64 x 64 x 64 kernel faster (8.7 and 8.9 us against 14-15 us); the model must
    order them so."""
    doc = _load(run, "quality-gemm")
    pr = next(p for p in doc["problems"] if (p["problem"]["m"], p["problem"]["n"], p["problem"]["k"]) == (8, 1024, 1024))
    names = ("gemm_f16_f16_mma_64x64x64_w4_v8_s3_g8", "gemm_f16_f16_mma_128x128x64_w4_v8_s3_g8_k4")
    rows = {r["kernel"]: r for r in pr["results"] if r["kernel"] in names}
    assert rows[names[0]]["median_ms"] < rows[names[1]]["median_ms"]  # the device's order
    specs, entry = _specs("gemm"), get_family("gemm")
    fields = set(Resources.__dataclass_fields__)
    cands = [Candidate(r["key"], r["key"], "gemm", specs[n], Target.parse("sm_90"), get_lane(r["lane"]), "default", "g", True,
                       Resources(**{k: v for k, v in r["resources"].items() if k in fields}),
                       datetime(2026, 12, 4, tzinfo=timezone.utc)) for n, r in rows.items()]
    ranking = rank(cands, entry.problem_from(pr["problem"]), SM90, model="hardware")
    assert [c.spec.kernel_name for c in ranking.accepted] == list(names), [c.estimate_ms for c in ranking.accepted]
