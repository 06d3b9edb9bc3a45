"""triton_matmul's kernel counts (variants/triton_counts.py) against the code Triton emits here on
CPU (tests/_triton_isa.py under the llvm22 lane's Triton 3.6.0: the PTX for sm_90, the AMDGCN for
gfx942): the matrix work of one K step that the counts give equals the MACs of the matrix
instructions in the compiled K loop, per config of the family's own autotune lists, and the
hardware model then estimates a Triton candidate beside the native gemm."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rocke_aot.aot import toolchains as tcs
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.problems import GemmProblem
from rocke_aot.variants.triton_counts import matmul_counts, matrix_instr

REPO = Path(__file__).resolve().parents[1]
ISA = Path(__file__).with_name("_triton_isa.py")
PROBLEM = GemmProblem(m=4096, n=4096, k=4096)


@pytest.fixture(scope="module")
def triton36(all_toolchains):
    found = tcs.toolchains_for_lane("llvm22", all_toolchains, consumes="triton")
    if not found:
        pytest.fail("no Triton on the llvm22 lane here: `rocke-aot toolchain install triton==3.6.0 --python python3.12`")
    return found[0].python


def _specs(arch: str, n: int = 3):
    seen, out = set(), []
    for s in table.enumerate_specs("triton_matmul", arch, "llvm22"):
        cfg = (s.BLOCK_M, s.BLOCK_N, s.BLOCK_K, s.num_warps, s.num_stages)
        if s.m_class == s.n_class == s.k_class == "div16" and cfg not in seen:
            seen.add(cfg)
            out.append(s)
    return out[:n]


@pytest.mark.parametrize("arch, backend", [("sm_90", "cuda"), ("gfx942", "gfx942")])
def test_matrix_work_per_step_equals_the_compiled_k_loop(triton36, arch, backend):
    target = Target.parse(arch)
    for spec in _specs(arch):
        cfg = {"BLOCK_M": spec.BLOCK_M, "BLOCK_N": spec.BLOCK_N, "BLOCK_K": spec.BLOCK_K,
               "num_warps": spec.num_warps, "num_stages": spec.num_stages}
        r = subprocess.run([triton36, str(ISA), str(REPO), backend, json.dumps(cfg)], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        ops = json.loads(r.stdout.strip().splitlines()[-1])["ops"]
        assert ops, (cfg, "no matrix instruction found in the K loop")
        c = matmul_counts(spec, PROBLEM, target)
        ins = matrix_instr(target)
        counted = c.mma * spec.num_warps * ins.m * ins.n * ins.k  # the block's MACs a step, by the counts
        issued = sum(m * n * k for m, n, k in ops)
        if backend == "cuda":  # wgmma: one per warpgroup of 4 warps
            issued *= spec.num_warps // 4
        else:  # MFMA: per wave, the instruction the counts are in
            assert {tuple(o) for o in ops} == {(ins.m, ins.n, ins.k)} and len(ops) == c.mma, cfg
            issued *= spec.num_warps
        assert counted == issued == c.macs == spec.BLOCK_M * spec.BLOCK_N * spec.BLOCK_K, cfg


def test_the_hardware_model_estimates_triton_candidates():
    from rocke_aot.variants import hw_model
    from rocke_aot.variants.selection import estimate_hw
    from rocke_aot.variants import efficiency as eff

    for arch in ("sm_90", "gfx942"):
        target = Target.parse(arch)
        facts = hw_model.facts_for(target.processor)
        for spec in _specs(arch):
            est = estimate_hw(spec, PROBLEM, target, eff.efficiency(spec, PROBLEM, target), None, facts)
            # never faster than 2 PFLOP/s, above both data sheets' dense f16 peaks (H200 989, MI300X 1307 TFLOP/s)
            floor = PROBLEM.m * PROBLEM.n * PROBLEM.k * 2 / 2e15 * 1e3
            assert est.ms > floor and est.bound in ("compute", "issue", "lds", "memory", "latency"), (arch, spec)
