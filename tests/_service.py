"""Fixtures of the service tests: real kernels, stores filled with them, a real server.

    kernel_bundle (session)  the real builder compiles 8 gemm fma specs for gfx942 on the
                             llvm22 lane into a SQLite store, exported once as a bundle
    filled_store(url, bundle) a store at ``url`` holding those artifacts (bundle import)
    live_server(url, ...)    `rocke-aot serve` in a subprocess on a free loopback port;
                             waits for /healthz, always terminated (then killed) on exit

Import with ``from _service import filled_store, live_server``; ``kernel_bundle`` is conftest.py's
(one per run: a fixture imported into a module is that module's own, built again per module).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest
from _once import once

from rocke_aot.cache.store import Store

EXE = str(Path(sys.executable).with_name("rocke-aot"))
# A request in a test waits this long before it counts as hung: the tests assert answers, not
# latency (bench/bench_hostile.py measures that), and a loaded 2-core CI machine answers slowly
# (httpx's default of 5 s failed a listing there, 2026-12-05).
HTTP_TIMEOUT_S = 60.0
WHERE = {"block_m": 64, "block_n": 64, "in_dtype": "f16", "out_dtype": "f32", "path": "fma"}


def _build_bundle(d: Path, llvm22) -> None:
    from rocke_aot.aot import builder
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    with Store.open(d / "built.sqlite") as store:
        summary = builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                                store=store, toolchains=[llvm22], where=WHERE)
        assert summary.ok, summary["failed"]
        arts = store.find()
        assert len(arts) == 8, [a.spec for a in arts]
        store.export(d / "kernels.bundle")


@pytest.fixture(scope="session")
def kernel_bundle(tmp_path_factory, llvm22):
    """(sqlite path, bundle path) of a real build: 8 gemm kernels for gfx942, lane llvm22.

    Built once per run (tests/_once.py: one build for every xdist worker; conftest.py imports
    this fixture so every module shares it), then copied into this worker's folder, so no two
    processes open the same SQLite file."""
    import shutil

    made = once(tmp_path_factory, "kernel-bundle", lambda d: _build_bundle(d, llvm22))
    d = tmp_path_factory.mktemp("kernels")
    for name in ("built.sqlite", "kernels.bundle"):
        shutil.copyfile(made / name, d / name)
    return d / "built.sqlite", d / "kernels.bundle"


def filled_store(url, bundle) -> Store:
    """A store holding the bundle's artifacts, imported: serves them, but a release signs none
    (cache/provenance.py: an import is not a build here)."""
    store = Store.open(url)
    store.import_(bundle)
    return store


def built_store(path, kernel_bundle) -> Store:
    """A copy of the store the builder wrote (kernel_bundle[0]) at ``path`` (a file or a sqlite:///
    URL): its rows entered by a build here, so a release signs them."""
    import shutil

    target = Path(str(path).removeprefix("sqlite:///"))
    with Store.open(kernel_bundle[0]):
        pass  # closed: its WAL checkpointed into the file
    shutil.copyfile(kernel_bundle[0], target)
    return Store.open(target)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_process(cache_url: str, *, port: int | None = None, workers: int = 1, token_file: str | None = None,
                  extra=(), env: dict | None = None):
    """(process, base URL) of a real `rocke-aot serve` once /healthz answers; the process is
    always stopped (killed if it will not terminate)."""
    port = port or free_port()
    args = [EXE, "serve", "--cache", str(cache_url), "--port", str(port), "--workers", str(workers), *extra]
    if token_file:
        args += ["--token-file", token_file]
    # The server's output goes to a file, never a pipe: nobody reads a pipe while the tests run, and
    # once its 64 KiB filled, uvicorn's access log (written on the event loop) blocked the whole
    # server: every request hung (CI 2026-12-05/06: /healthz past 120 s after ~1,000 logged requests).
    log = tempfile.TemporaryFile(mode="w+", prefix="rocke-serve-")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    proc.log = log  # type: ignore[attr-defined]  (server_output reads it)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"rocke-aot serve exited {proc.returncode}: {log.read()[-20000:]}")
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("rocke-aot serve did not answer /healthz within 60 s")
            time.sleep(0.2)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def server_output(proc) -> str:
    """What a serve_process server wrote (stdout and stderr) so far."""
    proc.log.flush()
    proc.log.seek(0)
    return proc.log.read()


@contextlib.contextmanager
def live_server(cache_url: str, *, workers: int = 1, token_file: str | None = None, env: dict | None = None):
    """Yield the base URL of a real `rocke-aot serve`; the process is always stopped."""
    with serve_process(cache_url, workers=workers, token_file=token_file, env=env) as (_, base):
        yield base
