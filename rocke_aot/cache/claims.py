"""Build claims: a lease on a key while one builder compiles it (the store's part behind ``claims``).

    claim(keys, holder, lease_s) ── one write transaction:
        a key with no claim, or a claim whose lease ended (its holder died or stalled) ──> ours
        a key another holder still leases ───────────────────────────────────────────────> not ours
    renew(keys, holder, lease_s) ── push our leases' ends forward (a heartbeat while compiling)
    release(keys, holder)        ── drop our claims (after the result is stored, or on failure)

A lease is wall-clock seconds on the machine that claims (``expires_at``); builders on several
machines sharing one PostgreSQL need clocks within a fraction of the lease (NTP is enough for
leases of tens of seconds). A claimant killed with SIGKILL renews nothing, so its keys are
free again ``lease_s`` seconds later at the latest -- or at once where the claimant is seen
to be gone (below). Writes run in the store's write transaction (SQLite BEGIN IMMEDIATE,
PostgreSQL a row lock), so two builders never both win.

A holder names where its process runs: ``host:pidns:pid:token`` (new_holder). A claim whose
holder is on this host, in this PID namespace (the /proc/self/ns/pid link, so a container
sharing the host name but not its processes never matches), with a PID that no longer exists,
is as good as expired: a build rerun after a SIGKILL, an OOM kill or a full disk takes its keys
over at once instead of waiting out the lease. PID reuse only delays that (a live PID is
trusted). Any other holder -- another host, an older format -- is judged by its lease alone.
Taking a live claim by mistake would cost a duplicate compile, never a wrong artifact: puts
are idempotent by key.
"""

from __future__ import annotations

import os
import secrets

from sqlalchemy import Connection, and_, delete, or_, select, update

from rocke_aot.cache import db
from rocke_aot.cache.models import claims as K


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:  # no procfs: a namespace no holder can match, so only leases decide
        return "unknown"


def new_holder(host: str) -> str:
    """A holder name for this process on ``host`` (module doc)."""
    return f"{host}:{_pid_namespace()}:{os.getpid()}:{secrets.token_hex(4)}"


def gone(holder: str, host: str) -> bool:
    """Whether ``holder`` is a process of this host and PID namespace that no longer exists."""
    parts = holder.rsplit(":", 3)
    if len(parts) != 4 or parts[0] != host or parts[1] != _pid_namespace() or not parts[2].isdigit():
        return False
    pid = int(parts[2])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, another user's
        return False
    return False


def claim(conn: Connection, keys: list[str], holder: str, now: float, lease_s: float, chunk: int,
          host: str | None = None) -> list[str]:
    """The subset of ``keys`` this holder now leases (its own live claims included); with
    ``host``, claims of processes gone from it count as ended (module doc)."""
    if not keys:
        return []
    held: dict[str, tuple[str, float]] = {}
    for i in range(0, len(keys), chunk):
        part = keys[i : i + chunk]
        stmt = select(K.c.key, K.c.holder, K.c.expires_at).where(K.c.key.in_(part))
        if conn.dialect.name == "postgresql":
            stmt = stmt.with_for_update()
        rows: db.RowIter = conn.execute(stmt)
        for key, who, until in rows:
            held[key] = (who, until)
    mine, fresh, stale = [], [], []
    for key in keys:
        cur = held.get(key)
        if cur is None:
            fresh.append(key)
        elif cur[0] == holder or cur[1] <= now or (host is not None and gone(cur[0], host)):
            stale.append(key)
        else:
            continue
        mine.append(key)
    until = now + lease_s
    for i in range(0, len(stale), chunk):
        conn.execute(update(K).where(K.c.key.in_(stale[i : i + chunk])).values(
            holder=holder, claimed_at=now, expires_at=until))
    if fresh:
        conn.execute(K.insert(), [{"key": k, "holder": holder, "claimed_at": now, "expires_at": until}
                                  for k in fresh])
    return mine


def renew(conn: Connection, keys: list[str], holder: str, now: float, lease_s: float, chunk: int) -> int:
    n = 0
    for i in range(0, len(keys), chunk):
        n += conn.execute(update(K).where(and_(K.c.key.in_(keys[i : i + chunk]), K.c.holder == holder))
                          .values(expires_at=now + lease_s)).rowcount
    return n


def release(conn: Connection, keys: list[str], holder: str, chunk: int) -> int:
    n = 0
    for i in range(0, len(keys), chunk):
        n += conn.execute(delete(K).where(and_(K.c.key.in_(keys[i : i + chunk]), K.c.holder == holder))).rowcount
    return n


def held_by_others(conn: Connection, keys: list[str], holder: str, now: float, chunk: int,
                   host: str | None = None) -> set[str]:
    """Which of ``keys`` another holder leases right now (with ``host``: and is not gone from it)."""
    out: set[str] = set()
    for i in range(0, len(keys), chunk):
        leased: db.RowIter = conn.execute(select(K.c.key, K.c.holder).where(and_(
            K.c.key.in_(keys[i : i + chunk]), K.c.holder != holder, K.c.expires_at > now)))
        for key, who in leased:
            if host is None or not gone(who, host):
                out.add(key)
    return out


def expired(conn: Connection, now: float) -> int:
    """Delete every lease that ended (housekeeping; claim() takes them over anyway)."""
    return conn.execute(delete(K).where(or_(K.c.expires_at <= now))).rowcount
