"""Running a plan: lower, reuse or compile (isolated), validate, write to the cache as results land.

    Plan.to_build, in windows ──> store.claim(keys, holder, lease)   (cache/claims.py)
        │ claimed by another live builder -> deferred: at the end, waited for (its result is
        │     read from the store) or taken over once its lease ends (the claimant died), at
        │     once where the claimant was a process of this host that is gone (cache/claims.py)
        ▼ ours (a heartbeat thread renews the leases of keys in flight)
    lower_one(job) in the driver (cheap) -> code_object_key(target, profile, IR sha256, toolchain, options)
        ├─ store has that code object ──> reuse: re-validated bytes, this lowering's launch
        │                                 contract, the schedule its first build read off the
        │                                 bytes (no cuobjdump again) -> store.put (no compile)
        ├─ the compiler refused that IR before ──> the failure, no compile (unless forced)
        ├─ another job of this build has the same IR in flight ──> waits for it, then reuses
        └─ new ──> executor (threads locally, or a Dask cluster): build_one -> toolchain.compile
                   (isolated worker process: an LLVM abort kills only it) -> validate
    Plan.to_verify (stored, but no build here made it: published, imported, fetched, legacy) runs
        the same way; its put compares: the same bytes verify the row, other bytes replace it
        (Outcome.verified / Outcome.replaced; cache/provenance.py)
    driver thread:  ok      -> store.put(inputs, code object, metadata, provenance, ptx, entered=build)
                    failure -> store.put_failure(..., ir_sha256)   (not for timeouts: they may be
                               load; not for refusals such as a Dask worker with other code)
                    RockeError (CompileError, ...): its message; anything else (a bug):
                    its full traceback in the failure row and logged (logger rocke_aot.aot.builder.run)
                    every result is written as it lands, then its claim released, so a build
                    killed with SIGKILL resumes with only the missing keys

The driver is the only writer; workers never touch the store. ``COMPILES`` counts real
toolchain invocations in this process: a no-op rebuild, and a rebuild after a change that
moved no IR, leave it unchanged.
"""

from __future__ import annotations

import logging
import os
import platform
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import rocke_aot
from rocke_aot.aot.builder.plan import Job, Plan
from rocke_aot.aot.toolchains.base import Toolchain
from rocke_aot.cache import codec
from rocke_aot.cache.keys import code_key_of
from rocke_aot.cache.provenance import Entry
from rocke_aot.errors import CompileTimeout, RockeError, ToolchainRefused
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target

_log = logging.getLogger(__name__)

_COMPILES = 0
_COMPILES_LOCK = threading.Lock()
LEASE_S = 60.0  # a claim's lease; renewed every third of it while the key is in flight


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
    ptx: str | None = None  # a cubin's PTX: the store keeps it so the code object can be reused
    triton_files: Mapping[str, bytes] | None = None  # a Triton build: its cache entry's files (Store.put)


def lower_one(job: Job):
    """The job's LoweredKernel (raises the lowering's RockeError)."""
    from rocke_aot.aot.families import get_family
    from rocke_aot.aot.lower import lower

    return lower(job.family, get_family(job.family).spec_from(job.spec), job.target, job.lane)


def _metadata(kernel, code_object: bytes, target: Target, fmt: str, ptx: str | None,
              triton: Mapping[str, Any] | None = None, schedule: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``schedule``: the one a stored code object's first build read off these bytes (reuse);
    taken where it was read ("sass"), read again where it could not be then (the tool may be
    here now)."""
    import dataclasses

    from rocke_aot.aot.codeobject import launch_layout, validate
    from rocke_aot.aot.sass import read_schedule
    from rocke_aot.candidates import Schedule

    info = validate(code_object, target)
    # ptxas's schedule read off an sm_90 cubin's SASS (or why it could not be): derived from these
    # bytes, so it is recorded beside the resources and is no part of the key (aot/sass.py)
    if info.format == "cubin":
        stored = None if schedule is None else Schedule.from_dict(schedule, "the stored code object's schedule")
        got = stored if stored is not None and stored.available else read_schedule(code_object, target, info.kernel)
        if got is not None:
            info = dataclasses.replace(info, schedule=got.as_dict())
    # The launch contract a runner reads instead of per-family code: the lowering's formulas
    # with the layout the compiled object itself declares (checked against the lowering).
    contract = launch_layout(kernel.launch, info, ptx)
    md = {"kernel": kernel.as_dict(), "code_object": info.as_dict(), "format": fmt, "launch": contract.as_dict()}
    if triton is not None:
        contract = _triton_contract(kernel, contract, info, target, triton)
        md["launch"] = contract.as_dict()
        md["triton"] = dict(triton)
    return md


def _triton_contract(kernel, contract, info, target: Target, entry: Mapping[str, Any]):
    """A Triton build's contract: its metadata must agree with the code object and the lowering,
    and its shared memory (dynamic: Triton launches with metadata["shared"]) joins the contract."""
    import dataclasses

    from rocke_aot.errors import CodeObjectError

    if entry["name"] != info.kernel or entry["name"] != kernel.kernel_name:
        raise CodeObjectError(f"Triton named the kernel {entry['name']!r}; the code object holds {info.kernel!r}, "
                              f"the lowering expects {kernel.kernel_name!r}")
    warp = target.info.wave_size if target.is_amdgpu else 32
    if entry["num_warps"] * warp != kernel.block_size:
        raise CodeObjectError(f"Triton built {entry['num_warps']} warps of {warp}; the contract launches "
                              f"{kernel.block_size} threads")
    for name in ("global_scratch_size", "profile_scratch_size"):
        if entry.get(name):
            raise CodeObjectError(f"{kernel.kernel_name} needs {entry[name]} bytes of Triton {name.split('_size')[0]}"
                                  " per program; launches from the cache pass none")
    shared = entry["shared"]
    if not isinstance(shared, int) or shared < 0 or shared > target.info.lds_bytes:
        raise CodeObjectError(f"{kernel.kernel_name} asks for {shared} bytes of shared memory; "
                              f"{target.processor} has {target.info.lds_bytes}")
    return dataclasses.replace(contract, dynamic_shared_bytes=shared)


def build_one(family: str, spec: Mapping[str, Any], target: Target, lane: Lane, toolchain: Toolchain,
              *, timeout: float = 300.0, slots: threading.Semaphore | None = None, kernel=None) -> BuildOutput:
    """Lower (unless ``kernel`` is the lowering already), compile and validate one kernel.
    Raises RockeError subclasses on failure. ``slots`` bounds how many compiles run at once."""
    from rocke_aot.aot.families import get_family
    from rocke_aot.aot.lower import lower

    start = time.perf_counter()
    if kernel is None:
        kernel = lower(family, get_family(family).spec_from(dict(spec)), target, lane)
    _count_compile()
    if slots is None:
        result = toolchain.compile(kernel.ir, target, timeout=timeout)
    else:
        with slots:
            result = toolchain.compile(kernel.ir, target, timeout=timeout)
    ptx = getattr(result, "ptx", None)
    extra = getattr(result, "extra", None) or {}
    metadata = _metadata(kernel, result.code_object, target, result.format, ptx, extra.get("triton"))
    return BuildOutput(result.code_object, kernel.ir_sha256, metadata, result.log, time.perf_counter() - start, ptx,
                       extra.get("triton_files"))


@dataclass
class Outcome:
    built: list[Job] = field(default_factory=list)
    failed: list[tuple[Job, str]] = field(default_factory=list)
    compile_seconds: float = 0.0
    reused: list[Job] = field(default_factory=list)  # built from a code object already stored (no compile)
    by_others: list[Job] = field(default_factory=list)  # another builder held the claim and stored it
    # Plan.to_verify: a stored row no build here made, compiled again (or from a build's code object)
    verified: list[Job] = field(default_factory=list)  # same bytes: the row is now verified
    replaced: list[tuple[Job, str, str, str]] = field(default_factory=list)  # (job, entered, stored sha, built sha)


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


Submit = Callable[..., Future]  # submit(job, kernel) -> Future[BuildOutput]; kernel may be ignored


def local_submitter(executor: ThreadPoolExecutor, timeout: float, jobs: int) -> Submit:
    slots = threading.BoundedSemaphore(jobs)

    def submit(job: Job, kernel=None) -> Future:
        return executor.submit(build_one, job.family, job.spec, job.target, job.lane, job.toolchain,
                               timeout=timeout, slots=slots, kernel=kernel)

    return submit


class _Heartbeat:
    """Renews the leases of the keys in flight every third of the lease, until stopped."""

    def __init__(self, store, holder: str, lease_s: float):
        self.store, self.holder, self.lease_s = store, holder, lease_s
        self.keys: set[str] = set()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rocke-claims", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            with self.lock:
                keys = sorted(self.keys)
            if keys:
                try:
                    self.store.renew_claims(keys, self.holder, self.lease_s)
                except Exception as e:  # noqa: BLE001 - a missed renewal only risks a duplicate compile
                    _log.warning("renewing %d build claims failed: %s", len(keys), e)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def execute(plan: Plan, store, *, jobs: int | None = None, timeout: float = 300.0,
            submit: Submit | None = None, on_result: Callable[[Job, str], None] | None = None,
            host: str | None = None, lease_s: float = LEASE_S, poll_s: float | None = None) -> Outcome:
    """Build ``plan.to_build`` with ``jobs`` parallel compiles; write each result at once."""
    return _Run(plan, store, jobs=jobs or os.cpu_count() or 1, timeout=timeout, submit=submit,
                on_result=on_result, where=host or platform.node(), lease_s=lease_s,
                poll_s=min(1.0, lease_s / 10) if poll_s is None else poll_s).run()


class _Run:
    def __init__(self, plan: Plan, store, *, jobs: int, timeout: float, submit: Submit | None,
                 on_result, where: str, lease_s: float, poll_s: float):
        self.plan, self.store, self.jobs, self.timeout = plan, store, jobs, timeout
        self.submit, self.on_result, self.where = submit, on_result, where
        self.lease_s, self.poll_s = lease_s, poll_s
        self.force = plan.force
        self.holder = store.claim_holder(where)
        self.outcome = Outcome()
        self.pending: dict[Future, tuple[Job, Any, str]] = {}
        self.same_ir: dict[str, list[tuple[Job, Any]]] = {}  # code key in flight -> jobs waiting on it

    def run(self) -> Outcome:
        executor = None
        if self.submit is None:
            # One thread more than compile slots: a result is validated while the next compiles.
            executor = ThreadPoolExecutor(max_workers=self.jobs + 1, thread_name_prefix="rocke-build")
            self.submit = local_submitter(executor, self.timeout, self.jobs)
        self.beat = _Heartbeat(self.store, self.holder, self.lease_s)
        # rows to verify are built like misses; their stored bytes are compared when the build lands
        queue = list(reversed([*self.plan.to_build, *self.plan.to_verify]))
        deferred: list[Job] = []
        # A bounded window in flight: a killed build has little half-done work, memory stays
        # flat on huge grids, and concurrent builders interleave their claims.
        window = max(2 * self.jobs, 4)
        try:
            while queue or self.pending or deferred:
                if queue and len(self.pending) < window:
                    batch = [queue.pop() for _ in range(min(len(queue), window - len(self.pending)))]
                    mine = set(self.store.claim([j.key for j in batch], self.holder, self.lease_s, self.where))
                    # Stored by another builder since this plan was made (it claimed, built and
                    # released before we claimed): nothing to do but let go.
                    done_meanwhile = {k: h for k, h in (self.store.lookup_many(sorted(mine)) if mine else {}).items()
                                      if h.ok and k not in self.plan.verify_sha}
                    if done_meanwhile:
                        self.store.release_claims(list(done_meanwhile), self.holder)
                    for job in batch:
                        if job.key in done_meanwhile:
                            self.outcome.by_others.append(job)
                            self._report(job, "cached")
                        elif job.key in mine:
                            self._start(job)
                        else:
                            deferred.append(job)
                    continue
                if self.pending:
                    done, _ = wait(self.pending, return_when=FIRST_COMPLETED, timeout=None if not deferred
                                   else self.poll_s)
                    for fut in done:
                        self._finish(fut)
                    continue
                if deferred:  # nothing of ours left: what the other builders hold
                    deferred = self._settle(deferred, queue)
                    if deferred and not queue:
                        time.sleep(self.poll_s)
        finally:
            self.beat.stop()
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        return self.outcome

    def _settle(self, deferred: list[Job], queue: list[Job]) -> list[Job]:
        """Deferred jobs another builder stored are done; those whose claim ended are ours again."""
        hits = self.store.lookup_many([j.key for j in deferred])
        held = self.store.claimed_by_others([j.key for j in deferred if j.key not in hits], self.holder,
                                            self.where)
        still = []
        for job in deferred:
            if job.key in hits:
                self.outcome.by_others.append(job)
                self._report(job, "cached")
            elif job.key in held:
                still.append(job)
            else:
                queue.append(job)  # its claimant died or gave up: claimed again next round
        return still

    def _hold(self, job: Job) -> None:
        with self.beat.lock:
            self.beat.keys.add(job.key)

    def _let_go(self, job: Job) -> None:
        with self.beat.lock:
            self.beat.keys.discard(job.key)
        self.store.release_claims([job.key], self.holder)

    def _report(self, job: Job, status: str) -> None:
        if self.on_result:
            self.on_result(job, status)

    def _start(self, job: Job) -> None:
        self._hold(job)
        try:
            kernel = lower_one(job)
        except Exception as e:  # noqa: BLE001 - recorded like a compile failure
            self._failed(job, e, None)
            return
        ck = code_key_of(job.inputs, kernel.ir_sha256)
        if ck in self.same_ir:
            self.same_ir[ck].append((job, kernel))
            return
        hit = self.store.lookup_code_objects([ck]).get(ck)
        if hit is not None and self._reuse(job, kernel, hit):
            return
        self.same_ir[ck] = []
        self.pending[self._submit(job, kernel)] = (job, kernel, ck)

    def _submit(self, job: Job, kernel) -> Future:
        assert self.submit is not None, "run() sets the local submitter before it dispatches a job"
        return self.submit(job, kernel)

    def _reuse(self, job: Job, kernel, hit) -> bool:
        """Store ``job`` from a stored code object (True), or say it must be compiled (False)."""
        if not hit.ok:
            if self.force:
                return False
            self._failed(job, None, kernel, message=f"{hit.error} (the compiler refused this IR before; "
                                                    "--force retries)")
            return True
        fmt, ptx = hit.info.get("format"), hit.info.get("ptx")
        if fmt == "cubin" and ptx is None:  # migrated without its PTX: compile once more
            return False
        start = time.perf_counter()
        try:
            raw = self.store.get_blob(hit.blob_sha256)
            meta = _metadata(kernel, raw, job.target, fmt, ptx, hit.info.get("triton"), hit.info.get("schedule"))
        except Exception as e:  # noqa: BLE001 - this lowering does not fit that object: a failure
            self._failed(job, e, kernel)
            return True
        out = BuildOutput(raw, kernel.ir_sha256, meta, "", time.perf_counter() - start, ptx)
        self._put(job, out, {**provenance(job, out, self.where), "reused_code_object": hit.key})
        self.outcome.reused.append(job)
        self._let_go(job)
        self._report(job, "reused")
        return True

    def _put(self, job: Job, out: BuildOutput, prov: dict[str, Any]) -> None:
        """Store what this build made. A key the plan found stored by no build here (Plan.to_verify)
        is compared: the same bytes verify that row; other bytes replace it (the build's bytes are
        the key's; what was there was not what this compiler makes of these inputs)."""
        stored = self.plan.verify_sha.get(job.key)
        entered = Entry.built_here(job.inputs.toolchain, self.where)
        self.store.put(job.inputs, out.code_object, ir_sha256=out.ir_sha256, metadata=out.metadata, provenance=prov,
                       ptx=out.ptx, triton_files=out.triton_files, entered=entered, replace=stored is not None)
        if stored is None:
            return
        if codec.sha256_hex(out.code_object) == stored:
            self.outcome.verified.append(job)
        else:
            got = codec.sha256_hex(out.code_object)
            _log.warning("build replaced %s (%s): the stored row (%s) held %s, this build makes %s", job.key,
                         job.label, self.plan.verify_entered.get(job.key), stored, got)
            self.outcome.replaced.append((job, self.plan.verify_entered.get(job.key, "?"), stored, got))

    def _finish(self, fut: Future) -> None:
        job, kernel, ck = self.pending.pop(fut)
        waiting = self.same_ir.pop(ck, [])
        try:
            out = fut.result()
        except Exception as e:  # noqa: BLE001 - _failed tells a RockeError from a bug
            self._failed(job, e, kernel)
        else:
            self._put(job, out, provenance(job, out, self.where))
            self.outcome.built.append(job)
            self.outcome.compile_seconds += out.seconds
            self._let_go(job)
            self._report(job, "built")
        for other, other_kernel in waiting:  # same IR: the code object now stored (or refused)
            hit = self.store.lookup_code_objects([ck]).get(ck)
            if hit is None or not self._reuse(other, other_kernel, hit):
                self.same_ir[ck] = []
                self.pending[self._submit(other, other_kernel)] = (other, other_kernel, ck)

    def _failed(self, job: Job, e: BaseException | None, kernel, *, message: str | None = None) -> None:
        ir = None if kernel is None else kernel.ir_sha256
        if e is None:
            assert message is not None, "a failure without an exception is given its message"
            self.outcome.failed.append((job, message))
            self.store.put_failure(job.inputs, message, "", ir_sha256=ir)
        elif isinstance(e, RockeError):
            msg = _first_line(e)
            self.outcome.failed.append((job, msg))
            # A timeout or a refusing toolchain (e.g. a Dask worker with other code) says
            # nothing about the key: only real build failures are cached.
            if not isinstance(e, (CompileTimeout, ToolchainRefused)):
                self.store.put_failure(job.inputs, msg, getattr(e, "log", "") or str(e), ir_sha256=ir)
        else:  # a bug or a lost worker: one failure, the build goes on
            # Unexpected: the first line alone cannot be debugged, so the traceback goes into
            # the failure row (error and log) and the process log. Not kept under the code
            # key: a bug says nothing about what the compiler does with this IR.
            trace = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            _log.error("build job %s (%s) raised an unexpected %s:\n%s",
                       job.label, job.key, type(e).__name__, trace.rstrip())
            self.outcome.failed.append((job, f"{_first_line(e)} (unexpected; traceback in the failure record)"))
            self.store.put_failure(job.inputs, f"{_first_line(e)}\n{trace}", trace)
        self._let_go(job)
        self._report(job, "failed")
