"""Store fixtures for the cache tests: a real PostgreSQL server and per-test stores.

    pg_database (session)  reach 127.0.0.1:5432 as postgres; if it does not answer, start
                           Debian's cluster (pg_ctlcluster); if that fails, FAIL (never skip).
                           Creates a fresh database rocke_test_<pid>_<hex>, drops it at the end.
    store_url (per test)   parametrized: "sqlite" -> a file under tmp_path;
                           "postgresql" -> a fresh schema in that database (search_path set
                           through the URL), dropped after the test.

Import into a test module with ``from _pg import pg_database, store_url  # noqa: F401``.
"""

from __future__ import annotations

import glob
import os
import secrets
import subprocess
import time
from urllib.parse import quote

import pytest

PG_HOST = os.environ.get("ROCKE_AOT_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("ROCKE_AOT_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("ROCKE_AOT_TEST_PG_USER", "postgres")


def _connect(dbname: str = "postgres"):
    import psycopg

    return psycopg.connect(host=PG_HOST, port=PG_PORT, user=PG_USER, dbname=dbname, autocommit=True, connect_timeout=3)


def _reachable() -> str | None:
    try:
        _connect().close()
        return None
    except Exception as e:  # noqa: BLE001 - the reason goes into the failure message
        return str(e)


def _start_server() -> str:
    versions = sorted(os.path.basename(p) for p in glob.glob("/etc/postgresql/*"))
    if not versions:
        return "no cluster under /etc/postgresql: install Debian's postgresql package (scripts/setup.sh does)"
    cmd = ["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main", "start"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 and "already running" not in proc.stderr:
        return f"{' '.join(cmd)} failed: {proc.stderr.strip() or proc.stdout.strip()}"
    return ""


@pytest.fixture(scope="session")
def pg_database():
    """The SQLAlchemy URL of a fresh database on a real PostgreSQL server."""
    why = _reachable()
    if why is not None:
        started = _start_server()
        deadline = time.monotonic() + 30
        while (why := _reachable()) is not None and time.monotonic() < deadline:
            time.sleep(0.5)
        if why is not None:
            pytest.fail(f"PostgreSQL at {PG_HOST}:{PG_PORT} is not reachable ({why}); starting it: {started or 'ok'}")
    name = f"rocke_test_{os.getpid()}_{secrets.token_hex(4)}"
    with _connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        with _connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A URL of an empty store, on each backend in turn."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cache.sqlite'}"
        return
    base = request.getfixturevalue("pg_database")
    schema = f"t_{secrets.token_hex(6)}"
    dbname = base.rsplit("/", 1)[1]
    with _connect(dbname) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{base}?options={quote(f'-csearch_path={schema}')}"
    finally:
        with _connect(dbname) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


# ---- small builders shared by the cache tests -------------------------------------------

TOOLCHAIN = {"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "LLD 22.1.8"}


def inputs(i: int = 0, **over):
    """Distinct, valid KeyInputs for ``i`` (override any field)."""
    from rocke_aot.cache.keys import KeyInputs

    fields = dict(
        arch="gfx942", lane="llvm22", profile="llvm22", family="gemm",
        spec={"dtype": "f16", "tile_m": 64, "tile_n": 64, "i": i}, lowering_digest="lower-v1",
        toolchain=dict(TOOLCHAIN),
    )
    fields.update(over)
    return KeyInputs(**fields)


def code_object(i: int, size: int = 4096) -> bytes:
    """Deterministic ELF-looking bytes (mostly structured, partly random, like a code object)."""
    import random

    rng = random.Random(i)
    head = b"\x7fELF\x02\x01\x01\x40" + i.to_bytes(8, "little")
    body = bytes(rng.getrandbits(8) if rng.random() < 0.3 else 0 for _ in range(size - len(head)))
    return head + body


def put(store, i: int, data: bytes | None = None, **over):
    import hashlib

    return store.put(
        inputs(i, **over), code_object(i) if data is None else data,
        ir_sha256=hashlib.sha256(f"ir{i}".encode()).hexdigest(),
        metadata={"kernel": f"k{i}", "vgprs": 32}, provenance={"host": "test", "i": i},
    )
