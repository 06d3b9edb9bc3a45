"""NVPTX kernels for sm_90: the qualification path beside AMDGPU.

    NvptxKernel(name, target, lane, block_size)
        .define_kernel(params)     ptx_kernel calling convention (LLVM 20 and 22 both take it;
                                   no nvvm.annotations needed), pointers in addrspace(1)
        .workitem_id()             llvm.nvvm.read.ptx.sreg.tid.x
        .workgroup_id()            llvm.nvvm.read.ptx.sreg.ctaid.x
        .barrier()                 the profile's CTA barrier: llvm.nvvm.barrier0 (LLVM 20) or
                                   llvm.nvvm.barrier.cta.sync.aligned.all(i32 0) (LLVM 21+)
        .shared_array(...)         shared memory, addrspace(3)
        .matrix_op(key, cap, op)   capability check + declaration of an mma.sync intrinsic
                                   (llvm.nvvm.mma.m16n8k16.row.col.*; called through
                                   aot/lower/matrix.py call_matrix)
        .async_copy16_unless(dst, src, p)   cp.async.cg.shared.global [dst], [src], 16 with the
                                   ignore-src predicate p (16 zero bytes where p holds; inline
                                   PTX, LLVM has no intrinsic for it)
        .async_commit() / .async_wait(pending)   cp.async.commit_group / wait_group pending
        .ldmatrix(ptr, count, trans)  ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16:
                                   one 32-bit register per 8x8 matrix (PTX ISA; the lane maps
                                   are the gemm lowering's, checked by tests/_host_sim.py)
        .trap()                    llvm.trap (a launch that breaks the kernel's contract)
        .finish()                  launch bounds: !nvvm.annotations maxntidx = block size, so
                                   ptxas budgets registers for the block the kernel is launched
                                   with (without it a register-heavy kernel assembles fine and
                                   then fails at launch with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES).
                                   LLVM 20 reads only the annotation; LLVM 22 upgrades it to the
                                   "nvvm.maxntid" attribute; both print ".maxntid" in the PTX.

The same family code drives this class and AmdgpuKernel: only the ids, barrier and
ABI differ. The PTX comes from the toolchain's NVPTX target machine with ``+ptx80``.
"""

from __future__ import annotations

import llvmlite.ir as ir

from rocke_aot.aot.lower.module import F32, I32, KernelModule
from rocke_aot.targets import Target
from rocke_aot.errors import CapabilityError

PTX_FEATURES = "+ptx80"  # what the toolchain's target machine must be created with


class NvptxKernel(KernelModule):
    calling_convention = "ptx_kernel"

    def __init__(self, name: str, target: Target, lane: object, block_size: int):
        super().__init__(name, target, lane)
        if self.target.family != "nvptx64":
            raise CapabilityError(f"{self.target.id} is not an NVPTX target")
        if not 1 <= block_size <= self.target.info.max_block:
            raise CapabilityError(f"block size {block_size} outside 1..{self.target.info.max_block}")
        self.block_size = block_size
        self.wave_size = self.target.wave_size

    def workitem_id(self) -> ir.Value:
        return self.builder.call(self.declare("tid_x"), [])

    def workgroup_id(self) -> ir.Value:
        return self.builder.call(self.declare("ctaid_x"), [])

    def barrier(self) -> None:
        fn = self.declare("barrier")
        # LLVM 21+ takes the barrier id (0, the one __syncthreads uses); LLVM 20's barrier0 none.
        self.builder.call(fn, [ir.Constant(I32, 0) for _ in fn.ftype.args])

    def shared_array(self, name, elem, count, elem_bytes, align=16):
        gv = super().shared_array(name, elem, count, elem_bytes, align)
        # Static __shared__ data is limited to 48 KiB per kernel (the arch table's
        # static_lds_bytes; ptxas: "uses too much shared data (0x10000 bytes, 0xc000 max)");
        # more needs dynamic shared memory and a launch-time opt-in, which these kernels do not use.
        limit = self.target.info.static_lds_limit
        if self.lds_bytes > limit:
            raise CapabilityError(
                f"{self.name}: {self.lds_bytes} bytes of static shared memory exceed the "
                f"{limit} bytes a kernel may declare on {self.target.id}"
            )
        return gv

    def matrix_op(self, key: str, capability: str, op: str) -> ir.Function:
        """Declare an NVPTX matrix intrinsic (mma.sync) after checking the lane allows it.

        Refused before LLVM: an AMDGPU instruction here would reach the NVPTX back end as an
        unknown intrinsic (an external call, or an abort in instruction selection).
        """
        self.require(capability=capability, op=op)
        name = self.profile.intrinsic(key).name
        if not name.startswith("llvm.nvvm."):
            raise CapabilityError(f"{op}: {name} is not an NVPTX instruction; {self.target.id} cannot run it")
        return self.declare(key)

    # -- sm_80+ asynchronous copies and fragment loads (capability async-copy:sm_90) ----------
    def _async(self, key: str, op: str) -> ir.Function:
        self.require(capability="async-copy:sm_90", op=op)
        return self.declare(key)

    def async_copy16_unless(self, dst: ir.Value, src: ir.Value, ignore_src: ir.Value) -> None:
        """cp.async.cg.shared.global [dst], [src], 16, ignore_src: 16 zero bytes where the i1
        ignore_src holds (PTX ISA 7.5+, sm_80+, the predicate form of the zero fill). LLVM has no
        intrinsic for it (llvm.nvvm.cp.async.*.s takes a byte count, which ptxas turns back into a
        predicate: a select and a compare per copy), so it is inline PTX with a "b" (.pred) operand;
        the same capability as the intrinsic forms."""
        self.require(capability="async-copy:sm_90", op="cp.async (ignore-src)")
        fty = ir.FunctionType(ir.VoidType(), [dst.type, src.type, ir.IntType(1)])
        asm = ir.InlineAsm(fty, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,b", side_effect=True)
        self.builder.call(asm, [dst, src, ignore_src])

    def async_commit(self) -> None:
        self.builder.call(self._async("cp_async_commit", "cp.async.commit_group"), [])

    def async_wait(self, pending: int) -> None:
        self.builder.call(self._async("cp_async_wait", "cp.async.wait_group"), [ir.Constant(I32, pending)])

    def ldmatrix(self, ptr: ir.Value, count: int, trans: bool) -> list[ir.Value]:
        key = {(4, False): "ldmatrix_x4", (4, True): "ldmatrix_x4_trans", (2, True): "ldmatrix_x2_trans"}[count, trans]
        res = self.builder.call(self._async(key, "ldmatrix"), [ptr])
        return [self.builder.extract_value(res, i) for i in range(count)]

    # -- inter-CTA communication (split-K, aot/families/gemm.py reduce_split) ------------------
    # Inline PTX, as async_copy16_unless: each is one PTX instruction with no LLVM intrinsic of the
    # same meaning in every lane (LLVM 20's NVPTX lowers `fence syncscope("device")` differently
    # from LLVM 22's), and the "~{memory}" clobber keeps LLVM from moving memory accesses across.
    def fence_acq_rel_gpu(self) -> None:
        """fence.acq_rel.gpu (PTX ISA 6.0+, sm_70+): with a strong write after it, a release
        pattern; after a strong read, an acquire pattern (the PTX memory consistency model)."""
        fty = ir.FunctionType(ir.VoidType(), [])
        self.builder.call(ir.InlineAsm(fty, "fence.acq_rel.gpu;", "~{memory}", side_effect=True), [])

    def atomic_add_gpu(self, ptr: ir.Value, value: ir.Value) -> ir.Value:
        """atom.relaxed.gpu.global.add.u32: the old value; a strong (morally strong at gpu scope)
        read-modify-write, the synchronizing access of the fences around it."""
        fty = ir.FunctionType(I32, [ptr.type, I32])
        asm = ir.InlineAsm(fty, "atom.relaxed.gpu.global.add.u32 $0, [$1], $2;", "=r,l,r,~{memory}", side_effect=True)
        return self.builder.call(asm, [ptr, value])

    def store_cg_v4f32(self, ptr: ir.Value, vec: ir.Value) -> None:
        """st.global.cg.v4.f32: 16 bytes, cached in L2 only (another CTA reads them)."""
        b = self.builder
        fty = ir.FunctionType(ir.VoidType(), [ptr.type, F32, F32, F32, F32])
        asm = ir.InlineAsm(fty, "st.global.cg.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}",
                           side_effect=True)
        b.call(asm, [ptr] + [b.extract_element(vec, ir.Constant(I32, i)) for i in range(4)])

    def load_cg_v4f32(self, ptr: ir.Value) -> ir.Value:
        """ld.global.cg.v4.f32 as a <4 x float>: 16 bytes from L2, never a stale L1 line of
        another CTA's data (the acquire fence orders it; .cg also keeps L1 out of the way)."""
        b = self.builder
        sty = ir.LiteralStructType([F32] * 4)
        fty = ir.FunctionType(sty, [ptr.type])
        asm = ir.InlineAsm(fty, "ld.global.cg.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l,~{memory}",
                           side_effect=True)
        got = b.call(asm, [ptr])
        vec = ir.Constant(ir.VectorType(F32, 4), None)
        for i in range(4):
            vec = b.insert_element(vec, b.extract_value(got, i), ir.Constant(I32, i))
        return vec

    def trap(self) -> None:
        self.builder.call(self.declare("trap"), [])
        self.builder.unreachable()

    def finish(self) -> str:
        self.kernel.attributes.add("nounwind")
        self.module.add_named_metadata(
            "nvvm.annotations",
            [self.kernel, ir.MetaDataString(self.module, "maxntidx"), ir.Constant(I32, self.block_size)],
        )
        return super().finish()
