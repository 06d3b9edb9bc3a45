"""The sm_90 fma gemm on a real NVIDIA GPU against numpy (marked ``gpu``: deselected by default).

    lower("gemm", spec, "sm_90", "llvm22") -> compile_llvmlite (NVPTX -> PTX -> ptxas) -> cubin
        -> cuda.bindings.driver: cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel
        -> C compared with a float64 numpy product of the exact same (f16 / bf16) inputs

Run on the GPU machine:  python -m pytest -m gpu tests/test_gemm_gpu.py -q
ptxas is located like the compiler does (ROCKE_AOT_PTXAS, PATH, /usr/local/cuda); where
there is none, the test uses the ptxas that the triton wheel (torch's dependency) carries,
and failing that loads the PTX itself (the driver JIT-compiles it for the device).
Everything CUDA is imported inside the tests, so collecting this file needs no GPU.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from rocke_aot.aot.families.gemm import grid
from rocke_aot.aot.lower import lower
from rocke_aot.variants.gemm import GemmSpec

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


def _ptxas_from_triton() -> str | None:
    try:
        import triton  # noqa: F401  (only to find its bundled ptxas)
    except Exception:
        return None
    path = os.path.join(os.path.dirname(sys.modules["triton"].__file__), "backends", "nvidia", "bin", "ptxas")
    return path if os.access(path, os.X_OK) else None


def _ptx_in_process(ir_text: str) -> str:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    tm = llvm.Target.from_triple("nvptx64-nvidia-cuda").create_target_machine(
        cpu="sm_90", features="+ptx80", opt=3)
    mod = llvm.parse_assembly(ir_text)
    mod.verify()
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)


def _module_image(ir_text: str) -> tuple[bytes, str]:
    """(image for cuModuleLoadData, how it was made).

    The project's compiler (isolated worker: O3 + NVPTX -> PTX -> ptxas -> cubin) when it and
    a ptxas are available; otherwise the same O3 + NVPTX steps in-process, then a ptxas if
    one can be found, else the PTX itself (the driver JIT-compiles it for the device).
    """
    import shutil
    import subprocess
    import tempfile

    ptxas = os.environ.get("ROCKE_AOT_PTXAS") or shutil.which("ptxas") or _ptxas_from_triton()
    if ptxas:
        os.environ.setdefault("ROCKE_AOT_PTXAS", ptxas)
    try:
        from rocke_aot.aot.compiler import compile_llvmlite
        from rocke_aot.errors import ToolchainError

        try:
            return compile_llvmlite(sys.executable, ir_text, "sm_90").code_object, "cubin (rocke-aot compiler)"
        except ToolchainError:
            pass
    except ImportError:  # a GPU box without the project's optional dependencies
        pass
    ptx = _ptx_in_process(ir_text)
    if ptxas:
        with tempfile.TemporaryDirectory() as tmp:
            src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
            with open(src, "w") as f:
                f.write(ptx)
            subprocess.run([ptxas, "-arch=sm_90", "-O3", src, "-o", out], check=True)
            with open(out, "rb") as f:
                return f.read(), f"cubin ({ptxas})"
    return ptx.encode() + b"\0", "ptx (driver JIT)"


def _check(res):
    from cuda.bindings import driver as cu

    err = res[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err}")
    return res[1] if len(res) == 2 else res[1:]


@pytest.fixture(scope="module")
def cuda_ctx():
    from cuda.bindings import driver as cu

    _check(cu.cuInit(0))
    dev = _check(cu.cuDeviceGet(0))
    ctx = _check(cu.cuDevicePrimaryCtxRetain(dev))
    _check(cu.cuCtxSetCurrent(ctx))
    yield ctx
    _check(cu.cuDevicePrimaryCtxRelease(dev))


def _inputs(dtype: str, shape: tuple[int, int], rng) -> tuple[np.ndarray, np.ndarray]:
    """(16-bit storage, exact float64 values) for f16 or bf16 inputs."""
    x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float64)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncate to bf16: exactly representable
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _decode(out: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f32":
        return out.view(np.float32).astype(np.float64)
    if dtype == "f16":
        return out.view(np.float16).astype(np.float64)
    return (out.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _run(spec: GemmSpec, m: int, n: int, k: int, image: bytes, name: str, threads: int) -> tuple[np.ndarray, np.ndarray]:
    from cuda.bindings import driver as cu

    rng = np.random.default_rng(m * 1_000_003 + n * 1009 + k)
    a_bits, a = _inputs(spec.in_dtype, (m, k), rng)
    b_bits, b = _inputs(spec.in_dtype, (k, n), rng)
    out_bytes = {"f32": 4, "f16": 2, "bf16": 2}[spec.out_dtype]
    out = np.full(m * n * out_bytes, 0xFF, dtype=np.uint8)  # NaN-filled: unwritten elements fail

    img = np.frombuffer(image, dtype=np.uint8)
    module = _check(cu.cuModuleLoadData(img.ctypes.data))
    try:
        fn = _check(cu.cuModuleGetFunction(module, name.encode()))
        bufs = []
        try:
            for host in (a_bits, b_bits, out):
                d = _check(cu.cuMemAlloc(max(host.nbytes, 1)))
                bufs.append(d)
                _check(cu.cuMemcpyHtoD(d, host.ctypes.data, host.nbytes))
            holders = [np.array([int(d)], dtype=np.uint64) for d in bufs]
            holders += [np.array([v], dtype=np.int32) for v in (m, n, k)]
            params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
            gx, _, _ = grid(spec, m, n)
            _check(cu.cuLaunchKernel(fn, gx, 1, 1, threads, 1, 1, 0, 0, params.ctypes.data, 0))
            _check(cu.cuCtxSynchronize())
            _check(cu.cuMemcpyDtoH(out.ctypes.data, bufs[2], out.nbytes))
        finally:
            for d in bufs:
                cu.cuMemFree(d)
    finally:
        cu.cuModuleUnload(module)
    got = _decode(out.view({4: np.uint32, 2: np.uint16}[out_bytes]).reshape(m, n), spec.out_dtype)
    return got, a @ b


@pytest.mark.parametrize("spec", SPECS, ids=[s.kernel_name for s in SPECS])
def test_sm90_fma_gemm_matches_numpy(cuda_ctx, spec):
    k = lower("gemm", spec, "sm_90", "llvm22")
    image, kind = _module_image(k.ir)
    for m, n, kk in SIZES:
        got, want = _run(spec, m, n, kk, image, k.kernel_name, k.block_size)
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
