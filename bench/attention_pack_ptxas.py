"""Issue 38: ptxas -v over every GQA-packed sm_90 attention spec (AttentionSpec.pack_gqa): registers, stack
frame, spill stores / loads of each, with the compile path's own flags (no GPU needed). Usage (repository root):
    .venv/bin/python bench/attention_pack_ptxas.py [NAME_PART] > bench/results/attention-pack-ptxas-DATE/ptxas.txt"""
import pathlib
import re
import subprocess
import sys
import tempfile

from rocke_aot.aot.compiler import WorkerPool, compile_llvmlite
from rocke_aot.aot.compiler.options import PTXAS_FLAGS
from rocke_aot.aot.compiler.ptx import find_ptxas
from rocke_aot.aot.lower import lower
from rocke_aot.variants import table

specs = [s for s in table.enumerate_specs("attention", "sm_90", "llvm22") if s.pack_gqa]
sel = sys.argv[1] if len(sys.argv) > 1 else ""
specs = [s for s in specs if sel in s.kernel_name]
print(len(specs), "packed sm_90 specs", flush=True)
tmp = pathlib.Path(tempfile.mkdtemp())
bad = []
with WorkerPool(1) as pool:
    for s in specs:
        k = lower("attention", s, "sm_90", "llvm22")
        res = compile_llvmlite(sys.executable, k.ir, "sm_90", pool=pool)
        (tmp / "k.ptx").write_text(res.ptx)
        arch = re.search(r"^\s*\.target\s+(\w+)", res.ptx, re.M)[1]
        log = subprocess.run([find_ptxas(), f"-arch={arch}", *PTXAS_FLAGS, "-v", str(tmp / "k.ptx"), "-o", str(tmp / "k.cubin")],
                             capture_output=True, text=True, check=True).stderr
        used = re.search(r"Used (\d+) registers", log)[1]
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
        frame = re.search(r"(\d+) bytes stack frame", log)[1]
        print(s.kernel_name, "regs", used, "stack", frame, "spill", spill.groups(), flush=True)
        if frame != "0" or spill.groups() != ("0", "0"):
            bad.append(s.kernel_name)
sys.exit(f"spills or a stack frame: {bad}" if bad else 0)
