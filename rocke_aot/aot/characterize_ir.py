"""The probe kernels the characterization compiles and how a failed probe is classified: the
floor that aot/characterize.py (intrinsic and feature availability) and
aot/characterize_emission.py (what an emission profile is made of) both stand on.

    probe_ir(decl)              a kernel that calls one intrinsic with its declared shape
    minimal_kernel_ir(...)      p[tid] = LDS round trip of p[tid] + 1 (kernarg pointer, workitem id
                                x, LDS, barrier), with or without the amdgpu-no-* attributes
    classify_error(exc)         a failed probe -> {"status", "evidence"} (LLVM's own line)
"""

from __future__ import annotations

import re

from rocke_aot import lanes
from rocke_aot.aot.compiler.worker import llvm_error_summary
from rocke_aot.errors import CompileTimeout

PLAIN_TRIPLE = "amdgcn-amd-amdhsa"
NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
PROBE_TIMEOUT = 60.0

# Operands a probe passes: vectors and floats are loaded from the kernel's pointer (nothing folds
# away), integer modifiers (MFMA cbsz/abid/blgp, WMMA neg/reuse/c_mod, a barrier id) are zero.
_ZERO = {"i1": "false", "i16": "0", "i32": "0"}


# ------------------------------------------------------------------ probe IR


def amdgpu_intrinsics(profile: lanes.Profile) -> dict[str, lanes.IntrinsicDecl]:
    """The AMDGPU intrinsics a profile declares: exactly what the families can call."""
    return {k: d for k, d in profile.intrinsics.items() if d.name.startswith("llvm.amdgcn.")}


def probe_ir(decl: lanes.IntrinsicDecl, datalayout: str | None = None, triple: str = PLAIN_TRIPLE) -> str:
    """A kernel that calls one intrinsic with the profile's declaration shape."""
    loads, args = [], []
    for i, ty in enumerate(decl.params):
        if ty in _ZERO:
            args.append(f"{ty} {_ZERO[ty]}")
        else:
            loads.append(f"  %a{i} = load {ty}, ptr addrspace(1) %p")
            args.append(f"{ty} %a{i}")
    call = f"call {decl.ret} @{decl.name}({', '.join(args)})"
    body = "\n".join(loads + ([f"  {call}"] if decl.ret == "void" else
                               [f"  %r = {call}", f"  store {decl.ret} %r, ptr addrspace(1) %p"]))
    cc = "ptx_kernel" if triple.startswith("nvptx") else "amdgpu_kernel"
    return (_header(datalayout, triple) + f"define {cc} void @probe(ptr addrspace(1) %p) {{\n"
            + body + f"\n  ret void\n}}\n\ndeclare {decl.ret} @{decl.name}({', '.join(decl.params)})\n")


# The minimal kernel uses its kernarg pointer and workitem id x only; it disclaims every other
# implicit input the profile lists (cluster ids included: without "amdgpu-no-cluster-id-*" LLVM
# 22 and 24 both keep workgroup ids y and z, measured).
_USED_INPUTS = ("workitem-id-x", "workgroup-id-x")


def disclaimed_inputs(profile: lanes.Profile) -> tuple[str, ...]:
    return tuple(x for x in profile.amdgpu_no_inputs if x not in _USED_INPUTS)


def _header(datalayout: str | None, triple: str) -> str:
    dl = f'target datalayout = "{datalayout}"\n' if datalayout else ""
    return f'{dl}target triple = "{triple}"\n\n'


def minimal_kernel_ir(datalayout: str | None, triple: str, *, no_inputs: bool, lds_barrier: bool = True,
                      module_flags: dict[str, int] | None = None) -> str:
    """p[tid] = lds round trip of p[tid] + 1: workitem id x, kernarg pointer, LDS, barrier."""
    disclaimed = disclaimed_inputs(lanes.PROFILES["llvm24"]) if no_inputs else ()
    attrs = " ".join(["nounwind"] + [f'"amdgpu-no-{x}"' for x in disclaimed])
    body = ["  %t = call i32 @llvm.amdgcn.workitem.id.x()",
            "  %a = getelementptr float, ptr addrspace(1) %p, i32 %t",
            "  %v = load float, ptr addrspace(1) %a",
            "  %w = fadd float %v, 1.0"]
    if lds_barrier:
        body += ["  %l = getelementptr [256 x float], ptr addrspace(3) @lds, i32 0, i32 %t",
                 "  store float %w, ptr addrspace(3) %l",
                 "  call void @llvm.amdgcn.s.barrier()",
                 "  %u = load float, ptr addrspace(3) %l",
                 "  store float %u, ptr addrspace(1) %a"]
    else:
        body += ["  store float %w, ptr addrspace(1) %a"]
    flags = ""
    if module_flags:
        items = list(module_flags.items())
        flags = ("!llvm.module.flags = !{" + ", ".join(f"!{i}" for i in range(len(items))) + "}\n"
                 + "".join(f'!{i} = !{{i32 1, !"{k}", i32 {v}}}\n' for i, (k, v) in enumerate(items)))
    return (_header(datalayout, triple)
            + "@lds = internal addrspace(3) global [256 x float] poison, align 16\n\n"
            + "define amdgpu_kernel void @k(ptr addrspace(1) noalias %p) #0 {\n" + "\n".join(body)
            + "\n  ret void\n}\n\ndeclare i32 @llvm.amdgcn.workitem.id.x()\ndeclare void @llvm.amdgcn.s.barrier()\n\n"
            + f"attributes #0 = {{ {attrs} }}\n" + flags)


def minimal_nvptx_ir() -> str:
    return (_header(None, NVPTX_TRIPLE) + "define ptx_kernel void @k(ptr addrspace(1) %p) {\n"
            "  %v = load float, ptr addrspace(1) %p\n  %w = fadd float %v, 1.0\n"
            "  store float %w, ptr addrspace(1) %p\n  ret void\n}\n")


# ------------------------------------------------------------------ classification


def evidence(text: str) -> str:
    """LLVM's own line of a failed probe's log, with addresses and the worker's request kind cut."""
    line = llvm_error_summary(text)
    line = re.sub(r"0x[0-9a-fA-F]+", "0x?", line)
    line = re.sub(r"^(?:llvm\.compile|triton24\.compile|llvm23\.compile): ", "", line.strip())
    return line.split("LLVM ERROR: ", 1)[-1].strip()[:400]


def classify_error(exc: Exception) -> dict[str, str]:
    """A failed probe -> status and evidence (LLVM's own line)."""
    if isinstance(exc, CompileTimeout):
        return {"status": "timeout", "evidence": f"no answer within {PROBE_TIMEOUT:g}s; worker killed"}
    text = (getattr(exc, "log", "") or "") + "\n" + str(exc)
    ev = evidence(text)
    if re.search(r"Cannot select|requires target feature|not supported on this (?:GPU|target)|"
                 r"is not a recognized processor|No available targets|has no target for triple|"
                 r"instruction not supported", text):
        return {"status": "arch_absent", "evidence": ev}
    if re.search(r"Intrinsic has incorrect|Invalid intrinsic|Unknown intrinsic|invalid LLVM IR|"
                 r"is not a recognized feature", text):
        return {"status": "name_absent", "evidence": ev}
    return {"status": "toolchain_crash", "evidence": ev}
