"""NVPTX: PTX text -> cubin with ptxas (the PTX is kept beside the cubin).

    PTX --(tmpdir/k.ptx)--> ptxas -arch=sm_90 PTXAS_FLAGS (-O3, options.py) k.ptx -o k.cubin --> cubin bytes

ptxas is located through ROCKE_AOT_PTXAS, PATH, then the usual CUDA install paths.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from pathlib import Path

from rocke_aot import settings
from rocke_aot.aot.compiler._tool import run_tool
from rocke_aot.aot.compiler.options import PTXAS_FLAGS
from rocke_aot.aot.toolchains.base import file_sha256, find_executable
from rocke_aot.errors import ToolchainError

ENV_PTXAS = settings.PTXAS


def find_ptxas() -> str:
    return find_executable("ptxas", ENV_PTXAS, ("/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas"),
                           f"ptxas not found ({ENV_PTXAS} unset, not on PATH, not in /usr/local/cuda/bin)")


@functools.lru_cache(maxsize=None)
def ptxas_version(path: str | None = None) -> str:
    path = path or find_ptxas()
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "unknown"


def ptxas_identity() -> dict[str, str]:
    """ptxas's version line and the sha256 of the file found (a wrapper script hashes as the
    script; its version line still names the real ptxas). "absent" when there is none: the
    sm_90 compile then fails, and a later install moves every key of that toolchain."""
    try:
        path = find_ptxas()
    except ToolchainError:
        return {"ptxas": "absent"}
    return {"ptxas": ptxas_version(path), "ptxas_sha256": file_sha256(path)}


def assemble_cubin(ptx: str, arch: str, *, timeout: float = 60.0) -> bytes:
    ptxas = find_ptxas()
    with tempfile.TemporaryDirectory(prefix="rocke-ptxas-") as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        run_tool("ptxas", [ptxas, f"-arch={arch}", *PTXAS_FLAGS, str(src), "-o", str(out)], timeout=timeout)
        return out.read_bytes()
