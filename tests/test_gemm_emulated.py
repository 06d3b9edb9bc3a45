"""Numerics of the lowered gemm IR without a GPU: the kernel's own IR, run on the host CPU.

    lower(...).ir --tests/_host_sim.py CpuGrid--> host IR: same instructions, with
        triple/datalayout -> the host's, address spaces dropped (one flat memory),
        thread / block ids, barriers, workgroup fences -> ctypes callbacks / dropped
        MFMA / WMMA / mma.sync calls -> one wave's lanes gathered through the instruction's
                               reference in tests/_isa_ref.py, written from the vendor
                               documents and importing nothing of rocke_aot
        fptrunc to bfloat   -> an integer round-to-nearest-even (no x86 libcall needed)
    --MCJIT--> one OS thread per work-item, work-groups one after another -> C vs numpy
    (the same simulator runs the conv kernels: tests/test_conv_cpu_sim.py)

So the loads, edge guards, K tail, LDS staging, double buffering, fragment index maps and
output conversion that the GPU will execute are all exercised here; a fragment map that
disagreed with the documented layout would give wrong numbers (test_a_perturbed_operand_map_
fails_the_simulation shows it does). What this cannot check is
LLVM's AMDGPU/NVPTX code generation itself (that is test_gemm_compile / test_gemm_gpu).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pytest
from _cuda import decode
from _host_sim import CpuGrid

from rocke_aot import mma
from rocke_aot.aot.lower import lower
from rocke_aot.families.gemm.spec import GemmSpec

GUARD = 64  # elements of NaN on each side of A and B: an out-of-bounds read poisons C


def _inputs(dtype, shape, rng):
    x = rng.integers(-8, 9, size=shape).astype(np.float32) / 4  # exact in f16 and bf16
    if dtype == "f16":
        bits = x.astype(np.float16).view(np.uint16)
    else:
        bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    nan = 0x7E00 if dtype == "f16" else 0x7FC0
    buf = np.full(bits.size + 2 * GUARD, nan, dtype=np.uint16)
    buf[GUARD:GUARD + bits.size] = bits.ravel()
    return buf, x.astype(np.float64)


from test_gemm_gpu import SPECS as GPU_SPECS  # noqa: E402  (the specs the H200 run uses)

CASES = [
    *[("sm_90", spec) for spec in GPU_SPECS],  # exactly what test_gemm_gpu runs on the H200
    ("gfx942", GemmSpec(path="mfma", mma="16x16x16", block_m=16, block_n=16, block_k=16, waves=1,
                        vector_width=8)),  # fewer load chunks than threads: guarded staging
    ("sm_90", GemmSpec(path="fma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, waves=2,
                       vector_width=1)),
    ("sm_90", GemmSpec(path="fma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=64, block_k=16,
                       waves=2, double_buffer=True, vector_width=8)),
    ("gfx942", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=32, block_k=16, waves=2)),
    ("gfx90a", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="f16", mma="16x16x16", block_m=32, block_n=32,
                        block_k=16, waves=1, vector_width=2, double_buffer=True)),
    ("gfx950", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=32, block_k=32,
                        waves=1, double_buffer=True)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="f16", out_dtype="f16", block_m=32, block_n=32, block_k=32,
                         waves=2, vector_width=8)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="bf16", out_dtype="f32", block_m=16, block_n=32, block_k=64,
                         waves=1, double_buffer=True)),
    # sm_90 tensor cores (mma.sync m16n8k16): several warps, several tiles per warp, K tail
    ("sm_90", GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32,
                       waves=2, vector_width=4)),
    ("sm_90", GemmSpec(path="mma", in_dtype="bf16", out_dtype="bf16", block_m=16, block_n=16, block_k=16,
                       waves=1, vector_width=8, double_buffer=True)),
    ("sm_90", GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=64, block_n=32, block_k=32,
                       waves=4, vector_width=2, double_buffer=True)),
]
SIZES = [(1, 1, 1), (37, 45, 70), (130, 70, 33)]

# The asynchronous pipeline (cp.async + ldmatrix, sm_90): K and N multiples of 8 (the spec's
# acceptance rule), M, N and K edges and a K tail all present; grouped tile order; an odd
# number of 8-wide B tiles per warp (ldmatrix .x2.trans).
ASYNC_SIZES = [(37, 40, 72), (130, 72, 24)]
ASYNC_CASES = [
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=2,
             vector_width=8, stages=3),
    GemmSpec(path="mma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=32, block_k=16, waves=2,
             vector_width=8, stages=2, group_m=2),
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=16, block_n=8, block_k=16, waves=1,
             vector_width=8, stages=4, group_m=4),
]


def workspace(spec, m, n) -> np.ndarray:
    """A split-K workspace as the launch contract asks (rocke_aot/launch.py "workspace"): the
    counters zero; the partials NaN here, which the kernel must overwrite before it reads them
    (the runner's zero fill is the gentler case). A guard zone of NaN after it."""
    tiles = -(-m // spec.block_m) * -(-n // spec.block_n)
    parts = tiles * spec.split_k * spec.block_m * spec.block_n
    w = np.full(tiles * spec.workspace_words_per_tile + 16, 0x7FC00000, dtype=np.uint32)
    w[parts:parts + tiles] = 0
    return w


def run_gemm(low, sim, spec, a_bits, b_bits, c, m, n, k, w=None, order=None) -> None:
    """One launch through the contract's argument list (A and B past their NaN guard zones)."""
    plan = low.launch.plan({"m": m, "n": n, "k": k})
    given = {"A": a_bits.ctypes.data + 2 * GUARD, "B": b_bits.ctypes.data + 2 * GUARD, "C": c, "W": w}
    args = [given[a.name] if a.kind == "global_pointer" else a.value for a in plan.args]
    sim.launch(plan.grid[0], *args, order=order)


def check_gemm(arch, spec, sizes=SIZES, orders=(None,), launches=1) -> None:
    """Lower, run on the CPU simulator, compare with numpy; AssertionError on any difference.
    Split-K: once per work-group order in ``orders`` (a function of the grid size), ``launches``
    times on one workspace, every result bit-identical and the counters zero after each."""
    low = lower("gemm", spec, arch, "llvm22")
    sim = CpuGrid(low, spec.geometry(low_target(arch)).wave_size)
    rng = np.random.default_rng(7)
    for m, n, k in sizes:
        a_bits, a = _inputs(spec.in_dtype, (m, k), rng)
        b_bits, b = _inputs(spec.in_dtype, (k, n), rng)
        nbytes = {"f32": 4, "f16": 2, "bf16": 2}[spec.out_dtype]
        w = workspace(spec, m, n) if spec.split_k > 1 else None
        first = None
        for order in orders:
            for _ in range(launches):
                c = np.full(m * n * nbytes + 64, 0xFF, dtype=np.uint8)  # NaN fill + a guard zone
                grid = low.launch.plan({"m": m, "n": n, "k": k}).grid[0]
                run_gemm(low, sim, spec, a_bits, b_bits, c, m, n, k, w, None if order is None else order(grid))
                if w is not None:
                    tiles = -(-m // spec.block_m) * -(-n // spec.block_n)
                    parts = tiles * spec.split_k * spec.block_m * spec.block_n
                    assert (w[parts:parts + tiles] == 0).all(), "a split-K launch left a counter non-zero"
                    assert (w[parts + tiles:] == 0x7FC00000).all(), "wrote past the end of the workspace"
                assert first is None or (c == first).all(), "split-K results differ between launches / orders"
                first = c
        assert (c[m * n * nbytes:] == 0xFF).all(), "wrote past the end of C"
        raw = c[: m * n * nbytes].view({4: np.float32, 2: np.uint16}[nbytes]).reshape(m, n)
        got = raw.astype(np.float64) if nbytes == 4 else decode(raw, spec.out_dtype)
        want = a @ b
        # inputs are multiples of 1/4 in [-2, 2]: products and sums are exact in f32, so an
        # f32 result must match exactly; a 16-bit result is want rounded once to nearest.
        if spec.out_dtype == "f32":
            np.testing.assert_array_equal(got, want, err_msg=f"{m}x{n}x{k}")
        else:
            ref = want.astype(np.float16) if spec.out_dtype == "f16" else _bf16_round(want)
            np.testing.assert_array_equal(got, np.asarray(ref, dtype=np.float64), err_msg=f"{m}x{n}x{k}")


@pytest.mark.parametrize("arch,spec", CASES, ids=[f"{a}-{s.kernel_name}" for a, s in CASES])
def test_lowered_gemm_computes_a_x_b(arch, spec):
    check_gemm(arch, spec)


# B transposed in LDS (b_lds "nk", the AMD tables' layout) on every matrix path
NK_CASES = [
    ("gfx942", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=32, block_k=16, waves=2,
                        b_lds="nk")),
    ("gfx950", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=32, block_k=32, waves=1,
                        double_buffer=True, b_lds="nk")),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="f16", out_dtype="f16", block_m=32, block_n=32, block_k=32, waves=2,
                         vector_width=8, b_lds="nk")),
    ("gfx90a", GemmSpec(path="mfma", mma="16x16x16", in_dtype="bf16", out_dtype="f16", block_m=32, block_n=32,
                        block_k=16, waves=1, vector_width=2, b_lds="nk")),
]


@pytest.mark.parametrize("arch,spec", NK_CASES, ids=[f"{a}-{s.kernel_name}" for a, s in NK_CASES])
def test_transposed_b_gemm_computes_a_x_b(arch, spec):
    check_gemm(arch, spec, [(37, 45, 70), (1, 1, 1)])


# The AMD main loop (families/gemm/lower_registers.py build_amd), as the tables serve it (b_lds nk, vector_width
# 8, padded rows): interior blocks run the unchecked loop (register prefetch of the next K-tile,
# one or two barriers a step), then the checked edge loop for the K tail; blocks on the M / N edge
# run the edge loop only. Sizes: many interior K-tiles and a K tail, every block interior and no
# tail (the last step's reload of its own tile), both edges with K shorter than a tile, two
# interior K-tiles (block_k 32: the double buffer's one pair, both of its loads ahead clamped).
AMD_LOOP_SIZES = [(70, 72, 200), (64, 64, 96), (33, 40, 20), (40, 64, 64)]
AMD_LOOP_CASES = [
    ("gfx942", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=1,
                        b_lds="nk", vector_width=8)),
    ("gfx942", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", block_m=64, block_n=32, block_k=64, waves=2,
                        b_lds="nk", vector_width=8, double_buffer=True)),
    ("gfx950", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f16", block_m=32, block_n=64, block_k=32, waves=2,
                        b_lds="nk", vector_width=8, double_buffer=True)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="bf16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=2,
                         b_lds="nk", vector_width=8, double_buffer=True)),
    ("gfx90a", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=1,
                        vector_width=8)),  # kn: B as in memory, vector stores
    # fewer B pair units of 8 than work-items: pairs of 4-element (8-byte) rows (spec.amd_b_pair_width);
    # the first is the served 64 x 64 tile (families/gemm/table.py AMD_MATRIX)
    ("gfx950", GemmSpec(path="mfma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4,
                        b_lds="nk", vector_width=8)),
    ("gfx942", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", block_m=32, block_n=64, block_k=16, waves=2,
                        b_lds="nk", vector_width=8, double_buffer=True)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32, waves=4,
                         b_lds="nk", vector_width=8)),
]


@pytest.mark.parametrize("arch,spec", AMD_LOOP_CASES, ids=[f"{a}-{s.kernel_name}" for a, s in AMD_LOOP_CASES])
def test_amd_main_loop_computes_a_x_b(arch, spec):
    check_gemm(arch, spec, AMD_LOOP_SIZES)


@pytest.mark.parametrize("spec", ASYNC_CASES, ids=[s.kernel_name for s in ASYNC_CASES])
def test_async_pipeline_gemm_computes_a_x_b(spec):
    check_gemm("sm_90", spec, ASYNC_SIZES)


def test_async_main_loop_of_four_ksteps_computes_a_x_b():
    """The main loop as the table's tiles run it (families/gemm/lower_async.py build_async): four k-steps
    a K-tile (the barrier after the third, the fourth's mma.sync across it), four copy rounds of
    each operand a thread, a K of six tiles through a ring of four stages, M and N edges."""
    check_gemm("sm_90", GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=64,
                                 waves=4, vector_width=8, stages=4, group_m=2), [(70, 72, 328)])


# 192-row tiles (families/gemm/spec.py WAVE_FILL_BLOCKS, the asynchronous pipeline's only): warps of
# 48 x 64 (3 m16 tiles), six copy rounds of A a thread, a tile row count that is not a power of
# two in the grouped order; M ragged over two tile rows, N off the tile, a K tail. f32 takes the
# pairs epilogue, f16 the quad one. The table's tiles are 192 x 128 over 8 warps.
WAVE_FILL_CASES = [
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=192, block_n=128, block_k=32, waves=8,
             vector_width=8, stages=3, group_m=8),
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=192, block_n=128, block_k=64, waves=8,
             vector_width=8, stages=3, group_m=8),
]


@pytest.mark.parametrize("spec", WAVE_FILL_CASES, ids=[s.kernel_name for s in WAVE_FILL_CASES])
def test_192_row_tiles_compute_a_x_b(spec):
    check_gemm("sm_90", spec, [(200, 40, 72)])


# 192 columns (128 x 192, 2 x 4 warps of 64 x 48, six n8 tiles: three ldmatrix.x4.trans pairs):
# B's rows are 24 vectors, copied in three panels of 8 (copy_plan); N = 328 puts the second
# tile's edge inside its first panel and the first tile whole, N = 136 (one tile) inside the third.
WAVE_FILL_N_CASES = [
    (dataclasses.replace(WAVE_FILL_CASES[0], block_m=128, block_n=192), [(72, 328, 72)]),
    (dataclasses.replace(WAVE_FILL_CASES[1], block_m=128, block_n=192, in_dtype="bf16", out_dtype="bf16"),
     [(40, 136, 72)]),
]


@pytest.mark.parametrize("spec,sizes", WAVE_FILL_N_CASES, ids=[s.kernel_name for s, _ in WAVE_FILL_N_CASES])
def test_192_column_tiles_compute_a_x_b(spec, sizes):
    check_gemm("sm_90", spec, sizes)


# Split-K (GemmSpec.split_k, families/gemm/lower_async.py reduce_split): ragged M and N, K a multiple of 8
# with a K tail; K = 24 over block_k 16 is 2 K-tiles, so split 3 / 4 leave slices empty, and
# K = 8 is one K-tile (split 2: slice 1 empty). The workspace's partials start as NaN.
SPLIT_SIZES = [(37, 40, 72), (130, 72, 24), (20, 16, 8)]
SPLIT_CASES = [
    dataclasses.replace(ASYNC_CASES[0], split_k=2),  # f16 -> f32, pairs epilogue
    dataclasses.replace(ASYNC_CASES[1], split_k=4),  # bf16 -> bf16, quad epilogue, grouped order
    dataclasses.replace(ASYNC_CASES[2], split_k=3),  # f16 -> f16, one warp, four stages
]
ORDERS = (None, lambda g: list(reversed(range(g))),
          lambda g: [int(x) for x in np.random.default_rng(g).permutation(g)])


@pytest.mark.parametrize("spec", SPLIT_CASES, ids=[s.kernel_name for s in SPLIT_CASES])
def test_split_k_gemm_computes_a_x_b(spec):
    """Every arrival order (forward, reversed, shuffled) gives the same exact result, twice on one
    workspace (the counters are back at zero after each launch)."""
    check_gemm("sm_90", spec, SPLIT_SIZES, orders=ORDERS, launches=2)


def test_split_k_bits_do_not_depend_on_arrival_order():
    """Inputs whose sums round (uniform f16, K = 200 over 4 slices): the fixed summation order
    z = 0 .. split_k - 1 gives identical bits whichever work-group of a tile arrives last."""
    spec = dataclasses.replace(ASYNC_CASES[0], split_k=4)
    low = lower("gemm", spec, "sm_90", "llvm22")
    sim = CpuGrid(low, 32)
    m, n, k = 37, 40, 200
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    pad = np.zeros(GUARD, np.uint16)
    a_bits, b_bits = (np.concatenate([pad, x.view(np.uint16).ravel(), pad]) for x in (a, b))
    outs = []
    for order in ORDERS:
        c = np.full(m * n, np.nan, dtype=np.float32)
        grid = low.launch.plan({"m": m, "n": n, "k": k}).grid[0]
        run_gemm(low, sim, spec, a_bits, b_bits, c, m, n, k, workspace(spec, m, n),
                 None if order is None else order(grid))
        outs.append(c.view(np.uint32).copy())
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(outs[0].view(np.float32).reshape(m, n), want, rtol=1e-5, atol=1e-5)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


# What check_gemm's numpy comparison says when the numbers differ: a mutation must be caught by
# it (or by the named memory-model check), not by any other assert on the way.
NUMERIC = r"Arrays are not equal\s+{}\s+(Mismatched elements|nan location mismatch)"  # check_gemm's numpy comparison


# The simulator's memory model (tests/_host_sim.py) lets a store reach another CTA only through a
# release (fence + atomic) and a read only after an acquire: dropping either fence must fail.
@pytest.mark.parametrize("dropped", ["release", "acquire", "both"])
def test_a_split_k_protocol_without_its_fences_fails_the_simulation(monkeypatch, dropped):
    from rocke_aot.aot.lower.nvptx import NvptxKernel
    spec = SPLIT_CASES[0]
    check_gemm("sm_90", spec, SPLIT_SIZES[:1])  # unbroken: passes
    fence = NvptxKernel.fence_acq_rel_gpu
    calls = []

    def mutated(self):  # reduce_split emits the release fence first, then the acquire fence
        calls.append(1)
        which = "release" if len(calls) % 2 else "acquire"
        if dropped not in (which, "both"):
            fence(self)

    monkeypatch.setattr(NvptxKernel, "fence_acq_rel_gpu", mutated)
    # no acquire: the simulator's memory model names the read; no release alone: the partial sums
    # another CTA reads are stale, and the numbers come out wrong
    why = NUMERIC.format("37x40x72") if dropped == "release" else \
        r"memory-model violations, first: ld\.global\S* at \S+ of another CTA's data without an acquire"
    with pytest.raises(AssertionError, match=why):
        check_gemm("sm_90", spec, SPLIT_SIZES[:1])


# The simulator lands cp.async copies at the latest moment the PTX ISA allows (the wait), so a
# pipeline that read a stage one wait too early, or an ldmatrix without .trans for B, must fail.
@pytest.mark.parametrize("mutation", ["wait_one_early", "b_not_transposed"])
def test_a_broken_pipeline_fails_the_simulation(monkeypatch, mutation):
    from rocke_aot.aot.lower.nvptx import NvptxKernel
    spec = ASYNC_CASES[0]
    check_gemm("sm_90", spec, ASYNC_SIZES[:1])  # unbroken: passes
    if mutation == "wait_one_early":
        wait = NvptxKernel.async_wait
        monkeypatch.setattr(NvptxKernel, "async_wait", lambda self, pending: wait(self, pending + 1))
    else:
        ldm = NvptxKernel.ldmatrix
        monkeypatch.setattr(NvptxKernel, "ldmatrix", lambda self, ptr, count, trans: ldm(self, ptr, 4, False)[:count])
    with pytest.raises(AssertionError, match=NUMERIC.format("37x40x72")):
        check_gemm("sm_90", spec, ASYNC_SIZES[:1])


def test_the_quad_epilogue_needs_its_exchange(monkeypatch):
    """The 2-byte quad epilogue (families/gemm/spec.py quad_stores) swaps a pair between lanes 2j and
    2j+1; with the partner one lane off (lane ^ 3), the stored columns must come out wrong."""
    from _host_sim import CpuGrid
    spec = ASYNC_CASES[1]
    check_gemm("sm_90", spec, ASYNC_SIZES[:1])
    shfl = CpuGrid._shfl_bfly
    monkeypatch.setattr(CpuGrid, "_shfl_bfly", lambda self, mask, v, b, c: shfl(self, mask, v, b ^ 2, c))
    with pytest.raises(AssertionError, match=NUMERIC.format("37x40x72")):
        check_gemm("sm_90", spec, ASYNC_SIZES[:1])


# -- the simulator can fail: one operand's map perturbed in the lowering alone --------------
@dataclass(frozen=True)
class Mutant(mma.MmaInstr):
    """An instruction whose lowering-side maps are wrong in one place only.

    "a_k": A's K order is rotated by one (B's is not), so lane registers pair A[i][k+1] with
    B[k][j]; "d_rows": result rows are rotated by one. The simulator's reference
    (tests/_isa_ref.py) does not read these maps, so it must see wrong numbers.
    """

    mutation: str = ""

    def a_coord(self, lane, j):
        r, c = super().a_coord(lane, j)
        return (r, (c + 1) % self.k) if self.mutation == "a_k" else (r, c)

    def d_coord(self, lane, r):
        row, col = super().d_coord(lane, r)
        return ((row + 1) % self.m, col) if self.mutation == "d_rows" else (row, col)


def mutate(monkeypatch, key: str, mutation: str) -> None:
    ins = mma.INSTRS[key]
    fields = {f.name: getattr(ins, f.name) for f in dataclasses.fields(mma.MmaInstr)}
    monkeypatch.setattr(mma, "INSTRS", MappingProxyType({**mma.INSTRS, key: Mutant(**fields, mutation=mutation)}))


MUTATION_CASES = [
    ("sm_90", GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32, block_k=32,
                       waves=2, vector_width=4)),
    ("gfx942", GemmSpec(path="mfma", mma="16x16x16", in_dtype="f16", out_dtype="f32", block_m=32, block_n=32,
                        block_k=16, waves=1)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="bf16", out_dtype="f32", block_m=16, block_n=32, block_k=32,
                         waves=1)),
]


@pytest.mark.parametrize("mutation", ["a_k", "d_rows"])
@pytest.mark.parametrize("arch,spec", MUTATION_CASES, ids=[a for a, _ in MUTATION_CASES])
def test_a_perturbed_operand_map_fails_the_simulation(monkeypatch, arch, spec, mutation):
    key = spec.geometry(low_target(arch)).instr
    check_gemm(arch, spec, [(37, 45, 70)])  # unperturbed: passes
    mutate(monkeypatch, key, mutation)
    assert spec.geometry(low_target(arch)).instr == key and isinstance(mma.INSTRS[key], Mutant)
    with pytest.raises(AssertionError, match=NUMERIC.format("37x45x70")):
        check_gemm(arch, spec, [(37, 45, 70)])


def low_target(arch):
    from rocke_aot.targets import Target
    return Target.parse(arch)


def _bf16_round(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((f + 0x7FFF + ((f >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.view(np.float32).astype(np.float64)
