"""A pool of isolated workers for parallel compiles.

    WorkerPool(size=N)
      .call(spec, kind, payload, blob, timeout)   -> Reply   on the calling thread
      .submit(spec, kind, payload, blob, timeout) -> Future[Reply]   on one of N pool threads
      .submit_task(fn, *args)                     -> Future  (fn(call, *args) on a pool thread)
           |
           every thread (the pool's, or a caller's own) owns one Worker per WorkerSpec
           (lazily started, reused, replaced after a crash or timeout)

N threads means at most N compiles in flight, each in its own process, so one
LLVM abort or hang costs one request and one worker restart, never the caller.
Workers are keyed by WorkerSpec, so one pool serves several interpreters (the
llvm22 project interpreter, an llvm20 lane venv) and plugin kinds (COMGR, a
library code generator) at once.
"""

from __future__ import annotations

import atexit
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from rocke_aot.aot.compiler.worker import Reply, Worker, WorkerSpec


class WorkerPool:
    def __init__(self, size: int | None = None, *, max_requests: int = 2000):
        self.size = max(1, size or os.cpu_count() or 1)
        self.max_requests = max_requests
        self._executor: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._workers: list[tuple[threading.Thread, Worker]] = []
        self._closed = False

    def _worker(self, spec: WorkerSpec) -> Worker:
        if self._closed:
            raise RuntimeError("worker pool is closed")
        mine = getattr(self._local, "workers", None)
        if mine is None:
            mine = self._local.workers = {}
        worker = mine.get(spec)
        if worker is None:
            worker = mine[spec] = Worker(spec, max_requests=self.max_requests)
            with self._lock:
                # Workers of threads that have ended (a caller's finished executor) are closed
                # here, so their processes do not linger until interpreter exit.
                for thread, old in self._workers:
                    if not thread.is_alive():
                        old.close()
                self._workers = [(t, w) for t, w in self._workers if t.is_alive()]
                self._workers.append((threading.current_thread(), worker))
        return worker

    def _run(self, spec: WorkerSpec, kind: str, payload=None, blob=None, timeout: float = 120.0) -> Reply:
        return self._worker(spec).call(kind, payload, blob, timeout=timeout)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._closed:
                raise RuntimeError("worker pool is closed")
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="rocke-compile")
            return self._executor

    def call(self, spec: WorkerSpec, kind: str, payload: dict | None = None, blob: bytes | None = None,
             *, timeout: float = 120.0) -> Reply:
        """Run one request on the CALLING thread's worker for ``spec`` (a caller with its own
        threads, like the builder, gets one worker process per thread)."""
        return self._run(spec, kind, payload, blob, timeout)

    def call_fn(self):
        """``call`` with positional (spec, kind, payload, blob, timeout), as submit_task passes."""
        return self._run

    def submit(self, spec: WorkerSpec, kind: str, payload: dict | None = None, blob: bytes | None = None,
               *, timeout: float = 120.0) -> Future:
        """Run one request on one of the pool's ``size`` threads."""
        return self._pool().submit(self._run, spec, kind, payload, blob, timeout)

    def submit_task(self, fn, *args, **kwargs) -> Future:
        """Run ``fn(call, *args, **kwargs)`` on a pool thread, where ``call(spec, kind, payload,
        blob, timeout)`` talks to that thread's workers: a multi-step compile (codegen in a
        worker, then link) occupies one slot of the pool from start to end."""
        return self._pool().submit(fn, self._run, *args, **kwargs)

    def stats(self) -> dict[str, int]:
        """Processes started and alive (a crash or timeout shows as one more start)."""
        with self._lock:
            return {
                "workers": len(self._workers),
                "started": sum(w.started for _, w in self._workers),
                "alive": sum(1 for _, w in self._workers if w.pid is not None),
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for _, worker in self._workers:
                worker.close()
            self._workers.clear()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_default: WorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> WorkerPool:
    """The process-wide pool (one worker thread per core) that Toolchain.compile uses."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = WorkerPool()
            atexit.register(_default.close)
        return _default
