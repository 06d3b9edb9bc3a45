"""A CPU runtime for runner/run.py: the runner's launch, verify and time path on this host, no GPU.

    SimRuntime({image: LoweredKernel}, wave_size)
        load(image)     the kernel lowered to that image -> tests/_host_sim.py CpuGrid (the kernel's
                        own IR on the host: one OS thread per work-item, barriers and LDS modelled);
                        an image is the IR text's bytes (the simulator runs IR, not a code object)
        alloc / upload / download / free   host memory; a device pointer is a ctypes buffer's address
        launch          what Runtime.launch hands a driver (kernelParams: one pointer per argument into
                        the packed buffer) read back as the driver would: 8 bytes per pointer, 4 per i32
                        scalar, by the kernel's own parameter list; grid x blocks of ``block`` threads
        time            wall-clock milliseconds around each call (events recorded on the host)

So run_problem packs, launches (chunked or not), poisons and reads back outputs, and checks them
against the family's reference and error bound exactly as on a GPU; only the instructions run
elsewhere. Used by tests/test_runner_reference.py.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from _host_sim import CpuGrid

from rocke_aot.runner.runtime import Runtime


class SimRuntime(Runtime):
    name = "cpu-sim"

    def __init__(self, kernels: Mapping[bytes, Any], wave_size: int):
        self.kernels = dict(kernels)
        self.wave_size = wave_size
        self._bufs: dict[int, ctypes.Array] = {}
        self.launches = 0

    def device_name(self) -> str:
        return f"CPU simulator (wave {self.wave_size})"

    def load(self, image: bytes) -> Any:
        return self.kernels[bytes(image)]

    def function(self, module: Any, name: str) -> Any:
        if module.kernel_name != name:
            raise AssertionError(f"the image holds {module.kernel_name}, the contract names {name}")
        return CpuGrid(module, wave_size=self.wave_size), module

    def unload(self, module: Any) -> None:
        pass

    def alloc(self, nbytes: int) -> int:
        buf = ctypes.create_string_buffer(max(nbytes, 1))
        ptr = ctypes.addressof(buf)
        self._bufs[ptr] = buf
        return ptr

    def free(self, ptr: int) -> None:
        del self._bufs[ptr]

    def upload(self, ptr: int, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        ctypes.memmove(ptr, host.ctypes.data, host.nbytes)

    def download(self, ptr: int, host: np.ndarray) -> None:
        ctypes.memmove(host.ctypes.data, ptr, host.nbytes)

    def synchronize(self) -> None:
        pass

    def _launch(self, fn: Any, grid: Sequence[int], block: Sequence[int], params: int, shared: int, stream: int = 0) -> None:
        grid_sim, lowered = fn
        if tuple(block) != (grid_sim.threads, 1, 1) or tuple(grid[1:]) != (1, 1):
            raise AssertionError(f"the simulator runs 1-D grids of {grid_sim.threads}-thread blocks, "
                                 f"got grid {grid} block {block}")
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        args = []
        for i, a in enumerate(lowered.kernargs):
            cell = ctypes.cast(slots[i], ctypes.POINTER(ctypes.c_uint64 if a.kind == "global_pointer"
                                                        else ctypes.c_int32))
            args.append(cell[0])
        grid_sim.launch(grid[0], *args)
        self.launches += 1

    def _events(self):
        return (lambda: [0.0], lambda ev: ev.__setitem__(0, time.perf_counter()),
                lambda a, b: (b[0] - a[0]) * 1e3)
