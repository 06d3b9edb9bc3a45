"""Store fixtures for the cache tests: a throwaway PostgreSQL cluster and per-test stores.

    pg_server (session, via conftest.py)
        $ROCKE_AOT_TEST_PG_URL set ──> that server, as given (its role needs CREATEDB)
        else ──> Cluster.start():
            initdb (Debian's /usr/lib/postgresql/<newest>/bin/initdb) into a temp dir,
              as the unprivileged `postgres` user when we are root (initdb refuses root),
              scram-sha-256 on every local and loopback line of pg_hba.conf (no trust),
            postgres on 127.0.0.1:<free port>, its socket in the temp dir,
            CREATE ROLE rocke_test LOGIN SUPERUSER PASSWORD <random> (tests create and drop
              their own roles in it), CREATE DATABASE rocke_test
        ──> PgServer(host, port, user, password, dbname);  at exit: pg_ctl stop, rm -rf
    pg_database (session)  a fresh database rocke_test_<pid>_<hex> on that server, dropped after
    store_url (per test)   parametrized: "sqlite" -> a file under tmp_path;
                           "postgresql" -> a fresh schema in that database (search_path set
                           through the URL), dropped after the test.

Nothing here depends on a cluster the machine already runs, nor on trust authentication:
CI starts from a stock Debian machine where `postgresql` is only installed (scripts/setup.sh).
A missing server binary FAILS the session (never skips) with the setup command to run.

Import into a test module with ``from _pg import pg_database, store_url  # noqa: F401``.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

ENV_URL = "ROCKE_AOT_TEST_PG_URL"
SERVER_USER = "postgres"  # the unprivileged OS account Debian's postgresql package creates


@dataclasses.dataclass(frozen=True)
class PgServer:
    host: str
    port: int
    user: str
    password: str
    dbname: str

    def url(self, dbname: str | None = None) -> str:
        """A SQLAlchemy URL (psycopg 3) for ``dbname`` (default: the server's own database)."""
        cred = quote(self.user, safe="") + (":" + quote(self.password, safe="") if self.password else "")
        return f"postgresql+psycopg://{cred}@{self.host}:{self.port}/{dbname or self.dbname}"

    def connect(self, dbname: str | None = None):
        import psycopg

        return psycopg.connect(
            host=self.host, port=self.port, user=self.user, password=self.password or None,
            dbname=dbname or self.dbname, autocommit=True, connect_timeout=5,
        )


def server_from_url(url: str) -> PgServer:
    """PgServer from a postgresql[+driver]://user:pw@host:port/db URL."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        raise ValueError(f"${ENV_URL} must be a postgresql:// URL, got {url!r}")
    return PgServer(
        host=parts.hostname or "127.0.0.1", port=parts.port or 5432, user=unquote(parts.username or "postgres"),
        password=unquote(parts.password or ""), dbname=(parts.path.lstrip("/") or "postgres"),
    )


def _pg_bindir() -> str:
    """Debian's newest server binaries (/usr/lib/postgresql/<ver>/bin), by numeric version."""
    found = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def ver(p: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.split("/")[-3]))

    if not found:
        pytest.fail(
            "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin/initdb): run `bash scripts/setup.sh` "
            f"(it installs Debian's postgresql), or set ${ENV_URL} to a server the tests may use"
        )
    return os.path.dirname(max(found, key=ver))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """One throwaway cluster: initdb, start, stop, remove. Owned by the test session."""

    def __init__(self) -> None:
        self.bindir = _pg_bindir()
        self.root = tempfile.mkdtemp(prefix="rocke-aot-pg-")
        self.data = os.path.join(self.root, "data")
        self.log = os.path.join(self.root, "server.log")
        self.run_as: str | None = None
        if os.geteuid() == 0:
            # initdb and postgres refuse to run as root: hand the directory to the server account.
            try:
                pw = pwd.getpwnam(SERVER_USER)
            except KeyError:
                pytest.fail(f"running as root and there is no {SERVER_USER!r} user to run PostgreSQL as: "
                            "run `bash scripts/setup.sh` (Debian's postgresql package creates it)")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.run_as = SERVER_USER
        self.port = 0
        self.started = False

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = list(argv)
        if self.run_as:
            cmd = ["runuser", "-u", self.run_as, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=self.root, check=False)
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}\n{self._log_tail()}")
        return proc

    def _log_tail(self) -> str:
        try:
            return Path(self.log).read_text()[-2000:]
        except OSError:
            return ""

    def start(self) -> PgServer:
        admin_pw = secrets.token_urlsafe(18)
        pwfile = os.path.join(self.root, "pw")
        with open(pwfile, "w") as f:
            f.write(admin_pw + "\n")
        if self.run_as:
            pw = pwd.getpwnam(self.run_as)
            os.chown(pwfile, pw.pw_uid, pw.pw_gid)
        os.chmod(pwfile, 0o600)
        self._run(
            f"{self.bindir}/initdb", "-D", self.data, "-U", "rocke_admin", f"--pwfile={pwfile}",
            "--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync",
            "--no-instructions",
        )
        os.unlink(pwfile)
        # A test server: durability is not under test here (crash tests use SQLite files), speed is.
        opts = (f"-c listen_addresses=127.0.0.1 -c unix_socket_directories={self.root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        for _attempt in range(5):  # the free port may be taken between probe and bind: retry
            self.port = _free_port()
            proc = self._run(f"{self.bindir}/pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
                             "-o", f"{opts} -p {self.port}", "start", check=False)
            if proc.returncode == 0:
                break
        else:
            pytest.fail(f"pg_ctl start failed: {proc.stderr.strip()}\n{self._log_tail()}")
        self.started = True
        admin = PgServer("127.0.0.1", self.port, "rocke_admin", admin_pw, "postgres")
        user_pw = secrets.token_urlsafe(18)
        with admin.connect() as conn:
            # SUPERUSER: tests make and drop their own roles (a read-only role: DROP OWNED BY needs
            # more than CREATEROLE on PostgreSQL 15); the cluster is this session's alone.
            conn.execute(f"CREATE ROLE rocke_test LOGIN SUPERUSER PASSWORD '{user_pw}'")
            conn.execute("CREATE DATABASE rocke_test OWNER rocke_test")
        return PgServer("127.0.0.1", self.port, "rocke_test", user_pw, "rocke_test")

    def stop(self) -> None:
        try:
            if self.started:
                self._run(f"{self.bindir}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server():
    """The PostgreSQL server the tests use: $ROCKE_AOT_TEST_PG_URL, else a throwaway cluster."""
    url = os.environ.get(ENV_URL)
    if url:
        server = server_from_url(url)
        try:
            server.connect().close()
        except Exception as e:  # noqa: BLE001 - the reason goes into the failure message
            pytest.fail(f"${ENV_URL} names a server that does not answer: {e}")
        yield server
        return
    cluster = Cluster()
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def pg_database(pg_server):
    """The SQLAlchemy URL of a fresh database on the test server, dropped at the end."""
    global _SERVER
    _SERVER = pg_server
    name = f"rocke_test_{os.getpid()}_{secrets.token_hex(4)}"
    with pg_server.connect() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.url(name)
    finally:
        with pg_server.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _connect_url(url: str):
    """A psycopg connection (autocommit) to the database a pg_database URL names."""
    return server_from_url(url).connect()


_SERVER: PgServer | None = None  # the session's server, set by pg_server (for _connect)


def _connect(dbname: str):
    """A psycopg connection (autocommit) to ``dbname`` on the session's server, as its role."""
    assert _SERVER is not None, "request the pg_database fixture first"
    return _SERVER.connect(dbname)


def role_url(url: str, role: str, password: str) -> str:
    """``url`` with its user and password replaced by ``role`` / ``password``."""
    parts = urlsplit(url)
    netloc = f"{quote(role, safe='')}:{quote(password, safe='')}@{parts.hostname}:{parts.port}"
    return parts._replace(netloc=netloc).geturl()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A URL of an empty store, on each backend in turn."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cache.sqlite'}"
        return
    base = request.getfixturevalue("pg_database")
    schema = f"t_{secrets.token_hex(6)}"
    with _connect_url(base) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{base}?options={quote(f'-csearch_path={schema}')}"
    finally:
        with _connect_url(base) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


# ---- small builders shared by the cache tests -------------------------------------------

TOOLCHAIN = {"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "LLD 22.1.8"}


def inputs(i: int = 0, **over):
    """Distinct, valid KeyInputs for ``i`` (override any field)."""
    from rocke_aot.cache.keys import KeyInputs

    fields = {
        "arch": "gfx942", "lane": "llvm22", "profile": "llvm22", "family": "gemm",
        "spec": {"dtype": "f16", "tile_m": 64, "tile_n": 64, "i": i}, "recipe_digest": "recipe-v1", "options": {},
        "toolchain": dict(TOOLCHAIN),
    }
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
