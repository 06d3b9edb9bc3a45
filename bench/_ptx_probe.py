"""The CUDA harness of the PTX microbenchmarks (bench/l2_probe.py, bench/l2_stream_probe.py): the
primary context through torch, a PTX entry loaded with cuda-bindings, and launches timed with
CUDA events (one warm-up launch, then the median of ``reps``). Runs on the GPU machine with its
own torch and cuda-bindings; nothing of the project is needed."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any


class Device:
    """The current CUDA device: its properties, SM count and a ``function(ptx, entry)`` loader."""

    def __init__(self) -> None:
        import torch
        from cuda.bindings import driver as cu

        self.cu, self.torch = cu, torch
        torch.cuda.init()
        self.props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self.sms = self.props.multi_processor_count
        torch.empty(1, device="cuda")  # the primary context, current

    def check(self, res: Any) -> Any:
        err, *rest = res if isinstance(res, tuple) else (res,)
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA error {err}")
        return rest[0] if len(rest) == 1 else rest

    def function(self, ptx: str, entry: str) -> Any:
        import numpy as np

        text = np.frombuffer(ptx.encode() + b"\0", dtype=np.uint8)
        return self.check(self.cu.cuModuleGetFunction(self.check(self.cu.cuModuleLoadData(text.ctypes.data)),
                                                      entry.encode()))

    def launcher(self, fn: Any, blocks: int, threads: int, values: list) -> Callable[[], None]:
        """A launch of ``fn`` on ``blocks`` x ``threads`` with the kernel parameters ``values``
        (numpy scalars of one element each, kept alive by the closure)."""
        import numpy as np

        params = np.array([v.ctypes.data for v in values], dtype=np.uint64)
        stream = self.torch.cuda.current_stream().cuda_stream

        def launch() -> None:
            self.check(self.cu.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, stream, params.ctypes.data, 0))
        launch.values = values  # type: ignore[attr-defined]
        return launch

    def time(self, launch: Callable[[], None], reps: int = 5) -> tuple[float, list[float]]:
        """(median ms, every rep's ms) of ``launch`` after one untimed launch."""
        torch = self.torch
        launch()
        torch.cuda.synchronize()
        times = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            launch()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times), times
