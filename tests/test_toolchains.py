"""Real toolchain detection and the datalayout drift guard."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
from click.testing import CliRunner

from rocke_aot import lanes
from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.toolchains.drift import apply_drift_guard
from rocke_aot.aot.toolchains.llvmlite_toolchain import LlvmliteToolchain
from rocke_aot.cli.main import cli
from rocke_aot.errors import ToolchainError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target


def test_project_interpreter_is_llvm22(llvm22):
    info = LlvmliteToolchain(sys.executable).detect()
    assert (info.llvm_major, info.lane, info.refusal) == (22, "llvm22", None)
    assert {"gfx90a", "gfx942", "gfx950", "gfx1250", "sm_90"} <= set(info.arches)


def test_lane_env_is_llvm20_and_does_not_know_gfx1250(llvm20):
    info = llvm20.detect()
    assert (info.llvm_major, info.lane) == (20, "llvm20")
    assert info.extra["llvmlite_version"].startswith("0.46")
    assert "gfx942" in info.arches and "gfx1250" not in info.arches


@pytest.mark.parametrize("lane", ["llvm20", "llvm22"])
def test_drift_guard_passes_for_real_toolchains(all_toolchains, lane):
    (tc,) = tcs.toolchains_for_lane(get_lane(lane), all_toolchains)[:1]
    info = tc.detect()
    assert info.drift and all(v == "ok" for v in info.drift.values()), info.drift
    # the profile strings are literally what the target machines report
    for processor, dl in info.datalayouts.items():
        family = "nvptx64" if processor.startswith("sm_") else "amdgcn"
        assert dl == lanes.get_lane(lane).profile.datalayout(family)


def test_drift_guard_refuses_a_wrong_datalayout(llvm22):
    info = llvm22.detect()
    good = lanes.get_lane("llvm22").profile
    wrong = dataclasses.replace(good, datalayouts={**good.datalayouts, "amdgcn": "e-p:32:32-WRONG"})
    guarded = apply_drift_guard(dataclasses.replace(info, refusal=None, drift={}), profile=wrong)
    assert not guarded.usable
    assert "e-p:32:32-WRONG" in guarded.refusal and good.datalayouts["amdgcn"] in guarded.refusal
    assert guarded.drift["gfx942"].startswith("drift:") and guarded.drift["sm_90"] == "ok"


def test_llvm20_datalayout_is_refused_under_llvm22_profile(llvm20):
    # The real LLVM 20 datalayout differs from the llvm22 profile's: the guard must see it.
    info = llvm20.detect()
    guarded = apply_drift_guard(dataclasses.replace(info, refusal=None), profile=lanes.get_lane("llvm22").profile)
    assert not guarded.usable and "datalayout drift" in guarded.refusal


def test_unknown_major_toolchain_is_refused(monkeypatch):
    # A stand-in version source is allowed only for majors no real toolchain here has (21).
    from rocke_aot.aot.toolchains import llvmlite_toolchain as mod

    real = mod._probe(sys.executable)
    monkeypatch.setattr(mod, "_probe", lambda python: {**real, "llvm_major": 21, "llvm_version": "21.1.0"})
    info = LlvmliteToolchain("/fake/python21").detect()
    assert info.lane is None and "LLVM major 21" in info.refusal and "/fake/python21" in info.refusal
    with pytest.raises(ToolchainError, match="LLVM major 21"):
        _ = LlvmliteToolchain("/fake/python21").lane


def test_broken_interpreter_is_a_refusal_not_a_crash(tmp_path):
    info = LlvmliteToolchain(tmp_path / "nope").detect()
    assert not info.usable and "cannot run interpreter" in info.refusal


def test_register_refuses_a_non_llvm_interpreter(tmp_home, tmp_path):
    bad = tmp_path / "py"
    bad.write_text("#!/bin/sh\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(ToolchainError, match="not registering"):
        tcs.register({"kind": "llvmlite", "python": str(bad)})
    assert not tcs.registry_path().exists()


def test_register_and_remove_an_offline_interpreter(tmp_home, llvm20):
    r = CliRunner().invoke(cli, ["toolchain", "register", "--python", llvm20.python])
    assert r.exit_code == 0, r.output
    assert "llvm20" in r.output
    assert [tc.detect().lane for tc in tcs.detect_all()][:2] == ["llvm22", "llvm20"]
    # readable by every user: an image's non-root user reads the registry its build (root) wrote
    assert tcs.registry_path().stat().st_mode & 0o777 == 0o644
    r = CliRunner().invoke(cli, ["toolchain", "remove", llvm20.python])
    assert r.exit_code == 0
    assert "llvm20" not in [tc.detect().lane for tc in tcs.detect_all()]


def test_corrupt_registry_is_a_named_error(tmp_home):
    tmp_home.mkdir(parents=True, exist_ok=True)
    tcs.registry_path().write_text("{not json")
    with pytest.raises(ToolchainError, match="not valid JSON"):
        tcs.detect_all()


def test_an_entry_of_unknown_kind_is_listed_refused_and_the_other_lanes_work(tmp_home):
    # Another rocke-aot version registered a kind this one does not know: a shared
    # $ROCKE_AOT_HOME must not stop every build (it stopped the llvm22 lane before).
    tmp_home.mkdir(parents=True, exist_ok=True)
    tcs.registry_path().write_text(json.dumps({"toolchains": [{"kind": "from-the-future", "python": "/x/bin/python"}]}))
    found = tcs.detect_all()
    odd = [tc for tc in found if tc.detect().kind == "from-the-future"]
    assert len(odd) == 1 and not odd[0].detect().usable
    assert "does not know" in odd[0].detect().refusal and "toolchain remove /x/bin/python" in odd[0].detect().refusal
    assert tcs.toolchain_for(get_lane("llvm22"), Target.parse("gfx942")).detect().lane == "llvm22"
    with pytest.raises(ToolchainError, match="does not know"):
        odd[0].identity(Target.parse("gfx942"))
    r = CliRunner().invoke(cli, ["toolchains", "--json"])
    assert r.exit_code == 0, r.output
    assert any(row["kind"] == "from-the-future" and row["refusal"] for row in json.loads(r.output))


def test_toolchains_json_lists_real_rows(all_toolchains):
    r = CliRunner().invoke(cli, ["toolchains", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    by_lane = {row["lane"]: row for row in rows if row["lane"]}
    assert by_lane["llvm22"]["llvm_version"].startswith("22.")
    assert by_lane["llvm20"]["llvm_version"].startswith("20.")
    for row in rows:
        assert {"kind", "location", "llvm_version", "lane", "refusal", "arches", "drift"} <= set(row)
    r = CliRunner().invoke(cli, ["toolchains", "--json", "--lane", "llvm20"])
    assert {row["lane"] for row in json.loads(r.output)} == {"llvm20"}


def test_toolchains_table_mentions_each_lane():
    r = CliRunner().invoke(cli, ["toolchains"])
    assert r.exit_code == 0 and "llvm22" in r.output and "llvm20" in r.output
