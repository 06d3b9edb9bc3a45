"""One small GPU runtime interface, two implementations: CUDA (sm_90) and HIP (AMD targets).

    open_runtime(Target sm_90)  -> CudaRuntime  (cuda.bindings.driver: cuModuleLoadData, cuLaunchKernel, cuEvent*)
    open_runtime(Target gfx942) -> HipRuntime  (hip-python: hipModuleLoadData, hipModuleLaunchKernel, hipEvent*)
        │ no binding, no driver library, no device ──> RuntimeUnavailable (a named skip, never a traceback)
        ▼
    rt.load(image) -> Module;  module.function(name) -> Function
    rt.alloc / upload / download / free        device buffers (plain allocations, no managed memory)
    rt.launch(fn, grid, block, kernargs, shared, stream)
                                               kernargs: the packed kernel-argument buffer
                                               (runner/pack.py), laid out by the artifact's
                                               launch contract
    rt.time(fn_call, warmup, reps) -> [ms]     device events around each call
    rt.time_many(calls, warmup, reps) -> [[ms]] the same for several calls, in interleaved rounds,
                                               each group of calls enqueued behind a device-side
                                               hold (rt.hold(): CUDA a spin kernel on %globaltimer;
                                               HIP none yet) so the device never waits for the host

Arguments travel the same way on both runtimes: one buffer packed at the contract's offsets,
and ``kernelParams[i]`` pointing at argument i inside it (both drivers copy each parameter
from its pointer with the size the kernel declares), so there is no per-family launch code.
"""

from __future__ import annotations

import abc
import ctypes
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rocke_aot.errors import RockeError, RuntimeUnavailable
from rocke_aot.targets import Target


class GpuError(RockeError):
    """A GPU runtime call failed (the driver's error is in the message)."""


@dataclass(frozen=True)
class PackedArgs:
    """A packed kernel-argument buffer and where each argument starts in it."""

    buffer: bytes
    offsets: tuple[int, ...]


WARMUP_MS = 10.0  # device time of warm-up calls before the timed ones (Runtime.time)
MAX_WARMUP_CALLS = 4096  # an empty or trivial launch still ends its warm-up
# The hold (interleaved_times): calls enqueued behind one (three stream entries each: two events
# and the launch, within the driver's queue of about a thousand), how much longer than the host
# took to enqueue the last group it lasts, and its bounds
HOLD_GROUP = 128
HOLD_MARGIN = 2.0
MIN_HOLD_MS, MAX_HOLD_MS = 0.05, 50.0


class Runtime(abc.ABC):
    name: str = ""

    @abc.abstractmethod
    def device_name(self) -> str: ...

    @abc.abstractmethod
    def load(self, image: bytes) -> Any: ...

    @abc.abstractmethod
    def function(self, module: Any, name: str) -> Any: ...

    @abc.abstractmethod
    def unload(self, module: Any) -> None: ...

    @abc.abstractmethod
    def alloc(self, nbytes: int) -> int: ...

    @abc.abstractmethod
    def free(self, ptr: int) -> None: ...

    @abc.abstractmethod
    def upload(self, ptr: int, host: np.ndarray) -> None: ...

    @abc.abstractmethod
    def download(self, ptr: int, host: np.ndarray) -> None: ...

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    @abc.abstractmethod
    def _launch(self, fn: Any, grid: Sequence[int], block: Sequence[int], params: int, shared: int,
                stream: int = 0) -> None: ...

    @abc.abstractmethod
    def _events(self) -> Events: ...

    def allow_dynamic_shared(self, fn: Any, nbytes: int) -> None:  # noqa: B027 - HIP's default: nothing to allow
        """Let ``fn`` launch with ``nbytes`` of dynamic shared memory (CUDA: over 48 KiB needs an
        attribute, as Triton's own launcher sets it; HIP: the LDS limit applies as it is)."""

    def launch(self, fn: Any, grid: Sequence[int], block: Sequence[int], args: PackedArgs, shared: int = 0,
               stream: int = 0) -> None:
        """Launch ``fn`` on ``stream`` (a driver stream handle as an int: 0 = the legacy default
        stream; rocke_aot.torch passes ``torch.cuda.current_stream().cuda_stream``)."""
        if any(g <= 0 for g in grid):
            return  # an empty problem launches nothing
        buf = ctypes.create_string_buffer(args.buffer, max(len(args.buffer), 1))
        base = ctypes.addressof(buf)
        params = (ctypes.c_void_p * max(len(args.offsets), 1))(*[base + o for o in args.offsets])
        self._launch(fn, tuple(grid), tuple(block), ctypes.addressof(params), shared, stream)
        # buf and params must outlive the (asynchronous) launch call; the drivers copy the
        # argument values when the call returns, so keeping them until here suffices.
        del buf, params

    def launch_params(self, fn: Any, grid: Sequence[int], block: Sequence[int], params: int, shared: int = 0,
                      stream: int = 0) -> None:
        """Launch with a kernelParams array the caller keeps (its address; rocke_aot.torch lays it
        out once per shape and writes only the pointers per call). The grid must not be empty."""
        self._launch(fn, grid, block, params, shared, stream)

    def hold(self) -> Callable[[float], None] | None:
        """A call that makes the device wait ``ms`` milliseconds in stream order before what is
        enqueued next (interleaved_times), or None where this runtime has none: timing then
        enqueues as it comes, and a call shorter than the host's enqueue time measures that."""
        return None

    def time(self, call: Callable[[], None], *, warmup: int = 3, reps: int = 10,
             warmup_ms: float = WARMUP_MS) -> list[float]:
        """Milliseconds of each of ``reps`` calls (``time_many`` of one call)."""
        return self.time_many([call], warmup=warmup, reps=reps, warmup_ms=warmup_ms)[0]

    def time_many(self, calls: Sequence[Callable[[], None]], *, warmup: int = 3, reps: int = 10,
                  warmup_ms: float = WARMUP_MS) -> list[list[float]]:
        """Milliseconds of ``reps`` calls of each of ``calls``, measured with device events
        around every call, the calls interleaved: ``warmup`` untimed calls of each, then whole
        rounds (every call once) until at least ``warmup_ms`` of device time has passed (none
        when ``warmup`` is 0), then ``reps`` timed rounds, alternately in the given order and
        reversed, enqueued back to back and read once at the end.

        Why interleaved: timing the candidates of a problem one after another measured the
        first one slow. On the H200 the first-timed kernel of a problem ran a median 1.04x (up
        to 1.4x; run 9) slower than its identical-code twin, and still 1.02x (up to 1.54x; run
        12) after a 10 ms warm-up floor: the GPU sat idle while the host made the problem's
        inputs, and what it pays for that is not the clock alone. In rounds every candidate is
        timed in the same state (the GPU busy with the round before), drift spreads over all
        of them, and no position is the first after an idle GPU (tests/test_runtime_timing.py)."""
        return interleaved_times(calls, self._events(), self.synchronize, warmup=warmup, reps=reps,
                                 warmup_ms=warmup_ms, hold=self.hold())


Events = tuple[Callable[[], Any], Callable[[Any], None], Callable[[Any, Any], float]]


def interleaved_times(calls: Sequence[Callable[[], object]], events: Events, synchronize: Callable[[], None], *,
                      warmup: int, reps: int, warmup_ms: float = WARMUP_MS,
                      hold: Callable[[float], None] | None = None,
                      clock: Callable[[], float] = time.perf_counter) -> list[list[float]]:
    """Runtime.time_many's rule for any device's events (create, record, elapsed(start, stop)
    waiting for stop): also how runner/run.py times the vendor library with torch's events.

    ``hold(ms)``: the timed calls go in groups of HOLD_GROUP, each enqueued behind a hold that
    lasts HOLD_MARGIN times as long as the host took to enqueue the group before (``clock``, in
    seconds). Why: a call's events are recorded when the device reaches them; where the device
    has run everything enqueued, the start event fires at once and the kernel comes only when the
    host has launched it, so a kernel shorter than the host's time per call (launch and two
    events through Python: ~10-20 us) measures the host. The six-set runs 18, 20 and 22 timed
    most candidates of the two ~10 us conv problems at 17-20 us whatever their code
    (docs/selection.md); behind a hold the device runs the group back to back."""
    create, record, elapsed = events
    for call in calls:
        for _ in range(warmup):
            call()
    synchronize()
    spent, batch, rounds = 0.0, 1, 0
    per_call = 0.0  # host seconds to enqueue one timed call, from the last group
    while warmup and calls and spent < warmup_ms and rounds < MAX_WARMUP_CALLS:
        start, stop = create(), create()
        record(start)
        t0 = clock()
        for _ in range(batch):
            for call in calls:
                call()
        per_call = 3 * (clock() - t0) / (batch * len(calls))  # a timed call adds its two events
        record(stop)
        spent += elapsed(start, stop)
        rounds += batch
        batch *= 2  # doubling: a few event round trips even for a microsecond kernel
    marks: list[list[tuple[Any, Any]]] = [[] for _ in calls]
    for r in range(reps):
        order = list(range(len(calls)) if r % 2 == 0 else range(len(calls) - 1, -1, -1))
        for g in range(0, len(order), HOLD_GROUP):
            group = order[g:g + HOLD_GROUP]
            if hold is not None:
                hold(min(MAX_HOLD_MS, max(MIN_HOLD_MS, HOLD_MARGIN * per_call * len(group) * 1e3)))
            t0 = clock()
            for i in group:
                start, stop = create(), create()
                record(start)
                calls[i]()
                record(stop)
                marks[i].append((start, stop))
            per_call = (clock() - t0) / len(group)
    return [[elapsed(a, b) for a, b in pairs] for pairs in marks]


def _check(res: Any, what: str, ok: Any) -> Any:
    err = res[0] if isinstance(res, tuple) else res
    if err != ok:  # the enum's name (CUDA_ERROR_INVALID_VALUE, hipErrorInvalidValue): hip-python's prints a number
        raise GpuError(f"{what} failed: {getattr(err, 'name', err)}")
    if isinstance(res, tuple):
        return res[1] if len(res) == 2 else res[1:]
    return None


# One thread spinning on the global nanosecond timer until ``ns`` have passed (Runtime.hold): PTX
# the driver compiles for the device at hand (%globaltimer: PTX ISA, sm_30 and later).
_HOLD_PTX = """.version 7.0
.target sm_70
.address_size 64
.visible .entry rocke_hold(.param .u64 ns)
{
    .reg .u64 %rd<4>;
    .reg .pred %p;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
$Lspin:
    mov.u64 %rd3, %globaltimer;
    sub.u64 %rd3, %rd3, %rd2;
    setp.lt.u64 %p, %rd3, %rd1;
    @%p bra $Lspin;
    ret;
}
"""


class CudaRuntime(Runtime):
    name = "cuda"
    _hold_fn: Any = None

    def __init__(self, ordinal: int = 0):
        try:
            from cuda.bindings import driver as cu
        except ImportError as e:
            raise RuntimeUnavailable(f"CUDA runtime unavailable: the cuda-bindings package is not installed ({e})") from None
        self.cu = cu
        ok = cu.CUresult.CUDA_SUCCESS
        self._ok = ok
        try:
            err = cu.cuInit(0)[0]
        except Exception as e:  # the binding raises when libcuda.so cannot be loaded
            raise RuntimeUnavailable(f"CUDA runtime unavailable: no CUDA driver on this host ({e})") from None
        if err != ok:
            raise RuntimeUnavailable(f"CUDA runtime unavailable: cuInit failed with {err} (no driver or no device)")
        count = _check(cu.cuDeviceGetCount(), "cuDeviceGetCount", ok)
        if not count:
            raise RuntimeUnavailable("CUDA runtime unavailable: no CUDA device on this host")
        self.dev = _check(cu.cuDeviceGet(ordinal), "cuDeviceGet", ok)
        self.ctx = _check(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain", ok)
        _check(cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent", ok)

    def c(self, res: Any, what: str) -> Any:
        return _check(res, what, self._ok)

    def device_name(self) -> str:
        raw = self.c(self.cu.cuDeviceGetName(256, self.dev), "cuDeviceGetName")
        return raw.split(b"\0", 1)[0].decode()

    def load(self, image: bytes) -> Any:
        img = np.frombuffer(bytes(image) + b"\0", dtype=np.uint8)
        return self.c(self.cu.cuModuleLoadData(img.ctypes.data), "cuModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return self.c(self.cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name})")

    def unload(self, module: Any) -> None:
        self.cu.cuModuleUnload(module)

    def alloc(self, nbytes: int) -> int:
        return int(self.c(self.cu.cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc({nbytes})"))

    def free(self, ptr: int) -> None:
        self.cu.cuMemFree(ptr)

    def upload(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        self.c(self.cu.cuMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")

    def download(self, ptr: int, host: np.ndarray) -> None:
        self.c(self.cu.cuMemcpyDtoH(host.ctypes.data, ptr, host.nbytes), "cuMemcpyDtoH")

    def synchronize(self) -> None:
        self.c(self.cu.cuCtxSynchronize(), "cuCtxSynchronize")

    def allow_dynamic_shared(self, fn: Any, nbytes: int) -> None:
        if nbytes > 48 * 1024:
            attr = self.cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.c(self.cu.cuFuncSetAttribute(fn, attr, int(nbytes)), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")

    def _launch(self, fn, grid, block, params, shared, stream=0) -> None:
        self.c(self.cu.cuLaunchKernel(fn, *grid, *block, shared, stream, params, 0), "cuLaunchKernel")

    def hold(self) -> Callable[[float], None]:
        if self._hold_fn is None:  # JIT-compiled by the driver once, on first use
            self._hold_module = self.load(_HOLD_PTX.encode())
            self._hold_fn = self.function(self._hold_module, "rocke_hold")
        fn = self._hold_fn

        def hold(ms: float) -> None:
            self.launch(fn, (1, 1, 1), (1, 1, 1), PackedArgs(struct.pack("<Q", int(ms * 1e6)), (0,)))

        return hold

    def _events(self):
        cu = self.cu

        def create():
            return self.c(cu.cuEventCreate(0), "cuEventCreate")

        def record(ev):
            self.c(cu.cuEventRecord(ev, 0), "cuEventRecord")

        def elapsed(a, b):
            self.c(cu.cuEventSynchronize(b), "cuEventSynchronize")
            ms = self.c(cu.cuEventElapsedTime(a, b), "cuEventElapsedTime")
            cu.cuEventDestroy(a)
            cu.cuEventDestroy(b)
            return float(ms)

        return create, record, elapsed


class HipRuntime(Runtime):
    name = "hip"

    def __init__(self, ordinal: int = 0):
        try:
            from hip import hip
        except ImportError as e:
            raise RuntimeUnavailable(f"HIP runtime unavailable: hip-python is not installed ({e})") from None
        self.hip = hip
        try:
            err = hip.hipInit(0)
        except RuntimeError as e:  # hip-python raises when libamdhip64.so cannot be loaded
            raise RuntimeUnavailable(f"HIP runtime unavailable: no ROCm HIP runtime (libamdhip64.so) on this host "
                                     f"({e})") from None
        self._ok = hip.hipError_t.hipSuccess
        err = err[0] if isinstance(err, tuple) else err
        if err != self._ok:
            raise RuntimeUnavailable(f"HIP runtime unavailable: hipInit failed with {err} (no driver or no device)")
        count = self.c(hip.hipGetDeviceCount(), "hipGetDeviceCount")
        if not count:
            raise RuntimeUnavailable("HIP runtime unavailable: no AMD GPU on this host")
        self.c(hip.hipSetDevice(ordinal), "hipSetDevice")
        self.ordinal = ordinal

    def c(self, res: Any, what: str) -> Any:
        return _check(res, what, self._ok)

    def device_name(self) -> str:
        props = self.c(self.hip.hipGetDeviceProperties(self.ordinal), "hipGetDeviceProperties")
        def text(v: Any) -> str:  # hip-python gives the char arrays as bytes
            return v.split(b"\0", 1)[0].decode() if isinstance(v, bytes) else str(v)

        return f"{text(props.name)} ({text(props.gcnArchName)})"

    def load(self, image: bytes) -> Any:
        img = np.frombuffer(bytes(image), dtype=np.uint8)
        return self.c(self.hip.hipModuleLoadData(img.ctypes.data), "hipModuleLoadData")

    def function(self, module: Any, name: str) -> Any:
        return self.c(self.hip.hipModuleGetFunction(module, name.encode()), f"hipModuleGetFunction({name})")

    def unload(self, module: Any) -> None:
        self.hip.hipModuleUnload(module)

    def alloc(self, nbytes: int) -> int:
        return int(self.c(self.hip.hipMalloc(max(int(nbytes), 1)), f"hipMalloc({nbytes})"))

    def free(self, ptr: int) -> None:
        self.hip.hipFree(ptr)

    def upload(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        self.c(self.hip.hipMemcpyHtoD(ptr, host.ctypes.data, host.nbytes), "hipMemcpyHtoD")

    def download(self, ptr: int, host: np.ndarray) -> None:
        self.c(self.hip.hipMemcpyDtoH(host.ctypes.data, ptr, host.nbytes), "hipMemcpyDtoH")

    def synchronize(self) -> None:
        self.c(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize")

    def _launch(self, fn, grid, block, params, shared, stream=0) -> None:
        (gx, gy, gz), (bx, by, bz) = grid, block
        self.c(self.hip.hipModuleLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, stream or None, params, None),
               "hipModuleLaunchKernel")

    def _events(self):
        hip = self.hip

        def create():
            return self.c(hip.hipEventCreate(), "hipEventCreate")

        def record(ev):
            self.c(hip.hipEventRecord(ev, None), "hipEventRecord")

        def elapsed(a, b):
            self.c(hip.hipEventSynchronize(b), "hipEventSynchronize")
            ms = self.c(hip.hipEventElapsedTime(a, b), "hipEventElapsedTime")
            hip.hipEventDestroy(a)
            hip.hipEventDestroy(b)
            return float(ms)

        return create, record, elapsed


def open_runtime(target: Target, ordinal: int = 0) -> Runtime:
    """The runtime that runs code objects for ``target``: CUDA for NVPTX targets, HIP for AMDGPU."""
    return HipRuntime(ordinal) if target.is_amdgpu else CudaRuntime(ordinal)
