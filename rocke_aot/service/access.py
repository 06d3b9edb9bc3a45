"""What the service reads from a store: public Store methods only, behind a few thin functions.

    open_store(url)           Store.open(url, readonly=True) when the store supports it,
                              else Store.open(url) (a store at head is only read)
    Frames.load(store, sha)   Store.blob_frame(sha): the raw bytes verified (decompress, size,
                              sha256) and the stored plain-zstd frame -> Frame (kept in a
                              byte-bounded LRU with an age limit, so the hot path reads neither
                              the database nor zstd)
    Frames.exists(store, sha) Store.has_blob(sha) unless the LRU holds it
    kernel_row(store, key)    Store.record(key): the artifact row (no blob bytes, no last-read write)
    list_page(store, ...)     Store.find(served_only=True, after=cursor, limit=limit + 1): one
                              keyset page ordered by key, and the next page's cursor
    select(store, ...)        rocke_aot.service.selection.select (the one helper), its
                              results as plain dicts for the response models
    StoreWatch(store).check() /healthz: the SQLite file at the store's path is still the one
                              opened (same device and inode), and the store answers a query
                              (Store.find(limit=1)); CacheAccessError (503) otherwise

Why not Store.get(): it touches ``last_read_at`` (a write) and hands back only raw bytes;
the service needs the stored zstd frame too (served as is to ``Accept-Encoding: zstd``).

Frame integrity: the store keeps no digest of the compressed frame, so the frame is verified
the one way the store already trusts: Store.blob_frame decompresses it, bounded by the
recorded size, and checks the content sha256 before handing it out. A frame is only ever
served after that check succeeded in this worker; the client checks the content sha256 again
after decompressing. Error messages name the key or blob, never the store's URL.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import make_url

from rocke_aot.cache.records import Artifact
from rocke_aot.cache.store import Store
from rocke_aot.errors import CacheAccessError, NotFoundError
from rocke_aot.service.selection import rejection_row


def open_store(url: str, *, readonly: bool = True) -> Store:
    """The store the service reads (read-only by default: a replica needs no write access)."""
    return Store.open(url, readonly=readonly)


def _sqlite_file(url: str) -> str | None:
    if not url.startswith("sqlite"):
        return None
    path = make_url(url).database or ""
    return path.removeprefix("file:").split("?", 1)[0] or None


class StoreWatch:
    """What /healthz checks: the store this worker serves is still there and answering.

    A SQLite file deleted or replaced under a running server keeps answering from the open
    file descriptors (or fails only on the next new connection), so the path's (device,
    inode) is compared with the one seen at start; then one query must answer."""

    def __init__(self, store: Store):
        self.store = store
        self.path = _sqlite_file(store.url)
        self.identity = self._stat(self.path) if self.path else None
        self._checked_at = 0.0
        self._gone: CacheAccessError | None = None

    @staticmethod
    def _stat(path: str) -> tuple[int, int]:
        try:
            st = os.stat(path)
        except OSError as e:
            raise CacheAccessError(f"the store file {path} is gone ({e.strerror})") from None
        return st.st_dev, st.st_ino

    def present(self, every_s: float = 0.25) -> None:
        """CacheAccessError unless the store file is still the one opened (a stat at most every
        ``every_s`` seconds, the answer kept between): every read asks it, so a deleted or
        replaced store is refused, not served from the open descriptor."""
        if self.path is None:
            return
        now = time.monotonic()
        if now - self._checked_at < every_s:
            if self._gone is not None:
                raise self._gone
            return
        self._checked_at = now
        try:
            if self._stat(self.path) != self.identity:
                raise CacheAccessError(f"the store file {self.path} was replaced after this server opened it; "
                                       "restart the server to serve the new one")
        except CacheAccessError as e:
            self._gone = e
            raise
        self._gone = None

    def check(self) -> None:
        if self.path is not None and self._stat(self.path) != self.identity:
            raise CacheAccessError(f"the store file {self.path} was replaced after this server opened it; "
                                   "restart the server to serve the new one")
        self.store.find(limit=1)


@dataclass(frozen=True)
class Frame:
    """A verified blob: its raw bytes and, for plain zstd, the stored frame as is."""

    sha256: str
    raw: bytes
    zstd_frame: bytes | None  # None for dictionary frames: a client could not decode them alone

    @property
    def cost(self) -> int:
        return len(self.raw) + (len(self.zstd_frame) if self.zstd_frame else 0)


class Frames:
    """Per-worker LRU of verified blobs. Blobs are immutable by sha256, so an entry never goes
    stale; the age limit only bounds how long a blob deleted from the store (gc) can still be
    served by a worker that verified it earlier."""

    def __init__(self, max_bytes: int = 64 << 20, max_age: float = 300.0):
        self.max_bytes = max_bytes
        self.max_age = max_age
        self._lru: OrderedDict[str, tuple[float, Frame]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def cached(self, sha: str) -> Frame | None:
        with self._lock:
            hit = self._lru.get(sha)
            if hit is None:
                return None
            if time.monotonic() - hit[0] > self.max_age:
                self._drop(sha)
                return None
            self._lru.move_to_end(sha)
            return hit[1]

    def _drop(self, sha: str) -> None:
        _, f = self._lru.pop(sha)
        self._bytes -= f.cost

    def _keep(self, frame: Frame) -> None:
        if frame.cost > self.max_bytes:
            return
        with self._lock:
            if frame.sha256 in self._lru:
                self._drop(frame.sha256)
            self._lru[frame.sha256] = (time.monotonic(), frame)
            self._bytes += frame.cost
            while self._bytes > self.max_bytes:
                self._drop(next(iter(self._lru)))

    def load(self, store: Store, sha: str) -> Frame:
        """The verified blob ``sha``: NotFoundError, or IntegrityError (never the bytes)."""
        hit = self.cached(sha)
        if hit is not None:
            return hit
        try:
            raw, zstd_frame = store.blob_frame(sha)
        except NotFoundError:
            raise NotFoundError(f"no blob {sha} in the store") from None
        frame = Frame(sha, raw, zstd_frame)
        self._keep(frame)
        return frame

    def exists(self, store: Store, sha: str) -> bool:
        if self.cached(sha) is not None:
            return True
        return store.has_blob(sha)


def kernel_row(store: Store, key: str) -> Artifact:
    """The artifact under ``key`` (metadata only); NotFoundError for a miss or a failure row.
    The store's messages name its URL; a client is told only about the key."""
    try:
        return store.record(key)
    except NotFoundError as e:
        if "build failure" in str(e):
            raise NotFoundError(f"{key} is a cached build failure, not an artifact") from None
        raise NotFoundError(f"no artifact {key} in the store") from None


def list_page(store: Store, *, arch: str | None, lane: str | None, family: str | None,
              cursor: str | None, limit: int) -> tuple[list[Artifact], str | None]:
    """One page of served artifacts ordered by key, and the cursor of the next page (None at
    the end); the filters are already validated."""
    rows = store.find(arch=arch, lane=lane, family=family, served_only=True, after=cursor, limit=limit + 1)
    items = [r for r in rows[:limit] if isinstance(r, Artifact)]  # find's status "ok": Artifacts only
    return items, (items[-1].key if len(rows) > limit else None)


def select(store: Store, target, family: str, problem, *, lanes=None, min_efficiency=None, limit=None,
           explain: bool = True, max_rejected: int | None = None, model: str = "auto",
           measured: str = "exact", triton_version: str | None = None) -> dict[str, Any]:
    """The select answer as plain data (service/schemas.py SelectResponse less the URLs): the
    accepted best first with the basis of each rank, the first ``max_rejected`` rejected, how many
    were rejected, the model that ordered them and why none was used, and, when nothing is
    baked for the problem, what to build (no_candidate), the Triton version asked and the ones
    there are (every accepted row labelled with its own); from the one helper."""
    from rocke_aot.service.selection import select as shared

    sel = shared(store, target, family, problem, lanes=lanes, min_efficiency=min_efficiency, limit=limit,
                 explain=explain, model=model, measured=measured, triton_version=triton_version)
    shown = sel.rejected if max_rejected is None else sel.rejected[:max_rejected]
    return {"accepted": [_choice(c) for c in sel.accepted], "rejected": [rejection_row(r) for r in shown],
            "rejected_count": len(sel.rejected), "model": sel.model, "note": sel.note,
            "no_candidate": None if sel.no_candidate is None else sel.no_candidate.as_dict(),
            "triton_version": sel.triton_version, "triton_versions": list(sel.triton_versions)}


def _choice(c) -> dict[str, Any]:
    cand = c.candidate  # issue 11: Choice(candidate, spec, efficiency)
    return {"key": cand.key, "sha256": cand.blob_sha256, "family": cand.family, "arch": cand.arch, "lane": cand.lane.name,
            "spec": dict(cand.spec), "efficiency": c.efficiency.as_dict(), **c.basis_dict(),
            "resources": cand.resources.as_dict(), "generation": cand.generation,
            "triton_version": cand.triton_version}
