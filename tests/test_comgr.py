"""The COMGR path with Debian's real libamd-comgr2 (COMGR 2.4 on LLVM 15).

It detects as LLVM 15 from what its own linker records, is refused by the lane
registry, and still compiles gfx90a kernels (the COMGR code path, outside lane
qualification). Everything runs in isolated worker processes.
"""

from __future__ import annotations

import pytest

from rocke_aot import settings
from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.toolchains.comgr import ComgrToolchain, candidate_libraries, discover
from rocke_aot.errors import CompileError, LaneError, ToolchainError, ToolchainRefused
from rocke_aot.lanes import get_lane, lane_for_major
from rocke_aot.targets import Target

DEBIAN_COMGR = "/usr/lib/x86_64-linux-gnu/libamd_comgr.so.2"

# LLVM 15 IR: opaque pointers are its default, and no syntax newer than 15 is used
# (no captures(...) attribute, no nuw/nusw on getelementptr, no 'splat').
KERNEL_LLVM15 = """\
target triple = "amdgcn-amd-amdhsa"

define amdgpu_kernel void @saxpy(ptr addrspace(1) %y, ptr addrspace(1) %x, float %a, i32 %n) {
entry:
  %id = call i32 @llvm.amdgcn.workitem.id.x()
  %in = icmp slt i32 %id, %n
  br i1 %in, label %body, label %done
body:
  %idx = zext i32 %id to i64
  %px = getelementptr float, ptr addrspace(1) %x, i64 %idx
  %py = getelementptr float, ptr addrspace(1) %y, i64 %idx
  %vx = load float, ptr addrspace(1) %px
  %vy = load float, ptr addrspace(1) %py
  %m = fmul float %a, %vx
  %s = fadd float %m, %vy
  store float %s, ptr addrspace(1) %py
  br label %done
done:
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""


@pytest.fixture(scope="module")
def comgr():
    return ComgrToolchain(DEBIAN_COMGR)


def test_debian_comgr_is_found_and_detected_as_llvm15(comgr):
    assert any(tc.library == DEBIAN_COMGR for tc in discover())
    info = comgr.detect()
    assert info.kind == "comgr" and info.location == DEBIAN_COMGR
    assert info.llvm_major == 15 and info.llvm_version.startswith("15.")
    assert info.extra["comgr_interface"].startswith("2.")
    # the major came from the probe code object the toolchain itself produced
    assert any("LLD 15." in s for s in info.extra["recorded"])
    assert info.arches == ("gfx90a",)  # COMGR 2.4 lists gfx900..gfx90a, none of gfx942+


def test_debian_comgr_is_refused_by_the_lane_registry(comgr):
    info = comgr.detect()
    assert info.lane is None and not info.usable
    assert "LLVM major 15" in info.refusal and "no qualified compiler lane" in info.refusal
    with pytest.raises(LaneError, match="LLVM major 15"):
        lane_for_major(info.llvm_major, toolchain="COMGR")
    with pytest.raises(ToolchainRefused, match="LLVM major 15"):
        _ = comgr.lane
    assert comgr not in tcs.toolchains_for_lane(get_lane("llvm22"), [comgr])


def test_detect_all_lists_the_comgr_refused():
    rows = [tc.detect() for tc in tcs.detect_all() if tc.kind == "comgr"]
    assert rows and all(r.refusal for r in rows if r.llvm_major == 15)


def test_comgr_compiles_gfx90a_and_the_result_validates(comgr):
    result = comgr.compile(KERNEL_LLVM15, Target.parse("gfx90a"))
    assert result.format == "hsaco"
    info = validate(result.code_object, Target.parse("gfx90a"))
    assert info.kernel == "saxpy" and info.kernarg_size == 24
    assert [a.name for a in info.args] == ["y", "x", "a", "n"]
    assert info.code_object_version == 4  # LLVM 15's default
    assert any("LLD 15." in s for s in info.comment)
    # COMGR runs the middle end too: no dispatch or queue pointer for this kernel
    assert not {"dispatch_ptr", "queue_ptr"} & set(info.descriptor.user_sgpr_inputs)
    # explicit feature settings reach COMGR through the ISA name
    strict = comgr.compile(KERNEL_LLVM15, Target.parse("gfx90a:xnack-"))
    assert validate(strict.code_object, Target.parse("gfx90a:xnack-")).xnack == "off"


def test_comgr_errors_are_compile_errors_with_the_log(comgr):
    with pytest.raises(CompileError, match="expected top-level entity"):
        comgr.compile("this is not IR", Target.parse("gfx90a"))
    with pytest.raises(CompileError, match="does not know gfx942"):
        comgr.compile(KERNEL_LLVM15, Target.parse("gfx942"))
    with pytest.raises(CompileError, match="AMDGPU code only"):
        comgr.compile(KERNEL_LLVM15, Target.parse("sm_90"))
    # the worker survived: a good compile still works
    assert comgr.compile(KERNEL_LLVM15, Target.parse("gfx90a")).code_object.startswith(b"\x7fELF")


def test_env_names_the_library(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.COMGR, str(tmp_path / "libamd_comgr.so"))
    assert candidate_libraries() == [str(tmp_path / "libamd_comgr.so")]
    info = ComgrToolchain(tmp_path / "libamd_comgr.so").detect()
    assert not info.usable and "no COMGR library" in info.refusal
    with pytest.raises(ToolchainError, match="unusable"):
        ComgrToolchain(tmp_path / "libamd_comgr.so").compile(KERNEL_LLVM15, Target.parse("gfx90a"))
    monkeypatch.setenv(settings.COMGR, DEBIAN_COMGR)
    assert ComgrToolchain(candidate_libraries()[0]).detect().llvm_major == 15


def test_a_library_that_is_not_comgr_is_refused_not_fatal():
    # a real shared library without the COMGR API: loading fails inside the worker only
    info = ComgrToolchain("/usr/lib/x86_64-linux-gnu/libz.so.1").detect()
    assert not info.usable and "is not a COMGR library" in info.refusal
