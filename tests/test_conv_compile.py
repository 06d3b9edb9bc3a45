"""The variant tables drive real compiles: every served combination lowers and compiles,
every refused one is refused with its reason before LLVM is reached.

    default run: a representative sample, one spec per (family, arch, path) for every
                 family (gemm included) on llvm22, the conv families' gfx942 and sm_90
                 paths on llvm20, their gfx1250 and mfma paths on the real LLVM 24
                 (code objects validated,
                 matrix instructions found in the disassembly, no scratch spills)
    -m slow:     the whole grid of every served (family, arch, lane) on both lanes
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from rocke_aot import lanes
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.compiler import compile_llvmlite
from rocke_aot.aot.lower import lower
from rocke_aot.arch import ARCHES
from rocke_aot.errors import AdmissionError, CapabilityError, SpecError
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family

# The families the project lowers to LLVM IR itself (Triton families compile through Triton,
# tests/test_triton*.py; plugins through their own tests, tests/test_plugins.py).
NATIVE = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")  # family folders (rocke_aot/families/<name>, entry points)

LLVM22_BIN = Path("/usr/lib/llvm-22/bin")
COMPILE_LANES = ("llvm22", "llvm20")  # lanes whose toolchains every host here has (conftest)


def _served(lane: str):
    for fam in table.family_names():
        if fam not in NATIVE:
            continue
        for arch in ARCHES:
            if table.admission(fam, arch, lane).served:
                yield fam, arch


def _sample(lane: str):
    """One spec per (family, arch, path): the first of each path in table order."""
    out = []
    for fam, arch in _served(lane):
        seen = set()
        for spec in table.enumerate_specs(fam, arch, lane):
            if spec.path not in seen:
                seen.add(spec.path)
                out.append(pytest.param(fam, arch, lane, spec, id=f"{fam}-{arch}-{lane}-{spec.path}"))
    return out


# llvm22: every family, arch and path; llvm20: the conv families where their paths differ
# from llvm22's (gfx942 mfma/fma, sm_90 fma) -- gemm's own tests cover gemm on llvm20.
SAMPLE = _sample("llvm22") + [p for p in _sample("llvm20")
                              if p.values[0] != "gemm" and p.values[1] in ("gfx942", "sm_90")]


@pytest.fixture(scope="module")
def lane_python(llvm22, llvm20):
    return {"llvm22": llvm22.python, "llvm20": llvm20.python}


def _objdump(hsaco: bytes, arch: str, tmp_path: Path) -> str:
    f = tmp_path / "k.hsaco"
    f.write_bytes(hsaco)
    return subprocess.run([str(LLVM22_BIN / "llvm-objdump"), "-d", f"--mcpu={arch}", str(f)],
                          capture_output=True, text=True, check=True).stdout


def _compile_and_check(python: str, fam: str, spec, arch: str, lane: str, tmp_path: Path | None):
    k = lower(fam, spec, arch, lane)
    res = compile_llvmlite(python, k.ir, arch)
    info = validate(res.code_object, Target.parse(arch), kernel=k.kernel_name)
    if res.format == "cubin":
        assert res.ptx and ".target sm_90" in res.ptx
        return
    assert info.kernarg_size == k.kernarg_size
    assert info.lds_bytes == k.lds_bytes
    assert info.wavefront_size == Target.parse(arch).wave_size
    if tmp_path is not None:
        assert info.private_segment_bytes == 0, f"{k.kernel_name} spills to scratch"
        matrix = set(re.findall(r"\bv_(?:mfma|wmma)\w*", _objdump(res.code_object, arch, tmp_path)))
        if spec.path == "fma":
            assert not matrix
        else:
            # gfx90a prints v_mfma_f32_32x32x8f16 where gfx942 prints ..._32x32x8_f16
            assert {m.replace("_", "") for m in matrix} == {k.metadata["instruction"].replace("_", "")}, matrix


@pytest.mark.parametrize("fam,arch,lane,spec", SAMPLE)
def test_served_sample_compiles(lane_python, tmp_path, fam, arch, lane, spec):
    _compile_and_check(lane_python[lane], fam, spec, arch, lane, tmp_path)


def test_sample_covers_every_conv_arch_and_path():
    got = {(p.values[0], p.values[1], p.values[2], p.values[3].path) for p in SAMPLE}
    for fam in ("conv_direct_fwd", "conv_dgrad_patch"):
        for arch, paths in (("gfx942", ("mfma", "fma")), ("gfx950", ("mfma", "fma")),
                            ("gfx1250", ("wmma", "fma")), ("sm_90", ("fma",))):
            for path in paths:
                assert (fam, arch, "llvm22", path) in got
        assert (fam, "gfx942", "llvm20", "mfma") in got and (fam, "sm_90", "llvm20", "fma") in got
        assert not any(g[:3] == (fam, "gfx1250", "llvm20") for g in got)


LLVM24_SAMPLE = [p for p in _sample("llvm24") if p.values[0] != "gemm"
                 and (p.values[1] == "gfx1250" or p.values[3].path == "mfma")]


@pytest.fixture(scope="module")
def llvm24_tc():
    from rocke_aot.aot.toolchains import triton24
    from rocke_aot.errors import ToolchainError

    try:
        return triton24.find_llvm24()
    except ToolchainError as e:  # setup installs it; missing is a broken setup, not a skip
        pytest.fail(str(e))


@pytest.mark.parametrize("fam,arch,lane,spec", LLVM24_SAMPLE)
def test_served_sample_compiles_on_the_real_llvm24(llvm24_tc, fam, arch, lane, spec):
    k = lower(fam, spec, arch, lane)
    info = validate(llvm24_tc.compile(k.ir, Target.parse(arch), timeout=300).code_object, Target.parse(arch), kernel=k.kernel_name)
    assert info.lds_bytes == k.lds_bytes and info.private_segment_bytes == 0


# -- refusals: decided before LLVM -------------------------------------------------------------

REFUSED = [(fam, arch, lane.name) for fam in NATIVE for arch in ARCHES
           for lane in lanes.LANES if not table.admission(fam, arch, lane).served]


def test_some_combinations_are_refused():
    assert ("conv_direct_fwd", "gfx1250", "llvm20") in REFUSED
    assert ("conv_dgrad_patch", "gfx1250", "llvm20") in REFUSED


@pytest.mark.parametrize("fam,arch,lane", REFUSED)
def test_refused_combination_is_refused_with_reason_before_llvm(monkeypatch, fam, arch, lane):
    # Any attempt to reach a compiler here would be a bug: make it fail loudly.
    import rocke_aot.aot.compiler as compiler
    from rocke_aot.aot.toolchains import llvmlite_toolchain

    for mod in (compiler, llvmlite_toolchain):
        monkeypatch.setattr(mod, "compile_llvmlite", lambda *a, **k: pytest.fail("LLVM reached"))
    reason = table.admission(fam, arch, lane).reason
    assert reason and reason != "served"
    with pytest.raises(AdmissionError) as e:
        table.enumerate_specs(fam, arch, lane)
    assert e.value.reason == reason
    # A spec the table serves for this arch on another lane is refused by the lowering too.
    other = next(ln for ln in lanes.LANES if table.admission(fam, arch, ln).served)
    spec = next(table.enumerate_specs(fam, arch, other))
    with pytest.raises(CapabilityError, match=arch):
        lower(fam, spec, arch, lane)


REFUSED_PATHS = [(fam, arch, path) for fam in ("conv_direct_fwd", "conv_dgrad_patch") for arch in ARCHES
                 for path, adm in table.path_admissions(fam, arch, "llvm22").items() if not adm.served]


@pytest.mark.parametrize("fam,arch,path", REFUSED_PATHS)
def test_refused_path_is_refused_before_llvm(fam, arch, path):
    reason = table.path_admissions(fam, arch, "llvm22")[path].reason
    assert path in reason
    spec_cls = get_family(fam).table.spec_from_dict
    base = next(table.enumerate_specs(fam, arch, "llvm22")).to_dict()
    with pytest.raises((CapabilityError, SpecError)):
        lower(fam, spec_cls({**base, "path": path}), arch, "llvm22")
    assert all(s.path != path for s in table.enumerate_specs(fam, arch, "llvm22"))


# -- the whole grid (slow) ---------------------------------------------------------------------

GRID = [pytest.param(fam, arch, lane, id=f"{fam}-{arch}-{lane}")
        for lane in COMPILE_LANES for fam, arch in _served(lane)]


@pytest.mark.slow
@pytest.mark.parametrize("fam,arch,lane", GRID)
def test_whole_grid_compiles(lane_python, fam, arch, lane):
    failures = []
    specs = list(table.enumerate_specs(fam, arch, lane))
    assert specs
    for spec in specs:
        try:
            _compile_and_check(lane_python[lane], fam, spec, arch, lane, None)
        except Exception as e:  # collect them all, then fail with the list
            failures.append(f"{spec.kernel_name}: {type(e).__name__}: {str(e)[:200]}")
    assert not failures, f"{len(failures)}/{len(specs)} failed:\n" + "\n".join(failures[:20])
