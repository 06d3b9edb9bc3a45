"""sm_90 cubin resources and the occupancy they give, each against a reference the code under
test did not produce.

    lower -> compile_llvmlite (the project's compile path: NVPTX -> PTX -> ptxas -> cubin), gemm and
    both conv families
        validate(cubin): registers, static shared memory, stack, barriers, .maxntid
            == ptxas -v on the same PTX (an independent tool; CI has ptxas)
            == the lowering's own LDS size and block size
        .nv.shared.<kernel> section size == ptxas -v "bytes smem" + 1024 (the reserved window)
    groups_per_cu / occupancy on sm_90
        == numbers worked by hand from the CUDA occupancy rules (table below, arithmetic shown)
        == the driver's cuOccupancyMaxActiveBlocksPerMultiprocessor, measured on an H200
           (driver 580.159, CUDA 13.0) and recorded here; the gpu tests measure again
    groups_per_cu on AMD == numbers worked by hand from the arch table's LLVM facts
    the same PTX through every ptxas here (setup's CUDA 13.5 wheel, CUDA 13.0 where installed) ==
        that ptxas's -v
    a corrupt .nv.info (truncated record, unknown format, a record that changes resources or
        launch, named) -> CodeObjectError naming the section; a record with no name passes
    @gpu: the built kernels loaded with cuda.bindings.driver: the driver's NUM_REGS,
        SHARED_SIZE_BYTES, LOCAL_SIZE_BYTES and cuOccupancyMaxActiveBlocksPerMultiprocessor
        (dynamic shared memory 0) == validate() + groups_per_cu

Run the gpu tests on the device machine:  python -m pytest -m gpu tests/test_cubin_resources.py -q
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _cuda import check, cuda_ctx, module_image  # noqa: F401  (shared CUDA helpers; imports CUDA lazily)

from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.compiler import WorkerPool, compile_llvmlite
from rocke_aot.aot.compiler.options import PTXAS_FLAGS
from rocke_aot.aot.compiler.ptx import assemble_cubin, find_ptxas, ptxas_version
from rocke_aot.aot.lower import lower
from rocke_aot.arch import ARCHES
from rocke_aot.candidates import Resources, groups_per_cu, launch_block_size, occupancy
from rocke_aot.errors import CodeObjectError
from rocke_aot.targets import Target
from rocke_aot.variants import table

SM90 = ARCHES["sm_90"]
FAMILIES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")


def _sample_specs(fam: str) -> list:
    specs = list(table.enumerate_specs(fam, "sm_90", "llvm22"))
    return [specs[0], specs[len(specs) // 3], specs[len(specs) // 2], specs[-1]]


def _edge_specs() -> list:
    """Kernels whose cubins carry more: the heaviest mma gemm spills (a stack frame and
    EIATTR_ANNOTATIONS), the p = r_blk = 14 fma patch-dgrad gets EIATTR_UNUSED_LOAD_BYTE_OFFSET."""
    gemm = [s for s in table.enumerate_specs("gemm", "sm_90", "llvm22") if s.path == "mma"]
    dgrad = [s for s in table.enumerate_specs("conv_dgrad_patch", "sm_90", "llvm22")
             if s.path == "fma" and s.p == s.r_blk == 14]
    return [("gemm", max(gemm, key=lambda s: (s.block_m * s.block_n * s.block_k // s.waves, s.kernel_name)))] + \
        [("conv_dgrad_patch", s) for s in sorted(dgrad, key=lambda s: s.kernel_name)[:1]]


@pytest.fixture(scope="module")
def built():
    """(lowered kernel, CompileResult) for four specs of each family on sm_90, and the edge specs."""
    out = []
    with WorkerPool(1) as pool:
        for fam, spec in [(f, s) for f in FAMILIES for s in _sample_specs(f)] + _edge_specs():
            k = lower(fam, spec, "sm_90", "llvm22")
            out.append((k, compile_llvmlite(sys.executable, k.ir, "sm_90", pool=pool)))
    return out


def _ptxas_v(ptx: str, tmp: Path) -> dict[str, int]:
    """What ptxas -v prints for the (single-entry) PTX, with the compile path's own flags."""
    src, dst = tmp / "k.ptx", tmp / "k.cubin"
    src.write_text(ptx)
    # the PTX's own .target: sm_90, or sm_90a for the warpgroup pipeline (aot/compiler/ptx.py)
    arch = re.search(r"^\s*\.target\s+(\w+)", ptx, re.M)[1]
    log = subprocess.run([find_ptxas(), f"-arch={arch}", *PTXAS_FLAGS, "-v", str(src), "-o", str(dst)],
                         capture_output=True, text=True, check=True).stderr
    # "Used 255 registers, used 1 barriers, 560 bytes cumulative stack size, 35840 bytes smem"
    used = re.search(r"Used (\d+) registers, used (\d+) barriers(.*)", log)
    frame = re.search(r"(\d+) bytes stack frame", log)
    assert used and frame, log
    smem = re.search(r"(\d+) bytes smem", used[3])
    return {"regs": int(used[1]), "barriers": int(used[2]), "smem": int(smem[1]) if smem else 0,
            "stack": int(frame[1])}


def _sections(cubin: bytes) -> dict[str, dict]:
    """name -> ELF64 section header fields (offset of the header itself included), read by hand."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    heads = []
    for i in range(shnum):
        at = shoff + i * shentsize
        name, typ, _flags, _addr, off, size = struct.unpack_from("<IIQQQQ", cubin, at)
        heads.append({"name": name, "type": typ, "offset": off, "size": size, "header": at})
    strtab = heads[shstrndx]
    names = cubin[strtab["offset"]:strtab["offset"] + strtab["size"]]
    return {names[h["name"]:names.index(b"\0", h["name"])].decode(): h for h in heads}


# -- parsed resources against ptxas -v -------------------------------------------------------------

def test_cubin_resources_match_ptxas_v(built, tmp_path):
    assert len(built) >= 12
    for k, res in built:
        info = validate(res.code_object, Target.parse("sm_90"), kernel=k.kernel_name)
        want = _ptxas_v(res.ptx, tmp_path)
        got = {"regs": info.vgpr_count, "barriers": info.barrier_count or 0, "smem": info.lds_bytes,
               "stack": info.private_segment_bytes}
        assert got == want, k.kernel_name
        # the lowering's own figures: its shared arrays and its .maxntid (= the launch block)
        assert info.lds_bytes == k.lds_bytes and info.max_flat_workgroup_size == k.block_size, k.kernel_name
        assert (info.sgpr_count, info.agpr_count, info.vgpr_spill_count) == (None, None, None)


def _ptxases() -> dict[str, str]:
    """version line -> path of every ptxas this host has: setup's (beside the interpreter, always)
    and any CUDA install's (this machine: CUDA 13.0 in /usr/local/bin)."""
    out = {}
    for path in (find_ptxas(), shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas", "/usr/local/bin/ptxas"):
        if path and os.access(path, os.X_OK):
            out.setdefault(ptxas_version(path), path)
    return out


def test_cubins_of_every_ptxas_here_validate_to_its_own_v(built, tmp_path, monkeypatch):
    """The served sm_90 PTX assembled by each ptxas on the host (13.5 writes records 13.0 does not,
    e.g. 0x66): validate() reads the resources that ptxas -v prints, and refuses none of them."""
    found = _ptxases()
    assert any("13.5" in v for v in found), found  # setup's pinned wheel
    for version, path in found.items():
        monkeypatch.setenv("ROCKE_AOT_PTXAS", path)
        assert find_ptxas() == path
        for k, res in built[:4] + built[-2:]:
            cubin = assemble_cubin(res.ptx, "sm_90")
            info = validate(cubin, Target.parse("sm_90"), kernel=k.kernel_name)
            want = _ptxas_v(res.ptx, tmp_path)
            got = {"regs": info.vgpr_count, "barriers": info.barrier_count or 0, "smem": info.lds_bytes,
                   "stack": info.private_segment_bytes}
            assert got == want, (version, k.kernel_name)


def test_shared_section_holds_the_reserved_window(built, tmp_path):
    # sm_90 cubins place the kernel's shared variables after the 1 KiB CUDA reserves per block,
    # so the NOBITS section is ptxas -v's "bytes smem" + 1024; validate() reports the former
    for k, res in built:
        smem = _ptxas_v(res.ptx, tmp_path)["smem"]
        sec = _sections(res.code_object)[f".nv.shared.{k.kernel_name}"]
        assert sec["type"] == 8 and sec["size"] == smem + 1024 == validate(res.code_object, Target.parse("sm_90")).lds_bytes + 1024


def test_resources_take_the_block_from_the_launch_contract(built):
    for k, res in built:
        co = validate(res.code_object, Target.parse("sm_90")).as_dict()
        block = launch_block_size(k.launch.as_dict())
        assert block == k.block_size
        r = Resources.from_code_object(co, SM90, block_size=block)
        want = groups_per_cu(SM90, vgprs=co["vgpr_count"], sgprs=None, lds_bytes=co["lds_bytes"],
                             workgroup_size=k.block_size, barriers=co["barrier_count"])
        assert (r.workgroup_size, r.groups_per_cu) == (k.block_size, want) and want >= 1
        assert r.occupancy == want * (k.block_size // 32) // 4
        # without the launch block, the cubin's .maxntid stands in (the lowering sets it to the block)
        assert Resources.from_code_object(co, SM90) == r
        assert r.as_dict()["groups_per_cu"] == want


def test_launch_block_size_reads_literal_blocks_only():
    assert launch_block_size({"block": ["128", "1", "1"]}) == 128
    assert launch_block_size({"block": ["16", "8", "2"]}) == 256
    assert launch_block_size({"block": ["n", "1", "1"]}) is None
    assert launch_block_size({"block": ["0", "1", "1"]}) is None
    assert launch_block_size({"block": ["128"]}) is None
    assert launch_block_size(None) is None and launch_block_size({}) is None


# -- occupancy on sm_90 by hand ---------------------------------------------------------------------
# Rules (CUDA C++ Programming Guide, compute capability 9.0; Hopper tuning guide; cuda_occupancy.h):
# W = ceil(threads / 32) warps per block.
# registers: a warp gets regs * 32 rounded up to 256; each of the 4 sub-partitions holds 65536 / 4 =
#            16384 of them; blocks = floor(floor(16384 / per-warp) * 4 / W); a block whose warps need
#            more than 65536 registers does not fit at all.
# warps:     floor(64 / W).    blocks: 32.    barriers: floor(64 / barriers used).
# shared:    per block roundup(smem + 1024 reserved, 128); blocks = floor(233472 (228 KiB) / that).
# occupancy (warps per sub-partition) = floor(blocks * W / 4).

HAND = [
    # (threads, regs, smem, barriers) -> (blocks, occupancy)
    # registers: 95*32 = 3040 -> 3072/warp; 16384 // 3072 = 5 warps x 4 = 20 warps // 4 = 5 blocks;
    #   warps 64 // 4 = 16; shared 10240 + 1024 = 11264 -> 233472 // 11264 = 20; barriers 64 -> 5;
    #   occupancy 5 * 4 // 4 = 5
    ((128, 95, 10 * 1024, 1), (5, 5)),
    # shared: 40000 + 1024 = 41024 -> 41088 (321 x 128) -> 233472 // 41088 = 5; registers 32*32 = 1024
    #   -> 16 x 4 = 64 warps // 8 = 8; warps 64 // 8 = 8 -> 5; occupancy 5 * 8 // 4 = 10
    ((256, 32, 40000, 1), (5, 10)),
    # warps: 64 // 32 = 2; registers 16*32 = 512 -> 32 x 4 = 128 warps // 32 = 4; shared 1024 -> 228
    #   -> 2; occupancy 2 * 32 // 4 = 16
    ((1024, 16, 0, 1), (2, 16)),
    # blocks: 32; warps 64 // 1 = 64; registers 128 warps // 1 = 128; shared 228; no barriers -> 32;
    #   occupancy 32 * 1 // 4 = 8
    ((32, 16, 0, None), (32, 8)),
    # barriers: 64 // 3 = 21 (else as above: 32) -> 21; occupancy 21 // 4 = 5
    ((32, 16, 0, 3), (21, 5)),
    # no fit: 72*32 = 2304 per warp x 32 warps = 73728 > 65536 registers per block -> 0
    ((1024, 72, 0, 1), (0, 0)),
    # shared granule: 24900 + 1024 = 25924 -> 25984 (203 x 128) -> 233472 // 25984 = 8 (unrounded: 9);
    #   registers 512/warp -> 128 warps // 2 = 64; warps 64 // 2 = 32 -> 8; occupancy 8 * 2 // 4 = 4
    ((64, 16, 24900, 1), (8, 4)),
    # reserved window: 46000 + 1024 = 47024 -> 47104 -> 233472 // 47104 = 4 (without the 1 KiB: 46080
    #   -> 5); occupancy 4 * 1 // 4 = 1
    ((32, 16, 46000, 1), (4, 1)),
    # 255 registers: 8160 -> 8192/warp; 8 warps x 8192 = 65536 fits; 16384 // 8192 = 2 x 4 = 8 warps
    #   // 8 = 1 block; occupancy 1 * 8 // 4 = 2
    ((256, 255, 0, 1), (1, 2)),
]


@pytest.mark.parametrize("case,want", HAND, ids=[f"{t}t-{r}r-{s}B-{b}bar" for (t, r, s, b), _ in HAND])
def test_sm90_groups_per_cu_by_hand(case, want):
    threads, regs, smem, bars = case
    kw = dict(vgprs=regs, sgprs=None, lds_bytes=smem, workgroup_size=threads, barriers=bars)
    assert (groups_per_cu(SM90, **kw), occupancy(SM90, **kw)) == want


def test_sm90_needs_the_block_size_and_registers():
    assert groups_per_cu(SM90, vgprs=32, sgprs=None, lds_bytes=0, workgroup_size=None) is None
    assert occupancy(SM90, vgprs=32, sgprs=None, lds_bytes=0, workgroup_size=None) is None
    # registers unknown: no register limit, an upper bound (128 threads: 64 // 4 warps = 16)
    assert groups_per_cu(SM90, vgprs=None, sgprs=None, lds_bytes=0, workgroup_size=128) == 16
    assert occupancy(SM90, vgprs=None, sgprs=None, lds_bytes=0, workgroup_size=128) is None
    # gfx942, registers unknown: 8 waves x 4 SIMDs // 4 waves per group = 8
    assert groups_per_cu(ARCHES["gfx942"], vgprs=None, sgprs=None, lds_bytes=0, workgroup_size=256) == 8
    assert Resources.from_code_object({}, SM90).groups_per_cu is None
    # a cubin stored before its registers were parsed: no residency rather than an upper bound
    old = Resources.from_code_object({"format": "cubin", "wavefront_size": 32}, SM90, block_size=128)
    assert (old.workgroup_size, old.groups_per_cu, old.occupancy) == (128, None, None)


# -- occupancy on sm_90 against the driver (recorded on an H200) -----------------------------------
# cuOccupancyMaxActiveBlocksPerMultiprocessor(func, block, 0) on an NVIDIA H200 (driver 580.159.04,
# cuda-bindings 13.3.1), for PTX kernels the driver JIT-compiled; registers and static shared bytes
# are the driver's CU_FUNC_ATTRIBUTE_NUM_REGS / SHARED_SIZE_BYTES, barriers what the PTX uses.
H200_BLOCKS = (32, 64, 96, 128, 160, 192, 256, 384, 512, 640, 768, 1024)
H200_MEASURED = [
    # (regs, static shared bytes, barriers) -> blocks per SM at each of H200_BLOCKS
    ((14, 0, 0), (32, 32, 21, 16, 12, 10, 8, 5, 4, 3, 2, 2)),
    ((14, 0, 3), (21, 21, 21, 16, 12, 10, 8, 5, 4, 3, 2, 2)),
    ((14, 0, 5), (12, 12, 12, 12, 12, 10, 8, 5, 4, 3, 2, 2)),
    ((18, 1, 1), (32, 32, 21, 16, 12, 10, 8, 5, 4, 3, 2, 2)),
    ((18, 8192, 1), (25, 25, 21, 16, 12, 10, 8, 5, 4, 3, 2, 2)),
    ((18, 24900, 1), (8, 8, 8, 8, 8, 8, 8, 5, 4, 3, 2, 2)),
    ((18, 31800, 1), (7, 7, 7, 7, 7, 7, 7, 5, 4, 3, 2, 2)),
    ((18, 38500, 1), (5, 5, 5, 5, 5, 5, 5, 5, 4, 3, 2, 2)),
    ((18, 46000, 1), (4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 2, 2)),
    ((18, 49152, 1), (4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 2, 2)),
    ((40, 0, 1), (32, 24, 16, 12, 9, 8, 6, 4, 3, 2, 2, 1)),
    ((72, 0, 1), (28, 14, 9, 7, 5, 4, 3, 2, 1, 1, 1, 0)),
    ((72, 8192, 1), (25, 14, 9, 7, 5, 4, 3, 2, 1, 1, 1, 0)),
    ((72, 12000, 2), (17, 14, 9, 7, 5, 4, 3, 2, 1, 1, 1, 0)),
    ((96, 0, 1), (20, 10, 6, 5, 4, 3, 2, 1, 1, 1, 0, 0)),
    ((96, 20000, 1), (11, 10, 6, 5, 4, 3, 2, 1, 1, 1, 0, 0)),
    ((128, 0, 1), (16, 8, 5, 4, 3, 2, 2, 1, 1, 0, 0, 0)),
    ((168, 0, 1), (12, 6, 4, 3, 2, 2, 1, 1, 0, 0, 0, 0)),
    ((254, 0, 1), (8, 4, 2, 2, 1, 1, 1, 0, 0, 0, 0, 0)),
]
# The project's own kernels (the specs _sample_specs picks, built on the H200 with its ptxas), one
# barrier each: (regs, static shared bytes) -> {block: blocks per SM}.
H200_BUILT = [
    ((56, 5120), {32: 32, 64: 18, 96: 12}),
    ((162, 16384), {32: 12, 64: 6, 96: 4, 128: 3}),
    ((156, 32768), {32: 6, 64: 6, 96: 4, 128: 3}),
    ((44, 3264), {32: 32, 64: 20, 96: 13, 128: 10, 256: 5}),
    ((120, 27712), {32: 8, 64: 8, 96: 5, 128: 4, 256: 2}),
    ((40, 6144), {32: 32, 64: 24, 96: 16, 256: 6, 512: 3}),
    ((218, 43264), {32: 5, 64: 4, 96: 2, 128: 2, 256: 1}),
    ((40, 2048), {32: 32, 64: 24, 96: 16, 192: 8}),
    ((64, 6656), {32: 30, 64: 16, 96: 10, 128: 8, 256: 4}),
    ((128, 13312), {32: 16, 64: 8, 96: 5, 128: 4, 256: 2}),
    ((128, 25088), {32: 8, 64: 8, 96: 5, 128: 4, 256: 2}),
    # spilling ones (stack frames of 232, 8, 560, 32 bytes: the driver's LOCAL_SIZE_BYTES equalled
    # private_segment_bytes) and a 296-thread block (not a whole number of warps)
    ((255, 37888), {32: 6, 64: 4}),
    ((48, 12288), {32: 17, 64: 17, 128: 10}),
    ((255, 35840), {32: 6, 64: 4}),
    ((128, 24832), {32: 9, 64: 8, 256: 2}),
    ((152, 19200), {32: 11, 64: 6, 296: 1}),
]


def test_sm90_groups_per_cu_matches_the_h200_driver():
    cases = [((r, s, b), dict(zip(H200_BLOCKS, occ))) for (r, s, b), occ in H200_MEASURED]
    cases += [((r, s, 1), occ) for (r, s), occ in H200_BUILT]
    for (regs, smem, bars), by_block in cases:
        got = {blk: groups_per_cu(SM90, vgprs=regs, sgprs=None, lds_bytes=smem, workgroup_size=blk, barriers=bars)
               for blk in by_block}
        assert got == by_block, (regs, smem, bars)


# -- AMD work-groups per CU by hand -----------------------------------------------------------------
# waves per SIMD w = min(max_waves_per_simd, floor(max_vgprs / roundup(vgprs, granule)), SGPR table on
# GFX9); groups = min(floor(w * simds_per_cu / waves per group), floor(LDS per CU / LDS per group)).

AMD_HAND = [
    # gfx942: 100 VGPRs -> 104 -> 512 // 104 = 4 waves/SIMD x 4 SIMDs = 16 waves // 4 per group = 4
    ("gfx942", (256, 100, 30, 0), 4),
    # gfx942: 16 VGPRs -> 32 waves, capped at 8 x 4 = 32 waves // 16 per group = 2; LDS 65536 // 40000 = 1
    ("gfx942", (1024, 16, 16, 40000), 1),
    # gfx942: 200 VGPRs -> 208 -> 2 waves x 4 = 8 waves < 16 per group: the group does not fit
    ("gfx942", (1024, 200, 16, 0), 0),
    # gfx950: 32 VGPRs -> 16, capped at 8 x 4 = 32 waves // 4 = 8; LDS 163840 // 32768 = 5
    ("gfx950", (256, 32, 16, 32768), 5),
    # gfx90a: 102 SGPRs -> 7 waves (GFX9 table) x 4 = 28 waves // 1 per group = 28
    ("gfx90a", (64, 16, 102, 0), 28),
    # gfx1250 (wave32, 2 SIMDs): 200 VGPRs -> 208 -> 1024 // 208 = 4 x 2 = 8 waves // 8 per group = 1
    ("gfx1250", (256, 200, 106, 0), 1),
]


@pytest.mark.parametrize("arch,case,want", AMD_HAND, ids=[f"{a}-{c[0]}t-{c[1]}v" for a, c, _ in AMD_HAND])
def test_amd_groups_per_cu_by_hand(arch, case, want):
    threads, vgprs, sgprs, lds = case
    assert groups_per_cu(ARCHES[arch], vgprs=vgprs, sgprs=sgprs, lds_bytes=lds, workgroup_size=threads) == want


# -- corrupt .nv.info -------------------------------------------------------------------------------

def _patched(cubin: bytes, at: int, new: bytes) -> bytes:
    return cubin[:at] + new + cubin[at + len(new):]


def _shrunk(cubin: bytes, section: str, by: int) -> bytes:
    sec = _sections(cubin)[section]
    return _patched(cubin, sec["header"] + 32, struct.pack("<Q", sec["size"] - by))  # sh_size


@pytest.fixture(scope="module")
def gemm_cubin(built):
    k, res = built[0]
    return k.kernel_name, res.code_object


def test_truncated_nv_info_names_the_section(gemm_cubin):
    name, cubin = gemm_cubin
    # global .nv.info: three 12-byte records; 2 bytes short, the last record's 8-byte payload is cut
    with pytest.raises(CodeObjectError, match=r"^\.nv\.info: record 0x12 at offset 24 claims 8 bytes, 6 remain"):
        validate(_shrunk(cubin, ".nv.info", 2), Target.parse("sm_90"))
    # 10 bytes short: only half a record header is left
    with pytest.raises(CodeObjectError, match=r"^\.nv\.info: truncated record at offset 24 \(2 bytes left\)"):
        validate(_shrunk(cubin, ".nv.info", 10), Target.parse("sm_90"))
    with pytest.raises(CodeObjectError, match=rf"^\.nv\.info\.{name}: .*truncated"):
        validate(_shrunk(cubin, f".nv.info.{name}", 2), Target.parse("sm_90"))


def test_records_that_change_resources_or_launch_are_refused_by_name(gemm_cubin):
    name, cubin = gemm_cubin
    own = _sections(cubin)[f".nv.info.{name}"]
    first = cubin[own["offset"]:own["offset"] + 8]
    # EIFMT_SVAL, EIATTR_LANGUAGE (0x66), 4 bytes, 3 (PTX): CUDA 13.5's ptxas (setup's) writes it first;
    # its cuobjdump -elf names it (issue 39: 13.5-built kernels failed here as "unknown attribute 0x66")
    assert first == bytes([4, 0x66, 4, 0, 3, 0, 0, 0])
    assert find_ptxas() == str(Path(sys.executable).parent / "ptxas")  # the one setup linked, not PATH's
    cases = [(bytes([7, 0x66]), "record at offset 0 has unknown format 7"),
             (bytes([4, 0x32]), r"EIATTR_SHARED_SCRATCH \(0x32\) at offset 0 changes the kernel's resources"),
             (bytes([4, 0x54]), r"EIATTR_REG_RECONFIG \(0x54\) at offset 0 changes the kernel's resources"),
             (bytes([4, 0x3D]), r"EIATTR_CTA_PER_CLUSTER \(0x3d\) at offset 0"),
             # the 4-byte payload (3) relabelled: a kernel that triggers programmatic dependent launch
             (bytes([4, 0x6D]), r"EIATTR_PREEXIT_USED \(0x6d\) at offset 0 is 0x03000000: the kernel triggers "
                                r"programmatic dependent launch")]
    for head, why in cases:
        with pytest.raises(CodeObjectError, match=rf"^\.nv\.info\.{name}: {why}"):
            validate(_patched(cubin, own["offset"], head), Target.parse("sm_90"))
    # a record with no name here (a newer ptxas's) passes once framed: the resources are read from the
    # named records only, so they come out the same
    base = validate(cubin, Target.parse("sm_90")).as_dict()
    for head in (bytes([4, 0x7E]), bytes([4, 0x6D, 4, 0, 0, 0, 0, 0])):  # unknown; PREEXIT_USED = 0
        assert validate(_patched(cubin, own["offset"], head), Target.parse("sm_90")).as_dict() == base
    # a record of the wrong size: the 4-byte LANGUAGE relabelled EIATTR_MAX_THREADS (12 bytes)
    with pytest.raises(CodeObjectError, match=rf"^\.nv\.info\.{name}: EIATTR_MAX_THREADS at offset 0 has 4 "
                                              "bytes, expected 12"):
        validate(_patched(cubin, own["offset"], bytes([4, 0x05])), Target.parse("sm_90"))
    glob = _sections(cubin)[".nv.info"]
    # REGCOUNT, FRAME_SIZE, MIN_STACK_SIZE of the kernel, 12 bytes each; FRAME_SIZE relabelled
    # REGCOUNT gives the kernel two register counts
    assert [cubin[glob["offset"] + i:glob["offset"] + i + 4] for i in (0, 12, 24)] == \
        [bytes([4, a, 8, 0]) for a in (0x2F, 0x11, 0x12)]
    with pytest.raises(CodeObjectError, match=r"^\.nv\.info: second EIATTR_REGCOUNT for symbol \d+ at offset 12"):
        validate(_patched(cubin, glob["offset"] + 12, bytes([4, 0x2F])), Target.parse("sm_90"))


def test_missing_regcount_is_an_error(gemm_cubin):
    name, cubin = gemm_cubin
    glob = _sections(cubin)[".nv.info"]
    # retarget the REGCOUNT record to another symbol: the kernel then has no register count
    sym, = struct.unpack_from("<I", cubin, glob["offset"] + 4)
    with pytest.raises(CodeObjectError, match=rf"no EIATTR_REGCOUNT for kernel {name}"):
        validate(_patched(cubin, glob["offset"] + 4, struct.pack("<I", sym + 100)), Target.parse("sm_90"))


def test_barriers_in_text_flags_as_cuda_12_writes_them(gemm_cubin):
    # CUDA 12.x ptxas (12.9 checked: "used 1/3/5/16 barriers") writes no EIATTR_NUM_BARRIERS and keeps
    # the count in bits 20..26 of the kernel's .text section flags; CUDA 13 writes the record
    name, cubin = gemm_cubin
    secs = _sections(cubin)
    text, own = secs[f".text.{name}"], secs[f".nv.info.{name}"]
    flags, = struct.unpack_from("<Q", cubin, text["header"] + 8)
    assert flags >> 20 & 0x7F == 0 and validate(cubin, Target.parse("sm_90")).barrier_count == 1
    data = cubin[own["offset"]:own["offset"] + own["size"]]
    at = own["offset"] + next(i for i in range(0, len(data), 4) if data[i:i + 4] == bytes([2, 0x4C, 1, 0]))
    as_12 = _patched(_patched(cubin, at, bytes([2, 0x04])),  # the record becomes EIATTR_CTAIDZ_USED
                     text["header"] + 8, struct.pack("<Q", flags | 1 << 20))
    assert validate(as_12, Target.parse("sm_90")).barrier_count == 1
    with pytest.raises(CodeObjectError, match="EIATTR_NUM_BARRIERS 1 disagrees with the 3 barriers"):
        validate(_patched(cubin, text["header"] + 8, struct.pack("<Q", flags | 3 << 20)), Target.parse("sm_90"))


# -- on a real GPU ------------------------------------------------------------------------------------

def _nv_function(image: bytes, name: str):
    from cuda.bindings import driver as cu

    img = np.frombuffer(image, dtype=np.uint8)
    module = check(cu.cuModuleLoadData(img.ctypes.data))
    return module, check(cu.cuModuleGetFunction(module, name.encode()))


@pytest.mark.gpu
def test_sm90_resources_and_occupancy_match_the_driver(cuda_ctx):  # noqa: F811
    from cuda.bindings import driver as cu

    dev = check(cu.cuCtxGetDevice())
    a = cu.CUdevice_attribute
    cc = (check(cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)),
          check(cu.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)))
    assert cc == (9, 0), f"the sm_90 facts need a compute capability 9.0 device, this one is {cc}"
    facts = {a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: SM90.lds_per_cu,
             a.CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK: SM90.lds_reserved_per_group,
             a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: SM90.regs_per_cu,
             a.CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: SM90.regs_per_group,
             a.CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: SM90.max_groups_per_cu,
             a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: SM90.max_waves_per_simd * SM90.simds_per_cu * 32}
    assert {k: check(cu.cuDeviceGetAttribute(k, dev)) for k in facts} == facts

    fa = cu.CUfunction_attribute
    for fam, spec in [(f, s) for f in FAMILIES for s in _sample_specs(f)] + _edge_specs():
        k = lower(fam, spec, "sm_90", "llvm22")
        image, how = module_image(k.ir)
        assert how.startswith("cubin"), f"{k.kernel_name}: no ptxas here ({how}); the test reads the cubin"
        info = validate(image, Target.parse("sm_90"), kernel=k.kernel_name)
        module, fn = _nv_function(image, k.kernel_name)
        try:
            attrs = [check(cu.cuFuncGetAttribute(x, fn)) for x in (
                fa.CU_FUNC_ATTRIBUTE_NUM_REGS, fa.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                fa.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)]
            assert attrs == [info.vgpr_count, info.lds_bytes, info.private_segment_bytes], k.kernel_name
            for block in sorted({32, 64, 96, k.block_size // 2 or 32, k.block_size}):
                driver = check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, block, 0))
                ours = groups_per_cu(SM90, vgprs=info.vgpr_count, sgprs=None, lds_bytes=info.lds_bytes,
                                     workgroup_size=block, barriers=info.barrier_count)
                assert ours == driver, (k.kernel_name, block)
        finally:
            cu.cuModuleUnload(module)


def _ptx(regs: int, smem: int, barriers: int) -> bytes:
    """A kernel holding ``regs`` loaded values live at once, ``smem`` static shared bytes and
    ``barriers`` named barriers (bar.sync 0 .. barriers-1), for the driver to JIT-compile."""
    lines = [".version 8.0", ".target sm_90", ".address_size 64"]
    if smem:
        lines.append(f".shared .align 16 .b8 s[{smem}];")
    lines += [".visible .entry k(.param .u64 p)", "{", f".reg .b32 %r<{regs + 4}>;", ".reg .b64 %rd<8>;",
              "ld.param.u64 %rd1, [p];", "cvta.to.global.u64 %rd2, %rd1;", "mov.u32 %r0, %tid.x;"]
    lines += [f"ld.volatile.global.u32 %r{i + 1}, [%rd2+{4 * i}];" for i in range(regs)]
    lines += [f"st.volatile.global.u32 [%rd2+{4 * i}], %r{i + 1};" for i in reversed(range(regs))]
    if smem:
        lines += ["mov.u64 %rd3, s;", "mul.wide.u32 %rd4, %r0, 4;", "add.u64 %rd5, %rd3, %rd4;",
                  "st.shared.u32 [%rd5], %r0;", f"ld.shared.u32 %r1, [%rd3+{smem - 4}];", "st.global.u32 [%rd2], %r1;"]
    lines += [f"bar.sync {i};" for i in range(barriers)] + ["ret;", "}"]
    return "\n".join(lines).encode() + b"\0"


@pytest.mark.gpu
@pytest.mark.parametrize("regs,smem,barriers", [(4, 0, 0), (4, 0, 3), (4, 46000, 1), (4, 24900, 1), (30, 0, 1),
                                                (90, 20000, 1), (60, 12000, 2), (220, 0, 1)])
def test_sm90_model_matches_the_driver_on_shaped_kernels(cuda_ctx, regs, smem, barriers):  # noqa: F811
    # shared-, barrier-, warp-, block- and register-limited shapes, JIT-compiled by the driver; the
    # model is fed the driver's own register and shared-memory counts
    from cuda.bindings import driver as cu

    f = cu.CUfunction_attribute
    module, fn = _nv_function(_ptx(regs, smem, barriers), "k")
    try:
        nregs = check(cu.cuFuncGetAttribute(f.CU_FUNC_ATTRIBUTE_NUM_REGS, fn))
        shared = check(cu.cuFuncGetAttribute(f.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn))
        assert shared == smem
        for block in H200_BLOCKS:
            driver = check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn, block, 0))
            assert groups_per_cu(SM90, vgprs=nregs, sgprs=None, lds_bytes=shared, workgroup_size=block,
                                 barriers=barriers) == driver, (nregs, shared, barriers, block)
    finally:
        cu.cuModuleUnload(module)
