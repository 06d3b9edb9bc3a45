"""AMD's own LLVM 23 as a toolchain (kind "rocm-llvm", the "vendor" compiler).

    where the library comes from (discover / from_registry)
      $ROCKE_AOT_LLVM23_LIB                         an explicit libLLVM.so (kept even when missing:
                                                    detect() then says so)
      <site-packages>/rocm/bindings/llvm/libLLVM.so the rocm-bindings-compiler wheel, pulled by the
                                                    project's hip-python[compiler] dependency
    and the two ROCm sysdeps shims it needs (aot/toolchains/rocm_sysdeps.py), built by
    `rocke-aot toolchain install llvm23` into $ROCKE_AOT_HOME/sysdeps

    detect()   _vendor23_worker.py "llvm23.describe" in a worker of its own (ctypes; the shims
               and libLLVM.so load there only, never in this process)
               -> LLVM version from the library (LLVMGetVersion + its bitcode reader's name)
               -> lane_for_major -> llvm23
               -> per wired AMDGPU processor: recognized?, the target machine's datalayout
               -> apply_drift_guard
    compile()  IR --(same worker) LLVMRunPasses("default<O3>") -> codegen--> relocatable
               --ld.lld -shared--> HSACO

The whole pipeline is LLVM 23: the middle end (O3, the attributor that infers amdgpu-no-*)
and code generation both run in AMD's library; only the linker is Debian's LLD 22 (the wheel
ships no ld.lld), recorded in identity() and in the HSACO's .comment.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
from pathlib import Path

from rocke_aot import settings
from rocke_aot.aot.compiler import WorkerSpec, default_pool
from rocke_aot.aot.compiler.files import file_sha256
from rocke_aot.aot.compiler.link import link_hsaco
from rocke_aot.aot.compiler.lld import find_lld, linker_identity
from rocke_aot.aot.compiler.options import VENDOR23
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.compiler.worker import answer_blob
from rocke_aot.aot.toolchains import rocm_sysdeps
from rocke_aot.aot.toolchains.base import Toolchain, ToolchainInfo, info_for_major
from rocke_aot.aot.toolchains.drift import apply_drift_guard
from rocke_aot.arch import ARCHES
from rocke_aot.errors import CompileError, ToolchainError, ToolchainRefused
from rocke_aot.targets import Target

KIND = "rocm-llvm"
LIB_RELPATH = "bindings/llvm/libLLVM.so"  # under the `rocm` namespace package
WORKER = Path(__file__).with_name("_vendor23_worker.py")
SETUP_HINT = rocm_sysdeps.SETUP_HINT

_TRIPLE_RE = re.compile(r'^\s*target\s+triple\s*=\s*"([^"]*)"', re.M)
_DATALAYOUT_RE = re.compile(r'^\s*target\s+datalayout\s*=\s*"([^"]*)"', re.M)


def wired_amdgpu_processors() -> list[str]:
    return [name for name, info in ARCHES.items() if info.family == "amdgcn"]


# ------------------------------------------------------------------ discovery


def _package_library() -> Path | None:
    # find_spec on the top-level (namespace) package locates it without importing anything heavy.
    spec = importlib.util.find_spec("rocm")
    for root in (spec.submodule_search_locations or ()) if spec else ():
        lib = Path(root) / LIB_RELPATH
        if lib.is_file():
            return lib
    return None


def candidate_libraries() -> list[Path]:
    explicit = settings.raw(settings.LLVM23_LIB)
    if explicit:
        return [Path(explicit)]  # an explicit path wins and never falls through
    own = _package_library()
    return [own] if own else []


def discover() -> list[Vendor23Toolchain]:
    return [Vendor23Toolchain(p) for p in candidate_libraries()]


def from_registry(entry: dict) -> Vendor23Toolchain:
    if not entry.get("library"):
        raise ToolchainError(f"a {KIND} registry entry needs 'library': {entry!r}")
    return Vendor23Toolchain(entry["library"], label=entry.get("label"))


def find_llvm23(toolchains: list[Toolchain] | None = None) -> Vendor23Toolchain:
    """The first usable AMD LLVM 23, or ToolchainError naming what is missing and the setup command."""
    pool = toolchains if toolchains is not None else discover()
    reasons = []
    for tc in pool:
        if isinstance(tc, Vendor23Toolchain):
            info = tc.detect()
            if info.usable and info.lane == "llvm23":
                return tc
            reasons.append(f"{info.location}: {info.refusal}")
    detail = "; ".join(reasons) if reasons else (
        f"no rocm/{LIB_RELPATH} (the rocm-bindings-compiler wheel of hip-python[compiler]) and {settings.LLVM23_LIB} unset")
    raise ToolchainError(f"no usable AMD LLVM 23 ({detail}): {SETUP_HINT}")


# ------------------------------------------------------------------ the worker


def worker_spec():
    # A role of its own: the shims and libLLVM.so never share a process with llvmlite's LLVM.
    return WorkerSpec.of(sys.executable, plugins=[WORKER], env={settings.WORKER_ROLE: "rocm-llvm"})


def run_worker(kind: str, payload: dict, blob: bytes | None = None, *, timeout: float = 120.0
               ) -> tuple[dict, bytes | None]:
    """One request on this thread's AMD LLVM worker; an abort becomes a CompileError."""
    reply = default_pool().call(worker_spec(), kind, payload, blob, timeout=timeout)
    result = dict(reply.result)
    result.setdefault("log", reply.log)
    return result, reply.blob


# ------------------------------------------------------------------ the toolchain


class Vendor23Toolchain(Toolchain):
    kind = KIND
    tools = ("linker",)  # ld.lld links its HSACOs (AMDGPU only: no cubins)

    def __init__(self, library: str | Path, *, label: str | None = None, shim_dir: str | Path | None = None):
        self.library = str(library)
        self.label = label
        self._shim_dir = Path(shim_dir) if shim_dir is not None else None

    def __repr__(self) -> str:
        return f"Vendor23Toolchain({self.library!r})"

    @property
    def shims(self) -> dict[str, Path]:
        return rocm_sysdeps.shim_paths(self._shim_dir)

    def _refused(self, reason: str, **kw) -> ToolchainInfo:
        return ToolchainInfo(self.kind, self.library, None, None, None, reason, **kw)

    def payload(self, **kw) -> dict:
        return {"library": self.library, "shims": [str(p) for p in self.shims.values()], **kw}

    @functools.cached_property
    def _info(self) -> ToolchainInfo:
        if not os.path.isfile(self.library):
            return self._refused(f"no AMD LLVM library at {self.library} (pip install hip-python[compiler], "
                                 f"which brings rocm-bindings-compiler): {SETUP_HINT}")
        lost = rocm_sysdeps.missing(self._shim_dir)
        if lost:
            return self._refused(
                f"AMD's libLLVM.so needs {' and '.join(lost)} (ROCm's renamed zlib/zstd, symbol version "
                f"{rocm_sysdeps.VERSION_NODE}), not found in {rocm_sysdeps.shim_dir() if self._shim_dir is None else self._shim_dir}: "
                f"{SETUP_HINT}")
        processors = wired_amdgpu_processors()
        try:
            d, _ = run_worker("llvm23.describe", self.payload(processors=processors))
        except (CompileError, ToolchainError) as e:
            return self._refused(f"probing the library failed: {e}")
        targets = d["targets"]
        arches = tuple(p for p in processors if targets[p]["known"] and targets[p]["datalayout"])
        info = info_for_major(
            self.kind, self.library, d["llvm_version"], d["llvm_major"],
            toolchain=f"AMD's LLVM library {self.library}", arches=arches,
            datalayouts={p: targets[p]["datalayout"] for p in arches},
            extra={
                "version_source": d["reader_message"],
                "c_api_version": ".".join(map(str, d["c_api_version"])),
                "amdgcn_targets": {p: targets[p]["amdgcn_target"] for p in arches},
                "shims": {name: str(p) for name, p in self.shims.items()},
                "linker": self._linker_note(),
                "label": self.label or "",
            },
        )
        return apply_drift_guard(info)

    def detect(self) -> ToolchainInfo:
        return self._info

    @staticmethod
    def _linker_note() -> str:
        try:
            return f"{linker_identity().get('linker', '?')} at {find_lld()}"
        except ToolchainError as e:
            return f"none: {e}"

    def compile_options(self, target: Target) -> dict:
        return VENDOR23.for_target(target)

    def core_identity(self) -> dict[str, str]:
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{self.kind} at {self.library}: {info.refusal}")
        return {
            "kind": self.kind,
            "llvm_version": str(info.llvm_version),
            "library_sha256": file_sha256(self.library),
            # The shims forward to the system zlib/zstd; LLVM calls them only for compressed
            # sections, but a changed shim is a changed process: it moves the key.
            **{f"shim_sha256:{name}": file_sha256(p) for name, p in sorted(self.shims.items())},
        }

    def check_ir(self, ir: str, target: Target) -> str:
        """The triple the IR names, after checking it and the datalayout against this toolchain
        (the C API's emit replaces a module's datalayout with the target machine's silently)."""
        info = self.detect()
        m = _TRIPLE_RE.search(ir)
        triple = m.group(1) if m else target.triple
        if triple != target.triple:
            raise CompileError(f"IR triple {triple!r} does not name {target.processor} (expected {target.triple!r})")
        m = _DATALAYOUT_RE.search(ir)
        if m and m.group(1) != info.datalayouts[target.processor]:
            raise CompileError(f"IR datalayout {m.group(1)!r} differs from AMD LLVM 23's "
                               f"{info.datalayouts[target.processor]!r} for {target.processor}: "
                               f"the IR was lowered for another emission profile")
        return triple

    def compile(self, ir: str, target: Target, *, timeout: float = 120.0, emit_asm: bool = False) -> CompileResult:
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{self.kind} at {self.library}: {info.refusal}")
        if not target.is_amdgpu or target.processor not in info.arches:
            raise CompileError(f"AMD LLVM 23 cannot target {target.id} (it targets: {', '.join(info.arches)})")
        triple = self.check_ir(ir, target)
        result, obj = run_worker("llvm23.compile", self.payload(
            ir=ir, triple=triple, processor=target.processor, features=target.llvm_features,
            options=VENDOR23.worker_options(), emit_asm=emit_asm), timeout=timeout)
        return CompileResult(code_object=link_hsaco(answer_blob(obj, "llvm23.compile")), format="hsaco", log=result.get("log", ""),
                             asm=result.get("asm"))

    def compile_object(self, ir: str, processor: str, triple: str = "amdgcn-amd-amdhsa", features: str = "", *,
                       pipeline: bool = True, emit_ir: bool = False, timeout: float = 120.0) -> dict:
        """Relocatable (+ asm, optimized IR) without linking or IR checks: characterization only."""
        opts = VENDOR23.worker_options() if pipeline else {**VENDOR23.worker_options(), "pipeline": ""}
        result, obj = run_worker("llvm23.compile", self.payload(
            ir=ir, triple=triple, processor=processor, features=features, options=opts,
            emit_asm=True, emit_ir=emit_ir), timeout=timeout)
        return {**result, "obj": obj}


def install(*, quiet: bool = True) -> Vendor23Toolchain:
    """`rocke-aot toolchain install llvm23`: build the shims, then the library must detect as llvm23."""
    lib = candidate_libraries()
    if not lib:
        find_llvm23([])  # raises: what is missing, and how to get it
    rocm_sysdeps.build()
    tc = Vendor23Toolchain(lib[0])
    info = tc.detect()
    if not info.usable or info.lane != "llvm23":
        raise ToolchainError(f"{tc.library} after building the shims: "
                             f"{info.refusal or f'detects as {info.lane}, not llvm23'}")
    return tc
