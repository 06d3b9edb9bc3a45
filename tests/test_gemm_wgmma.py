"""The warpgroup pipeline (GemmSpec.wgmma, sm_90a): its rules, its shared-memory layout against the
PTX ISA's definition of the 128-byte swizzle, its descriptors' bit fields, the compiler's choice of
sm_90a from the IR, and real compiles on both NVPTX lanes (ptxas's own report: no spills, wgmma not
serialized). Numerics are the GPU's: tests/test_gemm_gpu.py runs every table spec against torch, and
bench/wgmma_layout_probe.py decodes where each operand element lands."""

from __future__ import annotations

import re
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest

from rocke_aot import lanes
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.compiler import compile_llvmlite
from rocke_aot.aot.compiler.ptx import find_ptxas, ptx_processor, ptx_target
from rocke_aot.errors import CapabilityError, CompileError, SpecError
from rocke_aot.families.gemm.counts import gemm_counts
from rocke_aot.families.gemm.lower import lower_gemm
from rocke_aot.families.gemm.lower_warpgroup import descriptor_bits, wgmma_mnemonic
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.targets import Target

SM90 = Target.parse("sm_90")
LLVM22 = lanes.get_lane("llvm22")  # lower_gemm takes what lower() parses


def wg(**kw) -> GemmSpec:
    base = dict(in_dtype="f16", out_dtype="f16", path="mma", block_m=128, block_n=128, block_k=64, waves=8,
                vector_width=8, stages=3, group_m=8, wgmma=True)
    return GemmSpec(**{**base, **kw})


# -- the spec's rules ------------------------------------------------------------------------
@pytest.mark.parametrize("kw,match", [
    (dict(stages=0, vector_width=4), "asynchronous pipeline"),
    (dict(block_k=32), "block_k=64"),
    (dict(waves=2), "whole warpgroups"),
    (dict(block_m=64, waves=8), "warpgroups of whole 64-row"),
    (dict(block_n=32), "multiple of 64"),
    (dict(block_m=256, block_n=256), "accumulators"),
    (dict(block_m=128, block_n=256, waves=4), "accumulators"),
])
def test_wgmma_spec_refuses_what_the_pipeline_cannot_lay_out(kw, match):
    with pytest.raises(SpecError, match=match):
        wg(**kw)


def test_wgmma_leaves_older_specs_and_their_names_as_they_were():
    old = GemmSpec(in_dtype="f16", out_dtype="f16", path="mma", block_m=128, block_n=128, block_k=64, waves=8,
                   vector_width=8, stages=3, group_m=8)
    assert "wgmma" not in old.to_dict() and not old.kernel_name.endswith("_wg")
    new = wg()
    assert new.to_dict()["wgmma"] is True and new.kernel_name.endswith("_wg")
    assert GemmSpec.from_dict(new.to_dict()) == new
    assert new.lds_row_pad == 0  # swizzled, not padded
    g = new.geometry(SM90)  # 2 warpgroups x 4 warps; each warp 16 rows of one m64 tile, 16 n8 slices
    assert (g.threads, g.waves_m, g.waves_n, g.tiles_m, g.tiles_n) == (256, 8, 1, 1, 16)


def test_wgmma_is_refused_off_nvptx():
    with pytest.raises(CapabilityError, match="^mma with f16 inputs is not available on gfx942"):
        wg(block_m=64, block_n=64, waves=4, stages=2).geometry(Target.parse("gfx942"))


# -- the layout against the PTX ISA's 128-byte swizzle ---------------------------------------
def swizzle128(byte: np.ndarray) -> np.ndarray:
    """PTX ISA "Shared Memory Matrix Layout", 128B swizzling: within each 1024-byte pattern the
    16-byte chunk index (address bits 4..6) is XORed with the 128-byte row index (bits 7..9)."""
    return byte ^ (((byte >> 7) & 7) << 4)


@pytest.mark.parametrize("bm,bn,w", [(128, 128, 8), (64, 256, 4), (128, 192, 8), (256, 128, 8)])
def test_swizzled_layout_is_the_ptx_isa_pattern_over_the_canonical_layouts(bm, bn, w):
    s = wg(block_m=bm, block_n=bn, waves=w, stages=2)
    r, k = np.meshgrid(np.arange(bm), np.arange(64), indexing="ij")
    # A, K-major: row r is 128 bytes at r * 128 (8 rows an atom, atoms 1024 bytes apart: SBO)
    got = s.lds_a_index(r, k) * 2
    assert (got == swizzle128(r * 128 + k * 2)).all()
    # B, N-major: 64 columns a swizzle row; a chunk of 64 columns holds the tile's 64 K rows
    # (atoms 1024 bytes apart along K: SBO), the next chunk 64 x 128 bytes further (LBO)
    kk, c = np.meshgrid(np.arange(64), np.arange(bn), indexing="ij")
    got = s.lds_b_index(kk, c) * 2 - bm * 128
    canon = (c // 64) * (64 * 128) + kk * 128 + (c % 64) * 2
    assert (got == swizzle128(canon)).all()
    # a bijection onto the stage, and every 16-byte copy (8 consecutive elements) stays whole
    every = np.concatenate([s.lds_a_index(r, k).ravel(), s.lds_b_index(kk, c).ravel()])
    assert sorted(every) == list(range(bm * 64 + 64 * bn))
    assert (np.diff(s.lds_a_index(r, k)[:, :8], axis=1) == 1).all()


def test_descriptor_bits_follow_the_ptx_isa_fields():
    # PTX ISA "Matrix Descriptor Format": bits 16-29 LBO >> 4, 32-45 SBO >> 4, 62-63 swizzle (1: 128B)
    d = descriptor_bits(8192, 1024)
    assert (d >> 16) & 0x3FFF == 512 and (d >> 32) & 0x3FFF == 64 and d >> 62 == 1
    assert d & 0x3FFF == 0 and (d >> 49) & 7 == 0  # start address added per operand; base offset 0
    with pytest.raises(CapabilityError, match=r"^wgmma descriptor offsets 8, 1024: 16-byte multiples below 256 KiB"):
        descriptor_bits(8, 1024)


# -- the compiler reads sm_90a from the IR ----------------------------------------------------
def test_processor_comes_from_the_ir_and_anything_else_is_refused():
    plain = lower_gemm(wg(wgmma=False, block_k=64), SM90, LLVM22).ir
    assert ptx_processor(plain, "sm_90") == "sm_90"
    ir = lower_gemm(wg(), SM90, LLVM22).ir
    assert ptx_processor(ir, "sm_90") == "sm_90a"
    forged = ir.replace('!"sm_90a"', '!"sm_100a"')
    with pytest.raises(CompileError, match="sm_100a"):
        ptx_processor(forged, "sm_90")
    with pytest.raises(CompileError, match="sm_89"):
        ptx_target(".version 8.0\n.target sm_89\n", "sm_90")
    with pytest.raises(CompileError, match="no .target"):
        ptx_target(".version 8.0\n", "sm_90")


# -- real compiles -------------------------------------------------------------------------
SPECS = [wg(), wg(block_n=256, stages=4), wg(block_m=256, stages=4), wg(block_m=64, block_n=256, waves=4, stages=4),
         wg(in_dtype="bf16", out_dtype="bf16", block_n=192, stages=4), wg(out_dtype="f32", split_k=2, stages=4),
         wg(block_m=128, block_n=64, waves=4, stages=2)]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kernel_name)
def test_wgmma_compiles_to_sm_90a_without_spills_or_serialization(llvm22, tmp_path, spec):
    k = lower_gemm(spec, SM90, LLVM22)
    res = compile_llvmlite(llvm22.python, k.ir, "sm_90", timeout=300)
    assert re.search(r"^\s*\.target\s+sm_90a\b", res.ptx, re.M)
    info = validate(res.code_object, Target.parse("sm_90"), kernel=k.kernel_name)
    assert info.format == "cubin"
    # one wgmma per m64 tile and k-step of a K-tile, exactly the instruction the metadata names
    ins = re.findall(r"\bwgmma\.mma_async\.[\w.]+", res.ptx)
    assert set(ins) == {wgmma_mnemonic(spec)} == {k.metadata["instruction"]}
    assert len(ins) == spec.wgmma_tiles_m * 4
    assert "fence.proxy.async.shared::cta" in res.ptx and "wgmma.fence.sync.aligned" in res.ptx
    assert not re.search(r"\bmma\.sync|\bldmatrix", res.ptx)
    # ptxas's own report of the same PTX (-v): no spills, and it did not serialize the wgmma
    src = tmp_path / "k.ptx"
    src.write_text(res.ptx)
    out = subprocess.run([find_ptxas(), "-arch=sm_90a", "-O3", "-v", str(src), "-o", str(tmp_path / "k.cubin")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    log = out.stdout + out.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in log, log
    assert "serialized" not in log and "Potential Performance Loss" not in log, log


def test_wgmma_compiles_on_llvm20_too(llvm20):
    k = lower_gemm(wg(in_dtype="bf16", out_dtype="f32"), SM90, lanes.get_lane("llvm20"))
    res = compile_llvmlite(llvm20.python, k.ir, "sm_90", timeout=300)
    assert ".target sm_90a" in res.ptx and len(re.findall(r"\bwgmma\.mma_async", res.ptx)) == 4


# -- the hardware model's counts ------------------------------------------------------------
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.kernel_name)
def test_wgmma_counts_conserve_the_tiles_work(spec):
    p = SimpleNamespace(m=4096, n=4096, k=4096, batch=1)
    c = gemm_counts(spec, p, SM90)
    warps = spec.waves
    # every warp's 16x8x16 quarters of its warpgroup's wgmma add up to the block's MACs of a K-tile
    assert c.mma * warps * (16 * 8 * 16) == spec.block_m * spec.block_n * spec.block_k
    assert c.mma_issued == spec.wgmma_tiles_m * spec.block_k // 16  # one wgmma per m64 tile and k-step
    assert c.instr == f"wgmma_f32_m64n8k16_{spec.in_dtype}" and c.lds_reads == 0
    # the tensor cores read every wgmma's operands from shared memory: A 64 x 16, B 16 x N (2 bytes)
    wgmmas = (spec.waves // 4) * spec.wgmma_tiles_m * spec.block_k // 16  # per block and K-tile
    assert c.lds_read_wavefronts * 128 * warps == wgmmas * (64 * 16 + 16 * spec.block_n) * 2
    assert c.lds_write_wavefronts == pytest.approx(  # swizzled copies: no bank conflicts
        (spec.block_m + spec.block_n) * spec.block_k * 2 / 128 / warps)
