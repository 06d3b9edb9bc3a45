"""The llvm23 lane on AMD's own LLVM 23 (rocm-bindings-compiler's rocm/bindings/llvm/libLLVM.so).

Nothing is simulated: the library is the one the project's hip-python[compiler] dependency
installs, the shims are the ones `rocke-aot toolchain install llvm23` (scripts/setup.sh)
builds. When either is missing the tests FAIL and say to run the setup. References: Debian's
llvm-readelf-22 (processor, symbol versions), Python's zlib (crc32), AMD's own llvm_config
source in the wheel (the LLVM version).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocke_aot import settings
from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.lower import lower
from rocke_aot.aot.toolchains import rocm_sysdeps, vendor23
from rocke_aot.aot.toolchains.llvmlite_toolchain import LlvmliteToolchain
from rocke_aot.cache.keys import KeyInputs, artifact_key
from rocke_aot.errors import CompileError, ToolchainError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

READELF = "/usr/lib/llvm-22/bin/llvm-readelf"
WIRED = ("gfx90a", "gfx942", "gfx950", "gfx1250")


@pytest.fixture(scope="module")
def llvm23() -> vendor23.Vendor23Toolchain:
    try:
        return vendor23.find_llvm23()
    except ToolchainError as e:
        pytest.fail(str(e))


def _readelf(*args: str) -> str:
    return subprocess.run([READELF, *args], capture_output=True, text=True, check=True).stdout


# ------------------------------------------------------------------ detection


def test_detects_as_llvm23_from_the_library_itself(llvm23):
    info = llvm23.detect()
    assert info.usable and info.lane == "llvm23" and info.kind == "rocm-llvm"
    assert info.llvm_major == 23 and info.llvm_version.startswith("23.")
    # The reference: the LLVM version AMD's build recorded in the wheel's own config binding.
    src = (Path(llvm23.library).parent / "config" / "cyllvm_config.pyx").read_text()
    m = re.search(r"LLVM_VERSION_MAJOR\s*=\s*(\d+)", src)
    if m:
        assert int(m.group(1)) == 23
    # and the bytes of the library itself name that version
    assert b"23.0.0git" in Path(llvm23.library).read_bytes()
    assert set(info.arches) == set(WIRED)
    assert all(s == "ok" for s in info.drift.values()), info.drift
    assert info.extra["amdgcn_targets"] == {p: f"amdgcn-amd-amdhsa--{p}" for p in WIRED}


def test_listed_by_detect_all_and_chosen_for_the_lane(llvm23):
    found = tcs.toolchains_for_lane(get_lane("llvm23"), tcs.detect_all())
    assert found and all(isinstance(tc, vendor23.Vendor23Toolchain) for tc in found)
    assert isinstance(tcs.toolchain_for(get_lane("llvm23"), Target.parse("gfx1250")), vendor23.Vendor23Toolchain)


def test_neither_the_library_nor_the_shims_load_in_this_process(llvm23):
    k = lower("gemm", {"path": "fma"}, "gfx942", "llvm23")
    llvm23.compile(k.ir, Target.parse("gfx942"))
    maps = Path("/proc/self/maps").read_text()
    assert "librocm_sysdeps" not in maps and "bindings/llvm/libLLVM.so" not in maps


# ------------------------------------------------------------------ refusals


def test_missing_library_is_a_named_refusal(tmp_path):
    info = vendor23.Vendor23Toolchain(tmp_path / "libLLVM.so").detect()
    assert not info.usable and str(tmp_path) in info.refusal and "scripts/setup.sh" in info.refusal
    with pytest.raises(ToolchainError, match=r"rocm/bindings/llvm/libLLVM.so.*scripts/setup.sh"):
        vendor23.find_llvm23([])


def test_explicit_path_wins_and_a_wrong_one_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.LLVM23_LIB, str(tmp_path / "nope.so"))
    found = vendor23.discover()
    assert [tc.library for tc in found] == [str(tmp_path / "nope.so")]
    assert "no AMD LLVM library" in found[0].detect().refusal


def test_missing_shims_are_a_named_refusal(llvm23, tmp_path):
    info = vendor23.Vendor23Toolchain(llvm23.library, shim_dir=tmp_path).detect()
    assert not info.usable
    for name in rocm_sysdeps.SONAMES:
        assert name in info.refusal
    assert "AMDROCM_SYSDEPS_1.0" in info.refusal and "scripts/setup.sh" in info.refusal


def test_the_cli_refuses_by_name_without_a_traceback(tmp_path):
    env = {"ROCKE_AOT_LLVM23_LIB": str(tmp_path / "libLLVM.so"), "PATH": "/usr/bin:/bin",
           "ROCKE_AOT_HOME": str(Path.home() / ".cache" / "rocke-aot")}
    proc = subprocess.run([sys.executable, "-m", "rocke_aot.cli", "compile", "--family", "gemm", "--arch", "gfx942",
                           "--lane", "llvm23", "--spec", '{"path": "fma"}', "-o", str(tmp_path / "k.hsaco")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and "llvm23" in proc.stderr, proc.stderr


# ------------------------------------------------------------------ the shims


def test_shims_define_exactly_what_the_library_needs(llvm23):
    # The reference: libLLVM.so's own undefined symbols at AMDROCM_SYSDEPS_1.0 (llvm-readelf-22).
    needed = set(re.findall(r"\s(\w+)@AMDROCM_SYSDEPS_1\.0", _readelf("--dyn-syms", "-W", llvm23.library)))
    assert len(needed) == 12
    exported = set()
    for name, path in llvm23.shims.items():
        dyn = _readelf("-d", "--dyn-syms", "-W", str(path))
        assert f"Library soname: [{name}]" in dyn
        exported |= set(re.findall(r"\s(\w+)@@AMDROCM_SYSDEPS_1\.0", dyn))
        assert f"Shared library: [{name}]" in _readelf("-d", llvm23.library)
    assert exported == needed


def test_shims_forward_to_the_system_zlib_and_zstd(llvm23):
    code = f"""
import ctypes, json, os, zlib
z = ctypes.CDLL({str(llvm23.shims['librocm_sysdeps_z.so.1'])!r}, mode=os.RTLD_LOCAL)
s = ctypes.CDLL({str(llvm23.shims['librocm_sysdeps_zstd.so.1'])!r}, mode=os.RTLD_LOCAL)
z.crc32.restype = ctypes.c_ulong; z.crc32.argtypes = [ctypes.c_ulong, ctypes.c_char_p, ctypes.c_uint]
data = b"rocke-aot " * 1000
for f in ("ZSTD_compressBound", "ZSTD_compress2", "ZSTD_decompress", "ZSTD_createCCtx", "ZSTD_isError"):
    getattr(s, f).restype = ctypes.c_size_t if f != "ZSTD_createCCtx" else ctypes.c_void_p
s.ZSTD_compress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
s.ZSTD_decompress.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
s.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
cap = s.ZSTD_compressBound(len(data)); dst = ctypes.create_string_buffer(cap)
n = s.ZSTD_compress2(ctypes.c_void_p(s.ZSTD_createCCtx()), dst, cap, data, len(data))
back = ctypes.create_string_buffer(len(data)); m = s.ZSTD_decompress(back, len(data), dst.raw[:n], n)
print(json.dumps({{"crc": z.crc32(0, data, len(data)), "want": zlib.crc32(data), "n": n, "same": back.raw[:m] == data}}))
"""
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    assert got["crc"] == got["want"]
    assert 0 < got["n"] < 1000 and got["same"]


# ------------------------------------------------------------------ compiling


@pytest.mark.parametrize("arch,path", [("gfx90a", "mfma"), ("gfx942", "mfma"), ("gfx950", "mfma"),
                                       ("gfx1250", "wmma")])
def test_a_compile_per_wired_processor_reads_as_that_processor(llvm23, arch, path):
    k = lower("gemm", {"path": path}, arch, "llvm23")
    res = llvm23.compile(k.ir, Target.parse(arch), emit_asm=True)
    tmp = Path(__file__).parent / f".k23-{arch}.hsaco"
    try:
        tmp.write_bytes(res.code_object)
        header = _readelf("-h", str(tmp))
        dis = subprocess.run(["/usr/lib/llvm-22/bin/llvm-objdump", "-d", str(tmp)], capture_output=True,
                             text=True, check=True).stdout
    finally:
        tmp.unlink(missing_ok=True)
    assert re.search(rf"Flags:\s+0x[0-9a-f]+, {arch}\b", header), header
    assert ("v_wmma" if path == "wmma" else "v_mfma") in dis
    info = validate(res.code_object, Target.parse(arch))
    # The O3 pipeline's attributor ran (in LLVM 23): the kernel asks for what LLVM 22's O3 asks for
    # on the same kernel (the kernarg pointer; gfx90a, without architected flat scratch, also
    # the private segment buffer).
    ref = LlvmliteToolchain(sys.executable).compile(lower("gemm", {"path": path}, arch, "llvm22").ir, Target.parse(arch))
    assert info.descriptor.user_sgpr_inputs == validate(ref.code_object, Target.parse(arch)).descriptor.user_sgpr_inputs
    assert info.descriptor.user_sgpr_inputs[-1] == "kernarg_segment_ptr"
    assert "dispatch_ptr" not in info.descriptor.user_sgpr_inputs


def test_an_llvm_abort_is_a_compile_error_and_the_next_compile_works(llvm23):
    from rocke_aot import lanes
    from rocke_aot.aot.characterize_ir import probe_ir

    gfx950_only = probe_ir(lanes.PROFILES["llvm23"].intrinsic("mfma_f32_32x32x16_f16"))
    with pytest.raises(CompileError, match="Cannot select"):
        llvm23.compile(gfx950_only, Target.parse("gfx942"))
    k2 = lower("gemm", {"path": "fma"}, "gfx942", "llvm23")
    assert validate(llvm23.compile(k2.ir, Target.parse("gfx942")).code_object, Target.parse("gfx942"))


def test_ir_of_another_profile_is_refused(llvm23):
    k = lower("gemm", {"path": "fma"}, "gfx942", "llvm24")
    with pytest.raises(CompileError, match="datalayout|triple"):
        llvm23.compile(k.ir, Target.parse("gfx942"))


# ------------------------------------------------------------------ identity and keys


def _key(tc, arch="gfx942") -> str:
    return artifact_key(KeyInputs(arch, "llvm23", "llvm23", "gemm", {"path": "fma"}, "0" * 64,
                                  tc.identity(Target.parse(arch)), tc.compile_options(Target.parse(arch))))


def test_identity_and_options(llvm23):
    ident = llvm23.identity(Target.parse("gfx942"))
    assert ident["kind"] == "rocm-llvm" and ident["llvm_version"].startswith("23.")
    assert len(ident["library_sha256"]) == 64 and "LLD" in ident["linker"]
    assert {k for k in ident if k.startswith("shim_sha256:")} == {f"shim_sha256:{n}" for n in rocm_sysdeps.SONAMES}
    opts = llvm23.compile_options(Target.parse("gfx942"))
    assert opts["pipeline"] == "default<O3>" and opts["opt_level"] == 3 and opts["ld.lld"]


def test_the_key_moves_when_a_shim_changes(llvm23, tmp_path):
    for p in llvm23.shims.values():
        shutil.copy(p, tmp_path / p.name)
    copy = vendor23.Vendor23Toolchain(llvm23.library, shim_dir=tmp_path)
    assert _key(copy) == _key(llvm23)
    shim = tmp_path / "librocm_sysdeps_zstd.so.1"
    shim.write_bytes(shim.read_bytes() + b"\0")  # still a loadable ELF
    changed = vendor23.Vendor23Toolchain(llvm23.library, shim_dir=tmp_path)
    assert changed.detect().usable
    assert _key(changed) != _key(llvm23)


def test_the_key_moves_when_the_library_changes(llvm23, tmp_path):
    lib = tmp_path / "libLLVM.so"
    shutil.copy(llvm23.library, lib)
    assert _key(vendor23.Vendor23Toolchain(lib)) == _key(llvm23)
    with open(lib, "ab") as f:
        f.write(b"\0")
    changed = vendor23.Vendor23Toolchain(lib)
    assert changed.detect().usable
    assert _key(changed) != _key(llvm23)
