"""COMGR toolchains: a libamd_comgr through hip-python's rocm.bindings.amd_comgr.

    locate: ROCKE_AOT_COMGR (must exist) | $ROCM_PATH/lib, /opt/rocm/lib | Debian's
            /usr/lib/<multiarch>/libamd_comgr.so.N
         |
    detect (in an isolated worker: a COMGR crash must not kill the caller)
         ├── comgr.info     interface version, ISA names  -> arches it can target
         └── comgr.compile  a probe kernel (no pointers, valid IR for any LLVM) for the
                            first wired ISA it knows -> executable
                            -> .comment "Linker: <vendor> LLD 15.0.6" -> LLVM major 15
         -> lanes.lane_for_major(major)  -> lane, or refusal (Debian's COMGR: LLVM 15)

    compile(ir, target): IR text as BC -> relocatable -> executable, in a worker
                         (aot/compiler/_comgr_handler.py under this interpreter).

The LLVM major is read from what the toolchain wrote into a code object it just
made (its built-in linker records its version), never from a table of package
versions. COMGR reports no datalayout, so there is no drift check here; the
refusal of an unqualified major comes first anyway.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import sys
from pathlib import Path

from rocke_aot import settings
from rocke_aot.aot.compiler import WorkerSpec, default_pool
from rocke_aot.aot.compiler.files import file_sha256
from rocke_aot.aot.compiler.options import COMGR
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.toolchains.base import Toolchain, ToolchainInfo, info_for_major
from rocke_aot.arch import ARCHES
from rocke_aot.errors import CompileError, ToolchainError
from rocke_aot.targets import Target

PLUGIN = Path(__file__).resolve().parent.parent / "compiler" / "_comgr_handler.py"
_LLD_RE = re.compile(r"LLD (\d+)\.(\d+)\.(\d+)")
_CLANG_RE = re.compile(r"clang version (\d+)\.(\d+)\.(\d+)")

# A kernel that every LLVM since the code object v3 days parses (no pointer syntax,
# no attributes), so the probe itself cannot fail for reasons of IR dialect.
PROBE_IR = 'target triple = "amdgcn-amd-amdhsa"\n\ndefine amdgpu_kernel void @rocke_probe() {\n  ret void\n}\n'


def candidate_libraries() -> list[str]:
    """COMGR libraries on this host, most specific first (env, ROCm, Debian)."""
    env = settings.raw(settings.COMGR)
    if env is not None:
        return [env]
    found: list[str] = []
    roots = [os.environ.get("ROCM_PATH"), "/opt/rocm"]
    patterns = [f"{r}/lib/libamd_comgr.so*" for r in roots if r]
    patterns.append("/usr/lib/*-linux-gnu/libamd_comgr.so*")
    seen = set()
    for pattern in patterns:
        for path in sorted(glob.glob(pattern)):
            real = os.path.realpath(path)
            if real not in seen and os.path.isfile(real):
                seen.add(real)
                found.append(path)
    return found


def _isa_processor(isa: str) -> str:
    # "amdgcn-amd-amdhsa--gfx90a:xnack+" -> "gfx90a"
    return isa.split("--", 1)[-1].split(":", 1)[0]


def _llvm_version_from(comment: tuple[str, ...]) -> str | None:
    for regex in (_LLD_RE, _CLANG_RE):
        for line in comment:
            m = regex.search(line)
            if m:
                return ".".join(m.groups())
    return None


class ComgrToolchain(Toolchain):
    kind = "comgr"

    def __init__(self, library: str | Path, *, python: str | None = None):
        self.library = str(library)
        self.python = python or sys.executable  # this interpreter has hip-python

    def __repr__(self) -> str:
        return f"ComgrToolchain({self.library!r})"

    def worker_spec(self):
        return WorkerSpec.of(self.python, plugins=[str(PLUGIN)], env={settings.COMGR_LIB: self.library})

    def _call(self, kind: str, payload: dict, timeout: float):
        return default_pool().call(self.worker_spec(), kind, payload, timeout=timeout)

    @functools.cached_property
    def _info(self) -> ToolchainInfo:
        from rocke_aot.aot.codeobject import comment_strings

        def refused(reason: str, **kw) -> ToolchainInfo:
            return ToolchainInfo(self.kind, self.library, kw.pop("version", None), kw.pop("major", None),
                                 None, reason, **kw)

        if not os.path.isfile(self.library):
            return refused(f"no COMGR library at {self.library}")
        try:
            info = self._call("comgr.info", {}, 120.0).result
        except CompileError as e:
            return refused(f"COMGR at {self.library} could not be loaded: {e}")
        isas = info["isas"]
        wired = [p for p, a in ARCHES.items() if a.family == "amdgcn"]
        known = {_isa_processor(i) for i in isas}
        arches = tuple(p for p in wired if p in known)
        extra = {"comgr_interface": ".".join(map(str, info["interface"])), "isa_count": len(isas)}
        probe_isa = next((i for i in isas if _isa_processor(i) in arches), isas[0] if isas else None)
        if probe_isa is None:
            return refused("COMGR reports no ISA", arches=arches, extra=extra)
        try:
            exe = self._call("comgr.compile", {"ir": PROBE_IR, "isa": probe_isa, "options": list(COMGR.flags)}, 120.0).blob
            comment = comment_strings(exe)
        except Exception as e:  # a probe failure refuses the toolchain, with the reason
            return refused(f"COMGR probe compile for {probe_isa} failed: {e}", arches=arches, extra=extra)
        version = _llvm_version_from(comment)
        extra.update({"probe_isa": probe_isa, "recorded": list(comment)})
        if version is None:
            return refused(f"COMGR probe code object records no LLVM version (.comment: {comment!r})",
                           arches=arches, extra=extra)
        return info_for_major(self.kind, self.library, version, int(version.split(".")[0]),
                              toolchain=f"COMGR at {self.library}", arches=arches, extra=extra)

    def detect(self) -> ToolchainInfo:
        return self._info

    def core_identity(self) -> dict[str, str]:  # COMGR links inside itself: no tools
        info = self.detect()
        return {
            "kind": self.kind,
            "llvm_version": str(info.llvm_version),
            "comgr_interface": str(info.extra.get("comgr_interface")),
            "linker": " / ".join(info.extra.get("recorded", [])),
            "library_sha256": file_sha256(self.library),
        }

    def compile_options(self, target: Target) -> dict:
        return COMGR.for_target(target)

    def isa_name(self, target: Target) -> str:
        return f"amdgcn-amd-amdhsa--{target.id}"

    def compile(self, ir: str, target: Target, *, timeout: float = 120.0) -> CompileResult:
        if not target.is_amdgpu:
            raise CompileError(f"COMGR compiles AMDGPU code only, not {target}")
        info = self.detect()
        if info.llvm_major is None:
            raise ToolchainError(f"COMGR at {self.library} is unusable: {info.refusal}")
        if target.processor not in info.arches:
            raise CompileError(f"COMGR at {self.library} (LLVM {info.llvm_version}) does not know {target.processor}; "
                               f"it knows {', '.join(info.arches) or 'none of the wired arches'}")
        reply = self._call("comgr.compile", {"ir": ir, "isa": self.isa_name(target), "options": list(COMGR.flags)}, timeout)
        return CompileResult(reply.blob, "hsaco", log="\n".join(x for x in (reply.result.get("log"), reply.log) if x))


def discover() -> list[ComgrToolchain]:
    """Every COMGR library found (qualified or not: see ``.detect().refusal``)."""
    return [ComgrToolchain(lib) for lib in candidate_libraries()]


def from_registry(entry: dict) -> ComgrToolchain:
    lib = entry.get("library")
    if not isinstance(lib, str):
        raise ToolchainError(f"a registered COMGR toolchain needs a 'library' path, got {entry!r}")
    return ComgrToolchain(lib)
