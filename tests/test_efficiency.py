"""Tile-efficiency models checked by hand on small cases, admission of problems, ranking."""

from __future__ import annotations

import pytest

from rocke_aot.errors import SpecError
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.variants import efficiency as E
from rocke_aot.variants import table
from rocke_aot.variants.families import problem_from_dict
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem


def test_gemm_granularity_by_hand():
    spec = GemmSpec(block_m=64, block_n=32)
    eff = E.efficiency(spec, GemmProblem(m=100, n=50, k=7), "gfx942")
    m, n = eff.dims
    assert (m.name, m.size, m.tile, m.granularity) == ("M", 100, 64, 100 / 128)
    assert (n.name, n.granularity) == ("N", 50 / 64)
    assert eff.tiles == 2 * 2
    assert eff.cus == 304 and eff.cu_granularity == 4 / 304
    assert eff.total == pytest.approx(100 / 128 * 50 / 64 * 4 / 304)
    assert eff.tile_granularity == pytest.approx(100 / 128 * 50 / 64)


def test_cu_granularity_by_hand():
    assert E.cu_granularity(304, 304) == 1.0
    assert E.cu_granularity(305, 304) == 305 / 608
    assert E.cu_granularity(132, 132) == 1.0
    assert E.cu_granularity(133, 132) == 133 / 264
    assert E.cu_granularity(0, 132) == 0.0
    # exact multiples of both tiles and CUs: efficiency 1
    eff = E.efficiency(GemmSpec(block_m=64, block_n=64), GemmProblem(64 * 16, 64 * 19, 64), "gfx942")
    assert eff.total == 1.0 and eff.tiles == 304
    # sm_90 has 132 SMs: the same problem leaves 304 - 264 = 40 blocks in a third wave
    eff = E.efficiency(GemmSpec(block_m=64, block_n=64), GemmProblem(64 * 16, 64 * 19, 64), "sm_90")
    assert eff.cu_granularity == 304 / 396


def test_conv_fwd_granularity_by_hand():
    spec = ConvDirectFwdSpec(c=64, k=64, tile_h=4, tile_w=8, tile_k=32)
    p = ConvProblem(n=2, h=13, w=13, c=64, k=64, r=3, s=3, pad_h=1, pad_w=1)
    assert p.out_hw == (13, 13)
    eff = E.efficiency(spec, p, "gfx950")
    assert [(d.name, d.granularity) for d in eff.dims] == [("OH", 13 / 16), ("OW", 13 / 16), ("K", 1.0)]
    assert eff.tiles == 2 * 4 * 2 * 2
    assert eff.cu_granularity == 32 / 256
    assert eff.total == pytest.approx(13 / 16 * 13 / 16 * 32 / 256)
    # a strided 7x7 stem: OH = (31 + 6 - 6 - 1) // 2 + 1 = 16
    stem = ConvProblem(n=1, h=31, w=31, c=3, k=64, r=7, s=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3)
    assert stem.out_hw == (16, 16)


def test_dgrad_patch_granularity_by_hand():
    spec = ConvDgradPatchSpec(c=3, p=14, tile_h=2, tile_w=4, r_blk=7)
    p = PatchDgradProblem(n=1, h=229, w=224, c=3, k=768, p=14)
    assert (p.hp, p.wp) == (16, 16)
    eff = E.efficiency(spec, p, "gfx1250")
    assert [(d.name, d.granularity) for d in eff.dims] == [("Hp", 1.0), ("Wp", 1.0), ("cols", 294 / 304)]
    assert eff.tiles == 8 * 4 * 2
    assert eff.cu_granularity == 64 / 256
    assert eff.total == pytest.approx(294 / 304 * 64 / 256)


def test_accepts_checks_the_baked_parameters():
    spec = ConvDirectFwdSpec(c=64, k=64, r=3, s=3, pad_h=1, pad_w=1)
    good = ConvProblem(n=1, h=8, w=8, c=64, k=64, r=3, s=3, pad_h=1, pad_w=1)
    assert E.accepts(spec, good) is None
    for change, word in ((dict(r=5, pad_h=2, pad_w=2), "filter R"), (dict(c=32), "input channels C"),
                         (dict(k=128), "output channels K"), (dict(stride_h=2), "stride_h"),
                         (dict(dil_w=2, pad_w=2), "pad_w"), (dict(dtype="bf16"), "dtype")):
        p = ConvProblem(**{**good.__dict__, **change})
        assert word in E.accepts(spec, p), change
    assert "empty" in E.accepts(ConvDirectFwdSpec(c=3, k=64, r=7, s=7, pad_h=0, pad_w=3, c_chunk=3),
                                ConvProblem(n=1, h=1, w=1, c=3, k=64, r=7, s=7, pad_h=0, pad_w=3))
    patch = ConvDgradPatchSpec(c=3, p=16, r_blk=4)
    assert E.accepts(patch, PatchDgradProblem(1, 224, 224, 3, 768, 16)) is None
    assert "patch size P" in E.accepts(patch, PatchDgradProblem(1, 224, 224, 3, 768, 14))
    assert "channels C" in E.accepts(patch, PatchDgradProblem(1, 224, 224, 4, 768, 16))
    assert "smaller than one" in E.accepts(patch, PatchDgradProblem(1, 15, 224, 3, 768, 16))
    gemm = GemmSpec(in_dtype="f16", out_dtype="f32")
    assert "dtype" in E.accepts(gemm, GemmProblem(8, 8, 8, dtype="bf16"))
    assert "out_dtype" in E.accepts(gemm, GemmProblem(8, 8, 8, out_dtype="f16"))


def test_accepts_refuses_tensors_past_32_bit_offsets():
    spec = GemmSpec()
    assert E.accepts(spec, GemmProblem(16384, 32767, 8)) is None  # C: 2^31 - 2^16 bytes of f32
    why = E.accepts(spec, GemmProblem(32768, 65536, 8))  # C = 2^31 f32 elements
    assert "32-bit offsets" in why and "C" in why
    patch = ConvDgradPatchSpec(c=3, p=16, r_blk=4)
    assert "dX" in E.accepts(patch, PatchDgradProblem(2000, 1024, 1024, 3, 768, 16))


def test_totals_and_refusals_by_hand():
    small = GemmSpec(block_m=32, block_n=32)
    mid = GemmSpec(block_m=64, block_n=64)
    big = GemmSpec(block_m=128, block_n=128)
    bf = GemmSpec(in_dtype="bf16", out_dtype="bf16")
    p = GemmProblem(m=1000, n=1000, k=64, dtype="f16")
    # by hand: 32x32 -> 1000/1024 squared x 1024/1216; 64x64 -> 1000/1024 squared x 256/304;
    # 128x128 -> 1000/1024 squared x 64/304
    assert E.efficiency(small, p, "gfx942").total == pytest.approx((1000 / 1024) ** 2 * 1024 / 1216)
    assert E.efficiency(mid, p, "gfx942").total == pytest.approx((1000 / 1024) ** 2 * 256 / 304)
    assert E.efficiency(big, p, "gfx942").total == pytest.approx((1000 / 1024) ** 2 * 64 / 304)
    assert E.efficiency(big, p, "gfx942").tiles == 64
    assert E.accepts(bf, p) == "dtype: problem is f16, spec is baked for bf16"
    assert all(E.accepts(s, p) is None for s in (small, mid, big))


def test_a_one_cu_arch_makes_every_tile_count_whole():
    import dataclasses

    from rocke_aot.arch import ARCHES

    one_cu = dataclasses.replace(ARCHES["gfx942"], cu_count=1)
    p = GemmProblem(m=256, n=256, k=64)
    for spec in (GemmSpec(block_m=64, block_n=64), GemmSpec(block_m=128, block_n=128, waves=2)):
        e = E.efficiency(spec, p, one_cu)
        assert e.total == 1.0 and e.cu_granularity == 1.0


def test_a_whole_table_for_a_conv_problem():
    p = PatchDgradProblem(n=8, h=230, w=241, c=3, k=768, p=16)
    specs = list(table.enumerate_specs("conv_dgrad_patch", "gfx1250", "llvm22"))
    reasons = {E.accepts(s, p) for s in specs}
    ok = [s for s in specs if E.accepts(s, p) is None]
    assert ok and all(s.p == 16 and s.c == 3 for s in ok)
    assert {r.split(":")[0] for r in reasons if r} >= {"patch size P"}
    assert all(0 < E.efficiency(s, p, "gfx1250").total <= 1 for s in ok)


def test_mismatched_problem_and_bad_inputs():
    with pytest.raises(SpecError, match="takes a GemmProblem"):
        E.efficiency(GemmSpec(), ConvProblem(1, 8, 8, 3, 8, 3, 3), "gfx942")
    with pytest.raises(SpecError, match="takes a GemmProblem"):
        E.accepts(GemmSpec(), ConvProblem(1, 8, 8, 3, 8, 3, 3))
    with pytest.raises(SpecError, match="unknown processor"):
        E.efficiency(GemmSpec(), GemmProblem(1, 1, 1), "gfx1100")
    assert E.efficiency(GemmSpec(), GemmProblem(1, 1, 1), "gfx942:xnack-").cus == 304


def test_problems_validate_and_parse():
    assert problem_from_dict("gemm", {"m": 3, "n": 4, "k": 5}) == GemmProblem(3, 4, 5)
    assert problem_from_dict("conv_dgrad_patch", {"n": 1, "h": 2, "w": 3, "c": 3, "k": 8, "p": 4}).hp == 0
    with pytest.raises(SpecError, match="unknown"):
        problem_from_dict("gemm", {"m": 3, "n": 4, "k": 5, "q": 1})
    with pytest.raises(SpecError, match="missing|required"):
        problem_from_dict("gemm", {"m": 3})
    with pytest.raises(SpecError, match="int"):
        GemmProblem(3.0, 4, 5)
    with pytest.raises(SpecError, match=">= 1"):
        GemmProblem(0, 4, 5)
    with pytest.raises(SpecError, match="dtype"):
        ConvProblem(1, 8, 8, 3, 8, 3, 3, dtype="f8")
    with pytest.raises(SpecError, match="no problem type"):
        problem_from_dict("conv_wgrad", {})


