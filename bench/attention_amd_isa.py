"""Attention's AMD main loop by the code: the native kernel, Triton's and AMD's fmha_v3_fwd (issue 38).

    python bench/attention_amd_isa.py --markdown                  # gfx942 + gfx950, d=128, f16/bf16,
                                                                  # causal and not; compiles here
    python bench/attention_amd_isa.py --json bench/results/attention-amd-isa.json --markdown
    python bench/attention_amd_isa.py --cache .state/x/cache.sqlite   # read a `rocke-aot build` cache
    python bench/attention_amd_isa.py --aiter-wheel amd_aiter-*.whl   # a wheel already downloaded
    python bench/attention_amd_isa.py --summary bench/results/attention-amd-isa.json   # docs' table

Rows, per arch (gfx942, gfx950), dtype (f16, bf16) and mask (causal or not), head dim 128, dense:
    native   the `attention` family's served specs (4 warps, block_n NATIVE_BLOCK_N), lowered and
             compiled by each lane's LLVM-IR toolchain (llvm22: llvmlite's LLVM 22; llvm24)
    triton   the `triton_attention` family's served dense specs (its two HIP tiles), compiled by
             each lane's Triton (llvm22 = Triton 3.6 on python3.12, llvm24 = Triton 3.9)
    aiter    AMD's hand-written fmha_v3_fwd code objects from the `amd-aiter` wheel (pip download
             amd-aiter --no-deps into a temporary folder unless --aiter-wheel names one; never kept,
             never a dependency): every aiter_meta/hsa/<arch>/fmha_v3_fwd/**/*.co is listed in the
             JSON (its kernel symbol and counts); the table keeps the ones aiter's own codegen.py
             dispatches for d=128 (gfx942: MI300/fwd_hd128_bf16[_causal]_rtne.co, the default bf16
             rounding; gfx950: fwd_hd128_bf16[_causal].co). The wheel has no f16 forward kernel
             (gfx950's fp16 entries are commented out in its codegen.py): its bf16 row is the
             reference for both dtypes.
Each code object is read by bench/gemm_amd_isa.py's reader (read() / read_handwritten(): llvm-readelf-22
--notes for VGPR/AGPR/SGPR, spills, LDS; llvm-objdump-22 -d; the main loop = of the regions the backward
branches close that hold matrix instructions and no other such region (innermost: aiter's causal kernel
runs its K/V loops inside an outer loop), those holding the most, the tightest: the K/V-tile loop; in
AMD's assembly its labels are folded into branch targets first). Per kernel: matrix instructions per pass
and their shape, instructions per matrix instruction, the same per 16x16x16-equivalent (the
instruction's MACs over a 16x16x16's: a 32x32x8 counts 2), waits (vmcnt(0) drains), barriers,
global load and LDS read/write mnemonics (the width is in the name), VGPR (the unified file's total:
LLVM's .vgpr_count on gfx90a+ counts the AGPRs too) / AGPR, spills, LDS bytes (Triton's dynamic
shared memory added), and occupancy: waves per SIMD from the VGPRs, SGPRs and LDS by the arch's
documented limits (rocke_aot.candidates.occupancy over rocke_aot.arch's table), the work-group size
from the notes' .max_flat_workgroup_size.

Issue 38's goal: the native loop within 1.5x of the vendor's instructions per matrix instruction
(same arch and mask; the summary's "goal" column). The last column divides by the matrix work instead
(per 16x16x16-equivalent): the vendor's 32x32x8 (gfx942) and 32x32x16 (gfx950) do 2x and 4x a native
16x16x16's MACs.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import codegen_deltas as cd  # bench/ is on the path when run
import gemm_amd_isa as isa

ARCHES = ("gfx942", "gfx950")
LANES = ("llvm22", "llvm24")
DTYPES = ("f16", "bf16")
HEAD_DIM = 128
NATIVE_BLOCK_N = (32, 64)
NATIVE_WARPS = 4
GOAL = 1.5
# the fmha_v3_fwd code objects aiter's codegen.py dispatches for d=128 (module doc), per (arch, causal)
AITER_PICK = {("gfx942", 0): "MI300/fwd_hd128_bf16_rtne.co", ("gfx942", 1): "MI300/fwd_hd128_bf16_causal_rtne.co",
              ("gfx950", 0): "fwd_hd128_bf16.co", ("gfx950", 1): "fwd_hd128_bf16_causal.co"}


def readelf(*args: str) -> str:
    return subprocess.run([cd.READELF, *args], check=True, capture_output=True, text=True).stdout


def kernel_symbol_name(hsaco: Path) -> str:
    """The one kernel (FUNC symbol) of a code object."""
    names = sorted({f[7] for line in readelf("-s", "-W", str(hsaco)).splitlines()
                    if len(f := line.split()) >= 8 and f[3] == "FUNC"})
    if len(names) != 1:
        raise LookupError(f"{hsaco.name}: {len(names)} kernel symbols {names}")
    return names[0]


def notes_value(hsaco: Path, key: str) -> int:
    m = re.search(rf"\.{key}:\s+(\d+)", readelf("--notes", str(hsaco)))
    if not m:
        raise LookupError(f"{hsaco.name}: no .{key} in its notes")
    return int(m.group(1))


def finish(row: dict, hsaco: Path) -> dict:
    """Add what every row states: work-group size, occupancy, per-matrix figures."""
    from rocke_aot.arch import arch_info
    from rocke_aot.candidates import occupancy

    wg = notes_value(hsaco, "max_flat_workgroup_size")
    row["workgroup"] = wg
    row["occupancy"] = occupancy(arch_info(row["arch"]), vgprs=row["vgpr"], sgprs=row["sgpr"],
                                 lds_bytes=row["lds_bytes"] or None, workgroup_size=wg)
    lp = row["loop"]
    m = lp["matrix"]
    shape = lp["matrix_shape"]
    macs = 1.0
    if shape:
        a, b, c = (int(x) for x in shape.split("x"))
        macs = a * b * c / (16 * 16 * 16)
    row["insts_per_matrix"] = round(lp["insts"] / m, 2) if m else None
    row["insts_per_16x16x16"] = round(lp["insts"] / (m * macs), 2) if m else None
    return row


def native_specs(arch: str, lane: str, dtypes=DTYPES, block_ns=NATIVE_BLOCK_N) -> list:
    from rocke_aot.variants.table import enumerate_specs

    return [s for s in enumerate_specs("attention", arch, lane) if s.head_dim == HEAD_DIM and not s.varlen
            and not s.paged and s.warps == NATIVE_WARPS and s.block_n in block_ns and s.dtype in dtypes]


def triton_specs(arch: str, lane: str, dtypes=DTYPES) -> list:
    from rocke_aot.variants.table import enumerate_specs

    return [s for s in enumerate_specs("triton_attention", arch, lane)
            if s.HEAD_DIM == HEAD_DIM and not s.VARLEN and not s.PAGED and s.dtype in dtypes]


def _tile(kind: str, spec) -> str:
    if kind == "native":
        return f"{spec.block_m}x{spec.block_n} w{spec.warps}"
    return f"{spec.BLOCK_M}x{spec.BLOCK_N} w{spec.num_warps}"


def _causal(kind: str, spec) -> int:
    return int(spec.causal if kind == "native" else spec.CAUSAL)


def compiled_rows(arches=ARCHES, lanes=LANES, dtypes=DTYPES, block_ns=NATIVE_BLOCK_N) -> list[dict]:
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.errors import RockeError
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    rows = []
    with tempfile.TemporaryDirectory() as d:
        for arch in arches:
            for lane in isa.lanes_here(lanes, arch):
                jobs = [("native", s) for s in native_specs(arch, lane, dtypes, block_ns)]
                jobs += [("triton", s) for s in triton_specs(arch, lane, dtypes)]
                for kind, spec in jobs:
                    fam = "attention" if kind == "native" else "triton_attention"
                    head = {"kind": kind, "arch": arch, "lane": lane, "dtype": spec.dtype, "causal": _causal(kind, spec),
                            "tile": _tile(kind, spec), "spec": spec.to_dict()}
                    try:
                        kernel = lower(fam, spec.to_dict(), arch, lane)
                        tc = tcs.toolchain_for(get_lane(lane), Target.parse(arch), consumes="triton") \
                            if kind == "triton" else tcs.toolchain_for(get_lane(lane), Target.parse(arch))
                        path = Path(d) / f"{fam}-{len(rows)}.hsaco"
                        rows.append(finish({**head, **isa.compile_read(kernel, tc, arch, path, kind == "triton", True)}, path))
                    except (RockeError, subprocess.SubprocessError, LookupError) as e:
                        rows.append({**head, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"})
                    print(json.dumps({k: v for k, v in rows[-1].items() if k != "loop"}, sort_keys=True),
                          file=sys.stderr, flush=True)  # progress
    return rows


def cached_rows(cache: str, arches=ARCHES, dtypes=DTYPES) -> list[dict]:
    """The same rows from a cache `rocke-aot build` filled (every dense d=128 spec of both families on
    ``arches`` found there; the lane is the artifact's)."""
    from rocke_aot.aot.families import get_family
    from rocke_aot.cache.store import Store

    rows = []
    with Store.open(cache) as store, tempfile.TemporaryDirectory() as d:
        for fam, kind in (("attention", "native"), ("triton_attention", "triton")):
            for art in store.find(family=fam):
                spec = get_family(fam).spec_type.from_dict(dict(art.spec))
                sd = spec.to_dict()
                if art.arch not in arches or sd.get("dtype") not in dtypes or \
                        (sd.get("head_dim") or sd.get("HEAD_DIM")) != HEAD_DIM or \
                        sd.get("varlen") or sd.get("VARLEN") or sd.get("paged") or sd.get("PAGED"):
                    continue
                path = Path(d) / f"{fam}-{len(rows)}.hsaco"
                path.write_bytes(store.get(art.key).code_object)
                name = kernel_symbol_name(path)
                row = {"kind": kind, "arch": art.arch, "lane": art.lane, "dtype": sd["dtype"],
                       "causal": _causal(kind, spec), "tile": _tile(kind, spec), "spec": sd, "kernel": name,
                       "compiler": f"cache {art.lane}", **isa.read(path, name, True)}
                if kind == "triton":
                    row["lds_bytes"] += int(art.metadata["triton"]["shared"])
                rows.append(finish(row, path))
    return rows


def aiter_rows(arches=ARCHES, wheel: Path | None = None) -> list[dict]:
    """Every fmha_v3_fwd code object of the amd-aiter wheel for ``arches``, read as a row
    ("picked": the one aiter dispatches for d=128 at that arch and mask, AITER_PICK)."""
    rows = []
    with tempfile.TemporaryDirectory() as d:
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "amd-aiter", "--no-deps", "--only-binary", ":all:",
                            "-d", d], check=True, capture_output=True, timeout=900)
            wheel = next(Path(d).glob("amd_aiter-*.whl"))
        version = wheel.name.split("-")[1]
        with zipfile.ZipFile(wheel) as z:
            for arch in arches:
                folder = f"aiter_meta/hsa/{arch}/fmha_v3_fwd/"
                for member in sorted(n for n in z.namelist() if n.startswith(folder) and n.endswith(".co")):
                    rel = member[len(folder):]
                    co = Path(d) / f"{arch}-{rel.replace('/', '-')}"
                    co.write_bytes(z.read(member))
                    name = kernel_symbol_name(co)
                    causal = int("_causal" in rel)
                    row = {"kind": "aiter", "arch": arch, "lane": "-", "dtype": "bf16" if "bf16" in rel else "f16",
                           "causal": causal, "file": rel, "picked": AITER_PICK.get((arch, causal)) == rel,
                           "kernel": name, "compiler": f"amd-aiter {version}", **isa.read_handwritten(co, name, True)}
                    row["tile"] = f"w{notes_value(co, 'max_flat_workgroup_size') // 64}"
                    rows.append(finish(row, co))
        missing = [k for k, v in AITER_PICK.items() if k[0] in arches and not any(r["file"] == v and r["arch"] == k[0]
                                                                                  for r in rows)]
        if missing:
            raise LookupError(f"amd-aiter {version}: no fmha_v3_fwd code object {[AITER_PICK[k] for k in missing]}")
    return rows


HEAD = ["arch", "dtype", "mask", "kernel", "tile", "lane", "MFMA / pass (shape)", "insts / MFMA", "per 16x16x16",
        "waits (vmcnt0)", "barriers", "global loads", "LDS reads", "LDS writes", "VGPR", "AGPR", "spills", "LDS B",
        "waves / SIMD"]


def _name(r: dict) -> str:
    if r["kind"] == "triton":
        return "triton " + r["compiler"].split()[-1]
    if r["kind"] == "aiter":
        return f"aiter {r['file']}"
    return "native"


def markdown(doc: dict, picked_only: bool = True) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    for r in sorted(doc["rows"], key=lambda r: (r["arch"], r["dtype"], r["causal"], ("native", "triton", "aiter").index(r["kind"]),
                                                r["lane"], r["tile"])):
        if r["kind"] == "aiter" and picked_only and not r["picked"]:
            continue
        head = [r["arch"], r["dtype"], "causal" if r["causal"] else "none", _name(r), r["tile"], r["lane"]]
        if "error" in r:
            lines.append("| " + " | ".join(head + [r["error"]] + [""] * (len(HEAD) - 7)) + " |")
            continue
        lp = r["loop"]
        cells = head + [f"{lp['matrix']} ({lp['matrix_shape']})" + ("" if r["scope"] == "loop" else " (no loop)"),
                        r["insts_per_matrix"], r["insts_per_16x16x16"], f"{lp['wait']} ({lp['vmcnt0']})", lp["barrier"],
                        isa.width_mix(lp["global_load"]), isa.width_mix(lp["lds_read"]), isa.width_mix(lp["lds_write"]),
                        r["vgpr"], r["agpr"], f"{r['vgpr_spills']}+{r['sgpr_spills']}", r["lds_bytes"], r["occupancy"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def summary(doc: dict) -> str:
    """The docs' table: per arch and mask, the best (fewest instructions per MFMA) native and Triton
    row of each dtype beside the vendor's, and the goal (native <= 1.5 x vendor per MFMA)."""
    rows = [r for r in doc["rows"] if "error" not in r and r["loop"]["matrix"]]
    out = ["| arch | mask | dtype | native best: insts / MFMA (tile, lane) | Triton best | aiter fmha_v3_fwd (bf16) | "
           "native / aiter | goal <= 1.5 | per 16x16x16: native / aiter |", "|---|---|---|---|---|---|---|---|---|"]

    def best(kind, arch, causal, dtype):
        c = [r for r in rows if r["kind"] == kind and r["arch"] == arch and r["causal"] == causal and r["dtype"] == dtype]
        return min(c, key=lambda r: r["insts_per_matrix"]) if c else None

    def cell(r):
        if r is None:
            return "-"
        lp = r["loop"]
        return (f"{r['insts_per_matrix']:g} ({lp['insts']} / {lp['matrix']} {lp['matrix_shape']}; {r['tile']}, {r['lane']}; "
                f"{r['occupancy']} waves/SIMD)")

    for arch in sorted({r["arch"] for r in rows}):
        for causal in (0, 1):
            vendor = next((r for r in rows if r["kind"] == "aiter" and r["arch"] == arch and r["causal"] == causal
                           and r["picked"]), None)
            for dtype in DTYPES:
                nat, tri = best("native", arch, causal, dtype), best("triton", arch, causal, dtype)
                ratio = nat["insts_per_matrix"] / vendor["insts_per_matrix"] if nat and vendor else None
                vcell = "-" if vendor is None else (f"{vendor['insts_per_matrix']:g} ({vendor['loop']['insts']} / "
                                                    f"{vendor['loop']['matrix']} {vendor['loop']['matrix_shape']}; "
                                                    f"{vendor['occupancy']} waves/SIMD)")
                macs = (f"{nat['insts_per_16x16x16']:g} / {vendor['insts_per_16x16x16']:g} = "
                        f"{nat['insts_per_16x16x16'] / vendor['insts_per_16x16x16']:.2f}x") if nat and vendor else "-"
                out.append(f"| {arch} | {'causal' if causal else 'none'} | {dtype} | {cell(nat)} | {cell(tri)} | {vcell} | "
                           f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                           f"{'-' if ratio is None else ('yes' if ratio <= GOAL else 'no')} | {macs} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", action="append", choices=ARCHES, help="repeatable; default gfx942, gfx950")
    ap.add_argument("--lane", action="append", choices=LANES, help="repeatable; default llvm22, llvm24")
    ap.add_argument("--dtype", action="append", choices=DTYPES, help="repeatable; default f16, bf16")
    ap.add_argument("--block-n", action="append", type=int, choices=(16, 32, 64),
                    help="the native specs' block_n, repeatable; default 32, 64")
    ap.add_argument("--cache", default=None, help="read the native and Triton code objects from this cache "
                    "(`rocke-aot build --family attention,triton_attention ...`) instead of compiling")
    ap.add_argument("--no-aiter", action="store_true", help="leave out the amd-aiter rows (no download)")
    ap.add_argument("--aiter-wheel", type=Path, default=None, help="an amd-aiter wheel already downloaded")
    ap.add_argument("--summary", type=Path, default=None,
                    help="read an earlier --json and print the condensed table (docs/attention.md), compiling nothing")
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    ap.add_argument("--markdown", action="store_true", help="print the per-kernel table")
    ap.add_argument("--all-aiter", action="store_true", help="with --markdown: every fmha_v3_fwd code object, "
                    "not only the ones aiter dispatches for d=128")
    args = ap.parse_args(argv)
    if args.summary:
        sys.stdout.write(summary(json.loads(args.summary.read_text())))
        return 0
    arches, dtypes = tuple(args.arch or ARCHES), tuple(args.dtype or DTYPES)
    rows = [] if args.no_aiter else aiter_rows(arches, args.aiter_wheel)
    if args.cache:
        rows += cached_rows(args.cache, arches, dtypes)
    else:
        rows += compiled_rows(arches, tuple(args.lane or LANES), dtypes, tuple(args.block_n or NATIVE_BLOCK_N))
    doc = {"command": "python bench/attention_amd_isa.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "rows": rows}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        body = ",\n".join(json.dumps(r, sort_keys=True) for r in rows)
        args.json.write_text(f'{{"command": {json.dumps(doc["command"])}, "rows": [\n{body}\n]}}\n')
    if args.markdown:
        sys.stdout.write(markdown(doc, not args.all_aiter) + "\n" + summary(doc))
    elif not args.json:
        for r in rows:
            print(json.dumps(r, sort_keys=True))
    # a kernel whose loop holds no matrix instruction is a broken reading
    return 1 if any("loop" in r and r["loop"]["matrix"] == 0 for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
