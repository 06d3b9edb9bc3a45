"""The conv lowerings' sm_90 IR, executed on this host's CPU against a numpy reference.

No GPU is needed: the exact IR the NVPTX path compiles (same lowering, same index
algebra, same guards, same barriers) is retargeted to the host and JIT-compiled with
llvmlite; every thread of a block is a real OS thread, ``tid.x``/``ctaid.x`` read
per-thread values and the CTA barrier is a ``threading.Barrier``, so LDS staging races
would show up as wrong numbers. Only the triple, datalayout, address spaces and the
three NVVM intrinsics change; tests/test_conv_gpu.py runs the same IR on a real H200.
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


class CpuGrid:
    """Run a lowered sm_90 kernel on the CPU, block after block, T threads per block."""

    _lock = threading.Lock()

    def __init__(self, kernel):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        text = kernel.ir
        text = re.sub(r'target triple = "[^"]*"', f'target triple = "{llvm.get_process_triple()}"', text)
        text = re.sub(r'target datalayout = "[^"]*"\n', "", text)
        text = text.replace(" addrspace(1)", "").replace(" addrspace(3)", "").replace("ptx_kernel ", "")
        text = text.replace('@"llvm.nvvm.read.ptx.sreg.tid.x"', '@"sim_tid"')
        text = text.replace('@"llvm.nvvm.read.ptx.sreg.ctaid.x"', '@"sim_ctaid"')
        text = text.replace('@"llvm.nvvm.barrier.cta.sync.aligned.all"', '@"sim_barrier"')
        assert "llvm.nvvm" not in text, "an NVVM intrinsic the simulator does not model"
        self.threads = kernel.block_size
        self.local = threading.local()
        self.barrier = threading.Barrier(self.threads)
        # Keep the callbacks alive as long as the engine.
        self._cbs = [
            ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: self.local.tid),
            ctypes.CFUNCTYPE(ctypes.c_int32)(lambda: self.local.ctaid),
            ctypes.CFUNCTYPE(None, ctypes.c_int32)(lambda _id: self.barrier.wait()),
        ]
        for name, cb in zip(("sim_tid", "sim_ctaid", "sim_barrier"), self._cbs):
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
        self.nargs = len(kernel.kernargs)
        self.kinds = [a.kind for a in kernel.kernargs]

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
                self.barrier.abort()
                between.abort()

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
