"""The LLVM 24 AMDGPU code generator from the triton wheel, as a toolchain (kind "triton-codegen").

    where the library comes from (discover / from_registry)
      $ROCKE_AOT_LLVM24_LIB                                   an explicit .so
      <venv>/lib/python3.*/site-packages/triton/backends/amd/lib/libtriton_amd_codegen.so
          registered venvs ({"kind": "triton-codegen", "venv": ...}, made by
          `rocke-aot toolchain install llvm24`), $ROCKE_AOT_HOME/lanes/llvm24, and this
          interpreter's own site-packages (the `llvm24` extra)

    detect()   _triton24_worker.py "triton24.describe" (in a worker: ctypes, no triton import)
               -> LLVM version named by the library's bitcode reader -> lane_for_major -> llvm24
               -> per wired processor: recognized?, datalayout, the triple LLVM asks for,
                  which target-ID settings (xnack, sramecc) it honours as module flags
               -> apply_drift_guard (profile datalayout == what the library's target machine uses)
    compile()  IR text --middle-end worker "triton24.optimize" (llvmlite O3, LLVM 22)--> bitcode
               --codegen worker "triton24.compile" (LLVM 24)--> AMDGCN asm --(same call)--> relocatable
               --ld.lld -shared--> HSACO

Every library call runs in a long-lived worker process (aot/compiler's pool, this kind's
handlers loaded as a plugin): an LLVM abort ("LLVM ERROR: Cannot select") kills only that
worker, and its last words are read back from a stderr file this side owns.

The adapter speaks interface version 1 of the library's options struct (see the worker). A
toolchain constructed for any other version is refused before the library is touched, and the
worker refuses it too; the library itself refuses a version it does not know, which ``detect``
records (``extra["next_version_refusal"]``).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import re
import sys
import time
from pathlib import Path

from rocke_aot import settings
from rocke_aot.aot.compiler import WorkerSpec, default_pool
from rocke_aot.aot.compiler.files import file_sha256
from rocke_aot.aot.compiler.link import link_hsaco as _link
from rocke_aot.aot.compiler.lld import find_lld, linker_identity
from rocke_aot.aot.compiler.options import TRITON24
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.compiler.worker import answer_blob
from rocke_aot.aot.toolchains.base import Toolchain, ToolchainInfo, info_for_major
from rocke_aot.aot.toolchains.drift import apply_drift_guard
from rocke_aot.arch import ARCHES
from rocke_aot.errors import CompileError, ToolchainError, ToolchainRefused
from rocke_aot.targets import Target

LIB_RELPATH = "triton/backends/amd/lib/libtriton_amd_codegen.so"
INTERFACE_VERSION = 1  # the options layout _triton24_worker.py implements
WORKER = Path(__file__).with_name("_triton24_worker.py")
KIND = "triton-codegen"
SETUP_HINT = "run `bash scripts/setup.sh` (it runs `rocke-aot toolchain install llvm24`)"

_TRIPLE_RE = re.compile(r'^\s*target\s+triple\s*=\s*"([^"]*)"', re.M)
_DATALAYOUT_RE = re.compile(r'^\s*target\s+datalayout\s*=\s*"([^"]*)"', re.M)
_MODULE_FLAG_RE = re.compile(r'!\{\s*i32\s+\d+,\s*!"amdgpu\.(xnack|sramecc)",\s*i32\s+([01])\s*\}')


def wired_amdgpu_processors() -> list[str]:
    return [name for name, info in ARCHES.items() if info.family == "amdgcn"]


# ------------------------------------------------------------------ discovery


def library_in_venv(venv: str | Path) -> Path | None:
    hits = sorted(glob.glob(os.path.join(str(venv), "lib", "python3*", "site-packages", LIB_RELPATH)))
    return Path(hits[-1]) if hits else None


def _own_site_library() -> Path | None:
    # find_spec on a top-level package locates it without importing it (nothing heavy loads).
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        lib = Path(root).parent / LIB_RELPATH
        if lib.is_file():
            return lib
    return None


def candidate_libraries() -> list[Path]:
    """Every place a library may be, in priority order (existing files only)."""
    from rocke_aot.paths import home

    found: list[Path] = []
    explicit = settings.raw(settings.LLVM24_LIB)
    if explicit:
        found.append(Path(explicit))  # kept even when missing: detect() then says so
    lane_env = library_in_venv(home() / "lanes" / "llvm24")
    if lane_env:
        found.append(lane_env)
    own = _own_site_library()
    if own:
        found.append(own)
    out, seen = [], set()
    for p in found:
        key = os.path.realpath(p)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def discover() -> list[Triton24Toolchain]:
    return [Triton24Toolchain(p) for p in candidate_libraries()]


def from_registry(entry: dict) -> Triton24Toolchain:
    if entry.get("library"):
        return Triton24Toolchain(entry["library"], label=entry.get("label"))
    venv = entry.get("venv")
    if not venv:
        raise ToolchainError(f"a {KIND} registry entry needs 'library' or 'venv': {entry!r}")
    lib = library_in_venv(venv)
    # A venv without the library still yields a toolchain, whose detect() refuses with the reason.
    return Triton24Toolchain(lib or Path(venv) / "lib" / "python3" / "site-packages" / LIB_RELPATH,
                             label=entry.get("label"), venv=venv)


def find_llvm24(toolchains: list[Toolchain] | None = None) -> Triton24Toolchain:
    """The first usable LLVM 24 code generator, or ToolchainError saying how to install one."""
    pool = toolchains if toolchains is not None else discover()
    reasons = []
    for tc in pool:
        if isinstance(tc, Triton24Toolchain):
            info = tc.detect()
            if info.usable and info.lane == "llvm24":
                return tc
            reasons.append(f"{info.location}: {info.refusal}")
    detail = ("; ".join(reasons)) if reasons else "no library found"
    raise ToolchainError(f"no usable LLVM 24 code generator ({detail}): {SETUP_HINT}")


# ------------------------------------------------------------------ the worker


def run_worker(kind: str, payload: dict, blob: bytes | None = None, *, timeout: float = 120.0,
               role: str = "codegen") -> tuple[dict, bytes | None]:
    """One request on this thread's long-lived worker (the compile helper's pool, with
    _triton24_worker.py as a plugin). An LLVM abort kills that worker only and becomes a
    CompileError carrying LLVM's message; the next request starts a fresh worker.

    ``role`` keeps the two LLVMs apart: "codegen" workers load the LLVM 24 library,
    "middle-end" workers run llvmlite; never both in one process.
    """
    spec = WorkerSpec.of(sys.executable, plugins=[WORKER], env={settings.TRITON24_ROLE: role})
    reply = default_pool().call(spec, kind, payload, blob, timeout=timeout)
    result = dict(reply.result)
    result.setdefault("log", reply.log)
    return result, reply.blob


# ------------------------------------------------------------------ linking


def _linker() -> tuple[str, dict[str, str]]:
    """The located ld.lld and its identity (aot/compiler/lld.py). The wheel carries no
    standalone LLD 24 (its LLD is linked into libtriton.so behind a pybind module), so the
    located ld.lld (Debian's LLD 22) links, and its version line is recorded."""
    return find_lld(), linker_identity()


def link_hsaco(obj: bytes, *, timeout: float = 60.0) -> bytes:
    return _link(obj, timeout=timeout)


# ------------------------------------------------------------------ the toolchain


class Triton24Toolchain(Toolchain):
    kind = KIND
    tools = ("linker",)  # the located ld.lld links its HSACOs (AMDGPU only)

    def __init__(self, library: str | Path, *, interface_version: int = INTERFACE_VERSION,
                 label: str | None = None, venv: str | None = None, middle_end: bool = True):
        self.library = str(library)
        # The library is a code generator only. Without a middle end, kernels keep every
        # redundant address computation: measured on gfx950, a 128x128 mfma gemm needs 256
        # VGPRs + 208 AGPRs (occupancy 1) instead of LLVM 22 O3's 216 VGPRs (occupancy 2), and
        # a gfx942 conv spills 7 SGPRs. So, as Triton runs its core LLVM before this library,
        # the project's llvmlite (LLVM 22) runs the O3 module pipeline first
        # (docs/llvm24-lane.md). middle_end=False: codegen only (characterization).
        self.middle_end = middle_end
        self.interface_version = interface_version
        self.label = label
        self.venv = venv

    def __repr__(self) -> str:
        return f"Triton24Toolchain({self.library!r})"

    def _refused(self, reason: str, **kw) -> ToolchainInfo:
        return ToolchainInfo(self.kind, self.library, kw.pop("llvm_version", None), kw.pop("llvm_major", None),
                             None, reason, **kw)

    @functools.cached_property
    def _info(self) -> ToolchainInfo:
        if self.interface_version != INTERFACE_VERSION:
            return self._refused(
                f"interface version {self.interface_version} refused: this adapter knows only the code "
                f"generator interface version {INTERFACE_VERSION}; characterize the library and extend "
                f"the adapter first")
        if not os.path.isfile(self.library):
            return self._refused(f"no LLVM 24 code generator library at {self.library}: {SETUP_HINT}")
        processors = wired_amdgpu_processors()
        try:
            d, _ = run_worker("triton24.describe", {
                "library": self.library, "processors": processors, "interface_version": self.interface_version,
                "probe_features": {p: list(ARCHES[p].target_features) for p in processors}})
        except (CompileError, ToolchainError) as e:
            return self._refused(f"probing the library failed: {e}")
        where = f"the LLVM code generator library {self.library}"
        targets = d["targets"]
        arches = tuple(p for p in processors if targets[p]["known"] and targets[p]["datalayout"])
        info = info_for_major(
            self.kind, self.library, d["llvm_version"], d["llvm_major"], toolchain=where,
            arches=arches,
            datalayouts={p: targets[p]["datalayout"] for p in arches},
            extra={
                "revision": d["revision"],
                "interface_version": d["interface_version"],
                "next_version_refusal": d["next_version_refusal"],
                "version_source": d["reader_message"],
                "suggested_triples": {p: targets[p]["suggested_triple"] for p in arches},
                "settable_features": {p: list(targets[p]["settable_features"]) for p in arches},
                "label": self.label or "",
                "linker": self._linker_note(),
                "venv": self.venv or "",
            },
        )
        return apply_drift_guard(info)

    def detect(self) -> ToolchainInfo:
        return self._info

    @staticmethod
    def _linker_note() -> str:
        try:
            path, ident = _linker()
            return f"{ident.get('linker', '?')} at {path}"
        except ToolchainError as e:
            return f"none: {e}"

    @property
    def _library_sha256(self) -> str:
        return file_sha256(self.library)

    def compile_options(self, target: Target) -> dict:
        return TRITON24.for_target(target, middle_end=self.middle_end)

    def core_identity(self) -> dict[str, str]:
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{self.kind} at {self.library}: {info.refusal}")
        return {
            "kind": self.kind,
            "llvm_version": str(info.llvm_version),
            "revision": str(info.extra["revision"]),
            "interface_version": str(info.extra["interface_version"]),
            "library_sha256": self._library_sha256,
            "middle_end": self._middle_end_identity(),
        }

    def _middle_end_identity(self) -> str:
        if not self.middle_end:
            return "none"
        from rocke_aot.aot.toolchains.llvmlite_toolchain import LlvmliteToolchain

        me = LlvmliteToolchain(sys.executable).detect()
        if not me.llvm_version:
            raise ToolchainRefused(f"the llvm24 middle end (llvmlite under {sys.executable}) is unusable: {me.refusal}")
        # The middle end's library is part of what makes the bytes: hash it like llvm22's.
        return (f"llvmlite {me.extra.get('llvmlite_version')} LLVM {me.llvm_version} "
                f"libllvmlite sha256:{file_sha256(me.extra['library'])}")

    def triple_for(self, target: Target) -> str:
        """The triple LLVM 24 asks for (its deprecation warning names it) for this processor."""
        info = self.detect()
        suggested = info.extra.get("suggested_triples", {}).get(target.processor)
        return suggested or target.triple

    def compile(self, ir: str, target: Target, *, timeout: float = 120.0) -> CompileResult:
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{self.kind} at {self.library}: {info.refusal}")
        if not target.is_amdgpu or target.processor not in info.arches:
            raise CompileError(f"the LLVM 24 AMDGPU code generator cannot target {target.id} "
                               f"(it targets: {', '.join(info.arches)})")
        # The library replaces the module's triple with the one passed in, and its datalayout with
        # the target machine's, silently. So check here what the IR claims, and fail closed.
        m = _TRIPLE_RE.search(ir)
        triple = m.group(1) if m else self.triple_for(target)
        allowed = {target.triple, self.triple_for(target)}
        if triple not in allowed:
            raise CompileError(f"IR triple {triple!r} does not name {target.processor} "
                               f"(expected one of {sorted(allowed)})")
        m = _DATALAYOUT_RE.search(ir)
        if m and m.group(1) != info.datalayouts[target.processor]:
            raise CompileError(f"IR datalayout {m.group(1)!r} differs from LLVM 24's "
                               f"{info.datalayouts[target.processor]!r} for {target.processor}: "
                               f"the IR was lowered for another emission profile")
        # LLVM 24 takes xnack/sramecc from module flags only (a subtarget feature is reported
        # as an error and ignored), so the IR must carry the target ID's settings itself.
        flags = {m.group(1): m.group(2) == "1" for m in _MODULE_FLAG_RE.finditer(ir)}
        settable = info.extra["settable_features"][target.processor]
        for name, on in target.features:
            if name not in settable:
                raise CompileError(
                    f"LLVM 24 cannot build {target.id}: {target.processor} has no {name} modes there "
                    f"(it records {name} as unsupported); use a target ID without :{name}{'+' if on else '-'}")
            if flags.get(name) != on:
                raise CompileError(
                    f"{target.id} needs module flag !\"amdgpu.{name}\" = {int(on)} in the IR (LLVM 24 takes "
                    f"target-ID settings from module flags); the IR has {flags.get(name)!r}")
        payload = {"library": self.library, "interface_version": self.interface_version,
                   "triple": triple, "processor": target.processor, "features": "",
                   "options": TRITON24.library_options()}
        log = ""
        if self.middle_end:
            start = time.monotonic()
            me = TRITON24.middle_end
            res, bitcode = run_worker("triton24.optimize", {
                "ir": ir, "processor": target.processor, "speed_level": me.speed_level, "opt": me.opt_level,
                "reloc": me.reloc, "codemodel": me.code_model}, timeout=timeout, role="middle-end")
            log, timeout = res.get("log", ""), max(1.0, timeout - (time.monotonic() - start))
            result, obj = run_worker("triton24.compile", payload, bitcode, timeout=timeout)
        else:
            result, obj = run_worker("triton24.compile", {**payload, "ir": ir}, timeout=timeout)
        hsaco = link_hsaco(answer_blob(obj, "triton24.compile"))
        return CompileResult(code_object=hsaco, format="hsaco", log=log + result.get("log", ""), asm=result["asm"])

    def compile_object(self, ir: str, processor: str, triple: str, features: str = "", *,
                       timeout: float = 120.0) -> tuple[bytes, str, str]:
        """(relocatable, asm, log) without linking or IR checks: characterization only."""
        result, obj = run_worker("triton24.compile", {
            "library": self.library, "interface_version": self.interface_version, "ir": ir,
            "triple": triple, "processor": processor, "features": features,
            "options": TRITON24.library_options(),
        }, timeout=timeout)
        return answer_blob(obj, "triton24.compile"), result["asm"], result.get("log", "")


