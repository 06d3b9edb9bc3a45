"""The selection read model: the stored artifacts of a family as Candidates, read once.

    Store.candidates(family, device, lanes) ──> SelectionView.candidates(family, Target, lanes)
        │  candidates_query(dialect, family, target, lanes, compatible_only, current_only)
        │      -> ONE raw SQL over artifacts (no blob, no join; built once per shape):
        │         the family, status 'ok', the device's compatible target IDs (or all of its
        │         processor's: selection then rejects them, naming why), the lanes, served
        ▼
    rows ─> Candidate (rocke_aot/candidates.py: key, blob, spec, arch, lane, generation,
            current = the row's served flag, Resources from the stored "code_object" metadata
            and the launch block's work-group size; the Triton version its toolchain identity
            names, candidates.triton_version_of); one row is parsed once per store (a row is
            immutable per (key, blob) but for its served flag); a malformed row is skipped,
            logged and counted (malformed_rows), never failing the family for everyone
        ▼
    tuple[Candidate, ...] ──> variants/selection.py ranks them (service/selection.py composes)

SQLite: the tuple is kept per query shape and served again while PRAGMA data_version and
total_changes() show no commit since (any writer, any process); otherwise every kept tuple is
dropped first. PostgreSQL has no cheap change stamp: it is asked every time.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection

from rocke_aot.cache import db
from rocke_aot.candidates import Candidate, candidate_of
from rocke_aot.errors import RockeError, SpecError
from rocke_aot.targets import Target, compatible_ids, processor_ids

log = logging.getLogger("rocke_aot.cache")


@functools.lru_cache(maxsize=256)
def _sql(dialect: str, n_arch: int, n_lanes: int | None, current_only: bool) -> str:
    # Raw DBAPI SQL, built once per shape: selection is a hot path of the service, and
    # SQLAlchemy's statement compilation costs more than SQLite running the query.
    p = "?" if dialect == "sqlite" else "%s"
    sql = ("SELECT a.key, a.blob_sha256, a.arch, a.lane, a.profile, a.spec_json, a.generation, a.metadata_json, "
           "a.built_at, a.served, a.toolchain_json FROM artifacts a "
           f"WHERE a.family = {p} AND a.status = 'ok' AND a.arch IN ({','.join([p] * n_arch)})")
    if n_lanes is not None:
        sql += f" AND a.lane IN ({','.join([p] * n_lanes)})"
    if current_only:
        sql += " AND a.served = 1"
    return sql  # no ORDER BY: rank() orders by key itself (a sort in SQL would cost a temp B-tree)


def candidates_query(dialect: str, family: str, target: Target, lanes: Iterable[str] | None = None, *,
                     compatible_only: bool = True, current_only: bool = False) -> tuple[str, list[Any]]:
    """The SQL and parameters SelectionView.candidates runs for these arguments (the bench's
    bare-SQL baseline runs exactly this: bench/bench_select.py)."""
    ids = compatible_ids(target) if compatible_only else processor_ids(target)
    lane_list = None if lanes is None else sorted(set(lanes))
    return (_sql(dialect, len(ids), None if lane_list is None else len(lane_list), current_only),
            [family, *ids, *(lane_list or ())])


def _candidate(key, sha, family, arch, lane, profile, gen, is_current, spec_json, meta_json, built_at,
               toolchain_json, info) -> Candidate:
    return candidate_of(key, sha, family, json.loads(spec_json), arch, lane, profile, gen, is_current,
                        json.loads(meta_json), datetime.fromtimestamp(built_at, tz=timezone.utc),
                        json.loads(toolchain_json), info)


class SelectionView:
    """The selection read model of one store (module doc)."""

    def __init__(self, handle: db.Handle):
        self.handle = handle
        self._memo: dict[str, Candidate] = {}
        # Parsed candidate lists per query shape, valid while the database has not changed
        # (SQLite only, see _unchanged_since_last_look); the lock keeps check + fill atomic.
        self._lists: dict[tuple, tuple[Candidate, ...]] = {}
        self._seen_conns: dict[Any, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self.malformed_rows = 0  # rows candidates() skipped (logged)

    def drop_lists(self) -> None:
        """Drop the kept candidate lists, as a commit by any writer does (parsed rows stay)."""
        with self._lock:
            self._lists.clear()

    def forget(self) -> None:
        """Drop every parsed row and kept list (after rows were deleted: gc, gc_generations),
        and the next candidates() reads the database again."""
        with self._lock:
            self._memo.clear()
            self._lists.clear()

    def candidates(self, family: str, target: Target, lanes: Iterable[str] | None = None, *,
                   compatible_only: bool = True, current_only: bool = False) -> tuple[Candidate, ...]:
        if not isinstance(family, str):
            raise SpecError(f"family must be a string, got {family!r}")
        lane_list = None if lanes is None else sorted(set(lanes))
        if lane_list is not None and not all(isinstance(x, str) for x in lane_list):
            raise SpecError(f"lanes must be lane names, got {lane_list!r}")
        if lane_list == []:
            return ()
        engine = self.handle.engine
        dialect = engine.dialect.name
        sql, params = candidates_query(dialect, family, target, lane_list, compatible_only=compatible_only,
                                       current_only=current_only)
        if dialect != "sqlite":  # no cheap change stamp on PostgreSQL: query every time
            with db.read_tx(engine) as conn:
                return tuple(self._rows(conn, sql, params, family, target))
        shape = (sql, tuple(params))
        with self._lock, db.read_tx(engine) as conn:
            if not self._unchanged_since_last_look(conn):
                self._lists.clear()
            got = self._lists.get(shape)
            if got is None:
                if len(self._lists) > 4096:
                    self._lists.clear()
                got = self._lists[shape] = tuple(self._rows(conn, sql, params, family, target))
            return got

    def _unchanged_since_last_look(self, conn: Connection) -> bool:
        """Whether no transaction has committed to the database since this connection last looked.

        SQLite's ``PRAGMA data_version`` moves when another connection (any process) commits,
        ``total_changes()`` when this one does; a connection seen for the first time proves
        nothing. If anything committed after a list was filled, the first look after that commit,
        on whichever pooled connection, differs from that connection's previous look (taken before
        the commit), so the lists are dropped before any is served: a build that moves a ref, a
        put, a publish, gc, eviction, an import all refill them. Connections are held (not their
        ids: a new connection could reuse a dead one's id); the pool keeps few, the dict is bounded.
        """
        raw = db.dbapi(conn)
        cur = raw.cursor()
        try:
            cur.execute("SELECT data_version, total_changes() FROM pragma_data_version")
            row = cur.fetchone()
            assert row is not None, "pragma_data_version is a table-valued function of one row"
            stamp = tuple(row)
        finally:
            cur.close()
        seen = self._seen_conns
        same = seen.get(raw) == stamp
        if not same:
            if len(seen) > 64:
                seen.clear()
            seen[raw] = stamp
        return same

    def _rows(self, conn: Connection, sql: str, params: list, family: str, target: Target) -> list[Candidate]:
        memo = self._memo
        if len(memo) > 200_000:  # rows are small, but a long-lived service must not grow without bound
            memo.clear()
        info = target.info
        out = []
        cur = db.dbapi(conn).cursor()
        try:
            cur.execute(sql, params)
            rows = cur.fetchall()
        finally:
            cur.close()
        for key, sha, arch, lane, profile, spec_json, gen, meta_json, built_at, served, tc_json in rows:
            is_current = bool(served)
            c = memo.get(key)
            # A key's row is immutable except for a forced rebuild (new blob) and its served flag.
            if c is None or c.blob_sha256 != sha or c.current is not is_current or c.family != family:
                try:
                    c = _candidate(key, sha, family, arch, lane, profile, gen, is_current, spec_json, meta_json,
                                   built_at, tc_json, info)
                except (RockeError, ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
                    # One malformed row (written before the record schema, or by hand) must not
                    # fail the family for everyone: it is skipped, logged and counted.
                    self.malformed_rows += 1
                    log.error("store %s: artifact %s skipped by select, its row is malformed (%s: %s)",
                              self.handle, key, type(e).__name__, e)
                    continue
                memo[key] = c
            out.append(c)
        return out
