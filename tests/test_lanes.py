"""The lane registry: major -> lane, explicit lane validation on every surface."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from rocke_aot import lanes
from rocke_aot.cli.main import cli
from rocke_aot.errors import CapabilityError, LaneError


@pytest.mark.parametrize("major,lane", [(20, "llvm20"), (22, "llvm22"), (23, "llvm23"), (24, "llvm24")])
def test_major_maps_to_its_lane(major, lane):
    assert lanes.lane_for_major(major, "test").name == lane


@pytest.mark.parametrize("major", [15, 19, 21, 25, 99])
def test_other_majors_fail_closed_naming_major_toolchain_and_lanes(major):
    with pytest.raises(LaneError) as e:
        lanes.lane_for_major(major, toolchain="llvmlite under /x/python")
    msg = str(e.value)
    assert f"LLVM major {major}" in msg and "/x/python" in msg
    for lane in lanes.LANES:
        assert lane.name in msg


def test_newer_major_is_never_clamped():
    with pytest.raises(LaneError, match="not clamped"):
        lanes.lane_for_major(lanes.LANES[-1].major + 1, "t")


@pytest.mark.parametrize("bad", [True, 22.0, "22", None])
def test_major_must_be_an_int(bad):
    with pytest.raises(LaneError):
        lanes.lane_for_major(bad, "t")


def test_lanes_and_profiles_are_distinct():
    # llvm24 got its own profile on evidence (docs/llvm24-lane.md); lanes still name profiles.
    assert lanes.get_lane("llvm24").profile is lanes.PROFILES["llvm24"]
    assert lanes.get_lane("llvm23") != lanes.get_lane("llvm24")
    assert {l.name for l in lanes.lanes_for_profile("llvm23")} == {"llvm23"}
    assert lanes.get_lane("llvm20").profile.datalayout("amdgcn") != lanes.get_lane("llvm22").profile.datalayout("amdgcn")


@pytest.mark.parametrize("value", ["llvm25", "LLVM22", "llvm 22", "", "22"])
def test_unknown_lane_names_are_value_errors(value):
    with pytest.raises(ValueError, match="unknown compiler lane"):
        lanes.get_lane(value)


@pytest.mark.parametrize("value", [22, 22.0, b"llvm22", ["llvm22"], {"lane": "llvm22"}, True])
def test_non_string_lanes_are_rejected_not_treated_as_absent(value):
    with pytest.raises(ValueError, match="must be a string"):
        lanes.get_lane(value)
    with pytest.raises(ValueError, match="must be a string"):
        lanes.resolve_lane(value, env={})


def test_resolve_lane_explicit_wins_and_env_is_validated():
    assert lanes.resolve_lane("llvm20", env={"ROCKE_AOT_LANE": "llvm22"}).name == "llvm20"
    assert lanes.resolve_lane(None, env={"ROCKE_AOT_LANE": "llvm22"}).name == "llvm22"
    assert lanes.resolve_lane(None, env={}) is None
    with pytest.raises(LaneError, match="ROCKE_AOT_LANE"):
        lanes.resolve_lane(None, env={"ROCKE_AOT_LANE": "llvm21"})
    with pytest.raises(LaneError, match="empty"):
        lanes.resolve_lane(None, env={"ROCKE_AOT_LANE": ""})


def test_require_capability_and_min_lane_name_the_op():
    lanes.require("llvm22", capability="wmma:gfx1250", op="wmma")
    with pytest.raises(CapabilityError, match="my-op.*wmma:gfx1250"):
        lanes.require("llvm20", capability="wmma:gfx1250", op="my-op")
    with pytest.raises(CapabilityError, match="scaled-op needs compiler lane llvm23"):
        lanes.require("llvm22", min_lane="llvm23", op="scaled-op")
    lanes.require("llvm24", min_lane="llvm23", op="scaled-op")
    with pytest.raises(ValueError):
        lanes.get_lane("llvm22").profile.has("no-such-capability")


@pytest.mark.parametrize("args", [["--lane", "llvm21"], ["--lane", "llvm25"], ["--lane", "22"]])
def test_cli_unknown_lane_exits_2_with_message(args):
    r = CliRunner().invoke(cli, ["toolchains", *args])
    assert r.exit_code == 2
    assert "unknown compiler lane" in r.output


def test_cli_env_lane_is_validated(monkeypatch):
    monkeypatch.setenv("ROCKE_AOT_LANE", "llvm19")
    r = CliRunner().invoke(cli, ["toolchains", "--json"])
    assert r.exit_code == 2 and "ROCKE_AOT_LANE" in r.output


def test_real_binary_unknown_lane_exits_2():
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("rocke-aot")
    p = subprocess.run([str(exe), "toolchain", "install", "llvm26"], capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert "unknown compiler lane 'llvm26'" in p.stderr
