"""bench/gemm_amd_isa.py's counter, checked against references it does not produce: a hand-written
loop assembled by llvm-mc-22 (the counts are read off the source below, one instruction a line),
and for real gfx942 code objects the register counts `llvm-readelf-22 --notes` prints (found by
grep here); both the native and the Triton column must come out with a loop of matrix instructions.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from _bench import load_bench

from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

ROOT = Path(__file__).resolve().parents[1]
MC, OBJDUMP, READELF = "llvm-mc-22", "llvm-objdump-22", "llvm-readelf-22"

# One loop: 3 global loads (16 + 2 + 4 bytes a lane; the dword one goes straight to LDS), one
# 8-byte LDS write, two LDS reads (ds_read2_b64 = 2 x 8 bytes, then 2), one mfma, two waits (one
# a vmcnt(0) drain), one barrier, one backward branch: 13 instructions from the label to it.
SNIPPET = """\
.text
.globl k
.type k,@function
k:
  s_mov_b32 s0, 0
.Lloop:
  global_load_dwordx4 v[0:3], v[4:5], off
  global_load_ushort v6, v[4:5], off
  buffer_load_dword off, s[8:11], 0 lds
  s_waitcnt vmcnt(0)
  ds_write_b64 v8, v[0:1]
  ds_read2_b64 v[10:13], v8 offset1:1
  ds_read_u16 v9, v8
  s_waitcnt lgkmcnt(0)
  s_barrier
  v_mfma_f32_32x32x8_f16 a[0:15], v[10:11], v[12:13], a[0:15]
  s_add_u32 s0, s0, 1
  s_cmp_lg_u32 s0, 4
  s_cbranch_scc1 .Lloop
  s_endpgm
.size k, .-k
"""


def _tool(name: str) -> str:
    return name if subprocess.run(["which", name], capture_output=True).returncode == 0 else \
        f"/usr/lib/llvm-22/bin/{name.rsplit('-', 1)[0]}"


def _assemble(tmp_path, text: str) -> None:
    """``text`` (gfx942 assembly) to tmp_path/k.o with llvm-mc."""
    (tmp_path / "k.s").write_text(text)
    subprocess.run([_tool(MC), "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx942", "-filetype=obj", str(tmp_path / "k.s"),
                    "-o", str(tmp_path / "k.o")], check=True)


def test_counter_on_an_assembled_loop(tmp_path):
    isa, cd = load_bench("gemm_amd_isa"), load_bench("codegen_deltas")
    _assemble(tmp_path, SNIPPET)
    text = subprocess.run([_tool(OBJDUMP), "-d", "--mcpu=gfx942", str(tmp_path / "k.o")], check=True,
                          capture_output=True, text=True).stdout
    start, end, n = cd.main_loop(cd.parse_disassembly(text, "k"), 0)
    assert (start, end, n) == (4, 0x50, 1)  # s_mov_b32 is 4 bytes; the branch is the 14th instruction
    c = isa.memory_counts(isa.loop_instructions(text, "k", start, end))
    assert c["global_load"] == {"buffer_load_dword": 1, "global_load_dwordx4": 1, "global_load_ushort": 1}
    assert (c["global_load_bytes"], c["direct_to_lds"], c["vector_loads_in_flight"]) == (22, 1, 1)
    assert c["lds_read"] == {"ds_read2_b64": 1, "ds_read_u16": 1} and c["lds_read_bytes"] == 18
    assert c["lds_write"] == {"ds_write_b64": 1} and c["lds_write_bytes"] == 8
    assert (c["matrix"], c["matrix_shape"], c["wait"], c["vmcnt0"], c["barrier"], c["branches"], c["insts"]) == \
        (1, "32x32x8", 2, 1, 1, 1, 13)


# Hand-written assembly (the amd-aiter code objects): the kernel symbol has size 0 and every label is
# a symbol of its own in objdump's listing; the reader must still find the loop through the label.
HANDWRITTEN = """\
.text
.globl k
.type k,@function
k:
  s_mov_b32 s0, 0
label_0004:
  global_load_dwordx4 v[0:3], v[4:5], off
  s_waitcnt vmcnt(0)
  ds_read_b128 v[6:9], v8
  v_mfma_f32_32x32x8_f16 a[0:15], v[10:11], v[12:13], a[0:15]
  s_add_u32 s0, s0, 1
  s_cmp_lg_u32 s0, 4
  s_cbranch_scc1 label_0004
  s_endpgm
"""


def test_counter_on_handwritten_assembly(tmp_path):
    isa = load_bench("gemm_amd_isa")
    _assemble(tmp_path, HANDWRITTEN)
    row = isa.read_handwritten(tmp_path / "k.o", "k")
    c = row["loop"]
    assert row["scope"] == "loop" and row["code_bytes"] == 48  # .text: 9 instructions, 3 of them 8 bytes
    assert c["global_load"] == {"global_load_dwordx4": 1} and c["lds_read"] == {"ds_read_b128": 1}
    assert (c["matrix"], c["wait"], c["vmcnt0"], c["branches"], c["insts"]) == (1, 1, 1, 1, 7)


# An outer loop around an inner one, each with matrix instructions (amd-aiter's causal fmha_v3_fwd runs its
# K/V loops inside one): the most matrix instructions are the outer loop's; innermost picks the inner.
NESTED = """\
.text
.globl k
.type k,@function
k:
  s_mov_b32 s0, 0
label_0004:
  v_mfma_f32_32x32x8_f16 a[0:15], v[10:11], v[12:13], a[0:15]
  s_mov_b32 s1, 0
label_0010:
  ds_read_b128 v[6:9], v8
  v_mfma_f32_32x32x8_f16 a[0:15], v[10:11], v[12:13], a[0:15]
  s_add_u32 s1, s1, 1
  s_cmp_lg_u32 s1, 4
  s_cbranch_scc1 label_0010
  s_add_u32 s0, s0, 1
  s_cmp_lg_u32 s0, 4
  s_cbranch_scc1 label_0004
  s_endpgm
"""


def test_innermost_loop_of_nested_loops(tmp_path):
    isa = load_bench("gemm_amd_isa")
    _assemble(tmp_path, NESTED)
    outer, inner = isa.read_handwritten(tmp_path / "k.o", "k"), isa.read_handwritten(tmp_path / "k.o", "k", True)
    assert (outer["loop"]["matrix"], outer["loop"]["insts"], outer["loop"]["branches"]) == (2, 10, 2)
    assert (inner["loop"]["matrix"], inner["loop"]["insts"], inner["loop"]["lds_read"]) == (1, 5, {"ds_read_b128": 1})


# One loop with two back-edges to its header: a guarded block placed after the first (as LLVM lays out
# a staging round under `if`) belongs to the loop; innermost reads the header to the last back-edge.
TWO_EDGES = """\
.text
.globl k
.type k,@function
k:
  s_mov_b32 s0, 0
label_0004:
  v_mfma_f32_32x32x8_f16 a[0:15], v[10:11], v[12:13], a[0:15]
  s_add_u32 s0, s0, 1
  s_cmp_lg_u32 s0, 4
  s_cbranch_execz label_0004
  ds_write_b64 v8, v[0:1]
  s_branch label_0004
  s_endpgm
"""


def test_a_loop_with_two_back_edges(tmp_path):
    isa = load_bench("gemm_amd_isa")
    _assemble(tmp_path, TWO_EDGES)
    tight, whole = isa.read_handwritten(tmp_path / "k.o", "k"), isa.read_handwritten(tmp_path / "k.o", "k", True)
    assert (tight["loop"]["insts"], tight["loop"]["lds_write"]) == (4, {})
    assert (whole["loop"]["insts"], whole["loop"]["lds_write"]) == (6, {"ds_write_b64": 1})


def test_matrix_shape_of_both_mnemonic_styles():
    isa = load_bench("gemm_amd_isa")
    for mn in ("v_mfma_f32_32x32x8_f16", "v_mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8bf16_1k"):
        assert isa.memory_counts([(mn, "")])["matrix_shape"] == "32x32x8", mn
    assert isa.memory_counts([("v_wmma_f32_16x16x32_f16", "")])["matrix_shape"] == "16x16x32"


def test_widths():
    isa = load_bench("gemm_amd_isa")
    assert [isa.width_bits(m) for m in ("global_load_dwordx2", "ds_read_u16", "ds_read2_b64", "ds_read_b64_tr_b16",
                                        "ds_write_b16_d16_hi", "buffer_load_dwordx4")] == [64, 16, 128, 64, 16, 128]
    with pytest.raises(LookupError):
        isa.width_bits("ds_swizzle_b32x")


@pytest.mark.parametrize("kind", ["native-kn", "native-nk", "triton"])
def test_gfx942_columns(kind, tmp_path):
    isa = load_bench("gemm_amd_isa")
    row = isa.compile_one(kind, (64, 64, 32, 4), "gfx942", "llvm22", tmp_path)
    notes = subprocess.run([_tool(READELF), "--notes", str(next(tmp_path.glob("*.hsaco")))], check=True,
                           capture_output=True, text=True).stdout
    assert row["vgpr"] == int(re.search(r"\.vgpr_count:\s+(\d+)", notes).group(1))
    assert row["agpr"] == int(re.search(r"\.agpr_count:\s+(\d+)", notes).group(1))
    assert row["scope"] == "loop" and row["loop"]["matrix"] > 0 and row["k_steps"] >= 1
    assert row["loop"]["global_load_n"] > 0 and row["loop"]["lds_read_n"] > 0
    if kind == "triton":
        assert row["lds_bytes"] > 0  # dynamic shared memory, from Triton's metadata


# The AMD main loop's figures (issue 37), read from code objects the lane compiles: per served
# tile (b_lds nk, vector_width 8: families/gemm/table.py AMD_MATRIX) the interior loop's instructions and
# waits at most what this branch reached (llvm22, objdump-22; bench/results/gemm-amd-isa-*.md), only
# 8- or 16-byte global loads and LDS reads, one branch (the loop's own: no edge work inside), no
# spills. Triton 3.6 for 128x128x32 w4: 75 instructions, 6 waits a K-step (gfx942); 54, 8 (gfx950); for
# 64x64x32 w4: 62, 8 (gfx942); 30, 5 (gfx950); 57, 8 (gfx90a); Triton 3.9 (llvm24) waits 2.25 (gfx950
# 64x64) to 3 (gfx950 128x128) times a step. The 64 x 64 rows take B pairs of 8-byte rows
# (families/gemm/spec.py amd_b_pair_width). build_amd unrolls its loop by 2 (constant stage offsets and
# register sets), single or double buffered: a pass is two K-steps, hence twice the matrix
# instructions, and 4 waits a pass are 2 a step (the LDS reads with the loads issued a step ago, the
# LDS stores before the barrier).
LOOP_CEILINGS = [  # arch, block_m, block_n, double_buffer, matrix, instructions, waits (a pass of the loop)
    ("gfx942", 128, 128, False, 32, 119, 4),
    ("gfx942", 128, 128, True, 32, 117, 4),
    ("gfx942", 64, 64, False, 8, 65, 4),
    ("gfx942", 64, 64, True, 8, 63, 4),
    ("gfx950", 128, 128, False, 16, 104, 4),
    ("gfx950", 128, 128, True, 16, 103, 4),
    ("gfx950", 64, 64, False, 4, 62, 4),
    ("gfx950", 64, 64, True, 4, 61, 4),
    ("gfx1250", 128, 128, False, 32, 230, 4),
    ("gfx1250", 64, 64, False, 8, 111, 6),
    ("gfx90a", 128, 128, False, 32, 131, 4),
    ("gfx90a", 64, 64, False, 8, 79, 4),
    ("gfx90a", 128, 128, True, 32, 129, 4),
    ("gfx1250", 128, 128, True, 32, 214, 4),
    ("gfx1250", 64, 64, True, 8, 105, 4),
]


@pytest.mark.parametrize("arch,bm,bn,db,matrix,insts,waits", LOOP_CEILINGS,
                         ids=[f"{c[0]}-{c[1]}x{c[2]}-{'db' if c[3] else 'sb'}" for c in LOOP_CEILINGS])
def test_amd_main_loop_does_not_regress(arch, bm, bn, db, matrix, insts, waits, tmp_path):
    isa = load_bench("gemm_amd_isa")
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.families.gemm.table import AMD_MATRIX

    spec = {"path": isa.MATRIX_PATH[arch], "block_m": bm, "block_n": bn, "double_buffer": db, **AMD_MATRIX}
    low = lower("gemm", spec, arch, "llvm22")
    path = tmp_path / "k.hsaco"
    target = Target.parse(arch)
    path.write_bytes(tcs.toolchain_for(get_lane("llvm22"), target).compile(low.ir, target, timeout=300).code_object)
    row = isa.read(path, low.kernel_name)
    lp = row["loop"]
    assert row["scope"] == "loop" and lp["matrix"] == matrix
    assert lp["insts"] <= insts and lp["wait"] <= waits, (lp["insts"], lp["wait"])
    assert lp["branches"] == 1  # the back branch: no edge test in the interior loop
    wide = [m for m in (*lp["global_load"], *lp["lds_read"]) if isa.width_bits(m) < 64]
    assert not wide and lp["global_load_n"] and lp["lds_read_n"], wide
    assert (row["vgpr_spills"], row["sgpr_spills"], row["scratch_bytes"]) == (0, 0, 0)


# The waits the lowering states itself (aot/lower/amdgpu.py wait_zero, WAIT_GFX9's encodings) as the
# disassembler prints them in the loop: gfx9 one `s_waitcnt vmcnt(0) lgkmcnt(0)` a step (the LDS
# reads and the loads issued a step ago), the LDS stores' `lgkmcnt(0)` before each barrier, no
# other; gfx1250 the same counters as s_wait_loadcnt / s_wait_dscnt.
@pytest.mark.parametrize("arch", ["gfx942", "gfx950", "gfx1250"])
def test_amd_main_loop_waits_are_the_stated_ones(arch, tmp_path):
    isa = load_bench("gemm_amd_isa")
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.families.gemm.table import AMD_MATRIX

    spec = {"path": isa.MATRIX_PATH[arch], "block_m": 64, "block_n": 64, "double_buffer": True, **AMD_MATRIX}
    low = lower("gemm", spec, arch, "llvm22")
    path = tmp_path / "k.hsaco"
    target = Target.parse(arch)
    path.write_bytes(tcs.toolchain_for(get_lane("llvm22"), target).compile(low.ir, target, timeout=300).code_object)
    text = subprocess.run([_tool(OBJDUMP), "-d", str(path)], check=True, capture_output=True, text=True).stdout
    cd = isa.cd
    base, size = cd.kernel_symbol(cd._run(_tool(READELF), "-s", "-W", str(path)), low.kernel_name)
    start, end = isa.interior_loop(text, low.kernel_name, base, size)
    waits = [(m, " ".join(ops.split())) for m, ops in isa.loop_instructions(text, low.kernel_name, start, end)
             if m.startswith("s_wait")]
    if arch == "gfx1250":  # the backend merged the step's two waits into s_wait_loadcnt_dscnt
        assert waits == [("s_wait_loadcnt_dscnt", "0x0"), ("s_wait_dscnt", "0x0")] * 2, waits
    else:
        assert waits == [("s_waitcnt", "vmcnt(0) lgkmcnt(0)"), ("s_waitcnt", "lgkmcnt(0)")] * 2, waits


# The time model's LDS stores a step (families/gemm/counts.py: A's vector stores, B's 4-byte pair stores,
# amd_b_pair_width of them a unit) against the interior loop's ds_write instructions in the code object
# (a ds_write2 stores two), per K-step of the loop.
@pytest.mark.parametrize("arch,bm,db", [("gfx950", 64, False), ("gfx950", 128, True), ("gfx942", 64, True),
                                        ("gfx942", 128, False)])
def test_amd_main_loop_lds_stores_are_the_counts(arch, bm, db, tmp_path):
    isa = load_bench("gemm_amd_isa")
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.families.gemm.counts import gemm_counts
    from rocke_aot.families.gemm.spec import GemmSpec
    from rocke_aot.families.gemm.table import AMD_MATRIX
    from rocke_aot.targets import Target
    from rocke_aot.variants.problems import GemmProblem

    spec = GemmSpec.from_dict({"path": "mfma", "block_m": bm, "block_n": bm, "double_buffer": db, **AMD_MATRIX})
    low = lower("gemm", spec, arch, "llvm22")
    path = tmp_path / "k.hsaco"
    target = Target.parse(arch)
    path.write_bytes(tcs.toolchain_for(get_lane("llvm22"), target).compile(low.ir, target, timeout=300).code_object)
    lp = isa.read(path, low.kernel_name)["loop"]
    steps = 2  # the loop's pass is two K-steps (build_amd unrolls it by 2)
    stores = sum(n * (2 if m.startswith("ds_write2") else 1) for m, n in lp["lds_write"].items())
    c = gemm_counts(spec, GemmProblem(4096, 4096, 4096), Target.parse(arch))
    assert stores == c.lds_writes * steps, (lp["lds_write"], c.lds_writes)


# No spills on any lane (issue 37): the specs a lane builds only with VGPR spills to scratch are
# refused there by name (tables/conv.py LANE_SPILL_REFUSALS). Re-measured here from the code
# objects each lane's compiler makes of the same spec (`llvm-readelf-22 --notes`): the refusal
# holds while the lane still spills it, and the spec stays served where llvm22 builds it without.
def _notes(tmp_path, family, spec, arch, lane):
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower

    low = lower(family, spec, arch, lane)
    path = tmp_path / f"{lane}-{arch}.hsaco"
    path.write_bytes(tcs.toolchain_for(get_lane(lane), Target.parse(arch)).compile(low.ir, Target.parse(arch), timeout=300).code_object)
    notes = subprocess.run([_tool(READELF), "--notes", str(path)], check=True, capture_output=True, text=True).stdout
    return {k: int(re.search(rf"\.{k}:\s+(\d+)", notes).group(1))
            for k in ("vgpr_count", "vgpr_spill_count", "private_segment_fixed_size")}


@pytest.mark.parametrize("lane,name,arches", [
    ("llvm23", "conv_dgrad_patch_f16_p14c4_fma_t2x4_r14_kc32", ("gfx90a", "gfx942", "gfx950", "gfx1250")),
    ("llvm23", "conv_dgrad_patch_f16_p14c3_fma_t2x4_r14_kc32", ("gfx90a", "gfx942", "gfx950", "gfx1250")),
    ("llvm20", "conv_dgrad_patch_f16_p14c4_mfma_t4x8_r14_kc32", ("gfx90a", "gfx942", "gfx950")),
])
def test_lane_spill_refusals(lane, name, arches, tmp_path):
    from rocke_aot.families.conv_dgrad_patch.table import LANE_SPILL_REFUSALS
    from rocke_aot.variants.table import enumerate_specs, layer_grid

    assert name in LANE_SPILL_REFUSALS[lane]
    served22 = {s.kernel_name: s for s in enumerate_specs("conv_dgrad_patch", "gfx942", "llvm22")}
    assert name in served22
    for arch in arches:
        assert name not in {s.kernel_name for s in enumerate_specs("conv_dgrad_patch", arch, lane)}
    spec = served22[name]
    grid = layer_grid("conv_dgrad_patch", "gfx942", lane, {"dtype": spec.dtype, "c": spec.c, "p": spec.p})
    assert any(name in reason and "scratch" in reason for reason, _ in grid.refused)
    from dataclasses import asdict

    on_lane = _notes(tmp_path, "conv_dgrad_patch", asdict(spec), "gfx942", lane)
    on22 = _notes(tmp_path, "conv_dgrad_patch", asdict(spec), "gfx942", "llvm22")
    assert on_lane["vgpr_spill_count"] > 0 and on_lane["private_segment_fixed_size"] > 0, on_lane
    assert on22["vgpr_spill_count"] == 0 and on22["private_segment_fixed_size"] == 0, on22


# The conv families' interior loops: tests/test_conv_amd_isa.py (one compile per case, per arch).
