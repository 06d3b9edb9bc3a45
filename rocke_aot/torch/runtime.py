"""The process's Dispatcher for rocke_aot.torch: its source, GPU runtime and device arch.

    configure(source=None, policy="report", lanes=None, runtime=None, arch=None) -> Dispatcher
        source: a runner Source (ranked/load), else open_source() from the settings (source.py);
        runtime / arch: for tests and odd hosts (a fake runtime on CPU); by default per device:
        CudaRuntime(index) on the device's primary context (the one torch uses) on CUDA builds,
        HipRuntime(index) on ROCm builds (torch.version.hip; their tensors also say "cuda"), and
        the arch from the device (sm_90 from its capability, gfx942 from gcnArchName)
    current() -> the configured Dispatcher (configure() with the defaults on first use)
    stream_of(device) -> torch.cuda.current_stream(device).cuda_stream (0 off CUDA)
    stream_getter(device) -> a no-argument callable giving that (once per shape: the raw-stream
                             getter torch's own compiled code calls, no Stream object per call)
"""

from __future__ import annotations

import atexit
import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

from rocke_aot.errors import RuntimeUnavailable
from rocke_aot.targets import Target
from rocke_aot.torch.dispatch import Dispatcher

_DTYPES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}
STATE: dict[str, Any] = {"dispatcher": None}


def dtype_name(dt: torch.dtype) -> str:
    return _DTYPES.get(dt, str(dt).replace("torch.", ""))


def stream_of(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.current_stream(device).cuda_stream
    return 0


def _zero() -> int:
    return 0


def stream_getter(device: torch.device) -> Callable[[], int]:
    if device.type != "cuda":
        return _zero
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    if raw is None:
        return functools.partial(stream_of, torch.device("cuda", index))
    return functools.partial(raw, index)


def device_arch(device: torch.device) -> str:
    if device.type != "cuda":
        raise RuntimeUnavailable(f"rocke_aot.torch launches on GPU tensors; {device} is not one "
                                 f"(configure(arch=..., runtime=...) for a test runtime)")
    if torch.version.hip:
        return torch.cuda.get_device_properties(device).gcnArchName
    major, minor = torch.cuda.get_device_capability(device)
    return f"sm_{major}{minor}"


def device_runtime(device: torch.device):
    from rocke_aot.runner.runtime import CudaRuntime, HipRuntime

    index = device.index if device.index is not None else torch.cuda.current_device()
    return HipRuntime(index) if torch.version.hip else CudaRuntime(index)


def configure(source: Any = None, *, policy: str = "report", lanes=None, runtime: Any = None,
              arch: str | None = None, summary_at_exit: bool = True) -> Dispatcher:
    """Make (and return) the process's Dispatcher; an earlier one is closed."""
    if source is None:
        from rocke_aot.torch.source import open_source

        source = open_source()
    runtimes: dict[Any, Any] = {}

    def runtime_for(device):
        if runtime is not None:
            return runtime
        if device not in runtimes:
            runtimes[device] = device_runtime(device)
        return runtimes[device]

    given = Target.parse(arch) if arch is not None else None  # the API's arch, parsed once here

    def arch_for(device) -> Target:  # the device's own report of its arch, parsed where it is read
        return given if given is not None else Target.parse(device_arch(device))

    old = STATE["dispatcher"]
    if old is not None:
        old.close()
    d = Dispatcher(source, runtime_for=runtime_for, arch_for=arch_for, lanes=lanes, policy=policy)
    STATE["dispatcher"] = d
    if summary_at_exit and not STATE.get("atexit"):
        STATE["atexit"] = True
        atexit.register(_summary_at_exit)
    return d


def _summary_at_exit() -> None:
    d = STATE["dispatcher"]
    if d is not None and d.policy == "report" and (d.served or d.fallbacks):
        print(d.render(), file=sys.stderr)


def current() -> Dispatcher:
    d = STATE["dispatcher"]
    return d if d is not None else configure()
