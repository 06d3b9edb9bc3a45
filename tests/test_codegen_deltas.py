"""bench/codegen_deltas.py's reading of one real code object, checked against the LLVM 22 binutils
read here independently: register counts against `llvm-readelf-22 --notes` lines found by grep,
instruction counts against `grep -c` over `llvm-objdump-22 -d`, and the main loop's bounds
against the branch instruction objdump prints at its end (docs/llvm23-lane.md, "Codegen deltas").
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from _bench import load_bench

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.codeobject import validate
from rocke_aot.aot.lower import lower
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """A gemm with a K loop (mfma on gfx942), compiled by the llvm22 lane's real toolchain."""
    kernel = lower("gemm", {"path": "mfma"}, "gfx942", "llvm22")
    result = tcs.toolchain_for(get_lane("llvm22"), Target.parse("gfx942")).compile(kernel.ir, Target.parse("gfx942"))
    path = tmp_path_factory.mktemp("cgd") / "k.hsaco"
    path.write_bytes(result.code_object)
    return path, kernel.kernel_name, result.code_object


def _sh(cmd: str) -> str:
    return subprocess.run(["bash", "-c", cmd], check=True, capture_output=True, text=True).stdout


def test_register_counts_and_sizes_equal_llvm_readelf(compiled):
    path, name, blob = compiled
    st = load_bench("codegen_deltas").analyze(path, name)
    for key, ours in [("vgpr_count", "vgpr"), ("sgpr_count", "sgpr"), ("agpr_count", "agpr"),
                      ("group_segment_fixed_size", "lds_bytes"),
                      ("private_segment_fixed_size", "scratch_bytes"),
                      ("vgpr_spill_count", "vgpr_spills"), ("sgpr_spill_count", "sgpr_spills")]:
        line = _sh(f"llvm-readelf-22 --notes {path} | grep -E '^[ -]*\\.{key}:'")
        assert getattr(st, ours) == int(line.split(":")[1]), key
    # the project's msgpack reader of the same note, a third reading
    info = validate(blob, Target.parse("gfx942"), kernel=name)
    assert (st.vgpr, st.sgpr, st.agpr, st.lds_bytes) == (info.vgpr_count, info.sgpr_count,
                                                         info.agpr_count, info.lds_bytes)
    assert st.lds_bytes > 0 and st.vgpr > 0
    size = _sh(f"llvm-readelf-22 -sW {path} | awk '$4 == \"FUNC\" && $8 == \"{name}\" {{print $3; exit}}'")
    assert st.code_bytes == int(size) > 0


def test_instruction_counts_equal_grep_of_llvm_objdump(compiled, tmp_path):
    path, name, _ = compiled
    bench = load_bench("codegen_deltas")
    st = bench.analyze(path, name)
    base, size = (int(x, 16) if i == 0 else int(x) for i, x in enumerate(
        _sh(f"llvm-readelf-22 -sW {path} | awk '$4 == \"FUNC\" && $8 == \"{name}\" {{print $2, $3; exit}}'").split()))
    # the kernel's lines only: objdump pads the section past the symbol's end with s_nop/s_code_end
    dis = tmp_path / "k.s"
    lines = [ln for ln in _sh(f"llvm-objdump-22 -d {path}").splitlines()
             if (m := re.search(r"// ([0-9A-F]{12}):", ln)) and base <= int(m.group(1), 16) < base + size]
    dis.write_text("\n".join(lines) + "\n")

    def grep(pattern: str, file: Path = dis) -> int:
        return int(_sh(f"grep -cE '^\\s+({pattern})' {file} || true"))

    patterns = {"matrix": "v_mfma|v_smfmac|v_wmma|v_swmmac", "lds": "ds_read|ds_write|ds_load|ds_store",
                "global": "global_load|global_store|buffer_", "wait": "s_wait", "barrier": "s_barrier"}
    for cls, pattern in patterns.items():
        assert st.kernel_counts[cls] == grep(pattern), cls
    assert st.kernel_counts["insts"] == len(lines)
    assert st.kernel_counts["matrix"] > 0 and st.kernel_counts["lds"] > 0

    # the main loop: its last instruction is a branch back to its first
    assert st.scope == "loop" and st.loops >= 1
    end_line = next(ln for ln in lines if f"// {st.loop_end:012X}:" in ln)
    assert re.match(r"^\s+s_(c)?branch", end_line)
    assert int(re.search(r"<[^>]+\+0x([0-9a-f]+)>", end_line).group(1), 16) + base == st.loop_start
    loop = tmp_path / "loop.s"
    loop.write_text("\n".join(ln for ln in lines
                              if st.loop_start <= int(re.search(r"// ([0-9A-F]{12}):", ln).group(1), 16)
                              <= st.loop_end) + "\n")
    for cls, pattern in patterns.items():
        assert st.counts[cls] == grep(pattern, loop), cls
    # the gemm's K loops hold its matrix instructions and a barrier: the AMD main loop (issue 37)
    # has an interior loop and an edge loop of one step's mfma each, nothing outside them
    assert st.kernel_counts["matrix"] == 2 * st.counts["matrix"] and st.counts["barrier"] >= 1
    assert st.counts["insts"] < st.kernel_counts["insts"]


def test_the_main_loop_is_the_one_around_the_matrix_work():
    bench = load_bench("codegen_deltas")
    insns = [bench.Insn(0x100, "s_load_dword", None), bench.Insn(0x108, "s_cbranch_scc0", 0x10),
             bench.Insn(0x10c, "v_mfma_f32_32x32x8_f16", None), bench.Insn(0x110, "s_endpgm", None)]
    assert bench.main_loop(insns, 0x100) is None  # a forward branch only: whole-kernel counts
    i = bench.Insn
    # a wide loop of stores [0x100, 0x120], then a narrow one around the mfma [0x124, 0x12c]
    two = [i(0x100, "global_store_dword", None), i(0x108, "v_add_u32", None), i(0x120, "s_cbranch_scc1", 0x0),
           i(0x124, "ds_read_b128", None), i(0x128, "v_mfma_f32_32x32x8_f16", None),
           i(0x12c, "s_cbranch_vccnz", 0x24), i(0x130, "s_endpgm", None)]
    assert bench.main_loop(two, 0x100) == (0x124, 0x12c, 2)
    # nested loops around the same mfma: the outer one
    nested = [i(0x100, "s_mov_b32", None), i(0x104, "v_mfma_f32_32x32x8_f16", None),
              i(0x108, "s_cbranch_scc0", 0x4), i(0x10c, "s_branch", 0x0)]
    assert bench.main_loop(nested, 0x100) == (0x100, 0x10c, 2)
