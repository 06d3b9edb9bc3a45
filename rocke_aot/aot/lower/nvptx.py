"""NVPTX kernels for sm_90: the qualification path beside AMDGPU.

    NvptxKernel(name, target, lane, block_size)
        .define_kernel(params)     ptx_kernel calling convention (LLVM 20 and 22 both take it;
                                   no nvvm.annotations needed), pointers in addrspace(1)
        .workitem_id()             llvm.nvvm.read.ptx.sreg.tid.x
        .workgroup_id()            llvm.nvvm.read.ptx.sreg.ctaid.x
        .barrier()                 the profile's CTA barrier: llvm.nvvm.barrier0 (LLVM 20) or
                                   llvm.nvvm.barrier.cta.sync.aligned.all(i32 0) (LLVM 21+)
        .shared_array(...)         shared memory, addrspace(3)
        .shuffle_xor(v, lane, mask) shfl.sync.bfly.b32 over the whole warp (the attention family's
                                   row reductions in registers)
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
        .wgmma(...), .wgmma_fence(), .wgmma_commit(), .wgmma_wait(n, acc), .fence_proxy_async()
                                   the warpgroup matrix instructions (sm_90a, capability
                                   wgmma:sm_90a): wgmma.mma_async m64nNk16 f32 += f16/bf16 from
                                   two shared-memory descriptors, inline PTX (no LLVM intrinsic
                                   in either lane); using any marks the module arch-specific
                                   (ARCH_SPECIFIC_MD: the compiler targets sm_90a, aot/compiler)
        .shared_address(gv)        the 32-bit shared-window address of a shared array
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

# ARCH_SPECIFIC_MD: named metadata that marks a module as needing the arch-specific target (sm_90 ->
# sm_90a: wgmma); the compiler reads it from the IR it is given (ptx_processor), so the IR, which the
# cache key covers, says which processor assembles it.
from rocke_aot.aot.compiler.ptx import ARCH_SPECIFIC_MD
from rocke_aot.aot.lower.module import F32, I32, KernelModule
from rocke_aot.errors import CapabilityError
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target


def wgmma_mnemonic(n: int, in_dtype: str) -> str:
    """The PTX instruction NvptxKernel.wgmma issues: f32 += f16 x f16 (bf16 x bf16), m64nNk16."""
    t = {"f16": "f16", "bf16": "bf16"}[in_dtype]
    return f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}"


class NvptxKernel(KernelModule):
    calling_convention = "ptx_kernel"

    def __init__(self, name: str, target: Target, lane: Lane, block_size: int):
        super().__init__(name, target, lane)
        if self.target.family != "nvptx64":
            raise CapabilityError(f"{self.target.id} is not an NVPTX target")
        if not 1 <= block_size <= self.target.info.max_block:
            raise CapabilityError(f"block size {block_size} outside 1..{self.target.info.max_block}")
        self.block_size = block_size
        self.wave_size = self.target.wave_size

    def workitem_id(self) -> ir.Value:
        return self.ir_builder().call(self.declare("tid_x"), [])

    def workgroup_id(self) -> ir.Value:
        return self.ir_builder().call(self.declare("ctaid_x"), [])

    def barrier(self) -> None:
        fn = self.declare("barrier")
        # LLVM 21+ takes the barrier id (0, the one __syncthreads uses); LLVM 20's barrier0 none.
        self.ir_builder().call(fn, [ir.Constant(I32, 0) for _ in fn.ftype.args])

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

    def shuffle_xor(self, value: ir.Value, lane: ir.Value, mask: int) -> ir.Value:
        """``value`` (f32 or i32) as lane ``lane ^ mask`` of this warp holds it: shfl.sync.bfly.b32 with
        every lane of the warp taking part (member mask 0xffffffff, clamp 0x1f: the whole warp is one
        segment; PTX ISA "shfl.sync"). ``lane`` is this lane's id (the butterfly needs none; AMDGPU's
        ds_bpermute does)."""
        b = self.ir_builder()
        bits = value if value.type == I32 else b.bitcast(value, I32)
        got = b.call(self.declare("shfl_bfly_i32"),
                     [ir.Constant(I32, -1), bits, ir.Constant(I32, mask), ir.Constant(I32, 0x1F)])
        return got if value.type == I32 else b.bitcast(got, value.type)

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
        self.ir_builder().call(asm, [dst, src, ignore_src])

    def async_commit(self) -> None:
        self.ir_builder().call(self._async("cp_async_commit", "cp.async.commit_group"), [])

    def async_wait(self, pending: int) -> None:
        self.ir_builder().call(self._async("cp_async_wait", "cp.async.wait_group"), [ir.Constant(I32, pending)])

    def ldmatrix(self, ptr: ir.Value, count: int, trans: bool) -> list[ir.Value]:
        key = {(4, False): "ldmatrix_x4", (4, True): "ldmatrix_x4_trans", (2, True): "ldmatrix_x2_trans"}[count, trans]
        res = self.ir_builder().call(self._async(key, "ldmatrix"), [ptr])
        return [self.ir_builder().extract_value(res, i) for i in range(count)]

    # -- inter-CTA communication (split-K, families/gemm/lower_async.py reduce_split) ------------------
    # Inline PTX, as async_copy16_unless: each is one PTX instruction with no LLVM intrinsic of the
    # same meaning in every lane (LLVM 20's NVPTX lowers `fence syncscope("device")` differently
    # from LLVM 22's), and the "~{memory}" clobber keeps LLVM from moving memory accesses across.
    def fence_acq_rel_gpu(self) -> None:
        """fence.acq_rel.gpu (PTX ISA 6.0+, sm_70+): with a strong write after it, a release
        pattern; after a strong read, an acquire pattern (the PTX memory consistency model)."""
        fty = ir.FunctionType(ir.VoidType(), [])
        self.ir_builder().call(ir.InlineAsm(fty, "fence.acq_rel.gpu;", "~{memory}", side_effect=True), [])

    def atomic_add_gpu(self, ptr: ir.Value, value: ir.Value) -> ir.Value:
        """atom.relaxed.gpu.global.add.u32: the old value; a strong (morally strong at gpu scope)
        read-modify-write, the synchronizing access of the fences around it."""
        fty = ir.FunctionType(I32, [ptr.type, I32])
        asm = ir.InlineAsm(fty, "atom.relaxed.gpu.global.add.u32 $0, [$1], $2;", "=r,l,r,~{memory}", side_effect=True)
        return self.ir_builder().call(asm, [ptr, value])

    def store_cg_v4f32(self, ptr: ir.Value, vec: ir.Value) -> None:
        """st.global.cg.v4.f32: 16 bytes, cached in L2 only (another CTA reads them)."""
        b = self.ir_builder()
        fty = ir.FunctionType(ir.VoidType(), [ptr.type, F32, F32, F32, F32])
        asm = ir.InlineAsm(fty, "st.global.cg.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}",
                           side_effect=True)
        b.call(asm, [ptr] + [b.extract_element(vec, ir.Constant(I32, i)) for i in range(4)])

    def load_cg_v4f32(self, ptr: ir.Value) -> ir.Value:
        """ld.global.cg.v4.f32 as a <4 x float>: 16 bytes from L2, never a stale L1 line of
        another CTA's data (the acquire fence orders it; .cg also keeps L1 out of the way)."""
        b = self.ir_builder()
        sty = ir.LiteralStructType([F32] * 4)
        fty = ir.FunctionType(sty, [ptr.type])
        asm = ir.InlineAsm(fty, "ld.global.cg.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l,~{memory}",
                           side_effect=True)
        got = b.call(asm, [ptr])
        vec = ir.Constant(ir.VectorType(F32, 4), None)
        for i in range(4):
            vec = b.insert_element(vec, b.extract_value(got, i), ir.Constant(I32, i))
        return vec

    # -- sm_90a warpgroup matrix instructions (capability wgmma:sm_90a) -------------------------
    def _asm(self, text: str, constraints: str = "~{memory}") -> None:
        fty = ir.FunctionType(ir.VoidType(), [])
        self.ir_builder().call(ir.InlineAsm(fty, text, constraints, side_effect=True), [])

    def _arch_specific(self, op: str) -> None:
        self.require(capability="wgmma:sm_90a", op=op)
        self.arch_specific = True

    def fence_proxy_async(self) -> None:
        """fence.proxy.async.shared::cta: this thread's generic-proxy writes to shared memory (the
        cp.async copies it waited for) become visible to the async proxy, through which wgmma reads
        its descriptors' operands (PTX ISA "Async proxy"); a barrier after it makes every thread's."""
        self._arch_specific("fence.proxy.async")
        self._asm("fence.proxy.async.shared::cta;")

    def wgmma_fence(self) -> None:
        """wgmma.fence.sync.aligned: orders the warpgroup's earlier register accesses of the
        accumulators before the wgmma.mma_async that follow (required before the first of a batch)."""
        self._arch_specific("wgmma.fence")
        self._asm("wgmma.fence.sync.aligned;")

    def wgmma_commit(self) -> None:
        self._arch_specific("wgmma.commit_group")
        self._asm("wgmma.commit_group.sync.aligned;")

    def wgmma_wait(self, pending: int, acc: list[ir.Value] | None = None) -> list[ir.Value]:
        """wgmma.wait_group.sync.aligned pending. With ``acc``: the accumulators pass through the
        asm as tied operands, so nothing reads them before the wait (their values are the asm's)."""
        self._arch_specific("wgmma.wait_group")
        text = f"wgmma.wait_group.sync.aligned {pending};"
        if not acc:
            self._asm(text)
            return []
        n = len(acc)
        sty = ir.LiteralStructType([F32] * n)
        cons = ",".join(["=f"] * n + [str(i) for i in range(n)] + ["~{memory}"])
        got = self.ir_builder().call(ir.InlineAsm(ir.FunctionType(sty, [F32] * n), text, cons, side_effect=True), acc)
        return [self.ir_builder().extract_value(got, i) for i in range(n)]

    def wgmma(self, n: int, in_dtype: str, acc: list[ir.Value], desc_a: ir.Value, desc_b: ir.Value,
              trans_b: bool) -> list[ir.Value]:
        """wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {acc}, desc_a, desc_b, 1, 1, 1, 0, trans_b:
        D = A x B + D (scale-d true), A K-major, B N-major when trans_b (PTX ISA "wgmma.mma_async").
        The n / 2 f32 accumulators a thread holds are outputs tied to the inputs: the same registers."""
        self._arch_specific("wgmma.mma_async")
        if len(acc) != n // 2 or n % 8 or not 8 <= n <= 256:
            raise CapabilityError(f"wgmma m64n{n}k16 keeps {n // 2} accumulators a thread, given {len(acc)}")
        regs = ", ".join(f"${i}" for i in range(len(acc)))
        k = len(acc)
        text = (f"{{ .reg .pred p; .reg .b32 q; mov.b32 q, 1; setp.ne.b32 p, q, 0; {wgmma_mnemonic(n, in_dtype)} "
                f"{{{regs}}}, ${k}, ${k + 1}, p, 1, 1, 0, {int(trans_b)}; }}")
        i64 = ir.IntType(64)
        sty = ir.LiteralStructType([F32] * k)
        cons = ",".join(["=f"] * k + ["l", "l"] + [str(i) for i in range(k)] + ["~{memory}"])
        fty = ir.FunctionType(sty, [i64, i64] + [F32] * k)
        got = self.ir_builder().call(ir.InlineAsm(fty, text, cons, side_effect=True), [desc_a, desc_b] + list(acc))
        return [self.ir_builder().extract_value(got, i) for i in range(k)]

    def shared_address(self, gv: ir.Value) -> ir.Value:
        """The i32 shared-window address of a shared (addrspace 3) array: what a wgmma
        descriptor's start address field (bits 4..17 of it) and the swizzle's address bits read."""
        return self.ir_builder().trunc(self.ir_builder().ptrtoint(gv, ir.IntType(64)), I32)

    def trap(self) -> None:
        self.ir_builder().call(self.declare("trap"), [])
        self.ir_builder().unreachable()

    arch_specific = False

    def finish(self) -> str:
        if self.arch_specific:
            self.module.add_named_metadata(ARCH_SPECIFIC_MD, [ir.MetaDataString(self.module, self.target.processor + "a")])
        kernel = self.kernel_function()
        kernel.attributes.add("nounwind")
        self.module.add_named_metadata(
            "nvvm.annotations",
            [kernel, ir.MetaDataString(self.module, "maxntidx"), ir.Constant(I32, self.block_size)],
        )
        return super().finish()
