"""Engines and schema: where a store lives, how it is opened, how its schema is checked.

    url or None ──resolve_url──> "sqlite:////home/u/.cache/rocke-aot/cache.sqlite"
        │                         (None -> $ROCKE_AOT_CACHE -> $ROCKE_AOT_HOME/cache.sqlite
        │                          -> platformdirs user_cache_dir("rocke-aot")/cache.sqlite)
        │  a bad URL fails HERE with CacheAccessError: unknown scheme, in-memory SQLite, a
        │  directory that does not exist, a read-only file
        ▼
    make_engine(url) ── SQLite: every connection gets WAL, busy_timeout, foreign keys and
        │               driver-level autocommit, so SQLAlchemy's "begin" hook decides how a
        │               transaction starts: BEGIN IMMEDIATE for writes (the write lock is
        │               taken up front, so two writers never deadlock upgrading a read lock
        │               and never see "database is locked"), plain BEGIN for reads.
        │               PostgreSQL: psycopg 3; writers serialize against GC/eviction with an
        │               advisory lock instead (see ``write_tx``); a connect timeout, so an
        │               unreachable server fails in seconds.
        │               Both: driver errors about access (cannot open, read-only, disk full,
        │               server unreachable) become CacheAccessError, at open or mid-build.
        ▼
    ensure_schema(engine) ── read alembic_version (no Alembic import on this fast path)
                            ├─ at head and rocke_meta.schema_version matches -> done
                            ├─ empty store or older known revision -> Alembic upgrade, inside
                            │   one write transaction (concurrent first opens serialize)
                            └─ unknown revision, unstamped tables, wrong version -> SchemaVersionError
        ▼
    Handle(url, engine, readonly) ── what every part of a Store shares (cache/store.py):
                            read_tx / write_tx on its engine, writable(what) -> ReadOnlyError,
                            str() names the store in messages. insert_ignore(conn, table) and
                            chunks(keys) are the statements and batching the parts have in common.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, Table, create_engine, event, inspect, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from rocke_aot import settings
from rocke_aot.cache import models
from rocke_aot.errors import CacheAccessError, ReadOnlyError, SchemaVersionError

BUSY_TIMEOUT_MS = 60_000
# Seconds to wait for a PostgreSQL server to answer (libpq waits forever by default); a URL's
# own ?connect_timeout= wins.
PG_CONNECT_TIMEOUT_S = 10
# Advisory lock ids on PostgreSQL (arbitrary constants, "rocke" in ASCII-ish digits).
PG_LOCK_SCHEMA = 7_263_011
PG_LOCK_WRITE = 7_263_012
LOOKUP_CHUNK = 900  # keys per IN (...): under SQLite's oldest bound-parameter limit (999) and PostgreSQL's (65535)


def default_path() -> Path:
    home = settings.raw(settings.HOME)
    if home:
        return Path(home).expanduser() / "cache.sqlite"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("rocke-aot")) / "cache.sqlite"


def resolve_url(url: str | os.PathLike | None = None) -> str:
    """A SQLAlchemy URL for ``url``; a plain path means a SQLite file.

    Only the default location (no URL, no $ROCKE_AOT_CACHE) has its directory created: a
    given path must name a file in an existing, writable directory, so a typo fails here
    with :class:`CacheAccessError` instead of deep inside the driver (or silently creating
    a tree somewhere)."""
    if url is None:
        url = settings.raw(settings.CACHE) or None
    if url is None:
        path = default_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CacheAccessError(f"cannot create the default cache directory {path.parent}: {e.strerror or e}") from None
        return check_sqlite_path(f"sqlite:///{path}")
    url = os.fspath(url)
    if not isinstance(url, str) or not url:
        raise CacheAccessError("cache URL is empty; give a path, sqlite:///FILE or postgresql+psycopg://...")
    if "://" not in url:
        path = Path(url).expanduser().resolve()
        return check_sqlite_path(f"sqlite:///{path}")
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        # psycopg 3 is the driver this project installs; SQLAlchemy's default is psycopg2.
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    scheme = url.split("://", 1)[0]
    if scheme not in ("sqlite", "sqlite+pysqlite", "postgresql+psycopg"):
        raise CacheAccessError(
            f"unsupported cache URL scheme {scheme!r} in {_safe(url)}; use a path, sqlite:///FILE or "
            "postgresql+psycopg://USER@HOST/DB"
        )
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as e:  # ValueError: e.g. a port that is not a number
        raise CacheAccessError(f"malformed cache URL {_safe(url)}: {e}") from None
    if parsed.get_backend_name() == "sqlite":
        return check_sqlite_path(url)
    return url  # PostgreSQL: no host means libpq's local socket; reachability is checked on open


def _safe(url: str) -> str:
    """``url`` for a message: the password hidden when it parses, else only its scheme."""
    try:
        return display_url(url)
    except Exception:  # noqa: BLE001 - an unparsable URL must not leak what follows the scheme
        return url.split("://", 1)[0] + "://..."


def check_sqlite_path(url: str, *, writable: bool = False) -> str:
    """``url`` (sqlite) when its file can be a store; :class:`CacheAccessError` saying why not.

    ``writable`` (make_engine, unless the store is opened read-only): SQLite in WAL mode
    writes even to read (the -wal and -shm files beside the database), so the file must be
    writable, and a new file needs a writable directory. ``os.access`` honours read-only
    mounts (EROFS) even for root."""
    database = make_url(url).database
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        raise CacheAccessError(
            f"cache URL {url} is an in-memory SQLite database, which keeps nothing; give a file: sqlite:///PATH"
        )
    path = Path(database).expanduser()
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise CacheAccessError(f"cache path {path} is a directory; name a file in it, e.g. {path / 'cache.sqlite'}")
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise CacheAccessError(f"cannot open cache {url}: directory {parent} {why}; create it first")
    if not writable:
        return url
    if path.exists():
        if not os.access(path, os.R_OK | os.W_OK):
            raise CacheAccessError(
                f"cache file {path} is read-only (or unreadable) here: rocke-aot writes to its cache "
                "(SQLite keeps a write-ahead log beside it even to read); give a writable copy or fix its permissions "
                f"(this process runs as uid {os.getuid()} gid {os.getgid()}: `chown -R {os.getuid()}:{os.getgid()} "
                f"{parent}`)"
            )
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise CacheAccessError(
            f"cannot create cache {path}: directory {parent} is not writable by uid {os.getuid()} (gid "
            f"{os.getgid()}), which this process runs as; give it the directory: `install -d -o {os.getuid()} "
            f"-g {os.getgid()} {parent}` (a bind mount: run it on the host, on the directory mounted there)")
    return url


def display_url(url: str) -> str:
    """The URL with any password hidden (for stats and error messages)."""
    return make_url(url).render_as_string(hide_password=True)


def _set_wal(cur) -> None:
    """PRAGMA journal_mode = WAL, retried while another process holds the lock: switching a
    new file to WAL can answer "database is locked" at once, without the busy handler (seen
    with four processes opening one new store together under load)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _sqlite_hooks(engine: Engine, readonly: bool = False) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):  # noqa: ANN001
        # Driver autocommit: pysqlite must not emit its own BEGINs; ours below decide.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if readonly:  # no journal-mode change (a write); the builders' WAL file is read as is
            cur.execute("PRAGMA query_only = ON")
            cur.close()
            return
        _set_wal(cur)
        # NORMAL is durable against process crashes in WAL mode (only an OS crash may drop
        # the last commits) and keeps every state consistent.
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection):
        if conn.get_execution_options().get("rocke_write"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


def readonly_url(url: str) -> str:
    """SQLite: the same file opened with ``mode=ro`` (an SQLite URI), so the OS-level open is
    read-only and a chmod 444 file works; PostgreSQL: unchanged (the engine sets every
    transaction read-only, see make_engine).

    A file SQLite cannot write beside (a read-only volume, e.g. a Docker ``:ro`` mount, or a
    read-only directory) cannot hold the ``-shm`` file WAL readers need, so it is opened
    ``immutable=1``: no locks, no WAL, the file read as it is, which is exact only while
    nothing writes it, true of a read-only volume. A non-empty ``-wal`` beside such a file
    holds commits that immutable mode would not see: that is refused (CacheAccessError)
    rather than served stale."""
    if not url.startswith("sqlite"):
        return url
    path = make_url(url).database
    if not path or path == ":memory:":
        raise CacheAccessError("a read-only store needs a SQLite file, not an in-memory database")
    if _cannot_write_beside(path):
        wal = Path(path + "-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise CacheAccessError(
                f"cache file {path} is on a read-only file system or directory and its write-ahead log {wal} "
                "holds commits not in the file: checkpoint it where it is writable "
                "(sqlite3 FILE 'PRAGMA wal_checkpoint(TRUNCATE)') before serving it read-only")
        return f"sqlite+pysqlite:///file:{path}?mode=ro&immutable=1&uri=true"
    return f"sqlite+pysqlite:///file:{path}?mode=ro&uri=true"


def _cannot_write_beside(path: str) -> bool:
    """Whether SQLite could not create or write the -shm file beside ``path`` (os.access
    honours read-only mounts, also for root)."""
    p = Path(path).expanduser()
    parent = p.parent if str(p.parent) else Path(".")
    shm = Path(str(p) + "-shm")
    if shm.exists():
        return not os.access(shm, os.R_OK | os.W_OK)
    return not os.access(parent, os.W_OK | os.X_OK)


def _access_error(url: str, exc: BaseException) -> CacheAccessError | None:
    """The CacheAccessError a driver error means, or None when it is not about access.

    Only the failures a user can act on are named (what the driver calls them differs per
    backend); anything else (a lock timeout, a constraint) keeps its own exception."""
    msg = str(exc).strip()
    first = msg.splitlines()[0] if msg else type(exc).__name__
    where = display_url(url)
    low = msg.lower()
    if "readonly database" in low:
        return CacheAccessError(f"cache {where} is read-only: this command writes to it ({first})")
    if "database or disk is full" in low or "no space left" in low or getattr(exc, "sqlstate", None) == "53100":
        return CacheAccessError(f"no space left on the device holding cache {where} ({first}); the store keeps "
                                "only whole transactions: free space and run the command again")
    if "disk i/o error" in low:
        return CacheAccessError(f"I/O error on cache {where} ({first}): is its disk full or its file system read-only?")
    if "file is not a database" in low or "file is encrypted or is not a database" in low:
        return CacheAccessError(f"{where} is not a cache: the file is not an SQLite database ({first})")
    if "unable to open database file" in low:
        return CacheAccessError(f"cannot open cache {where} ({first}): check that the file and its directory "
                                "exist and are writable")
    return None


def _pg_access_error(url: str, exc: BaseException) -> CacheAccessError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return CacheAccessError(f"cannot reach the PostgreSQL server of cache {display_url(url)}: {first}")


def _translate_errors(engine: Engine, url: str) -> None:
    """Driver errors about access (cannot open, read-only, disk full, server unreachable)
    become CacheAccessError wherever they happen: at open, or mid-build on a put."""

    @event.listens_for(engine, "handle_error")
    def _on_error(ctx):
        if ctx.is_pre_ping:  # a stale pooled connection: SQLAlchemy reconnects by itself
            return
        exc = ctx.original_exception
        if engine.dialect.name == "postgresql" and ctx.connection is None and ctx.statement is None:
            # Raised while connecting: refused, timed out, unknown host, bad password.
            raise _pg_access_error(url, exc)
        err = _access_error(url, exc)
        if err is not None:
            raise err


def make_engine(url: str, *, readonly: bool = False) -> Engine:
    if url.startswith("sqlite") and not readonly:
        check_sqlite_path(url, writable=True)
    try:
        # PostgreSQL: fail fast on an unreachable server (libpq's default is to wait forever).
        timeout = {} if "connect_timeout" in make_url(url).query else {"connect_timeout": PG_CONNECT_TIMEOUT_S}
        if url.startswith("sqlite"):
            engine = create_engine(readonly_url(url) if readonly else url)
            _sqlite_hooks(engine, readonly)
        elif readonly:
            # Every transaction read-only at the server too: a write that slips past the
            # store's own check fails there instead of taking a lock builders wait on.
            # Appended to the URL's own options (a search_path, ...), which connect_args replace.
            opts = make_url(url).query.get("options", "")
            opts = " ".join(opts) if isinstance(opts, tuple) else opts
            engine = create_engine(url, pool_pre_ping=True, connect_args={
                "options": f"{opts} -c default_transaction_read_only=on".strip(), **timeout})
        else:
            engine = create_engine(url, pool_pre_ping=True, connect_args=timeout)
    except (ArgumentError, NoSuchModuleError) as e:
        raise CacheAccessError(f"cannot open cache {_safe(url)}: {e}") from None
    _translate_errors(engine, url)
    return engine


@contextlib.contextmanager
def write_tx(engine: Engine, *, exclusive: bool = False) -> Iterator[Connection]:
    """One write transaction. SQLite: BEGIN IMMEDIATE. PostgreSQL: an advisory lock,
    shared for puts (they run concurrently) and exclusive for GC/eviction/import, so a GC
    never deletes a blob that a concurrent put has just decided to reuse."""
    with engine.connect() as conn:
        conn = conn.execution_options(rocke_write=True)
        with conn.begin():
            if conn.dialect.name == "postgresql":
                fn = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
                conn.execute(text(f"SELECT {fn}(:k)"), {"k": PG_LOCK_WRITE})
            yield conn


@contextlib.contextmanager
def read_tx(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        with conn.begin():
            yield conn


@dataclass(frozen=True)
class Handle:
    """What every part of one store shares: its URL, its engine, and whether it may write."""

    url: str
    engine: Engine
    readonly: bool = False

    def __str__(self) -> str:
        return f"Store({display_url(self.url)!r})"

    def writable(self, what: str) -> None:
        """ReadOnlyError naming ``what`` when the store is open read-only."""
        if self.readonly:
            raise ReadOnlyError(f"{self} is open read-only: {what} refused (open it without readonly=True)")


_INSERT_IGNORE: dict[tuple[str, str], Any] = {}


def insert_ignore(conn: Connection, table: Table):
    """INSERT ... ON CONFLICT (primary key) DO NOTHING, built once per dialect and table."""
    k = (conn.dialect.name, table.name)
    if k not in _INSERT_IGNORE:
        ins = (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(table)
        _INSERT_IGNORE[k] = ins.on_conflict_do_nothing(index_elements=[c.name for c in table.primary_key])
    return _INSERT_IGNORE[k]


# How rows are read where they are unpacked: SQLAlchemy 2.1's Row[*tuple[Any, ...]] unpacks as
# ``object`` under mypy (its TypeVarTuple base), and Result.tuples(), 2.0's typed view, is deprecated
# in 2.1. A Row is a tuple, so these annotations hold without a cast.
Rows = Sequence[tuple[Any, ...]]  # Result.all()
RowIter = Iterable[tuple[Any, ...]]  # a Result, iterated


def dbapi(conn: Connection) -> DBAPIConnection:
    """The driver's own connection under ``conn`` (sqlite3 / psycopg), for the hot paths that
    skip SQLAlchemy's rendering; a connection that was invalidated or closed has none."""
    raw = conn.connection.dbapi_connection
    if raw is None:
        raise CacheAccessError("the store's connection was closed or invalidated; open the store again")
    return raw


def chunks(seq: Sequence[str], n: int = LOOKUP_CHUNK) -> Iterator[Sequence[str]]:
    """``seq`` in slices of at most ``n`` (one bounded IN list each)."""
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _current_revision(conn: Connection) -> tuple[str | None, bool]:
    """(alembic revision or None, whether any cache table exists)."""
    insp = inspect(conn)
    has_version = insp.has_table("alembic_version")
    has_tables = any(insp.has_table(t) for t in ("artifacts", "blobs", "rocke_meta"))
    if not has_version:
        return None, has_tables
    rows: Sequence[str] = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise SchemaVersionError(f"cache has several Alembic heads {rows}; this rocke-aot knows {models.REVISIONS}")
    return (rows[0] if rows else None), has_tables


def _check_head(conn: Connection, url: str) -> None:
    stored = conn.execute(select(models.meta.c.value).where(models.meta.c.name == "schema_version")).scalar()
    if stored != str(models.SCHEMA_VERSION):
        raise SchemaVersionError(
            f"cache {display_url(url)} records schema version {stored!r}, but its Alembic revision "
            f"{models.HEAD_REVISION} means version {models.SCHEMA_VERSION}; the store was altered by hand"
        )


def _classify(rev: str | None, has_tables: bool, url: str) -> str:
    """'ok' (at head), 'upgrade' (empty or older known revision); raises otherwise."""
    if rev == models.HEAD_REVISION:
        return "ok"
    if rev is None:
        if has_tables:
            raise SchemaVersionError(
                f"cache {display_url(url)} has tables but no Alembic revision stamp; it was not "
                f"created by rocke-aot (or was damaged). Refusing to use it."
            )
        return "upgrade"
    if rev in models.REVISIONS:
        return "upgrade"
    raise SchemaVersionError(
        f"cache {display_url(url)} is at schema revision {rev!r}, which this rocke-aot does not know "
        f"(it knows {', '.join(models.REVISIONS)}; head {models.HEAD_REVISION}, schema version "
        f"{models.SCHEMA_VERSION}). A newer rocke-aot wrote it: upgrade rocke-aot, or use another cache."
    )


# Alembic's migration context is a module-level proxy (alembic.context): two threads of one
# process migrating two stores at once would run each other's DDL on the wrong connection
# ("table rocke_meta already exists", KeyError 'script'). One migration per process at a time.
_ALEMBIC_LOCK = threading.Lock()


def _alembic_upgrade(conn: Connection) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    cfg.attributes["connection"] = conn
    with _ALEMBIC_LOCK:
        command.upgrade(cfg, "head")


def ensure_schema(engine: Engine, url: str, *, create: bool = True) -> None:
    """Bring the store to the head revision (creating it if empty) or refuse it."""
    with read_tx(engine) as conn:
        rev, has_tables = _current_revision(conn)
        if _classify(rev, has_tables, url) == "ok":
            _check_head(conn, url)
            return
    if not create:
        raise SchemaVersionError(f"cache {display_url(url)} is at revision {rev!r}, not {models.HEAD_REVISION}")
    with write_tx(engine, exclusive=True) as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": PG_LOCK_SCHEMA})
        # Re-read under the lock: another process may have migrated meanwhile.
        rev, has_tables = _current_revision(conn)
        if _classify(rev, has_tables, url) == "upgrade":
            _alembic_upgrade(conn)
        _check_head(conn, url)
