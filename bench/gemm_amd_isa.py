"""Native gemm against Triton's tutorial matmul on AMD, per instruction, for the same tiles (issue 27).

    python bench/gemm_amd_isa.py --markdown                         # the table in docs/lowering.md
    python bench/gemm_amd_isa.py --json bench/results/bench-raw/gemm-amd-isa.json --markdown
    python bench/gemm_amd_isa.py --arch gfx942 --lane llvm22 --tile 64x64x32x4

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

ROOT = Path(__file__).resolve().parents[1]
TILES = ((128, 128, 32, 4), (64, 64, 32, 4))  # block_m, block_n, block_k, waves
ARCHES = ("gfx942", "gfx950")
LANES = ("llvm22", "llvm24")
MATRIX_PATH = {"gfx90a": "mfma", "gfx942": "mfma", "gfx950": "mfma", "gfx1250": "wmma"}
# the native gemm with B in LDS as in memory / transposed (GemmSpec.b_lds), and with 16-byte
# staging vectors (vector_width 8, Triton's global load width)
KINDS = ("native-kn", "native-nk", "native-nk-v8", "triton")

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
    shapes = sorted({m.group(1) for mn, _ in insns if (m := re.search(r"_(\d+x\d+x\d+)_", mn))})
    out["matrix_shape"] = shapes[0] if len(shapes) == 1 else None
    out["vector_loads_in_flight"] = in_flight(insns)
    for cls, prefixes in MEMORY.items():
        c = Counter(m for m, _ in insns if m.startswith(prefixes))
        out[cls] = dict(sorted(c.items()))
        out[cls + "_n"] = sum(c.values())
        out[cls + "_bytes"] = sum(n * width_bits(m) // 8 for m, n in c.items())
    return out


def interior_loop(text: str, kernel: str, base: int, size: int) -> tuple[int, int] | None:
    """(start, end) of the interior main loop: of the regions the backward branches close, those
    holding the most matrix instructions, the one with the fewest instructions. A kernel whose
    edge tiles run a loop of their own (the native AMD gemm: an interior loop without bounds
    checks, then an edge loop with them) has two loops of the same matrix work; the interior
    one is the tighter. With one loop this is codegen_deltas' main loop."""
    insns = [i for i in cd.parse_disassembly(text, kernel) if base <= i.addr < base + size]
    back = [(base + i.target, i.addr) for i in insns if i.target is not None and base + i.target <= i.addr]
    if not back:
        return None

    def rank(region: tuple[int, int]) -> tuple[int, int]:
        inside = [i for i in insns if region[0] <= i.addr <= region[1]]
        return cd.count(inside)["matrix"], -len(inside)

    return max(back, key=rank)


def read(hsaco: Path, kernel: str) -> dict:
    """Registers, spills, LDS from the notes; the interior main loop's counts (interior_loop;
    the whole kernel if it has no loop)."""
    st = cd.analyze(hsaco, kernel)
    text = subprocess.run([cd.OBJDUMP, "-d", str(hsaco)], check=True, capture_output=True, text=True).stdout
    if st.scope == "loop":
        base, size = cd.kernel_symbol(cd._run(cd.READELF, "-s", "-W", str(hsaco)), kernel)
        start, end = interior_loop(text, kernel, base, size)
        insns = loop_instructions(text, kernel, start, end)
    else:
        base, size = cd.kernel_symbol(cd._run(cd.READELF, "-s", "-W", str(hsaco)), kernel)
        insns = loop_instructions(text, kernel, base, base + size - 1)
    return {"vgpr": st.vgpr, "agpr": st.agpr, "sgpr": st.sgpr, "vgpr_spills": st.vgpr_spills,
            "sgpr_spills": st.sgpr_spills, "scratch_bytes": st.scratch_bytes, "lds_bytes": st.lds_bytes,
            "code_bytes": st.code_bytes, "scope": st.scope, "loop": memory_counts(insns)}


def triton_spec(tile: tuple[int, int, int, int]):
    from rocke_aot.aot.families import get_family

    bm, bn, bk, waves = tile
    return get_family("triton_matmul").spec_type(dtype="f16", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1,
                                                 num_warps=waves, num_stages=2, m_class="div16",
                                                 n_class="div16", k_class="div16")


def native_spec(tile: tuple[int, int, int, int], arch: str, kind: str) -> dict:
    """kind "native-<b_lds>" or "native-<b_lds>-v<vector_width>" (default vector_width 4)."""
    bm, bn, bk, waves = tile
    parts = kind.split("-")
    vw = int(parts[2][1:]) if len(parts) > 2 else 4
    return {"in_dtype": "f16", "out_dtype": "f32", "path": MATRIX_PATH[arch], "block_m": bm, "block_n": bn,
            "block_k": bk, "waves": waves, "b_lds": parts[1], "vector_width": vw}


def compile_one(kind: str, tile, arch: str, lane: str, workdir: Path) -> dict:
    """One column: kind "native-kn" / "native-nk" / "triton" -> read() of its code object."""
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower

    if kind == "triton":
        kernel = lower("triton_matmul", triton_spec(tile), arch, lane)
        tc = tcs.toolchain_for(lane, arch, consumes="triton")
    else:
        kernel = lower("gemm", native_spec(tile, arch, kind), arch, lane)
        tc = tcs.toolchain_for(lane, arch)
    result = tc.compile(kernel.ir, arch, timeout=300)
    path = workdir / f"{kind}-{'x'.join(map(str, tile))}-{arch}-{lane}.hsaco"
    path.write_bytes(result.code_object)
    info = tc.detect()
    who = f"Triton {info.extra['triton_version']}" if kind == "triton" else f"{tc.kind} {info.llvm_version}"
    row = {"kind": kind, "tile": "x".join(map(str, tile[:3])), "waves": tile[3], "arch": arch, "lane": lane,
           "kernel": kernel.kernel_name, "compiler": who, **read(path, kernel.kernel_name)}
    if kind == "triton":  # Triton's LDS is dynamic: its metadata's "shared", not the code object's notes
        row["lds_bytes"] += int(result.extra["triton"]["shared"])
    row["k_steps"] = k_steps(row["loop"]["matrix_shape"], row["loop"]["matrix"], tile)
    return row


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


def _mix(d: dict) -> str:
    """'buffer_load_dwordx4x8 read2_b64x4': global_ and ds_ dropped (the column names them), buffer_ kept."""
    return " ".join(f"{m.removeprefix('global_').removeprefix('ds_')}x{n}" for m, n in d.items()) or "-"


HEAD = ["tile", "arch", "lane", "kernel", "K-steps", "matrix", "global loads", "glb B/lane", "LDS reads", "LDS rd B/lane",
        "LDS writes", "to-LDS", "vec loads in flight", "waits (vmcnt0)", "barriers", "branches", "insts", "VGPR", "AGPR", "SGPR",
        "spills", "LDS B"]


def markdown(doc: dict) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in doc["rows"]:
        lp = r["loop"]
        name = "triton " + r["compiler"].split()[-1] if r["kind"] == "triton" else r["kind"]
        cells = [f"{r['tile']} w{r['waves']}", r["arch"], r["lane"], name, f"{r['k_steps']:g}", lp["matrix"], _mix(lp["global_load"]),
                 lp["global_load_bytes"], _mix(lp["lds_read"]), lp["lds_read_bytes"], _mix(lp["lds_write"]),
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
    ap.add_argument("--lane", action="append", choices=LANES, help="repeatable; default llvm22, llvm24")
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    ap.add_argument("--markdown", action="store_true", help="print the table (default: one JSON row a line)")
    args = ap.parse_args(argv)
    doc = run(tuple(args.tile or TILES), tuple(args.arch or ARCHES), tuple(args.lane or LANES))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        rows = ",\n".join(json.dumps(r, sort_keys=True) for r in doc["rows"])
        args.json.write_text(f'{{"command": {json.dumps(doc["command"])}, "rows": [\n{rows}\n]}}\n')
    if args.markdown:
        sys.stdout.write(markdown(doc))
    elif not args.json:
        for r in doc["rows"]:
            print(json.dumps(r, sort_keys=True))
    return 1 if any(r["loop"]["matrix"] == 0 for r in doc["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
