"""The sm_90 tensor-core gemm (path ``mma``: mma.sync m16n8k16) on a real NVIDIA GPU (``gpu``).

    every mma spec of the sm_90 variant table (llvm22 lane; f16 -> f32, f16 -> f16, bf16 -> bf16)
        -> lower("gemm", spec, "sm_90", "llvm22") -> NVPTX -> PTX -> ptxas -> cubin
           (compiled up front on all cores: the module fixture below)
        -> cuda.bindings.driver launch on ragged problems through the kernel's launch contract
           (tests/_cuda.py launch), C poisoned (all bits set: NaN)
        -> compared elementwise with a float64 numpy product of the exact same inputs

Run on the GPU machine:  bash scripts/gpu-tests.sh tests/test_gemm_mma_gpu.py
The speed comparison (mma vs fma vs torch.matmul) is scripts/bench_gemm_gpu.py.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from _cuda import cuda_ctx, decode, inputs, launch, module_image  # noqa: F401  (shared CUDA helpers)

from rocke_aot.aot.lower import lower
from rocke_aot.variants import table
from rocke_aot.variants.problems import GemmProblem

# 1x1x1 (one partial tile, one partial K step), odd sizes below one block's worth of
# tiles in every direction, and a problem past 1000 with no dimension a multiple of 16.
SIZES = [(1, 1, 1), (127, 129, 65), (1031, 1000, 1043)]
# The asynchronous pipeline (stages >= 2) needs K and N multiples of 8 (16-byte rows; selection
# refuses other problems, the kernel traps): the same shapes with K and N rounded up to 8.
# (300, 264, 40): a K below one K-tile of block_k 64 and below the pipeline's depth (the main
# loop's copies past K zero-fill), M and N off every tile.
ALIGNED_SIZES = [(1, 8, 8), (127, 136, 72), (300, 264, 40), (1031, 1000, 1048)]
SPECS = [s for s in table.enumerate_specs("gemm", "sm_90", "llvm22") if s.path == "mma"]


@pytest.fixture(scope="module")
def images():
    """kernel name -> (image, how it was made, launch contract), compiled in parallel."""
    def build(spec):
        k = lower("gemm", spec, "sm_90", "llvm22")
        image, kind = module_image(k.ir)
        return k.kernel_name, (image, kind, k.launch)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as ex:
        return dict(ex.map(build, SPECS))


_REFS: dict = {}


def _problem(dtype: str, m: int, n: int, k: int):
    """(A bits, B bits, float64 A x B), drawn once per (dtype, size) and shared by the specs."""
    key = (dtype, m, n, k)
    if key not in _REFS:
        rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k + (dtype == "bf16"))
        a_bits, a = inputs(dtype, (m, k), rng)
        b_bits, b = inputs(dtype, (k, n), rng)
        _REFS[key] = (a_bits, b_bits, a @ b)
    return _REFS[key]


def tolerance(out_dtype: str, k: int) -> tuple[float, float]:
    # Products of two 16-bit values are exact in f32; the sum of K of them in f32 carries at
    # most about K * 2^-24 of sum |a||b| (<= K * 2^-24 * K here, |a|, |b| <= 1), bounded
    # by 1e-6 * K for the K used; a 16-bit output adds half an ulp of the result (2^-11
    # relative for f16, 2^-8 for bf16), so rtol is twice that. As tests/test_gemm_gpu.py.
    return {"f32": (1e-5, 1e-6 * k), "f16": (2.0**-10, 1e-6 * k + 1e-4),
            "bf16": (2.0**-7, 1e-6 * k + 1e-3)}[out_dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", SPECS, ids=[s.kernel_name for s in SPECS])
def test_sm90_mma_gemm_matches_numpy(cuda_ctx, images, spec):  # noqa: F811
    image, kind, contract = images[spec.kernel_name]
    for m, n, k in ALIGNED_SIZES if spec.stages else SIZES:
        a_bits, b_bits, want = _problem(spec.in_dtype, m, n, k)
        nbytes = {"f32": 4, "f16": 2, "bf16": 2}[spec.out_dtype]
        out = np.full(m * n * nbytes, 0xFF, dtype=np.uint8)  # poisoned: an unwritten element is NaN
        problem = GemmProblem(m, n, k, dtype=spec.in_dtype, out_dtype=spec.out_dtype)
        tensors = {"A": a_bits, "B": b_bits, "C": out}
        if spec.split_k > 1:  # launched twice on one workspace: the same bits, the counters back at 0
            tiles = contract.plan(problem).grid[0] // spec.split_k
            tensors["W"] = work = np.zeros(tiles * spec.workspace_words_per_tile, dtype=np.uint32)
            launch(image, contract, problem, tensors)
            first = out.copy()
            assert not work[-tiles:].any(), f"{m}x{n}x{k}: a split-K launch left a tile counter non-zero"
            out[:] = 0xFF
        launch(image, contract, problem, tensors)
        if spec.split_k > 1:
            assert (out == first).all(), f"{m}x{n}x{k}: split-K results differ between two launches"
        got = decode(out.view({4: np.uint32, 2: np.uint16}[nbytes]).reshape(m, n), spec.out_dtype)
        assert np.isfinite(got).all(), f"{m}x{n}x{k}: unwritten or non-finite outputs"
        rtol, atol = tolerance(spec.out_dtype, k)
        bad = np.abs(got - want) > rtol * np.abs(want) + atol
        print(f"{spec.kernel_name} [{kind}] {m}x{n}x{k}: max abs err {np.abs(got - want).max():.3g}, "
              f"{int(bad.sum())} outside tolerance")
        assert not bad.any(), f"{m}x{n}x{k}: {int(bad.sum())} elements outside rtol={rtol}, atol={atol}"


def test_the_table_serves_mma_for_both_dtypes():
    # what the GPU test above iterates (this one runs everywhere): a table change that drops a
    # dtype or the mma path must not pass silently
    assert {(s.in_dtype, s.out_dtype) for s in SPECS} == {("f16", "f32"), ("f16", "f16"), ("bf16", "bf16")}
    # the asynchronous pipeline's 2-byte outputs are all stored by quads in the table (the pair
    # fallback, an odd number of n-tiles a warp, runs in tests/test_gemm_emulated.py)
    from rocke_aot.families.gemm.spec import quad_stores
    from rocke_aot.targets import Target
    sm90 = Target.parse("sm_90")
    assert {quad_stores(s, s.geometry(sm90)) for s in SPECS if s.stages and s.out_dtype != "f32"} == {True}
