"""conv_dgrad_patch's served matrix specs compiled on every AMD arch and lane here: the interior loop's
counts, VGPRs and spills, one JSON line a (arch, lane, spec) (issue 37: the B layout in LDS).

    python bench/conv_dgrad_sweep.py --arch gfx942 --lane llvm22 [--min-b-elems 12289] > out.jsonl

The specs are the variant table's (variants/table.py enumerate_specs) on the arch's matrix path,
optionally only those staging at least --min-b-elems B elements a chunk (k_chunk x cols_padded);
each is lowered for the lane, compiled by the lane's toolchain and read by bench/gemm_amd_isa.py's
reader (llvm-objdump-22 / llvm-readelf-22 of the code object; the interior loop = the backward
branch's region holding the most matrix instructions, the tightest).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import gemm_amd_isa as isa  # bench/gemm_amd_isa.py (bench/ is on the path when run)


def main(argv: list[str] | None = None) -> int:
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target
    from rocke_aot.variants.table import enumerate_specs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", action="append", choices=("gfx90a", "gfx942", "gfx950", "gfx1250"), required=True)
    ap.add_argument("--lane", action="append", choices=("llvm20",) + isa.ALL_LANES, required=True)
    ap.add_argument("--min-b-elems", type=int, default=0, help="only specs staging at least this many B elements a chunk")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        for arch in a.arch:
            for lane in isa.lanes_here(a.lane, arch):
                tc = tcs.toolchain_for(get_lane(lane), Target.parse(arch))
                for s in enumerate_specs("conv_dgrad_patch", arch, lane):
                    if s.path not in ("mfma", "wmma") or s.k_chunk * s.cols_padded < a.min_b_elems:
                        continue
                    row = {"arch": arch, "lane": lane, "kernel": s.kernel_name}
                    try:
                        r = isa.compile_read(lower("conv_dgrad_patch", s.to_dict(), arch, lane), tc, arch,
                                             Path(d) / "k.hsaco", False)
                    except Exception as e:  # a compile that fails is a row, not a stop
                        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
                    else:
                        lp = r["loop"]
                        row.update(insts=lp["insts"], matrix=lp["matrix"], wait=lp["wait"],
                                   lds_read=lp.get("lds_read", {}), lds_write=lp.get("lds_write", {}),
                                   global_load=lp["global_load"], vgpr=r["vgpr"], vgpr_spills=r["vgpr_spills"],
                                   sgpr_spills=r["sgpr_spills"], scratch_bytes=r["scratch_bytes"], lds_bytes=r["lds_bytes"])
                    print(json.dumps(row, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
