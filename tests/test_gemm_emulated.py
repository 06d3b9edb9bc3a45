"""Numerics of the lowered gemm IR without a GPU: the kernel's own IR, run on the host CPU.

    lower(...).ir --_host_ir--> host IR: same instructions, with
        triple/datalayout -> the host's, address spaces dropped (one flat memory),
        thread / block ids  -> calls to emu_tid / emu_gid   (ctypes callbacks)
        barriers            -> emu_barrier                   (a threading.Barrier)
        workgroup fences    -> dropped (the Python barrier orders memory)
        MFMA / WMMA calls   -> emu.<key>: spills operands to memory and calls emu_mma,
                               which gathers one wave's lanes and applies the NUMPY MODEL
                               (aot/lower/mma.py execute) -- the instruction's documented
                               lane layout, independent of how the lowering indexes LDS
        fptrunc to bfloat   -> an integer round-to-nearest-even (no x86 libcall needed)
    --MCJIT--> one OS thread per work-item, work-groups one after another -> C vs numpy

So the loads, edge guards, K tail, LDS staging, double buffering, fragment index maps and
output conversion that the GPU will execute are all exercised here; a fragment map that
disagreed with the documented layout would give wrong numbers. What this cannot check is
LLVM's AMDGPU/NVPTX code generation itself (that is test_gemm_compile / test_gemm_gpu).
"""

from __future__ import annotations

import ctypes
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest

from rocke_aot.aot import lanes
from rocke_aot.aot.families.gemm import grid
from rocke_aot.aot.lower import lower, mma
from rocke_aot.variants.gemm import GemmSpec

_ID_CALLS = {
    "llvm.nvvm.read.ptx.sreg.tid.x": "emu_tid", "llvm.amdgcn.workitem.id.x": "emu_tid",
    "llvm.nvvm.read.ptx.sreg.ctaid.x": "emu_gid", "llvm.amdgcn.workgroup.id.x": "emu_gid",
    "llvm.nvvm.barrier0": "emu_barrier", "llvm.amdgcn.s.barrier": "emu_barrier",
    "llvm.nvvm.barrier.cta.sync.aligned.all": "emu_barrier_id",
}
_F2BF = """
define bfloat @"emu.f2bf"(float %x) {
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


def _mma_wrapper(key: str, decl: lanes.IntrinsicDecl, idx: int) -> str:
    ins = mma.INSTRS[key]
    ops = (1, 3, 5) if ins.kind == "wmma" else (0, 1, 2)
    params = ", ".join(f"{t} %p{i}" for i, t in enumerate(decl.params))
    lines = [f'define {decl.ret} @"emu.{key}"({params}) {{']
    for name, i in zip("abc", ops):
        lines += [f"  %{name} = alloca {decl.params[i]}", f"  store {decl.params[i]} %p{i}, ptr %{name}"]
    lines += [f"  %d = alloca {decl.ret}",
              f"  call void @emu_mma(i32 {idx}, ptr %a, ptr %b, ptr %c, ptr %d)",
              f"  %r = load {decl.ret}, ptr %d", f"  ret {decl.ret} %r", "}"]
    return "\n".join(lines) + "\n"


def _host_ir(ir_text: str, profile: lanes.Profile, host_dl: str) -> tuple[str, list[str]]:
    text = re.sub(r'target triple = ".*"', f'target triple = "{llvm.get_process_triple()}"', ir_text)
    text = re.sub(r'target datalayout = ".*"', f'target datalayout = "{host_dl}"', text)
    text = re.sub(r" addrspace\(\d+\)", "", text)
    text = text.replace("define ptx_kernel ", "define ").replace("define amdgpu_kernel ", "define ")
    text = re.sub(r' "target-(cpu|features)"="[^"]*"', "", text)
    text = re.sub(r"^\s*fence syncscope\(\"workgroup\"\) \w+\n", "", text, flags=re.M)
    for old, new in _ID_CALLS.items():
        text = text.replace(f'@"{old}"', f'@"{new}"')
    text = re.sub(r"fptrunc float (%\"?[.\w]+\"?) to bfloat", r'call bfloat @"emu.f2bf"(float \1)', text)
    extra, keys = [_F2BF, "declare void @emu_mma(i32, ptr, ptr, ptr, ptr)\n"], []
    by_name = {d.name: (k, d) for k, d in profile.intrinsics.items()}
    for name in re.findall(r'^declare \S.*? @"(llvm\.amdgcn\.(?:mfma|wmma)[^"]*)"', text, flags=re.M):
        key, decl = by_name[name]
        text = re.sub(rf'^declare .*@"{re.escape(name)}".*\n', "", text, flags=re.M)
        text = text.replace(f'@"{name}"', f'@"emu.{key}"')
        extra.append(_mma_wrapper(key, decl, len(keys)))
        keys.append(key)
    return text + "".join(extra), keys


class _Emulator:
    def __init__(self, lowered, profile: lanes.Profile, wave_size: int):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.block, self.wave = lowered.block_size, wave_size
        self.local = threading.local()
        self.gid = 0
        self.barrier = threading.Barrier(self.block)
        self.errors: list[BaseException] = []
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=1)
        text, self.keys = _host_ir(lowered.ir, profile, str(tm.target_data))
        self._callbacks = self._install()
        mod = llvm.parse_assembly(text)
        mod.verify()
        self.engine = llvm.create_mcjit_compiler(mod, tm)
        self.engine.finalize_object()
        proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
        self.kernel = proto(self.engine.get_function_address(lowered.kernel_name))
        nwaves = self.block // self.wave
        self.wave_state = [dict(a=[None] * self.wave, b=[None] * self.wave, c=[None] * self.wave, d=None,
                                enter=threading.Barrier(self.wave, action=self._mma_action(w)),
                                leave=threading.Barrier(self.wave)) for w in range(nwaves)]

    def _install(self):
        i32 = ctypes.CFUNCTYPE(ctypes.c_int32)
        cbs = {
            "emu_tid": i32(lambda: self.local.tid),
            "emu_gid": i32(lambda: self.gid),
            "emu_barrier": ctypes.CFUNCTYPE(None)(lambda: self.barrier.wait()),
            "emu_barrier_id": ctypes.CFUNCTYPE(None, ctypes.c_int32)(lambda _id: self.barrier.wait()),
            "emu_mma": ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_void_p, ctypes.c_void_p)(self._mma_lane),
        }
        for name, cb in cbs.items():
            llvm.add_symbol(name, ctypes.cast(cb, ctypes.c_void_p).value)
        return cbs

    def _mma_lane(self, idx, pa, pb, pc, pd):
        ins = mma.INSTRS[self.keys[idx]]
        tid = self.local.tid
        st = self.wave_state[tid // self.wave]
        lane = tid % self.wave
        n_in, n_acc = ins.a_per_lane, ins.acc_per_lane
        st["idx"] = idx
        st["a"][lane] = np.ctypeslib.as_array((ctypes.c_uint16 * n_in).from_address(pa)).copy()
        st["b"][lane] = np.ctypeslib.as_array((ctypes.c_uint16 * n_in).from_address(pb)).copy()
        st["c"][lane] = np.ctypeslib.as_array((ctypes.c_float * n_acc).from_address(pc)).copy()
        st["enter"].wait()  # the last lane to arrive runs the model for the whole wave
        ctypes.memmove(pd, st["d"][lane].ctypes.data, 4 * n_acc)
        st["leave"].wait()  # nobody deposits the next operands before all lanes took results

    def _mma_action(self, w):
        def run():
            st = self.wave_state[w]
            ins = mma.INSTRS[self.keys[st["idx"]]]
            fa, fb = np.stack(st["a"]), np.stack(st["b"])
            fa, fb = (_to_f64(x, ins.in_dtype) for x in (fa, fb))
            d = mma.execute(ins, fa, fb, np.stack(st["c"]).astype(np.float64))
            st["d"] = d.astype(np.float32)
        return run

    def run(self, spec: GemmSpec, a: np.ndarray, b: np.ndarray, c: np.ndarray, m: int, n: int, k: int):
        def thread(tid):
            self.local.tid = tid
            try:
                self.kernel(a.ctypes.data + 2 * GUARD, b.ctypes.data + 2 * GUARD, c.ctypes.data, m, n, k)
            except BaseException as e:  # pragma: no cover - surfaced below
                self.errors.append(e)
                self.barrier.abort()

        for gid in range(grid(spec, m, n)[0]):
            self.gid = gid
            threads = [threading.Thread(target=thread, args=(t,)) for t in range(self.block)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not self.errors, self.errors


def _to_f64(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


GUARD = 64  # elements of NaN on each side of A and B: an out-of-bounds read poisons C


def _inputs(dtype, shape, rng):
    x = rng.integers(-8, 9, size=shape).astype(np.float32) / 4  # exact in f16 and bf16
    if dtype == "f16":
        bits = x.astype(np.float16).view(np.uint16)
    else:
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    nan = 0x7E00 if dtype == "f16" else 0x7FC0
    buf = np.full(bits.size + 2 * GUARD, nan, dtype=np.uint16)
    buf[GUARD:GUARD + bits.size] = bits.ravel()
    return buf, x.astype(np.float64)


from test_gemm_gpu import SPECS as GPU_SPECS  # noqa: E402  (the specs the H200 run uses)

CASES = [
    *[("sm_90", spec) for spec in GPU_SPECS],  # exactly what test_gemm_gpu runs on the H200
    ("gfx942", GemmSpec(path="mfma", mma="16x16x16", block_m=16, block_n=16, block_k=16, waves=1,
                        vector_width=8)),  # fewer load chunks than threads: guarded staging
    ("sm_90", GemmSpec(path="fma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, waves=2,
                       vector_width=1)),
    ("sm_90", GemmSpec(path="fma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=64, block_k=16,
                       waves=2, double_buffer=True, vector_width=8)),
    ("gfx942", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=32, block_k=16, waves=2)),
    ("gfx90a", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="f16", mma="16x16x16", block_m=32, block_n=32,
                        block_k=16, waves=1, vector_width=2, double_buffer=True)),
    ("gfx950", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=32, block_k=32,
                        waves=1, double_buffer=True)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="f16", out_dtype="f16", block_m=32, block_n=32, block_k=32,
                         waves=2, vector_width=8)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="bf16", out_dtype="f32", block_m=16, block_n=32, block_k=64,
                         waves=1, double_buffer=True)),
]
SIZES = [(1, 1, 1), (37, 45, 70), (130, 70, 33)]


@pytest.mark.parametrize("arch,spec", CASES, ids=[f"{a}-{s.kernel_name}" for a, s in CASES])
def test_lowered_gemm_computes_a_x_b(arch, spec):
    low = lower("gemm", spec, arch, "llvm22")
    emu = _Emulator(low, lanes.get_lane("llvm22").profile, spec.geometry(low_target(arch)).wave_size)
    rng = np.random.default_rng(7)
    for m, n, k in SIZES:
        a_bits, a = _inputs(spec.in_dtype, (m, k), rng)
        b_bits, b = _inputs(spec.in_dtype, (k, n), rng)
        nbytes = {"f32": 4, "f16": 2, "bf16": 2}[spec.out_dtype]
        c = np.full(m * n * nbytes + 64, 0xFF, dtype=np.uint8)  # NaN fill + a guard zone
        emu.run(spec, a_bits, b_bits, c, m, n, k)
        assert (c[m * n * nbytes:] == 0xFF).all(), "wrote past the end of C"
        raw = c[: m * n * nbytes].view({4: np.float32, 2: np.uint16}[nbytes]).reshape(m, n)
        got = raw.astype(np.float64) if nbytes == 4 else _to_f64(raw, spec.out_dtype)
        want = a @ b
        # inputs are multiples of 1/4 in [-2, 2]: products and sums are exact in f32, so an
        # f32 result must match exactly; a 16-bit result is want rounded once to nearest.
        if spec.out_dtype == "f32":
            np.testing.assert_array_equal(got, want, err_msg=f"{m}x{n}x{k}")
        else:
            ref = want.astype(np.float16) if spec.out_dtype == "f16" else _bf16_round(want)
            np.testing.assert_array_equal(got, np.asarray(ref, dtype=np.float64), err_msg=f"{m}x{n}x{k}")


def low_target(arch):
    from rocke_aot.aot.targets import Target
    return Target.parse(arch)


def _bf16_round(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.view(np.float32).astype(np.float64)
