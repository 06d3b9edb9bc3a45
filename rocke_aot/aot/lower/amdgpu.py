"""AMDGPU kernels: the amdgpu_kernel ABI on top of KernelModule.

    AmdgpuKernel(name, target, lane, block_size)
        .define_kernel(params)        amdgpu_kernel, noalias pointers in addrspace(1)
        .workitem_id() / .workgroup_id()      llvm.amdgcn.workitem.id.x / workgroup.id.x
        .barrier()                    llvm.amdgcn.s.barrier (+ workgroup fences around it)
        .barrier_lds()                the same, its fences ordering LDS only (MMRA "amdgpu-synchronize-as")
        .wait_zero("lds", "load")     counters drained (s_waitcnt / s_wait_dscnt, s_wait_loadcnt)
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

# s_waitcnt's immediate on gfx9 (gfx90a, gfx942, gfx950) for one counter at 0, the others at
# their maximum: lgkmcnt(0) / vmcnt(0), as llvm-mc-22 encodes them (tests/test_gemm_amd_isa.py
# reads the waits back from the code objects)
WAIT_GFX9 = {"lds": 0xC07F, "load": 0x0F70}


class _TaggedFence(ir.Fence):
    """llvmlite's fence, printed with its metadata (llvmlite's own drops it)."""

    def descr(self, buf):
        super().descr(buf)
        buf[-1] = buf[-1].rstrip("\n") + self._stringify_metadata(leading_comma=True) + "\n"


class AmdgpuKernel(KernelModule):
    calling_convention = "amdgpu_kernel"

    def __init__(self, name: str, target: Target, lane: Lane, block_size: int):
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
        v = self.ir_builder().call(self.declare("workitem_id_x"), [])
        return v

    def workgroup_id(self) -> ir.Value:
        return self.ir_builder().call(self.declare("workgroup_id_x"), [])

    def barrier(self) -> None:
        # The fences make LDS writes before the barrier visible to reads after it (as
        # __syncthreads does); s.barrier alone only orders execution.
        self.ir_builder().fence("release", targetscope="workgroup")
        self.ir_builder().call(self.declare("s_barrier"), [])
        self.ir_builder().fence("acquire", targetscope="workgroup")

    # The inter-work-group protocol of a last arriver (the split-KV attention's; NvptxKernel's four
    # operations of the same names) in LLVM IR's memory model: AMDGPUUsage's "Memory Model" lowers an
    # agent-scope fence to the waits, L2 write-back and invalidation each processor needs.
    def fence_acq_rel_gpu(self) -> None:
        """fence syncscope("agent") acq_rel: release before the arrival's atomic, acquire after it."""
        self.ir_builder().fence("acq_rel", targetscope="agent")

    def atomic_add_gpu(self, ptr: ir.Value, value: ir.Value) -> ir.Value:
        """atomicrmw add syncscope("agent") monotonic (the old value): the fences' synchronizing access."""
        return self.ir_builder().atomic_rmw("add", ptr, value, 'syncscope("agent") monotonic')

    def store_cg_v4f32(self, ptr: ir.Value, vec: ir.Value) -> None:
        """16 bytes to global memory (a plain store: the release fence orders it for other work-groups)."""
        self.ir_builder().store(vec, ptr, align=16)

    def load_cg_v4f32(self, ptr: ir.Value) -> ir.Value:
        """16 bytes from global memory as <4 x float> (after the acquire fence: another work-group's)."""
        return self.ir_builder().load(ptr, typ=ir.VectorType(ir.FloatType(), 4), align=16)

    def barrier_lds(self) -> None:
        """barrier() whose fences order LDS only (MMRA !{"amdgpu-synchronize-as", "local"}, LLVM's
        AMDGPUUsage "Memory Model Relaxation Annotations"): for loops that share nothing but LDS
        between work-items. A plain workgroup fence also waits for the global loads in flight
        (gfx1250: s_wait_loadcnt 0 at each barrier), which undid a loop's loads issued ahead."""
        tag = self.module.add_metadata(["amdgpu-synchronize-as", "local"])
        for order in ("release", None, "acquire"):
            if order is None:
                self.ir_builder().call(self.declare("s_barrier"), [])
                continue
            fence = self.ir_builder().fence(order, targetscope="workgroup")
            fence.__class__ = _TaggedFence  # the same instruction, printed with its metadata
            fence.set_metadata("mmra", tag)

    def wait_zero(self, *counters: str) -> None:
        """Wait until every outstanding operation of each counter is done: "lds" (LDS reads and
        writes: gfx9 lgkmcnt, gfx12 dscnt), "load" (global loads: gfx9 vmcnt, gfx12 loadcnt); both
        at once are one s_waitcnt on gfx9 (0x0070: vmcnt(0) lgkmcnt(0)).
        The backend's own waits (SIInsertWaitcnts) count from it, so the uses after it need none;
        scheduling fences (llvm.amdgcn.sched.barrier 0) on both sides keep every instruction on
        its side (without them LLVM hoisted a use above the wait, behind a wait of its own).
        gfx9 encodings (llvm-mc-22 -show-encoding): lgkmcnt(0) 0xC07F, vmcnt(0) 0x0F70 (the other
        counters at their maximum)."""
        bad = [c for c in counters if c not in WAIT_GFX9]
        if bad or not counters:
            raise CapabilityError(f"no counter {bad or counters!r}: one or more of {', '.join(WAIT_GFX9)}")
        proc = self.target.processor
        fence = self.declare("sched_barrier")  # the wait is a scheduling fence: nothing crosses it
        self.ir_builder().call(fence, [ir.Constant(I32, 0)])
        if proc.startswith("gfx9"):  # one s_waitcnt: the counters' fields at 0 (the AND of the encodings)
            imm = 0xFFFF
            for c in counters:
                imm &= WAIT_GFX9[c]
            self.ir_builder().call(self.declare("s_waitcnt"), [ir.Constant(I32, imm)])
        elif proc.startswith("gfx12"):
            for c in counters:
                key = "s_wait_dscnt" if c == "lds" else "s_wait_loadcnt"
                self.ir_builder().call(self.declare(key), [ir.Constant(ir.IntType(16), 0)])
        else:
            raise CapabilityError(f"{proc}: no counter wait encoding known here (gfx9, gfx12 only)")
        self.ir_builder().call(fence, [ir.Constant(I32, 0)])

    def shuffle_xor(self, value: ir.Value, lane: ir.Value, mask: int) -> ir.Value:
        """``value`` (f32 or i32) as lane ``lane ^ mask`` of this wave holds it (ds_bpermute_b32,
        every lane of the wave taking part)."""
        b = self.ir_builder()
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
        fn = self.kernel_function()
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
