"""Variant tables: admission for every (family, arch, lane), completeness against the lane
registry, baked parameters apart from knobs, the arch table, and `rocke-aot variants`."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rocke_aot import lanes
from rocke_aot.arch import ARCHES, arch_info
from rocke_aot.cli.main import cli
from rocke_aot.errors import AdmissionError, LaneError, SpecError
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.variants import table

# the registry itself (FAMILIES is its read-only view): tests swap an entry with monkeypatch
from rocke_aot.variants.families import _REGISTRY as REGISTRY

FAMILIES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")


# -- completeness: a lane in the registry forces a decision in every family --------------------

def test_tables_are_complete_for_the_real_registry():
    assert set(FAMILIES) <= set(table.family_names())
    assert table.check_complete() == []


@pytest.fixture
def extra_lane(monkeypatch):
    """A lane the tables have never heard of, added to the registry as every caller sees it."""
    fake = Lane(25, "llvm25", "llvm23")
    monkeypatch.setattr(lanes, "LANES", lanes.LANES + (fake,))
    return fake


def test_a_new_lane_makes_the_completeness_check_fail_naming_it(extra_lane):
    holes = table.check_complete()
    assert {(h.family, h.lane) for h in holes} == {(f, "llvm25") for f in table.family_names()}
    assert all("neither served nor refused" in h.problem for h in holes)
    assert "llvm25" in str(holes[0])


def test_a_new_lane_is_refused_until_decided(extra_lane):
    for fam in FAMILIES:
        adm = table.admission(fam, "gfx942", extra_lane)
        assert not adm.served and "undecided" in adm.reason and "llvm25" in adm.reason
        with pytest.raises(AdmissionError, match="llvm25"):
            table.enumerate_specs(fam, "gfx942", "llvm25")


def test_deciding_the_new_lane_closes_the_hole(extra_lane, monkeypatch):
    import dataclasses

    for fam, e in list(REGISTRY.items()):
        decided = dict(e.table.lane_decisions, llvm25=table.SERVE if fam != "gemm" else table.Refuse("not yet qualified"))
        monkeypatch.setitem(REGISTRY, fam, dataclasses.replace(e, table=dataclasses.replace(e.table, lane_decisions=decided)))
    assert table.check_complete() == []
    assert table.admission("gemm", "gfx942", extra_lane).reason == "not yet qualified"
    assert table.admission("conv_direct_fwd", "gfx942", extra_lane).served
    # the new lane follows its profile's capabilities: llvm23's profile knows gfx1250
    assert table.admission("conv_direct_fwd", "gfx1250", extra_lane).served


def test_a_decision_for_a_lane_the_registry_lacks_is_a_hole(monkeypatch):
    import dataclasses

    e = REGISTRY["conv_dgrad_patch"]
    t = e.table
    monkeypatch.setitem(REGISTRY, "conv_dgrad_patch", dataclasses.replace(
        e, table=dataclasses.replace(t, lane_decisions=dict(t.lane_decisions, llvm21=table.SERVE))))
    holes = table.check_complete()
    assert [(h.family, h.lane) for h in holes] == [("conv_dgrad_patch", "llvm21")]
    assert "does not hold" in holes[0].problem


def test_every_table_decides_every_registered_lane():
    for fam, e in REGISTRY.items():
        assert set(e.table.lane_decisions) == {lane.name for lane in lanes.LANES}, fam


# -- admission ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fam", FAMILIES)
def test_admission_of_every_arch_and_lane(fam):
    for arch in ARCHES:
        for lane in lanes.LANES:
            adm = table.admission(fam, arch, lane)
            # Every family serves every lane; the arch follows the lane's profile capabilities
            # (LLVM 20 has no gfx1250, the LLVM 24 code generator no NVPTX).
            if not lane.profile.has(f"target:{arch}"):
                assert not adm.served
                assert adm.reason == f"LLVM {lane.major} ({lane.name}) has no {arch} target"
            else:
                assert adm.served, (arch, lane.name, adm.reason)
                assert table.count_specs(fam, arch, lane) > 0


def test_admission_accepts_target_ids_and_lane_names():
    assert table.admission("conv_direct_fwd", "gfx942:sramecc+:xnack-", "llvm22").served
    assert table.admission("conv_direct_fwd", "gfx942", lanes.get_lane("llvm20")).served
    with pytest.raises(LaneError):
        table.admission("gemm", "gfx942", "llvm21")
    with pytest.raises(LaneError):
        table.admission("gemm", "gfx942", 22)
    with pytest.raises(SpecError, match="unknown family"):
        table.admission("conv_wgrad", "gfx942", "llvm22")
    with pytest.raises(SpecError, match="unknown processor"):
        table.admission("gemm", "gfx1100", "llvm22")


def test_refused_enumeration_raises_with_the_reason():
    with pytest.raises(AdmissionError) as e:
        table.enumerate_specs("conv_dgrad_patch", "gfx1250", "llvm20")
    assert e.value.reason == "LLVM 20 (llvm20) has no gfx1250 target"


@pytest.mark.parametrize("arch,served,refused", [
    ("gfx942", {"mfma", "fma"}, {"wmma": "wmma needs gfx1250", "mma": "mma (NVPTX mma.sync) needs sm_90"}),
    ("gfx950", {"mfma", "fma"}, {"wmma": "wmma needs gfx1250"}),
    ("gfx1250", {"wmma", "fma"}, {"mfma": "mfma needs a gfx9 MFMA arch", "mma": "needs sm_90; gfx1250 has wmma"}),
    ("sm_90", {"mma", "fma"}, {"mfma": "mfma needs a gfx9", "wmma": "wmma needs gfx1250"}),
])
def test_path_admission(arch, served, refused):
    for fam in FAMILIES:
        adm = table.path_admissions(fam, arch, "llvm22")
        assert {p for p, a in adm.items() if a.served} == served
        for path, why in refused.items():
            assert why in adm[path].reason
        assert {s.path for s in table.enumerate_specs(fam, arch, "llvm22")} == served


def test_mma_path_needs_the_capability():
    # sm_90's tensor-core path is refused, with the reason, on a lane whose profile lacks
    # mma:sm_90 (none of the registered ones with NVPTX does; a copy without it stands in)
    import dataclasses

    from rocke_aot.lanes import PROFILES, Lane
    from rocke_aot.targets import Target

    lane = Lane(22, "llvm22", "llvm22")
    stripped = dataclasses.replace(PROFILES["llvm22"], capabilities=PROFILES["llvm22"].capabilities - {"mma:sm_90"})
    fake = type("L", (), {"profile": stripped, "major": 22, "name": "llvm22"})()
    assert table.path_admission(Target.parse("sm_90"), lane, "mma").served
    adm = table.path_admission(Target.parse("sm_90"), fake, "mma")
    assert not adm.served and adm.reason == "LLVM 22 (llvm22) has no NVPTX mma.sync"


def test_a_lane_without_wmma_refuses_the_wmma_path(monkeypatch):
    # A registry lane whose profile lacks wmma:gfx1250 but knows gfx1250: the path is refused
    # with the lane named, the fma path is still served.
    import dataclasses

    prof = dataclasses.replace(lanes.PROFILES["llvm22"], name="nowmma",
                               capabilities=lanes.PROFILES["llvm22"].capabilities - {"wmma:gfx1250"})
    monkeypatch.setattr(lanes, "PROFILES", {**lanes.PROFILES, "nowmma": prof})
    fake = Lane(26, "llvm26", "nowmma")
    adm = table.path_admission(Target.parse("gfx1250"), fake, "wmma")
    assert not adm.served and "llvm26" in adm.reason and "WMMA" in adm.reason


# -- specs: baked vs knobs, canonical form, the grids ---------------------------------------------

@pytest.mark.parametrize("fam", ["conv_direct_fwd", "conv_dgrad_patch"])
def test_conv_specs_keep_baked_apart_from_knobs(fam):
    specs = list(table.enumerate_specs(fam, "gfx942", "llvm22"))
    cls = type(specs[0])
    assert set(cls.BAKED).isdisjoint(cls.KNOBS)
    for spec in specs:
        assert set(spec.baked()) | set(spec.knobs()) == set(spec.to_dict())
        assert cls.from_dict(spec.to_dict()) == spec
        assert table.spec_from_dict(fam, json.loads(json.dumps(spec.to_dict()))) == spec
    kernel_names = [s.kernel_name for s in specs]
    assert len(set(kernel_names)) == len(kernel_names)


def test_spec_from_dict_fails_closed():
    d = ConvDirectFwdSpec().to_dict()
    with pytest.raises(SpecError, match="unknown"):
        ConvDirectFwdSpec.from_dict({**d, "tile_q": 4})
    with pytest.raises(SpecError, match="missing"):
        ConvDirectFwdSpec.from_dict({k: v for k, v in d.items() if k != "c"})
    with pytest.raises(SpecError, match="must be int"):
        ConvDirectFwdSpec.from_dict({**d, "c": 64.0})
    with pytest.raises(SpecError, match="must be int"):
        ConvDgradPatchSpec(p=True)  # a bool is not an int
    with pytest.raises(SpecError, match="patch size"):
        ConvDgradPatchSpec(p=8, r_blk=1)
    with pytest.raises(SpecError, match="c_chunk"):
        ConvDirectFwdSpec(c=64, c_chunk=24)


@pytest.mark.parametrize("p,c,r_blk,ok", [
    (14, 3, 1, False),   # 42 columns pad to 48: 6 > 42/8
    (14, 3, 2, False),   # 84 -> 96: 12 > 10.5
    (14, 3, 7, True),    # 294 -> 304: 10 <= 36.75
    (14, 3, 14, True),   # 588 -> 592
    (4, 3, 1, False),    # 12 -> 16
    (4, 3, 4, True),     # 48: no padding
    (16, 3, 1, True),    # 48
    (14, 4, 2, True),    # 112: no padding
])
def test_dgrad_patch_column_padding_admission(p, c, r_blk, ok):
    if ok:
        spec = ConvDgradPatchSpec(c=c, p=p, r_blk=r_blk)
        assert (spec.cols_padded - spec.cols) * 8 <= spec.cols and spec.cols_padded % 16 == 0
    else:
        with pytest.raises(SpecError, match="one eighth"):
            ConvDgradPatchSpec(c=c, p=p, r_blk=r_blk)


def test_dgrad_patch_grid_holds_exactly_the_admitted_row_blocks():
    specs = list(table.enumerate_specs("conv_dgrad_patch", "sm_90", "llvm22"))
    got = {(s.p, s.c): set() for s in specs}
    for s in specs:
        got[(s.p, s.c)].add(s.r_blk)
    for (p, c), blocks in got.items():
        want = {r for r in range(1, p + 1) if p % r == 0
                and (-(-r * p * c // 16) * 16 - r * p * c) * 8 <= r * p * c}
        assert blocks <= want and blocks, (p, c, blocks, want)
    assert {p for p, _ in got} == {4, 14, 16}


def test_grids_respect_the_arch_lds_limits():
    for fam in ("conv_direct_fwd", "conv_dgrad_patch"):
        for arch in ("gfx942", "gfx1250", "sm_90"):
            info = arch_info(arch)
            for spec in table.enumerate_specs(fam, arch, "llvm22"):
                assert spec.lds_bytes() <= info.static_lds_limit


def test_enumeration_is_deterministic():
    # its speed (the builder's no-op rebuild budget) is bench/bench_noop.py's target, a ratio to the
    # no-op replan in the same run
    first = [s.to_dict() for s in table.enumerate_specs("gemm", "gfx942", "llvm22")]
    assert len(first) > 100
    for fam in FAMILIES:
        specs = [s.to_dict() for s in table.enumerate_specs(fam, "gfx942", "llvm22")]
        assert specs == [s.to_dict() for s in table.enumerate_specs(fam, "gfx942", "llvm22")], fam
    assert [s.to_dict() for s in table.enumerate_specs("gemm", "gfx942", "llvm22")] == first


# -- the arch table ------------------------------------------------------------------------------

def test_arch_figures_and_their_sources():
    kib = 1024
    assert {a: ARCHES[a].lds_bytes for a in ARCHES} == {
        "gfx90a": 64 * kib, "gfx942": 64 * kib, "gfx950": 160 * kib, "gfx1250": 320 * kib, "sm_90": 227 * kib}
    assert ARCHES["sm_90"].cu_count == 132 and ARCHES["sm_90"].static_lds_limit == 48 * kib
    assert ARCHES["gfx942"].wave_size == 64 and ARCHES["gfx1250"].wave_size == 32
    assert ARCHES["gfx1250"].max_vgprs == 1024 and ARCHES["gfx942"].max_vgprs == 512
    assert ARCHES["gfx942"].max_sgpr_count == 108 and ARCHES["gfx1250"].max_sgpr_count == 108
    for a in ARCHES.values():
        for figure in ("wave_size", "lds_bytes", "cu_count", "max_vgprs", "matrix_unit", "max_block"):
            assert a.sources.get(figure), (a.processor, figure)
        if a.family == "amdgcn":
            assert a.sources.get("max_sgprs") and a.sources.get("sgpr_specials")
    assert {a: ARCHES[a].matrix_unit for a in ARCHES} == {
        "gfx90a": "mfma", "gfx942": "mfma", "gfx950": "mfma", "gfx1250": "wmma", "sm_90": "mma"}


# -- the CLI ---------------------------------------------------------------------------------------

def test_cli_variants_json_counts_and_refusals():
    res = CliRunner().invoke(cli, ["variants", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["holes"] == []
    rows = {(r["family"], r["arch"], r["lane"]): r for r in doc["rows"]}
    assert len(rows) == len(table.family_names()) * len(ARCHES) * len(lanes.LANES)
    r = rows[("conv_dgrad_patch", "gfx1250", "llvm22")]
    assert r["served"] and r["count"] == table.count_specs("conv_dgrad_patch", "gfx1250", "llvm22")
    assert r["paths"]["wmma"] == "served" and "gfx9" in r["paths"]["mfma"]
    refusals = {(x["family"], x["arch"], x["lane"], x["scope"]): x["reason"] for x in doc["refusals"]}
    assert refusals[("conv_direct_fwd", "gfx1250", "llvm20", "all")] == "LLVM 20 (llvm20) has no gfx1250 target"
    assert "wmma needs gfx1250" in refusals[("gemm", "gfx942", "llvm22", "path wmma")]
    assert doc["total"] == sum(r["count"] for r in doc["rows"])


def test_cli_variants_filters_and_table():
    res = CliRunner().invoke(cli, ["variants", "--family", "conv_direct_fwd", "--arch", "gfx1250",
                                   "--lane", "llvm20", "--lane", "llvm22"])
    assert res.exit_code == 0, res.output
    assert "refused" in res.output and "has no gfx1250 target" in res.output
    assert "wmma fma" in res.output


def test_cli_variants_bad_inputs():
    runner = CliRunner()
    assert runner.invoke(cli, ["variants", "--lane", "llvm21"]).exit_code == 2
    assert runner.invoke(cli, ["variants", "--arch", "gfx1100"]).exit_code == 2
    res = runner.invoke(cli, ["variants", "--family", "nope"])
    assert res.exit_code == 2 and "unknown family" in res.stderr  # a SpecError, translated by the group


def test_cli_variants_fails_on_an_undecided_lane(extra_lane):
    # The command returns its exit code; the group (rocke_aot.cli.main.RockeGroup) makes it the process's.
    res = CliRunner().invoke(cli, ["variants", "--json", "--arch", "gfx942"], standalone_mode=False)
    assert res.return_value == 1
    doc = json.loads(res.output)
    assert any("llvm25" in h for h in doc["holes"])


@pytest.mark.parametrize("cls", [ConvDirectFwdSpec, ConvDgradPatchSpec])
def test_default_conv_specs_lay_out_on_every_arch(cls):
    for arch in ARCHES:
        geo = cls().geometry(Target.parse(arch))  # fma: every arch
        assert 1 <= geo.threads <= 1024 and geo.lds_bytes <= arch_info(arch).static_lds_limit


def test_dgrad_mma_grid_keeps_k_chunk_16_only_on_sm90():
    """The measured grid rule (variants/tables/conv.py MMA_PATCH_K_CHUNKS): sm_90's mma path
    drops k_chunk 32; its fma path and the AMD matrix paths keep what their instructions allow
    (gfx1250's WMMA is 16x16x32: k_chunk 32 only, as before the rule)."""
    def chunks(arch: str, path: str) -> set[int]:
        return {s.k_chunk for s in table.enumerate_specs("conv_dgrad_patch", arch, "llvm22") if s.path == path}

    assert chunks("sm_90", "mma") == {16}
    assert chunks("sm_90", "fma") == {16, 32}
    assert chunks("gfx942", "mfma") == {16, 32}
    assert chunks("gfx1250", "wmma") == {32}
