"""The sm_90 fma gemm on a real NVIDIA GPU against numpy (marked ``gpu``: deselected by default).

    lower("gemm", spec, "sm_90", "llvm22") -> compile_llvmlite (NVPTX -> PTX -> ptxas) -> cubin
        -> cuda.bindings.driver: cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel, with grid,
           block and arguments from the kernel's launch contract (tests/_cuda.py launch)
        -> C compared with a float64 numpy product of the exact same (f16 / bf16) inputs

Run on the GPU machine:  python -m pytest -m gpu tests/test_gemm_gpu.py -q
ptxas is located like the compiler does (ROCKE_AOT_PTXAS, PATH, /usr/local/cuda); where
there is none, the test uses the ptxas that the triton wheel (torch's dependency) carries,
and failing that loads the PTX itself (the driver JIT-compiles it for the device).
The CUDA helpers live in tests/_cuda.py; everything CUDA is imported inside them, so
collecting this file needs no GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from _cuda import cuda_ctx, decode, inputs, launch, module_image  # noqa: F401  (shared CUDA helpers)

from rocke_aot.aot.lower import lower
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.variants.problems import GemmProblem

pytestmark = pytest.mark.gpu

SIZES = [(1, 1, 1), (127, 129, 65), (1000, 1000, 1000)]
SPECS = [
    GemmSpec(path="fma", in_dtype="f16", out_dtype="f32"),
    GemmSpec(path="fma", in_dtype="bf16", out_dtype="f32", double_buffer=True, vector_width=8),
    GemmSpec(path="fma", in_dtype="f16", out_dtype="f16", block_m=128, block_n=64, block_k=16,
             waves=8, vector_width=2),
    GemmSpec(path="fma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=32, waves=1,
             vector_width=1, double_buffer=True),
]


def _run(spec: GemmSpec, m: int, n: int, k: int, image: bytes, contract) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k)
    a_bits, a = inputs(spec.in_dtype, (m, k), rng)
    b_bits, b = inputs(spec.in_dtype, (k, n), rng)
    out_bytes = {"f32": 4, "f16": 2, "bf16": 2}[spec.out_dtype]
    out = np.full(m * n * out_bytes, 0xFF, dtype=np.uint8)  # NaN-filled: unwritten elements fail

    launch(image, contract, GemmProblem(m, n, k, dtype=spec.in_dtype, out_dtype=spec.out_dtype),
           {"A": a_bits, "B": b_bits, "C": out})
    got = decode(out.view({4: np.uint32, 2: np.uint16}[out_bytes]).reshape(m, n), spec.out_dtype)
    return got, a @ b


@pytest.mark.parametrize("spec", SPECS, ids=[s.kernel_name for s in SPECS])
def test_sm90_fma_gemm_matches_numpy(cuda_ctx, spec):  # noqa: F811
    k = lower("gemm", spec, "sm_90", "llvm22")
    image, kind = module_image(k.ir)
    for m, n, kk in SIZES:
        got, want = _run(spec, m, n, kk, image, k.launch)
        assert np.isfinite(got).all(), f"{m}x{n}x{kk}: unwritten or non-finite outputs"
        # f32 accumulation of exact products (16-bit x 16-bit fits in f32): the sum carries
        # ~K * 2^-24 relative error at worst; a 16-bit output adds one rounding of the result
        # (half an ulp: 2^-11 relative for f16, 2^-8 for bf16), so rtol is twice that.
        rtol, atol = {"f32": (1e-5, 1e-6 * kk), "f16": (2.0**-10, 1e-6 * kk + 1e-4),
                      "bf16": (2.0**-7, 1e-6 * kk + 1e-3)}[spec.out_dtype]
        bad = np.abs(got - want) > rtol * np.abs(want) + atol
        err = np.abs(got - want).max()
        print(f"{k.kernel_name} [{kind}] {m}x{n}x{kk}: max abs err {err:.3g}, {int(bad.sum())} outside tolerance")
        assert not bad.any(), f"{m}x{n}x{kk}: {int(bad.sum())} elements outside rtol={rtol}, atol={atol}"
