"""`bench` hands back the report after every problem (runner/bench.py on_report; the CLI rewrites
--out with it), so a run cut short by its time limit keeps what it finished: a device call of
run 10 lost nine minutes of measurements because the file was written only at the end.

The kernels run on the CPU simulator (tests/_sim_runtime.py), verified against the runner's
float64 reference; the reference of "kept" is the list of problems the source was asked for."""

from __future__ import annotations

import pytest
from _sim_runtime import SimRuntime

from rocke_aot.aot.lower import lower
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.runner.bench import bench
from rocke_aot.targets import Target

SPEC = GemmSpec(path="fma", in_dtype="f16", out_dtype="f32", block_m=16, block_n=16, block_k=16, waves=1,
                vector_width=1)
PROBLEMS = [{"m": 5, "n": 7, "k": 3, "dtype": "f16"}, {"m": 9, "n": 4, "k": 17, "dtype": "f16"},
            {"m": 3, "n": 3, "k": 3, "dtype": "f16"}]


class OneKernel:
    """A source with one gemm kernel for every problem (what StoreSource / ServerSource return)."""

    def __init__(self):
        self.kernel = lower("gemm", SPEC, "gfx942", "llvm22")
        self.image = self.kernel.ir.encode()
        self.asked: list = []

    def ranked(self, arch, family, problem, lanes, triton_version=None, limit=None):
        self.asked.append(problem)
        return [{"key": "k0", "lane": "llvm22", "spec": SPEC.to_dict()}]

    def load(self, key):
        return self.image, {"launch": self.kernel.launch.as_dict()}

    def load_many(self, keys):
        return {k: self.load(k) for k in keys}


class Killed(Exception):
    pass


def test_the_report_so_far_after_every_problem_survives_a_kill():
    src = OneKernel()
    rt = SimRuntime({src.image: src.kernel}, 64)
    kept = []

    def on_report(partial):
        kept.append(partial.as_dict())
        if len(kept) == 2:
            raise Killed  # the time limit, after the second problem

    with pytest.raises(Killed):
        bench(src, rt, Target.parse("gfx942"), "gemm", PROBLEMS, warmup=0, reps=1, vendor=False, on_report=on_report)
    assert len(src.asked) == 2  # the third problem never started
    assert [d["summary"]["problems"] for d in kept] == [1, 2]
    last = kept[-1]
    assert [(p["problem"]["m"], p["problem"]["n"], p["problem"]["k"]) for p in last["problems"]] == [(5, 7, 3), (9, 4, 17)]
    assert all(r["verified"] and r["median_ms"] > 0 for p in last["problems"] for r in p["results"])
