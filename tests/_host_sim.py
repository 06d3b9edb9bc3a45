"""Run a lowered kernel's own IR on this host's CPU (no GPU): the tests' one simulator.

    CpuGrid(lowered, wave_size=32)
        lowered.ir --_retarget--> host IR, the same instructions with
            triple / datalayout      -> the host's (address spaces dropped: one flat memory)
            thread / block ids       -> sim_tid / sim_ctaid     (ctypes callbacks)
            barriers (CTA, s.barrier)-> sim_barrier*            (a threading.Barrier)
            workgroup fences (MMRA-tagged too), counter waits, scheduling fences, target
            attributes -> dropped (the Python barrier orders memory)
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
            ds.bpermute (AMDGPU)    -> sim_bpermute: every lane of the wave deposits its value, each
                                        takes lane (addr / 4) mod wave's (the ISA manuals'
                                        DS_BPERMUTE_B32, all lanes active)
            amdgcn.exp2 (AMDGPU)    -> llvm.exp2.f32 (V_EXP_F32: 2^x; the host keeps denormal results
                                        the GPU flushes, below 2^-126)
            external (dynamic) shared arrays -> a zeroed buffer of the kernel's dynamic_lds_bytes
            split-K's inter-CTA protocol (sm_90 inline PTX, NvptxKernel.fence_acq_rel_gpu,
            atomic_add_gpu, store_cg_v4f32, load_cg_v4f32): a weak-memory model of what the PTX
            memory consistency model promises, no more --
              st.global.cg    -> sim_st_cg4: the store waits in the thread's buffer, invisible
                                 to other CTAs
              bar.sync        -> each thread's buffered stores join the CTA's (barriers
                                 synchronize: they precede every thread's next instructions)
              fence.acq_rel.gpu -> sim_fence: release: the thread's buffer and the CTA's are
                                 fenced, and land in memory at the thread's next strong write
                                 (fence + atom: the release pattern); acquire: after a strong
                                 read (the atom), the thread may read what other CTAs released
                                 (after the next barrier, every thread of the CTA may)
              atom.relaxed.gpu.add -> sim_atom_add: an atomic add on memory, a strong write
                                 (publishes the fenced stores first) and a strong read
              ld.global.cg    -> sim_ld_cg4: memory as it is; in a thread that has not
                                 acquired a violation (NaN read; launch raises AssertionError)
            stores never released land only when the launch ends (the latest the model allows),
            so a partial read without the writer's fence reads the workspace's old contents.
            ``launch(..., order=)``: the order work-groups run in (arrival orders of split-K).
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
    "llvm.amdgcn.ds.bpermute": "sim_bpermute",
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


_AMD_EXP2 = """
define float @"sim_amd_exp2"(float %x) {
  %r = call float @"llvm.exp2.f32"(float %x)
  ret float %r
}
"""


_CP_UNLESS = """
define void @"sim_cp_async_unless"(ptr %dst, ptr %src, i1 %ignore) {
  %n = select i1 %ignore, i32 0, i32 16
  call void @"sim_cp_async"(ptr %dst, ptr %src, i32 %n)
  ret void
}
"""


_LD_CG4 = """
declare void @"sim_ld_cg4"(ptr, ptr)
define {float, float, float, float} @"sim_ld_cg4_ir"(ptr %p) {
  %o = alloca {float, float, float, float}
  call void @"sim_ld_cg4"(ptr %p, ptr %o)
  %r = load {float, float, float, float}, ptr %o
  ret {float, float, float, float} %r
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
    text = re.sub(r'^\s*fence syncscope\("workgroup"\) \w+(?:, !mmra !\d+)?\n', "", text, flags=re.M)
    # AMDGPU scheduling fences order nothing at run time (the compiler's scheduler only), and the
    # counter waits nothing here (every simulated load and store completes before the next
    # instruction): dropped
    waits = r'llvm\.amdgcn\.(?:sched\.barrier|s\.waitcnt|s\.wait\.dscnt|s\.wait\.loadcnt)'
    text = re.sub(r'^\s*call void @"' + waits + r'"\(i(?:32|16) \d+\)\n', "", text, flags=re.M)
    text = re.sub(r'^declare void @"' + waits + r'"\(i(?:32|16)[^)]*\)\n', "", text, flags=re.M)
    # The target's string attributes (target-cpu, amdgpu-*) mean nothing on the host.
    text = re.sub(r' "(?:amdgpu-[\w-]+|target-cpu|target-features)"(?:="[^"]*")?', "", text)
    for old, new in _ID_CALLS.items():
        text = text.replace(f'@"{old}"', f'@"{new}"')
    if '@"llvm.amdgcn.exp2.f32"' in text:
        text = re.sub(r'^declare float @"llvm\.amdgcn\.exp2\.f32"\(float[^)]*\)\n', "", text, flags=re.M)
        text = text.replace('@"llvm.amdgcn.exp2.f32"', '@"sim_amd_exp2"') + _AMD_EXP2
        if not re.search(r'^declare float @"?llvm\.exp2\.f32"?\(', text, flags=re.M):
            text += '\ndeclare float @"llvm.exp2.f32"(float)\n'

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
    # split-K's inter-CTA protocol (inline PTX; the module doc's memory model)
    text = text.replace('call void asm sideeffect "fence.acq_rel.gpu;", "~{memory}"()', 'call void @"sim_fence"()')
    text = text.replace('call i32 asm sideeffect "atom.relaxed.gpu.global.add.u32 $0, [$1], $2;", "=r,l,r,~{memory}"(',
                        'call i32 @"sim_atom_add"(')
    text = text.replace('call void asm sideeffect "st.global.cg.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}"(',
                        'call void @"sim_st_cg4"(')
    text, n_ld = re.subn(r'call \{float, float, float, float\} asm sideeffect "ld\.global\.cg\.v4\.f32 '
                         r'\{\$0, \$1, \$2, \$3\}, \[\$4\];", "=f,=f,=f,=f,l,~\{memory\}"\(',
                         'call {float, float, float, float} @"sim_ld_cg4_ir"(', text)
    if n_ld:
        text += _LD_CG4
    for name, sig in (("sim_fence", "void ()"), ("sim_atom_add", "i32 (ptr, i32)"),
                      ("sim_st_cg4", "void (ptr, float, float, float, float)")):
        if f'@"{name}"' in text:
            ret, params = sig.split(" ", 1)
            text += f'\ndeclare {ret} @"{name}"{params}\n'
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
            ctypes.CFUNCTYPE(None, ctypes.c_int32)(lambda _id: self._bar_sync()),
            ctypes.CFUNCTYPE(None)(self._bar_sync),
            ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)(self._mma),
            ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)(self._ldmatrix),
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)(self._cp_async),
            ctypes.CFUNCTYPE(None)(self._cp_commit),
            ctypes.CFUNCTYPE(None, ctypes.c_int32)(self._cp_wait),
            ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                             ctypes.c_int32)(self._shfl_bfly),
            ctypes.CFUNCTYPE(None)(self._fence),
            ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int32)(self._atom_add),
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, *[ctypes.c_float] * 4)(self._st_cg4),
            ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(self._ld_cg4),
            ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)(self._bpermute),
        ]
        self._mem_lock = threading.Lock()
        for name, cb in zip(("sim_tid", "sim_ctaid", "sim_barrier", "sim_barrier0", "sim_mma", "sim_ldmatrix",
                             "sim_cp_async", "sim_cp_commit", "sim_cp_wait", "sim_shfl_bfly",
                             "sim_fence", "sim_atom_add", "sim_st_cg4", "sim_ld_cg4", "sim_bpermute"), self._cbs):
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

    def _bpermute(self, addr, value) -> int:
        """DS_BPERMUTE_B32: lane i returns the value lane (addr[i] / 4) mod wave deposited."""
        wave, lane = divmod(self.local.tid, self.wave_size)
        slot = self.slots[wave]
        slot[("bperm", lane)] = value
        self.wave_barriers[wave].wait()
        got = slot[("bperm", (addr // 4) % self.wave_size)]
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

    # -- split-K's inter-CTA protocol: the module doc's weak-memory model ----------------------
    def _bar_sync(self) -> None:
        """bar.sync: each thread's buffered global stores join the CTA's (they now precede every
        thread's later instructions); an acquire made before it holds for every thread after."""
        with self._mem_lock:
            self.cta_stores += self.local.stores
            self.local.stores = []
            self.cta_acquired |= self.local.acquired
        self.barrier.wait()
        self.local.acquired = self.cta_acquired

    def _fence(self) -> None:
        with self._mem_lock:  # what precedes the fence in causality order, released by the next strong write
            self.local.fenced += self.local.stores + self.cta_stores
            self.local.stores, self.cta_stores = [], []
        if self.local.observed:  # acquire: a strong read before the fence
            self.local.acquired = True

    def _atom_add(self, ptr, value) -> int:
        """A strong read-modify-write: the release pattern's write (the stores fenced before it
        land now, before its new value can be observed) and a strong read (an acquire after it)."""
        with self._mem_lock:
            for addr, vals in self.local.fenced:
                ctypes.memmove(addr, np.asarray(vals, dtype=np.float32).ctypes.data, 16)
            self.local.fenced = []
            cell = ctypes.c_uint32.from_address(ptr)
            old = cell.value
            cell.value = (old + value) & 0xFFFFFFFF
        self.local.observed = True
        return old

    # An exception in a ctypes callback is printed and lost: a protocol violation is recorded,
    # the value read made NaN, and launch() raises it.
    def _st_cg4(self, ptr, x0, x1, x2, x3) -> None:
        if ptr % 16:
            self.violations.append(f"st.global.v4.f32 at {ptr:#x}: not 16-byte aligned")
        self.local.stores.append((ptr, (x0, x1, x2, x3)))

    def _ld_cg4(self, ptr, out) -> None:
        if not self.local.acquired or ptr % 16:
            self.violations.append(f"ld.global.cg.v4.f32 at {ptr:#x} " + (
                "of another CTA's data without an acquire (fence after the atom)" if not self.local.acquired
                else "not 16-byte aligned"))
            ctypes.memmove(out, np.full(4, np.nan, dtype=np.float32).ctypes.data, 16)
            return
        ctypes.memmove(out, ptr, 16)

    def launch(self, grid: int, *args, order=None) -> None:
        """Run work-groups ``order`` (default 0 .. grid-1) one after another."""
        order = list(range(grid)) if order is None else list(order)
        if sorted(order) != list(range(grid)):
            raise AssertionError(f"order {order} is not a permutation of the {grid} work-groups")
        self.late = []  # global stores no release pattern published: they land when the launch ends
        self.violations = []
        types = [ctypes.c_void_p if k == "global_pointer" else ctypes.c_int32 for k in self.kinds]
        fn = ctypes.CFUNCTYPE(None, *types)(self.addr)
        cargs = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]
        errors: list[BaseException] = []
        between = threading.Barrier(self.threads)

        def run(tid: int) -> None:
            self.local.tid = tid
            self.local.open, self.local.groups = [], []
            try:
                for blk in order:
                    self.local.ctaid = blk
                    self.local.stores, self.local.fenced = [], []
                    self.local.observed, self.local.acquired = False, False
                    if tid == 0:
                        self.cta_stores, self.cta_acquired = [], False
                    between.wait()  # the CTA's memory state is fresh before any thread runs
                    fn(*cargs)
                    with self._mem_lock:
                        self.late += self.local.stores + self.local.fenced
                    between.wait()  # the next block reuses the same LDS
                    if tid == 0:
                        self.late += self.cta_stores
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
        for addr, vals in self.late:  # the kernel's end makes every store visible
            ctypes.memmove(addr, np.asarray(vals, dtype=np.float32).ctypes.data, 16)
        if self.violations:
            raise AssertionError(f"{len(self.violations)} memory-model violations, first: {self.violations[0]}")
