"""Faults and bad input without the service: the store stays consistent and users see names.

    bad cache URLs ──> real binary (`rocke-aot cache stats|gc --cache URL`) and Store.open
                       each: a CacheAccessError naming the problem, exit 1, no traceback,
                       nothing created on disk
    SIGKILL        ──> a real `rocke-aot build` killed at random points of its progress
                       (after k of N puts, plus jitter); each time `cache verify` is clean,
                       every stored artifact has the bytes of an uninterrupted build, and a
                       rerun completes with only the missing keys            [reliability]
    disk corruption ─> one byte of a blob flipped in the SQLite FILE (not through SQL):
                       `cache show` refuses it (IntegrityError, nothing written), the other
                       artifacts still read, `cache verify` names the blob and its key
    full disk      ──> a build into a 2 MiB tmpfs with ~120 KiB left: a clear "no space
                       left" error, exit 1; after freeing space `verify` is clean and a
                       rerun completes                                       [reliability]

The references are an uninterrupted build of the same grid (bytes are deterministic) and
the SQLite file's own bytes; the code under test produces neither verdict.
docs/reliability.md records a run of these with its raw output.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _pg import code_object, put
from click.testing import CliRunner

from rocke_aot.cache import db
from rocke_aot.cache.store import Store
from rocke_aot.cli.main import cli
from rocke_aot.errors import CacheAccessError, IntegrityError

EXE = str(Path(sys.executable).with_name("rocke-aot"))
# Four fma GEMM kernels for gfx942 on llvm22 (f16 in; f16 or f32 out; single/double
# buffered): enough puts to kill between, small enough to rebuild twenty times.
GRID = ["--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", "--where", "path=fma", "--where", "block_m=32",
        "--where", "block_n=32", "--where", "block_k=32", "--where", "waves=2", "--where", "in_dtype=f16",
        "--jobs", "2"]
KILL_POINTS = int(os.environ.get("ROCKE_AOT_KILL_POINTS", "20"))
SEED = int(os.environ.get("ROCKE_AOT_FAULT_SEED", str(int(time.time()))))


def binary(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout, check=False)


def invoke(*args: str):
    """The command in-process (no interpreter start-up): same code as the binary."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, standalone_mode=False)


def _sqlite_path(url: str) -> Path:
    return Path(url[len("sqlite:///"):])


def stored(url: str) -> dict[str, str]:
    """{key: blob sha256} of the stored artifacts, read with the stdlib sqlite3 (not our code)."""
    path = _sqlite_path(url)
    if not path.exists():
        return {}
    with contextlib.closing(sqlite3.connect(path, timeout=60)) as conn:
        try:
            rows = conn.execute("SELECT key, blob_sha256 FROM artifacts WHERE status = 'ok'").fetchall()
        except sqlite3.OperationalError as e:  # schema not created yet: nothing stored
            if "no such table" in str(e):
                return {}
            raise
    return dict(rows)


def _uninitialized(url: str) -> bool:
    """The database file holds no table at all (a builder killed before its first migration committed);
    `cache verify` then says so by name."""
    with sqlite3.connect(_sqlite_path(url)) as c:
        empty = c.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0] == 0
    if empty:
        with pytest.raises(Exception, match="revision None"):
            invoke("cache", "verify", "--cache", url, "--json")
    return empty


def verify_clean(url: str) -> None:
    res = invoke("cache", "verify", "--cache", url, "--json")
    report = json.loads(res.stdout)
    assert report["ok"] is True and res.return_value in (None, 0), report


@pytest.fixture(scope="module")
def reference(tmp_path_factory, llvm22):
    """An uninterrupted build of GRID: {key: sha256}, the reference every other run must match."""
    url = f"sqlite:///{tmp_path_factory.mktemp('ref') / 'cache.sqlite'}"
    p = binary("build", *GRID, "--cache", url, "--json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    ref = stored(url)
    assert summary["built"] == summary["planned"] == len(ref) >= 4
    return ref


# ---- bad cache URLs ---------------------------------------------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens here once the socket closes


@contextlib.contextmanager
def _silent_server():
    """A TCP port that accepts connections and never answers: a hung or firewalled server."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


@contextlib.contextmanager
def read_only_cache(tmp_path):
    """A real store file that this process cannot write: a read-only mount when root (root
    ignores file modes), a 0444 file in a 0555 directory otherwise."""
    d = tmp_path / "ro"
    d.mkdir()
    root = os.geteuid() == 0
    if root:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(d)], check=True)
    try:
        url = f"sqlite:///{d / 'c.sqlite'}"
        with Store.open(url) as s:
            put(s, 1)
        if root:
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        else:
            (d / "c.sqlite").chmod(0o444)
            d.chmod(0o555)
        yield url
    finally:
        if root:
            subprocess.run(["umount", str(d)], check=False)
        else:
            d.chmod(0o755)


def _bad_urls(tmp_path):
    missing = tmp_path / "nonexistent" / "dir"
    return [
        ("unknown scheme", "mysql://h/d", "unsupported cache URL scheme 'mysql'", None),
        ("missing directory", f"sqlite:///{missing / 'x.db'}", f"directory {missing} does not exist", missing),
        ("missing directory, plain path", str(missing / "x.db"), f"directory {missing} does not exist", missing),
        ("a directory", f"sqlite:///{tmp_path}", f"cache path {tmp_path} is a directory", None),
        ("in-memory", "sqlite://", "in-memory SQLite database, which keeps nothing", None),
        ("refused", f"postgresql+psycopg://u:pw@127.0.0.1:{_closed_port()}/d",
         "cannot reach the PostgreSQL server", None),
        ("port not a number", "postgresql+psycopg://u:pw@127.0.0.1:x5432/d", "malformed cache URL", None),
    ]


def test_bad_cache_urls_are_named_errors_through_binary_and_python(tmp_path):
    for what, url, message, must_not_exist in _bad_urls(tmp_path):
        with pytest.raises(CacheAccessError, match=re.escape(message)):
            Store.open(url)
        p = binary("cache", "stats", "--cache", url)
        assert p.returncode == 1, (what, p.stdout, p.stderr)
        assert "CacheAccessError" in p.stderr and message in p.stderr, (what, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout, what
        assert "pw@" not in p.stderr, "the password must not be echoed"
        if must_not_exist is not None:
            assert not must_not_exist.exists(), f"{what}: opening created {must_not_exist}"


def test_read_only_cache_file_is_named_and_untouched(tmp_path):
    with read_only_cache(tmp_path) as url:
        path = _sqlite_path(url)
        before = path.read_bytes()
        p = binary("cache", "gc", "--cache", url)  # a writing command: refused, by name
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "CacheAccessError" in p.stderr and f"cache file {path} is read-only" in p.stderr
        p = binary("cache", "stats", "--cache", url)  # a reading command opens read-only: it answers
        assert p.returncode == 0 and "artifacts" in p.stdout, p.stderr
        with pytest.raises(CacheAccessError, match="read-only"):
            Store.open(url)
        assert path.read_bytes() == before


def test_unreachable_postgresql_fails_fast(monkeypatch):
    # A server that accepts and never answers: without a connect timeout libpq waits forever.
    with _silent_server() as port:
        url = f"postgresql+psycopg://u:pw@127.0.0.1:{port}/d"
        monkeypatch.setattr(db, "PG_CONNECT_TIMEOUT_S", 2)
        t0 = time.monotonic()
        with pytest.raises(CacheAccessError, match="cannot reach the PostgreSQL server.*timeout"):
            Store.open(url)
        assert time.monotonic() - t0 < 15
        t0 = time.monotonic()
        p = binary("cache", "stats", "--cache", url + "?connect_timeout=2", timeout=60)
        assert time.monotonic() - t0 < 20
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert "CacheAccessError: cannot reach the PostgreSQL server" in p.stderr and "timeout" in p.stderr


def test_wrong_postgresql_password_is_named(pg_server):
    url = pg_server.url().replace(f":{pg_server.password}@", ":wrong-password@")
    with pytest.raises(CacheAccessError, match="password authentication failed"):
        Store.open(url)
    p = binary("cache", "stats", "--cache", url)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "password authentication failed" in p.stderr and "wrong-password" not in p.stderr


# ---- SIGKILL at random points -----------------------------------------------------------

@pytest.mark.reliability
def test_sigkill_builder_at_random_points(tmp_path, reference):
    rng = random.Random(SEED)
    n = len(reference)
    log = []
    for i in range(KILL_POINTS):
        url = f"sqlite:///{tmp_path / f'k{i}.sqlite'}"
        after, jitter = rng.randrange(n), rng.uniform(0.0, 0.4)
        proc = subprocess.Popen([EXE, "build", *GRID, "--cache", url], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and len(stored(url)) < after and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(jitter)
            finished = proc.poll() is not None
            if not finished:
                os.killpg(proc.pid, signal.SIGKILL)  # the builder and its compiler workers
        finally:
            proc.wait()
            proc.stderr.close()
        got = stored(url)
        log.append((after, round(jitter, 2), "finished" if finished else "killed", len(got)))
        # Consistent: verify is clean, and whatever was stored is exactly the reference's bytes. A kill
        # before the first migration committed leaves a database file with no schema: a read command
        # refuses it by name (it never creates what it reads) and the rerun below creates it.
        if _sqlite_path(url).exists() and not (not got and _uninitialized(url)):
            verify_clean(url)
        assert all(reference.get(k) == sha for k, sha in got.items()), f"point {i}: bytes differ from the reference"
        res = invoke("build", *GRID, "--cache", url, "--json")
        s = json.loads(res.stdout)
        assert res.return_value in (None, 0) and s["failed"] == [], s
        assert s["cached"] == len(got) and s["built"] == n - len(got), (i, s, log[-1])
        assert stored(url) == reference, f"point {i}: the rerun did not complete the grid"
        verify_clean(url)
    print(f"seed {SEED}: (after k puts, jitter s, outcome, stored at kill) {log}")
    assert sum(1 for entry in log if entry[2] == "killed") >= KILL_POINTS // 2, log


# ---- a blob corrupted on disk -----------------------------------------------------------

def test_blob_corrupted_in_the_file_is_never_served(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with Store.open(url) as s:
        arts = [put(s, i, data=code_object(i, 2048)) for i in range(3)]
    victim = arts[1]
    path = _sqlite_path(url)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the main file
        data = conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (victim.sha256,)).fetchone()[0]
    raw = bytearray(path.read_bytes())
    probe = bytes(data[len(data) // 2 : len(data) // 2 + 24])
    at = raw.find(probe)
    assert at > 0 and raw.find(probe, at + 1) == -1, "the blob's bytes must be found once in the file"
    raw[at + 8] ^= 0xFF
    path.write_bytes(bytes(raw))

    out = tmp_path / "k.hsaco"
    p = binary("cache", "show", victim.key, "--out", str(out), "--cache", url)
    assert p.returncode == 1 and "IntegrityError" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not out.exists(), "corrupt bytes were written out"
    with Store.open(url) as s:
        with pytest.raises(IntegrityError):
            s.get(victim.key)
        for a in (arts[0], arts[2]):
            assert s.get(a.key).code_object == code_object(a.provenance["i"], 2048)
    p = binary("cache", "verify", "--json", "--cache", url)
    report = json.loads(p.stdout)
    assert p.returncode == 1 and report["ok"] is False
    assert [c["sha256"] for c in report["corrupt"]] == [victim.sha256]
    assert report["affected_keys"] == [victim.key]


# ---- a full disk during a build ---------------------------------------------------------

@contextlib.contextmanager
def small_filesystem(d: Path, size: str = "2m"):
    """A size-limited file system at ``d``: tmpfs (needs root / CAP_SYS_ADMIN). Without it the
    caller falls back to RLIMIT_FSIZE (see ``_fsize_limit``)."""
    d.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True,
                       check=False)
    try:
        yield p.returncode == 0
    finally:
        if p.returncode == 0:
            subprocess.run(["umount", str(d)], check=False)


def _fsize_limit(limit: int):
    def pre():  # in the child: writes past `limit` fail with EFBIG instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return pre


@pytest.mark.reliability
def test_full_disk_during_build_fails_clearly_and_keeps_the_store(tmp_path, reference):
    d = tmp_path / "small"
    url = f"sqlite:///{d / 'cache.sqlite'}"
    with small_filesystem(d) as mounted:
        with Store.open(url):
            pass  # the schema exists; the build's puts are what runs out of space
        filler = d / "filler"
        preexec = None
        if mounted:
            st = os.statvfs(d)
            filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 120 * 1024))
        else:  # documented fallback: no mount permission -> a per-process file size limit
            preexec = _fsize_limit(_sqlite_path(url).stat().st_size + 120 * 1024)
        p = subprocess.run([EXE, "build", *GRID, "--cache", url], capture_output=True, text=True,
                           timeout=300, preexec_fn=preexec, check=False)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "Traceback" not in p.stderr, p.stderr
        assert "CacheAccessError: no space left on the device holding cache" in p.stderr, p.stderr
        partial = stored(url)
        assert len(partial) < len(reference)
        assert all(reference[k] == sha for k, sha in partial.items())
        if mounted:
            filler.unlink()  # space again: the same store must be consistent and resumable
        verify_clean(url)
        res = invoke("build", *GRID, "--cache", url, "--json")
        s = json.loads(res.stdout)
        assert s["failed"] == [] and s["cached"] == len(partial) and s["built"] == len(reference) - len(partial)
        assert stored(url) == reference
        verify_clean(url)
