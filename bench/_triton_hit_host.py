"""A GPU host's Triton on this CPU, for bench/bench_triton_hit.py: launch prebuilt kernels as the builder did.

    <a Triton lane's python> bench/_triton_hit_host.py PAYLOADS.json [INDEX ...]

PAYLOADS.json: the builder's compile requests (aot/families/triton.py request: module, function,
target, every argument as Triton's binder sees it, options). For each (INDEX: only those), this
process does what a host's Triton does on a launch: the stand-in active driver names the target
(no GPU here), the JIT binds stand-in tensors and ints, computes its cache key and asks its cache
manager: with TRITON_CACHE_MANAGER=triton.runtime.cache:RemoteCacheManager and
TRITON_REMOTE_CACHE_BACKEND=rocke_aot.client.triton_cache:Backend in the environment, the project's
backend answers (fetch, verify, Triton's cache layout); without, Triton compiles (its own file
cache in TRITON_CACHE_DIR). The stand-ins and argument binding are the builder's own worker's
(aot/toolchains/_triton_worker.py, loaded by path: stdlib + triton only), so the launch and key
are the build's. Triton's compilation listener says whether each launch compiled or hit.

Prints one JSON line: import seconds (CPU, wall) and per kernel {cpu_s, wall_s, compiled,
cache_hit, key}, the backend's events.
"""

import importlib.util
import json
import sys
import time
import types
from pathlib import Path

c0, w0 = time.process_time(), time.perf_counter()
# torch is not imported (the lane has none; the venv's on PYTHONPATH would add ~1 s to every
# process, compile or hit alike): Triton's HIP backend only asks torch.Tensor, as in the worker
stub = types.ModuleType("torch")
stub.Tensor = type("Tensor", (), {})
sys.modules["torch"] = stub
import triton  # noqa: E402
from triton import knobs  # noqa: E402
from triton.runtime import cache as tcache  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

WORKER = Path(__file__).resolve().parents[1] / "rocke_aot" / "aot" / "toolchains" / "_triton_worker.py"
spec = importlib.util.spec_from_file_location("_rocke_triton_worker", WORKER)
worker = importlib.util.module_from_spec(spec)
spec.loader.exec_module(worker)
imported = (time.process_time() - c0, time.perf_counter() - w0)

payloads = json.loads(Path(sys.argv[1]).read_text())
pick = [int(i) for i in sys.argv[2:]] or list(range(len(payloads)))
seen = {"compiled": 0, "cache_hit": 0}


def listener(*, src, metadata, metadata_group, times, cache_hit):
    seen["cache_hit" if cache_hit else "compiled"] += 1


knobs.compilation.listener = listener
out = []
for i in pick:
    p = payloads[i]
    fn = worker._jit_function(getattr(worker._module(p), p["function"]), triton)
    target = worker._target(p["target"])
    positional, constexprs = worker._args(p["args"], triton)
    before = dict(seen)
    c, w = time.process_time(), time.perf_counter()
    driver.set_active(worker._Driver(target))
    fn.device_caches.clear()
    kernel = fn.warmup(*positional, grid=(1,), **constexprs, **(p.get("options") or {}))
    out.append({"index": i, "cpu_s": time.process_time() - c, "wall_s": time.perf_counter() - w,
                "compiled": seen["compiled"] - before["compiled"], "cache_hit": seen["cache_hit"] - before["cache_hit"],
                "key": tcache._base32(kernel.hash)})
events = {}
if "rocke_aot.client.triton_cache" in sys.modules:
    events = sys.modules["rocke_aot.client.triton_cache"].events()
print(json.dumps({"triton": triton.__version__, "import_cpu_s": imported[0], "import_wall_s": imported[1],
                  "kernels": out, "events": events}))
