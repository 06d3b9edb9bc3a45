"""Every (arch, path) the gemm lowering implements compiles for real: llvm22 everywhere,
llvm20 where the lane admits it; matrix instructions are in the disassembly; kernel
descriptors enable only the kernarg segment pointer, with or without LLVM's attributor."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rocke_aot import lanes
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.compiler import compile_llvmlite
from rocke_aot.aot.lower import lower
from rocke_aot.errors import CapabilityError
from rocke_aot.families.gemm.lower import paths_for
from rocke_aot.families.gemm.spec import GemmSpec, quad_stores
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

LLVM22_BIN = Path("/usr/lib/llvm-22/bin")
ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1250", "sm_90")
CASES = [(a, p) for a in ARCHES for p in paths_for(a)]
# The user SGPRs a kernel that needs nothing but its kernargs gets. gfx90a has no
# architected flat scratch, so the private segment buffer (s[0:3]) always precedes the
# kernarg pointer there; gfx942+ get the kernarg pointer alone, in s[0:1].
MINIMAL_INPUTS = {"gfx90a": ("private_segment_buffer", "kernarg_segment_ptr")}
KERNARG_ONLY = ("kernarg_segment_ptr",)


def _lane_admits(lane: str, arch: str) -> bool:
    return lanes.get_lane(lane).profile.has(f"target:{arch}")


def _objdump(hsaco: bytes, arch: str, tmp_path: Path) -> str:
    f = tmp_path / f"{arch}.hsaco"
    f.write_bytes(hsaco)
    return subprocess.run([str(LLVM22_BIN / "llvm-objdump"), "-d", f"--mcpu={arch}", str(f)],
                          capture_output=True, text=True, check=True).stdout


def _check(result, k, arch, tmp_path):
    info = validate(result.code_object, Target.parse(arch), kernel=k.kernel_name)
    if result.format == "cubin":
        assert result.ptx and ".target sm_90" in result.ptx
        matrix = set(re.findall(r"\b(?:mma\.sync|wgmma\.mma_async)\.[\w.]+", result.ptx))
        if k.metadata["path"] == "fma":
            assert not matrix and "fma.rn.f32" in result.ptx
        else:  # the tensor-core path: exactly the instruction the lowering named
            assert matrix == {k.metadata["instruction"]}, matrix
        return info
    assert info.kernarg_size == k.kernarg_size == 36
    assert info.lds_bytes == k.lds_bytes
    assert info.wavefront_size == Target.parse(arch).wave_size
    assert info.private_segment_bytes == 0, "no spills for the default tiles"
    assert info.descriptor.user_sgpr_inputs == MINIMAL_INPUTS.get(Target.parse(arch).processor, KERNARG_ONLY)
    asm = _objdump(result.code_object, Target.parse(arch).processor, tmp_path)
    matrix = set(re.findall(r"\bv_(?:mfma|wmma)\w*", asm))
    if k.metadata["path"] == "fma":
        assert not matrix
        assert re.search(r"\bv_(?:fma|fmac|pk_fma)\w*_f32", asm)
    else:
        assert matrix == {k.metadata["instruction"]}, matrix
    return info


@pytest.mark.parametrize("arch,path", CASES)
def test_gemm_compiles_on_llvm22(llvm22, tmp_path, arch, path):
    k = lower("gemm", GemmSpec(path=path), arch, "llvm22")
    _check(compile_llvmlite(llvm22.python, k.ir, arch), k, arch, tmp_path)


@pytest.mark.parametrize("arch,path", [c for c in CASES if _lane_admits("llvm20", c[0])])
def test_gemm_compiles_on_llvm20(llvm20, tmp_path, arch, path):
    k = lower("gemm", GemmSpec(path=path, in_dtype="bf16", out_dtype="bf16"), arch, "llvm20")
    _check(compile_llvmlite(llvm20.python, k.ir, arch), k, arch, tmp_path)


def test_gfx1250_not_admitted_on_llvm20():
    assert not _lane_admits("llvm20", "gfx1250")
    for path in paths_for("gfx1250"):
        with pytest.raises(CapabilityError, match="gfx1250"):
            lower("gemm", GemmSpec(path=path), "gfx1250", "llvm20")


# dtype, instruction-shape and knob variety (one compile each, llvm22)
VARIANTS = [
    ("gfx90a", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="f16", mma="16x16x16", block_m=32)),
    ("gfx942", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", double_buffer=True, vector_width=8)),
    ("gfx942", GemmSpec(path="mfma", mma="16x16x16", block_m=128, block_n=32, waves=2, vector_width=1)),
    ("gfx950", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="f32", block_m=128, block_n=128, waves=4)),
    ("gfx950", GemmSpec(path="mfma", mma="32x32x8", out_dtype="f16", double_buffer=True)),
    ("gfx1250", GemmSpec(path="wmma", in_dtype="bf16", out_dtype="bf16", double_buffer=True, block_k=64)),
    ("gfx1250", GemmSpec(path="fma", out_dtype="f16", waves=2, block_m=32, block_n=32, vector_width=2)),
    ("sm_90", GemmSpec(path="fma", in_dtype="bf16", out_dtype="bf16", double_buffer=True, vector_width=8)),
    ("sm_90", GemmSpec(path="mma", in_dtype="bf16", out_dtype="f32", block_m=128, block_n=64, block_k=32, waves=4,
                       vector_width=8, stages=4, group_m=8)),
]


@pytest.mark.parametrize("arch,path", [("gfx942", "mfma"), ("gfx950", "mfma"), ("gfx1250", "wmma")])
def test_a_transposed_b_tile_reads_every_fragment_wide(llvm22, tmp_path, arch, path):
    """b_lds "nk" (the AMD tables' layout): the disassembly reads A and B fragments from LDS
    with 64/128-bit loads only -- no 16-bit LDS read is left -- where the K x N layout needs
    one per B element; the matrix instruction count is the same."""
    spec = dict(path=path, in_dtype="f16", out_dtype="f16", block_m=64, block_n=64, block_k=32, waves=4)
    asms = {}
    for b in ("kn", "nk"):
        k = lower("gemm", GemmSpec(**spec, b_lds=b), arch, "llvm22")
        asms[b] = _objdump(compile_llvmlite(llvm22.python, k.ir, arch).code_object, arch, tmp_path)
    narrow = re.compile(r"^\s+ds_(?:read|load)_u16\b", re.M)
    wide = re.compile(r"^\s+ds_(?:read2?|load)_b(?:64|128)\b", re.M)
    matrix = re.compile(r"^\s+v_(?:mfma|wmma)\w*", re.M)
    assert narrow.findall(asms["kn"]) and not narrow.findall(asms["nk"])
    assert len(wide.findall(asms["nk"])) > len(wide.findall(asms["kn"]))
    assert len(matrix.findall(asms["nk"])) == len(matrix.findall(asms["kn"])) > 0


@pytest.mark.parametrize("spec", [
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=128, block_n=128, block_k=64, waves=4,
             vector_width=8, stages=3, group_m=8),
    GemmSpec(path="mma", in_dtype="bf16", out_dtype="bf16", block_m=64, block_n=32, block_k=32, waves=4,
             vector_width=8, stages=2),  # an odd number of 8-wide B tiles per warp: ldmatrix .x2.trans
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4,
             vector_width=8, stages=3),
    GemmSpec(path="mma", in_dtype="f16", out_dtype="f16", block_m=192, block_n=128, block_k=64, waves=8,
             vector_width=8, stages=3, group_m=8),  # the 192-row tile: 3 m16 tiles a warp, 6 copy rounds of A
    GemmSpec(path="mma", in_dtype="bf16", out_dtype="f32", block_m=128, block_n=192, block_k=32, waves=8,
             vector_width=8, stages=4),  # 192 columns: B copied in three panels, 6 n8 tiles a warp
], ids=lambda s: s.kernel_name)
def test_async_pipeline_counts_are_the_ptx(llvm22, spec):
    """The hardware model's counts of the asynchronous pipeline (variants/counts.py) against the
    PTX LLVM emits for it: per thread, ``stages`` x the copies of one step (stages - 1 in the
    prologue, one in the loop), and the loop's mma.sync and ldmatrix per warp per step; the
    dynamic shared memory of the launch contract is what the stages need."""
    from rocke_aot.families.gemm.counts import gemm_counts
    from rocke_aot.variants.problems import GemmProblem

    k = lower("gemm", spec, "sm_90", "llvm22")
    ptx = compile_llvmlite(llvm22.python, k.ir, "sm_90").ptx
    c = gemm_counts(spec, GemmProblem(4096, 4096, 4096), Target.parse("sm_90"))
    assert len(re.findall(r"\bcp\.async\.cg\.shared\.global\b", ptx)) == spec.stages * c.global_loads
    assert len(re.findall(r"\bmma\.sync\.aligned\b", ptx)) == c.mma
    # the loop's reads per step, and the first k-step's before the loop (build_async: the
    # fragments of k-step ks + 1 are read while k-step ks's mma.sync issue)
    ksteps = spec.block_k // 16
    assert len(re.findall(r"\bldmatrix\.sync\.aligned\b", ptx)) == c.lds_reads + c.lds_reads // ksteps
    assert "cp.async.wait_group" in ptx and ".extern .shared" in ptx
    assert k.launch.dynamic_shared_bytes == spec.lds_bytes() == k.dynamic_lds_bytes
    assert c.lds_read_wavefronts * (ksteps + 1) / ksteps == 4 * len(re.findall(r"ldmatrix[\w.]*\.x4", ptx)) + \
        2 * len(re.findall(r"ldmatrix[\w.]*\.x2", ptx))  # padded rows: one cycle per 8x8 matrix
    # the epilogue: one store a pair, or (2-byte output, quad_stores) one 8-byte store and one
    # shuffle per two pairs; store_bytes in whole 32-byte sectors either way
    stores = re.findall(r"\bst\.global\.(\S+)", ptx)
    assert len(stores) == c.stores
    quads = quad_stores(spec, spec.geometry(Target.parse("sm_90")))
    assert len(re.findall(r"\bshfl\.sync\.bfly\b", ptx)) == (c.stores if quads else 0)
    assert set(stores) == ({"v2.b32"} if quads or spec.out_dtype == "f32" else {"b32"})  # 8 or 4 bytes a lane
    ob = 4 if spec.out_dtype == "f32" else 2
    assert c.store_bytes == spec.block_m * spec.block_n * ob * (1 if quads or ob == 4 else 2)


@pytest.mark.parametrize("arch,spec", VARIANTS, ids=[f"{a}-{s.kernel_name}" for a, s in VARIANTS])
def test_gemm_variants_compile(llvm22, tmp_path, arch, spec):
    k = lower("gemm", spec, arch, "llvm22")
    _check(compile_llvmlite(llvm22.python, k.ir, arch), k, arch, tmp_path)


@pytest.mark.parametrize("arch,path", [("gfx942", "fma"), ("gfx942", "mfma"), ("gfx1250", "wmma")])
def test_descriptor_minimal_without_the_attributor(tmp_path, arch, path):
    """Code generation alone (llc: no middle-end, so no AMDGPU attributor, as with LLVM 24's
    code generator) still gives a kernarg-only descriptor, because the lowering states the
    implicit inputs the kernel does not use. Without those attributes it would not."""
    k = lower("gemm", GemmSpec(path=path), arch, "llvm22")
    stripped = re.sub(r' "amdgpu-no-[a-z-]+"', "", k.ir)
    assert stripped != k.ir
    got = {}
    for name, text in (("ours", k.ir), ("stripped", stripped)):
        ll, obj, hsaco = tmp_path / f"{name}.ll", tmp_path / f"{name}.o", tmp_path / f"{name}.hsaco"
        ll.write_text(text)
        subprocess.run([str(LLVM22_BIN / "llc"), "-O3", "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}",
                        "-filetype=obj", str(ll), "-o", str(obj)], check=True, capture_output=True)
        subprocess.run([str(LLVM22_BIN / "ld.lld"), "-shared", str(obj), "-o", str(hsaco)], check=True)
        got[name] = validate(hsaco.read_bytes(), Target.parse(arch), kernel=k.kernel_name).descriptor
    assert got["ours"].user_sgpr_inputs == ("kernarg_segment_ptr",)
    assert got["ours"].workgroup_ids == ("x",) and got["ours"].workitem_id_dims == 1
    # the control: the same kernel without the attributes asks for pointers it never reads
    assert {"dispatch_ptr", "queue_ptr"} <= set(got["stripped"].user_sgpr_inputs)
    asm = subprocess.run([str(LLVM22_BIN / "llvm-objdump"), "-d", f"--mcpu={arch}", str(tmp_path / "ours.hsaco")],
                         capture_output=True, text=True, check=True).stdout
    assert re.search(r"s_load_\w+ s\[\d+:\d+\], s\[0:1\]", asm), "kernargs are read through s[0:1]"


@pytest.fixture(scope="module")
def llvm24_toolchain(all_toolchains):
    from rocke_aot.aot import toolchains as tcs

    found = tcs.toolchains_for_lane(get_lane("llvm24"), all_toolchains)
    if not found:
        pytest.fail("no llvm24 toolchain on this host: run `bash scripts/setup.sh` "
                    "(it runs `rocke-aot toolchain install llvm24`)")
    return found[0]


@pytest.mark.parametrize("arch,path", [("gfx942", "mfma"), ("gfx950:sramecc+:xnack-", "mfma"),
                                       ("gfx1250", "wmma"), ("gfx942", "fma")])
def test_llvm24_code_generator_gives_minimal_descriptors(llvm24_toolchain, llvm22, tmp_path, arch, path):
    """LLVM 24's code generator runs no attributor: the kernel's own amdgpu-no-* attributes
    are what keep its descriptor to the kernarg pointer, the same as the llvm22 build."""
    spec = GemmSpec(path=path)
    k24 = lower("gemm", spec, arch, "llvm24")
    info24 = validate(llvm24_toolchain.compile(k24.ir, Target.parse(arch)).code_object, Target.parse(arch), kernel=k24.kernel_name)
    k22 = lower("gemm", spec, arch, "llvm22")
    info22 = _check(compile_llvmlite(llvm22.python, k22.ir, arch), k22, arch, tmp_path)
    assert info24.descriptor.user_sgpr_inputs == info22.descriptor.user_sgpr_inputs == KERNARG_ONLY
    assert info24.descriptor.workgroup_ids == ("x",)
    assert info24.sramecc == info22.sramecc  # the target ID's setting survives (module flags)


def _extremes(arch: str) -> list[GemmSpec]:
    """The served grid's heaviest specs on ``arch``: largest LDS, and largest tile per path."""
    from rocke_aot.variants import table

    specs = list(table.enumerate_specs("gemm", arch, "llvm22"))
    picks = {max(specs, key=lambda s: (s.lds_bytes(), s.block_m * s.block_n, s.kernel_name))}
    for path in {s.path for s in specs}:
        mine = [s for s in specs if s.path == path]
        picks.add(max(mine, key=lambda s: (s.block_m * s.block_n // s.waves, s.block_k, s.kernel_name)))
    return sorted(picks, key=lambda s: s.kernel_name)


@pytest.mark.parametrize("arch", ARCHES)
def test_heaviest_grid_specs_compile_without_spills(llvm22, tmp_path, arch):
    """What the variant table serves must build: the specs at the edge of the grid compile,
    fit the arch (LDS, static shared memory on sm_90) and do not spill."""
    for spec in _extremes(arch):
        k = lower("gemm", spec, arch, "llvm22")
        info = _check(compile_llvmlite(llvm22.python, k.ir, arch, timeout=300), k, arch, tmp_path)
        if arch != "sm_90":
            assert info.vgpr_spill_count in (0, None) and info.private_segment_bytes == 0, spec
