"""The AMD code objects of a Triton build, validated, each with its matrix instructions (llvm-objdump-22).

    python bench/triton_amd_isa.py --cache .state/triton-h200/cache.sqlite [--family triton_matmul]

For every artifact of the family on an AMD arch: aot/codeobject.py's validation again, then
llvm-objdump-22 -d --mcpu=<arch>, counting v_mfma* (gfx9) and v_wmma* (gfx1250) instructions;
prints one line per artifact (arch, Triton version, config, counts) and exits 1 when a matmul
code object holds no matrix instruction.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rocke_aot.aot.codeobject import validate
from rocke_aot.cache.store import Store
from rocke_aot.targets import Target


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", required=True)
    ap.add_argument("--family", default="triton_matmul")
    args = ap.parse_args()
    objdump = shutil.which("llvm-objdump-22") or "/usr/lib/llvm-22/bin/llvm-objdump"
    bad, rows = 0, []
    with Store.open(args.cache) as store, tempfile.TemporaryDirectory() as d:
        for art in store.find(family=args.family):
            t = Target.parse(art.arch)
            if not t.is_amdgpu:
                continue
            raw = store.get(art.key).code_object
            info = validate(raw, Target.parse(t))
            f = Path(d) / "k.hsaco"
            f.write_bytes(raw)
            asm = subprocess.run([objdump, "-d", f"--mcpu={t.processor}", str(f)], capture_output=True, text=True,
                                 check=True).stdout
            mfma, wmma = len(re.findall(r"\bv_mfma_\w+", asm)), len(re.findall(r"\bv_wmma_\w+", asm))
            spec = dict(art.spec)
            cfg = "x".join(str(spec[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K") if k in spec)
            kinds = sorted(set(re.findall(r"\bv_(?:mfma|wmma)_\w+", asm)))
            row = {"arch": art.arch, "triton": art.metadata["triton"]["triton_version"], "config": cfg,
                   "warps": spec.get("num_warps"), "vgpr": info.vgpr_count, "lds_dynamic": art.metadata["triton"]["shared"],
                   "v_mfma": mfma, "v_wmma": wmma, "instructions": kinds}
            rows.append(row)
            if args.family == "triton_matmul" and mfma + wmma == 0:
                bad += 1
    for r in sorted(rows, key=lambda r: (r["arch"], r["config"])):
        print(json.dumps(r))
    print(f"{len(rows)} AMD code objects validated; {bad} matmul without matrix instructions")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
