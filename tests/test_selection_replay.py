"""Selection against measured times: the package's own rank() replayed over every candidate an
H200 timed (docs/bench-raw/h200-run6 and h200-run7: two measurements, 15 repeats each, taken
with the constants shipped now).

The reference is the GPU's measured times, which no code here produced; the run's own summary
is checked too, so the replay and the device's ranking are the same function. A change to the
time model, the work models, the residency rules, the grid or the constants that makes the
ranking worse on these 78 problems fails here before it reaches a device (docs/bench.md)."""

from __future__ import annotations

import gzip
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank

RAW = Path(__file__).resolve().parents[1] / "docs" / "bench-raw"
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
        cands = [Candidate(r["key"], r["key"], family, specs[r["kernel"]], "sm_90", r["lane"], "default", "g", True,
                           Resources(**{k: v for k, v in r["resources"].items() if k in fields}),
                           datetime(2026, 12, 2, tzinfo=timezone.utc)) for r in rows]
        best = rank(cands, entry.problem_from(pr["problem"]), SM90, model=model).best
        times = {r["key"]: r["median_ms"] for r in rows}
        out.append(min(times.values()) / times[best.key])
    return out


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("which", ["quality", "holdout"])
def test_replay_reproduces_the_devices_ranking(run, family, which):
    doc = _load(run, f"{which}-{family}")
    got = _replay(family, doc)
    measured = [p["selection_quality"] for p in doc["problems"]]
    assert got == pytest.approx(measured, rel=1e-9)  # the device ranked with this very code


@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("family", FAMILIES)
def test_quality_goal_on_measured_times(run, family):
    """Issue 13's goal, met for every family in both runs: median >= 0.95, none below 0.7,
    on the fitted problem set and on the hold-out set (problems no fit has seen) alike."""
    for which in ("quality", "holdout"):
        q = _replay(family, _load(run, f"{which}-{family}"))
        assert statistics.median(q) >= 0.95, (which, sorted(q))
        assert min(q) >= 0.7, (which, sorted(q))


def test_a_worse_ranking_fails_the_goal(monkeypatch):
    """The goal check can fail: ranking by tile efficiency alone (the rule of arches without
    measured constants, and of the first H100 qualification) misses it on the same times."""
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
