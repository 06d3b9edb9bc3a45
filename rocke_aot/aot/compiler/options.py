"""Compile options: defined once per toolchain kind, read by the compile code AND by the cache key.

    LLVMLITE  ──> llvm_payload (aot/compiler/__init__.py) ──> _llvm_worker.py llvm.compile
              ──> link_hsaco (link.py: ld.lld flags), assemble_cubin (ptx.py: ptxas flags)
    COMGR     ──> ComgrToolchain.compile (toolchains/comgr.py) ──> _comgr_handler.py comgr.compile
    TRITON24  ──> Triton24Toolchain.compile (toolchains/triton24.py) ──> _triton24_worker.py
                  triton24.optimize (middle end) + triton24.compile (library Options struct)
              ──> link_hsaco (ld.lld flags)
    VENDOR23  ──> Vendor23Toolchain.compile (toolchains/vendor23.py) ──> _vendor23_worker.py
                  llvm23.compile (LLVMRunPasses pipeline + LLVM-C codegen, all in AMD's LLVM 23)
              ──> link_hsaco (ld.lld flags)
        │
        └──> Toolchain.compile_options(target) -> canonical mapping ──> KeyInputs.options

Because the compile path reads these very values (not copies of them), the key and the
compile cannot disagree: change a flag here and every key that used it moves. What the
target ID already says (processor, xnack/sramecc features, triple) is in the key's arch
field, so it is not repeated here. Only options that apply to the target are listed
(an amdgcn key carries no ptxas flags, an sm_90 key no ld.lld flags).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocke_aot.targets import Target

# ld.lld: a shared object (HSACO) with every symbol resolved; no build ID, no timestamp.
LLD_FLAGS: tuple[str, ...] = ("-shared", "--no-undefined")
# ptxas: -arch=<processor> comes from the target ID; the rest is fixed here.
PTXAS_FLAGS: tuple[str, ...] = ("-O3",)


@dataclass(frozen=True)
class LlvmOptions:
    """One llvmlite compile: the middle end (new pass manager) and the target machine."""

    speed_level: int = 3  # O<n> module pipeline before codegen; 0 = none (codegen alone)
    opt_level: int = 3  # the target machine's code generation opt level
    reloc: str = "pic"
    code_model: str = "default"
    nvptx_features: str = "+ptx80"  # PTX ISA 8.0: sm_90 needs >= 7.8; the PTX records it

    def for_target(self, target: Target) -> dict[str, Any]:
        common = {"speed_level": self.speed_level, "opt_level": self.opt_level, "reloc": self.reloc,
                  "code_model": self.code_model}
        if target.is_amdgpu:
            return {**common, "emit": "obj", "ld.lld": list(LLD_FLAGS)}
        return {**common, "emit": "asm", "features": self.nvptx_features, "ptxas": list(PTXAS_FLAGS)}


@dataclass(frozen=True)
class ComgrOptions:
    flags: tuple[str, ...] = ("-O3",)  # amd_comgr_action_info_set_option_list

    def for_target(self, target: Target) -> dict[str, Any]:
        return {"comgr": list(self.flags)}


@dataclass(frozen=True)
class Triton24Options:
    """The llvm24 lane: llvmlite's middle end (LLVM 22), the library's Options struct, ld.lld."""

    middle_end: LlvmOptions = LlvmOptions()
    # Options struct (interface version 1) fields other than triple/processor/features:
    abi: str = ""
    flags: str = ""
    disabled_passes: str = ""
    enable_fp_fusion: int = 0
    disable_optimization: int = 0
    canonicalize_gep: int = 0

    def library_options(self) -> dict[str, Any]:
        return {"abi": self.abi, "flags": self.flags, "disabled_passes": self.disabled_passes,
                "enable_fp_fusion": self.enable_fp_fusion, "disable_optimization": self.disable_optimization,
                "canonicalize_gep": self.canonicalize_gep}

    def for_target(self, target: Target, *, middle_end: bool = True) -> dict[str, Any]:
        me = self.middle_end
        return {
            "middle_end": ({"speed_level": me.speed_level, "opt_level": me.opt_level, "reloc": me.reloc,
                            "code_model": me.code_model} if middle_end else None),
            "codegen": self.library_options(),
            "ld.lld": list(LLD_FLAGS),
        }


@dataclass(frozen=True)
class Vendor23Options:
    """The llvm23 lane on AMD's LLVM 23: its own O3 pipeline and code generator, then ld.lld."""

    pipeline: str = "default<O3>"  # LLVMRunPasses, as clang -O3 and COMGR run it
    opt_level: int = 3  # LLVMCodeGenLevelAggressive
    reloc: str = "pic"
    code_model: str = "default"

    def worker_options(self) -> dict[str, Any]:
        return {"pipeline": self.pipeline, "opt_level": self.opt_level, "reloc": self.reloc,
                "code_model": self.code_model}

    def for_target(self, target: Target) -> dict[str, Any]:
        return {**self.worker_options(), "emit": "obj", "ld.lld": list(LLD_FLAGS)}


LLVMLITE = LlvmOptions()
COMGR = ComgrOptions()
TRITON24 = Triton24Options()
VENDOR23 = Vendor23Options()
