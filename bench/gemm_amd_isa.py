"""Native gemm against Triton's tutorial matmul on AMD, per instruction, for the same tiles (issue 27).

    python bench/gemm_amd_isa.py --markdown                         # issue 27's table (docs/lowering.md)
    python bench/gemm_amd_isa.py --json bench/results/bench-raw/gemm-amd-isa.json --markdown
    python bench/gemm_amd_isa.py --arch gfx942 --lane llvm22 --tile 64x64x32x4
    python bench/gemm_amd_isa.py --served --aiter --markdown         # issue 37's table: every AMD
        arch and lane with a toolchain here, the served gemm tiles (f16, bf16), conv_direct_fwd
        and conv_dgrad_patch, Triton's kernel for each gemm tile, the amd-aiter bf16 gemm

For every (tile, arch, lane):
    native  lower("gemm", {path: mfma | wmma, block_m/n/k, waves, b_lds: kn and nk, vector_width
            4 and (nk) 8}, arch, lane)
            compiled by the lane's LLVM-IR toolchain (toolchain_for(lane, arch))
    triton  the triton_matmul family's spec (rocke_aot/kernels/triton_matmul.py, the tutorial
            kernel) with BLOCK_M/N/K of the tile, num_warps = waves, num_stages 2 (the tutorial's
            HIP setting), GROUP_M 1 (the native default tile order), dims divisible by 16,
            lowered to its compile request and compiled by the lane's Triton toolchain
            (toolchain_for(lane, arch, consumes="triton")): llvm22 = Triton 3.6, llvm24 = 3.9
then bench/codegen_deltas.py's reading of the code object (its analyze(): llvm-readelf-22 --notes
for VGPR/AGPR/SGPR, spills, LDS bytes; llvm-objdump-22 -d; the main loop = the backward branch
holding the most matrix instructions), and here, within that loop, every memory instruction by
mnemonic (its width is in the name), the bytes a lane moves per iteration from global memory and
through LDS, and direct-to-LDS loads (the `lds` modifier of buffer/global loads, or a *_lds_*
mnemonic). Counts are per pass of the loop; "K-steps" says how many block_k steps one pass covers
(Triton 3.9 unrolls some loops by 2: divide its counts by it to compare per step). Triton's C is f16 (its dtype is one for A, B, C) where the native kernel's is f32:
only the epilogue differs, outside the loop counted here.

--served (issue 37): the kernels the variant tables serve, not knob sweeps. gemm: kinds "served"
and "served-db" (GemmSpec with the table's AMD_MATRIX folds, double_buffer off / on) for each
SERVED_TILES tile and dtype pair of the table (f16 -> f32, bf16 -> bf16), beside Triton's kernel
for the same tile and dtype; conv_direct_fwd and conv_dgrad_patch: CONV_SPECS (the AMD picks'
tiles on the table's layers, docs/selection.md), native only (the project has no Triton conv
kernel). Lanes with no toolchain here are skipped and named on stderr. --aiter: AMD's own
hand-written bf16 gemm code objects from the `amd-aiter` wheel (`pip download amd-aiter --no-deps`
into a temporary folder, read there, never kept: aiter_meta/hsa/<arch>/bf16gemm/*.co, gfx942 and
gfx950), read by the same reader: the vendor's reference, not a same-tile comparison (its tiles
are 32..96 x 64, prefetch 3).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import codegen_deltas as cd  # bench/codegen_deltas.py: its code object reader (bench/ is on the path when run)

from rocke_aot.lanes import get_lane

ROOT = Path(__file__).resolve().parents[1]
TILES = ((128, 128, 32, 4), (64, 64, 32, 4))  # block_m, block_n, block_k, waves
ARCHES = ("gfx942", "gfx950")
LANES = ("llvm22", "llvm24")
ALL_ARCHES = ("gfx942", "gfx950", "gfx1250", "gfx90a")
ALL_LANES = ("llvm22", "llvm23", "llvm24")
# --served: the register-staged AMD grid's tiles (families/gemm/table.py stops AMD at 128-wide blocks and 4
# waves; 256 x 128 is the sm_90 asynchronous grid's only): the smallest and largest 4-wave tiles (--tile for others)
SERVED_TILES = ((64, 64, 32, 4), (128, 128, 32, 4))
GEMM_DTYPES = (("f16", "f32"), ("bf16", "bf16"))  # the table's pairs with distinct inputs
SERVED_KINDS = ("served", "served-db", "triton")
# the AMD picks' conv tiles (docs/selection.md) on the tables' layers (tables/conv.py): ResNet 3x3
# c64 (f16, bf16) and the patch embeddings the issue names (p16c3, p14c4, p14c3)
_RESNET = dict(c=64, k=64, r=3, s=3, stride_h=1, stride_w=1, pad_h=1, pad_w=1, dil_h=1, dil_w=1)
CONV_SPECS = (
    ("conv_direct_fwd", dict(dtype="f16", **_RESNET, tile_h=8, tile_w=16, tile_k=64, c_chunk=8)),
    ("conv_direct_fwd", dict(dtype="f16", **_RESNET, tile_h=8, tile_w=16, tile_k=64, c_chunk=16)),
    ("conv_direct_fwd", dict(dtype="bf16", **_RESNET, tile_h=8, tile_w=16, tile_k=64, c_chunk=16)),
    ("conv_dgrad_patch", dict(dtype="f16", c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=32)),
    ("conv_dgrad_patch", dict(dtype="bf16", c=3, p=16, tile_h=4, tile_w=8, r_blk=2, k_chunk=32)),
    ("conv_dgrad_patch", dict(dtype="f16", c=4, p=14, tile_h=4, tile_w=4, r_blk=14, k_chunk=32)),
    # ViT-L/14: the time model's pick on gfx942 and gfx950 is k_chunk 32 (bench/results/bench-raw/amd-picks.txt;
    # k_chunk 16 until 2026-12-06 e: 13.0 -> 9.5 instructions a matrix instruction, bench/conv_dgrad_geometry.py)
    ("conv_dgrad_patch", dict(dtype="f16", c=3, p=14, tile_h=2, tile_w=8, r_blk=7, k_chunk=32)),
)
# gfx1250's wmma (16x16x32) tiles none of the tiles above: its picks' tiles (docs/selection.md), r_blk kept
CONV_WMMA = {"conv_direct_fwd": dict(tile_h=4, tile_w=8, tile_k=16, c_chunk=32),
             "conv_dgrad_patch": dict(tile_h=2, tile_w=8, k_chunk=32)}
AITER_ARCHES = ("gfx942", "gfx950")
MATRIX_PATH = {"gfx90a": "mfma", "gfx942": "mfma", "gfx950": "mfma", "gfx1250": "wmma"}
# the native gemm with B in LDS as in memory / transposed (GemmSpec.b_lds), and with 16-byte
# staging vectors (vector_width 8, Triton's global load width)
KINDS = ("native-kn", "native-nk", "native-nk-v8", "triton")
FAMILY_NAMES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")

# bits a lane moves, by the width suffix of a memory mnemonic (ds_read2_* moves two of them)
_WIDTH = {"ubyte": 8, "sbyte": 8, "u8": 8, "i8": 8, "b8": 8, "ushort": 16, "sshort": 16, "short": 16, "u16": 16,
          "i16": 16, "b16": 16, "dword": 32, "b32": 32, "dwordx2": 64, "b64": 64, "dwordx3": 96, "b96": 96,
          "dwordx4": 128, "b128": 128}
_SUFFIX = re.compile(r"_(ubyte|sbyte|u8|i8|b8|ushort|sshort|short|u16|i16|b16|dwordx[234]|dword|b32|b64|b96|b128)"
                     r"(?:_d16(?:_hi)?)?$")
MEMORY = {"global_load": ("global_load", "buffer_load", "flat_load"), "lds_read": ("ds_read", "ds_load"),
          "lds_write": ("ds_write", "ds_store")}


def width_bits(mnemonic: str) -> int:
    """Bits one lane moves with ``mnemonic`` (ds_read2 / ds_write2: two elements); LookupError if unnamed."""
    m = _SUFFIX.search(re.sub(r"_tr_b\d+$", "", mnemonic))  # ds_read_b64_tr_b16: 64 bits of 16-bit elements
    if not m:
        raise LookupError(f"no width in {mnemonic!r}")
    return _WIDTH[m.group(1)] * (2 if re.match(r"ds_(read|write|load|store)2", mnemonic) else 1)


def loop_instructions(disassembly: str, kernel: str, start: int, end: int) -> list[tuple[str, str]]:
    """(mnemonic, operands) of ``kernel``'s instructions at addresses start..end (objdump -d text)."""
    out, inside = [], False
    for line in disassembly.splitlines():
        if line.endswith(">:"):
            inside = line.split("<", 1)[1][:-2] == kernel
            continue
        m = cd._INSN_RE.match(line) if inside else None
        if m and start <= int(m.group(3), 16) <= end:
            out.append((m.group(1), m.group(2).strip()))
    return out


def in_flight(insns: list[tuple[str, str]]) -> int:
    """The most vector (>= 8 bytes a lane) global loads issued between two full drains
    (s_waitcnt vmcnt(0)) in the loop's code order: 1 where each vector load sits behind its own
    edge branch and is consumed before the next; the edge paths' 2-byte element loads are
    left out, so the figure is the interior tiles' path."""
    best = run = 0
    for m, ops in insns:
        if m == "s_waitcnt" and re.search(r"vmcnt\(0\)", ops):
            run = 0
        elif m.startswith(MEMORY["global_load"]) and width_bits(m) >= 64:
            run += 1
            best = max(best, run)
    return best


def memory_counts(insns: list[tuple[str, str]]) -> dict:
    """Per class of MEMORY: mnemonic -> count, and the bytes a lane moves; matrix, waits, barriers,
    direct-to-LDS loads."""
    out: dict = {"matrix": sum(1 for m, _ in insns if m.startswith(("v_mfma", "v_smfmac", "v_wmma", "v_swmmac"))),
                 "wait": sum(1 for m, _ in insns if m.startswith("s_wait")),
                 "vmcnt0": sum(1 for m, ops in insns if m.startswith("s_wait") and
                               re.search(r"vmcnt\(0\)|^0$", ops) and m in ("s_waitcnt", "s_waitcnt_vmcnt")),
                 "barrier": sum(1 for m, _ in insns if m.startswith("s_barrier")),
                 "direct_to_lds": sum(1 for m, ops in insns if m.startswith(MEMORY["global_load"]) and
                                      ("_lds" in m or re.search(r"\blds\b", ops))),
                 "branches": sum(1 for m, _ in insns if m.startswith("s_cbranch")),
                 "insts": len(insns)}
    # v_mfma_f32_32x32x8_f16 (gfx940 names), v_mfma_f32_32x32x8f16 / ..8bf16_1k (gfx90a's)
    shapes = sorted({m.group(1) for mn, _ in insns if (m := re.search(r"_(\d+x\d+x\d+)(?:_|[a-z])", mn))})
    out["matrix_shape"] = shapes[0] if len(shapes) == 1 else None
    out["vector_loads_in_flight"] = in_flight(insns)
    for cls, prefixes in MEMORY.items():
        c = Counter(m for m, _ in insns if m.startswith(prefixes))
        out[cls] = dict(sorted(c.items()))
        out[cls + "_n"] = sum(c.values())
        out[cls + "_bytes"] = sum(n * width_bits(m) // 8 for m, n in c.items())
    return out


def interior_loop(text: str, kernel: str, base: int, size: int, innermost: bool = False) -> tuple[int, int] | None:
    """(start, end) of the interior main loop: of the regions the backward branches close, those
    holding the most matrix instructions, the one with the fewest instructions. A kernel whose
    edge tiles run a loop of their own (the native AMD gemm: an interior loop without bounds
    checks, then an edge loop with them) has two loops of the same matrix work; the interior
    one is the tighter. With one loop this is codegen_deltas' main loop. ``innermost``: the
    backward branches to one header are one loop (its region reaches the last of them: a
    guarded block the compiler placed after the first back-edge is inside), and only loops
    holding matrix instructions that hold no other such loop are candidates (an attention
    kernel's K/V loop inside a persistent loop over query tiles, amd-aiter's causal fmha_v3_fwd)."""
    insns = [i for i in cd.parse_disassembly(text, kernel) if base <= i.addr < base + size]
    back = [(base + i.target, i.addr) for i in insns if i.target is not None and base + i.target <= i.addr]
    if not back:
        return None
    if innermost:
        ends: dict[int, int] = {}
        for head, end in back:
            ends[head] = max(end, ends.get(head, end))
        back = sorted(ends.items())

    def rank(region: tuple[int, int]) -> tuple[int, int]:
        inside = [i for i in insns if region[0] <= i.addr <= region[1]]
        return cd.count(inside)["matrix"], -len(inside)

    if innermost:
        hot = [r for r in back if rank(r)[0]]
        inner = [r for r in hot if not any(o != r and r[0] <= o[0] and o[1] <= r[1] for o in hot)]
        back = inner or back
    return max(back, key=rank)


def read(hsaco: Path, kernel: str, innermost: bool = False) -> dict:
    """Registers, spills, LDS from the notes; the interior main loop's counts (interior_loop;
    the whole kernel if it has no loop)."""
    st = cd.analyze(hsaco, kernel)
    text = subprocess.run([cd.OBJDUMP, "-d", str(hsaco)], check=True, capture_output=True, text=True).stdout
    if st.scope == "loop":
        base, size = cd.kernel_symbol(cd._run(cd.READELF, "-s", "-W", str(hsaco)), kernel)
        start, end = interior_loop(text, kernel, base, size, innermost)
        insns = loop_instructions(text, kernel, start, end)
    else:
        base, size = cd.kernel_symbol(cd._run(cd.READELF, "-s", "-W", str(hsaco)), kernel)
        insns = loop_instructions(text, kernel, base, base + size - 1)
    return {"vgpr": st.vgpr, "agpr": st.agpr, "sgpr": st.sgpr, "vgpr_spills": st.vgpr_spills,
            "sgpr_spills": st.sgpr_spills, "scratch_bytes": st.scratch_bytes, "lds_bytes": st.lds_bytes,
            "code_bytes": st.code_bytes, "scope": st.scope, "loop": memory_counts(insns)}


def triton_spec(tile: tuple[int, int, int, int], dtype: str = "f16"):
    from rocke_aot.aot.families import get_family

    bm, bn, bk, waves = tile
    return get_family("triton_matmul").spec_type(dtype=dtype, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1,
                                                 num_warps=waves, num_stages=2, m_class="div16",
                                                 n_class="div16", k_class="div16")


def native_spec(tile: tuple[int, int, int, int], arch: str, kind: str) -> dict:
    """kind "native-<b_lds>" or "native-<b_lds>-v<vector_width>" (default vector_width 4)."""
    bm, bn, bk, waves = tile
    parts = kind.split("-")
    vw = int(parts[2][1:]) if len(parts) > 2 else 4
    return {"in_dtype": "f16", "out_dtype": "f32", "path": MATRIX_PATH[arch], "block_m": bm, "block_n": bn,
            "block_k": bk, "waves": waves, "b_lds": parts[1], "vector_width": vw}


def served_spec(tile: tuple[int, int, int, int], arch: str, kind: str, dtypes=("f16", "f32")) -> dict:
    """The spec the gemm table serves for ``tile`` (families/gemm/table.py _make: the AMD_MATRIX folds)."""
    from rocke_aot.families.gemm.table import AMD_MATRIX

    bm, bn, bk, waves = tile
    return {"in_dtype": dtypes[0], "out_dtype": dtypes[1], "path": MATRIX_PATH[arch], "block_m": bm, "block_n": bn,
            "block_k": bk, "waves": waves, "double_buffer": kind == "served-db", **AMD_MATRIX}


def conv_spec(family: str, knobs: dict, arch: str) -> dict:
    """The knobs on ``arch``'s matrix path (gfx1250: its own tile, CONV_WMMA)."""
    return {**knobs, **(CONV_WMMA[family] if MATRIX_PATH[arch] == "wmma" else {}), "path": MATRIX_PATH[arch]}


def compile_one(kind: str, tile, arch: str, lane: str, workdir: Path, dtypes=("f16", "f32"),
                family: str = "gemm", conv: dict | None = None) -> dict:
    """One column: kind "native-kn" / "native-nk" / "served" / "served-db" / "triton" (gemm), or
    "native" with ``conv`` the knobs of a conv family -> read() of its code object."""
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.targets import Target

    if kind == "triton":
        kernel = lower("triton_matmul", triton_spec(tile, dtypes[0]), arch, lane)
        tc = tcs.toolchain_for(get_lane(lane), Target.parse(arch), consumes="triton")
    elif family != "gemm":
        kernel = lower(family, conv_spec(family, conv, arch), arch, lane)
        tc = tcs.toolchain_for(get_lane(lane), Target.parse(arch))
    elif kind.startswith("served"):
        kernel = lower("gemm", served_spec(tile, arch, kind, dtypes), arch, lane)
        tc = tcs.toolchain_for(get_lane(lane), Target.parse(arch))
    else:
        kernel = lower("gemm", native_spec(tile, arch, kind), arch, lane)
        tc = tcs.toolchain_for(get_lane(lane), Target.parse(arch))
    path = workdir / f"{family}-{kind}-{'x'.join(map(str, tile))}-{dtypes[0]}-{arch}-{lane}.hsaco"
    row = {"family": family, "kind": kind, "tile": "x".join(map(str, tile[:3])), "waves": tile[3], "arch": arch,
           "lane": lane, "dtype": dtypes[0], **compile_read(kernel, tc, arch, path, kind == "triton")}
    if family == "gemm":
        row["k_steps"] = k_steps(row["loop"]["matrix_shape"], row["loop"]["matrix"], tile)
    else:  # a conv's tile is its kernel name's; one pass of its loop is one step of its reduction
        row["tile"], row["k_steps"] = kernel.kernel_name.removeprefix(family + "_"), 1.0
    return row


def compile_read(kernel, tc, arch: str, path: Path, triton: bool, innermost: bool = False) -> dict:
    """Compile a lowered kernel with toolchain ``tc`` into ``path`` and read() it: the row's
    kernel, compiler and counts (bench/attention_amd_isa.py shares this)."""
    from rocke_aot.targets import Target

    result = tc.compile(kernel.ir, Target.parse(arch), timeout=300)
    path.write_bytes(result.code_object)
    info = tc.detect()
    who = f"Triton {info.extra['triton_version']}" if triton else f"{tc.kind} {info.llvm_version}"
    row = {"kernel": kernel.kernel_name, "compiler": who, **read(path, kernel.kernel_name, innermost)}
    if triton:  # Triton's LDS is dynamic: its metadata's "shared", not the code object's notes
        row["lds_bytes"] += int(result.extra["triton"]["shared"])
    return row


def _text_end(hsaco: Path) -> int:
    """The end address of the .text section (hand-written code objects give their kernel symbol size 0)."""
    for line in cd._run(cd.READELF, "-S", "-W", str(hsaco)).splitlines():
        f = line.replace("[ ", "[").split()
        if len(f) > 5 and f[1] == ".text":
            return int(f[3], 16) + int(f[5], 16)
    raise LookupError(f"no .text in {hsaco}")


def _fold_labels(text: str, kernel: str, base: int) -> str:
    """objdump text of assembly whose local labels (``label_00FE``) print as symbols of their own:
    the label lines dropped and each branch to one rewritten as ``<kernel+0xOFF>``, so the
    kernel reads as one function as the compiled ones do."""
    labels = {m.group(2): int(m.group(1), 16) for m in re.finditer(r"^([0-9a-f]+) <(label_[0-9A-Fa-f]+)>:$", text, re.M)}
    out = []
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]+ <label_[0-9A-Fa-f]+>:$", line):
            continue
        m = re.match(r"^(\s+s_c?branch\w*)\s+(label_[0-9A-Fa-f]+)(\s*//.*)$", line)
        if m and m.group(2) in labels:
            line = f"{m.group(1)} {m.group(3)} <{kernel}+0x{labels[m.group(2)] - base:x}>"
        out.append(line)
    return "\n".join(out) + "\n"


def read_handwritten(hsaco: Path, kernel: str, innermost: bool = False) -> dict:
    """read() for a code object whose kernel symbol has size 0 (assembly): the symbol to the end
    of .text; the interior loop as read() finds it."""
    meta = cd.read_metadata(cd._run(cd.READELF, "--notes", str(hsaco)))
    base, _ = cd.kernel_symbol(cd._run(cd.READELF, "-s", "-W", str(hsaco)), kernel)
    size = _text_end(hsaco) - base
    text = _fold_labels(subprocess.run([cd.OBJDUMP, "-d", str(hsaco)], check=True, capture_output=True,
                                       text=True).stdout, kernel, base)
    loop = interior_loop(text, kernel, base, size, innermost)
    start, end = loop if loop else (base, base + size - 1)
    regs = {ours: int(meta.get(key, 0)) for key, ours in cd.METADATA.items()}
    return {**regs, "code_bytes": size, "scope": "loop" if loop else "kernel",
            "loop": memory_counts(loop_instructions(text, kernel, start, end))}


def aiter_rows(arches=AITER_ARCHES, wheel: Path | None = None) -> list[dict]:
    """The amd-aiter wheel's bf16 gemm code objects (hsa/<arch>/bf16gemm/*.co), each read as a row;
    the wheel is downloaded into a temporary folder unless ``wheel`` names one, and never kept."""
    import csv
    import io
    import zipfile

    rows = []
    with tempfile.TemporaryDirectory() as d:
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "amd-aiter", "--no-deps", "--only-binary", ":all:",
                            "-d", d], check=True, capture_output=True, timeout=600)
            wheel = next(Path(d).glob("amd_aiter-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            for arch in arches:
                folder = f"aiter_meta/hsa/{arch}/bf16gemm/"
                table = csv.DictReader(io.StringIO(z.read(folder + "bf16gemm_outf32.csv").decode()))
                for entry in table:
                    co = Path(d) / f"{arch}-{entry['knl_file']}"
                    co.write_bytes(z.read(folder + entry["knl_file"]))
                    name = entry["knl_name"]
                    row = {"family": "gemm", "kind": "aiter", "tile": f"{entry['tileM']}x{entry['tileN']}",
                           "waves": 0, "arch": arch, "lane": "-", "dtype": "bf16", "kernel": name,
                           "compiler": f"amd-aiter {wheel.name.split('-')[1]} (pf{entry['pf']})",
                           **read_handwritten(co, name)}
                    row["waves"] = _waves(co)
                    row["k_steps"] = 1.0
                    rows.append(row)
    return rows


def _waves(hsaco: Path) -> int:
    """Waves a work-group from the notes' .max_flat_workgroup_size (64-lane waves on gfx9)."""
    m = re.search(r"\.max_flat_workgroup_size:\s+(\d+)", cd._run(cd.READELF, "--notes", str(hsaco)))
    return int(m.group(1)) // 64 if m else 0


def k_steps(shape: str | None, matrix: int, tile) -> float:
    """K-steps of the tile one pass of the loop covers: its matrix instructions over one step's
    (block_m*block_n*block_k / (M*N*K of the instruction) / waves); Triton unrolls some loops by 2."""
    if not shape:
        return 0.0
    m, n, k = (int(x) for x in shape.split("x"))
    per_step = tile[0] * tile[1] * tile[2] / (m * n * k) / tile[3]
    return matrix / per_step


def run(tiles=TILES, arches=ARCHES, lanes=LANES, kinds=KINDS) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for tile in tiles:
            for arch in arches:
                for lane in lanes:
                    for kind in kinds:
                        rows.append(compile_one(kind, tile, arch, lane, Path(d)))
    return {"command": "python bench/gemm_amd_isa.py " + " ".join(sys.argv[1:]), "rows": rows}


def lanes_here(lanes, arch: str) -> list[str]:
    """The lanes of ``lanes`` with a toolchain for ``arch`` on this host; the others named on stderr."""
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.errors import ToolchainError
    from rocke_aot.targets import Target

    out = []
    for lane in lanes:
        try:
            tcs.toolchain_for(get_lane(lane), Target.parse(arch))
            out.append(lane)
        except ToolchainError as e:
            print(f"skipped {arch} {lane}: {e}", file=sys.stderr)
    return out


def run_served(tiles=SERVED_TILES, arches=ALL_ARCHES, lanes=ALL_LANES, families=FAMILY_NAMES,
               dtypes=GEMM_DTYPES, aiter: bool = False, aiter_wheel: Path | None = None) -> dict:
    """Issue 37's table: the served kernels (module docstring, --served); a kernel that fails to
    compile (a Triton without that arch) is a row with its error, not a stop."""
    from rocke_aot.errors import RockeError

    rows = aiter_rows(tuple(a for a in arches if a in AITER_ARCHES), aiter_wheel) if aiter else []
    with tempfile.TemporaryDirectory() as d:
        for arch in arches:
            for lane in lanes_here(lanes, arch):
                jobs = []
                if "gemm" in families:
                    jobs += [(k, t, dt, "gemm", None) for t in tiles for dt in dtypes for k in SERVED_KINDS]
                convs = {json.dumps(conv_spec(f, c, arch), sort_keys=True): (f, c) for f, c in CONV_SPECS if f in families}
                jobs += [("native", (0, 0, 0, 0), (c["dtype"], c["dtype"]), f, c) for f, c in convs.values()]
                for kind, tile, dt, fam, conv in jobs:
                    try:
                        rows.append(compile_one(kind, tile, arch, lane, Path(d), dt, fam, conv))
                    except (RockeError, subprocess.SubprocessError, LookupError) as e:
                        rows.append({"family": fam, "kind": kind, "tile": "x".join(map(str, tile[:3])),
                                     "waves": tile[3], "arch": arch, "lane": lane, "dtype": dt[0],
                                     "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"})
                    print(json.dumps(rows[-1], sort_keys=True), file=sys.stderr, flush=True)  # progress
    return {"command": "python bench/gemm_amd_isa.py " + " ".join(sys.argv[1:]), "rows": rows}


def width_mix(d: dict) -> str:
    """'buffer_load_dwordx4x8 read2_b64x4': global_ and ds_ dropped (the column names them), buffer_ kept."""
    return " ".join(f"{m.removeprefix('global_').removeprefix('ds_')}x{n}" for m, n in d.items()) or "-"


HEAD = ["tile", "arch", "lane", "kernel", "K-steps", "matrix", "global loads", "glb B/lane", "LDS reads", "LDS rd B/lane",
        "LDS writes", "to-LDS", "vec loads in flight", "waits (vmcnt0)", "barriers", "branches", "insts", "VGPR", "AGPR", "SGPR",
        "spills", "LDS B"]


SERVED_HEAD = ["family", "dtype", "tile", "arch", "lane", "kernel", "insts / matrix", "waits (vmcnt0)", "barriers",
               "branches", "global loads", "LDS reads", "LDS writes", "to-LDS", "VGPR", "AGPR", "spills",
               "scratch B", "LDS B"]


def served_markdown(doc: dict) -> str:
    """Issue 37's table: one row per kernel; insts / matrix per K-step (Triton 3.9's unrolled
    loops divided by their K-steps)."""
    lines = ["| " + " | ".join(SERVED_HEAD) + " |", "|" + "---|" * len(SERVED_HEAD)]
    for r in doc["rows"]:
        tile = f"{r['tile']} w{r['waves']}" if r["family"] == "gemm" else r["tile"]
        name = r["kind"]
        if name == "triton" and "compiler" in r:
            name = "triton " + r["compiler"].split()[-1]
        elif name == "aiter":
            name = r["compiler"]
        head = [r["family"], r["dtype"], tile, r["arch"], r["lane"], name]
        if "error" in r:
            lines.append("| " + " | ".join(head + [r["error"]] + [""] * (len(SERVED_HEAD) - 7)) + " |")
            continue
        lp, ks = r["loop"], r["k_steps"] or 1.0
        per = f"{lp['insts'] / ks:g} / {lp['matrix'] / ks:g}" if ks != 1 else f"{lp['insts']} / {lp['matrix']}"
        if r["scope"] != "loop":
            per += " (no loop)"
        cells = head + [per, f"{lp['wait']} ({lp['vmcnt0']})", lp["barrier"], lp["branches"], width_mix(lp["global_load"]),
                        width_mix(lp["lds_read"]), width_mix(lp["lds_write"]), lp["direct_to_lds"], r["vgpr"], r["agpr"],
                        f"{r['vgpr_spills']}+{r['sgpr_spills']}", r["scratch_bytes"], r.get("lds_bytes", "")]
        if ks != 1:
            cells[6] += f" (x{ks:g} unrolled)"
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _per_step(r: dict) -> tuple[float, float, int]:
    """(instructions, waits, matrix) of one K-step of a row's interior loop."""
    lp, ks = r["loop"], r["k_steps"] or 1.0
    return lp["insts"] / ks, lp["wait"] / ks, round(lp["matrix"] / ks)


def summary_markdown(doc: dict) -> str:
    """The condensed table in docs/lowering.md: per (arch, lane, gemm tile, dtype) the served
    kernel's interior loop (single / double buffer) beside Triton's, instructions / matrix and
    waits per K-step, and whether the issue's goal holds (native <= 1.1 x Triton in both, only
    8- or 16-byte global loads and LDS reads, no spills); then the conv rows; then amd-aiter's."""
    rows = [r for r in doc["rows"] if "error" not in r]
    by = {(r["family"], r["arch"], r["lane"], r["tile"], r["waves"], r["dtype"], r["kind"]): r for r in rows}
    out = ["| arch | lane | tile | dtype | served | served-db | Triton | goal | goal (db) |",
           "|---|---|---|---|---|---|---|---|---|"]

    def cell(r):
        if r is None:
            return "-"
        i, w, m = _per_step(r)
        return f"{i:g} / {m}, {w:g} w" + (f", {r['vgpr_spills']} spills" if r["vgpr_spills"] else "")

    def goal(r, tr):
        """The issue's goal for one native row against Triton's: per K-step instructions and
        waits at most 1.1x, only 8- or 16-byte global loads and LDS reads, no spills."""
        if r is None:
            return "-"
        narrow = [m for m in (*r["loop"]["global_load"], *r["loop"]["lds_read"]) if width_bits(m) < 64]
        return "no Triton here" if tr is None else "Triton: no matrix instr." if not tr["loop"]["matrix"] else (
            "yes" if _per_step(r)[0] <= 1.1 * _per_step(tr)[0] and _per_step(r)[1] <= 1.1 * _per_step(tr)[1]
            and not narrow and not r["vgpr_spills"] else "no")

    for (fam, arch, lane, tile, waves, dtype, kind), r in by.items():
        if fam != "gemm" or kind != "served":
            continue
        db, tr = by.get((fam, arch, lane, tile, waves, dtype, "served-db")), by.get((fam, arch, lane, tile, waves, dtype, "triton"))
        out.append(f"| {arch} | {lane} | {tile} w{waves} | {dtype} | {cell(r)} | {cell(db)} | "
                   f"{cell(tr) + (' (' + tr['compiler'] + ')' if tr else '')} | {goal(r, tr)} | {goal(db, tr)} |")
    out += ["", "| arch | lane | kernel | insts / matrix | per matrix | waits | global loads | LDS reads | VGPR | spills |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["family"] != "gemm" or r["kind"] == "aiter":
            lp = r["loop"]
            i, w, m = _per_step(r)
            out.append(f"| {r['arch']} | {r['lane']} | {r['kernel']} | {i:g} / {m} | {i / max(m, 1):.1f} | {w:g} | "
                       f"{width_mix(lp['global_load'])} | "
                       f"{width_mix(lp['lds_read'])} | {r['vgpr']} | {r['vgpr_spills']}+{r['sgpr_spills']} |")
    return "\n".join(out) + "\n"


def markdown(doc: dict) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in doc["rows"]:
        lp = r["loop"]
        name = "triton " + r["compiler"].split()[-1] if r["kind"] == "triton" else r["kind"]
        cells = [f"{r['tile']} w{r['waves']}", r["arch"], r["lane"], name, f"{r['k_steps']:g}", lp["matrix"], width_mix(lp["global_load"]),
                 lp["global_load_bytes"], width_mix(lp["lds_read"]), lp["lds_read_bytes"], width_mix(lp["lds_write"]),
                 lp["direct_to_lds"], lp["vector_loads_in_flight"], f"{lp['wait']} ({lp['vmcnt0']})", lp["barrier"], lp["branches"], lp["insts"],
                 r["vgpr"], r["agpr"], r["sgpr"], f"{r['vgpr_spills']}+{r['sgpr_spills']}", r["lds_bytes"]]
        if r["scope"] != "loop":
            cells[3] += " (no loop: whole kernel)"
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _tile(text: str) -> tuple[int, int, int, int]:
    parts = [int(p) for p in text.split("x")]
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"tile {text!r}: block_m x block_n x block_k x waves, e.g. 64x64x32x4")
    return tuple(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tile", action="append", type=_tile, help="MxNxKxWAVES, repeatable; default 128x128x32x4, 64x64x32x4")
    ap.add_argument("--arch", action="append", choices=tuple(MATRIX_PATH), help="repeatable; default gfx942, gfx950")
    ap.add_argument("--lane", action="append", choices=ALL_LANES, help="repeatable; default llvm22, llvm24")
    ap.add_argument("--served", action="store_true",
                    help="issue 37's table: the served kernels of gemm (f16, bf16), conv_direct_fwd, conv_dgrad_patch "
                         "on every AMD arch and lane with a toolchain here (default arches/lanes: all)")
    ap.add_argument("--family", action="append", choices=FAMILY_NAMES, help="with --served; repeatable; default all")
    ap.add_argument("--aiter", action="store_true",
                    help="with --served: add the amd-aiter wheel's bf16 gemm code objects (pip download, not kept)")
    ap.add_argument("--aiter-wheel", type=Path, default=None, help="an amd-aiter wheel already downloaded")
    ap.add_argument("--summary", type=Path, default=None,
                    help="with --served: read the raw figures of an earlier --json from here and print the condensed "
                         "table (docs/lowering.md), compiling nothing")
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    ap.add_argument("--markdown", action="store_true", help="print the table (default: one JSON row a line)")
    args = ap.parse_args(argv)
    if args.summary:
        sys.stdout.write(summary_markdown(json.loads(args.summary.read_text())))
        return 0
    if args.served:
        doc = run_served(tuple(args.tile or SERVED_TILES), tuple(args.arch or ALL_ARCHES), tuple(args.lane or ALL_LANES),
                         tuple(args.family or FAMILY_NAMES), aiter=args.aiter or bool(args.aiter_wheel),
                         aiter_wheel=args.aiter_wheel)
    else:
        doc = run(tuple(args.tile or TILES), tuple(args.arch or ARCHES), tuple(args.lane or LANES))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = ",\n".join(json.dumps(r, sort_keys=True) for r in doc["rows"])
        args.json.write_text(f'{{"command": {json.dumps(doc["command"])}, "rows": [\n{rows}\n]}}\n')
    if args.markdown:
        sys.stdout.write(served_markdown(doc) if args.served else markdown(doc))
    elif not args.json:
        for r in doc["rows"]:
            print(json.dumps(r, sort_keys=True))
    # a native kernel without matrix instructions in its loop is a broken reading (Triton 3.6 has no
    # WMMA for gfx1250: its rows there say so, with 0)
    return 1 if any("loop" in r and r["loop"]["matrix"] == 0 and r["kind"] != "triton" for r in doc["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
