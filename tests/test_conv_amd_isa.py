"""The conv families' AMD interior main loop (issue 37), read from the code objects llvm22 compiles.

For the AMD picks' conv tiles (bench/gemm_amd_isa.py CONV_SPECS; gfx1250 its wmma tiles) on every
AMD arch, llvm-objdump-22 of the real compile (bench/gemm_amd_isa.py read(): the interior loop =
of the backward branches' regions holding the most matrix instructions, the tightest) must show:
  - the matrix instructions of one reduction chunk, and at most the instructions and waits this
    branch reached (bench/results/conv-amd-isa-2026-12-06-after.json; the first step:
    conv-amd-isa-{before,after}.json, e.g. gfx942 conv_fwd cc16 183 instructions / 33 waits -> 70 / 12,
    then the waits by need: -> 68 / 11);
  - one branch (the loop's own: no bounds test inside) and at most one vmcnt(0) drain (the
    chunk's loads issued together, ahead of the compute);
  - exactly the global loads the spec's staging implies, each as wide as the spec allows:
    per operand ceil(units / threads) loads (two a unit for dgrad's transposed B K-row pairs) of
    2 * vw bytes, vw = gcd(c_chunk, 8) (fwd), gcd(k_chunk, 8) (dgrad dY), gcd(P*C, 8) (dgrad W) or
    the wider vector the block offsets keep aligned (aligned_weight_vectors below)
    -- computed here from the spec's formulas, not from the lowering;
  - only 8- and 16-byte LDS reads (ds_read_b64 / read2_b64 / read_b128, gfx1250 ds_load_b128 /
    2addr_b64): no fragment gathered element by element (dgrad's B is transposed in LDS on mfma
    and wmma, ConvDgradPatchSpec.lds_b_transposed: p14c4 read 56 ds_read_u16 a chunk before);
  - no global load narrower than 8 bytes (issue 37's goal; p14c3's weights were 4-byte loads before
    ConvDgradPatchSpec.w_vector);
  - no spills.
test_conv_dgrad_lds_reads_every_lane: the same LDS-read, load-width and spill checks on llvm23 and llvm24.
"""

from __future__ import annotations

import re
from math import gcd

import pytest
from _bench import load_bench

from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.targets import Target

# arch, index into CONV_SPECS, matrix, instructions, waits (llvm22; after the waits by need,
# bench/results/conv-amd-isa-2026-12-06.md: e.g. gfx942 dgrad p14c4 147 / 16 waits -> 145 / 3; then
# B transposed at every size, conv-amd-isa-2026-12-06-c.md: p14c4 145 -> 99, gfx1250's 324 -> 158;
# gfx9's last whole chunk peeled: fwd cc16 68 -> 64 on gfx942, 59 -> 54 on gfx950, p14c3 42 -> 39;
# conv-amd-isa-2026-12-06-d.md: gfx1250 fwd's halo loads in the saddr form and a filter row's taps
# behind one wait, the chunk bases carried by the loop: 110 / 14 waits -> 74 / 5, its C = 64 being two
# chunks of 32, whose one prefetch (chunk 1) LLVM hoists out of the loop; the steady loop of more chunks
# is test_gfx1250_fwd_steady_loop's; conv-amd-isa-2026-12-06-e.md: conv_direct_fwd cc8's A reads at one base
# address and each tap's constant offset, paired into ds_read2_b64: 47 / 9 waits -> 41 / 7 on gfx942 and
# gfx950, 50 / 9 -> 44 / 7 on gfx90a, under Triton 3.6's 4.7 instructions a matrix instruction; then gfx9
# reads the whole filter's fragments behind one wait (conv_direct_fwd taps_per_wait): cc8 41 / 7 waits ->
# 37 / 3, cc16 64 / 11 -> 56 / 3 (gfx950 54 / 10 -> 47 / 3); CONV_SPECS[6] is ViT-L/14's pick now, p14c3
# t2x8 r7 k_chunk 32: 39 instructions / 3 matrix on gfx942 at k_chunk 16 -> 57 / 6; its weights in 8-byte
# vectors (ConvDgradPatchSpec.w_vector, conv-amd-isa-2026-12-06-f-dgrad.md): 57 -> 54 on gfx942 / gfx950,
# gfx1250 95 / 5 waits -> 94 / 6)
CEILINGS = [
    ("gfx942", 0, 9, 37, 3), ("gfx950", 0, 9, 37, 3), ("gfx90a", 0, 9, 40, 3),
    ("gfx942", 1, 18, 56, 3), ("gfx942", 3, 4, 41, 3), ("gfx942", 5, 14, 99, 3), ("gfx942", 6, 6, 54, 3),
    ("gfx950", 1, 9, 47, 3), ("gfx950", 3, 2, 40, 3), ("gfx950", 5, 14, 99, 3), ("gfx950", 6, 6, 54, 3),
    ("gfx1250", 1, 9, 74, 5), ("gfx1250", 3, 1, 45, 5), ("gfx1250", 5, 7, 157, 5), ("gfx1250", 6, 3, 94, 6),
    ("gfx90a", 1, 18, 60, 3), ("gfx90a", 3, 4, 44, 3), ("gfx90a", 5, 14, 102, 3), ("gfx90a", 6, 6, 58, 3),
]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def expected_loads(spec, threads: int) -> tuple[int, set[int]]:
    """(global loads a work-item issues per chunk, their widths in bytes) from the spec."""
    if isinstance(spec, ConvDirectFwdSpec):
        vw = gcd(spec.c_chunk, 8)
        halo = spec.halo_h * spec.halo_w * spec.c_chunk // vw
        weights = spec.tile_k * spec.r * spec.s * spec.c_chunk // vw
        return _ceil(halo, threads) + _ceil(weights, threads), {2 * vw}
    va, vb = gcd(spec.k_chunk, 8), gcd(spec.p * spec.c, 8)
    a = spec.rows * spec.k_chunk // va
    per_row = spec.cols_padded // vb
    if spec.lds_b_transposed:  # K-row pairs: two loads a unit
        wider = aligned_weight_vectors(spec)
        if wider is not None:
            vb, per_row = wider
        b = 2 * _ceil(spec.k_chunk // 2 * per_row, threads)
    else:
        b = _ceil(spec.k_chunk * per_row, threads)
    return _ceil(a, threads) + b, {2 * va, 2 * vb}


def aligned_weight_vectors(spec) -> tuple[int, int] | None:
    """(vw, vectors a K row) of an 8-byte weight vector (vw 4) where gcd(P*C, 8) is less, each load
    vw-aligned from W's base (the alignment the block offsets prove): the K row (P*P*C) a multiple
    of vw; block rb's columns [rb*cols, (rb + 1)*cols) read as the aligned vectors covering them,
    all inside the K row and, shifted by the block's misalignment, inside B's padded columns
    (ConvDgradPatchSpec.w_vector's rule, written again here)."""
    row, cols = spec.p * spec.p * spec.c, spec.r_blk * spec.p * spec.c
    for vw in (4,):  # 8 bytes, where the patch row's run gives less
        if gcd(spec.p * spec.c, 8) >= vw or row % vw:
            continue
        starts = [rb * cols // vw * vw for rb in range(spec.p // spec.r_blk)]
        n = max(_ceil(rb * cols + cols - s, vw) for rb, s in enumerate(starts))
        if all(s + n * vw <= row and s + n * vw - rb * cols <= spec.cols_padded for rb, s in enumerate(starts)):
            return vw, spec.cols_padded // vw if cols % vw == 0 else n  # whole vectors: the padded row too
    return None


@pytest.mark.parametrize("arch,index,matrix,insts,waits", CEILINGS, ids=[f"{c[0]}-spec{c[1]}" for c in CEILINGS])
def test_conv_interior_loop(arch, index, matrix, insts, waits, tmp_path):
    isa = load_bench("gemm_amd_isa")
    family, knobs = isa.CONV_SPECS[index]
    cls = ConvDirectFwdSpec if family == "conv_direct_fwd" else ConvDgradPatchSpec
    spec = cls(**isa.conv_spec(family, knobs, arch))
    row = isa.compile_one("native", (0, 0, 0, 0), arch, "llvm22", tmp_path, (spec.dtype,) * 2, family, knobs)
    lp = row["loop"]
    assert row["kernel"] == spec.kernel_name
    assert row["scope"] == "loop" and lp["matrix"] == matrix, (row["tile"], lp["matrix"])
    assert lp["insts"] <= insts and lp["wait"] <= waits, (row["tile"], lp["insts"], lp["wait"])
    assert lp["branches"] == 1 and lp["vmcnt0"] <= 1, (row["tile"], lp["branches"], lp["vmcnt0"])
    loads, widths = expected_loads(spec, spec.geometry(Target.parse(arch)).threads)
    if arch == "gfx1250" and family == "conv_direct_fwd":  # C / c_chunk = 2: every prefetch is of
        loads = 0  # chunk 1 (the clamp), loop-invariant, so LLVM loads it once before the loop
    got = {isa.width_bits(m) // 8 for m in lp["global_load"]}
    assert lp["global_load_n"] == loads and got <= widths, (row["tile"], lp["global_load"], loads, widths)
    assert all(w >= 8 for w in got), (row["tile"], lp["global_load"])  # issue 37's goal: 8- or 16-byte loads only
    assert wide_lds_reads(lp), (row["tile"], lp["lds_read"])
    assert (row["vgpr_spills"], row["sgpr_spills"], row["scratch_bytes"]) == (0, 0, 0)


def test_gfx1250_fwd_steady_loop(tmp_path):
    """gfx1250's conv_direct_fwd tile with C = 256 (8 chunks): the interior loop that loads the next
    chunk each pass (the served C = 64 has one prefetch, hoisted), read from the code object:
    its 13 16-byte loads, 9 WMMAs, a filter row's taps a wait (before
    the chunk bases were carried, at this branch's first commit: 97 instructions, 6 waits), no spill."""
    isa = load_bench("gemm_amd_isa")
    family, knobs = isa.CONV_SPECS[1]
    knobs = {**knobs, "c": 256}
    spec = ConvDirectFwdSpec(**isa.conv_spec(family, knobs, "gfx1250"))
    row = isa.compile_one("native", (0, 0, 0, 0), "gfx1250", "llvm22", tmp_path, (spec.dtype,) * 2, family, knobs)
    lp = row["loop"]
    assert lp["matrix"] == 9 and lp["insts"] <= 92 and lp["wait"] <= 5, (lp["insts"], lp["wait"])
    assert lp["global_load_n"] == expected_loads(spec, spec.geometry(Target.parse("gfx1250")).threads)[0] == 13
    assert (row["vgpr_spills"], row["sgpr_spills"], row["scratch_bytes"]) == (0, 0, 0)


def wide_lds_reads(lp: dict) -> bool:
    """Every LDS read of the loop moves 8 or 16 bytes an element (and there are some)."""
    reads = lp.get("lds_read", {})
    return bool(reads) and all(re.search(r"_b(64|128)$", m) for m in reads)


DGRAD = [i for i, (family, _k) in enumerate(load_bench("gemm_amd_isa").CONV_SPECS) if family == "conv_dgrad_patch"
         and _k["dtype"] == "f16"]


@pytest.mark.parametrize("lane", ["llvm23", "llvm24"])
@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx1250"])
def test_conv_dgrad_lds_reads_every_lane(arch, lane, tmp_path):
    isa = load_bench("gemm_amd_isa")
    if lane not in isa.lanes_here([lane], arch):
        pytest.fail(f"no {lane} toolchain for {arch} on this host (scripts/setup.sh --only lanes)")
    for index in DGRAD:
        family, knobs = isa.CONV_SPECS[index]
        row = isa.compile_one("native", (0, 0, 0, 0), arch, lane, tmp_path, (knobs["dtype"],) * 2, family, knobs)
        assert row["scope"] == "loop" and wide_lds_reads(row["loop"]), (row["tile"], row["loop"]["lds_read"])
        widths = {isa.width_bits(m) // 8 for m in row["loop"]["global_load"]}
        assert widths and min(widths) >= 8, (row["tile"], row["loop"]["global_load"])  # 8/16-byte loads only
        assert (row["vgpr_spills"], row["sgpr_spills"], row["scratch_bytes"]) == (0, 0, 0), row["tile"]
