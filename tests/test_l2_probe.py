"""bench/l2_probe.py's kernel (hand-written PTX, run by the lead on the H200) assembles for sm_90
with the ptxas the build uses (setup's, found without PATH: CI has no CUDA on it): no spills, no stack, and its loop keeps the loads serial (each address
depends on the previous value), so a syntax slip never costs a device call."""

from __future__ import annotations

import subprocess
from pathlib import Path

from _bench import load_bench

from rocke_aot.aot.compiler.ptx import find_ptxas

PROBE = Path(__file__).resolve().parents[1] / "bench" / "l2_probe.py"


def _ptx() -> str:
    return load_bench("l2_probe").PTX


def test_probe_ptx_assembles_for_sm_90(tmp_path):
    ptxas = find_ptxas()  # setup installs it: a missing one fails (ToolchainError), never skips
    src = tmp_path / "probe.ptx"
    src.write_text(_ptx())
    p = subprocess.run([ptxas, "-arch=sm_90", "-v", str(src), "-o", str(tmp_path / "probe.cubin")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in p.stderr + p.stdout
    assert (tmp_path / "probe.cubin").stat().st_size > 0
    ptx = _ptx()
    # the serial chain: the loaded value, masked by a parameter, feeds the next address
    assert "and.b32 %r19, %r17, %r14" in ptx and "add.u64 %rd10, %rd3, %rd9" in ptx
