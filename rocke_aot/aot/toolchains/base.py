"""The toolchain abstraction: one small base, one small module per compiler kind.

    detect_all() ──> [Toolchain, ...]           (toolchains/__init__.py)
        │
        ├── LlvmliteToolchain(python)   an interpreter whose llvmlite provides LLVM (llvm20, llvm22)
        ├── ComgrToolchain(lib)         a COMGR library through rocm.bindings.amd_comgr
        └── (library compilers)         e.g. the LLVM 24 AMDGPU code generator from the triton wheel
    each with
        .detect()   -> ToolchainInfo  (LLVM version from the toolchain itself, lane or refusal,
                                       arches, datalayouts as the real target machine reports them)
        .identity(target) -> dict     (everything that changes that target's bytes; goes into cache
                                       keys: core_identity(), the compiler's versions and the sha256 of
                                       its libraries, plus the identity of each tool it runs that the
                                       target's format uses, by the one rule targets.FORMAT_TOOLS:
                                       an HSACO's key holds the linker, a cubin's ptxas, never both)
        .compile_options(target)      (the options it compiles with; goes into cache keys)
        .compile(ir, target)          -> CompileResult (code object bytes; in an isolated worker)

Detection never trusts a table of package versions: the LLVM major comes from the
toolchain (llvmlite's ``llvm_version_info``, what a compiled probe records, a
library's revision string), then resolves through the one lane registry
(``info_for_major``: lane or refusal, one place for every toolchain kind).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rocke_aot.aot.compiler.lld import linker_identity
from rocke_aot.aot.compiler.ptx import ptxas_identity
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.errors import LaneError, ToolchainError, ToolchainRefused
from rocke_aot.lanes import Lane, get_lane, lane_for_major
from rocke_aot.targets import FORMAT_TOOLS, TOOL_FIELDS, Target


@dataclass(frozen=True)
class ToolchainInfo:
    kind: str  # "llvmlite", "comgr", "triton-codegen"
    location: str  # interpreter path, library path
    llvm_version: str | None  # "22.1.0"
    llvm_major: int | None
    lane: str | None  # the lane it qualifies for, None when refused
    refusal: str | None  # why it is not qualified (unknown major, drift, broken install)
    arches: tuple[str, ...] = ()  # processors it can target (of those rocke-aot wires)
    datalayouts: Mapping[str, str] = field(default_factory=dict)  # processor -> reported datalayout
    drift: Mapping[str, str] = field(default_factory=dict)  # processor -> "ok" | "drift: ..."
    extra: Mapping[str, Any] = field(default_factory=dict)  # kind-specific facts (linker, revision)

    @property
    def usable(self) -> bool:
        return self.lane is not None and self.refusal is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "llvm_version": self.llvm_version,
            "llvm_major": self.llvm_major,
            "lane": self.lane,
            "refusal": self.refusal,
            "arches": list(self.arches),
            "drift": dict(self.drift),
            "extra": dict(self.extra),
        }


def info_for_major(kind: str, location: str, llvm_version: str, llvm_major: int, *, toolchain: str,
                   **fields: Any) -> ToolchainInfo:
    """The ToolchainInfo of a toolchain whose LLVM major is known: the lane registry gives
    its lane, or (a major no lane has) the refusal naming ``toolchain``. ``fields``: the
    rest of ToolchainInfo (arches, datalayouts, extra)."""
    lane = refusal = None
    try:
        lane = lane_for_major(llvm_major, toolchain=toolchain).name
    except LaneError as e:
        refusal = str(e)
    return ToolchainInfo(kind, location, llvm_version, llvm_major, lane, refusal, **fields)


def tool_identity(tool: str) -> dict[str, str]:
    """The identity of one tool a toolchain runs after its compiler (targets.TOOL_FIELDS names
    them): "linker" the located ld.lld (aot/compiler/lld.py), "ptxas" the located ptxas
    (aot/compiler/ptx.py). Only its identity is asked for here; each module locates its tool."""
    if tool == "linker":
        return {k: str(v) for k, v in linker_identity().items()}
    if tool == "ptxas":
        return {k: str(v) for k, v in ptxas_identity().items()}
    raise ToolchainError(f"no identity for tool {tool!r} (known: {', '.join(TOOL_FIELDS)})")


class Toolchain(ABC):
    """A real compiler on this host."""

    kind: ClassVar[str]
    # What compile() takes: LLVM IR text (every LLVM toolchain), or "triton" (a Triton compile
    # request, aot/toolchains/triton_jit.py). A family's jobs get toolchains of its input only.
    consumes: ClassVar[str] = "llvm-ir"

    @abstractmethod
    def detect(self) -> ToolchainInfo:
        """Probe the toolchain itself; never raises for an unqualified one (see ``refusal``)."""

    # The tools it runs after its compiler (targets.TOOL_FIELDS): llvmlite links HSACOs with
    # ld.lld and assembles PTX with ptxas. A toolchain whose linking happens inside its own
    # library (COMGR, Triton with its bundled tools) runs none: its core identity covers them.
    tools: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def core_identity(self) -> dict[str, str]:
        """The compiler itself, whatever the target: kind, versions, the sha256 of its libraries."""

    def identity(self, target: Target) -> dict[str, str]:
        """Everything about this toolchain that changes ``target``'s bytes (cache-key input):
        the core identity plus the identity of each of its ``tools`` that the target's code
        format uses (targets.FORMAT_TOOLS), and of no other tool."""
        ident = dict(self.core_identity())
        for tool in FORMAT_TOOLS[target.code_format]:
            if tool in self.tools:
                ident.update(tool_identity(tool))
        return ident

    @abstractmethod
    def compile_options(self, target: Target) -> Mapping[str, Any]:
        """The options this toolchain compiles ``target`` with (aot/compiler/options.py, the
        very values its compile path reads): a JSON mapping, cache-key input ``options``."""

    @abstractmethod
    def compile(self, ir: str, target: Target, *, timeout: float = 120.0) -> CompileResult:
        """LLVM IR text -> code object, in an isolated worker; raises CompileError."""

    @property
    def lane(self) -> Lane:
        """The qualified lane, or ToolchainRefused with the reason."""
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{info.kind} toolchain at {info.location}: {info.refusal}")
        return get_lane(info.lane)
