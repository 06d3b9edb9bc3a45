"""conv_dgrad_patch's served AMD specs with another geometry: the interior loop's instructions per
matrix instruction, waits, VGPRs and spills (issue 37, the fifth conv step), one JSON line a row.

    python bench/conv_dgrad_geometry.py --arch gfx942 --arch gfx950 --arch gfx1250 \\
        --lane llvm22 --lane llvm23 --lane llvm24 > out.jsonl
    python bench/conv_dgrad_geometry.py --table out.jsonl          # the markdown table
    python bench/conv_dgrad_geometry.py --model --arch gfx942 --arch gfx950 --kernel SUFFIX ...

--model: the time model's order (variants/selection.rank, bench/amd_picks.py's candidates: every spec
the variant table serves the arch on llvm22) for bench/amd_picks.py's patch dgrad problems and the
ViT-L/14 shape at C = 4 (the p14c4 row): the pick, and the rank and estimate of each kernel whose
name ends with a --kernel suffix (the in-grid forms of the variants above).

For each served dgrad spec of bench/gemm_amd_isa.py CONV_SPECS (f16; gfx1250 its wmma tile,
CONV_WMMA) the variants are: "base" (the spec as served); "kc x2" (twice its k_chunk, a knob of the
spec: the same tiles a wave, twice the matrix instructions a chunk); "rows x2" (twice its tile_h:
twice the GEMM rows a block, the same columns; tile_h 8 is outside the table's knob grid on gfx9,
gfx1250's t4x8 inside it); "waves<=W" for W in 4, 2, 1
below the spec's own wave count (the same tile, its matrix tiles over at most W waves, more tiles
each). The spec's geometry has no wave knob (ConvDgradPatchSpec.geometry takes up to 8 waves, as
few tiles a wave as that allows), so "waves<=W" replaces the geometry's thread count for the
lowering of that row only (the lowering, _conv_ir.ConvLowering, spreads the tiles over
geometry.threads); nothing in the package changes. Each row is lowered for the lane, compiled by
its toolchain and read by bench/gemm_amd_isa.py compile_one (llvm-objdump-22 / llvm-readelf-22).
A variant the spec refuses (LDS over the arch's limit) is a row with its error.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import gemm_amd_isa as isa  # bench/gemm_amd_isa.py (bench/ is on the path when run)

WAVE_CAPS = (4, 2, 1)


def rows(arches, lanes):
    from rocke_aot.errors import SpecError
    from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec as Spec
    from rocke_aot.targets import Target

    own = Spec.geometry
    cap: dict[str, int | None] = {"waves": None}

    def capped(self, target):  # the spec's geometry, its waves capped for this row
        g = own(self, target)
        if cap["waves"] and g.instr and g.threads // g.wave_size > cap["waves"]:
            g = dataclasses.replace(g, threads=cap["waves"] * g.wave_size)
        return g

    Spec.geometry = capped
    try:
        with tempfile.TemporaryDirectory() as d:
            for arch in arches:
                for lane in isa.lanes_here(lanes, arch):
                    for fam, knobs in isa.CONV_SPECS:
                        if fam != "conv_dgrad_patch" or knobs["dtype"] != "f16":
                            continue
                        served = Spec(**isa.conv_spec(fam, knobs, arch))
                        g0 = own(served, Target.parse(arch))
                        w0 = g0.threads // g0.wave_size
                        variants = [("base", {}, None), ("kc x2", {"k_chunk": served.k_chunk * 2}, None),
                                    ("rows x2", {"tile_h": served.tile_h * 2}, None)]
                        variants += [(f"waves<={w}", {}, w) for w in WAVE_CAPS if w < w0]
                        for name, extra, waves in variants:
                            cap["waves"] = waves
                            wmma = dict(isa.CONV_WMMA[fam])
                            if isa.MATRIX_PATH[arch] == "wmma":  # conv_spec applies CONV_WMMA last
                                isa.CONV_WMMA[fam] = {**wmma, **extra}
                            rec = {"arch": arch, "lane": lane, "served": served.kernel_name, "variant": name}
                            try:
                                spec = Spec(**{**isa.conv_spec(fam, knobs, arch), **extra})
                                g = spec.geometry(Target.parse(arch))
                                row = isa.compile_one("native", (0, 0, 0, 0), arch, lane, Path(d), ("f16", "f16"),
                                                      fam, {**knobs, **extra})
                                lp = row["loop"]
                                rec |= {"kernel": row["kernel"], "waves": g.threads // g.wave_size,
                                        "insts": lp["insts"], "matrix": lp["matrix"],
                                        "per_matrix": round(lp["insts"] / lp["matrix"], 2), "wait": lp["wait"],
                                        "vgpr": row["vgpr"], "agpr": row["agpr"], "vgpr_spills": row["vgpr_spills"],
                                        "sgpr_spills": row["sgpr_spills"], "scratch": row["scratch_bytes"],
                                        "lds_bytes": row["lds_bytes"], "global_load": lp["global_load"],
                                        "lds_read": lp["lds_read"]}
                            except SpecError as e:
                                rec["error"] = str(e)
                            finally:
                                isa.CONV_WMMA[fam] = wmma
                            yield rec
    finally:
        Spec.geometry = own


def table(recs: list[dict]) -> str:
    by: dict[tuple, dict] = collections.OrderedDict()
    for r in recs:
        by.setdefault((r["arch"], r["served"], r["variant"]), {})[r["lane"]] = r
    out = ["| arch | served spec | variant | waves | llvm22 | llvm23 | llvm24 | VGPR (llvm22) | spills |",
           "|---|---|---|---|---|---|---|---|---|"]
    for (arch, served, var), lanes in by.items():
        def cell(lane: str) -> str:
            r = lanes.get(lane)
            if r is None:
                return "-"
            if "error" in r:
                return "refused: LDS" if "LDS" in r["error"] else r["error"][:40]
            return f"{r['insts']} / {r['matrix']} = {r['per_matrix']:.1f}"
        r0 = next((lanes[lane] for lane in isa.ALL_LANES if lane in lanes and "error" not in lanes[lane]), {})
        spills = sorted(f"{lane}: {r['vgpr_spills']} V, {r['scratch']} B" for lane, r in lanes.items()
                        if "error" not in r and (r["vgpr_spills"] or r["scratch"]))
        name = served.removeprefix("conv_dgrad_patch_f16_")
        vgpr = lanes.get("llvm22", {}).get("vgpr", "-")
        out.append(f"| {arch} | {name} | {var} | {r0.get('waves', '-')} | {cell('llvm22')} | {cell('llvm23')} | "
                   f"{cell('llvm24')} | {vgpr} | {'; '.join(spills) or 'none'} |")
    return "\n".join(out) + "\n"


def model_order(arches, suffixes) -> str:
    import amd_picks

    from rocke_aot.targets import Target
    from rocke_aot.variants.families import get_family
    from rocke_aot.variants.selection import rank

    entry = get_family("conv_dgrad_patch")
    shapes = amd_picks.PATCH + [("ViT-L/14 shape at C=4 n4 224 K1024", dict(n=4, h=224, w=224, c=4, k=1024, p=14))]
    out = []
    for arch in arches:
        pool = amd_picks.table_candidates("conv_dgrad_patch", arch)
        for name, raw in shapes:
            r = rank(pool, entry.problem_from(dict(dtype="f16", **raw)), Target.parse(arch))
            names = [entry.spec_from(dict(c.candidate.spec)).kernel_name for c in r.accepted]
            est = r.accepted[0].estimate_ms
            out.append(f"{arch} {name} ({r.model}): pick {names[0]} {est if est is None else round(est, 4)} ms")
            for suffix in suffixes:
                for i, n in enumerate(names):
                    if n.endswith(suffix):
                        e = r.accepted[i].estimate_ms
                        out.append(f"    rank {i}: {n} {e if e is None else round(e, 4)} ms {r.accepted[i].bound}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", action="append", choices=("gfx90a", "gfx942", "gfx950", "gfx1250"))
    ap.add_argument("--lane", action="append", choices=isa.ALL_LANES)
    ap.add_argument("--table", type=Path, help="print the markdown table of an earlier run's JSON lines")
    ap.add_argument("--model", action="store_true", help="the time model's order for the patch problems (--kernel)")
    ap.add_argument("--kernel", action="append", default=[], help="with --model: a kernel name suffix to place")
    a = ap.parse_args(argv)
    if a.model:
        sys.stdout.write(model_order(a.arch or ["gfx942", "gfx950"], a.kernel))
        return 0
    if a.table:
        sys.stdout.write(table([json.loads(line) for line in a.table.read_text().splitlines() if line.strip()]))
        return 0
    if not a.arch or not a.lane:
        ap.error("--arch and --lane (repeatable), or --table")
    for rec in rows(a.arch, a.lane):
        print(json.dumps(rec, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
