"""Host time per call of rocke_aot.torch's linear on this CPU, no GPU: a runtime whose launch does
nothing, so what is left is the dispatch itself (shape lookup, output allocation, operand layout,
pointer writes) beside torch.empty of the output alone. The GPU figure (beside a real bare launch
and a Triton JIT launch) is bench/torch_models.py overhead, run by bench/torch_device.sh.

    .venv/bin/python bench/torch_host_overhead.py > bench/results/torch-host-overhead-<date>.txt
"""
import platform
import time

import torch

import rocke_aot.torch as rt
from rocke_aot.launch import LaunchContract
from rocke_aot.targets import Target
from rocke_aot.torch import ops
from rocke_aot.variants import table

spec = next(s for s in table.enumerate_specs("gemm", "gfx942", "llvm22") if s.in_dtype == "f16" and s.out_dtype == "f16")
c = LaunchContract.build(spec.kernel_name, spec.launch_formulas(), (spec.geometry(Target.parse("gfx942")).threads, 1, 1))
class Src:
    def ranked(self, *a, **k): return [{"key": "k", "lane": "llvm22", "spec": spec.to_dict(), "efficiency": 1.0}]
    def load(self, key): return b"img", {"launch": c.as_dict()}
class Noop:
    def load(self, i): return 1
    def function(self, m, n): return 2
    def unload(self, m): pass
    def allow_dynamic_shared(self, f, n): pass
    def launch_params(self, *a): pass
d = rt.configure(Src(), runtime=Noop(), arch="gfx942", summary_at_exit=False)
x, w = torch.randn(2, 1024).half(), torch.randn(1024, 1024).half()
def t(fn, n=20000):
    for _ in range(200): fn()
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best
ops.linear_impl(x, w, None)
(_, _, p), path = next((k, v) for k, v in d.table.items())
ptrs = {"A": x.data_ptr(), "B": 1, "C": 2}
print("linear_impl (eager path) us", round(t(lambda: ops.linear_impl(x, w, None)), 2))
print("torch.ops.rocke_aot.linear us", round(t(lambda: torch.ops.rocke_aot.linear(x, w, None)), 2))
print("launch path (pointers + launch) us", round(t(lambda: path(ptrs, 0)), 2))
print("torch.empty alone us", round(t(lambda: torch.empty((2, 1024), dtype=torch.float16)), 2))
print("host", platform.processor() or platform.machine(), "torch", torch.__version__)
