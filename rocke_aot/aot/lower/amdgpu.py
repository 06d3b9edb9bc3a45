"""AMDGPU kernels: the amdgpu_kernel ABI on top of KernelModule.

    AmdgpuKernel(name, target, lane, block_size)
        .define_kernel(params)        amdgpu_kernel, noalias pointers in addrspace(1)
        .workitem_id() / .workgroup_id()      llvm.amdgcn.workitem.id.x / workgroup.id.x
        .barrier()                    llvm.amdgcn.s.barrier (+ workgroup fences around it)
        .shuffle_xor(v, lane, mask)   lane ^ mask's value (llvm.amdgcn.ds.bpermute)
        .shared_array(...)            LDS, addrspace(3)
        .finish()  -> IR text, with the kernel's attributes:
             "amdgpu-flat-work-group-size"="B,B"      the block size it was lowered for
             "target-cpu", "target-features"          the target ID + wavefrontsize32/64
             (profiles with target-id:module-flags, LLVM 24: xnack/sramecc as
              !llvm.module.flags !{i32 1, !"amdgpu.<feature>", i32 0|1} instead)
             "amdgpu-no-<input>" for every implicit input the kernel does not use
             (the list comes from the lane's profile; see lanes._AMDGPU_NO_INPUTS_*)
             the profile's "no AGPRs" attribute when the kernel has no matrix op

Only 1-D ids (x) are offered, so the y/z ids are always disclaimed; an op that needs
another implicit input (the dispatch pointer, ...) must add itself to ``uses`` first.
Stating these ourselves is what lets a code generator without the attributor (LLVM 24's)
still enable only the kernarg segment pointer in the kernel descriptor.
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower.module import I32, KernelModule
from rocke_aot.errors import CapabilityError
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target


class AmdgpuKernel(KernelModule):
    calling_convention = "amdgpu_kernel"

    def __init__(self, name: str, target: Target, lane: Lane | str, block_size: int):
        super().__init__(name, target, lane)
        if not self.target.is_amdgpu:
            raise CapabilityError(f"{self.target.id} is not an AMDGPU target")
        if not 1 <= block_size <= self.target.info.max_block:
            raise CapabilityError(f"block size {block_size} outside 1..{self.target.info.max_block}")
        self.block_size = block_size
        self.wave_size = self.target.wave_size
        self.uses: set[str] = {"workitem-id-x", "workgroup-id-x"}  # always delivered for kernels
        self.uses_matrix = False

    def workitem_id(self) -> ir.Value:
        v = self.builder.call(self.declare("workitem_id_x"), [])
        return v

    def workgroup_id(self) -> ir.Value:
        return self.builder.call(self.declare("workgroup_id_x"), [])

    def barrier(self) -> None:
        # The fences make LDS writes before the barrier visible to reads after it (as
        # __syncthreads does); s.barrier alone only orders execution.
        self.builder.fence("release", targetscope="workgroup")
        self.builder.call(self.declare("s_barrier"), [])
        self.builder.fence("acquire", targetscope="workgroup")

    def shuffle_xor(self, value: ir.Value, lane: ir.Value, mask: int) -> ir.Value:
        """``value`` (f32 or i32) as lane ``lane ^ mask`` of this wave holds it (ds_bpermute_b32,
        every lane of the wave taking part)."""
        b = self.builder
        addr = b.shl(b.xor(lane, ir.Constant(I32, mask)), ir.Constant(I32, 2))
        bits = value if value.type == I32 else b.bitcast(value, I32)
        got = b.call(self.declare("ds_bpermute"), [addr, bits])
        return got if value.type == I32 else b.bitcast(got, value.type)

    def matrix_op(self, key: str, capability: str, op: str) -> ir.Function:
        """Declare a matrix intrinsic after checking the lane allows it (refuse before LLVM)."""
        self.require(capability=capability, op=op)
        self.uses_matrix = True
        return self.declare(key)

    def finish(self) -> str:
        fn = self.kernel
        attrs = fn.attributes
        attrs.add_string("amdgpu-flat-work-group-size", f"{self.block_size},{self.block_size}")
        attrs.add_string("target-cpu", self.target.processor)
        wave = f"+wavefrontsize{self.wave_size}"
        if self.profile.has("target-id:module-flags"):
            # LLVM 24: xnack/sramecc are module properties; as subtarget features they are an
            # error that LLVM then ignores (the code object would say "any").
            for name, on in self.target.features:
                self.module.add_named_metadata(
                    "llvm.module.flags", [ir.Constant(I32, 1), f"amdgpu.{name}", ir.Constant(I32, int(on))])
            feats = wave
        else:
            feats = ",".join(f for f in (self.target.llvm_features, wave) if f)
        attrs.add_string("target-features", feats)
        for inp in self.profile.amdgpu_no_inputs:
            if inp not in self.uses:
                attrs.add_string(f"amdgpu-no-{inp}")
        if not self.uses_matrix and self.target.info.has_agprs and self.profile.amdgpu_no_agpr:
            attrs.add_string(*self.profile.amdgpu_no_agpr)
        attrs.add("nounwind")
        return super().finish()
