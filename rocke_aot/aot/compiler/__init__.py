"""Compiling LLVM IR to code objects, always in isolated worker processes.

    compile_llvmlite(python, ir, target)
        AMDGPU: worker[python] llvm.compile(emit=obj) -> O3 pipeline + codegen -> .o
                -> ld.lld -shared (link.py)                                     -> HSACO
        NVPTX:  worker[python] llvm.compile(emit=asm) -> PTX
                -> ptxas -arch=sm_90[a] (ptx.py: the IR says which)            -> cubin (+ PTX)

    the worker runs in WorkerPool (pool.py): one long-lived process per thread and
    interpreter; an LLVM abort or a timeout kills that process only (worker.py).

``compile_llvmlite`` (what LlvmliteToolchain.compile uses) runs on the calling
thread with that thread's worker from the process-wide pool, so a builder with N
threads has N worker processes per interpreter; ``submit_llvmlite`` queues a
compile on a pool's own threads instead.
"""

from __future__ import annotations

import time
from concurrent.futures import Future

from rocke_aot.aot.compiler.link import link_hsaco
from rocke_aot.aot.compiler.options import LLVMLITE
from rocke_aot.aot.compiler.pool import WorkerPool, default_pool
from rocke_aot.aot.compiler.ptx import assemble_cubin, ptx_processor
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.compiler.worker import WORKER_SCRIPT, Reply, Worker, WorkerSpec, answer_blob
from rocke_aot.errors import CompileTimeout
from rocke_aot.targets import Target

__all__ = [
    "WorkerPool", "WorkerSpec", "Worker", "Reply", "WORKER_SCRIPT", "default_pool",
    "compile_llvmlite", "submit_llvmlite", "llvm_payload", "finish_llvmlite",
]


def llvm_payload(ir: str, target: Target) -> dict:
    """The llvm.compile request for ``target``: object for AMDGPU, PTX for NVPTX.

    Every option comes from options.LLVMLITE (the same values the cache key carries).
    """
    return {
        "ir": ir,
        "triple": target.triple,
        "cpu": target.processor if target.is_amdgpu else ptx_processor(ir, target.processor),
        "features": target.llvm_features if target.is_amdgpu else LLVMLITE.nvptx_features,
        "opt": LLVMLITE.opt_level,
        "speed_level": LLVMLITE.speed_level,
        "pipeline": LLVMLITE.speed_level > 0,
        "reloc": LLVMLITE.reloc,
        "codemodel": LLVMLITE.code_model,
        "emit": "obj" if target.is_amdgpu else "asm",
    }


def finish_llvmlite(reply: Reply, target: Target, *, timeout: float) -> CompileResult:
    """Worker output -> code object: link the AMDGPU object, or assemble the PTX."""
    blob = answer_blob(reply.blob, "llvm.compile")
    if target.is_amdgpu:
        return CompileResult(link_hsaco(blob, timeout=timeout), "hsaco", log=reply.log)
    ptx = blob.decode()
    return CompileResult(assemble_cubin(ptx, target.processor, timeout=timeout), "cubin", log=reply.log, ptx=ptx)


def _compile(call, python: str, ir: str, target: Target, timeout: float) -> CompileResult:
    start = time.monotonic()
    reply = call(WorkerSpec.of(python), "llvm.compile", llvm_payload(ir, target), None, timeout)
    left = timeout - (time.monotonic() - start)
    if left <= 0:
        raise CompileTimeout(f"compile for {target} used its {timeout:g}s before linking")
    return finish_llvmlite(reply, target, timeout=left)


def submit_llvmlite(pool: WorkerPool, python: str, ir: str, target: Target | str, *, timeout: float = 120.0) -> Future:
    """Future[CompileResult]: codegen in ``python``'s llvmlite worker, link on the same pool thread."""
    target = Target.parse(target)
    return pool.submit_task(_compile, str(python), ir, target, timeout)


def compile_llvmlite(python: str, ir: str, target: Target | str, *, timeout: float = 120.0,
                     pool: WorkerPool | None = None) -> CompileResult:
    """IR text -> HSACO (AMDGPU) or cubin (NVPTX) with the llvmlite of interpreter ``python``.

    Raises CompileError carrying LLVM's message (an abort kills only the worker)
    or CompileTimeout.
    """
    pool = pool or default_pool()
    # On the calling thread: a caller that runs N threads (the builder) gets N workers.
    return _compile(pool.call_fn(), str(python), ir, Target.parse(target), timeout)
