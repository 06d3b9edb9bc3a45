"""Code-object validation on real HSACOs (LLVM 22 + ld.lld) and a real cubin (ptxas).

Bad objects are real ones altered the way a broken or mismatched toolchain would
leave them: wrong arch, wrong feature setting, truncated, bytes overwritten.
"""

from __future__ import annotations

import dataclasses
import struct
import sys

import pytest
from _kernels import ADD1, NVPTX_ADD1

from rocke_aot.aot.codeobject import EF_AMDGPU_MACH, CodeObjectInfo, comment_strings, decode_kernel_descriptor, validate
from rocke_aot.aot.compiler import WorkerPool, WorkerSpec, compile_llvmlite
from rocke_aot.aot.compiler.link import link_hsaco
from rocke_aot.errors import CodeObjectError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

PY = sys.executable
E_FLAGS_OFFSET = 0x30  # ELF64 header

LDS_96K = """\
target triple = "amdgcn-amd-amdhsa"
@buf = internal addrspace(3) global [24576 x float] undef, align 4

define amdgpu_kernel void @big(ptr addrspace(1) %out) {
  %id = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr [24576 x float], ptr addrspace(3) @buf, i32 0, i32 %id
  store float 1.0, ptr addrspace(3) %p
  call void @llvm.amdgcn.s.barrier()
  %q = getelementptr [24576 x float], ptr addrspace(3) @buf, i32 0, i32 100
  %v = load float, ptr addrspace(3) %q
  store float %v, ptr addrspace(1) %out
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
"""


@pytest.fixture(scope="module")
def objs():
    with WorkerPool(1) as pool:
        out = {t: compile_llvmlite(PY, ADD1, t, pool=pool).code_object
               for t in ("gfx942:sramecc+:xnack-", "gfx942", "gfx90a", "gfx950", "gfx1250", "gfx1250:xnack+")}
        out["lds96k@gfx950"] = compile_llvmlite(PY, LDS_96K, "gfx950", pool=pool).code_object
        out["sm_90"] = compile_llvmlite(PY, NVPTX_ADD1, "sm_90", pool=pool).code_object
        # gfx1250 is wave32 only: asked for wave64, LLVM 22 silently drops the kernel
        reply = pool.call(WorkerSpec.of(PY), "llvm.compile", {
            "ir": ADD1, "triple": "amdgcn-amd-amdhsa", "cpu": "gfx1250", "features": "+wavefrontsize64"})
        out["wave64@gfx1250"] = link_hsaco(reply.blob)
    return out


def _with_flags(data: bytes, flags: int) -> bytes:
    return data[:E_FLAGS_OFFSET] + struct.pack("<I", flags) + data[E_FLAGS_OFFSET + 4:]


def _flags(data: bytes) -> int:
    return struct.unpack_from("<I", data, E_FLAGS_OFFSET)[0]


def test_good_object_reports_its_metadata(objs):
    info = validate(objs["gfx942:sramecc+:xnack-"], Target.parse("gfx942:sramecc+:xnack-"))
    assert isinstance(info, CodeObjectInfo)
    assert (info.kernel, info.format, info.xnack, info.sramecc) == ("add1", "hsaco", "off", "on")
    assert info.metadata_target == "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
    assert info.kernarg_size == 16 and [(a.name, a.offset, a.size) for a in info.args] == [("out", 0, 8), ("in", 8, 8)]
    assert info.args[0].value_kind == "global_buffer" and info.args[0].address_space == "global"
    assert info.wavefront_size == 64 and info.lds_bytes == 0 and info.private_segment_bytes == 0
    assert info.vgpr_count >= 1 and info.sgpr_count >= 2 and info.agpr_count == 0
    assert info.code_object_version >= 5
    assert info.comment and info.comment[0].startswith("Linker:")
    d = info.as_dict()
    assert d["descriptor"]["user_sgpr_inputs"] == ["kernarg_segment_ptr"] and d["args"][1]["name"] == "in"
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.kernel = "x"  # frozen


@pytest.mark.parametrize("target", ["gfx942", "gfx90a", "gfx950", "gfx1250"])
def test_every_wired_arch_validates(objs, target):
    info = validate(objs[target], Target.parse(target))
    assert info.wavefront_size == (32 if target == "gfx1250" else 64)
    assert info.xnack == "any"
    assert _flags(objs[target]) & 0xFF == EF_AMDGPU_MACH[target]


def test_lds_is_reported_from_metadata_and_descriptor(objs):
    info = validate(objs["lds96k@gfx950"], Target.parse("gfx950"))
    assert info.lds_bytes == 96 * 1024 == info.descriptor.group_segment_fixed_size


def test_wrong_arch_is_rejected(objs):
    with pytest.raises(CodeObjectError, match="is for gfx90a, not gfx942"):
        validate(objs["gfx90a"], Target.parse("gfx942"))
    with pytest.raises(CodeObjectError, match="EM_CUDA"):
        validate(objs["gfx942"], Target.parse("sm_90"))
    with pytest.raises(CodeObjectError, match="EM_AMDGPU"):
        validate(objs["sm_90"], Target.parse("gfx942"))


def test_feature_settings_must_match_the_target_id(objs):
    # built for sramecc+/xnack-, asked as xnack+: refused
    with pytest.raises(CodeObjectError, match="xnack off"):
        validate(objs["gfx942:sramecc+:xnack-"], Target.parse("gfx942:xnack+"))
    # built for "any", asked as xnack-: the object does not promise xnack-
    with pytest.raises(CodeObjectError, match="xnack any"):
        validate(objs["gfx942"], Target.parse("gfx942:xnack-"))
    # built for xnack+ but the target ID leaves xnack open: refused (it would not load everywhere)
    with pytest.raises(CodeObjectError, match="requires xnack on"):
        validate(objs["gfx1250:xnack+"], Target.parse("gfx1250"))


def test_object_without_xnack_flag_passes_when_target_leaves_xnack_open(objs):
    # LLVM 24 no longer records xnack for gfx1250 (setting "unsupported", bits 0)
    data = _with_flags(objs["gfx1250"], _flags(objs["gfx1250"]) & ~0x300)
    assert validate(data, Target.parse("gfx1250")).xnack == "unsupported"
    with pytest.raises(CodeObjectError, match="xnack unsupported"):
        validate(data, Target.parse("gfx1250:xnack-"))


def test_wave_size_and_lds_must_fit_the_arch(objs):
    # metadata claiming wave32 on a wave64 arch (a byte of the msgpack note changed)
    key = b"\xaf.wavefront_size\x40"
    data = objs["gfx942"]
    assert data.count(key) == 1
    with pytest.raises(CodeObjectError, match="wave32; gfx942 runs wave64"):
        validate(data.replace(key, b"\xaf.wavefront_size\x20"), Target.parse("gfx942"))
    # a 96 KiB LDS kernel presented as gfx942 (64 KiB): mach and target string rewritten
    big = objs["lds96k@gfx950"].replace(b"gfx950", b"gfx942")
    big = _with_flags(big, (_flags(big) & ~0xFF) | EF_AMDGPU_MACH["gfx942"])
    with pytest.raises(CodeObjectError, match="98304 bytes of LDS; gfx942 has 65536"):
        validate(big, Target.parse("gfx942"))


def test_object_without_its_kernel_is_rejected(objs):
    with pytest.raises(CodeObjectError, match="no kernels"):
        validate(objs["wave64@gfx1250"], Target.parse("gfx1250"))
    with pytest.raises(CodeObjectError, match="kernel 'nope' not in"):
        validate(objs["gfx942"], Target.parse("gfx942"), kernel="nope")
    # the .kd symbol renamed away (same length): the descriptor is missing
    with pytest.raises(CodeObjectError, match="descriptor symbol add1.kd missing"):
        validate(objs["gfx942"].replace(b"add1.kd\0", b"add1.kx\0"), Target.parse("gfx942"))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "zero-header", "note"])
def test_corrupted_object_is_rejected(objs, damage):
    data = objs["gfx950"]
    if damage == "truncate":
        bad = data[: len(data) // 3]
    elif damage == "garbage":
        bad = bytes(range(256)) * 8
    elif damage == "zero-header":
        bad = b"\0" * 64 + data[64:]
    else:  # overwrite the metadata note's payload
        start = data.index(b"amdhsa.")
        bad = data[:start] + b"\xc1" * 64 + data[start + 64:]
    with pytest.raises(CodeObjectError):
        validate(bad, Target.parse("gfx950"))


def test_cubin_is_checked_lightly(objs):
    info = validate(objs["sm_90"], Target.parse("sm_90"))
    assert (info.format, info.kernel) == ("cubin", "add1")
    with pytest.raises(CodeObjectError, match="'nope' not in the cubin"):
        validate(objs["sm_90"], Target.parse("sm_90"), kernel="nope")


def test_descriptor_decoding_and_comment(objs):
    with pytest.raises(CodeObjectError, match="64"):
        decode_kernel_descriptor(b"\0" * 32)
    kd = decode_kernel_descriptor(b"\0" * 56 + struct.pack("<H", 0b1110) + b"\0" * 6)
    assert kd.user_sgpr_inputs == ("dispatch_ptr", "queue_ptr", "kernarg_segment_ptr")
    assert comment_strings(objs["gfx942"])[0].startswith("Linker: ")


AGPR_KERNEL = """\
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @regs() {
  call void asm sideeffect "", "~{v255}"()
  call void asm sideeffect "", "~{a255}"()
  ret void
}
"""


def test_agprs_are_counted_once_on_unified_register_archs():
    # 256 VGPRs + 256 AGPRs: the whole 512-entry unified file, which is allowed
    info = validate(compile_llvmlite(PY, AGPR_KERNEL, "gfx942").code_object, Target.parse("gfx942"))
    assert info.agpr_count == 256 and info.vgpr_count == 512


def test_llvm24_objects_validate():
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.targets import Target

    found = tcs.toolchains_for_lane(get_lane("llvm24"))
    if not found:
        pytest.fail("no llvm24 toolchain on this host: run `bash scripts/setup.sh` "
                    "(it runs `rocke-aot toolchain install llvm24`)")
    llvm24 = found[0]
    info = validate(llvm24.compile(ADD1, Target.parse("gfx1250")).code_object, Target.parse("gfx1250"))
    # LLVM 24 records no xnack setting for gfx1250, and names the subarch in amdhsa.target
    assert info.xnack == "unsupported" and info.metadata_target.endswith("gfx1250")
    assert info.descriptor.user_sgpr_inputs == ("kernarg_segment_ptr",)
    info = validate(llvm24.compile(ADD1, Target.parse("gfx950")).code_object, Target.parse("gfx950"))
    assert info.wavefront_size == 64 and info.code_object_version >= 5
