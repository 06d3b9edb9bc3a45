"""Measured beats modeled (variants/measured.py, rank(measurements=)): the H200 runs in the
repository replayed as measurements. Where a problem has them, selection picks the measured
best (the device's own times, which no code here produced); elsewhere the model's pick, exactly;
a measurement never applies to another artifact generation, processor or (unless asked) problem."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.errors import SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family
from rocke_aot.variants.measured import Measurement, applicable, shape_class_of
from rocke_aot.variants.selection import rank

RAW = Path(__file__).resolve().parents[1] / "bench" / "results" / "bench-raw"
SM90 = Target.parse("sm_90")
FIELDS = set(Resources.__dataclass_fields__)


def _doc(name: str) -> dict:
    for p in (RAW / "h200-run6" / f"{name}.json", RAW / "h200-run6" / f"{name}.json.gz"):
        if p.exists():
            return json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())
    raise FileNotFoundError(name)


def _problems(family: str, name: str):
    doc = _doc(name)
    specs = {s.kernel_name: s.to_dict() for s in table.enumerate_specs(family, "sm_90", "llvm22")}
    for pr in doc["problems"]:
        rows = [r for r in pr["results"] if r["median_ms"] and not r["error"] and r["kernel"] in specs]
        cands = [Candidate(r["key"], r["key"], family, specs[r["kernel"]], Target.parse("sm_90"), get_lane(r["lane"]), "default", "gen-1",
                           True, Resources(**{k: v for k, v in r["resources"].items() if k in FIELDS}),
                           datetime(2026, 12, 3, tzinfo=timezone.utc)) for r in rows]
        ms = [Measurement(r["key"], "gen-1", "sm_90", doc["device"], family, pr["problem"], r["median_ms"], 15,
                          source="bench/results/bench-raw/h200-run6") for r in rows]
        yield get_family(family).problem_from(pr["problem"]), pr["problem"], cands, ms, rows


@pytest.mark.parametrize("family", ["gemm", "conv_direct_fwd", "conv_dgrad_patch"])
def test_measured_problems_pick_the_measured_best_and_the_rest_the_models_pick(family):
    probs = list(_problems(family, f"quality-{family}"))
    recorded = [m for i, (_, _, _, ms, _) in enumerate(probs) if i % 2 == 0 for m in ms]  # every other problem
    for i, (problem, _, cands, _, rows) in enumerate(probs):
        got = rank(cands, problem, SM90, measurements=recorded)
        plain = rank(cands, problem, SM90)
        if i % 2 == 0:
            fastest = min(rows, key=lambda r: (r["median_ms"], r["key"]))
            assert got.best.candidate.key == fastest["key"]
            assert got.best.basis == "measured" and got.best.measured.median_ms == fastest["median_ms"]
            assert all(c.basis == "measured" for c in got.accepted)  # every candidate was timed
            times = [c.measured.median_ms for c in got.accepted]
            assert times == sorted(times)
        else:
            assert [c.candidate.key for c in got.accepted] == [c.candidate.key for c in plain.accepted]
            assert all(c.basis == "hardware" for c in got.accepted)  # "auto": the hardware model first


def test_a_measurement_never_outlives_its_generation_or_leaves_its_processor():
    problem, raw, cands, ms, _ = next(_problems("gemm", "quality-gemm"))
    rebuilt = [c._replace(generation="gen-2") if hasattr(c, "_replace") else
               Candidate(*[getattr(c, f) if f != "generation" else "gen-2" for f in c.__dataclass_fields__])
               for c in cands]
    assert applicable(ms, "gemm", problem, SM90, rebuilt) == {}
    r = rank(rebuilt, problem, SM90, measurements=ms)
    assert all(c.basis == "hardware" for c in r.accepted)
    other = [Measurement(m.key, m.generation, "gfx942", "MI300X", m.family, m.problem, m.median_ms, 1) for m in ms]
    assert applicable(other, "gemm", problem, SM90, cands) == {}
    gone = [c for c in cands if c.key != ms[0].key]  # an artifact no longer in the store has no candidate
    assert ms[0].key not in applicable(ms, "gemm", problem, SM90, gone)


def test_shape_class_only_when_asked():
    """2048^3 measured; 3000^3 is in the same octaves (2048..4095 in every extent), 4096^3 is not."""
    probs = {json.dumps(raw, sort_keys=True): (p, raw, c, ms, rows) for p, raw, c, ms, rows in _problems("gemm", "quality-gemm")}
    key = next(k for k in probs if json.loads(k)["m"] == json.loads(k)["n"] == json.loads(k)["k"] == 2048)
    _, raw, cands, ms, rows = probs[key]
    near = get_family("gemm").problem_from({**raw, "m": 3000, "n": 3000, "k": 3000})
    far = get_family("gemm").problem_from({**raw, "m": 4096, "n": 4096, "k": 4096})
    assert shape_class_of({**raw, "m": 3000, "n": 3000, "k": 3000}) == shape_class_of(raw)
    assert not applicable(ms, "gemm", near, SM90, cands)
    got = applicable(ms, "gemm", near, SM90, cands, shape_class=True)
    assert set(got) == {r["key"] for r in rows}
    assert not applicable(ms, "gemm", far, SM90, cands, shape_class=True)
    best = rank(cands, near, SM90, measurements=ms, shape_class=True).best
    assert best.basis == "measured" and best.candidate.key == min(rows, key=lambda r: (r["median_ms"], r["key"]))["key"]


def test_ties_and_duplicates_are_deterministic():
    problem, raw, cands, ms, _ = next(_problems("gemm", "quality-gemm"))
    a, b = sorted(ms[:2], key=lambda m: m.key)
    tie = [Measurement(b.key, b.generation, b.arch, b.device, b.family, raw, 1e-3, 5),
           Measurement(a.key, a.generation, a.arch, a.device, a.family, raw, 1e-3, 5),
           # the same key twice: the one of more repeats wins, whatever its time
           Measurement(a.key, a.generation, a.arch, a.device, a.family, raw, 5.0, 50)]
    r = rank(cands, problem, SM90, measurements=tie)
    first = [c.candidate.key for c in r.accepted[:2]]
    assert first == [b.key, a.key]  # a's 50-repeat 5 ms measurement wins over its 5-repeat one
    r2 = rank(list(reversed(cands)), problem, SM90, measurements=list(reversed(tie)))
    assert [c.candidate.key for c in r2.accepted] == [c.candidate.key for c in r.accepted]


@pytest.mark.parametrize("bad", [dict(median_ms=0.0), dict(median_ms=float("nan")), dict(repeats=0),
                                 dict(repeats=True), dict(key=""), dict(problem=[1])])
def test_malformed_measurements_are_refused(bad):
    good = dict(key="k", generation="g", arch="sm_90", device="d", family="gemm", problem={"m": 1},
                median_ms=1.0, repeats=3)
    with pytest.raises(SpecError):
        Measurement(**{**good, **bad})
