"""The time model (variants/perf.py): bank conflicts against the CUDA guide's rule worked by
hand, the family work against the specs' own arithmetic, the model's shape, and that selection
ranks by it exactly where an arch has measured constants."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rocke_aot import mma
from rocke_aot.errors import SpecError
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.targets import Target
from rocke_aot.variants import perf, table
from rocke_aot.variants.families import FAMILIES
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem

SM90 = Target.parse("sm_90")


# -- bank conflicts: CUDA C Programming Guide, "Shared Memory" (32 banks, 4-byte words; a warp's
#    request costs as many wavefronts as the most distinct words one bank must serve; lanes that
#    read one word share it) ---------------------------------------------------------------------

@pytest.mark.parametrize("addresses, degree", [
    ([4 * i for i in range(32)], 1),  # consecutive words: one per bank
    ([8 * i for i in range(32)], 2),  # stride 2 words: banks 0,2,..,30 twice
    ([128 * i for i in range(32)], 32),  # stride 32 words: every lane on bank 0
    ([0] * 32, 1),  # one word for everybody: a broadcast
    ([2 * i for i in range(32)], 1),  # 16-bit elements, two per word: 16 words, no conflict
    ([4 * (i % 8) + 256 * (i // 8) for i in range(32)], 4),  # 8 words x 4 rows 256 B apart: 4-way
])
def test_bank_degree_follows_the_guides_rule(addresses, degree):
    assert perf.bank_degree(addresses) == degree


def _fwd(c_chunk: int) -> ConvDirectFwdSpec:
    return ConvDirectFwdSpec(dtype="f16", c=64, k=64, r=3, s=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1,
                             dil_h=1, dil_w=1, tile_h=8, tile_w=8, tile_k=32, c_chunk=c_chunk, path="mma")


@pytest.mark.parametrize("c_chunk, a_degree", [(16, 2), (32, 4)])
def test_conv_fragment_conflicts_worked_by_hand(c_chunk, a_degree):
    """mma.sync m16n8k16, A fragment register j=0: lane l reads row l//4, column 2*(l%4) (PTX ISA
    fragment layout). The conv halo row (an output pixel, stride 1) is c_chunk f16 = c_chunk/2
    words long, so lane l's word is (l//4)*c_chunk/2 + l%4. c_chunk 16: words 8g + t, rows g and
    g+4 share banks -> 2-way. c_chunk 32: words 16g + t, rows g, g+2, g+4, g+6 share -> 4-way."""
    spec = _fwd(c_chunk)
    ins = mma.INSTRS["mma_f32_16x8x16_f16"]
    addrs = [spec.lds_a_index(*ins.a_coord(lane, 0)) * 2 for lane in range(32)]
    words = [(lane // 4) * c_chunk // 2 + lane % 4 for lane in range(32)]
    assert [a // 4 for a in addrs] == words
    assert perf.bank_degree(addrs) == a_degree


@pytest.mark.parametrize("family", ["gemm", "conv_dgrad_patch"])
def test_padding_makes_fragments_conflict_free(family):
    """GemmSpec and ConvDgradPatchSpec pad each LDS row by 8 elements for mma: every fragment
    load is one wavefront, so an instruction costs exactly its a_per_lane + b_per_lane loads
    (8 + 4), on every sm_90 mma spec of the table."""
    ins = mma.INSTRS["mma_f32_16x8x16_f16"]
    specs = [s for s in table.enumerate_specs(family, "sm_90", "llvm22") if s.path == "mma"]
    assert specs
    for spec in specs:
        assert perf.fragment_wavefronts(ins, spec.lds_a_index, spec.lds_b_index, 2) == 12, spec.kernel_name


@pytest.mark.parametrize("k_chunk", [16, 32])
def test_dgrad_padded_rows_worked_by_hand(k_chunk):
    """The dgrad A fragment, register j=0 (lane l: row l//4, column 2*(l%4)), on rows of
    k_chunk + 8 f16 = (k_chunk + 8)/2 words: lane l's word is (l//4)*(k_chunk+8)/2 + l%4.
    k_chunk 16: 12g + t, k_chunk 32: 20g + t; both put the 8 row groups on 8 disjoint sets of
    4 banks (12g and 20g mod 32 are 0,12,24,4,16,28,8,20 and 0,20,8,28,16,4,24,12), so one
    wavefront; unpadded the same rows cost 2 and 4 (8g + t, 16g + t)."""
    spec = ConvDgradPatchSpec(dtype="f16", c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=k_chunk, path="mma")
    ins = mma.INSTRS["mma_f32_16x8x16_f16"]
    addrs = [spec.lds_a_index(*ins.a_coord(lane, 0)) * 2 for lane in range(32)]
    assert [a // 4 for a in addrs] == [(lane // 4) * (k_chunk + 8) // 2 + lane % 4 for lane in range(32)]
    assert perf.bank_degree(addrs) == 1
    unpadded = [((lane // 4) * k_chunk + 2 * (lane % 4)) * 2 for lane in range(32)]
    assert perf.bank_degree(unpadded) == k_chunk // 8


# -- the work of a block, against each family's own definition ---------------------------------

PROBLEMS = {
    "gemm": GemmProblem(m=1000, n=777, k=333),
    "conv_direct_fwd": ConvProblem(n=2, h=30, w=31, c=64, k=64, r=3, s=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1),
    "conv_dgrad_patch": PatchDgradProblem(n=2, h=224, w=224, c=3, k=300, p=16),
}


# hand formulas of the built-ins (gemm: a family folder, rocke_aot/families/gemm, entry points)
@pytest.mark.parametrize("family", sorted(("gemm", "conv_direct_fwd", "conv_dgrad_patch")))
def test_work_covers_the_problem(family):
    """Every sm_90 spec serving the problem: tiles x steps x MACs per step is the padded
    problem's MAC count, never less (independent: the problem's own M x N x K)."""
    entry = FAMILIES[family]
    p = PROBLEMS[family]
    n = 0
    for spec in table.enumerate_specs(family, "sm_90", "llvm22"):
        if entry.model.accepts(spec, p):
            continue
        w = entry.model.work(spec, p, SM90)
        tiles = entry.model.efficiency(spec, p, SM90.info).tiles
        if family == "gemm":
            need = p.m * p.n * p.k
            padded = (math.ceil(p.m / spec.block_m) * spec.block_m * math.ceil(p.n / spec.block_n) * spec.block_n
                      * math.ceil(p.k / spec.block_k) * spec.block_k)
        elif family == "conv_direct_fwd":
            oh, ow = p.out_hw
            need = p.n * oh * ow * p.k * p.c * p.r * p.s
            padded = (p.n * math.ceil(oh / spec.tile_h) * spec.tile_h * math.ceil(ow / spec.tile_w) * spec.tile_w
                      * math.ceil(p.k / spec.tile_k) * spec.tile_k * math.ceil(p.c / spec.c_chunk) * spec.c_chunk
                      * p.r * p.s)
        else:
            hp, wp = p.h // p.p, p.w // p.p
            need = p.n * hp * wp * p.k * p.p * p.p * p.c
            padded = (p.n * math.ceil(hp / spec.tile_h) * spec.tile_h * math.ceil(wp / spec.tile_w) * spec.tile_w
                      * (p.p // spec.r_blk) * spec.cols_padded * math.ceil(p.k / spec.k_chunk) * spec.k_chunk)
        assert tiles * w.steps * w.macs_per_step == padded >= need, spec.kernel_name
        assert w.threads == spec.geometry(SM90).threads
        assert (w.lds_wavefronts_per_step > 0) == (spec.path != "fma")
        n += 1
    assert n > 10


# -- the model's shape ------------------------------------------------------------------------

K = perf.constants_for("sm_90")


def test_sm90_constants_are_shipped_and_amd_has_none():
    assert K is not None and K.launch > 0
    assert perf.constants_for("gfx942") is None  # nobody measured it: selection ranks by efficiency


def _work(**kw) -> perf.TileWork:
    base = dict(threads=128, steps=16, macs_per_step=64 * 64 * 32, load_bytes_per_step=(64 + 64) * 32 * 2,
                lds_wavefronts_per_step=256.0, store_bytes=64 * 64 * 4, matrix=True, double_buffer=False,
                lds_bytes=16384)
    base.update(kw)
    return perf.TileWork(**base)


def test_more_work_is_never_faster():
    w = _work()
    t = [perf.estimate_ms(w, "gemm", tiles, 4, 0, 132, K) for tiles in (1, 132, 133, 1000, 10000)]
    assert t == sorted(t)
    assert perf.estimate_ms(_work(steps=32), "gemm", 1000, 4, 0, 132, K) > perf.estimate_ms(w, "gemm", 1000, 4, 0, 132, K)
    assert perf.estimate_ms(_work(lds_wavefronts_per_step=1024.0), "gemm", 1000, 4, 0, 132, K) >= \
        perf.estimate_ms(w, "gemm", 1000, 4, 0, 132, K)
    assert perf.estimate_ms(w, "gemm", 1000, 4, 512, 132, K) >= perf.estimate_ms(w, "gemm", 1000, 4, 0, 132, K)


def test_numpy_and_scalar_agree():
    """bench/fit_perf.py fits through estimate_core on arrays; selection calls it on numbers."""
    works = [_work(steps=s, threads=t) for s in (1, 7, 64) for t in (64, 128, 256)]
    tiles = [1, 200, 5000] * 3
    scalar = [perf.estimate_ms(w, "gemm", n, 3, 0, 132, K) for w, n in zip(works, tiles)]
    arr = perf.estimate_core(
        K, tiles=np.array(tiles, float), cus=132, groups=np.full(9, 3.0), steps=np.array([w.steps for w in works], float),
        threads=np.array([w.threads for w in works], float), macs=np.array([w.macs_per_step for w in works], float),
        load=np.array([w.load_bytes_per_step for w in works], float),
        wavefronts=np.array([w.lds_wavefronts_per_step for w in works], float),
        store=np.array([w.store_bytes for w in works], float), matrix=np.ones(9), double_buffer=np.zeros(9),
        spill=np.zeros(9), load_factor=1.0)
    assert np.allclose(arr, scalar, rtol=1e-12)


def test_bad_constants_are_named():
    good = {f: 1e-6 for f in ("launch", "lat_sb", "lat_db", "warp_mma", "warp_fma", "thread_load", "cu_mma", "cu_fma",
                              "cu_load", "cu_lds", "warp_lds", "store", "spill", "barrier", "cu_warp")}
    good["load_factor"] = {"gemm": 1.0}
    assert perf.PerfConstants.from_dict(good, "x").launch == 1e-6
    with pytest.raises(SpecError, match=r"^x: perf constants missing \['launch'\], unknown \[\]"):
        perf.PerfConstants.from_dict({k: v for k, v in good.items() if k != "launch"}, "x")
    with pytest.raises(SpecError, match="^x: perf constant launch must be a finite number >= 0, got nan"):
        perf.PerfConstants.from_dict({**good, "launch": float("nan")}, "x")
    with pytest.raises(SpecError, match="^x: perf constant spill must be a finite number >= 0, got -1"):
        perf.PerfConstants.from_dict({**good, "spill": -1}, "x")


@pytest.mark.parametrize("path, pad", [("mma", 8), ("fma", 0)])
def test_patch_dgrad_layout_is_the_lowerers(path, pad):
    """A is [rows][k_chunk + pad], B after it [k_chunk][cols_padded + pad]; 32 dY pixels x 16
    channels, 96 columns (2 patch rows x 16 x 3) -> A spans 32*(16+pad) elements."""
    s = ConvDgradPatchSpec(dtype="f16", c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=16, path=path)
    assert s.lds_a_index(0, 0) == 0 and s.lds_a_index(1, 0) == 16 + pad
    assert s.lds_b_index(0, 0) == 32 * (16 + pad) and s.lds_b_index(1, 0) - s.lds_b_index(0, 0) == 96 + pad
    assert s.lds_bytes() == 2 * (32 * (16 + pad) + 16 * (96 + pad))


def test_patch_dgrad_b_is_transposed_on_the_amd_matrix_paths():
    """mfma and wmma: B is [cols_padded][k_chunk + B_T_PAD] after A (a lane's B fragment,
    consecutive K of one column, is contiguous) at every size; mma and fma keep
    [k_chunk][cols_padded + pad]."""
    from rocke_aot.families.conv_dgrad_patch.spec import B_T_PAD

    s = ConvDgradPatchSpec(dtype="f16", c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=16, path="mfma")
    assert s.lds_b_transposed
    assert ConvDgradPatchSpec(dtype="f16", c=3, p=16, tile_h=2, tile_w=8, r_blk=2, k_chunk=32,
                              path="wmma").lds_b_transposed
    for path in ("mma", "fma"):
        assert not ConvDgradPatchSpec(dtype="f16", c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=16,
                                      path=path).lds_b_transposed
    # the served p14c4 r14 kc32 (25088 staged B elements; [k_chunk][cols] until issue 37's third conv step)
    big = ConvDgradPatchSpec(dtype="f16", c=4, p=14, tile_h=4, tile_w=4, r_blk=14, k_chunk=32, path="mfma")
    assert big.lds_b_transposed and big.lds_b_index(3, 2) == 16 * 32 + 2 * (32 + B_T_PAD) + 3
    assert big.lds_elems() == 16 * 32 + 784 * (32 + B_T_PAD)
    base = 32 * 16  # A: 32 pixels x 16 channels, unpadded on the AMD paths
    assert s.lds_b_index(0, 0) == base and s.lds_b_index(1, 0) == base + 1
    assert s.lds_b_index(0, 1) == base + 16 + B_T_PAD
    assert s.lds_bytes() == 2 * (base + 96 * (16 + B_T_PAD))


@pytest.mark.parametrize("path", ["mma", "fma", "mfma", "wmma"])
def test_patch_dgrad_staging_walks_the_same_layout(path):
    """The staging copy's addresses (e plus the padding before it) are the fragment reads'
    lds_a_index / lds_b_index at every staged element, padded or not."""
    s = ConvDgradPatchSpec(dtype="f16", c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32, path=path)
    kc, cp = s.k_chunk, s.cols_padded
    assert [s.lds_a_staged(e, e // kc) for e in range(s.rows * kc)] == \
        [s.lds_a_index(r, k) for r in range(s.rows) for k in range(kc)]
    got = [s.lds_b_staged(e, e // cp) for e in range(kc * cp)]
    assert got == [s.lds_b_index(k, c) for k in range(kc) for c in range(cp)]
    assert max(got) < s.lds_elems() and len(set(got)) == len(got)
