"""The conv lowerings' IR (sm_90 fma and mma; gfx942/gfx950 mfma, gfx1250 wmma) run on this host's CPU vs numpy.

No GPU is needed: the exact IR the NVPTX path compiles (same lowering, same index
algebra, same guards, same barriers) is retargeted to the host and JIT-compiled with
llvmlite; every thread of a block is a real OS thread, ``tid.x``/``ctaid.x`` read
per-thread values and the CTA barrier is a ``threading.Barrier``, so LDS staging races
would show up as wrong numbers. Only the triple, datalayout, address spaces, the
target attributes and the id/barrier intrinsics change; tests/test_conv_gpu.py runs
the sm_90 IR on a real H200.

The matrix paths run the same way: each mfma/wmma/mma.sync call becomes a per-wave
rendezvous where the wave's operand registers go through the instruction's reference in
tests/_isa_ref.py (written from the vendor documents, importing nothing of rocke_aot;
tests/test_mma_layouts.py pins rocke_aot/mma.py's maps to it). So these tests prove the
conv index maps, register packing, LDS staging, guards and epilogues of every path, and
test_a_perturbed_operand_map_fails_the_conv_simulation shows a wrong map is caught. That
the reference matches the silicon is a GPU run's job (sm_90: tests/test_conv_gpu.py).
Tolerances are derived from the dtypes and the reduction length (error_bound below). The simulator (CpuGrid) is tests/_host_sim.py, shared with
tests/test_gemm_emulated.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cuda import decode
from _host_sim import CpuGrid

from rocke_aot.aot.lower import lower
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.targets import Target

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


# -- the tolerance, derived (replaces a flat rtol 2e-2) ---------------------------------------
# Each output is s = sum of `terms` products x*w of 16-bit inputs, accumulated in f32, then
# rounded to the 16-bit output type. The reference `ref` is the same sum in float64 of the
# same 16-bit values (exact to ~2^-53, negligible here), and `absref` the sum of |x*w|.
#  1. A product of two f16 (11-bit significands) or two bf16 (8-bit) values is exact in f32
#     (24 bits), so the only f32 error is the accumulation: summing n terms in ANY order
#     (fma chains, tree sums, the simulator's matrix instruction rounding a float64 partial
#     sum once per instruction -- fewer roundings) errs by at most gamma_n * sum|x*w| with
#     gamma_n = n*u / (1 - n*u), u = 2^-24 (Higham, Accuracy and Stability of Numerical
#     Algorithms, 2nd ed., eq. 3.5 / Lemma 3.1).
#  2. Rounding the f32 sum s to the output type to nearest adds at most u_out * |s| with
#     u_out = 2^-11 (f16), 2^-8 (bf16), where s is normal, and at most half the subnormal
#     spacing below that: 2^-25 for f16 (bf16 has f32's exponent range: 2^-134, negligible).
#     |s| <= |ref| + gamma_n * absref.
# Together: |out - ref| <= gamma_n*absref + u_out*(|ref| + gamma_n*absref) + 2^-25.
# For f16 outputs of C*R*S = 576 terms this is about 2^-11 |ref| + 3.5e-5 * absref: 20x
# tighter than the old rtol 2e-2 for large outputs, and a bound, not a guess.
U_F32 = 2.0**-24
U_OUT = {"f16": 2.0**-11, "bf16": 2.0**-8}


def error_bound(ref: np.ndarray, absref: np.ndarray, terms: int, out_dtype: str) -> np.ndarray:
    gamma = terms * U_F32 / (1 - terms * U_F32)
    u = U_OUT[out_dtype]
    return gamma * absref + u * (np.abs(ref) + gamma * absref) + 2.0**-25


def assert_within_bound(got, ref, absref, terms, out_dtype, what="") -> None:
    bound = error_bound(ref, absref, terms, out_dtype)
    err = np.abs(got - ref)
    bad = ~(err <= bound)  # NaN (an unwritten element) is bad
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements beyond the derived bound "
                           f"(worst err/bound {np.nanmax(err / bound):.3g}, K={terms}, {out_dtype})")


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


def _grid(kernel, **problem) -> int:
    """Blocks to launch: the kernel's own launch contract evaluated on the problem (1-D)."""
    return kernel.launch.plan(problem).grid[0]


def _run_fwd(arch: str, spec, shape: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the kernel's f16 output as float64, the numpy reference, the reference of |x|, |w|)."""
    n, h, w = shape
    rng = np.random.default_rng(seed)
    x = _rand(rng, (n, h, w, spec.c))
    wt = _rand(rng, (spec.k, spec.r, spec.s, spec.c))
    oh, ow = spec.out_hw(h, w)
    y = np.full((n, oh, ow, spec.k), np.nan, np.float16)  # NaN: an element never written shows
    k = lower("conv_direct_fwd", spec, arch, "llvm22")
    CpuGrid(k, Target.parse(arch).wave_size).launch(_grid(k, n=n, h=h, w=w), x, wt, y, n, h, w)
    xf = x.astype(np.float64)
    return y.astype(np.float64), conv_fwd_ref(xf, wt, spec), conv_fwd_ref(np.abs(xf), np.abs(wt), spec)


def _fwd_terms(spec) -> int:
    return spec.r * spec.s * spec.c


def _run_patch(arch: str, spec, shape: tuple, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the kernel's f16 dX as float64, the numpy reference, the reference of |dY|, |w|)."""
    n, h, w, kk = shape
    rng = np.random.default_rng(seed)
    dy = _rand(rng, (n, h // spec.p, w // spec.p, kk))
    wt = _rand(rng, (kk, spec.p, spec.p, spec.c))
    dx = np.full((n, h, w, spec.c), np.nan, np.float16)  # NaN: an element never written shows
    k = lower("conv_dgrad_patch", spec, arch, "llvm22")
    CpuGrid(k, Target.parse(arch).wave_size).launch(_grid(k, n=n, h=h, w=w, k=kk), dy, wt, dx, n, h, w, kk)
    return (dx.astype(np.float64), patch_dgrad_ref(dy, wt, h, w),
            patch_dgrad_ref(np.abs(dy.astype(np.float64)), np.abs(wt.astype(np.float64)), h, w))


@pytest.mark.parametrize("spec,shape", FWD_CASES, ids=[s.kernel_name for s, _ in FWD_CASES])
def test_conv_direct_fwd_fma_ir_is_numerically_right(spec, shape):
    got, ref, absref = _run_fwd("sm_90", spec, shape, seed=1)
    assert_within_bound(got, ref, absref, _fwd_terms(spec), "f16", spec.kernel_name)


PATCH_CASES = [
    # P divides the image, and not (an uncovered border on the right and the bottom)
    (ConvDgradPatchSpec(c=3, p=4, tile_h=2, tile_w=2, r_blk=4, k_chunk=16), (1, 8, 8, 20)),
    (ConvDgradPatchSpec(c=3, p=4, tile_h=2, tile_w=4, r_blk=4, k_chunk=16), (2, 11, 13, 37)),
    (ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=2, r_blk=7, k_chunk=16), (1, 30, 29, 9)),
    (ConvDgradPatchSpec(c=4, p=16, tile_h=2, tile_w=2, r_blk=1, k_chunk=16), (1, 35, 17, 18)),
]


@pytest.mark.parametrize("spec,shape", PATCH_CASES, ids=[s.kernel_name for s, _ in PATCH_CASES])
def test_conv_dgrad_patch_fma_ir_is_numerically_right(spec, shape):
    dx, ref, absref = _run_patch("sm_90", spec, shape, seed=2)
    assert_within_bound(dx, ref, absref, shape[3], "f16", spec.kernel_name)
    _, h, w, _ = shape
    hp, wp = h // spec.p, w // spec.p
    if h % spec.p or w % spec.p:
        assert (dx[:, hp * spec.p:] == 0).all() and (dx[:, :, wp * spec.p:] == 0).all()


# -- the matrix paths: IR on the host, each mfma/wmma/mma.sync through tests/_isa_ref.py ----------

MMA_FWD = [
    ("sm_90", ConvDirectFwdSpec(c=16, k=32, tile_h=4, tile_w=8, tile_k=32, c_chunk=16, path="mma"), (1, 6, 9)),
    ("sm_90", ConvDirectFwdSpec(c=32, k=24, r=3, s=3, stride_h=2, stride_w=2, tile_h=2, tile_w=8,
                                tile_k=16, c_chunk=32, path="mma"), (2, 7, 11)),
    ("gfx942", ConvDirectFwdSpec(c=16, k=32, tile_h=4, tile_w=8, tile_k=32, c_chunk=16, path="mfma"), (1, 6, 9)),
    ("gfx950", ConvDirectFwdSpec(c=32, k=32, r=3, s=3, stride_h=2, stride_w=2, tile_h=4, tile_w=8,
                                 tile_k=32, c_chunk=16, path="mfma"), (1, 9, 13)),
    ("gfx1250", ConvDirectFwdSpec(c=32, k=48, tile_h=2, tile_w=8, tile_k=16, c_chunk=32, path="wmma"), (2, 5, 7)),
    # The AMD main loop (issue 37, _conv_ir.amd_chunks): images large enough that some blocks'
    # input halo lies inside (the unchecked interior loop, two or more C chunks: the next chunk's
    # loads issued ahead) and others touch the padding (the checked edge loop); K not a multiple
    # of tile_k (the last K tile's weight rows past K clamped), stride and dilation
    ("gfx942", ConvDirectFwdSpec(c=32, k=32, tile_h=2, tile_w=8, tile_k=32, c_chunk=16, path="mfma"), (1, 6, 18)),
    ("gfx950", ConvDirectFwdSpec(c=32, k=32, r=3, s=3, stride_h=2, stride_w=2, pad_h=2, pad_w=2, dil_h=2, dil_w=2,
                                 tile_h=4, tile_w=8, tile_k=32, c_chunk=16, path="mfma"), (1, 21, 37)),
    ("gfx1250", ConvDirectFwdSpec(c=64, k=24, tile_h=2, tile_w=8, tile_k=16, c_chunk=32, path="wmma"), (1, 8, 20)),
    # gfx1250 reads a filter row's taps (S of them) behind one wait (taps_per_wait): R != S,
    # stride, dilation and padding through the grouped taps, both loops, a K tail
    ("gfx1250", ConvDirectFwdSpec(c=64, k=24, r=3, s=2, stride_h=2, stride_w=1, pad_h=2, pad_w=1, dil_h=2, dil_w=2,
                                  tile_h=2, tile_w=8, tile_k=16, c_chunk=32, path="wmma"), (1, 13, 27)),
    # 4 C chunks: the carried chunk bases advanced twice, the last prefetch clamped
    ("gfx1250", ConvDirectFwdSpec(c=128, k=16, tile_h=2, tile_w=8, tile_k=16, c_chunk=32, path="wmma"), (1, 6, 18)),
    ("gfx90a", ConvDirectFwdSpec(c=16, k=32, r=1, s=1, pad_h=0, pad_w=0, tile_h=4, tile_w=8, tile_k=32, c_chunk=8,
                                 path="mfma"), (1, 7, 9)),
    # the served gfx9 tile (t8x16x64 cc8): its 9 unrolled taps read A at one base address plus each
    # tap's constant offset (spec.lds_a_index, the fifth conv step); 4 C chunks, the centre block's
    # halo inside (the interior loop, the peeled chunk), the others on the padding
    ("gfx942", ConvDirectFwdSpec(c=32, k=64, tile_h=8, tile_w=16, tile_k=64, c_chunk=8, path="mfma"), (1, 18, 34)),
    ("gfx950", ConvDirectFwdSpec(c=16, k=64, r=3, s=3, stride_h=2, stride_w=1, pad_h=2, pad_w=2, dil_h=2, dil_w=2,
                                 tile_h=8, tile_w=16, tile_k=64, c_chunk=8, path="mfma"), (1, 40, 36)),
]


@pytest.mark.parametrize("arch,spec,shape", MMA_FWD, ids=[f"{a}-{s.path}" for a, s, _ in MMA_FWD])
def test_conv_direct_fwd_mma_ir_is_numerically_right(arch, spec, shape):
    got, ref, absref = _run_fwd(arch, spec, shape, seed=3)
    assert_within_bound(got, ref, absref, _fwd_terms(spec), "f16", spec.kernel_name)


MMA_PATCH = [
    ("sm_90", ConvDgradPatchSpec(c=3, p=16, tile_h=2, tile_w=8, r_blk=1, k_chunk=16, path="mma"), (1, 35, 20, 19)),
    ("sm_90", ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32, path="mma"), (1, 31, 29, 33)),
    ("gfx942", ConvDgradPatchSpec(c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=16, path="mfma"), (1, 37, 20, 19)),
    ("gfx950", ConvDgradPatchSpec(c=3, p=4, tile_h=4, tile_w=8, r_blk=4, k_chunk=16, path="mfma"), (1, 13, 10, 40)),
    ("gfx1250", ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32, path="wmma"),
     (1, 31, 29, 33)),
    # B transposed in LDS (ConvDgradPatchSpec.lds_b_transposed, issue 37): padded columns, a K
    # tail (45 = 2 x 16 + 13, 19 = 16 + 3) and border pixels
    ("gfx942", ConvDgradPatchSpec(c=4, p=14, tile_h=4, tile_w=8, r_blk=7, k_chunk=16, path="mfma"), (1, 31, 43, 45)),
    ("gfx950", ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=8, r_blk=14, k_chunk=16, path="mfma"), (1, 30, 29, 19)),
    # every size transposed (issue 37, third conv step): the served p14c4 r14 kc32 (25088 staged B
    # elements, [k_chunk][cols] before) with two interior chunks and a K tail (77 = 2 x 32 + 13), and
    # gfx1250's wmma B transposed (its K-runs of 8), a K tail (45 = 32 + 13), gfx90a's mfma
    ("gfx942", ConvDgradPatchSpec(c=4, p=14, tile_h=4, tile_w=4, r_blk=14, k_chunk=32, path="mfma"), (1, 31, 43, 77)),
    ("gfx1250", ConvDgradPatchSpec(c=4, p=14, tile_h=2, tile_w=8, r_blk=14, k_chunk=32, path="wmma"), (1, 29, 30, 45)),
    ("gfx90a", ConvDgradPatchSpec(c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=32, path="mfma"), (1, 35, 50, 109)),
    # gfx9 peels the last whole chunk (_conv_ir.amd_chunks): K 109 above = 3 whole chunks + 13 (the
    # interior loop twice, the peeled chunk, the tail); K 13 < k_chunk: no whole chunk, the edge alone
    ("gfx942", ConvDgradPatchSpec(c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=32, path="mfma"), (1, 35, 20, 13)),
    # gfx1250's interior loop carries each operand's chunk base, advanced while a chunk is left to
    # load: K 109 = 3 whole chunks (two advances, the last load clamped) + 13
    ("gfx1250", ConvDgradPatchSpec(c=3, p=16, tile_h=2, tile_w=8, r_blk=2, k_chunk=32, path="wmma"), (1, 35, 20, 109)),
    # ViT-L/14's gfx9 pick (the fifth conv step's served row, k_chunk 32; its 4-byte B loads, P*C = 42):
    # K 77 = 2 whole chunks (the interior loop once, the peeled chunk) + 13, border pixels
    ("gfx942", ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32, path="mfma"), (1, 31, 43, 77)),
    # the sixth conv step: p14c3 r7's weights in 8-byte vectors of the aligned grid (spec.w_vector:
    # the r0 = 7 blocks start 2 elements into a vector, staged into B's 2 slack columns); gfx1250's
    # served wmma twin (K 33 above: one whole chunk) with its carried chunk bases, K 77 = 2 whole chunks + 13
    ("gfx1250", ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32, path="wmma"), (1, 31, 43, 77)),
]


@pytest.mark.parametrize("arch,spec,shape", MMA_PATCH, ids=[f"{a}-{s.path}-p{s.p}" for a, s, _ in MMA_PATCH])
def test_conv_dgrad_patch_mma_ir_is_numerically_right(arch, spec, shape):
    dx, ref, absref = _run_patch(arch, spec, shape, seed=4)
    assert_within_bound(dx, ref, absref, shape[3], "f16", spec.kernel_name)


def _bf16(rng, shape):
    bits = (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


BF16_CASES = [
    ("sm_90", ConvDirectFwdSpec(dtype="bf16", c=8, k=16, tile_h=2, tile_w=4, tile_k=16, c_chunk=8)),
    ("sm_90", ConvDirectFwdSpec(dtype="bf16", c=16, k=16, tile_h=2, tile_w=8, tile_k=16, c_chunk=16,
                                path="mma")),
    ("gfx942", ConvDirectFwdSpec(dtype="bf16", c=16, k=32, tile_h=4, tile_w=8, tile_k=32, c_chunk=16,
                                 path="mfma")),
    ("gfx1250", ConvDirectFwdSpec(dtype="bf16", c=32, k=16, tile_h=2, tile_w=8, tile_k=16, c_chunk=32,
                                  path="wmma")),
]


@pytest.mark.parametrize("arch,spec", BF16_CASES, ids=[f"{a}-{s.path}" for a, s in BF16_CASES])
def test_conv_direct_fwd_bf16_ir_is_numerically_right(arch, spec):
    n, h, w = 1, 5, 9
    rng = np.random.default_rng(5)
    x_bits, x = _bf16(rng, (n, h, w, spec.c))
    w_bits, wt = _bf16(rng, (spec.k, spec.r, spec.s, spec.c))
    oh, ow = spec.out_hw(h, w)
    y = np.full((n, oh, ow, spec.k), 0xFFFF, np.uint16)
    k = lower("conv_direct_fwd", spec, arch, "llvm22")
    CpuGrid(k, Target.parse(arch).wave_size).launch(_grid(k, n=n, h=h, w=w), x_bits, w_bits, y, n, h, w)
    got = decode(y, "bf16")
    assert_within_bound(got, conv_fwd_ref(x, wt, spec), conv_fwd_ref(np.abs(x), np.abs(wt), spec),
                        _fwd_terms(spec), "bf16", spec.kernel_name)


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
            CpuGrid(k).launch(_grid(k, n=n, h=h, w=w), xb, wb, out, n, h, w)
            want, absref, terms = conv_fwd_ref(x, wt, spec), conv_fwd_ref(np.abs(x), np.abs(wt), spec), _fwd_terms(spec)
        else:
            p, kk = spec.p, 37
            n, h, w = 1, 2 * p + 3, 2 * p - 1
            (db, dy), (wb, wt) = mk((n, h // p, w // p, kk)), mk((kk, p, p, spec.c))
            out = np.full((n, h, w, spec.c), 0xFFFF, np.uint16)
            CpuGrid(k).launch(_grid(k, n=n, h=h, w=w, k=kk), db, wb, out, n, h, w, kk)
            want, absref, terms = patch_dgrad_ref(dy, wt, h, w), patch_dgrad_ref(np.abs(dy), np.abs(wt), h, w), kk
        assert_within_bound(decode(out, spec.dtype), want, absref, terms, spec.dtype, spec.kernel_name)


# -- the simulator can fail: one operand's map perturbed in the lowering alone ------------------

@pytest.mark.parametrize("mutation", ["a_k", "d_rows"])
@pytest.mark.parametrize("arch,spec,shape", [MMA_FWD[0], MMA_FWD[2]], ids=["sm_90-mma", "gfx942-mfma"])
def test_a_perturbed_operand_map_fails_the_conv_simulation(monkeypatch, arch, spec, shape, mutation):
    # The conv tile GEMM with A's K order (not B's) or D's rows rotated in the lowering's maps
    # (test_gemm_emulated.Mutant): the simulator's instruction reference does not read those
    # maps, so the derived bound must be broken.
    from test_gemm_emulated import mutate

    key = spec.geometry(Target.parse(arch)).instr
    mutate(monkeypatch, key, mutation)
    got, ref, absref = _run_fwd(arch, spec, shape, seed=3)
    with pytest.raises(AssertionError, match="beyond the derived bound"):
        assert_within_bound(got, ref, absref, _fwd_terms(spec), "f16", spec.kernel_name)
