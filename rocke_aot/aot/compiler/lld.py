"""Locate the linker, ld.lld, and say which one it is.

    ROCKE_AOT_LLD (must exist) -> PATH (ld.lld) -> /usr/lib/llvm-<N>/bin/ld.lld (newest N)
        -> /opt/rocm/llvm/bin/ld.lld
    version: the first line of `ld.lld --version` ("Debian LLD 22.1.8 (compatible ...)")

The version line goes into every code object's .comment ("Linker: Debian LLD
22.1.8"), so the whole line (vendor included) is part of the toolchain identity
and hence of the cache key.
"""

from __future__ import annotations

import functools
import glob
import re
import subprocess

from rocke_aot import settings
from rocke_aot.aot.compiler.files import file_sha256, find_executable
from rocke_aot.errors import ToolchainError

_VERSION_RE = re.compile(r"LLD (\d+)\.(\d+)\.(\d+)")


def _llvm_dir_key(path: str) -> int:
    m = re.search(r"llvm-(\d+)", path)
    return int(m.group(1)) if m else -1


def find_lld() -> str:
    """The ld.lld to use; ToolchainError naming every place looked at when none is found."""
    candidates = sorted(glob.glob("/usr/lib/llvm-*/bin/ld.lld"), key=_llvm_dir_key, reverse=True)
    return find_executable(
        "ld.lld", settings.LLD, [*candidates, "/opt/rocm/llvm/bin/ld.lld"],
        f"ld.lld not found ({settings.LLD} unset, not on PATH, no /usr/lib/llvm-*/bin/ld.lld, "
        "no /opt/rocm/llvm/bin/ld.lld): install Debian's lld-22 (apt-get install lld-22)",
    )


@functools.cache
def lld_version_line(path: str) -> str:
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolchainError(f"cannot run {path} --version: {e}") from e
    line = (proc.stdout.strip().splitlines() or [""])[0]
    if proc.returncode != 0 or not _VERSION_RE.search(line):
        raise ToolchainError(f"{path} --version did not report an LLD version: {line or proc.stderr.strip()!r}")
    # "Debian LLD 22.1.8 (compatible with GNU linkers)" -> "Debian LLD 22.1.8"
    return line.split(" (compatible")[0].strip()


def lld_version(path: str | None = None) -> tuple[int, int, int]:
    m = _VERSION_RE.search(lld_version_line(path or find_lld()))
    assert m is not None, "lld_version_line refuses a line without a version"
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def linker_identity() -> dict[str, str]:
    """What about the linker changes output bytes: its version line (goes into .comment) and
    the binary itself (two builds of one version may still differ). "absent" when there is
    none (a machine that builds only sm_90 cubins): AMDGPU links then fail, and a later
    install moves every HSACO key (a cubin's key holds no linker: targets.FORMAT_TOOLS)."""
    try:
        path = find_lld()
    except ToolchainError:
        return {"linker": "absent"}
    return {"linker": lld_version_line(path), "linker_sha256": file_sha256(path)}
