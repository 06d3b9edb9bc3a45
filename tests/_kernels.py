"""Small hand-written kernels the compiler tests share (real IR, no lowering involved).

    ADD1        amdgcn-amd-amdhsa: out[tid] = in[tid] + 1.0   (any gfx target)
    NVPTX_ADD1  nvptx64-nvidia-cuda: the same kernel           (sm_90)

Import with ``from _kernels import ADD1, NVPTX_ADD1``.
"""

from __future__ import annotations


def _add1(triple: str, calling_convention: str, tid_intrinsic: str) -> str:
    """out[tid] = in[tid] + 1.0 for one target: only the triple, the kernel calling
    convention and the thread-id intrinsic differ between AMDGPU and NVPTX."""
    return f"""\
target triple = "{triple}"

define {calling_convention} void @add1(ptr addrspace(1) %out, ptr addrspace(1) %in) {{
  %id = call i32 @{tid_intrinsic}()
  %idx = zext i32 %id to i64
  %p = getelementptr float, ptr addrspace(1) %in, i64 %idx
  %v = load float, ptr addrspace(1) %p
  %r = fadd float %v, 1.0
  %q = getelementptr float, ptr addrspace(1) %out, i64 %idx
  store float %r, ptr addrspace(1) %q
  ret void
}}
declare i32 @{tid_intrinsic}()
"""


ADD1 = _add1("amdgcn-amd-amdhsa", "amdgpu_kernel", "llvm.amdgcn.workitem.id.x")
NVPTX_ADD1 = _add1("nvptx64-nvidia-cuda", "ptx_kernel", "llvm.nvvm.read.ptx.sreg.tid.x")
