"""CUDA helpers the ``gpu`` tests share (tests/test_gemm_gpu.py, tests/test_conv_gpu.py).

    module_image(ir)           -> (cubin or PTX bytes, how it was made)
        the project's compiler (isolated worker: O3 + NVPTX -> PTX -> ptxas -> cubin) when it
        and a ptxas are available; else the same steps in-process plus any ptxas (PATH,
        ROCKE_AOT_PTXAS, the one in the triton wheel); else the PTX (the driver JITs it)
    cuda_ctx                   module fixture: the device's primary context, current
    launch(image, contract, problem, tensors)
                               the kernel's launch contract (rocke_aot/launch.py: an artifact's
                               metadata["launch"] or LoweredKernel.launch) evaluated on the
                               problem gives grid, block and every argument in order: pointers
                               are tensors[name] (uploaded; written ones read back), scalars
                               the contract's values. No per-family launch code here.
    inputs(dtype, shape, rng)  -> (16-bit storage, its exact float64 values), f16 / bf16
    decode(bits, dtype)        -> float64 values of f32 / f16 / bf16 storage
    check(res)                 a cuda.bindings result tuple -> its value, or RuntimeError

Import with ``from _cuda import ...``. Everything CUDA is imported inside the functions, so
collecting the tests needs no GPU.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest


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


def module_image(ir_text: str) -> tuple[bytes, str]:
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


def check(res):
    from cuda.bindings import driver as cu

    err = res[0]
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err}")
    return res[1] if len(res) == 2 else res[1:]


@pytest.fixture(scope="module")
def cuda_ctx():
    from cuda.bindings import driver as cu

    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    yield ctx
    check(cu.cuDevicePrimaryCtxRelease(dev))


_SCALAR_NP = {"i32": np.int32, "u32": np.uint32, "i64": np.int64}


def launch(image: bytes, contract, problem, tensors: dict[str, np.ndarray]):
    """Run the contract's kernel of ``image`` on ``problem``; returns the evaluated LaunchPlan.

    ``tensors`` maps each pointer argument's name to a host array at least as large as the
    contract says; arguments the kernel writes (access other than read_only) are copied
    back into their arrays. A "workspace" argument (rocke_aot/launch.py) left out of ``tensors``
    gets a zero-filled buffer of its own; one given is uploaded as is (zeros, per the contract)
    and read back, so a test can check the kernel left it zeroed. A zero grid launches nothing.
    """
    from cuda.bindings import driver as cu

    from rocke_aot.launch import LaunchContract

    if not isinstance(contract, LaunchContract):  # a dict, or a stored record's frozen mapping
        contract = LaunchContract.from_dict(contract)
    plan = contract.plan(problem)
    if plan.over_limit:
        raise ValueError(f"{contract.kernel}: {plan.over_limit} exceed {plan.max_tensor_bytes} bytes: chunk the problem")
    img = np.frombuffer(image, dtype=np.uint8)
    module = check(cu.cuModuleLoadData(img.ctypes.data))
    bufs, holders, written = [], [], []
    try:
        fn = check(cu.cuModuleGetFunction(module, contract.kernel.encode()))
        for arg, laid in zip(plan.args, contract.args, strict=True):
            if arg.kind == "scalar":
                holders.append(np.array([arg.value], dtype=_SCALAR_NP[arg.dtype]))
                continue
            host = tensors.get(arg.name)
            if host is None and laid.access == "workspace":  # launch.py: zero-filled by the runner
                host = np.zeros(arg.nbytes, dtype=np.uint8)
            if host is None:
                raise KeyError(f"{contract.kernel}: no tensor for pointer argument {arg.name}")
            if host.nbytes < arg.nbytes:
                raise ValueError(f"{arg.name}: {host.nbytes} bytes given, the launch needs {arg.nbytes}")
            d = check(cu.cuMemAlloc(max(host.nbytes, 1)))
            bufs.append(d)
            check(cu.cuMemcpyHtoD(d, host.ctypes.data, host.nbytes))
            holders.append(np.array([int(d)], dtype=np.uint64))
            if laid.access != "read_only":
                written.append((host, d))
        params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
        if contract.dynamic_shared_bytes > 48 * 1024:  # past 48 KiB a kernel must opt in (as the runner does)
            attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            check(cu.cuFuncSetAttribute(fn, attr, int(contract.dynamic_shared_bytes)))
        if not plan.empty:
            check(cu.cuLaunchKernel(fn, *plan.grid, *plan.block, contract.dynamic_shared_bytes, 0,
                                    params.ctypes.data, 0))
        check(cu.cuCtxSynchronize())
        for host, d in written:
            check(cu.cuMemcpyDtoH(host.ctypes.data, d, host.nbytes))
    finally:
        for d in bufs:
            cu.cuMemFree(d)
        cu.cuModuleUnload(module)
    return plan


def inputs(dtype: str, shape: tuple, rng) -> tuple[np.ndarray, np.ndarray]:
    """(16-bit storage, exact float64 values) for f16 or bf16 data."""
    x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16), h.astype(np.float64)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16: exactly representable
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def decode(bits: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values of f32 (uint32 storage), f16 or bf16 (uint16 storage)."""
    if dtype == "f32":
        return bits.view(np.float32).astype(np.float64)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
