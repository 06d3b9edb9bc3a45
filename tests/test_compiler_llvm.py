"""The LLVM path end to end: IR -> O3 pipeline -> object -> ld.lld -> HSACO; IR -> PTX -> cubin.

Real llvmlite (LLVM 22 in the project venv, LLVM 20 in the installed lane env), real
Debian ld.lld 22, real ptxas, real llvm-objdump for the disassembly.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys

import pytest
from _kernels import ADD1, NVPTX_ADD1
from elftools.elf.elffile import ELFFile

from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.compiler import WorkerPool, WorkerSpec, compile_llvmlite, llvm_payload
from rocke_aot.aot.compiler.link import link_hsaco
from rocke_aot.aot.compiler.lld import find_lld, linker_identity, lld_version
from rocke_aot.errors import CompileError
from rocke_aot.targets import Target

PY = sys.executable
OBJDUMP = "/usr/lib/llvm-22/bin/llvm-objdump"


def _disasm(hsaco: bytes, tmp_path) -> str:
    path = tmp_path / "k.hsaco"
    path.write_bytes(hsaco)
    return subprocess.run([OBJDUMP, "-d", str(path)], capture_output=True, text=True, check=True).stdout


def test_o3_pipeline_gives_a_minimal_kernel_descriptor(tmp_path):
    target = Target.parse("gfx942")
    hsaco = compile_llvmlite(PY, ADD1, target).code_object
    kd = validate(hsaco, target).descriptor
    # Only the kernarg segment pointer is asked for, so it lands in s[0:1].
    assert kd.user_sgpr_inputs == ("kernarg_segment_ptr",)
    assert kd.user_sgpr_count == 2
    assert "s[0:1], 0x0" in _disasm(hsaco, tmp_path)

    # Codegen alone (no middle end) infers no amdgpu-no-* attributes: the same kernel
    # asks for dispatch and queue pointers it never uses.
    with WorkerPool(1) as pool:
        payload = dict(llvm_payload(ADD1, target), pipeline=False)
        raw = link_hsaco(pool.call(WorkerSpec.of(PY), "llvm.compile", payload).blob)
    bare = validate(raw, target).descriptor
    assert {"dispatch_ptr", "queue_ptr", "kernarg_segment_ptr"} <= set(bare.user_sgpr_inputs)
    assert bare.user_sgpr_count > kd.user_sgpr_count


def test_same_inputs_give_identical_hsaco_from_two_processes():
    digests, pids = set(), set()
    for _ in range(2):
        with WorkerPool(1) as pool:  # a new pool: a new worker process
            pids.add(pool.call(WorkerSpec.of(PY), "ping").result["pid"])
            result = compile_llvmlite(PY, ADD1, "gfx942:sramecc+:xnack-", pool=pool)
            digests.add(hashlib.sha256(result.code_object).hexdigest())
    assert len(pids) == 2
    assert len(digests) == 1


def test_ld_lld_is_deterministic_and_stamps_only_its_version():
    with WorkerPool(1) as pool:
        obj = pool.call(WorkerSpec.of(PY), "llvm.compile", llvm_payload(ADD1, Target.parse("gfx950"))).blob
    a, b = link_hsaco(obj), link_hsaco(obj)
    assert a == b
    elf = ELFFile(__import__("io").BytesIO(a))
    names = {s.name for s in elf.iter_sections()}
    assert ".note.gnu.build-id" not in names
    comment = elf.get_section_by_name(".comment").data().rstrip(b"\0").decode()
    assert comment == f"Linker: {linker_identity()['linker']}"
    assert lld_version(find_lld())[0] >= 20


def test_link_failure_is_a_compile_error():
    with pytest.raises(CompileError, match="ld.lld failed"):
        link_hsaco(b"\x7fELF not really an object" + b"\0" * 64)


def test_nvptx_compiles_to_ptx_and_cubin():
    result = compile_llvmlite(PY, NVPTX_ADD1, "sm_90")
    assert result.format == "cubin"
    assert ".target sm_90" in result.ptx and ".entry add1" in result.ptx
    info = validate(result.code_object, Target.parse("sm_90"))
    assert info.format == "cubin" and info.kernel == "add1"


def test_toolchain_compile_delegates_to_the_worker(llvm22):
    result = llvm22.compile(ADD1, Target.parse("gfx1250"))
    info = validate(result.code_object, Target.parse("gfx1250"))
    assert info.wavefront_size == 32 and info.descriptor.wavefront_size32


def test_llvm20_lane_compiles_through_its_own_interpreter(llvm20):
    python = llvm20.detect().location
    assert python != PY
    with WorkerPool(1) as pool:
        assert pool.call(WorkerSpec.of(python), "llvm.info").result["llvm_version"].startswith("20.")
        hsaco = compile_llvmlite(python, ADD1, "gfx942", pool=pool).code_object
        assert validate(hsaco, Target.parse("gfx942")).descriptor.user_sgpr_inputs == ("kernarg_segment_ptr",)
        # LLVM 20 does not know gfx1250: its "not a recognized processor" warning is an error
        with pytest.raises(CompileError, match="not a recognized processor"):
            compile_llvmlite(python, ADD1, "gfx1250", pool=pool)
    assert llvm20.compile(ADD1, Target.parse("gfx950")).format == "hsaco"
