"""`rocke-aot lower` and `rocke-aot compile` through click's CliRunner (real lowering,
real toolchains, real validation; exit codes and messages as the binary gives them)."""

from __future__ import annotations

import json

import pytest
from _kernels import ADD1
from click.testing import CliRunner

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.codeobject import validate
from rocke_aot.cli.main import cli
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args, ok=True):
        result = runner.invoke(cli, list(args))
        if ok:
            assert result.exit_code == 0, (result.output, result.exception)
        return result

    return invoke


def test_lower_prints_deterministic_ir(run):
    args = ("lower", "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22", "--spec", '{"path": "mfma"}')
    first, second = run(*args).output, run(*args).output
    assert first == second
    assert 'target triple = "amdgcn-amd-amdhsa"' in first and "llvm.amdgcn.mfma" in first
    doc = json.loads(run(*args, "--json").output)
    assert doc["kernel_name"].startswith("gemm_") and doc["ir"] == first and doc["lane"] == "llvm22"


def test_compile_writes_a_valid_hsaco_and_prints_metadata(run, tmp_path):
    out = tmp_path / "k.hsaco"
    result = run("compile", "--arch", "gfx942:sramecc+:xnack-", "--lane", "llvm22",
                 "--spec", '{"path": "mfma"}', "-o", str(out))
    assert "kernarg_segment_ptr" in result.output and "vgpr" in result.output
    info = validate(out.read_bytes(), Target.parse("gfx942:sramecc+:xnack-"))
    assert info.kernel in result.output
    doc = json.loads(run("compile", "--arch", "gfx1250", "--lane", "llvm22", "--spec", '{"path": "wmma"}',
                         "-o", str(tmp_path / "w.hsaco"), "--json").output)
    assert doc["format"] == "hsaco" and doc["code_object"]["wavefront_size"] == 32
    assert doc["kernel"]["kernel_name"] == doc["code_object"]["kernel"]
    assert "LLD" in doc["toolchain"]["linker"]


def test_compile_sm90_keeps_the_ptx(run, tmp_path):
    doc = json.loads(run("compile", "--arch", "sm_90", "--lane", "llvm22", "-o", str(tmp_path / "k.cubin"),
                         "--json").output)
    assert doc["format"] == "cubin" and (tmp_path / "k.ptx").read_text().count(".target sm_90") == 1


def test_compile_on_the_llvm20_lane(run, tmp_path, llvm20):
    doc = json.loads(run("compile", "--arch", "gfx950", "--lane", "llvm20", "-o", str(tmp_path / "k.hsaco"),
                         "--json").output)
    assert doc["toolchain"]["llvm_version"].startswith("20.") and doc["toolchain_location"] == llvm20.python


def test_compile_an_ir_file(run, tmp_path):
    src = tmp_path / "k.ll"
    src.write_text(ADD1)
    doc = json.loads(run("compile", "--ir", str(src), "--arch", "gfx90a", "--lane", "llvm22",
                         "-o", str(tmp_path / "k.hsaco"), "--json").output)
    assert doc["code_object"]["kernel"] == "add1" and doc["kernel"] is None


def test_refusals_and_bad_input(run, tmp_path, monkeypatch, llvm20):
    # gfx1250 on llvm20: compile refuses before lowering, by the chooser the build plan uses
    # (LLVM 20 has no gfx1250: the real llvm20 toolchain's detected arches lack it)
    assert "gfx1250" not in llvm20.detect().arches
    r = run("compile", "--arch", "gfx1250", "--lane", "llvm20", "-o", str(tmp_path / "x"), ok=False)
    assert r.exit_code == 1 and not (tmp_path / "x").exists()
    assert r.stderr.startswith("Error: ToolchainError: llvm20: no toolchain here can target gfx1250 (found: ")
    assert llvm20.python in r.stderr
    # lower needs no toolchain: the lowering itself refuses the arch the lane's profile lacks
    r = run("lower", "--arch", "gfx1250", "--lane", "llvm20", ok=False)
    assert r.exit_code == 1 and r.stderr.startswith("Error: CapabilityError: ")
    r = run("lower", "--arch", "gfx942", "--lane", "llvm99", ok=False)
    assert r.exit_code == 2 and "unknown compiler lane" in r.output
    r = run("lower", "--arch", "gfx942", "--lane", "llvm22", "--spec", "[1]", ok=False)
    assert r.exit_code == 2 and r.stderr == "Error: --spec must be a JSON object, got list\n"
    r = run("lower", "--arch", "gfx942", "--lane", "llvm22", "--spec", '{"block_m": 48}', ok=False)
    assert r.exit_code == 2 and "block_m=48" in r.stderr  # GemmSpec's own check (a SpecError)
    monkeypatch.delenv("ROCKE_AOT_LANE", raising=False)
    r = run("lower", "--arch", "gfx942", ok=False)
    assert r.exit_code == 2 and "--lane" in r.output
    # a lane with no toolchain on this host is a named error: hide llvm23's (AMD's LLVM 23)
    others = [tc for tc in tcs.detect_all() if tc.detect().lane != "llvm23"]
    monkeypatch.setattr(tcs, "detect_all", lambda: others)
    assert not tcs.toolchains_for_lane(get_lane("llvm23"))
    r = run("compile", "--arch", "gfx942", "--lane", "llvm23", "-o", str(tmp_path / "y"), ok=False)
    assert r.exit_code == 1 and "ToolchainError: llvm23: no LLVM 23 toolchain" in r.stderr


def test_compile_sm90_prints_what_ptxas_reports(run, tmp_path):
    """The text output's cubin resources against `ptxas -v` on the PTX the command kept (an
    independent reading of the same kernel): registers, barriers and shared memory."""
    import re
    import subprocess

    from rocke_aot.aot.compiler.ptx import find_ptxas

    spec = {"dtype": "f16", "c": 3, "p": 16, "tile_h": 4, "tile_w": 8, "r_blk": 4, "k_chunk": 16, "path": "mma"}
    out = run("compile", "--family", "conv_dgrad_patch", "--spec", json.dumps(spec), "--arch", "sm_90", "--lane",
              "llvm22", "-o", str(tmp_path / "k.cubin")).output
    got = re.search(r"registers  (\d+) per thread  barriers (\d+)  block (\d+) threads\n"
                    r"memory     shared (\d+) B  local (\d+) B/thread", out)
    assert got, out
    ptxas = subprocess.run([find_ptxas(), "-v", "-arch=sm_90", str(tmp_path / "k.ptx"), "-o",
                            str(tmp_path / "ref.cubin")], capture_output=True, text=True, check=True).stderr
    ref = re.search(r"Used (\d+) registers, used (\d+) barriers(?:, (\d+) bytes smem)?", ptxas)
    assert ref, ptxas
    assert (int(got[1]), int(got[2]), int(got[4])) == (int(ref[1]), int(ref[2]), int(ref[3] or 0))
    assert int(got[3]) == 256 and int(got[5]) == 0  # 8 warps (geometry), no local memory in the ptxas log
    assert "0 bytes stack frame" in ptxas
