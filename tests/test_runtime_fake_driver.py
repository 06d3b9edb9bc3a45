"""The runner's CUDA and HIP runtimes (rocke_aot/runner/runtime.py) on CPU, through fake drivers put
where the runtimes import theirs (``cuda.bindings.driver``, hip-python's ``hip.hip``): every call a
runtime makes, with the drivers' calling conventions as their documentation states them, so these
hold on any machine, GPU or not (the real drivers: tests/test_runtime_gpu.py, ``gpu``).

    the fake device   host memory (ctypes buffers: a device pointer is an address), modules found by
                      their PTX ``.entry`` names, two kernels: axpb (y[i] = 3 x[i] + n for i < n),
                      rocke_hold (the CUDA runtime's hold: sleeps its u64 nanoseconds); a launch reads
                      kernelParams as both drivers do: one pointer per argument, the value copied from
                      it with the size the kernel declares (8, 8, 4); a block over 1024 threads, or
                      dynamic shared memory over 48 KiB without the function attribute (CUDA), is
                      INVALID_VALUE; events are host clock readings
    checked           y against numpy; the packed buffer's values as the kernel saw them; each driver
                      error -> GpuError naming the call and the error's name; each missing piece
                      (no binding, no driver library, a failing init, no device) -> RuntimeUnavailable
                      naming the runtime, never a traceback
"""

from __future__ import annotations

import ctypes
import enum
import re
import struct
import sys
import time
import types

import numpy as np
import pytest

from rocke_aot.errors import RuntimeUnavailable
from rocke_aot.runner.runtime import CudaRuntime, GpuError, HipRuntime, PackedArgs, open_runtime
from rocke_aot.targets import Target

_AXPB = b".visible .entry axpb(.param .u64 x, .param .u64 y, .param .u32 n) { ret; }\0"
_PARAMS = {"axpb": (8, 8, 4), "rocke_hold": (8,)}


class _Device:
    """What both fakes share: memory, modules, launches, events."""

    def __init__(self, devices=1):
        self.devices, self.bufs, self.launched, self.attrs, self.slept = devices, {}, [], {}, []

    def alloc(self, n):
        if n > 1 << 40:
            return None
        buf = ctypes.create_string_buffer(n)
        self.bufs[ctypes.addressof(buf)] = buf
        return ctypes.addressof(buf)

    def load(self, ptr):
        text = ctypes.string_at(ptr).decode("latin-1")
        names = re.findall(r"\.entry\s+(\w+)\s*\(", text)
        return {"entries": names} if names else None

    def launch(self, fn, grid, block, shared, params):
        if block[0] * block[1] * block[2] > 1024:
            return False
        if shared > 48 * 1024 and self.attrs.get(fn["name"], 0) < shared:
            return False
        sizes = _PARAMS[fn["name"]]
        slots = (ctypes.c_void_p * len(sizes)).from_address(params)
        values = [ctypes.string_at(slots[i], size) for i, size in enumerate(sizes)]
        self.launched.append((fn["name"], grid, block, shared, values))
        if fn["name"] == "rocke_hold":
            self.slept.append(struct.unpack("<Q", values[0])[0])
            time.sleep(self.slept[-1] / 1e9)
            return True
        x, y = (struct.unpack("<Q", v)[0] for v in values[:2])
        n = struct.unpack("<I", values[2])[0]
        threads = grid[0] * grid[1] * grid[2] * block[0] * block[1] * block[2]
        count = min(n, threads)
        xs = np.frombuffer((ctypes.c_float * count).from_address(x), np.float32)
        ys = np.frombuffer((ctypes.c_float * count).from_address(y), np.float32)
        ys[:] = (xs.astype(np.float64) * 3 + n).astype(np.float32)
        return True


def _fake_cuda(dev: _Device, *, init=0, missing_library=False):
    class CUresult(enum.Enum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_OUT_OF_MEMORY = 2
        CUDA_ERROR_NO_DEVICE = 100
        CUDA_ERROR_INVALID_IMAGE = 200
        CUDA_ERROR_NOT_FOUND = 500

    ok = CUresult.CUDA_SUCCESS
    cu = types.SimpleNamespace(CUresult=CUresult)
    cu.CUfunction_attribute = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dyn")

    def cuInit(flags):
        if missing_library:
            raise RuntimeError("Failed to dlopen libcuda.so.1")
        return (CUresult(init),)

    cu.cuInit = cuInit
    cu.cuDeviceGetCount = lambda: (ok, dev.devices)
    cu.cuDeviceGet = lambda i: (ok, f"dev{i}")
    cu.cuDevicePrimaryCtxRetain = lambda d: (ok, f"ctx-{d}")
    cu.cuCtxSetCurrent = lambda c: (ok,)
    cu.cuDeviceGetName = lambda n, d: (ok, b"Fake H200\0\0\0")
    cu.cuModuleLoadData = lambda p: (ok, m) if (m := dev.load(p)) else (CUresult.CUDA_ERROR_INVALID_IMAGE, None)
    cu.cuModuleGetFunction = lambda m, name: ((ok, {"name": name.decode()}) if name.decode() in m["entries"]
                                              else (CUresult.CUDA_ERROR_NOT_FOUND, None))
    cu.cuModuleUnload = lambda m: (ok,)
    cu.cuMemAlloc = lambda n: (ok, p) if (p := dev.alloc(n)) else (CUresult.CUDA_ERROR_OUT_OF_MEMORY, 0)
    cu.cuMemFree = lambda p: (ok,) if dev.bufs.pop(p, None) is not None else (CUresult.CUDA_ERROR_INVALID_VALUE,)
    cu.cuMemcpyHtoD = lambda d, s, n: (ctypes.memmove(d, s, n), (ok,))[1]
    cu.cuMemcpyDtoH = lambda d, s, n: (ctypes.memmove(d, s, n), (ok,))[1]
    cu.cuCtxSynchronize = lambda: (ok,)

    def cuFuncSetAttribute(fn, attr, value):
        assert attr == "max_dyn"
        dev.attrs[fn["name"]] = value
        return (ok,)

    cu.cuFuncSetAttribute = cuFuncSetAttribute

    def cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert stream == 0 and extra == 0
        return (ok,) if dev.launch(fn, (gx, gy, gz), (bx, by, bz), shared, params) else \
            (CUresult.CUDA_ERROR_INVALID_VALUE,)

    cu.cuLaunchKernel = cuLaunchKernel
    cu.cuEventCreate = lambda flags: (ok, [None])
    cu.cuEventRecord = lambda ev, stream: (ev.__setitem__(0, time.perf_counter()), (ok,))[1]
    cu.cuEventSynchronize = lambda ev: (ok,)
    cu.cuEventElapsedTime = lambda a, b: (ok, (b[0] - a[0]) * 1e3)
    cu.cuEventDestroy = lambda ev: (ok,)
    return cu


def _fake_hip(dev: _Device, *, init=0, missing_library=False):
    class hipError_t(enum.IntEnum):  # hip-python's enums print as numbers (IntEnum)
        hipSuccess = 0
        hipErrorInvalidValue = 1
        hipErrorOutOfMemory = 2
        hipErrorInvalidImage = 200
        hipErrorNotFound = 500

    ok = hipError_t.hipSuccess
    hip = types.SimpleNamespace(hipError_t=hipError_t)

    def hipInit(flags):
        if missing_library:
            raise RuntimeError("libamdhip64.so: cannot open shared object file")
        return (hipError_t(init),)

    hip.hipInit = hipInit
    hip.hipGetDeviceCount = lambda: (ok, dev.devices)
    hip.hipSetDevice = lambda i: (ok,)
    hip.hipGetDeviceProperties = lambda i: (ok, types.SimpleNamespace(name=b"Fake MI300X", gcnArchName=b"gfx942"))
    hip.hipModuleLoadData = lambda p: (ok, m) if (m := dev.load(p)) else (hipError_t.hipErrorInvalidImage, None)
    hip.hipModuleGetFunction = lambda m, name: ((ok, {"name": name.decode()}) if name.decode() in m["entries"]
                                                else (hipError_t.hipErrorNotFound, None))
    hip.hipModuleUnload = lambda m: (ok,)
    hip.hipMalloc = lambda n: (ok, p) if (p := dev.alloc(n)) else (hipError_t.hipErrorOutOfMemory, 0)
    hip.hipFree = lambda p: (ok,)
    hip.hipMemcpyHtoD = lambda d, s, n: (ctypes.memmove(d, s, n), (ok,))[1]
    hip.hipMemcpyDtoH = lambda d, s, n: (ctypes.memmove(d, s, n), (ok,))[1]
    hip.hipDeviceSynchronize = lambda: (ok,)

    def hipModuleLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        assert stream is None and extra is None
        return (ok,) if dev.launch(fn, (gx, gy, gz), (bx, by, bz), shared, params) else \
            (hipError_t.hipErrorInvalidValue,)

    hip.hipModuleLaunchKernel = hipModuleLaunchKernel
    hip.hipEventCreate = lambda: (ok, [None])
    hip.hipEventRecord = lambda ev, stream: (ev.__setitem__(0, time.perf_counter()), (ok,))[1]
    hip.hipEventSynchronize = lambda ev: (ok,)
    hip.hipEventElapsedTime = lambda a, b: (ok, (b[0] - a[0]) * 1e3)
    hip.hipEventDestroy = lambda ev: (ok,)
    return hip


def _install(monkeypatch, kind: str, fake) -> None:
    """Put ``fake`` where the runtime imports its driver from (None: the binding is not installed)."""
    if kind == "cuda":
        pkg = None if fake is None else types.SimpleNamespace(driver=fake)
        monkeypatch.setitem(sys.modules, "cuda", None if fake is None else types.ModuleType("cuda"))
        monkeypatch.setitem(sys.modules, "cuda.bindings", pkg)
        monkeypatch.setitem(sys.modules, "cuda.bindings.driver", fake)
    else:
        monkeypatch.setitem(sys.modules, "hip", None if fake is None else types.SimpleNamespace(hip=fake))
        monkeypatch.setitem(sys.modules, "hip.hip", fake)


RUNTIMES = {"cuda": (CudaRuntime, _fake_cuda, "sm_90"), "hip": (HipRuntime, _fake_hip, "gfx942")}
NAMES = {"cuda": {"load": "cuModuleLoadData", "fn": "cuModuleGetFunction", "launch": "cuLaunchKernel",
                  "alloc": "cuMemAlloc", "invalid": "CUDA_ERROR_INVALID_VALUE", "image": "CUDA_ERROR_INVALID_IMAGE",
                  "missing": "CUDA_ERROR_NOT_FOUND", "oom": "CUDA_ERROR_OUT_OF_MEMORY"},
         "hip": {"load": "hipModuleLoadData", "fn": "hipModuleGetFunction", "launch": "hipModuleLaunchKernel",
                 "alloc": "hipMalloc", "invalid": "hipErrorInvalidValue", "image": "hipErrorInvalidImage",
                 "missing": "hipErrorNotFound", "oom": "hipErrorOutOfMemory"}}


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_load_launch_read_back_through_the_driver_calls(monkeypatch, kind):
    cls, fake, arch = RUNTIMES[kind]
    dev = _Device()
    _install(monkeypatch, kind, fake(dev))
    rt = open_runtime(Target.parse(arch))
    assert type(rt) is cls and rt.device_name() == {"cuda": "Fake H200", "hip": "Fake MI300X (gfx942)"}[kind]
    module = rt.load(_AXPB)
    fn = rt.function(module, "axpb")
    n = 1000
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    dx, dy = rt.alloc(x.nbytes), rt.alloc(x.nbytes)
    rt.upload(dx, x)
    rt.upload(dy, np.full(n, np.nan, np.float32))
    # a buffer with padding between the arguments: the driver must read each at its own offset
    buf = struct.pack("<Q", dx) + b"\xee" * 8 + struct.pack("<Q", dy) + struct.pack("<I", n)
    rt.launch(fn, (8, 1, 1), (128, 1, 1), PackedArgs(buf, (0, 16, 24)))
    rt.synchronize()
    y = np.empty(n, np.float32)
    rt.download(dy, y)
    np.testing.assert_array_equal(y, (x.astype(np.float64) * 3 + n).astype(np.float32))
    name, grid, block, shared, values = dev.launched[-1]
    assert (name, grid, block, shared) == ("axpb", (8, 1, 1), (128, 1, 1), 0)
    assert values == [struct.pack("<Q", dx), struct.pack("<Q", dy), struct.pack("<I", n)]
    rt.launch(fn, (0, 1, 1), (128, 1, 1), PackedArgs(buf, (0, 16, 24)))  # an empty grid launches nothing
    assert len(dev.launched) == 1
    times = rt.time_many([lambda: rt.launch(fn, (8, 1, 1), (128, 1, 1), PackedArgs(buf, (0, 16, 24)))] * 2,
                         warmup=1, reps=3, warmup_ms=0)
    assert [len(t) for t in times] == [3, 3] and all(t >= 0 for ts in times for t in ts)
    kinds = [ln[0] for ln in dev.launched]
    assert kinds.count("axpb") == 1 + 2 * (1 + 3)  # the first launch, then 1 warm-up and 3 timed of each call
    # CUDA enqueues each timed round behind its hold (one group of two calls a round); HIP has none
    assert kinds.count("rocke_hold") == {"cuda": 3, "hip": 0}[kind]
    rt.unload(module)
    rt.free(dx)
    rt.free(dy)


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_driver_errors_are_gpu_errors_naming_call_and_error(monkeypatch, kind):
    _, fake, arch = RUNTIMES[kind]
    names = NAMES[kind]
    _install(monkeypatch, kind, fake(_Device()))
    rt = open_runtime(Target.parse(arch))
    with pytest.raises(GpuError, match=rf"^{names['load']} failed: {names['image']}$"):
        rt.load(b"not a code object\0")
    fn_call = names["fn"]
    with pytest.raises(GpuError, match=rf"^{fn_call}\(nope\) failed: {names['missing']}$"):
        rt.function(rt.load(_AXPB), "nope")
    fn = rt.function(rt.load(_AXPB), "axpb")
    with pytest.raises(GpuError, match=rf"^{names['launch']} failed: {names['invalid']}$"):
        rt.launch(fn, (1, 1, 1), (2048, 1, 1), PackedArgs(bytes(20), (0, 8, 16)))
    with pytest.raises(GpuError, match=rf"^{names['alloc']}\({1 << 50}\) failed: {names['oom']}$"):
        rt.alloc(1 << 50)


def test_cuda_dynamic_shared_memory_and_hold(monkeypatch):
    dev = _Device()
    _install(monkeypatch, "cuda", _fake_cuda(dev))
    rt = CudaRuntime()
    fn = rt.function(rt.load(_AXPB), "axpb")
    x = rt.alloc(4)
    args = PackedArgs(struct.pack("<QQI", x, x, 0), (0, 8, 16))
    rt.allow_dynamic_shared(fn, 40 * 1024)  # within the default 48 KiB: no attribute call
    assert dev.attrs == {}
    with pytest.raises(GpuError, match="^cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE$"):
        rt.launch(fn, (1, 1, 1), (32, 1, 1), args, 64 * 1024)
    rt.allow_dynamic_shared(fn, 64 * 1024)
    assert dev.attrs == {"axpb": 64 * 1024}
    rt.launch(fn, (1, 1, 1), (32, 1, 1), args, 64 * 1024)
    assert dev.launched[-1][3] == 64 * 1024
    hold = rt.hold()  # the spin kernel: loaded once, launched with its nanoseconds as a u64
    hold(2.5)
    hold(0.001)
    assert dev.slept == [2_500_000, 1000] and [ln[0] for ln in dev.launched[-2:]] == ["rocke_hold"] * 2


@pytest.mark.parametrize("kind", ["cuda", "hip"])
def test_a_missing_piece_is_a_named_unavailable(monkeypatch, kind):
    cls, fake, arch = RUNTIMES[kind]
    label = {"cuda": "CUDA", "hip": "HIP"}[kind]
    cases = [(None, {"cuda": "the cuda-bindings package is not installed",
                     "hip": "hip-python is not installed"}[kind]),
             (fake(_Device(), missing_library=True), {"cuda": r"no CUDA driver on this host \(Failed to dlopen",
                                                      "hip": r"no ROCm HIP runtime \(libamdhip64.so\) on this host"}[kind]),
             (fake(_Device(), init=100 if kind == "cuda" else 1), "Init failed with"),
             (fake(_Device(devices=0)), {"cuda": "no CUDA device on this host", "hip": "no AMD GPU on this host"}[kind])]
    for driver, why in cases:
        _install(monkeypatch, kind, driver)
        with pytest.raises(RuntimeUnavailable, match=rf"^{label} runtime unavailable: .*{why}"):
            cls()
        with pytest.raises(RuntimeUnavailable, match=rf"^{label} runtime unavailable: "):
            open_runtime(Target.parse(arch))
