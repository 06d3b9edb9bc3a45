"""Split-K (GemmSpec.split_k) outside the kernel's numerics (those are tests/test_gemm_emulated.py):
the knob's validation and canonical form, its launch contract, and the runner's handling of the
workspace (zero-filled, not an input, shared by the chunks of a split launch), run on the host
simulator through runner/run.py against its float64 reference."""

from __future__ import annotations

import dataclasses

import pytest

from rocke_aot.aot.lower import lower
from rocke_aot.errors import SpecError
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.launch import ArgDef
from rocke_aot.runner.run import LoadedKernel, launches, run_problem
from rocke_aot.variants.problems import GemmProblem

ASYNC = GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=2,
                 vector_width=8, stages=3)


def test_split_k_is_the_async_pipelines_and_absent_from_the_canonical_dict_at_1():
    assert "split_k" not in ASYNC.to_dict()
    sk = dataclasses.replace(ASYNC, split_k=4)
    assert sk.to_dict()["split_k"] == 4 and GemmSpec.from_dict(sk.to_dict()) == sk
    assert sk.kernel_name == ASYNC.kernel_name + "_k4"
    with pytest.raises(SpecError, match="asynchronous pipeline"):
        GemmSpec(path="mma", vector_width=8, split_k=2)
    with pytest.raises(SpecError, match="split_k=5"):
        dataclasses.replace(ASYNC, split_k=5)
    with pytest.raises(SpecError):
        dataclasses.replace(ASYNC, split_k=True)  # strict types: a bool is no int


def test_split_k_launch_contract():
    sk = dataclasses.replace(ASYNC, split_k=3)
    f = sk.launch_formulas()
    for m, n in ((1, 8), (37, 40), (130, 72)):
        tiles = -(-m // 32) * -(-n // 32)
        assert f.grid_of({"m": m, "n": n, "k": 64}) == (3 * tiles, 1, 1)
        assert f.tiles({"m": m, "n": n, "k": 64}) == tiles  # output tiles (the efficiency model's)
    w = next(a for a in f.args if a.name == "W")
    assert (w.dtype, w.access) == ("f32", "workspace")
    assert [a.name for a in f.args] == ["A", "B", "C", "W", "M", "N", "K"]
    assert [a.name for a in ASYNC.launch_formulas().args] == ["A", "B", "C", "M", "N", "K"]
    # partials (3 x 32 x 32 f32 a tile) + one counter a tile
    assert sk.workspace_words_per_tile == 3 * 32 * 32 + 1
    assert dict(f.split.strides) == {"A": "k", "C": "n"}  # the workspace is not advanced by a chunk
    with pytest.raises(SpecError, match="access"):
        ArgDef("W", "global_pointer", "f32", "1", "scratch")
    with pytest.raises(SpecError, match="access"):
        ArgDef("M", "scalar", "i32", "m", "workspace")


def _run(spec, problem, max_tensor_bytes=None):
    from _sim_runtime import SimRuntime

    k = lower("gemm", spec, "sm_90", "llvm22")
    contract = k.launch if max_tensor_bytes is None else dataclasses.replace(k.launch, max_tensor_bytes=max_tensor_bytes)
    image = k.ir.encode()
    rt = SimRuntime({image: k}, 32)
    cand = LoadedKernel("k", k.kernel_name, image, contract, rank=0)
    r = run_problem(rt, "gemm", problem, [cand], warmup=0, reps=1, vendor=False).results[0]
    return r, rt


@pytest.mark.parametrize("split_k", [2, 4])
def test_the_runner_verifies_split_k_with_a_zeroed_workspace(split_k):
    r, rt = _run(dataclasses.replace(ASYNC, split_k=split_k), GemmProblem(m=45, n=40, k=72, dtype="f16"))
    assert r.verified, r.error
    assert r.chunks == 1 and rt.launches >= 2  # verified once, then timed on the same workspace


def test_split_k_chunks_reuse_the_workspace_from_its_start():
    """A launch over the byte limit is cut along M; every chunk is a whole split-K gemm on the same
    workspace (not advanced), which each leaves with zero counters: the result still verifies.
    (A is the large tensor here: the workspace, split_k f32 words per output element, cannot
    shrink below C, so it is the selection that refuses a problem whose workspace is too large.)"""
    spec = dataclasses.replace(ASYNC, split_k=2)
    p = GemmProblem(m=70, n=8, k=512, dtype="f16")
    limit = 32 * 512 * 2  # A of 32 rows: chunks of 32, 32 and 6 rows; W of one tile fits
    k = lower("gemm", spec, "sm_90", "llvm22")
    contract = dataclasses.replace(k.launch, max_tensor_bytes=limit)
    todo = launches(contract, p, {"A": 1 << 20, "B": 2 << 20, "C": 3 << 20, "W": 4 << 20})
    assert len(todo) == 3 and "W" not in contract.split_units(p)[2]
    w_off = next(a.offset for a in contract.args if a.name == "W")
    assert {ln.args.buffer[w_off:w_off + 8] for ln in todo} == {(4 << 20).to_bytes(8, "little")}
    r, _ = _run(spec, p, max_tensor_bytes=limit)
    assert r.verified, r.error
    assert r.chunks == 3


def test_selection_refuses_a_workspace_past_32_bit_offsets():
    from rocke_aot.families.gemm.model import GEMM

    sk = dataclasses.replace(ASYNC, split_k=4)
    big = GemmProblem(m=16384, n=16384, k=64, dtype="f16")  # 4 x 2^28 f32: 4 GiB of partials
    assert "workspace" in GEMM.accepts(sk, big)
    assert GEMM.accepts(ASYNC, big) is None


@pytest.mark.parametrize("split_k", [2, 4])
def test_split_k_counts_are_the_ptx(split_k):
    """families/gemm/counts.py's split-K epilogue against the PTX of the lowered kernel (llvmlite's
    NVPTX back end, O3): per thread nt 16-byte partial stores, nt x split_k 16-byte loads,
    nt x (split_k - 1) x 4 f32 adds, one atomic and two fences (thread 0's), and steps = one slice."""
    from _cuda import _ptx_in_process

    from rocke_aot.families.gemm import counts
    from rocke_aot.targets import Target

    spec = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=128, block_n=128, block_k=64, waves=4,
                    vector_width=8, stages=3, group_m=8, split_k=split_k)
    sm90 = Target.parse("sm_90")
    g = spec.geometry(sm90)
    nt = g.tiles_m * g.tiles_n
    ptx = _ptx_in_process(lower("gemm", spec, "sm_90", "llvm22").ir)
    assert ptx.count("st.global.cg.v4.f32") == nt
    assert ptx.count("ld.global.cg.v4.f32") == nt * split_k
    assert sum(line.split()[0] in ("add.f32", "add.rn.f32") for line in ptx.splitlines() if line.strip()) \
        == nt * (split_k - 1) * 4
    assert ptx.count("atom.relaxed.gpu.global.add.u32") == 1 and ptx.count("fence.acq_rel.gpu") == 2
    p = GemmProblem(m=128, n=4096, k=14336, dtype="f16")
    c = counts.gemm_counts(spec, p, sm90)
    one = counts.gemm_counts(dataclasses.replace(spec, split_k=1), p, sm90)
    assert (c.splits, c.steps) == (split_k, -(-(14336 // 64) // split_k)) and one.splits == 1
    warps = g.threads // 32
    assert c.epilogue_instructions == pytest.approx(
        nt + 2 + 3 / warps + (nt * split_k + nt * (split_k - 1) * 4) / split_k)
    # bytes per block: its partial, plus a 1/split_k share of the last arriver's reads and C
    assert c.store_bytes == 128 * 128 * 4 + (split_k * 128 * 128 * 4 + one.store_bytes) // split_k
    # the last arriver alone: every thread's 16-byte partial loads of the PTX, and C's sectors;
    # the share above and the tail make the whole of it
    reads = ptx.count("ld.global.cg.v4.f32") * 16 * g.threads
    assert c.tail_bytes + (c.store_bytes - 128 * 128 * 4) == reads + one.store_bytes
    assert one.tail_bytes == 0


def test_the_hardware_model_runs_split_k_blocks_per_tile():
    """32 output tiles of 128 x 128 on the H200's 132 SMs with K = 14336: split 4 fills 128 SMs
    with a quarter of K each, which the model must find faster than one block per tile."""
    from rocke_aot.families.gemm import counts
    from rocke_aot.targets import Target
    from rocke_aot.variants import hw_model

    facts, sm90 = hw_model.facts_for("sm_90"), Target.parse("sm_90")
    spec = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=128, block_n=128, block_k=64, waves=4,
                    vector_width=8, stages=3, group_m=8)
    p = GemmProblem(m=128, n=4096, k=14336, dtype="f16")
    ms = {sk: hw_model.estimate(counts.gemm_counts(dataclasses.replace(spec, split_k=sk), p, sm90), 32, 1, facts).ms
          for sk in (1, 2, 4)}
    assert ms[4] < ms[2] < ms[1]


def test_split_k_partials_count_in_the_memory_floor():
    """A split's f32 partials are written once and read once by the last arriver: on 6000^2 x 256
    at split 4 that is 1.15 GB, which the H200's HBM moves in about 0.24 ms (run 18 measured
    0.278 ms against 0.076 ms at split 1). The floor must carry them, so the model no longer
    ranks split 4 first there; A, B and C are the same bytes at every split."""
    from rocke_aot.families.gemm import counts
    from rocke_aot.targets import Target
    from rocke_aot.variants import hw_model

    facts, sm90 = hw_model.facts_for("sm_90"), Target.parse("sm_90")
    spec = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=128, block_n=128, block_k=64, waves=8,
                    vector_width=8, stages=3, group_m=8)
    p = GemmProblem(m=6000, n=6000, k=256, dtype="f16")
    abc = (6000 * 256 * 2) * 2 + 6000 * 6000 * 2
    got = {sk: counts.gemm_counts(dataclasses.replace(spec, split_k=sk), p, sm90) for sk in (1, 2, 4)}
    assert got[1].unique_bytes == abc
    for sk in (2, 4):
        assert got[sk].unique_bytes == abc + 2 * sk * 6000 * 6000 * 4
    tiles = 47 * 47
    ms = {sk: hw_model.estimate(c, tiles, 2, facts).ms for sk, c in got.items()}
    assert ms[4] > 0.2 and ms[1] < ms[2] < ms[4]
