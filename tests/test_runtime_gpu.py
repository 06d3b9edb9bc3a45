"""The runner's GPU runtimes on a real device (rocke_aot/runner/runtime.py), every path the
benchmarks take: load, launch, chunking, timing and errors. ``gpu``-marked: CI has no GPU; the CPU
half of the same paths runs through a fake driver (tests/test_runtime_fake_driver.py).

    CudaRuntime (sm_90, cuda.bindings.driver)
        load       a hand-written PTX (the driver JITs it) and the same PTX as a cubin (ptxas):
                   function(), alloc/upload/launch/download; y = 3 x + n checked against numpy
        launch     PackedArgs: one buffer, kernelParams[i] pointing at argument i (the packing the
                   runner uses for every family)
        chunking   runner/run.py run_problem on a project gemm cubin whose contract's byte limit
                   is cut to force 3 launches along M: verified against the float64 reference
                   (runner/reference.py), chunks == 3; and unchunked, the same numbers
        timing     hold(1 ms) timed by the runtime's own events: 0.9 .. 5 ms (%globaltimer spin)
        dynamic shared memory  a kernel with 64 KiB of extern shared memory launches after
                   allow_dynamic_shared and fails (GpuError) without it
        errors     a non-image, an unknown function, a block over 1024 threads, an allocation
                   past the device's memory: GpuError naming the driver call and its CUresult;
                   the context stays usable after each
    HipRuntime on this (NVIDIA) machine: RuntimeUnavailable naming HIP, never a traceback; its
        calls are exercised through the fake driver on CPU.

Run on the GPU machine: bash scripts/gpu-tests.sh -q (this file is one of its tests/*_gpu.py).
"""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import tempfile

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

_AXPB = """.version 7.0
.target sm_70
.address_size 64
.visible .entry axpb(.param .u64 x, .param .u64 y, .param .u32 n)
{
    .reg .u32 %r<6>;
    .reg .u64 %rd<8>;
    .reg .f32 %f<4>;
    .reg .pred %p;
    ld.param.u64 %rd1, [x];
    ld.param.u64 %rd2, [y];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.u32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p, %r5, %r1;
    @%p bra $Ldone;
    mul.wide.u32 %rd3, %r5, 4;
    add.u64 %rd4, %rd1, %rd3;
    add.u64 %rd5, %rd2, %rd3;
    ld.global.f32 %f1, [%rd4];
    cvt.rn.f32.u32 %f2, %r1;
    fma.rn.f32 %f3, %f1, 0f40400000, %f2;
    st.global.f32 [%rd5], %f3;
$Ldone:
    ret;
}
"""

_SHARED = """.version 7.0
.target sm_70
.address_size 64
.extern .shared .align 16 .b8 dyn[];
.visible .entry touch(.param .u64 out, .param .u32 nbytes)
{
    .reg .u32 %r<4>;
    .reg .u64 %rd<3>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [nbytes];
    sub.u32 %r2, %r1, 4;
    mov.u32 %r3, dyn;
    add.u32 %r3, %r3, %r2;
    st.shared.u32 [%r3], %r1;
    bar.sync 0;
    ld.shared.u32 %r2, [%r3];
    st.global.u32 [%rd1], %r2;
    ret;
}
"""


@pytest.fixture(scope="module")
def rt():
    from rocke_aot.runner.runtime import CudaRuntime

    return CudaRuntime()


def _cubin(ptx: str) -> bytes:
    from rocke_aot.aot.compiler.ptx import find_ptxas

    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        subprocess.run([find_ptxas(), "-arch=sm_90", src, "-o", out], check=True, capture_output=True)
        with open(out, "rb") as f:
            return f.read()


def _axpb(rt, image: bytes, n: int) -> np.ndarray:
    from rocke_aot.runner.runtime import PackedArgs

    module = rt.load(image)
    try:
        fn = rt.function(module, "axpb")
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        dx, dy = rt.alloc(x.nbytes), rt.alloc(x.nbytes)
        try:
            rt.upload(dx, x)
            rt.upload(dy, np.full(n, np.nan, np.float32))
            rt.launch(fn, (-(-n // 128), 1, 1), (128, 1, 1), PackedArgs(struct.pack("<QQI", dx, dy, n), (0, 8, 16)))
            rt.synchronize()
            y = np.empty(n, np.float32)
            rt.download(dy, y)
        finally:
            rt.free(dx)
            rt.free(dy)
        want = (x.astype(np.float64) * 3 + n).astype(np.float32)
        np.testing.assert_allclose(y, want, rtol=1e-6)
        return y
    finally:
        rt.unload(module)


def test_cuda_runtime_loads_ptx_and_cubin_and_launches_packed_args(rt):
    assert rt.device_name()  # e.g. "NVIDIA H200"
    by_jit = _axpb(rt, _AXPB.encode(), 1000)
    by_cubin = _axpb(rt, _cubin(_AXPB), 1000)
    assert (by_jit == by_cubin).all()
    _axpb(rt, _AXPB.encode(), 1)  # one thread of a 128-thread block: the guard holds


def test_cuda_runtime_runs_a_project_gemm_chunked_and_whole(rt):
    from _cuda import module_image

    from rocke_aot.aot.lower import lower
    from rocke_aot.families.gemm.spec import GemmSpec
    from rocke_aot.runner.run import LoadedKernel, run_problem
    from rocke_aot.variants.problems import GemmProblem

    spec = GemmSpec(path="fma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=1,
                    vector_width=4)
    k = lower("gemm", spec, "sm_90", "llvm22")
    image, how = module_image(k.ir)
    assert how.startswith("cubin"), how
    p = GemmProblem(m=70, n=24, k=96, dtype="f16")  # B (96 x 24) fits the cut limit
    results = {}
    for label, limit in (("whole", None), ("chunked", 32 * 96 * 2)):  # A of 32 rows: 32, 32 and 6 rows
        contract = k.launch if limit is None else dataclasses.replace(k.launch, max_tensor_bytes=limit)
        cand = LoadedKernel(label, k.kernel_name, image, contract, rank=0)
        r = run_problem(rt, "gemm", p, [cand], warmup=1, reps=3, vendor=False).results[0]
        assert r.verified and r.error is None, (label, r.error)
        assert r.max_rel_err is not None and r.max_rel_err <= 1
        assert r.median_ms is not None and r.median_ms > 0
        results[label] = r
    assert (results["whole"].chunks, results["chunked"].chunks) == (1, 3)


def test_cuda_runtime_times_its_hold_with_its_events(rt):
    hold = rt.hold()
    times = rt.time(lambda: hold(1.0), warmup=1, reps=5, warmup_ms=0)
    assert len(times) == 5
    assert all(0.9 <= t <= 5.0 for t in times), times  # a 1 ms spin on %globaltimer, measured by events


def test_cuda_runtime_dynamic_shared_memory_needs_the_attribute(rt):
    from rocke_aot.runner.runtime import GpuError, PackedArgs

    module = rt.load(_SHARED.encode())
    fn = rt.function(module, "touch")
    out = rt.alloc(4)
    nbytes = 64 * 1024
    args = PackedArgs(struct.pack("<QI", out, nbytes), (0, 8))
    try:
        with pytest.raises(GpuError, match=r"^cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE$"):
            rt.launch(fn, (1, 1, 1), (32, 1, 1), args, nbytes)  # over 48 KiB without the attribute
        rt.allow_dynamic_shared(fn, nbytes)
        rt.launch(fn, (1, 1, 1), (32, 1, 1), args, nbytes)
        rt.synchronize()
        got = np.zeros(1, np.uint32)
        rt.download(out, got)
        assert got[0] == nbytes  # the last word of the 64 KiB window was written and read back
    finally:
        rt.free(out)
        rt.unload(module)


def test_cuda_runtime_errors_name_the_call_and_keep_the_context(rt):
    from rocke_aot.runner.runtime import GpuError, PackedArgs

    with pytest.raises(GpuError, match=r"^cuModuleLoadData failed: CUDA_ERROR_INVALID_(IMAGE|PTX)$"):
        rt.load(b"not a code object")
    module = rt.load(_AXPB.encode())
    try:
        with pytest.raises(GpuError, match=r"^cuModuleGetFunction\(nope\) failed: CUDA_ERROR_NOT_FOUND$"):
            rt.function(module, "nope")
        fn = rt.function(module, "axpb")
        with pytest.raises(GpuError, match=r"^cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE$"):
            rt.launch(fn, (1, 1, 1), (2048, 1, 1), PackedArgs(struct.pack("<QQI", 0, 0, 0), (0, 8, 16)))
    finally:
        rt.unload(module)
    with pytest.raises(GpuError, match=r"^cuMemAlloc\(1125899906842624\) failed: CUDA_ERROR_OUT_OF_MEMORY$"):
        rt.alloc(1 << 50)
    _axpb(rt, _AXPB.encode(), 257)  # none of the above left the context unusable


def test_hip_runtime_on_an_nvidia_machine_is_a_named_unavailable():
    from rocke_aot.errors import RuntimeUnavailable
    from rocke_aot.runner.runtime import HipRuntime, open_runtime
    from rocke_aot.targets import Target

    with pytest.raises(RuntimeUnavailable, match=r"^HIP runtime unavailable: "):
        HipRuntime()
    with pytest.raises(RuntimeUnavailable, match=r"^HIP runtime unavailable: "):
        open_runtime(Target.parse("gfx942"))
    assert open_runtime(Target.parse("sm_90")).name == "cuda"
