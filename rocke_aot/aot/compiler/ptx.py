"""NVPTX: PTX text -> cubin with ptxas (the PTX is kept beside the cubin).

    IR ──ptx_processor──> the LLVM processor: the target's (sm_90), or its arch-specific form
                          (sm_90a) where the IR's ARCH_SPECIFIC_MD names it (wgmma kernels)
    PTX --(tmpdir/k.ptx)--> ptxas -arch=<the PTX's .target> PTXAS_FLAGS (-O3, options.py) k.ptx
        -o k.cubin --> cubin bytes

The processor is read from the IR the compiler consumes, so the cache key (which covers the IR)
covers it; anything but the target's processor or its "a" form is refused, never assembled.

Which ptxas (find_ptxas), first found wins:
    ROCKE_AOT_PTXAS            the user's choice; it must name an executable (a typo fails, it
                               never falls through)
    beside this interpreter    <venv>/bin/ptxas: the pinned wheel's binary scripts/setup.sh links
                               there (sys.executable's folder, symlinks not followed), so the
                               build uses the ptxas setup chose, not whichever CUDA is on PATH
    PATH, /usr/local/cuda/bin, /usr/local/bin   a host without the project's setup
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from rocke_aot import settings
from rocke_aot.aot.compiler._tool import run_tool
from rocke_aot.aot.compiler.files import file_sha256, find_executable
from rocke_aot.aot.compiler.options import PTXAS_FLAGS
from rocke_aot.errors import CompileError, ToolchainError


def beside_interpreter(name: str) -> str | None:
    """``name`` in this interpreter's bin folder (a venv's .venv/bin, where scripts/setup.sh links
    the pinned CUDA wheels' tools) when it is an executable file; None otherwise."""
    path = Path(sys.executable).parent / name  # not resolved: a venv's python links out of the venv
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def find_ptxas() -> str:
    """ROCKE_AOT_PTXAS, else the ptxas beside this interpreter (setup's), else PATH and the usual
    CUDA install folders (module doc); ToolchainError naming where it looked when there is none."""
    if settings.raw(settings.PTXAS) is None and (mine := beside_interpreter("ptxas")) is not None:
        return mine
    return find_executable("ptxas", settings.PTXAS, ("/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas"),
                           f"ptxas not found ({settings.PTXAS} unset, not in {Path(sys.executable).parent}, not on "
                           "PATH, not in /usr/local/cuda/bin or /usr/local/bin: bash scripts/setup.sh --only ptxas "
                           "installs it)")


@functools.cache
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


ARCH_SPECIFIC_MD = "rocke.nvptx.arch_specific"  # aot/lower/nvptx.py writes it
_NAMED_MD = re.compile(r"^!" + re.escape(ARCH_SPECIFIC_MD) + r"\s*=\s*!\{\s*!(\d+)\s*\}\s*$", re.M)
_PTX_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)", re.M)


def _allowed(name: str, processor: str) -> str:
    if name not in (processor, processor + "a"):
        raise CompileError(f"the IR asks for processor {name!r}; target {processor} assembles "
                           f"{processor} or {processor}a only")
    return name


def ptx_processor(ir: str, processor: str) -> str:
    """The processor LLVM compiles ``ir`` for: ``processor``, or the arch-specific one that the
    module's named metadata ARCH_SPECIFIC_MD gives (``!rocke.nvptx.arch_specific = !{!N}``,
    ``!N = !{!"sm_90a"}``)."""
    m = _NAMED_MD.search(ir)
    if m is None:
        return processor
    node = re.search(r"^!" + m.group(1) + r'\s*=\s*!\{\s*!"([^"]*)"\s*\}\s*$', ir, re.M)
    if node is None:
        raise CompileError(f"!{ARCH_SPECIFIC_MD} names node !{m.group(1)}, which is not one string")
    return _allowed(node.group(1), processor)


def ptx_target(ptx: str, processor: str) -> str:
    """The ``.target`` the PTX declares (what ptxas must assemble it for), checked as above."""
    m = _PTX_TARGET.search(ptx)
    if m is None:
        raise CompileError("the PTX declares no .target")
    return _allowed(m.group(1), processor)


def assemble_cubin(ptx: str, arch: str, *, timeout: float = 60.0) -> bytes:
    """ptxas for the PTX's own .target (``arch`` or its arch-specific form, ptx_target)."""
    arch = ptx_target(ptx, arch)
    ptxas = find_ptxas()
    with tempfile.TemporaryDirectory(prefix="rocke-ptxas-") as tmp:
        src, out = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        src.write_text(ptx)
        run_tool("ptxas", [ptxas, f"-arch={arch}", *PTXAS_FLAGS, str(src), "-o", str(out)], timeout=timeout)
        return out.read_bytes()
