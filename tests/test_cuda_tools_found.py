"""Which ptxas / cuobjdump the build runs (aot/compiler/ptx.py find_ptxas, aot/sass.py find_cuobjdump):
the one setup linked beside the interpreter comes before anything on PATH, ROCKE_AOT_PTXAS /
ROCKE_AOT_CUOBJDUMP before that, and a named file that is not executable fails, never falls through.
Stand-in executables in a temporary venv bin and a temporary PATH folder; the real ones are checked
by the CI run itself (PATH=/usr/bin:/bin: tests/test_cubin_resources.py, tests/test_l2_probe.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from rocke_aot.aot import sass
from rocke_aot.aot.compiler import ptx
from rocke_aot.errors import ToolchainError


def _exe(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho stand-in\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def host(tmp_path, monkeypatch):
    venv_bin, on_path = tmp_path / "venv" / "bin", tmp_path / "cuda" / "bin"
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.delenv("ROCKE_AOT_PTXAS", raising=False)
    monkeypatch.delenv("ROCKE_AOT_CUOBJDUMP", raising=False)
    return venv_bin, on_path


@pytest.mark.parametrize("tool, find, env", [("ptxas", ptx.find_ptxas, "ROCKE_AOT_PTXAS"),
                                             ("cuobjdump", sass.find_cuobjdump, "ROCKE_AOT_CUOBJDUMP")])
def test_setup_s_tool_beside_the_interpreter_wins_over_path(host, tmp_path, monkeypatch, tool, find, env):
    venv_bin, on_path = host
    path_one = _exe(on_path / tool)
    assert find() == path_one  # nothing beside the interpreter: PATH's
    mine = _exe(venv_bin / tool)
    assert find() == mine  # setup's, though PATH has one
    named = _exe(tmp_path / "elsewhere" / tool)
    monkeypatch.setenv(env, named)
    assert find() == named  # the user's choice over both
    (tmp_path / "not-executable").write_text("")
    monkeypatch.setenv(env, str(tmp_path / "not-executable"))
    with pytest.raises(ToolchainError, match=rf"^{env}='.*not-executable' is not an executable file"):
        find()


def test_no_ptxas_anywhere_names_where_it_looked(host, monkeypatch):
    venv_bin, _ = host
    monkeypatch.setattr(ptx, "find_executable", lambda name, env, candidates, missing: (_ for _ in ()).throw(
        ToolchainError(missing)))  # the host's own /usr/local/bin/ptxas must not answer
    with pytest.raises(ToolchainError, match=rf"ptxas not found \(ROCKE_AOT_PTXAS unset, not in {venv_bin}, not on "
                                             r"PATH.*scripts/setup.sh --only ptxas"):
        ptx.find_ptxas()


def test_the_cli_compiles_sm_90_with_no_cuda_on_path(tmp_path):
    """CI's PATH (no CUDA on it) and the installed command: the sm_90 compile finds setup's ptxas
    beside the interpreter. Which ptxas assembled the cubin is read from the cubin itself: CUDA
    13.5's (setup's wheel) writes EIATTR_LANGUAGE (0x66) first in the kernel's .nv.info, CUDA 13.0's
    (/usr/local/bin on some hosts) does not write it."""
    import json
    import os
    import subprocess

    from elftools.elf.elffile import ELFFile

    exe = Path(sys.executable).parent / "rocke-aot"
    out = tmp_path / "k.cubin"
    p = subprocess.run([str(exe), "compile", "--family", "gemm", "--arch", "sm_90", "--lane", "llvm22", "--spec",
                        '{"path": "fma"}', "-o", str(out), "--json"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    kernel = json.loads(p.stdout)["code_object"]["kernel"]
    with open(out, "rb") as f:
        own = ELFFile(f).get_section_by_name(f".nv.info.{kernel}").data()
    assert own[:8] == bytes([4, 0x66, 4, 0, 3, 0, 0, 0])  # EIFMT_SVAL EIATTR_LANGUAGE: 3 (PTX)
