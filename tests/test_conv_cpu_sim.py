"""The conv lowerings' IR (sm_90 fma; gfx942/gfx950 mfma, gfx1250 wmma) run on this host's CPU vs numpy.

No GPU is needed: the exact IR the NVPTX path compiles (same lowering, same index
algebra, same guards, same barriers) is retargeted to the host and JIT-compiled with
llvmlite; every thread of a block is a real OS thread, ``tid.x``/``ctaid.x`` read
per-thread values and the CTA barrier is a ``threading.Barrier``, so LDS staging races
would show up as wrong numbers. Only the triple, datalayout, address spaces, the
target attributes and the id/barrier intrinsics change; tests/test_conv_gpu.py runs
the sm_90 IR on a real H200.

The AMDGPU matrix paths run the same way: each mfma/wmma call becomes a per-wave
rendezvous where the wave's operand registers go through aot.lower.mma.execute, the
numpy model of the instruction's documented lane layout (tests/test_mma_layouts.py
checks that model). So these tests prove the conv index maps, LDS staging, guards and
epilogues of every path; that the model matches the silicon is the layout tests' job,
and a GPU run's.
"""

from __future__ import annotations

import ctypes
import re
import threading

import numpy as np
import pytest

from rocke_aot.aot.lower import lower
from rocke_aot.variants.conv import ConvDgradPatchSpec, ConvDirectFwdSpec

llvm = pytest.importorskip("llvmlite.binding")  # the project depends on llvmlite: never skipped


_MMA_OPERANDS = {"mfma": (0, 1, 2), "wmma": (1, 3, 5)}  # param positions of A, B, C
_F2BF = """
define bfloat @"sim_f2bf"(float %x) {
  %b = bitcast float %x to i32
  %lsb = lshr i32 %b, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %r = add i32 %b, %bias
  %h = lshr i32 %r, 16
  %t = trunc i32 %h to i16
  %o = bitcast i16 %t to bfloat
  ret bfloat %o
}
"""


def _retarget(text: str) -> tuple[str, list]:
    """sm_90 / AMDGPU kernel IR -> host IR calling the simulator's callbacks.

    Returns the text and the matrix instructions (aot.lower.mma.MmaInstr) it calls, in the
    order of their callback ids.
    """
    from rocke_aot.aot.lower import mma

    text = re.sub(r'target triple = "[^"]*"', f'target triple = "{llvm.get_process_triple()}"', text)
    text = re.sub(r'target datalayout = "[^"]*"\n', "", text)
    text = text.replace(" addrspace(1)", "").replace(" addrspace(3)", "")
    text = text.replace("ptx_kernel ", "").replace("amdgpu_kernel ", "")
    text = re.sub(r'^\s*fence syncscope\("workgroup"\) \w+\n', "", text, flags=re.M)
    # The target's string attributes (target-cpu, amdgpu-*) mean nothing on the host.
    text = re.sub(r' "(?:amdgpu-[\w-]+|target-cpu|target-features)"(?:="[^"]*")?', "", text)
    for old, new in (("llvm.nvvm.read.ptx.sreg.tid.x", "sim_tid"), ("llvm.amdgcn.workitem.id.x", "sim_tid"),
                     ("llvm.nvvm.read.ptx.sreg.ctaid.x", "sim_ctaid"),
                     ("llvm.amdgcn.workgroup.id.x", "sim_ctaid"),
                     ("llvm.nvvm.barrier.cta.sync.aligned.all", "sim_barrier"),
                     ("llvm.amdgcn.s.barrier", "sim_barrier0")):
        text = text.replace(f'@"{old}"', f'@"{new}"')
    # fptrunc to bfloat may need a libcall the JIT lacks: round to nearest even in integers.
    text, n_bf = re.subn(r"(%\S+) = fptrunc float (%\S+) to bfloat", r'\1 = call bfloat @"sim_f2bf"(float \2)', text)
    if n_bf:
        text += _F2BF
    instrs = []
    by_name = {}
    for ins in mma.INSTRS.values():
        for lane in ("llvm22", "llvm20"):
            from rocke_aot.aot import lanes
            try:
                by_name[lanes.get_lane(lane).profile.intrinsic(ins.key).name] = ins
            except Exception:
                pass
    for m in re.finditer(r'^declare (\S+(?: x \w+>)?) @"(llvm\.amdgcn\.(?:mfma|wmma)[\w.]*)"\((.*)\)$',
                         text, flags=re.M):
        ret, name, params = m.group(1), m.group(2), m.group(3)
        ins = by_name[name]
        ptypes = [p.rsplit(" ", 1)[0] for p in params.split(", ")]
        ia, ib, ic = _MMA_OPERANDS[ins.kind]
        wid = len(instrs)
        instrs.append(ins)
        args = ", ".join(f"{t} %p{i}" for i, t in enumerate(ptypes))
        body = [f'define {ret} @"sim_mma_{wid}"({args}) {{']
        for tag, i in (("a", ia), ("b", ib), ("c", ic)):
            body += [f"  %{tag} = alloca {ptypes[i]}", f"  store {ptypes[i]} %p{i}, ptr %{tag}"]
        body += [f"  %d = alloca {ret}",
                 f'  call void @"sim_mma"(i32 {wid}, ptr %a, ptr %b, ptr %c, ptr %d)',
                 f"  %r = load {ret}, ptr %d", f"  ret {ret} %r", "}"]
        text = text.replace(m.group(0), "\n".join(body)).replace(f'@"{name}"', f'@"sim_mma_{wid}"')
    if instrs:
        text += '\ndeclare void @"sim_mma"(i32, ptr, ptr, ptr, ptr)\n'
    assert "llvm.nvvm" not in text and "llvm.amdgcn" not in text, "an intrinsic the simulator does not model"
    return text, instrs


class CpuGrid:
    """Run a lowered kernel on the CPU, block after block, T threads per block.

    Matrix instructions rendezvous per wave: every lane deposits its operand registers,
    one lane runs aot.lower.mma.execute (the numpy model of the instruction's documented
    lane layout) and every lane takes its result registers back.
    """

    _lock = threading.Lock()

    def __init__(self, kernel, wave_size: int = 32):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        text, self.instrs = _retarget(kernel.ir)
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
        ]
        for name, cb in zip(("sim_tid", "sim_ctaid", "sim_barrier", "sim_barrier0", "sim_mma"), self._cbs):
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
        from rocke_aot.aot.lower import mma

        ins = self.instrs[wid]
        tid = self.local.tid
        wave, lane = divmod(tid, self.wave_size)
        n_in, n_acc = ins.a_per_lane, ins.acc_per_lane

        def operand(ptr):
            bits = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_uint16)), (n_in,)).copy()
            if ins.in_dtype == "f16":
                return bits.view(np.float16).astype(np.float64)
            return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)

        slot = self.slots[wave]
        slot[("a", lane)] = operand(pa)
        slot[("b", lane)] = operand(pb)
        slot[("c", lane)] = np.ctypeslib.as_array(ctypes.cast(pc, ctypes.POINTER(ctypes.c_float)), (n_acc,)).copy()
        if self.wave_barriers[wave].wait() == 0:
            lanes_ = range(ins.wave_size)
            fa = np.stack([slot[("a", x)] for x in lanes_])
            fb = np.stack([slot[("b", x)] for x in lanes_])
            fc = np.stack([slot[("c", x)] for x in lanes_]).astype(np.float64)
            slot["d"] = mma.execute(ins, fa, fb, fc)
        self.wave_barriers[wave].wait()
        out = np.ctypeslib.as_array(ctypes.cast(pd, ctypes.POINTER(ctypes.c_float)), (n_acc,))
        out[:] = slot["d"][lane]

    def launch(self, grid: int, *args) -> None:
        types = [ctypes.c_void_p if k == "global_buffer" else ctypes.c_int32 for k in self.kinds]
        fn = ctypes.CFUNCTYPE(None, *types)(self.addr)
        cargs = [a.ctypes.data if isinstance(a, np.ndarray) else int(a) for a in args]
        errors: list[BaseException] = []
        between = threading.Barrier(self.threads)

        def run(tid: int) -> None:
            self.local.tid = tid
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


# -- numpy references (NHWC activations, KRSC weights) -----------------------------------------

def conv_fwd_ref(x, w, spec):
    n, h, wd, c = x.shape
    oh, ow = spec.out_hw(h, wd)
    xp = np.zeros((n, h + 2 * spec.pad_h, wd + 2 * spec.pad_w, c), np.float64)
    xp[:, spec.pad_h:spec.pad_h + h, spec.pad_w:spec.pad_w + wd] = x
    y = np.zeros((n, oh, ow, spec.k))
    for r in range(spec.r):
        for s in range(spec.s):
            hs, ws = r * spec.dil_h, s * spec.dil_w
            patch = xp[:, hs:hs + spec.stride_h * (oh - 1) + 1:spec.stride_h,
                       ws:ws + spec.stride_w * (ow - 1) + 1:spec.stride_w, :]
            y += np.einsum("nhwc,kc->nhwk", patch, w[:, r, s, :].astype(np.float64))
    return y


def patch_dgrad_ref(dy, w, h, wd):
    n, hp, wp, k = dy.shape
    _, p, _, c = w.shape
    dx = np.zeros((n, h, wd, c))
    blocks = np.einsum("nijk,krsc->nirjsc", dy.astype(np.float64), w.astype(np.float64))
    dx[:, :hp * p, :wp * p] = blocks.reshape(n, hp * p, wp * p, c)
    return dx


def _rand(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


FWD_CASES = [
    # spec, (N, H, W): odd sizes, partial tiles, padding, stride, dilation, K and C chunks
    (ConvDirectFwdSpec(c=8, k=16, tile_h=2, tile_w=4, tile_k=16, c_chunk=8), (1, 5, 7)),
    (ConvDirectFwdSpec(c=16, k=24, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1,
                       tile_h=2, tile_w=4, tile_k=16, c_chunk=8), (2, 7, 9)),
    (ConvDirectFwdSpec(c=3, k=8, r=7, s=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3,
                       tile_h=2, tile_w=2, tile_k=8, c_chunk=3), (1, 9, 11)),
    (ConvDirectFwdSpec(c=8, k=8, r=3, s=3, pad_h=2, pad_w=2, dil_h=2, dil_w=2,
                       tile_h=4, tile_w=4, tile_k=8, c_chunk=4), (1, 6, 5)),
    (ConvDirectFwdSpec(c=8, k=8, r=1, s=1, pad_h=0, pad_w=0, tile_h=2, tile_w=8, tile_k=8, c_chunk=8),
     (1, 3, 9)),
]


@pytest.mark.parametrize("spec,shape", FWD_CASES, ids=[s.kernel_name for s, _ in FWD_CASES])
def test_conv_direct_fwd_fma_ir_is_numerically_right(spec, shape):
    n, h, w = shape
    rng = np.random.default_rng(1)
    x = _rand(rng, (n, h, w, spec.c))
    wt = _rand(rng, (spec.k, spec.r, spec.s, spec.c))
    oh, ow = spec.out_hw(h, w)
    y = np.full((n, oh, ow, spec.k), np.nan, np.float16)
    k = lower("conv_direct_fwd", spec, "sm_90", "llvm22")
    CpuGrid(k).launch(spec.grid(n, h, w), x, wt, y, n, h, w)
    ref = conv_fwd_ref(x.astype(np.float64), wt, spec)
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-2, atol=2e-2)


PATCH_CASES = [
    # P divides the image, and not (an uncovered border on the right and the bottom)
    (ConvDgradPatchSpec(c=3, p=4, tile_h=2, tile_w=2, r_blk=4, k_chunk=16), (1, 8, 8, 20)),
    (ConvDgradPatchSpec(c=3, p=4, tile_h=2, tile_w=4, r_blk=4, k_chunk=16), (2, 11, 13, 37)),
    (ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=2, r_blk=7, k_chunk=16), (1, 30, 29, 9)),
    (ConvDgradPatchSpec(c=4, p=16, tile_h=2, tile_w=2, r_blk=1, k_chunk=16), (1, 35, 17, 18)),
]


@pytest.mark.parametrize("spec,shape", PATCH_CASES, ids=[s.kernel_name for s, _ in PATCH_CASES])
def test_conv_dgrad_patch_fma_ir_is_numerically_right(spec, shape):
    n, h, w, kk = shape
    rng = np.random.default_rng(2)
    hp, wp = h // spec.p, w // spec.p
    dy = _rand(rng, (n, hp, wp, kk))
    wt = _rand(rng, (kk, spec.p, spec.p, spec.c))
    dx = np.full((n, h, w, spec.c), np.nan, np.float16)  # NaN: an element never written shows
    k = lower("conv_dgrad_patch", spec, "sm_90", "llvm22")
    CpuGrid(k).launch(spec.grid(n, h, w), dy, wt, dx, n, h, w, kk)
    ref = patch_dgrad_ref(dy, wt, h, w)
    np.testing.assert_allclose(dx.astype(np.float64), ref, rtol=2e-2, atol=2e-2)
    if h % spec.p or w % spec.p:
        assert (dx[:, hp * spec.p:] == 0).all() and (dx[:, :, wp * spec.p:] == 0).all()


# -- the matrix paths: AMDGPU IR on the host, each mfma/wmma through the numpy layout model ------

MMA_FWD = [
    ("gfx942", ConvDirectFwdSpec(c=16, k=32, tile_h=4, tile_w=8, tile_k=32, c_chunk=16, path="mfma"), (1, 6, 9)),
    ("gfx950", ConvDirectFwdSpec(c=32, k=32, r=3, s=3, stride_h=2, stride_w=2, tile_h=4, tile_w=8,
                                 tile_k=32, c_chunk=16, path="mfma"), (1, 9, 13)),
    ("gfx1250", ConvDirectFwdSpec(c=32, k=48, tile_h=2, tile_w=8, tile_k=16, c_chunk=32, path="wmma"), (2, 5, 7)),
]


@pytest.mark.parametrize("arch,spec,shape", MMA_FWD, ids=[f"{a}-{s.path}" for a, s, _ in MMA_FWD])
def test_conv_direct_fwd_mma_ir_is_numerically_right(arch, spec, shape):
    n, h, w = shape
    rng = np.random.default_rng(3)
    x = _rand(rng, (n, h, w, spec.c))
    wt = _rand(rng, (spec.k, spec.r, spec.s, spec.c))
    oh, ow = spec.out_hw(h, w)
    y = np.full((n, oh, ow, spec.k), np.nan, np.float16)
    k = lower("conv_direct_fwd", spec, arch, "llvm22")
    from rocke_aot.aot.targets import Target

    CpuGrid(k, Target.parse(arch).wave_size).launch(spec.grid(n, h, w), x, wt, y, n, h, w)
    np.testing.assert_allclose(y.astype(np.float64), conv_fwd_ref(x.astype(np.float64), wt, spec),
                               rtol=2e-2, atol=3e-2)


MMA_PATCH = [
    ("gfx942", ConvDgradPatchSpec(c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=16, path="mfma"), (1, 37, 20, 19)),
    ("gfx950", ConvDgradPatchSpec(c=3, p=4, tile_h=4, tile_w=8, r_blk=4, k_chunk=16, path="mfma"), (1, 13, 10, 40)),
    ("gfx1250", ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32, path="wmma"),
     (1, 31, 29, 33)),
]


@pytest.mark.parametrize("arch,spec,shape", MMA_PATCH, ids=[f"{a}-{s.path}-p{s.p}" for a, s, _ in MMA_PATCH])
def test_conv_dgrad_patch_mma_ir_is_numerically_right(arch, spec, shape):
    n, h, w, kk = shape
    rng = np.random.default_rng(4)
    dy = _rand(rng, (n, h // spec.p, w // spec.p, kk))
    wt = _rand(rng, (kk, spec.p, spec.p, spec.c))
    dx = np.full((n, h, w, spec.c), np.nan, np.float16)
    k = lower("conv_dgrad_patch", spec, arch, "llvm22")
    from rocke_aot.aot.targets import Target

    CpuGrid(k, Target.parse(arch).wave_size).launch(spec.grid(n, h, w), dy, wt, dx, n, h, w, kk)
    np.testing.assert_allclose(dx.astype(np.float64), patch_dgrad_ref(dy, wt, h, w), rtol=2e-2, atol=3e-2)


def _bf16(rng, shape):
    bits = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


BF16_CASES = [
    ("sm_90", ConvDirectFwdSpec(dtype="bf16", c=8, k=16, tile_h=2, tile_w=4, tile_k=16, c_chunk=8)),
    ("gfx942", ConvDirectFwdSpec(dtype="bf16", c=16, k=32, tile_h=4, tile_w=8, tile_k=32, c_chunk=16,
                                 path="mfma")),
    ("gfx1250", ConvDirectFwdSpec(dtype="bf16", c=32, k=16, tile_h=2, tile_w=8, tile_k=16, c_chunk=32,
                                  path="wmma")),
]


@pytest.mark.parametrize("arch,spec", BF16_CASES, ids=[f"{a}-{s.path}" for a, s in BF16_CASES])
def test_conv_direct_fwd_bf16_ir_is_numerically_right(arch, spec):
    from rocke_aot.aot.targets import Target

    n, h, w = 1, 5, 9
    rng = np.random.default_rng(5)
    x_bits, x = _bf16(rng, (n, h, w, spec.c))
    w_bits, wt = _bf16(rng, (spec.k, spec.r, spec.s, spec.c))
    oh, ow = spec.out_hw(h, w)
    y = np.full((n, oh, ow, spec.k), 0xFFFF, np.uint16)
    k = lower("conv_direct_fwd", spec, arch, "llvm22")
    CpuGrid(k, Target.parse(arch).wave_size).launch(spec.grid(n, h, w), x_bits, w_bits, y, n, h, w)
    got = (y.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    np.testing.assert_allclose(got, conv_fwd_ref(x, wt, spec), rtol=2**-7, atol=2e-2)


# -- the GPU test's kernels, dry-run here (slow: a few minutes of Python threads) -------------

def _gpu_test_specs(fam: str) -> list:
    from test_conv_gpu import FWD_SPECS, PATCH_SPECS  # the exact selection tests/test_conv_gpu.py runs

    return FWD_SPECS if fam == "conv_direct_fwd" else PATCH_SPECS


@pytest.mark.slow
@pytest.mark.parametrize("fam", ["conv_direct_fwd", "conv_dgrad_patch"])
def test_the_gpu_tests_kernels_on_the_cpu(fam):
    rng = np.random.default_rng(6)
    for spec in _gpu_test_specs(fam):
        k = lower(fam, spec, "sm_90", "llvm22")
        if spec.dtype == "f16":
            mk = lambda shape: (lambda v: (v.view(np.uint16), v.astype(np.float64)))(_rand(rng, shape))  # noqa: E731
        else:
            mk = lambda shape: _bf16(rng, shape)  # noqa: E731
        if fam == "conv_direct_fwd":
            n, h, w = 1, 9, 11
            (xb, x), (wb, wt) = mk((n, h, w, spec.c)), mk((spec.k, spec.r, spec.s, spec.c))
            oh, ow = spec.out_hw(h, w)
            out = np.full((n, oh, ow, spec.k), 0xFFFF, np.uint16)
            CpuGrid(k).launch(spec.grid(n, h, w), xb, wb, out, n, h, w)
            want = conv_fwd_ref(x, wt, spec)
        else:
            p, kk = spec.p, 37
            n, h, w = 1, 2 * p + 3, 2 * p - 1
            (db, dy), (wb, wt) = mk((n, h // p, w // p, kk)), mk((kk, p, p, spec.c))
            out = np.full((n, h, w, spec.c), 0xFFFF, np.uint16)
            CpuGrid(k).launch(spec.grid(n, h, w), db, wb, out, n, h, w, kk)
            want = patch_dgrad_ref(dy, wt, h, w)
        got = (out.view(np.float16).astype(np.float64) if spec.dtype == "f16"
               else (out.astype(np.uint32) << 16).view(np.float32).astype(np.float64))
        rtol = 2.0**-10 if spec.dtype == "f16" else 2.0**-7
        np.testing.assert_allclose(got, want, rtol=rtol, atol=2e-2, err_msg=spec.kernel_name)
