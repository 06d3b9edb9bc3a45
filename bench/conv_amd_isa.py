"""The conv families' AMD interior main loop, before / after, beside the gemm figure (issue 37).

    python bench/gemm_amd_isa.py --served --family conv_direct_fwd --family conv_dgrad_patch \\
        --json bench/results/conv-amd-isa-after.json           # the counts (every AMD arch and lane here)
    python bench/conv_amd_isa.py --before bench/results/conv-amd-isa-before.json \\
        --after bench/results/conv-amd-isa-after.json [--gemm bench/results/gemm-amd-isa-served.json]

The counts are bench/gemm_amd_isa.py's (llvm-objdump-22 of the lane's code object; the interior
loop = of the backward branches' regions holding the most matrix instructions, the tightest),
for its CONV_SPECS (the AMD picks' conv tiles; gfx1250 its wmma tiles). This script only reads
two such runs and prints, per (arch, lane, kernel): instructions / matrix instructions of one
pass of the loop (one reduction chunk; conv_direct_fwd: one filter tap), waits (s_waitcnt /
s_wait_*; vmcnt(0) drains in brackets), barriers, branches, global loads, LDS reads and writes by mnemonic, VGPRs and spills, before -> after. The project has no Triton conv kernel, so
the reference column is the served gemm's interior loop on the same arch and lane (128x128x32 w4
f16, single buffer) and Triton's matmul for that tile from --gemm, per matrix instruction.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import gemm_amd_isa as isa  # bench/gemm_amd_isa.py (bench/ is on the path when run)


def _key(r: dict) -> tuple:
    return r["arch"], r["lane"], r["kernel"]


def _cell(r: dict | None) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return r["error"][:60]
    lp = r["loop"]
    return (f"{lp['insts']} / {lp['matrix']}, {lp['wait']} w ({lp['vmcnt0']}), {lp.get('barrier', '?')} bar, "
            f"{lp['branches']} br; {isa.width_mix(lp['global_load'])}; LDS r {isa.width_mix(lp.get('lds_read', {}))} "
            f"w {isa.width_mix(lp.get('lds_write', {}))}; {r['vgpr']} V" +
            (f", {r['vgpr_spills']}+{r['sgpr_spills']} spills" if r["vgpr_spills"] or r["sgpr_spills"] else ""))


def _per(r: dict | None) -> str:
    if r is None or "error" in r or not r["loop"]["matrix"]:
        return "-"
    return f"{r['loop']['insts'] / r['loop']['matrix']:.1f}"


def gemm_reference(doc: dict | None) -> dict:
    """(arch, lane) -> (served 128x128x32 f16 single-buffer row, Triton's row for that tile)."""
    out: dict = {}
    for r in (doc or {}).get("rows", []):
        if "error" in r or r.get("family") != "gemm" or r.get("dtype") != "f16" or r.get("tile") != "128x128x32":
            continue
        slot = out.setdefault((r["arch"], r["lane"]), [None, None])
        if r["kind"] == "served":
            slot[0] = r
        elif r["kind"] == "triton" and r["loop"]["matrix"]:
            slot[1] = r
    return out


def table(before: dict, after: dict, gemm: dict | None = None) -> str:
    old = {_key(r): r for r in before["rows"] if "kernel" in r}
    ref = gemm_reference(gemm)
    lines = ["| arch | lane | kernel | before: insts / matrix, waits (vmcnt0), barriers, branches; global loads; "
             "LDS reads, writes; VGPR | "
             "after | per matrix before -> after | gemm 128x128 served / Triton, per matrix |",
             "|---|---|---|---|---|---|---|"]
    for r in after["rows"]:
        if "kernel" not in r:
            continue
        b = old.get(_key(r))
        g, t = ref.get((r["arch"], r["lane"]), (None, None))
        lines.append(f"| {r['arch']} | {r['lane']} | {r['kernel']} | {_cell(b)} | {_cell(r)} | "
                     f"{_per(b)} -> {_per(r)} | {_per(g)} / {_per(t)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="a gemm_amd_isa.py --served --json run")
    ap.add_argument("--after", type=Path, required=True, help="a gemm_amd_isa.py --served --json run")
    ap.add_argument("--gemm", type=Path, default=None, help="a --served run with the gemm rows (reference column)")
    args = ap.parse_args(argv)
    gemm = json.loads(args.gemm.read_text()) if args.gemm else None
    sys.stdout.write(table(json.loads(args.before.read_text()), json.loads(args.after.read_text()), gemm))
    return 0


if __name__ == "__main__":
    sys.exit(main())
