"""llvmlite toolchains: a Python interpreter whose llvmlite provides LLVM.

    interpreter --(_llvmlite_probe.py, subprocess)--> LLVM version, per-processor
        datalayout and "recognized?"  --lane_for_major--> lane or refusal
        --apply_drift_guard--> ToolchainInfo

The project's own interpreter (llvmlite 0.50, LLVM 22) is one; lane
environments made by `rocke-aot toolchain install llvm20` (llvmlite 0.46,
LLVM 20) are others. The probe runs in a subprocess because the interpreter
is in general not this one, and because LLVM misbehaves on bad input.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

from rocke_aot.aot.compiler import compile_llvmlite
from rocke_aot.aot.compiler.files import file_sha256
from rocke_aot.aot.compiler.options import LLVMLITE
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.toolchains.base import Toolchain, ToolchainInfo, info_for_major
from rocke_aot.aot.toolchains.drift import apply_drift_guard
from rocke_aot.arch import ARCHES
from rocke_aot.errors import ToolchainError, ToolchainRefused
from rocke_aot.targets import Target

_PROBE = Path(__file__).with_name("_llvmlite_probe.py")
_TRIPLES = {"amdgcn": "amdgcn-amd-amdhsa", "nvptx64": "nvptx64-nvidia-cuda"}


def wired_processors() -> dict[str, list[str]]:
    """triple -> the processors rocke-aot wires for it (from the one arch table)."""
    out: dict[str, list[str]] = {}
    for name, info in ARCHES.items():
        out.setdefault(_TRIPLES[info.family], []).append(name)
    return out


@functools.cache
def _probe(python: str) -> dict:
    try:
        proc = subprocess.run(
            [python, "-I", str(_PROBE), json.dumps(wired_processors())],
            capture_output=True, text=True, timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolchainError(f"cannot run interpreter {python}: {e}") from e
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolchainError(f"llvmlite probe failed under {python}: {last}")
    return json.loads(proc.stdout)


class LlvmliteToolchain(Toolchain):
    kind = "llvmlite"
    tools = ("linker", "ptxas")  # ld.lld links its HSACOs, ptxas assembles its PTX into cubins

    def __init__(self, python: str | Path | None = None, label: str | None = None):
        self.python = str(python or sys.executable)
        self.label = label

    def __repr__(self) -> str:
        return f"LlvmliteToolchain({self.python!r})"

    @functools.cached_property
    def _info(self) -> ToolchainInfo:
        where = f"llvmlite under {self.python}"
        try:
            probe = _probe(self.python)
        except ToolchainError as e:
            return ToolchainInfo(self.kind, self.python, None, None, None, str(e))
        targets = probe["targets"]
        arches = tuple(p for p, t in targets.items() if t.get("known"))
        info = info_for_major(
            self.kind, self.python, probe["llvm_version"], probe["llvm_major"], toolchain=where,
            arches=arches,
            datalayouts={p: targets[p]["datalayout"] for p in arches},
            extra={"llvmlite_version": probe["llvmlite_version"], "label": self.label or "",
                   "library": probe.get("library") or ""},
        )
        return apply_drift_guard(info)

    def detect(self) -> ToolchainInfo:
        return self._info

    def core_identity(self) -> dict[str, str]:
        """Versions and the sha256 of this interpreter's libllvmlite (two wheels of one version
        may carry different LLVM builds). identity(target) adds the linker (an HSACO) or ptxas
        (a cubin)."""
        info = self.detect()
        library = info.extra.get("library")
        if not info.usable or not library:
            raise ToolchainRefused(f"llvmlite under {self.python}: "
                                   f"{info.refusal or 'the probe did not report the libllvmlite path'}")
        return {
            "kind": self.kind,
            "llvm_version": str(info.llvm_version),
            "llvmlite_version": str(info.extra.get("llvmlite_version")),
            "library_sha256": file_sha256(library),
        }

    def compile_options(self, target: Target) -> dict:
        return LLVMLITE.for_target(target)

    def compile(self, ir: str, target: Target, *, timeout: float = 120.0) -> CompileResult:
        return compile_llvmlite(self.python, ir, target, timeout=timeout)
