"""The arch-domain characterization (aot/characterize.py) and what it gates.

- the recorded documents (variants/characterization/<lane>.json) equal a fresh run on every
  lane whose toolchain this host has (llvm20, llvm22, llvm23, llvm24 here; probed in parallel through
  the worker pool); a lane without a toolchain is a named skip, never measured;
- no variant table serves an (arch, lane) whose used intrinsics the recorded characterization
  marks absent;
- the measured facts agree with what DESIGN.md states from independent checks;
- recording is the maintainer tool's (devtools/characterize.py: into the directory it is given,
  read back exactly), never the product command's.
"""

from __future__ import annotations

import copy

import pytest
from click.testing import CliRunner

from devtools import characterize as ch_dev
from rocke_aot import lanes
from rocke_aot.aot import characterize as ch
from rocke_aot.aot import golden
from rocke_aot.arch import ARCHES
from rocke_aot.cli.main import cli
from rocke_aot.errors import CompileError, CompileTimeout
from rocke_aot.variants import table

LLVM22 = lanes.get_lane("llvm22")

@pytest.fixture(scope="module")
def recorded():
    return ch.load_recorded()


@pytest.fixture(scope="module")
def fresh():
    return ch.domain(jobs=4)


@pytest.fixture(scope="module")
def golden_doc():
    return golden.load()


def test_recorded_characterization_equals_a_fresh_run_on_this_host(recorded, fresh):
    docs, skips = fresh
    # the project's own llvmlite is always here, so at least llvm22 is measured
    assert "llvm22" in docs
    for lane, doc in docs.items():
        assert lane in recorded, f"{lane} has a toolchain here but no recorded characterization"
        assert ch.differences(recorded[lane], doc) == [], lane
    # every registry lane is measured or a named skip, never both, never neither
    for lane in lanes.LANE_NAMES:
        assert (lane in docs) != (lane in skips), lane
        if lane in skips:
            assert skips[lane].startswith("unvalidated: no LLVM")


def test_every_recorded_document_covers_every_arch_and_probe(recorded):
    assert recorded, "no characterization recorded"
    names = set(ch.probed_intrinsics())
    for lane, doc in recorded.items():
        assert doc["profile"] == lanes.get_lane(lane).profile_name
        assert set(doc["arches"]) == set(ARCHES)
        assert doc["toolchain"]["llvm_version"].split(".")[0] == str(lanes.get_lane(lane).major)
        for arch, entry in doc["arches"].items():
            fam = ARCHES[arch].family
            assert set(entry["intrinsics"]) == {n for n in names if ch._applies(n, fam)}
            for r in [entry["target"], *entry["intrinsics"].values(), *entry["features"].values()]:
                assert r["status"] in ch.STATUSES
                if r["status"] != "ok":
                    assert r.get("evidence"), (lane, arch, r)


def test_no_table_serves_an_arch_lane_whose_intrinsics_are_absent(recorded, golden_doc):
    characterized = 0
    for family in table.family_names():
        for arch in ARCHES:
            for lane in lanes.LANE_NAMES:
                if not table.admission(family, arch, lane).served:
                    continue
                state, detail = ch.backing(family, arch, lanes.get_lane(lane), recorded, golden_doc)
                assert state != "contradicted", f"{family} {arch} {lane}: {detail}"
                characterized += state == "characterized"
                if lane not in recorded:
                    assert state == "unvalidated"
    assert characterized > 0


def test_the_gate_fails_when_a_used_intrinsic_is_marked_absent(recorded, golden_doc):
    # what the gate above would see if LLVM 22 lost gfx950's 32x32x16 MFMA
    lost = copy.deepcopy(recorded)
    name = "llvm.amdgcn.mfma.f32.32x32x16.f16"
    lost["llvm22"]["arches"]["gfx950"]["intrinsics"][name] = {"status": "arch_absent", "evidence": "Cannot select"}
    assert name in ch.used_intrinsics(golden_doc, "gemm", "gfx950", LLVM22)
    state, detail = ch.backing("gemm", "gfx950", LLVM22, lost, golden_doc)
    assert state == "contradicted" and name in detail
    # and an absent target contradicts every family on it
    lost["llvm22"]["arches"]["gfx942"]["target"] = {"status": "arch_absent", "evidence": "not a recognized processor"}
    assert ch.backing("conv_dgrad_patch", "gfx942", LLVM22, lost, golden_doc)[0] == "contradicted"


def test_measured_facts_agree_with_the_design_notes(recorded):
    # DESIGN.md, "Measured facts": mfma.f32.32x32x8f16 compiles for gfx942 on LLVM 20 and 22;
    # mfma.f32.32x32x16.f16 only for gfx950; wmma.f32.16x16x32.f16 only for gfx1250, only LLVM 22+;
    # llvmlite 0.46 / LLVM 20 does not know gfx1250.
    def st(lane, arch, name):
        return recorded[lane]["arches"][arch]["intrinsics"][name]["status"]

    for lane in ("llvm20", "llvm22"):
        assert st(lane, "gfx942", "llvm.amdgcn.mfma.f32.32x32x8f16") == "ok"
        assert st(lane, "gfx942", "llvm.amdgcn.mfma.f32.32x32x16.f16") == "arch_absent"
        assert st(lane, "gfx950", "llvm.amdgcn.mfma.f32.32x32x16.f16") == "ok"
    wmma = "llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16"
    assert st("llvm22", "gfx1250", wmma) == "ok"
    assert st("llvm22", "gfx942", wmma) == "arch_absent"
    assert "Cannot select" in recorded["llvm22"]["arches"]["gfx942"]["intrinsics"][wmma]["evidence"]
    assert recorded["llvm20"]["arches"]["gfx1250"]["target"]["status"] == "arch_absent"
    assert "not a recognized processor" in recorded["llvm20"]["arches"]["gfx1250"]["target"]["evidence"]
    # LLVM 21 renamed the NVPTX barrier: LLVM 20 compiles the new name as an external call
    assert st("llvm20", "sm_90", "llvm.nvvm.barrier.cta.sync.aligned.all") == "name_absent"
    assert st("llvm22", "sm_90", "llvm.nvvm.barrier.cta.sync.aligned.all") == "ok"
    # the wave size the lowering states (arch.py: gfx9 wave64, gfx1250 wave32 only) is honoured:
    # the kernel descriptor's wave32 bit follows it
    assert recorded["llvm22"]["arches"]["gfx942"]["features"]["wavefrontsize64+"] == {"status": "ok"}
    assert recorded["llvm22"]["arches"]["gfx1250"]["features"]["wavefrontsize32+"] == {"status": "ok"}
    if "llvm24" in recorded:
        # docs/llvm24-lane.md: the LLVM 24 library is AMDGPU only; gfx1250 has no xnack modes there
        assert recorded["llvm24"]["arches"]["sm_90"]["target"]["status"] == "arch_absent"
        assert recorded["llvm24"]["arches"]["gfx1250"]["features"]["xnack-"]["status"] == "arch_absent"
        assert recorded["llvm24"]["arches"]["gfx942"]["features"]["xnack-"]["status"] == "ok"
    if "llvm23" in recorded:
        # docs/llvm23-lane.md: AMD's LLVM 23 has LLVM 22's intrinsic availability on every AMDGPU
        # arch, takes xnack/sramecc as subtarget features (gfx1250 too), and has no NVPTX back end
        for arch in ("gfx90a", "gfx942", "gfx950", "gfx1250"):
            for name, r in recorded["llvm22"]["arches"][arch]["intrinsics"].items():
                assert recorded["llvm23"]["arches"][arch]["intrinsics"][name]["status"] == r["status"], (arch, name)
            assert recorded["llvm23"]["arches"][arch]["features"] == recorded["llvm22"]["arches"][arch]["features"]
        assert recorded["llvm23"]["arches"]["sm_90"]["target"]["status"] == "arch_absent"


def test_classification_of_worker_failures():
    abort = CompileError("worker under /x/python died (killed by SIGABRT): LLVM ERROR: Cannot select: "
                         "intrinsic %llvm.amdgcn.mfma.f32.32x32x16.f16",
                         "LLVM ERROR: Cannot select: intrinsic %llvm.amdgcn.mfma.f32.32x32x16.f16\n")
    assert ch.classify_error(abort) == {"status": "arch_absent",
                                        "evidence": "Cannot select: intrinsic %llvm.amdgcn.mfma.f32.32x32x16.f16"}
    assert ch.classify_error(CompileTimeout("exceeded 60s"))["status"] == "timeout"
    crash = CompileError("worker died (killed by SIGSEGV): Segmentation fault at 0x7f00ab", "")
    got = ch.classify_error(crash)
    assert got["status"] == "toolchain_crash" and "0x?" in got["evidence"]
    bad = CompileError("llvm.compile: invalid LLVM IR: Intrinsic has incorrect return type!", "")
    assert ch.classify_error(bad)["status"] == "name_absent"


def test_a_probe_past_its_timeout_is_a_timeout_and_the_worker_is_replaced():
    from rocke_aot.aot.compiler import WorkerPool

    probers, _ = ch.lane_toolchains([LLVM22])
    prober = probers["llvm22"]
    with WorkerPool(size=1) as pool:
        run = pool.call_fn()
        res = ch._probe_task(lambda spec, kind, payload, blob, timeout: run(spec, kind, payload, blob, 1e-4),
                             prober, "gfx942", "intrinsic:llvm.amdgcn.mfma.f32.32x32x8f16")
        assert res["status"] == "timeout"
        # the next probe gets a fresh worker and a real answer
        assert ch._probe_task(run, prober, "gfx942", "intrinsic:llvm.amdgcn.mfma.f32.32x32x8f16") == {"status": "ok"}


def test_variants_cli_shows_the_backing_column(capsys):
    import json

    from rocke_aot.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["variants", "--family", "gemm", "--arch", "gfx942", "--json"])
    assert exc.value.code == 0
    rows = {r["lane"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    recorded = ch.load_recorded()
    for lane, r in rows.items():
        assert r["backing"] == ("characterized" if lane in recorded else "unvalidated"), r
    # every lane of the registry has a real compiler here now, llvm23 AMD's LLVM 23
    assert set(recorded) == set(lanes.LANE_NAMES)
    assert rows["llvm23"]["backing"] == "characterized" and "23.0.0git" in rows["llvm23"]["backing_detail"]


AMDGPU = ("gfx90a", "gfx942", "gfx950", "gfx1250")
_EMISSION_FACTS = ("datalayout", "triples", "target_id", "amdgpu_no", "lowered_to")


def test_the_llvm23_profile_follows_from_the_emission_probes(recorded):
    # docs/llvm23-lane.md: on every AMDGPU arch AMD's LLVM 23 measures as LLVM 22 does in every
    # emission fact (datalayout, triple forms, target-ID settings, amdgpu-no-* inference, what
    # each matrix intrinsic lowers to), and unlike LLVM 24 in datalayout, triple and target ID.
    em = {lane: recorded[lane]["emission"] for lane in ("llvm22", "llvm23", "llvm24")}
    for arch in AMDGPU:
        for fact in _EMISSION_FACTS:
            assert em["llvm23"][arch][fact] == em["llvm22"][arch][fact], (arch, fact)
        for fact in ("datalayout", "triples", "target_id"):
            assert em["llvm23"][arch][fact] != em["llvm24"][arch][fact], (arch, fact)
        subarch = lanes.amdgpu_subarch_triple(arch)
        assert em["llvm23"][arch]["triples"][subarch]["accepted"] is False
        assert em["llvm24"][arch]["triples"][subarch]["accepted"] is True
        # the O3 pipeline of LLVM 23 infers every amdgpu-no-* input the minimal kernel leaves out
        assert em["llvm23"][arch]["amdgpu_no"]["lane_compile"] == []
        assert "dispatch_ptr" in em["llvm23"][arch]["amdgpu_no"]["codegen_only"]
    # ... so the registry gives llvm23 LLVM 22's emission tables, and only the capability set
    # differs (no sm_90: the library has no NVPTX back end, recorded as arch_absent)
    p22, p23 = lanes.PROFILES["llvm22"], lanes.PROFILES["llvm23"]
    assert p23.datalayout("amdgcn") == p22.datalayout("amdgcn") == em["llvm23"]["gfx942"]["datalayout"]["reported"]
    assert p23.intrinsics == p22.intrinsics and p23.amdgpu_no_inputs == p22.amdgpu_no_inputs
    assert p23.amdgpu_no_agpr == p22.amdgpu_no_agpr
    assert p22.capabilities - p23.capabilities == {"target:sm_90", "mma:sm_90", "async-copy:sm_90", "wgmma:sm_90a"}
    assert recorded["llvm23"]["arches"]["sm_90"]["target"]["status"] == "arch_absent"


def test_every_record_says_how_it_was_made(recorded):
    for lane, doc in recorded.items():
        assert doc["commands"]["write"] == f"python -m devtools.characterize --out variants/characterization --lane {lane}"
        assert set(doc["emission"]) == {a for a in AMDGPU if recorded[lane]["arches"][a]["target"]["status"] == "ok"}


def test_the_dev_tool_records_into_the_directory_it_is_given(fresh, tmp_path):
    docs, _ = fresh
    paths = ch_dev.write_recorded(docs, tmp_path / "rec")
    assert sorted(p.name for p in paths) == sorted(f"{lane}.json" for lane in docs)
    assert ch.load_recorded(tmp_path / "rec") == docs  # what the product reads back is what was probed


def test_the_product_command_only_reads_the_records():
    """`rocke-aot characterize --write` / `--llvm24-report` write nothing: usage errors naming the tools."""
    before = {p: p.stat().st_mtime_ns for p in ch.RECORD_DIR.glob("*.json")}
    r = CliRunner().invoke(cli, ["characterize", "--write", "--lane", "llvm22", "--arch", "gfx942"])
    assert r.exit_code == 2 and ch.WRITE_COMMAND in r.output, r.output
    r = CliRunner().invoke(cli, ["characterize", "--llvm24-report"])
    assert r.exit_code == 2 and "devtools.llvm24_report" in r.output, r.output
    helped = CliRunner().invoke(cli, ["characterize", "--help"]).output
    assert "--write" not in helped and "--llvm24-report" not in helped
    assert {p: p.stat().st_mtime_ns for p in ch.RECORD_DIR.glob("*.json")} == before
