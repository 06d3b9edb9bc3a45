"""The aot half of the Triton family kind: a spec -> the compile request the Triton toolchain runs.

    lower_triton(spec, target, lane) -> LoweredKernel
        .ir          canonical JSON {"request": "rocke-aot/triton-compile/v1", module, function,
                     sys_path (where the worker imports it from), sources {file: sha256} (the
                     worker refuses a file that changed since), target [backend, arch, warp size],
                     args (each parameter as Triton's binder sees it: aligned stand-in tensors,
                     representative ints of the spec's classes, constexprs), options (num_warps,
                     num_ctas, num_stages: what Triton's autotuner passes)}
        .ir_sha256   sha256 of that request without the machine's paths (file names, not
                     folders; no sys_path): equal requests from two checkouts share a code object
        .launch      the contract from spec.launch_formulas() (the specialized parameters plus
                     Triton's two scratch pointers), block = num_warps x warp size; the builder
                     lays it out from the code object and adds the dynamic shared memory
                     Triton's metadata states (aot/builder/run.py)

Triton, not this module, turns the request into code: the toolchain (aot/toolchains/triton_jit.py)
compiles it in an isolated worker under the Triton install's own interpreter.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rocke_aot.aot.lower.module import LoweredKernel
from rocke_aot.aot.toolchains.triton_jit import triton_target
from rocke_aot.errors import SpecError
from rocke_aot.lanes import Lane
from rocke_aot.launch import LaunchContract, natural_layout
from rocke_aot.targets import Target
from rocke_aot.variants.triton import TritonSpecBase, source_digests, sys_path_for

REQUEST = "rocke-aot/triton-compile/v1"


def request(spec: TritonSpecBase, target: Target) -> dict[str, Any]:
    k = spec.KERNEL
    return {"request": REQUEST, "module": k.module, "function": k.function, "sys_path": [sys_path_for(k.module)],
            "sources": source_digests(k), "target": triton_target(target), "args": spec.request_args(target),
            "options": spec.options()}


def request_sha256(req: dict[str, Any]) -> str:
    portable = {**req, "sys_path": [], "sources": {Path(f).name: d for f, d in sorted(req["sources"].items())}}
    text = json.dumps(portable, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def lower_triton(spec: Any, target: Target, lane: Lane) -> LoweredKernel:
    if not isinstance(spec, TritonSpecBase):
        raise SpecError(f"lower_triton takes a Triton family's spec, got {type(spec).__name__}")
    threads = spec.geometry(target).threads
    req = request(spec, target)
    formulas = spec.launch_formulas()
    laid = natural_layout(formulas.args)
    contract = LaunchContract.build(spec.kernel_name, formulas, (threads, 1, 1), laid)
    return LoweredKernel(family=spec.KERNEL.family, kernel_name=spec.kernel_name, target=target.id, lane=lane.name,
                         profile=lane.profile_name, ir=json.dumps(req, sort_keys=True), ir_sha256=request_sha256(req),
                         kernargs=laid, block_size=threads, lds_bytes=0,
                         metadata={"triton": {"module": spec.KERNEL.module, "function": spec.KERNEL.function,
                                              "config": spec.config, "options": spec.options(),
                                              "specialization": list(spec.specialization(spec.representative()))}},
                         launch=contract)
