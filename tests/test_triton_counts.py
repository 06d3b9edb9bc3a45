"""triton_matmul's kernel counts (variants/triton_counts.py) against the code Triton emits here on
CPU (tests/_triton_isa.py under the llvm22 lane's Triton 3.6.0: the PTX for sm_90, the AMDGCN for
gfx942): the matrix work of one K step that the counts give equals the MACs of the matrix
instructions in the compiled K loop, per config of the family's own autotune lists, and the
hardware model then estimates a Triton candidate beside the native gemm."""

from __future__ import annotations

import functools
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rocke_aot.aot import toolchains as tcs
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.problems import GemmProblem
from rocke_aot.variants.triton_counts import WGMMA_KEY, matmul_counts, matrix_instr, wgmma_layout

REPO = Path(__file__).resolve().parents[1]
ISA = Path(__file__).with_name("_triton_isa.py")
PROBLEM = GemmProblem(m=4096, n=4096, k=4096)


@pytest.fixture(scope="module")
def triton36(all_toolchains):
    found = tcs.toolchains_for_lane(get_lane("llvm22"), all_toolchains, consumes="triton")
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


@functools.cache
def _compiled(python: str, backend: str, bm: int, bn: int, bk: int, warps: int, stages: int) -> dict:
    """{"ops", "lds_reads"} of the K loop Triton compiles for the config (tests/_triton_isa.py)."""
    cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}
    r = subprocess.run([python, str(ISA), str(REPO), backend, json.dumps(cfg)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _compile(python: str, backend: str, spec) -> dict:
    return _compiled(python, backend, spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K, spec.num_warps, spec.num_stages)


@pytest.mark.parametrize("arch, backend", [("sm_90", "cuda"), ("gfx942", "gfx942")])
def test_matrix_work_per_step_equals_the_compiled_k_loop(triton36, arch, backend):
    target = Target.parse(arch)
    for spec in _specs(arch):
        cfg = (spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K, spec.num_warps, spec.num_stages)
        ops = _compile(triton36, backend, spec)["ops"]
        assert ops, (cfg, "no matrix instruction found in the K loop")
        c = matmul_counts(spec, PROBLEM, target)
        ins = matrix_instr(target)
        unit = 16 * 8 * 16 if c.instr == WGMMA_KEY else ins.m * ins.n * ins.k
        counted = c.mma * spec.num_warps * unit  # the block's MACs a step, by the counts
        issued = sum(m * n * k for m, n, k in ops)
        if backend == "cuda":  # wgmma: one per warpgroup of 4 warps
            issued *= spec.num_warps // 4
        else:  # MFMA: per wave, the instruction the counts are in
            assert {tuple(o) for o in ops} == {(ins.m, ins.n, ins.k)} and len(ops) == c.mma, cfg
            issued *= spec.num_warps
        assert counted == issued == c.macs == spec.BLOCK_M * spec.BLOCK_N * spec.BLOCK_K, cfg


# Configs beyond the family's lists, each exercising one branch of Triton's MMAv3 rule: N split
# over two warps along N (64x64 on 8 warps: m64n32k16, warps 4 x 2), two M reps per warpgroup
# (256x128 on 8 warps), and a tile the rule refuses (BLOCK_M 32: mma.sync on 4 warps).
_EXTRA_SM90 = [(64, 64, 64, 8, 3), (256, 128, 64, 8, 3), (32, 64, 32, 4, 3)]


def _sm90_configs():
    out = list(_specs("sm_90", 99))
    base = out[0]
    for bm, bn, bk, w, st in _EXTRA_SM90:
        out.append(SimpleNamespace(**{**{f"{d}_class": getattr(base, f"{d}_class") for d in "mnk"},
                                      "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w, "num_stages": st}))
    return out


def test_sm_90_wgmma_instructions_per_step_are_the_compiled_k_loops(triton36):
    """Per config: the counts' issued matrix instructions per warp and step are the wgmma (or
    mma.sync) instructions of Triton's K loop, at its N; the matrix units are their MACs; and a
    wgmma loop reads no operand into registers (no ldmatrix / ld.shared), an mma.sync loop does."""
    target = Target.parse("sm_90")
    seen = set()
    for spec in _sm90_configs():
        cfg = (spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K, spec.num_warps, spec.num_stages)
        if cfg in seen:
            continue
        seen.add(cfg)
        got = _compile(triton36, "cuda", spec)
        ops = [tuple(o) for o in got["ops"]]
        c = matmul_counts(spec, PROBLEM, target)
        wg = wgmma_layout(spec, target)
        if wg is None:
            assert set(ops) == {(16, 8, 16)} and len(ops) == c.mma == c.mma_issued, (cfg, ops)
            assert c.instr == "mma_f32_16x8x16_f16" and c.lds_reads > 0 and got["lds_reads"] > 0, cfg
            continue
        # PTX is one warpgroup's code: each of its warps issues every instruction
        assert set(ops) == {(64, wg.n, 16)}, (cfg, ops)
        assert len(ops) == c.matrix_issued == c.mma_issued == wg.per_step, (cfg, len(ops), c.matrix_issued)
        assert c.instr == WGMMA_KEY and c.mma == len(ops) * wg.n // 8, cfg
        assert c.mma * 16 * 8 * 16 * spec.num_warps == c.macs == spec.BLOCK_M * spec.BLOCK_N * spec.BLOCK_K, cfg
        assert got["lds_reads"] == 0 == c.lds_reads, cfg
    assert any(wgmma_layout(s, target) is None for s in _sm90_configs())  # both branches ran


@pytest.mark.parametrize("div16", [True, False])
def test_sm_90_staging_copies_are_the_compiled_k_loops(triton36, div16):
    """The staging of one K step as Triton 3.6 compiles it for sm_90: in the divisible-by-16 class
    16-byte cp.async copies (no ld.global, no st.shared in the loop); outside it 2-byte ld.global
    then st.shared per element, no cp.async (cp.async copies at least 4 bytes), so the counts
    charge LDS stores and no pipelining there."""
    target = Target.parse("sm_90")
    spec = _specs("sm_90", 1)[0]
    if not div16:
        spec = SimpleNamespace(**{**vars(spec), "m_class": "plain", "n_class": "plain", "k_class": "plain"})
    cfg = {"BLOCK_M": spec.BLOCK_M, "BLOCK_N": spec.BLOCK_N, "BLOCK_K": spec.BLOCK_K,
           "num_warps": spec.num_warps, "num_stages": spec.num_stages, "div16": div16}
    r = subprocess.run([triton36, str(ISA), str(REPO), "cuda", json.dumps(cfg)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    c = matmul_counts(spec, PROBLEM, target)
    if div16:
        assert got["async_copies"] == c.global_loads > 0 and got["global_loads"] == got["lds_writes"] == 0, got
        assert c.lds_writes == 0 and c.double_buffer, cfg
    else:
        assert got["async_copies"] == 0 and got["global_loads"] == got["lds_writes"] == c.global_loads > 0, got
        assert c.lds_writes == c.global_loads and not c.double_buffer, cfg
        assert c.serial_loads == c.global_loads, cfg


def test_the_hardware_model_estimates_triton_candidates():
    from rocke_aot.variants import efficiency as eff
    from rocke_aot.variants import hw_model
    from rocke_aot.variants.selection import estimate_hw

    for arch in ("sm_90", "gfx942"):
        target = Target.parse(arch)
        facts = hw_model.facts_for(target.processor)
        for spec in _specs(arch):
            est = estimate_hw(spec, PROBLEM, target, eff.efficiency(spec, PROBLEM, target), None, facts)
            # never faster than 2 PFLOP/s, above both data sheets' dense f16 peaks (H200 989, MI300X 1307 TFLOP/s)
            floor = PROBLEM.m * PROBLEM.n * PROBLEM.k * 2 / 2e15 * 1e3
            assert est.ms > floor and est.bound in ("compute", "issue", "lds", "memory", "latency"), (arch, spec)
