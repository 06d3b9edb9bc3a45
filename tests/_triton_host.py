"""A GPU host's Triton program, on this CPU: the softmax kernel launched the way a host launches it.

Run under a Triton install's interpreter with the remote cache configured in the environment
(TRITON_CACHE_MANAGER, TRITON_REMOTE_CACHE_BACKEND=rocke_aot.client.triton_cache:Backend,
ROCKE_AOT_SERVER, ...): ``python _triton_host.py BACKEND ARCH WARP BLOCK COLS [BACKEND ARCH WARP]``.
The active driver is a stand-in naming the device's target (no GPU here); the JIT specializes
stand-in tensors (16-byte aligned, within 2 GiB, as torch's are) and ints as on a host, then
looks the kernel up through the remote cache. Triton's compilation listener counts what it
compiled (cache_hit False) and what it took from the cache. Prints one JSON line.
"""

import json
import sys
import types

try:
    import torch  # noqa: F401
except ImportError:
    stub = types.ModuleType("torch")
    stub.Tensor = type("Tensor", (), {})
    sys.modules["torch"] = stub

import triton
import triton.language as tl
from triton import knobs
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

from rocke_aot.client import triton_cache
from rocke_aot.kernels.configs import softmax_warps
from rocke_aot.kernels.triton_softmax import softmax_kernel

backend, arch, warp, block, cols = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
device = sys.argv[6:9] or [backend, arch, str(warp)]


class Driver:
    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target


class Tensor:
    dtype = tl.float16

    def data_ptr(self):
        return 0

    def ptr_range(self):
        return 1 << 20


def target(b, a, w):
    return GPUTarget(b, int(a) if b == "cuda" else a, int(w))


counts = {"compiled": 0, "cache_hit": 0}


def listener(*, src, metadata, metadata_group, times, cache_hit):
    counts["cache_hit" if cache_hit else "compiled"] += 1


knobs.compilation.listener = listener
driver.set_active(Driver(target(*device)))
kernel = softmax_kernel.warmup(Tensor(), Tensor(), cols, cols, cols, BLOCK=block, grid=(1,),
                               num_warps=softmax_warps(block), num_stages=1)
print(json.dumps({**counts, "events": triton_cache.events(), "hash": kernel.hash, "triton": triton.__version__,
                  "files": sorted(kernel.asm)}))
