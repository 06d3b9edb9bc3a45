"""Both conv families' sm_90 paths (fma, mma.sync) on a real NVIDIA GPU against torch (``gpu``).

    specs from the sm_90 variant table (two per baked layer and path: the first and the last
    of the grid, so small and large tiles of both paths run)
        -> lower(fam, spec, "sm_90", "llvm22") -> NVPTX -> PTX -> ptxas -arch=sm_90 -> cubin
        -> cuda.bindings.driver (cuModuleLoadData, cuLaunchKernel; grid, block and arguments
           from the kernel's launch contract)
        -> compared with torch on the CPU in float64 on the exact same f16 / bf16 inputs:
           conv_direct_fwd   torch.nn.functional.conv2d
           conv_dgrad_patch  torch.nn.grad.conv2d_input (the autograd of conv2d's input),
                             on images P divides and images it does not (zeroed border)

Run on the GPU machine:  bash scripts/gpu-tests.sh tests/test_conv_gpu.py
The CUDA helpers (module image with the ptxas fallbacks, driver error check, context
fixture, launch) live in tests/_cuda.py, shared with tests/test_gemm_gpu.py; everything
CUDA and torch is imported inside the tests, so collecting this file needs neither a GPU
nor torch.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cuda import cuda_ctx, decode, inputs, launch, module_image  # noqa: F401  (shared CUDA helpers)

from rocke_aot.aot.lower import lower
from rocke_aot.variants import table
from rocke_aot.variants.problems import ConvProblem, PatchDgradProblem

pytestmark = pytest.mark.gpu


def _two_per_layer(fam: str) -> list:
    # per baked layer AND path, so both the fma and the mma (mma.sync) kernels run
    by_layer: dict = {}
    for spec in table.enumerate_specs(fam, "sm_90", "llvm22"):
        by_layer.setdefault((tuple(sorted(spec.baked().items())), spec.path), []).append(spec)
    out = []
    for specs in by_layer.values():
        out += [specs[0]] + ([specs[-1]] if len(specs) > 1 else [])
    return out


FWD_SPECS = _two_per_layer("conv_direct_fwd")
PATCH_SPECS = _two_per_layer("conv_dgrad_patch")


def _tolerance(dtype: str, terms: int) -> tuple[float, float]:
    # f32 accumulation of exact 16-bit products; the 16-bit output adds half an ulp
    # (2^-11 relative for f16, 2^-8 for bf16): rtol is twice that.
    return (2.0**-10, 1e-6 * terms + 1e-3) if dtype == "f16" else (2.0**-7, 1e-6 * terms + 1e-2)


def _compare(got: np.ndarray, want: np.ndarray, dtype: str, terms: int, what: str) -> None:
    assert np.isfinite(got).all(), f"{what}: unwritten or non-finite outputs"
    rtol, atol = _tolerance(dtype, terms)
    bad = np.abs(got - want) > rtol * np.abs(want) + atol
    print(f"{what}: max abs err {np.abs(got - want).max():.3g}, {int(bad.sum())} outside tolerance")
    assert not bad.any(), f"{what}: {int(bad.sum())} elements outside rtol={rtol}, atol={atol}"


def _fwd_shapes(spec) -> list[tuple[int, int, int]]:
    # odd sizes: partial tiles in both directions, and a batch > 1
    return [(2, 17, 23), (1, 31, 29), (3, 7, 9)]


@pytest.mark.parametrize("spec", FWD_SPECS, ids=[s.kernel_name for s in FWD_SPECS])
def test_sm90_conv_direct_fwd_matches_torch(cuda_ctx, spec):  # noqa: F811
    import torch

    k = lower("conv_direct_fwd", spec, "sm_90", "llvm22")
    image, kind = module_image(k.ir)
    for n, h, w in _fwd_shapes(spec):
        rng = np.random.default_rng(n * 10007 + h * 101 + w)
        x_bits, x = inputs(spec.dtype, (n, h, w, spec.c), rng)
        w_bits, wt = inputs(spec.dtype, (spec.k, spec.r, spec.s, spec.c), rng)
        oh, ow = spec.out_hw(h, w)
        out = np.full((n, oh, ow, spec.k), 0xFFFF, dtype=np.uint16)  # NaN: unwritten shows
        launch(image, k.launch, ConvProblem(n=n, h=h, w=w, **spec.baked()), {"X": x_bits, "Wt": w_bits, "Y": out})
        want = torch.nn.functional.conv2d(
            torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(wt).permute(0, 3, 1, 2),
            stride=(spec.stride_h, spec.stride_w), padding=(spec.pad_h, spec.pad_w),
            dilation=(spec.dil_h, spec.dil_w)).permute(0, 2, 3, 1).numpy()
        _compare(decode(out, spec.dtype), want, spec.dtype, spec.r * spec.s * spec.c,
                 f"{k.kernel_name} [{kind}] N={n} H={h} W={w}")


def _patch_shapes(p: int) -> list[tuple[int, int, int, int]]:
    # (N, H, W, K): P divides the image; P divides neither side (border on the right and the
    # bottom); a K that is not a multiple of any k_chunk
    return [(2, 7 * p, 5 * p, 96), (2, 7 * p + 3, 5 * p + p - 1, 768), (1, 3 * p + 1, 2 * p, 37)]


@pytest.mark.parametrize("spec", PATCH_SPECS, ids=[s.kernel_name for s in PATCH_SPECS])
def test_sm90_conv_dgrad_patch_matches_torch(cuda_ctx, spec):  # noqa: F811
    import torch

    k = lower("conv_dgrad_patch", spec, "sm_90", "llvm22")
    image, kind = module_image(k.ir)
    p = spec.p
    for n, h, w, kk in _patch_shapes(p):
        rng = np.random.default_rng(n * 10007 + h * 101 + w + kk)
        hp, wp = h // p, w // p
        dy_bits, dy = inputs(spec.dtype, (n, hp, wp, kk), rng)
        w_bits, wt = inputs(spec.dtype, (kk, p, p, spec.c), rng)
        out = np.full((n, h, w, spec.c), 0xFFFF, dtype=np.uint16)
        launch(image, k.launch, PatchDgradProblem(n=n, h=h, w=w, c=spec.c, k=kk, p=p, dtype=spec.dtype),
               {"dY": dy_bits, "Wt": w_bits, "dX": out})
        want = torch.nn.grad.conv2d_input(
            (n, spec.c, h, w), torch.from_numpy(wt).permute(0, 3, 1, 2),
            torch.from_numpy(dy).permute(0, 3, 1, 2), stride=p).permute(0, 2, 3, 1).numpy()
        got = decode(out, spec.dtype)
        _compare(got, want, spec.dtype, kk, f"{k.kernel_name} [{kind}] N={n} H={h} W={w} K={kk}")
        if h % p or w % p:
            assert (got[:, hp * p:] == 0).all() and (got[:, :, wp * p:] == 0).all(), "border not zeroed"
