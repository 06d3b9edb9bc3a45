"""ptxas's schedule read off sm_90 SASS (aot/sass.py), recorded with the artifact and used by the
hardware model, each against a reference the code under test did not produce.

    hand-written PTX -> ptxas -> cubin -> cuobjdump -sass (real tools, both in CI: scripts/setup.sh)
        stage4: four independent loads, then their four stores, then the barrier: ptxas issues the
                four loads back to back, so the step waits for ~one latency (worked by hand below)
        chain4: the same, each load's address computed from the previous load's value: four
                latencies in a row, plus the three dependent address computations between them
        fma8 / fma8x: a loop of 8 FFMAs, one accumulator (each waits for the last: ~4 cycles an
                instruction) against 8 accumulators (no wait but the loop's own): the chain ratio
                of the first is about 4x, of the second about 1x
    conv_direct_fwd kernels built through the llvm22 lane (the builder's own path): the walk's
        exposed latencies against an independent count on the same SASS text: the number of times
        the step's instructions wait for an outstanding LDG result (each wait exposes at most one
        latency, less the instructions issued since that load)
    the builder's metadata: "schedule" beside the resources, round trip through a real store to
        Candidate.resources.schedule; a malformed schedule refused on write and on read (RecordError
        naming the field); cuobjdump absent: "unavailable" with the reason, never a number
    the model: the schedule moves the estimate, Choice.schedule says "sass" / "counts" (and why);
        on a run-16 problem whose counts mispick, the schedule picks the measured best
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path

import pytest
from _once import once

from rocke_aot import settings
from rocke_aot.aot import sass
from rocke_aot.aot.compiler.ptx import assemble_cubin
from rocke_aot.candidates import Resources, Schedule
from rocke_aot.errors import ToolchainError
from rocke_aot.lanes import get_lane
from rocke_aot.record import RecordError, check_metadata
from rocke_aot.targets import Target
from rocke_aot.variants import hw_model, table

ROOT = Path(__file__).resolve().parents[1]
FACTS = hw_model.facts_for("sm_90")
LDG = FACTS.global_latency  # 331 on the H200 (the walk's global latency)

_HEAD = """.version 8.0
.target sm_90
.address_size 64
.visible .entry {name}(.param .u64 p_src, .param .u64 p_dst, .param .u32 p_n)
{{
  .reg .b64 %rd<24>;
  .reg .b32 %r<24>;
  .reg .f32 %f<24>;
  .reg .pred %p<4>;
  .shared .align 16 .b8 buf[4096];
  ld.param.u64 %rd1, [p_src];
  ld.param.u64 %rd2, [p_dst];
  ld.param.u32 %r1, [p_n];
  mov.u32 %r2, %tid.x;
  mul.wide.u32 %rd3, %r2, 4;
  add.s64 %rd4, %rd1, %rd3;
  mov.u64 %rd5, buf;
  add.s64 %rd6, %rd5, %rd3;
  mov.u32 %r3, 0;
  mov.f32 %f9, 0f00000000;
"""
_TAIL = """  add.s64 %rd7, %rd2, %rd3;
  st.global.f32 [%rd7], %f9;
  ret;
}
"""


def _staging(name: str, chained: bool) -> str:
    loads = []
    for i in range(4):
        if chained and i:  # the address of load i depends on the value of load i - 1
            loads.append(f"  cvt.rzi.s32.f32 %r{5 + i}, %f{i};\n  mul.wide.s32 %rd{10 + i}, %r{5 + i}, 4;\n"
                         f"  add.s64 %rd{15 + i}, %rd4, %rd{10 + i};\n  ld.global.f32 %f{i + 1}, [%rd{15 + i}+{1024 * i}];\n")
        else:
            loads.append(f"  ld.global.f32 %f{i + 1}, [%rd4+{1024 * i}];\n")
    stores = "".join(f"  st.shared.f32 [%rd6+{512 * i}], %f{i + 1};\n" for i in range(4))
    return (_HEAD.format(name=name) + "LOOP:\n" + "".join(loads) + stores
            + "  bar.sync 0;\n  ld.shared.f32 %f5, [%rd6+4];\n  add.f32 %f9, %f9, %f5;\n  bar.sync 0;\n"
            + "  add.s64 %rd4, %rd4, 4096;\n  add.s32 %r3, %r3, 1;\n  setp.lt.u32 %p1, %r3, %r1;\n"
            + "  @%p1 bra LOOP;\n" + _TAIL)


def _fma_loop(name: str, accumulators: int) -> str:
    # one barrier (a staging step for the walk to find), then a loop of 8 FFMAs into
    # ``accumulators`` registers; a and b are loaded once, before the barrier
    init = "".join(f"  mov.f32 %f{10 + j}, 0f00000000;\n" for j in range(accumulators))
    body = "".join(f"  fma.rn.f32 %f{10 + i % accumulators}, %f{10 + i % accumulators}, %f1, %f2;\n"
                   for i in range(8))
    total = "".join(f"  add.f32 %f9, %f9, %f{10 + j};\n" for j in range(accumulators))
    return (_HEAD.format(name=name) + "  ld.global.f32 %f1, [%rd4];\n  ld.global.f32 %f2, [%rd4+1024];\n"
            + "  st.shared.f32 [%rd6], %f1;\n  bar.sync 0;\n  ld.shared.f32 %f2, [%rd6+4];\n" + init
            + "LOOP:\n" + body + "  add.s32 %r3, %r3, 1;\n  setp.lt.u32 %p1, %r3, %r1;\n  @%p1 bra.uni LOOP;\n"
            + total + _TAIL)


@pytest.fixture(scope="module")
def hand():
    """name -> (cubin bytes, SASS text) of the four hand-written kernels."""
    tool = sass.find_cuobjdump()  # CI has it (scripts/setup.sh): a missing one fails, never skips
    out = {}
    for name, ptx in (("stage4", _staging("stage4", False)), ("chain4", _staging("chain4", True)),
                      ("fma8", _fma_loop("fma8", 1)), ("fma8x", _fma_loop("fma8x", 8))):
        cubin = assemble_cubin(ptx, "sm_90")
        out[name] = (cubin, sass.disassemble(cubin, tool))
    return out


def test_independent_loads_expose_one_latency_a_chain_four(hand):
    # stage4, by hand: the four LDGs issue on consecutive cycles; the first STS needs the first
    # LDG's result 331 cycles after its issue, the other three follow one a cycle (theirs are
    # ready one a cycle later too); the instructions before the barrier (~28) are issued in those
    # cycles anyway: exposed = (issue of LDG 1 + 331 + 4 - instructions) / 331 ~ 0.95-1.05.
    # chain4: each load waits for the last (331) and its address's 3 dependent integer
    # instructions (4 cycles each): ~ (4 x 331 + 3 x 12) / 331 ~ 4.1, less the instructions.
    s4 = sass.read_schedule(hand["stage4"][0], Target.parse("sm_90"), "stage4")
    c4 = sass.read_schedule(hand["chain4"][0], Target.parse("sm_90"), "chain4")
    assert s4.available and c4.available, (s4, c4)
    assert 0.9 <= s4.exposed_latencies <= 1.1, s4
    assert 3.8 <= c4.exposed_latencies <= 4.3, c4
    assert (s4.global_latency, s4.lds_latency) == (FACTS.global_latency, FACTS.lds_latency)
    assert s4.tool.startswith("cuobjdump: ") and "release" in s4.tool
    # the SASS itself says why (the test's own count, _waits): stage4's step waits once, for the
    # first of four loads in flight; chain4's four times, each load's address waiting for the last
    assert (_waits(hand["stage4"][1]), _waits(hand["chain4"][1])) == (1, 4)


def test_a_dependent_fma_chain_has_the_longer_ratio(hand):
    one = sass.read_schedule(hand["fma8"][0], Target.parse("sm_90"), "fma8")
    many = sass.read_schedule(hand["fma8x"][0], Target.parse("sm_90"), "fma8x")
    # by hand: one accumulator, each FFMA waits 4 cycles for the last: the loop's FFMAs take
    # ~4 cycles each, its few other instructions 1: ratio ~3-4; eight accumulators: ~1
    assert 2.5 <= one.chain_ratio <= 4.0, one
    assert 1.0 <= many.chain_ratio <= 1.5, many
    # a single load before the barrier, its store right after: one latency
    assert 0.9 <= one.exposed_latencies <= 1.1


def _waits(text: str) -> int:
    """The test's own reference: the rounds of global loads a step (from the start of the loop
    holding the first BAR to that BAR) waits for: an instruction that reads a register of an
    outstanding LDG issued after the previous wait starts a new round (a load issued before that
    wait was in flight during it, so it costs a few cycles more at most, not a latency)."""
    lines = [(int(a, 16), t) for a, t in re.findall(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", text)]
    bar = next(a for a, t in lines if re.match(r"(@!?P\d\s+)?BAR", t))
    loops = [(int(m.group(1), 16), a) for a, t in lines if (m := re.search(r"BRA\s+0x([0-9a-f]+)", t))
             and int(m.group(1), 16) < a]
    start = min((lo for lo, hi in loops if lo <= bar <= hi), default=lines[0][0])
    outstanding: dict[str, int] = {}  # register -> position of the LDG that writes it
    waits, last = 0, -1
    for i, (_a, t) in enumerate(x for x in lines if start <= x[0] < bar):
        op, _, rest = re.sub(r"^@!?P\d\s+", "", t).partition(" ")
        fields = [f.strip() for f in rest.split(",")]
        reads = set(re.findall(r"\bR\d+\b", rest if op.startswith("ST") else ",".join(fields[1:])
                               + "".join(f for f in fields[:1] if "[" in f)))
        hit = [outstanding.pop(r) for r in reads & set(outstanding)]
        if hit and max(hit) > last:
            waits, last = waits + 1, i
        if op.startswith("LDG"):
            outstanding.update((r, i) for r in re.findall(r"\bR\d+\b", fields[0]))
    return waits


@pytest.fixture(scope="module")
def conv_built():
    """Three conv_direct_fwd kernels through the builder (llvm22 lane, ptxas): the build output."""
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.builder.run import build_one
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    lane, target = get_lane("llvm22"), Target.parse("sm_90")
    tc = tcs.toolchain_for(get_lane(lane), Target.parse("sm_90"))
    specs = {s.kernel_name: s for s in table.enumerate_specs("conv_direct_fwd", Target.parse("sm_90"), get_lane("llvm22"))}
    names = ["conv_fwd_f16_c64k64_r3s3_u1v1_p1q1_d1e1_fma_t4x8x16_cc8",
             "conv_fwd_f16_c64k64_r3s3_u1v1_p1q1_d1e1_mma_t8x8x64_cc16",
             "conv_fwd_f16_c64k128_r3s3_u2v2_p1q1_d1e1_mma_t4x16x64_cc16"]
    names = [n for n in names if n in specs]
    assert len(names) >= 2, sorted(specs)[:5]
    return {n: build_one("conv_direct_fwd", specs[n].to_dict(), target, lane, tc) for n in names}


def test_conv_kernels_expose_what_their_waits_say(conv_built):
    tool = sass.find_cuobjdump()
    for name, out in conv_built.items():
        sched = out.metadata["code_object"]["schedule"]
        assert sched["source"] == "sass" and sched["version"] == 1, sched
        waits = _waits(sass.disassemble(out.code_object, tool))
        # each wait exposes at most one latency (less what was issued since its load), and the
        # instructions between waits add a few cycles each: the walk lies within one of the count
        assert waits >= 1 and waits - 1.0 <= sched["exposed_latencies"] <= waits + 0.25, (name, waits, sched)


def test_schedule_round_trips_through_a_store(conv_built, tmp_path):
    from rocke_aot.arch import ARCHES

    name, out = next(iter(conv_built.items()))
    md = json.loads(json.dumps(out.metadata))
    check_metadata(md)
    r = Resources.from_code_object(md["code_object"], ARCHES["sm_90"])
    assert r.schedule == Schedule.from_dict(md["code_object"]["schedule"]) and r.schedule.available
    assert r.as_dict()["schedule"] == md["code_object"]["schedule"]
    # through a real store's put (record.check_metadata) and its selection read (cache/selection_view.py)
    from _selstore import fake_inputs

    from rocke_aot.cache.store import Store

    spec = next(s for s in table.enumerate_specs("conv_direct_fwd", Target.parse("sm_90"), get_lane("llvm22")) if s.kernel_name == name)
    with Store.open(f"sqlite:///{tmp_path / 'c.sqlite'}") as store:
        store.put(fake_inputs("sm_90", "llvm22", "conv_direct_fwd", spec.to_dict()), out.code_object,
                  ir_sha256=out.ir_sha256, metadata=md, provenance={"test": True})
        cands = store.candidates("conv_direct_fwd", "sm_90")
        assert [c.resources.schedule for c in cands] == [r.schedule]


@pytest.mark.parametrize("field, value", [
    ("version", 2), ("source", "guess"), ("exposed_latencies", -1.0), ("exposed_latencies", float("nan")),
    ("exposed_latencies", "2"), ("chain_ratio", 0.5), ("global_latency", None), ("tool", ""), ("extra", 1),
])
def test_a_malformed_schedule_is_refused_on_write_and_read(field, value):
    from rocke_aot.arch import ARCHES

    good = Schedule("sass", 1.9, 1.5, 331.0, 30.0, "cuobjdump: release 13.5").as_dict()
    bad = {**good, field: value}
    co = {"kernel": "k", "format": "cubin", "vgpr_count": 40, "lds_bytes": 0, "schedule": bad}
    with pytest.raises(RecordError) as e:
        check_metadata({"code_object": co, "format": "cubin"})
    # a NaN is refused by the record's JSON check before the schedule's (it names the metadata)
    assert f"schedule.{field}" in str(e.value) or value != value, str(e.value)
    with pytest.raises(RecordError):
        Resources.from_code_object(co, ARCHES["sm_90"])
    # unavailable carries a reason and no figure
    with pytest.raises(RecordError):
        Schedule.from_dict({"version": 1, "source": "unavailable", "reason": "x", "exposed_latencies": 1.0})
    assert Schedule.from_dict({"version": 1, "source": "unavailable", "reason": "no tool"}).available is False


def test_no_cuobjdump_records_unavailable_with_the_reason(hand, monkeypatch, tmp_path):
    monkeypatch.setenv(settings.CUOBJDUMP, str(tmp_path / "nope"))
    got = sass.read_schedule(hand["stage4"][0], Target.parse("sm_90"), "stage4")
    assert got.source == "unavailable" and settings.CUOBJDUMP in got.reason and got.exposed_latencies is None
    with pytest.raises(ToolchainError):
        sass.find_cuobjdump()
    monkeypatch.delenv(settings.CUOBJDUMP)
    monkeypatch.setattr(sass.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    got = sass.read_schedule(hand["stage4"][0], Target.parse("sm_90"), "stage4")
    assert got.source == "unavailable" and "cuobjdump not found" in got.reason
    Schedule.from_dict(got.as_dict())  # a valid record: the build stores it
    assert sass.read_schedule(b"", Target.parse("gfx942"), "k") is None  # not an sm_90 cubin: nothing to record


def test_the_tool_failing_is_unavailable_not_a_number(tmp_path, monkeypatch):
    fake = tmp_path / "cuobjdump"
    fake.write_text("#!/bin/sh\necho 'cuobjdump fatal : no' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv(settings.CUOBJDUMP, str(fake))
    got = sass.read_schedule(b"\x7fELF" + b"\0" * 60, Target.parse("sm_90"), "k")
    assert got.source == "unavailable" and "exited 1" in got.reason


# run 16, conv_direct_fwd problem set: the n=8 224x224 c3 7x7 stride-2 stem (11 candidates, all
# timed on the H200). Its counts put t8x16x32 first (0.887 of the best); the best measured is
# t4x16x64, whose copies ptxas keeps in flight (docs/selection.md "Run 16 with the schedule shipped")
STEM = {"c": 3, "dil_h": 1, "dil_w": 1, "dtype": "f16", "h": 224, "k": 64, "n": 8, "pad_h": 3, "pad_w": 3, "r": 7,
        "s": 7, "stride_h": 2, "stride_w": 2, "w": 224}


@pytest.fixture(scope="module")
def stem():
    """(problem, measured rows, kernel -> Schedule the builder recorded) of the run-16 stem."""
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.builder.run import build_one
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    doc = json.loads(gzip.decompress((ROOT / "bench/results/bench-raw/h200-run16/quality-conv_direct_fwd.json.gz").read_bytes()))
    pr = next(p for p in doc["problems"] if p["problem"] == STEM)
    specs = {s.kernel_name: s for s in table.enumerate_specs("conv_direct_fwd", Target.parse("sm_90"), get_lane("llvm22"))}
    rows = [r for r in pr["results"] if r.get("median_ms") and not r.get("error") and r["kernel"] in specs]
    assert len(rows) >= 8
    lane, target = get_lane("llvm22"), Target.parse("sm_90")
    tc = tcs.toolchain_for(get_lane(lane), Target.parse("sm_90"))
    sched = {r["kernel"]: Schedule.from_dict(build_one("conv_direct_fwd", specs[r["kernel"]].to_dict(), target, lane,
                                                       tc).metadata["code_object"]["schedule"]) for r in rows}
    return pr["problem"], rows, sched


def _rank(problem, rows, sched):
    from datetime import datetime, timezone

    from rocke_aot.candidates import Candidate
    from rocke_aot.targets import Target
    from rocke_aot.variants.families import get_family
    from rocke_aot.variants.selection import clear_verdicts, rank

    specs = {s.kernel_name: s.to_dict() for s in table.enumerate_specs("conv_direct_fwd", Target.parse("sm_90"), get_lane("llvm22"))}
    fields = set(Resources.__dataclass_fields__) - {"schedule"}
    cands = [Candidate(r["key"], r["key"], "conv_direct_fwd", specs[r["kernel"]], Target.parse("sm_90"), get_lane("llvm22"), "default", "g",
                       True, Resources(**{k: v for k, v in r["resources"].items() if k in fields},
                                       schedule=sched(r["kernel"])), datetime(2026, 12, 4, tzinfo=timezone.utc))
             for r in rows]
    clear_verdicts()  # the verdict memo is per key: these tests give one key several schedules
    return rank(cands, get_family("conv_direct_fwd").problem_from(problem), Target.parse("sm_90"), model="hardware")


def test_the_schedule_picks_the_measured_best_where_the_counts_do_not(stem):
    problem, rows, sched = stem
    kernel = {r["key"]: r["kernel"] for r in rows}
    best = min(rows, key=lambda r: r["median_ms"])["kernel"]  # the H200's measurement, not the model's
    with_sass = _rank(problem, rows, sched.get)
    counts = _rank(problem, rows, lambda k: None)
    assert kernel[with_sass.best.key] == best == "conv_fwd_f16_c3k64_r7s7_u2v2_p3q3_d1e1_fma_t4x16x64_cc3"
    assert kernel[counts.best.key] != best
    assert all(c.schedule == "sass" and c.schedule_note is None for c in with_sass.accepted)
    assert all(c.schedule == "counts" and "no schedule recorded" in c.schedule_note for c in counts.accepted)
    est = {kernel[c.key]: c.estimate_ms for c in counts.accepted}
    assert any(abs(c.estimate_ms - est[kernel[c.key]]) > 1e-9 for c in with_sass.accepted)
    # the answer says it on the wire too (service/schemas.py RankedKernel takes basis_dict)
    assert with_sass.best.basis_dict()["schedule"] == "sass"


def test_a_schedule_the_model_cannot_use_leaves_the_counts_and_says_why(stem):
    problem, rows, sched = stem
    counts = _rank(problem, rows, lambda k: None)
    gone = _rank(problem, rows, lambda k: Schedule("unavailable", reason="cuobjdump not found"))
    assert [c.key for c in gone.accepted] == [c.key for c in counts.accepted]
    assert all(c.schedule == "counts" and "cuobjdump not found" in c.schedule_note for c in gone.accepted)
    # walked with another global latency: its figures mean something else under these facts
    other = _rank(problem, rows, lambda k: dataclasses.replace(sched[k], global_latency=480.0))
    assert [c.key for c in other.accepted] == [c.key for c in counts.accepted]
    assert all("global/LDS latency 480/30" in c.schedule_note for c in other.accepted)


# runs 16 and 20, conv_dgrad_patch problem set: the ViT-L/14-style patch dgrad n=4 224x224 c4 K768.
# The counts put t4x8 r2 first (0.754 / 0.757 of the best: 32 rows a block, 4 mma tiles a warp);
# ptxas's schedule of that kernel exposes the latencies the counts hide (docs/selection.md, "The
# schedule for conv_dgrad_patch too")
PATCH = {"c": 4, "dtype": "f16", "h": 224, "k": 768, "n": 4, "p": 14, "w": 224}


def _patch_schedule(tmp_path_factory, kernel: str, build) -> dict:
    """The schedule the builder records for conv_dgrad_patch ``kernel`` on sm_90, built once per
    test run (tests/_once.py): runs 16 and 20 time the same five kernels, whose bytes (and so
    schedules) are deterministic."""
    def make(d: Path) -> None:
        (d / "schedule.json").write_text(json.dumps(build()))

    return json.loads((once(tmp_path_factory, f"patch-schedule-{kernel}", make) / "schedule.json").read_text())


@pytest.mark.parametrize("run", ["h200-run16", "h200-run20"])
def test_conv_dgrad_patch_takes_the_schedule_too(run, tmp_path_factory):
    from datetime import datetime, timezone

    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.builder.run import build_one
    from rocke_aot.candidates import Candidate
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target
    from rocke_aot.variants.families import get_family
    from rocke_aot.variants.selection import clear_verdicts, rank

    doc = json.loads(gzip.decompress((ROOT / f"bench/results/bench-raw/{run}/quality-conv_dgrad_patch.json.gz").read_bytes()))
    pr = next(p for p in doc["problems"] if p["problem"] == PATCH)
    specs = {s.kernel_name: s for s in table.enumerate_specs("conv_dgrad_patch", Target.parse("sm_90"), get_lane("llvm22"))}
    rows = sorted((r for r in pr["results"] if r.get("median_ms") and not r.get("error") and r["kernel"] in specs),
                  key=lambda r: r["median_ms"])
    counts_pick = "conv_dgrad_patch_f16_p14c4_mma_t4x8_r2_kc16"
    rows = rows[:5] + [r for r in rows[5:] if r["kernel"] == counts_pick]  # the measured fastest five and it
    lane, target = get_lane("llvm22"), Target.parse("sm_90")
    tc = tcs.toolchain_for(get_lane(lane), Target.parse("sm_90"))
    fields = set(Resources.__dataclass_fields__) - {"schedule"}

    def ranked(with_schedule: bool):
        cands = [Candidate(r["key"], r["key"], "conv_dgrad_patch", specs[r["kernel"]].to_dict(), Target.parse("sm_90"), get_lane("llvm22"),
                           "default", "g", True,
                           Resources(**{k: v for k, v in r["resources"].items() if k in fields},
                                     schedule=Schedule.from_dict(_patch_schedule(
                                         tmp_path_factory, r["kernel"], lambda r=r: build_one(
                                             "conv_dgrad_patch", specs[r["kernel"]].to_dict(), target, lane, tc
                                         ).metadata["code_object"]["schedule"])) if with_schedule else None),
                           datetime(2026, 12, 5, tzinfo=timezone.utc)) for r in rows]
        clear_verdicts()
        got = rank(cands, get_family("conv_dgrad_patch").problem_from(PATCH), target, model="hardware")
        clear_verdicts()
        return got

    kernel = {r["key"]: r["kernel"] for r in rows}
    time = {r["key"]: r["median_ms"] for r in rows}
    counts, sass_ = ranked(False), ranked(True)
    assert kernel[counts.best.key] == counts_pick and time[counts.best.key] > 1.25 * rows[0]["median_ms"]
    assert all(c.schedule == "sass" for c in sass_.accepted)
    assert time[sass_.best.key] <= 1.05 * rows[0]["median_ms"], kernel[sass_.best.key]


def test_a_rebuild_that_reuses_a_cubin_reuses_its_schedule(tmp_path, monkeypatch):
    """A rebuild under a new recipe whose IR did not move reuses every stored code object; the
    schedule read off those bytes comes with it (cache/artifacts.py keeps it beside the PTX), not
    from cuobjdump again (~0.4 s a cubin: 800 reused sm_90 kernels were five minutes of it)."""
    from rocke_aot.aot import builder
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.builder import plan as plan_mod
    from rocke_aot.cache.store import Store
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    lane, sm90 = get_lane("llvm22"), Target.parse("sm_90")
    tc = tcs.toolchain_for(get_lane(lane), Target.parse("sm_90"))
    where = {"path": "mma", "block_m": "64", "block_n": "64", "block_k": "32", "in_dtype": "f16", "out_dtype": "f16"}
    reads = []
    real = sass.read_schedule
    monkeypatch.setattr(sass, "read_schedule", lambda *a: reads.append(a[2]) or real(*a))
    with Store.open(f"sqlite:///{tmp_path / 'c.sqlite'}") as store:
        first = builder.build(arches=[sm90], families=["gemm"], lanes=[lane], store=store, toolchains=[tc],
                              where=where, jobs=2)
        assert first.ok and first["built"] >= 1 and first["compiles"] == first["built"], first
        assert len(reads) == first["built"]
        before = {a.ir_sha256: a.metadata["code_object"]["schedule"] for a in store.find(family="gemm")}
        assert all(s["source"] == "sass" for s in before.values())
        monkeypatch.setattr(plan_mod, "family_digest", lambda family: "0" * 64)  # a recipe that moved no IR
        again = builder.build(arches=[sm90], families=["gemm"], lanes=[lane], store=store, toolchains=[tc],
                              where=where, jobs=2)
        assert again.ok and again["compiles"] == 0 and again["reused"] == first["built"], again
        assert len(reads) == first["built"]  # no cuobjdump for a reused cubin
        after = [a for a in store.find(family="gemm") if a.provenance.get("reused_code_object")]
        assert len(after) == first["built"]
        assert all(a.metadata["code_object"]["schedule"] == before[a.ir_sha256] for a in after)
