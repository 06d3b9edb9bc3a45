"""`bench --run-from-cache` verifies a plugin family by the reference the plugin declares.

    the hook      Family(..., reference=Reference(output, compute, flops, terms | bound)): the
                  example plugin (examples/plugin-rowsoftmax) declares numpy's softmax and its
                  error bound; runner/reference.py semantics() takes a family's own Reference
                  first, then the one of the family it names (triton_matmul names gemm)
    the run       runner/run.py run_problem, unchanged, on tests/_sim_runtime.py's CPU runtime: the
                  plugin's lowered IR runs on the host (tests/_host_sim.py), its arguments packed at
                  the launch contract's offsets, its output poisoned, read back and checked against
                  the reference within the bound: every dtype on gfx942 (wave64) and sm_90 (warps of
                  32), a row shorter than the block and a ragged last pass
    a wrong kernel  the same IR with its exp2 scale off by 0.1% (log2(e) * 1.001): refused, every
                  output counted outside the bound, by the same path
    no reference  a family that declares none and names none (rowsoftmax, its Reference taken
                  away): a SpecError saying how to declare one, before anything is launched
"""

from __future__ import annotations

import json
import re

import pytest
from _plugins import example_installed, install_example, plugin_env, run_py

_RUN = r'''
import json, struct
import numpy as np
from _sim_runtime import SimRuntime
from rocke_aot.aot.lower import lower
from rocke_aot.errors import SpecError
from rocke_aot.runner.reference import semantics
from rocke_aot.runner.run import LoadedKernel, run_problem
from rocke_aot.variants.families import get_family
from rocke_rowsoftmax.family import LOG2E

fam = get_family("rowsoftmax")
out = {"source": fam.source.describe(), "output": semantics("rowsoftmax").output}


def run(k, wave, problem):
    image = k.ir.encode()
    rt = SimRuntime({image: k}, wave)
    cand = LoadedKernel("k", k.kernel_name, image, k.launch, rank=0)
    r = run_problem(rt, "rowsoftmax", fam.problem_from(problem), [cand], warmup=0, reps=1, vendor=False).results[0]
    return {"verified": r.verified, "max_rel_err": r.max_rel_err, "error": r.error, "median_ms": r.median_ms,
            "tflops": r.tflops, "launches": rt.launches}


for arch, wave, threads in (("gfx942", 64, 64), ("sm_90", 32, 32)):
    for dtype in ("f32", "f16", "bf16"):
        k = lower("rowsoftmax", {"dtype": dtype, "threads": threads, "path": "fma"}, arch, "llvm22")
        for rows, cols in ((3, 5), (4, 200)):
            out[f"{arch}/{dtype}/{rows}x{cols}"] = run(k, wave, {"rows": rows, "cols": cols, "dtype": dtype})

# the same kernel with log2(e) scaled by 1.001 in its IR: exp2((x - m) * 1.001 log2 e)
k = lower("rowsoftmax", {"dtype": "f32", "threads": 64, "path": "fma"}, "gfx942", "llvm22")
def bits(x):  # how LLVM prints a float constant: the double's bits of the f32 value
    return "0x%016x" % struct.unpack("<Q", struct.pack("<d", float(np.float32(x))))[0]
assert k.ir.count(bits(LOG2E)) >= 1, "the kernel's log2(e) constant is not where the test looks"
import dataclasses
wrong = dataclasses.replace(k, ir=k.ir.replace(bits(LOG2E), bits(LOG2E * 1.001)))
out["wrong"] = run(wrong, 64, {"rows": 4, "cols": 200, "dtype": "f32"})

import dataclasses as dc  # a family that declares no reference and names none (rowsoftmax's, taken away)
import rocke_aot.variants.families as F
_get = F.get_family
F.get_family = lambda name: dc.replace(_get(name), reference=None) if name == "rowsoftmax" else _get(name)
try:
    semantics("rowsoftmax")
except SpecError as e:
    out["none"] = str(e)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The site holding the example plugin (None: this environment has it, scripts/setup.sh)."""
    if example_installed():
        return None
    return install_example(tmp_path_factory.mktemp("plugins") / "example-site")


def test_run_from_cache_verifies_a_plugin_family_by_its_own_reference(example):
    r = run_py(plugin_env(example), _RUN)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got.pop("source").startswith("plugin rowsoftmax (rocke-aot-rowsoftmax ") and got.pop("output") == "Y"
    assert "declare what it computes, Family(..., reference=Reference(" in got.pop("none")
    wrong = got.pop("wrong")
    assert wrong["verified"] is False and wrong["max_rel_err"] > 1 and wrong["median_ms"] is None
    bad = re.fullmatch(r"(\d+) of 800 outputs outside the error bound \(or unwritten\)", wrong["error"])
    assert bad and int(bad.group(1)) > 700, wrong  # all but those whose x - m sits where the scale cancels
    assert len(got) == 12
    for case, r in got.items():
        assert r["verified"] is True and r["error"] is None, (case, r)
        assert 0 <= r["max_rel_err"] <= 1  # the largest error, as a fraction of the bound
        assert r["median_ms"] > 0 and r["tflops"] > 0  # timed: 5 flops per element from the reference
        assert r["launches"] == 2  # the verified run, then one timed repeat
