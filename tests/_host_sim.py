"""Run a lowered kernel's own IR on this host's CPU (no GPU): the tests' one simulator.

    CpuGrid(lowered, wave_size=32)
        lowered.ir --_retarget--> host IR, the same instructions with
            triple / datalayout      -> the host's (address spaces dropped: one flat memory)
            thread / block ids       -> sim_tid / sim_ctaid     (ctypes callbacks)
            barriers (CTA, s.barrier)-> sim_barrier*            (a threading.Barrier)
            workgroup fences, target attributes -> dropped (the Python barrier orders memory)
            fptrunc to bfloat        -> sim_f2bf: round to nearest even in integers, NaN kept
                                        (no x86 libcall needed)
            mfma / wmma / nvvm.mma   -> sim_mma_<i>: spill the operands, call sim_mma
            ldmatrix (sm_90)         -> sim_ldm_<i>: the warp's row addresses gathered, each
                                        lane's registers from tests/_isa_ref.ldmatrix_registers
            cp.async (sm_90)         -> sim_cp_async / _commit / _wait (the inline-PTX ignore-src
                                        form: 0 or 16 source bytes): copies are queued per
                                        thread and done only at cp.async.wait_group, for every
                                        group but the newest ``pending`` (the latest the PTX ISA
                                        lets them land): a stage read before its wait (or
                                        without the barrier after it) reads stale data
            shfl.sync.bfly (sm_90)  -> sim_shfl_bfly: every lane of the warp deposits its value, each
                                        takes lane ^ b's (PTX ISA "shfl.sync": c's clamp and
                                        segment mask; a lane past the clamp keeps its own)
            external (dynamic) shared arrays -> a zeroed buffer of the kernel's dynamic_lds_bytes
        --MCJIT--> .launch(grid, *args): one OS thread per work-item, blocks one after
            another; ndarray args pass their buffer, ints pass as they are (a pointer too)

Matrix instructions rendezvous per wave: every lane deposits its operand registers, one
lane runs the instruction's reference in tests/_isa_ref.py (written from the vendor
documents, found by the intrinsic's LLVM name, importing nothing of rocke_aot) and every
lane takes its results back. So the lowering's fragment maps (rocke_aot/mma.py), its
register packing (aot/lower/matrix.py), LDS staging, guards and epilogues are checked
against an implementation they did not produce; LLVM's AMDGPU / NVPTX code generation
itself is not (the compile and GPU tests cover that).

Used by tests/test_conv_cpu_sim.py and tests/test_gemm_emulated.py.
"""

from __future__ import annotations

import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np

from _isa_ref import LDMATRIX, REFS, decode16, ldmatrix_registers

_ID_CALLS = {
    "llvm.nvvm.read.ptx.sreg.tid.x": "sim_tid", "llvm.amdgcn.workitem.id.x": "sim_tid",
    "llvm.nvvm.read.ptx.sreg.ctaid.x": "sim_ctaid", "llvm.amdgcn.workgroup.id.x": "sim_ctaid",
    "llvm.nvvm.barrier.cta.sync.aligned.all": "sim_barrier",  # takes a barrier id
    "llvm.nvvm.barrier0": "sim_barrier0", "llvm.amdgcn.s.barrier": "sim_barrier0",
    "llvm.nvvm.cp.async.commit.group": "sim_cp_commit",
    "llvm.nvvm.cp.async.wait.group": "sim_cp_wait",
    "llvm.nvvm.shfl.sync.bfly.i32": "sim_shfl_bfly",
}
_F2BF = """
define bfloat @"sim_f2bf"(float %x) {
  %b = bitcast float %x to i32
  %nan = fcmp uno float %x, %x
  %lsb = lshr i32 %b, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %r = add i32 %b, %bias
  %h = lshr i32 %r, 16
  %t = trunc i32 %h to i16
  %q = select i1 %nan, i16 32704, i16 %t
  %o = bitcast i16 %q to bfloat
  ret bfloat %o
}
"""


_CP_UNLESS = """
define void @"sim_cp_async_unless"(ptr %dst, ptr %src, i1 %ignore) {
  %n = select i1 %ignore, i32 0, i32 16
  call void @"sim_cp_async"(ptr %dst, ptr %src, i32 %n)
  ret void
}
"""


def _retarget(text: str) -> tuple[str, list]:
    """sm_90 / AMDGPU kernel IR -> host IR calling the simulator's callbacks.

    Returns the text and the matrix instructions it calls (tests/_isa_ref.IsaRef, found by
    the intrinsic's LLVM name), in the order of their callback ids.
    """
    text = re.sub(r'target triple = "[^"]*"', f'target triple = "{llvm.get_process_triple()}"', text)
    text = re.sub(r'target datalayout = "[^"]*"\n', "", text)
    text = re.sub(r" addrspace\(\d+\)", "", text)
    text = text.replace("ptx_kernel ", "").replace("amdgpu_kernel ", "")
    text = re.sub(r'^\s*fence syncscope\("workgroup"\) \w+\n', "", text, flags=re.M)
    # The target's string attributes (target-cpu, amdgpu-*) mean nothing on the host.
    text = re.sub(r' "(?:amdgpu-[\w-]+|target-cpu|target-features)"(?:="[^"]*")?', "", text)
    for old, new in _ID_CALLS.items():
        text = text.replace(f'@"{old}"', f'@"{new}"')
    # fptrunc to bfloat may need a libcall the JIT lacks: round to nearest even in integers.
    text, n_bf = re.subn(r"(%\S+) = fptrunc float (%\S+) to bfloat", r'\1 = call bfloat @"sim_f2bf"(float \2)', text)
    if n_bf:
        text += _F2BF
    instrs = []
    for m in re.finditer(r'^declare (.+?) @"(llvm\.(?:amdgcn\.(?:mfma|wmma)|nvvm\.mma)[\w.]*)"\((.*)\)$',
                         text, flags=re.M):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        if name not in REFS:
            raise AssertionError(f"{name}: no reference implementation in tests/_isa_ref.py")
        ref = REFS[name]
        ptypes = [p.rsplit(" ", 1)[0] for p in params.split(", ")]
        wid = len(instrs)
        instrs.append(ref)
        args = ", ".join(f"{t} %p{i}" for i, t in enumerate(ptypes))
        body = [f'define {ret} @"sim_mma_{wid}"({args}) {{']
        # Each operand's parameters are stored side by side (a struct of them): the registers'
        # 16-bit elements then lie in memory order, element 0 of register 0 first.
        for tag, idx in (("a", ref.a_params), ("b", ref.b_params), ("c", ref.c_params)):
            sty = "{" + ", ".join(ptypes[i] for i in idx) + "}"
            body.append(f"  %{tag} = alloca {sty}")
            for f, i in enumerate(idx):
                body += [f"  %{tag}{f} = getelementptr {sty}, ptr %{tag}, i32 0, i32 {f}",
                         f"  store {ptypes[i]} %p{i}, ptr %{tag}{f}"]
        body += [f"  %d = alloca {ret}",
                 f'  call void @"sim_mma"(i32 {wid}, ptr %a, ptr %b, ptr %c, ptr %d)',
                 f"  %r = load {ret}, ptr %d", f"  ret {ret} %r", "}"]
        text = text.replace(m.group(0), "\n".join(body)).replace(f'@"{name}"', f'@"sim_mma_{wid}"')
    if instrs:
        text += '\ndeclare void @"sim_mma"(i32, ptr, ptr, ptr, ptr)\n'
    ldms = []
    for m in re.finditer(r'^declare (\{[^}]*\}) @"(llvm\.nvvm\.ldmatrix[\w.]*)"\(ptr[^)]*\)$', text, flags=re.M):
        ret, name = m.group(1), m.group(2)
        count, trans = LDMATRIX[name]
        lid = len(ldms)
        ldms.append((count, trans))
        body = [f'define {ret} @"sim_ldm_{lid}"(ptr %p) {{', f"  %o = alloca {ret}",
                f'  call void @"sim_ldmatrix"(i32 {lid}, ptr %p, ptr %o)', f"  %r = load {ret}, ptr %o",
                f"  ret {ret} %r", "}"]
        text = text.replace(m.group(0), "\n".join(body)).replace(f'@"{name}"', f'@"sim_ldm_{lid}"')
    if ldms:
        text += '\ndeclare void @"sim_ldmatrix"(i32, ptr, ptr)\n'
    # cp.async with the ignore-src predicate (NvptxKernel.async_copy16_unless, inline PTX):
    # the byte-count form with 0 source bytes where the predicate holds
    text, n_cp = re.subn(r'call void asm sideeffect "cp\.async\.cg\.shared\.global \[\$0\], \[\$1\], 16, \$2;", '
                         r'"r,l,b"\(', 'call void @"sim_cp_async_unless"(', text)
    if n_cp:
        text += _CP_UNLESS + ("" if 'declare void @"sim_cp_async"' in text else '\ndeclare void @"sim_cp_async"(ptr, ptr, i32)\n')
    assert " asm " not in text, "inline assembly the simulator does not model"
    assert "llvm.nvvm" not in text and "llvm.amdgcn" not in text, "an intrinsic the simulator does not model"
    return text, instrs, ldms


class CpuGrid:
    """Run a lowered kernel on the CPU, block after block, T threads per block.

    Matrix instructions rendezvous per wave: every lane deposits its operand registers,
    one lane runs the instruction's tests/_isa_ref.py reference and every lane takes its
    result registers back.
    """

    _lock = threading.Lock()

    def __init__(self, kernel, wave_size: int = 32):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        text, self.instrs, self.ldms = _retarget(kernel.ir)
        # the kernel's dynamic shared array (external, zero length): the launch's buffer
        self.dynamic = []
        for name in re.findall(r'^@"?([\w.]+)"? = external global', text, flags=re.M):
            buf = (ctypes.c_uint8 * max(16, getattr(kernel, "dynamic_lds_bytes", 0)))()
            self.dynamic.append(buf)
            llvm.add_symbol(name, ctypes.addressof(buf))
        self.threads = kernel.block_size
        self.wave_size = wave_size
        self.local = threading.local()
        self.barrier = threading.Barrier(self.threads)
        waves = -(-self.threads // wave_size)
        self.wave_barriers = [threading.Barrier(min(wave_size, self.threads - w * wave_size)) for w in range(waves)]
        self.slots = [dict() for _ in range(waves)]
        self._cbs = [
            ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: self.local.tid),
            ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: self.local.ctaid),
            ctypes.CFUNCTYPE(None, ctypes.c_int32)(lambda _id: self.barrier.wait()),
            ctypes.CFUNCTYPE(None)(lambda: self.barrier.wait()),
            ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)(self._mma),
            ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(self._ldmatrix),
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(self._cp_async),
            ctypes.CFUNCTYPE(None)(self._cp_commit),
            ctypes.CFUNCTYPE(None, ctypes.c_int32)(self._cp_wait),
            ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                             ctypes.c_int32)(self._shfl_bfly),
        ]
        for name, cb in zip(("sim_tid", "sim_ctaid", "sim_barrier", "sim_barrier0", "sim_mma", "sim_ldmatrix",
                             "sim_cp_async", "sim_cp_commit", "sim_cp_wait", "sim_shfl_bfly"), self._cbs):
            llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=1)
        mod = llvm.parse_assembly(text)
        mod.verify()
        mod.data_layout = str(tm.target_data)
        with self._lock:
            self.engine = llvm.create_mcjit_compiler(mod, tm)
            self.engine.finalize_object()
        self.addr = self.engine.get_function_address(kernel.kernel_name)
        self.kinds = [a.kind for a in kernel.kernargs]

    def _mma(self, wid, pa, pb, pc, pd) -> None:
        ref = self.instrs[wid]
        tid = self.local.tid
        wave, lane = divmod(tid, self.wave_size)
        if ref.wave != self.wave_size:
            raise AssertionError(f"{ref.intrinsic} runs on {ref.wave} lanes, the kernel's waves have {self.wave_size}")
        n_acc = ref.d_regs

        def operand(ptr, count):
            bits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint16)), (count,)).copy()
            return decode16(bits, ref.dtype)

        slot = self.slots[wave]
        slot[("a", lane)] = operand(pa, ref.a_regs)
        slot[("b", lane)] = operand(pb, ref.b_regs)
        slot[("c", lane)] = np.ctypeslib.as_array(ctypes.cast(pc, ctypes.POINTER(ctypes.c_float)), (n_acc,)).copy()
        if self.wave_barriers[wave].wait() == 0:
            lanes_ = range(ref.wave)
            fa = np.stack([slot[("a", x)] for x in lanes_])
            fb = np.stack([slot[("b", x)] for x in lanes_])
            fc = np.stack([slot[("c", x)] for x in lanes_]).astype(np.float64)
            slot["d"] = ref.execute(fa, fb, fc)
        self.wave_barriers[wave].wait()
        out = np.ctypeslib.as_array(ctypes.cast(pd, ctypes.POINTER(ctypes.c_float)), (n_acc,))
        out[:] = slot["d"][lane]

    def _ldmatrix(self, lid, p, out) -> None:
        count, trans = self.ldms[lid]
        wave, lane = divmod(self.local.tid, self.wave_size)
        if self.wave_size != 32:
            raise AssertionError("ldmatrix is a 32-thread warp instruction")
        slot = self.slots[wave]
        slot[("ldm", lane)] = int(p)
        self.wave_barriers[wave].wait()
        rows = [slot[("ldm", x)] for x in range(32)]

        def read16(addr: int) -> int:
            return ctypes.c_uint16.from_address(addr).value

        regs = ldmatrix_registers(rows, count, trans, read16)[lane]
        self.wave_barriers[wave].wait()  # every lane has read the addresses before the next deposit
        dst = np.ctypeslib.as_array(ctypes.cast(out, ctypes.POINTER(ctypes.c_uint32)), (count,))
        dst[:] = regs

    def _shfl_bfly(self, mask, value, b, c) -> int:
        """PTX ISA shfl.sync.bfly: j = lane ^ b; with segmask = c[12:8] and maxLane = (lane &
        segmask) | (c[4:0] & ~segmask), a lane whose j is past maxLane keeps its own value.
        Every lane of the warp takes part (a full member mask is the only one lowered)."""
        wave, lane = divmod(self.local.tid, self.wave_size)
        if self.wave_size != 32 or mask & 0xFFFFFFFF != 0xFFFFFFFF:
            raise AssertionError(f"shfl.sync with member mask {mask & 0xFFFFFFFF:#x} on a {self.wave_size}-lane wave")
        slot = self.slots[wave]
        slot[("shfl", lane)] = value
        self.wave_barriers[wave].wait()
        seg = (c >> 8) & 0x1F
        j = lane ^ (b & 0x1F)
        got = slot[("shfl", j)] if j <= ((lane & seg) | (c & 0x1F & ~seg)) else value
        self.wave_barriers[wave].wait()  # every lane has read before the next deposit
        return got

    # cp.async: per thread, the open group's copies and the committed groups, oldest first
    def _cp_async(self, dst, src, nbytes) -> None:
        if not 0 <= nbytes <= 16:
            raise AssertionError(f"cp.async of {nbytes} source bytes (0..16)")
        if dst % 16 or (nbytes and src % 16):
            raise AssertionError(f"cp.async 16 needs 16-byte aligned addresses: dst {dst:#x}, src {src:#x}")
        self.local.open.append((dst, src, nbytes))

    def _cp_commit(self) -> None:
        self.local.groups.append(self.local.open)
        self.local.open = []

    def _cp_wait(self, pending) -> None:
        groups = self.local.groups
        while len(groups) > pending:
            for dst, src, n in groups.pop(0):
                if n:
                    ctypes.memmove(dst, src, n)
                ctypes.memset(dst + n, 0, 16 - n)

    def launch(self, grid: int, *args) -> None:
        types = [ctypes.c_void_p if k == "global_pointer" else ctypes.c_int32 for k in self.kinds]
        fn = ctypes.CFUNCTYPE(None, *types)(self.addr)
        cargs = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]
        errors: list[BaseException] = []
        between = threading.Barrier(self.threads)

        def run(tid: int) -> None:
            self.local.tid = tid
            self.local.open, self.local.groups = [], []
            try:
                for blk in range(grid):
                    self.local.ctaid = blk
                    fn(*cargs)
                    between.wait()  # the next block reuses the same LDS
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
                for bar in [self.barrier, between, *self.wave_barriers]:
                    bar.abort()

        ts = [threading.Thread(target=run, args=(t,)) for t in range(self.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
