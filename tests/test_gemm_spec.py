"""GemmSpec: validation (SpecError), canonical dict round trip, arch geometry."""

from __future__ import annotations

import json

import pytest

from rocke_aot.errors import CapabilityError, SpecError
from rocke_aot.families.gemm.spec import GemmSpec, async_copy_chunk, copy_panel
from rocke_aot.targets import Target


def test_canonical_dict_round_trips_through_json():
    s = GemmSpec(in_dtype="bf16", out_dtype="bf16", block_m=128, block_n=32, block_k=16, waves=2,
                 path="mfma", double_buffer=True, vector_width=8, mma="16x16x16")
    d = s.to_dict()
    assert list(d) == sorted(d)
    assert GemmSpec.from_dict(json.loads(json.dumps(d))) == s
    assert json.dumps(d, sort_keys=True) == json.dumps(GemmSpec.from_dict(d).to_dict(), sort_keys=True)
    assert GemmSpec.from_dict({}) == GemmSpec()
    assert hash(s) == hash(GemmSpec.from_dict(d))


@pytest.mark.parametrize("bad,match", [
    ({"in_dtype": "f32"}, "in_dtype"),
    ({"out_dtype": "f64"}, "out_dtype"),
    ({"path": "xdl"}, "path"),
    ({"block_m": 48}, "block_m=48"),
    ({"block_k": 0}, "block_k=0"),
    ({"block_n": 512}, "block_n=512"),
    ({"waves": 3}, "waves=3"),
    ({"vector_width": 3}, "vector_width=3"),
    ({"vector_width": 8, "block_k": 4}, "must divide block_k"),
    ({"block_m": 64.0}, "block_m must be int"),
    ({"double_buffer": 1}, "double_buffer must be bool"),
    ({"waves": True}, "waves must be int"),
    ({"path": "fma", "mma": "32x32x8"}, "mma shape only applies"),
])
def test_invalid_specs_raise_spec_error(bad, match):
    with pytest.raises(SpecError, match=match):
        GemmSpec(**bad)


def test_from_dict_rejects_unknown_fields_and_non_mappings():
    with pytest.raises(SpecError, match="unknown gemm spec fields \\['blockm'\\]"):
        GemmSpec.from_dict({"blockm": 64})
    with pytest.raises(SpecError, match="mapping"):
        GemmSpec.from_dict([("path", "fma")])


def test_geometry_per_arch():
    g = GemmSpec(path="mfma", block_m=128, block_n=128, waves=4).geometry(Target.parse("gfx942"))
    assert (g.threads, g.waves_m, g.waves_n, g.tiles_m, g.tiles_n) == (256, 2, 2, 2, 2)
    assert g.instr == "mfma_f32_32x32x8f16"
    g = GemmSpec(path="wmma").geometry(Target.parse("gfx1250"))
    assert (g.threads, g.wave_size, g.instr) == (128, 32, "wmma_f32_16x16x32_f16")
    g = GemmSpec(path="fma", waves=4).geometry(Target.parse("sm_90"))
    assert (g.threads, g.thread_m * g.thread_n) == (128, 64 * 64 // 128)
    assert (64 // g.thread_m) * (64 // g.thread_n) == 128


def test_geometry_refusals():
    with pytest.raises(SpecError, match="block_k=8 is not a multiple of v_mfma_f32_32x32x16_f16's K=16"):
        GemmSpec(path="mfma", block_k=8).geometry(Target.parse("gfx950"))
    with pytest.raises(SpecError, match="does not split over 4 waves"):
        GemmSpec(path="mfma", block_m=32, block_n=32, waves=4).geometry(Target.parse("gfx942"))
    with pytest.raises(SpecError, match="LDS"):
        GemmSpec(block_m=256, block_n=256, block_k=128, double_buffer=True, waves=16).geometry(Target.parse("gfx942"))
    with pytest.raises(SpecError, match="does not split over"):
        GemmSpec(block_m=8, block_n=8, waves=4).geometry(Target.parse("gfx942"))
    # sm_90: static shared memory is capped at 48 KiB per kernel, whatever the SM has
    big = GemmSpec(block_m=128, block_n=128, block_k=64, waves=2, double_buffer=True)
    assert big.lds_bytes() == 65536
    big.geometry(Target.parse("gfx950"))
    with pytest.raises(SpecError, match="sm_90 allows 49152 per kernel"):
        big.geometry(Target.parse("sm_90"))
    with pytest.raises(SpecError, match="needs 256 accumulators per work-item"):
        GemmSpec(block_m=128, block_n=128, waves=2).geometry(Target.parse("sm_90"))
    GemmSpec(block_m=128, block_n=128, waves=2).geometry(Target.parse("gfx942"))  # wave64: 128
    with pytest.raises(CapabilityError, match="wmma is not available on sm_90"):
        GemmSpec(path="wmma").geometry(Target.parse("sm_90"))


def test_kernel_name_is_a_function_of_the_spec():
    names = {GemmSpec(path=p, double_buffer=d).kernel_name for p in ("fma", "mfma") for d in (False, True)}
    assert len(names) == 4
    assert all(n.isidentifier() for n in names)


# -- the sm_90 asynchronous pipeline (stages) and the tile order (group_m) ---------------------
def test_later_fields_leave_older_dicts_and_keys_as_they_were():
    old = {"block_k": 32, "block_m": 64, "block_n": 64, "double_buffer": False, "in_dtype": "f16", "mma": "auto",
           "out_dtype": "f32", "path": "mma", "vector_width": 4, "waves": 4}  # a dict written before stages existed
    spec = GemmSpec.from_dict(old)
    assert (spec.stages, spec.group_m) == (0, 1) and spec.to_dict() == old
    new = GemmSpec(path="mma", vector_width=8, stages=3, group_m=8)
    d = new.to_dict()
    assert (d["stages"], d["group_m"]) == (3, 8) and GemmSpec.from_dict(d) == new
    assert list(d) == sorted(d)
    assert new.kernel_name.endswith("_v8_s3_g8") and spec.kernel_name.endswith("_v4_sb")


@pytest.mark.parametrize("kw, why", [
    (dict(path="mfma", vector_width=8, stages=3), "the sm_90 mma path's"),
    (dict(path="mma", vector_width=4, stages=3), "needs vector_width=8"),
    (dict(path="mma", vector_width=8, stages=3, double_buffer=True), "replaces double_buffer"),
    (dict(path="mma", vector_width=8, stages=5), "stages=5 not in"),
    (dict(path="mma", group_m=3), "group_m=3 not in"),
])
def test_async_fields_are_checked(kw, why):
    with pytest.raises(SpecError, match=why):
        GemmSpec(**kw)


def test_192_wide_blocks_are_the_async_pipelines_and_lay_whole_warp_tiles():
    sm90 = Target.parse("sm_90")
    s = GemmSpec(path="mma", block_m=192, block_n=128, block_k=64, waves=8, vector_width=8, stages=3)
    g = s.geometry(sm90)
    # 4 x 2 warps of 48 x 64: three m16 tiles and eight n8 tiles a warp
    assert (g.waves_m, g.waves_n, g.tiles_m, g.tiles_n) == (4, 2, 3, 8)
    assert s.lds_bytes() == 3 * 2 * (192 * 72 + 64 * 136) == 135168
    assert s.kernel_name == "gemm_f16_f32_mma_192x128x64_w8_v8_s3"
    assert GemmSpec.from_dict(s.to_dict()) == s
    # the register-staged paths keep power-of-two blocks; block_k too; 96 is no wave-fill block
    for kw, why in ((dict(block_m=192, path="mma", vector_width=8), "asynchronous pipeline's"),
                    (dict(block_n=192, path="fma"), "asynchronous pipeline's"),
                    (dict(block_k=192, path="mma", vector_width=8, stages=3), "block_k=192 must be a power of two"),
                    (dict(block_m=96, path="mma", vector_width=8, stages=3), "block_m=96 must be")):
        with pytest.raises(SpecError, match=why):
            GemmSpec(**kw)
    # 128 x 192: 2 x 4 warps of 64 x 48; B's 24 vectors a row are copied in panels of 8 (copy_panel)
    t = GemmSpec(path="mma", block_m=128, block_n=192, block_k=64, waves=8, vector_width=8, stages=3)
    g = t.geometry(sm90)
    assert (g.waves_m, g.waves_n, g.tiles_m, g.tiles_n) == (2, 4, 4, 6)
    assert (copy_panel(256, 192), copy_panel(256, 64), copy_panel(256, 128), copy_panel(128, 192)) == (8, 8, 16, 8)
    # panel after panel, row after row in each: copy 511 is the last of panel 0, 512 the first of panel 1
    assert [async_copy_chunk(t, 256, "B", c) for c in (0, 7, 8, 511, 512, 1535)] == \
        [(0, 0), (0, 56), (1, 0), (63, 56), (0, 64), (63, 184)]
    assert [async_copy_chunk(s, 256, "B", c) for c in (15, 16)] == [(0, 120), (1, 0)]  # one panel: rows


def test_async_stages_live_in_dynamic_shared_memory_past_the_static_limit():
    s = GemmSpec(path="mma", block_m=128, block_n=128, block_k=64, waves=4, vector_width=8, stages=3)
    # (128 x (64 + 8) + 64 x (128 + 8)) f16 elements per stage, three stages: 107,520 bytes
    assert s.lds_bytes() == 3 * 2 * (128 * 72 + 64 * 136) == 107520 > 48 * 1024
    s.geometry(Target.parse("sm_90"))  # within the 227 KiB a block may opt into
    with pytest.raises(SpecError, match="sm_90 allows 232448"):
        GemmSpec(path="mma", block_m=256, block_n=256, block_k=128, waves=16, vector_width=8,
                 stages=4).geometry(Target.parse("sm_90"))


def test_the_async_pipeline_refuses_rows_that_are_not_16_byte_aligned():
    from rocke_aot.variants.families import get_family
    from rocke_aot.variants.problems import GemmProblem

    model = get_family("gemm").model
    s = GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", vector_width=8, stages=3)
    assert model.accepts(s, GemmProblem(37, 40, 72, "f16")) is None
    for m, n, k in ((64, 60, 64), (64, 64, 70)):
        assert "K and N multiples of 8" in model.accepts(s, GemmProblem(m, n, k, "f16"))
    assert model.accepts(GemmSpec(path="mma", in_dtype="f16", out_dtype="f16"), GemmProblem(64, 60, 70, "f16")) is None
