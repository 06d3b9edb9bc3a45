"""Run one external compiler tool (ld.lld, ptxas) under a deadline, failures as CompileErrors.

    run_tool("ptxas", [ptxas, "-arch=sm_90", ..., "k.ptx", "-o", "k.cubin"], timeout=60)
        exit 0          -> None (the caller reads the tool's output file)
        past timeout    -> CompileTimeout("ptxas exceeded 60s", stderr so far)
        nonzero exit    -> CompileError("ptxas failed: <first error lines>", full log)
"""

from __future__ import annotations

import subprocess

from rocke_aot.aot.compiler.worker import llvm_error_summary
from rocke_aot.errors import CompileError, CompileTimeout


def run_tool(name: str, cmd: list[str], *, timeout: float) -> None:
    try:
        # A zero or negative budget still gets a moment, so the timeout path is the one taken.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max(timeout, 0.1))
    except subprocess.TimeoutExpired as e:
        raise CompileTimeout(f"{name} exceeded {timeout:g}s", str(e.stderr or "")) from None
    if proc.returncode != 0:
        log = (proc.stderr + proc.stdout).strip()
        raise CompileError(f"{name} failed: {llvm_error_summary(log)}", log)
