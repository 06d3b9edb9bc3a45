"""Triton's own cache key for a triton_matmul variant, computed by Triton's functions (the reference).

Run under a Triton install's interpreter: ``python _triton_ref.py REPO BACKEND ARCH WARP CONFIG_JSON``.
The signature, constexprs and attributes are written here by hand from Triton's specialization
rule (16-byte aligned pointers, "within 2 GiB" on AMD; ints divisible by 16; unit strides are
constexpr 1), the attributes through the backend's own ``parse_attr``; the key is
``get_cache_key(ASTSource(...), make_backend(target), backend.parse_options(...), env)`` hashed
and base32-encoded as ``get_cache_manager`` does. Triton 3.9's binder also lists the constexpr
parameters with no attributes; 3.6's does not (both, as each version's own jit.py writes them).
"""
import hashlib
import json
import sys
import types

try:
    import torch  # noqa
except ImportError:
    m = types.ModuleType("torch"); m.Tensor = type("Tensor", (), {}); sys.modules["torch"] = m
root, backend, arch, warp, cfg = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5])  # noqa: E501
sys.path.insert(0, root)
import triton
from triton._C.libtriton import get_cache_invalidating_env_vars
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.cache import _base32, get_cache_key

from rocke_aot.kernels import triton_matmul as mm

t = GPUTarget(backend, int(arch) if backend == "cuda" else arch, warp)
b = make_backend(t)
ptr_desc = "DS" if backend == "hip" else "D"
sig, consts, attrs = {}, {}, {}
names = mm.matmul_kernel.arg_names
descs = {"a_ptr": ptr_desc, "b_ptr": ptr_desc, "c_ptr": ptr_desc, "M": "D", "N": "D", "K": "D", "stride_am": "D",
         "stride_bk": "D", "stride_cm": "D"}
for i, n in enumerate(names):
    if n in ("stride_ak", "stride_bn", "stride_cn") or n.isupper() and n not in ("M", "N", "K"):
        sig[n] = "constexpr"; consts[n] = 1 if n.startswith("stride") else cfg[n]
        if tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 9):
            attrs[(i,)] = []
    else:
        sig[n] = "*fp16" if n.endswith("_ptr") else "i32"
        attrs[(i,)] = b.parse_attr(descs[n])
src = ASTSource(mm.matmul_kernel, sig, consts, attrs)
opts = b.parse_options({"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"], "num_ctas": 1})
print(_base32(hashlib.sha256(get_cache_key(src, b, opts, get_cache_invalidating_env_vars()).encode()).hexdigest()))
