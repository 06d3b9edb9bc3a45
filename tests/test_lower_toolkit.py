"""The lowering toolkit without a compiler: profiles drive the IR, refusals come first,
IR is deterministic, kernel attributes state the implicit inputs, the digest tracks source."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import pytest

from rocke_aot import lanes
from rocke_aot.aot.families import families, get_family
from rocke_aot.aot.lower import LoweredKernel, lower
from rocke_aot.aot.lower.amdgpu import AmdgpuKernel
from rocke_aot.aot.lower.module import MAX_TENSOR_BYTES, parse_type
from rocke_aot.errors import CapabilityError, LaneError, SpecError
from rocke_aot.families.gemm.spec import GemmSpec
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

_DECL = re.compile(r'^declare (\S.*?) @"?([\w.]+)"?\((.*)\)', re.M)


def _decls(ir_text):
    out = {}
    for ret, name, params in _DECL.findall(ir_text):
        types = tuple(re.sub(r' %"?[.\w]+"?$', "", p.strip()) for p in params.split(",") if p.strip())
        out[name] = (ret, types)
    return out


@pytest.mark.parametrize("lane", lanes.LANE_NAMES)
@pytest.mark.parametrize("arch,path", [("gfx942", "mfma"), ("gfx90a", "fma"), ("sm_90", "fma")])
def test_datalayout_and_declarations_come_from_the_profile(lane, arch, path):
    profile = lanes.get_lane(lane).profile
    if not profile.has(f"target:{arch}"):  # e.g. llvm24: an AMDGPU-only code generator
        with pytest.raises(CapabilityError, match=f"target:{arch}"):
            lower("gemm", GemmSpec(path=path), arch, lane)
        return
    k = lower("gemm", GemmSpec(path=path), arch, lane)
    assert f'target triple = "{profile.triple(Target.parse(arch))}"' in k.ir
    family = "nvptx64" if arch == "sm_90" else "amdgcn"
    assert f'target datalayout = "{profile.datalayout(family)}"' in k.ir
    by_name = {d.name: d for d in profile.intrinsics.values()}
    decls = _decls(k.ir)
    assert decls, "a gemm declares intrinsics"
    for name, (ret, params) in decls.items():
        assert name in by_name, f"{name} is not declared by profile {profile.name}"
        assert (ret, params) == (by_name[name].ret, by_name[name].params)


def test_nvptx_barrier_follows_the_profile():
    old = lower("gemm", GemmSpec(), "sm_90", "llvm20").ir
    new = lower("gemm", GemmSpec(), "sm_90", "llvm22").ir
    assert "@\"llvm.nvvm.barrier0\"()" in old and "barrier.cta.sync" not in old
    assert "@\"llvm.nvvm.barrier.cta.sync.aligned.all\"(i32 0)" in new and "barrier0" not in new
    assert "define ptx_kernel void" in old and "define ptx_kernel void" in new


def test_gfx1250_on_llvm20_refused_before_llvm():
    # lowering imports only llvmlite.ir; run in a fresh interpreter to prove that the
    # refusal happens without llvmlite.binding (LLVM itself) ever being loaded.
    code = (
        "import sys\n"
        "from rocke_aot.aot.lower import lower\n"
        "from rocke_aot.errors import CapabilityError\n"
        "try:\n"
        "    lower('gemm', {'path': 'wmma'}, 'gfx1250', 'llvm20')\n"
        "except CapabilityError as e:\n"
        "    print('REFUSED', e)\n"
        "print('BINDING', 'llvmlite.binding' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "REFUSED gemm for gfx1250 needs capability 'target:gfx1250'" in out
    assert "lane llvm20" in out
    assert "BINDING False" in out


def test_matrix_ops_refused_by_capability_and_arch():
    with pytest.raises(CapabilityError, match="not available on sm_90"):
        lower("gemm", GemmSpec(path="mfma"), "sm_90", "llvm22")
    with pytest.raises(CapabilityError, match="wmma with f16 inputs is not available on gfx942"):
        lower("gemm", GemmSpec(path="wmma"), "gfx942", "llvm22")
    with pytest.raises(CapabilityError, match="mfma with f16 inputs is not available on gfx1250"):
        lower("gemm", GemmSpec(path="mfma"), "gfx1250", "llvm22")
    # fma on gfx1250 is fine on llvm22 and refused on llvm20 with the op named
    lower("gemm", GemmSpec(path="fma"), "gfx1250", "llvm22")
    with pytest.raises(CapabilityError, match="gemm for gfx1250"):
        lower("gemm", GemmSpec(path="fma"), "gfx1250", "llvm20")


def test_require_by_op_with_min_lane():
    k = AmdgpuKernel("probe", Target.parse("gfx942"), lanes.get_lane("llvm20"), 64)
    with pytest.raises(CapabilityError, match="probe-op needs compiler lane llvm22 or newer; lane is llvm20"):
        k.require(min_lane="llvm22", op="probe-op")
    with pytest.raises(CapabilityError, match="declares no intrinsic 'wmma_f32_16x16x32_f16'"):
        k.declare("wmma_f32_16x16x32_f16")


@pytest.mark.parametrize("arch,spec", [
    ("gfx942", GemmSpec(path="mfma", in_dtype="bf16", out_dtype="bf16", double_buffer=True)),
    ("gfx1250", GemmSpec(path="wmma", vector_width=8)),
    ("sm_90", GemmSpec(path="fma", out_dtype="f16", vector_width=1)),
])
def test_ir_is_deterministic_across_processes(arch, spec):
    k1 = lower("gemm", spec, arch, "llvm22")
    k2 = lower("gemm", spec.to_dict(), arch, "llvm22")
    assert k1.ir == k2.ir and k1 == k2
    code = ("import json,sys\nfrom rocke_aot.aot.lower import lower\n"
            f"print(lower('gemm', json.loads(sys.argv[1]), {arch!r}, 'llvm22').ir_sha256)")
    import json
    other = subprocess.run([sys.executable, "-c", code, json.dumps(spec.to_dict())], capture_output=True,
                           text=True, check=True, env={"PYTHONHASHSEED": "123", "PATH": "/usr/bin"}).stdout.strip()
    assert other == k1.ir_sha256
    # a different knob or lane gives different IR
    assert lower("gemm", dataclasses.replace(spec, block_k=64), arch, "llvm22").ir_sha256 != k1.ir_sha256
    if arch != "sm_90":  # llvm23 (AMD's LLVM 23) has no NVPTX target: its profile is AMDGPU only
        assert lower("gemm", spec, arch, "llvm23").ir == k1.ir  # llvm23 profile: no delta from llvm22


def _attrs(ir_text, name):
    line = next(l for l in ir_text.splitlines() if l.startswith("define") and f'@"{name}"' in l)
    return set(re.findall(r'"([a-z0-9-]+)"(?:="([^"]*)")?', line.split(")")[-1]))


def test_amdgpu_kernel_attributes_state_unused_inputs():
    spec = GemmSpec(path="fma", waves=4)
    k22 = lower("gemm", spec, "gfx942:sramecc+:xnack-", "llvm22")
    a = dict(_attrs(k22.ir, k22.kernel_name))
    assert "define amdgpu_kernel void" in k22.ir
    assert a["amdgpu-flat-work-group-size"] == "256,256"
    assert a["target-cpu"] == "gfx942"
    assert a["target-features"] == "+sramecc,-xnack,+wavefrontsize64"
    for inp in ("dispatch-ptr", "queue-ptr", "implicitarg-ptr", "dispatch-id", "hostcall-ptr", "heap-ptr",
                "multigrid-sync-arg", "default-queue", "completion-action", "lds-kernel-id",
                "workitem-id-y", "workitem-id-z", "workgroup-id-y", "workgroup-id-z", "cluster-id-x"):
        assert f"amdgpu-no-{inp}" in a, inp
    # used inputs are never disclaimed
    assert "amdgpu-no-workitem-id-x" not in a and "amdgpu-no-workgroup-id-x" not in a
    assert a["amdgpu-agpr-alloc"] == "0"  # fma: no AGPRs
    k20 = lower("gemm", spec, "gfx942", "llvm20")
    a20 = dict(_attrs(k20.ir, k20.kernel_name))
    assert "amdgpu-no-agpr" in a20 and "amdgpu-no-cluster-id-x" not in a20  # LLVM 20 spelling
    mf = dict(_attrs(lower("gemm", GemmSpec(path="mfma"), "gfx942", "llvm22").ir, k22.kernel_name.replace("fma", "mfma")))
    assert "amdgpu-agpr-alloc" not in mf  # MFMA accumulates in AGPRs
    w = dict(_attrs(lower("gemm", GemmSpec(path="wmma"), "gfx1250", "llvm22").ir,
                    GemmSpec(path="wmma").kernel_name))
    assert w["target-features"] == "+wavefrontsize32"
    assert w["amdgpu-flat-work-group-size"] == "128,128"  # 4 waves of 32


def test_target_id_features_as_module_flags_where_the_profile_says_so():
    spec = GemmSpec(path="mfma")
    k24 = lower("gemm", spec, "gfx950:sramecc+:xnack-", "llvm24")
    a = dict(_attrs(k24.ir, spec.kernel_name))
    assert a["target-features"] == "+wavefrontsize64"  # no xnack/sramecc subtarget features
    assert '!{ i32 1, !"amdgpu.sramecc", i32 1 }' in k24.ir
    assert '!{ i32 1, !"amdgpu.xnack", i32 0 }' in k24.ir
    assert 'target triple = "amdgpu9.50-amd-amdhsa"' in k24.ir
    assert "llvm.module.flags" not in lower("gemm", spec, "gfx950", "llvm24").ir  # "any": no flag
    k22 = lower("gemm", spec, "gfx950:sramecc+:xnack-", "llvm22")
    assert "llvm.module.flags" not in k22.ir
    assert dict(_attrs(k22.ir, spec.kernel_name))["target-features"] == "+sramecc,-xnack,+wavefrontsize64"


def test_lowered_kernel_is_frozen_and_describes_the_kernel():
    k = lower("gemm", GemmSpec(block_m=128, block_n=64, block_k=16, waves=4, double_buffer=True),
              "gfx942", "llvm22")
    assert isinstance(k, LoweredKernel)
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.ir = ""  # type: ignore[misc]
    assert k.max_tensor_bytes == MAX_TENSOR_BYTES == 2**31 - 1
    assert [(a.name, a.offset, a.size) for a in k.kernargs] == [
        ("A", 0, 8), ("B", 8, 8), ("C", 16, 8), ("M", 24, 4), ("N", 28, 4), ("K", 32, 4)]
    assert k.kernarg_size == 36
    assert k.block_size == 256
    assert k.lds_bytes == 2 * 2 * (128 * 16 + 16 * 64)
    assert k.metadata["path"] == "fma"
    assert k.as_dict()["ir_sha256"] == k.ir_sha256
    assert "addrspace(3) global [" in k.ir


def test_family_registry_and_input_validation():
    assert "gemm" in families()
    fam = get_family("gemm")
    assert fam.spec_type is GemmSpec
    with pytest.raises(SpecError, match="unknown family 'nope'"):
        lower("nope", {}, "gfx942", "llvm22")
    with pytest.raises(SpecError):
        get_family(3)
    with pytest.raises(SpecError, match="must be a GemmSpec or a dict"):
        lower("gemm", ["fma"], "gfx942", "llvm22")
    with pytest.raises(LaneError):
        lower("gemm", {}, "gfx942", "llvm25")
    with pytest.raises(SpecError, match="unknown processor"):
        lower("gemm", {}, "gfx1100", "llvm22")


def test_parse_type():
    assert str(parse_type("<16 x float>")) == "<16 x float>"
    assert str(parse_type("<8 x bfloat>")) == "<8 x bfloat>"
    assert str(parse_type("ptr addrspace(3)")) == "ptr addrspace(3)"
    with pytest.raises(ValueError):
        parse_type("x86_fp80")


def test_recipe_digest_tracks_the_lowering_source_and_every_family_spec_module(tmp_path):
    import inspect
    import shutil

    from rocke_aot.aot.recipe import default_package_dirs, recipe_digest, recipe_modules

    d1 = recipe_digest()
    assert d1 == recipe_digest() and re.fullmatch(r"[0-9a-f]{64}", d1)
    mods = recipe_modules()
    # each native family's spec class and lowerer shape the IR: they live in its folder
    # (rocke_aot/families/<name>/), which its family digest covers (no recipe module imports a
    # family folder); what the lowerers share (the conv engine) is a recipe module
    from rocke_aot.aot.recipe import family_packages

    for name in ("gemm", "conv_direct_fwd", "conv_dgrad_patch"):
        spec_mod = inspect.getmodule(get_family(name).spec_type).__name__
        lowerer_mod = get_family(name).lowerer.raw.__module__
        assert spec_mod == f"rocke_aot.families.{name}.spec" and lowerer_mod == f"rocke_aot.families.{name}.lower"
        assert family_packages(name) == (f"rocke_aot.families.{name}",) and spec_mod not in mods, name
    assert "rocke_aot.aot.families._conv_ir" in mods and "rocke_aot.variants.conv" in mods
    # a copy of the package tree with one byte changed in a lowering file changes the digest
    dirs = {}
    for pkg, src in default_package_dirs().items():
        dirs[pkg] = tmp_path / pkg.replace(".", "_")
        shutil.copytree(src, dirs[pkg], ignore=shutil.ignore_patterns("__pycache__"))
    assert recipe_digest(dirs) == d1
    module = dirs["rocke_aot.aot"] / "lower" / "module.py"
    module.write_bytes(module.read_bytes() + b"#")
    assert recipe_digest(dirs) != d1


def test_nvptx_static_shared_memory_is_capped_before_ptxas():
    from rocke_aot.aot.lower import kernel_for
    from rocke_aot.aot.lower.module import I16

    kb = kernel_for("probe", Target.parse("sm_90"), lanes.get_lane("llvm22"), 128)
    kb.shared_array("ok", I16, 24 * 1024, 2)
    with pytest.raises(CapabilityError, match="49152 bytes a kernel may declare on sm_90"):
        kb.shared_array("too_much", I16, 16, 2)


@pytest.mark.parametrize("lane", ["llvm20", "llvm22"])
def test_nvptx_kernels_carry_launch_bounds(lane, all_toolchains):
    """Without .maxntid ptxas may use more registers than the block can launch with
    (seen on an H200: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES for a 296-thread dgrad kernel)."""
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.families.gemm.spec import GemmSpec
    from rocke_aot.targets import Target

    k = lower("gemm", GemmSpec(path="fma", in_dtype="f16", out_dtype="f32"), "sm_90", lane)
    tc = tcs.toolchains_for_lane(get_lane(lane), all_toolchains)[0]
    ptx = tc.compile(k.ir, Target.parse("sm_90")).ptx
    bounds = [line.split() for line in ptx.splitlines() if ".maxntid" in line]
    assert bounds and bounds[0][1].rstrip(",") == str(k.block_size)
