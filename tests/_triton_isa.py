"""Matrix instructions in the K loop of a triton_matmul config as Triton compiles it (the reference
of tests/test_triton_counts.py). Run under a Triton install's interpreter:
``python _triton_isa.py REPO BACKEND CONFIG_JSON`` (BACKEND: cuda for sm_90, or an AMD processor);
prints {"ops": [[m, n, k], ...], "lds_reads": n} (on cuda also the loop's ld.global, st.shared and
cp.async copy instructions): the shapes of the wgmma / mma.sync (PTX) or v_mfma
(AMDGCN) instructions of the loop body, one per instruction issued (per warpgroup for wgmma, per wave
for MFMA), and the loop's shared-memory read instructions (ldmatrix / ld.shared; ds_read on AMD).
"""
import json
import re
import sys

sys.path.insert(0, sys.argv[1])
import types

m = types.ModuleType("torch"); m.Tensor = type("Tensor", (), {}); sys.modules.setdefault("torch", m)
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from rocke_aot.kernels import triton_matmul as mm

cfg = json.loads(sys.argv[3]); backend = sys.argv[2]
sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
       "stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
       "stride_cm": "i32", "stride_cn": "constexpr"}
consts = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
          "BLOCK_K": cfg["BLOCK_K"], "GROUP_M": 8}
for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"):
    sig[k] = "constexpr"
# "div16": false compiles the unspecialized kernel (a problem whose M, N, K are not multiples of 16)
attrs = {} if cfg.get("div16") is False else {(i,): [["tt.divisibility", 16]] for i, n in enumerate(mm.matmul_kernel.arg_names) if n in ("a_ptr","b_ptr","c_ptr","M","N","K","stride_am","stride_bk","stride_cm")}
t = GPUTarget("cuda", 90, 32) if backend == "cuda" else GPUTarget("hip", backend, 64)
k = triton.compile(ASTSource(mm.matmul_kernel, sig, consts, attrs), target=t,
                   options={"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})
asm = k.asm["ptx"] if backend == "cuda" else k.asm["amdgcn"]
def loop_body(text):
    """The K loop: the lines from a label to the last branch back to it (Triton's loop is the one
    backward branch holding matrix instructions)."""
    lines = text.splitlines()
    labels = {}
    for i, ln in enumerate(lines):
        m = re.match(r"^\s*(\$?[.\w]+):", ln)
        if m:
            labels[m.group(1)] = i
    best = ""
    for i, ln in enumerate(lines):
        m = re.search(r"\b(?:s_cbranch_\w+|s_branch|bra(?:\.uni)?)\s+(\$?[.\w]+)", ln)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            body = "\n".join(lines[labels[m.group(1)]:i + 1])
            if ("mma" in body or "mfma" in body) and len(body) > len(best):
                best = body
    return best
asm = loop_body(asm)
if backend == "cuda":
    ops = re.findall(r"wgmma\.mma_async\.sync\.aligned\.m(\d+)n(\d+)k(\d+)", asm)
    ops += re.findall(r"\bmma\.sync\.aligned\.m(\d+)n(\d+)k(\d+)", asm)
    lds = re.findall(r"\b(?:ldmatrix|ld\.shared)\b", asm)
    copies = {"global_loads": len(re.findall(r"\bld\.global\b", asm)),
              "lds_writes": len(re.findall(r"\bst\.shared\b", asm)),
              "async_copies": len(re.findall(r"\bcp\.async\.c[ag]\b", asm))}
else:
    copies = {}
    ops = re.findall(r"v_mfma_f32_(\d+)x(\d+)x(\d+)_?f16", asm)
    lds = re.findall(r"\bds_read", asm)
print(json.dumps({"ops": [[int(a), int(b), int(c)] for a, b, c in ops], "lds_reads": len(lds), **copies}))
