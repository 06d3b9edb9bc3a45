"""Running a plan: parallel isolated compiles, validated, written to the cache as they land.

    Plan.to_build ──> executor (threads locally, or a Dask cluster)
                          │ build_one(job): lower -> toolchain.compile (isolated worker
                          │                 process: an LLVM abort kills only it) -> validate
                          ▼
    driver thread:  ok      -> store.put(inputs, code object, metadata, provenance)
                    failure -> store.put_failure(...)   (not for timeouts: they may be load; not for
                                                         refusals such as a Dask worker with other code)
                    RockeError (CompileError, ...): its message; anything else (a bug):
                    its full traceback in the failure row and logged (logger rocke_aot.aot.builder.run)
                    every result is written as it lands, so a build killed with SIGKILL
                    resumes with only the missing keys

The driver is the only writer; workers never touch the store. ``COMPILES`` counts
real toolchain invocations in this process: a no-op rebuild leaves it unchanged.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

import rocke_aot
from rocke_aot.aot.builder.plan import Job, Plan
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target
from rocke_aot.aot.toolchains.base import Toolchain
from rocke_aot.errors import CompileTimeout, RockeError, ToolchainRefused

_log = logging.getLogger(__name__)

_COMPILES = 0
_COMPILES_LOCK = threading.Lock()


def compile_count() -> int:
    """How many kernels this process has sent to a toolchain (a counter, not a timer)."""
    return _COMPILES


def _count_compile() -> None:
    global _COMPILES
    with _COMPILES_LOCK:
        _COMPILES += 1


@dataclass(frozen=True)
class BuildOutput:
    code_object: bytes
    ir_sha256: str
    metadata: Mapping[str, Any]
    log: str
    seconds: float


def build_one(family: str, spec: Mapping[str, Any], target: Target, lane: Lane, toolchain: Toolchain,
              *, timeout: float = 300.0, slots: threading.Semaphore | None = None) -> BuildOutput:
    """Lower, compile and validate one kernel. Raises RockeError subclasses on failure.

    ``slots`` bounds how many compiles run at once; lowering and validation happen outside
    it, so with one more thread than slots the next kernel is lowered while this one compiles.
    """
    from rocke_aot.aot.codeobject import launch_layout, validate
    from rocke_aot.aot.families import get_family
    from rocke_aot.aot.lower import lower

    start = time.perf_counter()
    fam = get_family(family)
    kernel = lower(family, fam.spec_from(dict(spec)), target, lane)
    _count_compile()
    if slots is None:
        result = toolchain.compile(kernel.ir, target, timeout=timeout)
    else:
        with slots:
            result = toolchain.compile(kernel.ir, target, timeout=timeout)
    info = validate(result.code_object, target)
    # The launch contract a runner reads instead of per-family code: the lowering's formulas
    # with the layout the compiled object itself declares (checked against the lowering).
    contract = launch_layout(kernel.launch, info, getattr(result, "ptx", None))
    metadata = {
        "kernel": kernel.as_dict(),
        "code_object": info.as_dict(),
        "format": result.format,
        "launch": contract.as_dict(),
    }
    return BuildOutput(result.code_object, kernel.ir_sha256, metadata, result.log, time.perf_counter() - start)


@dataclass
class Outcome:
    built: list[Job] = field(default_factory=list)
    failed: list[tuple[Job, str]] = field(default_factory=list)
    compile_seconds: float = 0.0


def provenance(job: Job, out: BuildOutput, where: str) -> dict[str, Any]:
    return {
        "toolchain": dict(job.inputs.toolchain),
        "recipe_digest": job.inputs.recipe_digest,
        "host": where,
        "built_at": datetime.now(timezone.utc).isoformat(),
        "rocke_aot": rocke_aot.__version__,
        "seconds": round(out.seconds, 4),
    }


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0]}"


Submit = Callable[[Job], Future]


def local_submitter(executor: ThreadPoolExecutor, timeout: float, jobs: int) -> Submit:
    slots = threading.BoundedSemaphore(jobs)

    def submit(job: Job) -> Future:
        return executor.submit(build_one, job.family, job.spec, job.target, job.lane, job.toolchain,
                               timeout=timeout, slots=slots)

    return submit


def execute(plan: Plan, store, *, jobs: int | None = None, timeout: float = 300.0,
            submit: Submit | None = None, on_result: Callable[[Job, str], None] | None = None,
            host: str | None = None) -> Outcome:
    """Compile ``plan.to_build`` with ``jobs`` parallel compiles; write each result at once."""
    outcome = Outcome()
    jobs = jobs or os.cpu_count() or 1
    where = host or platform.node()
    executor = None
    if submit is None:
        # One thread more than compile slots: lowering the next kernel overlaps the compiles.
        executor = ThreadPoolExecutor(max_workers=jobs + 1, thread_name_prefix="rocke-build")
        submit = local_submitter(executor, timeout, jobs)
    pending: dict[Future, Job] = {}
    queue = list(reversed(plan.to_build))
    # Keep a bounded window in flight so a killed build has little half-done work and
    # memory stays flat on huge grids.
    window = max(2 * jobs, 4)
    try:
        while queue or pending:
            while queue and len(pending) < window:
                job = queue.pop()
                pending[submit(job)] = job
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                job = pending.pop(fut)
                try:
                    out = fut.result()
                except RockeError as e:
                    msg = _first_line(e)
                    outcome.failed.append((job, msg))
                    # A timeout or a refusing toolchain (e.g. a Dask worker with other code) says
                    # nothing about the key: only real build failures are cached.
                    if not isinstance(e, (CompileTimeout, ToolchainRefused)):
                        store.put_failure(job.inputs, msg, getattr(e, "log", "") or str(e))
                    status = "failed"
                except Exception as e:  # a bug or a lost worker: one failure, the build goes on
                    # Unexpected: the first line alone cannot be debugged, so the traceback goes
                    # into the failure row (error and log) and the process log.
                    trace = "".join(traceback.format_exception(type(e), e, e.__traceback__))
                    _log.error("build job %s (%s) raised an unexpected %s:\n%s",
                               job.label, job.key, type(e).__name__, trace.rstrip())
                    outcome.failed.append((job, f"{_first_line(e)} (unexpected; traceback in the failure record)"))
                    store.put_failure(job.inputs, f"{_first_line(e)}\n{trace}", trace)
                    status = "failed"
                else:
                    store.put(job.inputs, out.code_object, ir_sha256=out.ir_sha256,
                              metadata=out.metadata, provenance=provenance(job, out, where))
                    outcome.built.append(job)
                    outcome.compile_seconds += out.seconds
                    status = "built"
                if on_result:
                    on_result(job, status)
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
    return outcome
