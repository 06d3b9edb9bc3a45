"""One isolated compile worker process, seen from the parent.

    Worker(WorkerSpec(python, plugins, env))
       .call(kind, payload, blob, timeout) --frame--> _llvm_worker.py (long-lived, reused)
                                           <--frame-- {"ok": ..., "result": ...}, blob
       crash (LLVM abort, segfault) -> CompileError(LLVM's message from the worker's stderr)
       no answer within timeout     -> worker killed -> CompileTimeout
       either way the process is gone; the next call starts a fresh one.

The worker's stderr is a temporary file this side owns: it survives the worker,
so the "LLVM ERROR: Cannot select ..." an abort prints is still readable after
the process died. Between requests the file is truncated when it grows.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rocke_aot.errors import CompileError, CompileTimeout

WORKER_SCRIPT = Path(__file__).with_name("_llvm_worker.py")
_HEAD = 8  # two big-endian u32: header length, blob length
_STARTUP_TIMEOUT = 120.0  # interpreter start + plugin imports; not part of a compile's budget
_STDERR_KEEP = 1 << 20  # truncate the stderr file between requests beyond this


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker process is: interpreter, plugin files, extra environment."""

    python: str
    plugins: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(cls, python: str, plugins=(), env: Mapping[str, str] | None = None) -> WorkerSpec:
        return cls(str(python), tuple(str(p) for p in plugins), tuple(sorted((env or {}).items())))

    def describe(self) -> str:
        extra = f" with {', '.join(Path(p).name for p in self.plugins)}" if self.plugins else ""
        return f"worker under {self.python}{extra}"


@dataclass(frozen=True)
class Reply:
    result: dict[str, Any]
    blob: bytes | None
    log: str  # what the worker wrote to stderr during the request (warnings)


def answer_blob(blob: bytes | None, kind: str) -> bytes:
    """The bytes a compile request's answer carries (a describe request's carries none):
    CompileError when the worker sent none."""
    if blob is None:
        raise CompileError(f"the worker's answer to {kind} carries no code")
    return blob


def llvm_error_summary(text: str) -> str:
    """The line of a tool's stderr that says what went wrong (LLVM ERROR first)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for marker in ("LLVM ERROR", "error:", "Error", "Assertion"):
        for ln in lines:
            if marker in ln:
                return ln
    return lines[-1] if lines else "no message"


class Worker:
    """A long-lived worker process; not thread-safe (one caller at a time)."""

    def __init__(self, spec: WorkerSpec, *, max_requests: int = 2000, stderr_keep: int = _STDERR_KEEP):
        self.spec = spec
        self.max_requests = max_requests
        self.stderr_keep = stderr_keep
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._served = 0
        self.started = 0  # how many processes this Worker has started (tests, stats)

    # -------------------------------------------------------------- lifecycle

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    def _start(self) -> None:
        self.close()
        self._stderr = tempfile.TemporaryFile(prefix="rocke-worker-")
        cmd = [self.spec.python, "-I", str(WORKER_SCRIPT)]
        for plugin in self.spec.plugins:
            cmd += ["--plugin", plugin]
        env = dict(os.environ)
        env.update(dict(self.spec.env))
        try:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                env=env, close_fds=True, start_new_session=True,
            )
        except OSError as e:
            raise CompileError(f"cannot start {self.spec.describe()}: {e}") from e
        self.started += 1
        self._served = 0
        try:
            header, _ = self._recv(time.monotonic() + _STARTUP_TIMEOUT, 0)
        except CompileError as e:
            self.close()
            raise CompileError(f"{self.spec.describe()} failed to start: {e}", getattr(e, "log", "")) from None
        if not header.get("ready"):
            self.close()
            raise CompileError(f"{self.spec.describe()} sent no handshake: {header!r}")

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __del__(self):  # pragma: no cover - best effort when a pool is dropped unclosed
        try:
            self.close()
        except Exception:
            pass

    # -------------------------------------------------------------- I/O

    def _live(self) -> tuple[subprocess.Popen, IO[bytes], IO[bytes], IO[bytes]]:
        """The process of the call in progress with its stdin, stdout and stderr file (_start
        made them all; close() drops them)."""
        proc, log = self._proc, self._stderr
        if proc is None or log is None:
            raise CompileError(f"{self.spec.describe()} is not running")
        assert proc.stdin is not None and proc.stdout is not None, "_start opens both pipes"
        return proc, proc.stdin, proc.stdout, log

    def _stderr_size(self) -> int:
        return os.fstat(self._live()[3].fileno()).st_size

    def _stderr_from(self, start: int) -> str:
        size = self._stderr_size() - start
        if size <= 0:
            return ""
        return os.pread(self._live()[3].fileno(), size, start).decode("utf-8", "replace")

    def _read(self, n: int, deadline: float, mark: int) -> bytes:
        fd = self._live()[2].fileno()
        buf = bytearray()
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while len(buf) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    raise CompileTimeout("timed out", self._stderr_from(mark))
                chunk = os.read(fd, n - len(buf))
                if not chunk:
                    raise _WorkerDied()
                buf += chunk
        return bytes(buf)

    def _recv(self, deadline: float, mark: int) -> tuple[dict, bytes | None]:
        try:
            head = self._read(_HEAD, deadline, mark)
            hlen, blen = int.from_bytes(head[:4], "big"), int.from_bytes(head[4:], "big")
            header = json.loads(self._read(hlen, deadline, mark))
            blob = self._read(blen, deadline, mark) if blen else None
        except _WorkerDied:
            proc = self._live()[0]
            proc.wait()
            log = self._stderr_from(mark)
            raise CompileError(
                f"{self.spec.describe()} died ({_exit_text(proc.returncode)}): {llvm_error_summary(log)}", log
            ) from None
        return header, blob

    # -------------------------------------------------------------- the call

    def call(self, kind: str, payload: dict | None = None, blob: bytes | None = None,
             *, timeout: float = 120.0) -> Reply:
        """Run one request; raises CompileError (worker error or crash) or CompileTimeout."""
        if self._proc is None or self._proc.poll() is not None or self._served >= self.max_requests:
            self._start()
        proc, stdin, _, stderr = self._live()
        if self._stderr_size() > self.stderr_keep:
            # The worker is idle (blocked on stdin) and shares this file offset.
            os.ftruncate(stderr.fileno(), 0)
            os.lseek(stderr.fileno(), 0, os.SEEK_SET)
        mark = self._stderr_size()
        head = json.dumps({"kind": kind, "payload": payload or {}}).encode()
        body = blob or b""
        deadline = time.monotonic() + timeout
        try:
            stdin.write(len(head).to_bytes(4, "big") + len(body).to_bytes(4, "big") + head + body)
            stdin.flush()
            header, out = self._recv(deadline, mark)
        except CompileTimeout as e:
            self.close()
            raise CompileTimeout(
                f"{kind} in {self.spec.describe()} exceeded {timeout:g}s; worker killed", e.log
            ) from None
        except BrokenPipeError:
            proc.wait()
            log = self._stderr_from(mark)
            self.close()
            raise CompileError(f"{self.spec.describe()} died: {llvm_error_summary(log)}", log) from None
        except CompileError:
            self.close()
            raise
        self._served += 1
        log = self._stderr_from(mark)
        if not header.get("ok"):
            detail = header.get("traceback") or ""
            raise CompileError(f"{kind}: {header.get('error')}", (log + detail).strip())
        return Reply(header.get("result") or {}, out, log)


class _WorkerDied(Exception):
    pass


def _exit_text(code: int) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
