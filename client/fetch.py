"""Fetch kernels for a GPU host: from its local store, else from its sources in order.

    Fetcher(sources=[mirror..., service], store=LocalStore(...))
    get(key)
      local store has it? ──yes──> LocalStore.get (sha256 + size checked on the read)
          │ no                     offline (ROCKE_AOT_OFFLINE=1) ──> OfflineMiss
      for each source, in order:
          the record of key  (the service's /meta answer; its inputs must hash to key)
          source.blob(sha256, size)  (bounded; size and sha256 checked)
          ──> LocalStore.put ──> the next get answers locally
      a source that fails (down, 404, wrong bytes) hands over to the next; when every one
      failed, the error of the first that answered wrongly is raised (else the first error)

Nothing is stored until every check passed. This module imports neither FastAPI nor
SQLAlchemy nor the builder: a GPU host installs only the client (pyproject's base
dependencies) and starts in about the time of the interpreter (bench/bench_client_import.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rocke_aot.cache.keys import check_key
from rocke_aot import settings
from rocke_aot.client.local import Kernel, LocalStore
from rocke_aot.client.sources import MirrorSource, ServiceSource, Source
from rocke_aot.errors import IntegrityError, NotFoundError, RockeError, SpecError

ENV_OFFLINE = settings.OFFLINE


class OfflineMiss(NotFoundError):
    """ROCKE_AOT_OFFLINE=1 and the local store does not hold what was asked for."""


def env_offline() -> bool:
    return settings.flag(ENV_OFFLINE)


def sources_from(server: str | None = None, mirrors: Iterable[str] = ()) -> list[Source]:
    """Mirrors first (in the order given), then the service: the order a host tries them."""
    out: list[Source] = [MirrorSource(m) for m in mirrors]
    if server:
        out.append(ServiceSource(server))
    return out


class Fetcher:
    """``Fetcher(sources, store=None, offline=None)``; ``store`` None opens the default
    LocalStore ($ROCKE_AOT_CLIENT_HOME); ``offline`` None reads ROCKE_AOT_OFFLINE."""

    def __init__(self, sources: Sequence[Source], store: LocalStore | None = None, *, offline: bool | None = None):
        self.offline = env_offline() if offline is None else bool(offline)
        self.sources = list(sources)
        if not self.sources and not self.offline:
            raise SpecError("a Fetcher needs at least one source (a mirror or the service) unless it is offline")
        self.store = store if store is not None else LocalStore()

    def close(self) -> None:
        for s in self.sources:
            s.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def get(self, key: str) -> Kernel:
        """The kernel under ``key`` with verified bytes, local first."""
        check_key(key)
        if self.store.has(key):
            return self.store.get(key)
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1 and kernel {key} is not in the local store {self.store.root}")
        return self._first_good(key, self._from_source)

    def _first_good(self, key: str, fetch) -> Kernel:
        errors: list[tuple[Source, RockeError]] = []
        for src in self.sources:
            try:
                kernel = fetch(src, key)
            except RockeError as e:
                errors.append((src, e))
                continue
            return self.store.put(kernel)
        wrong = [(s, e) for s, e in errors if not isinstance(e, NotFoundError)]
        src, first = (wrong or errors)[0]
        if len(errors) > 1:
            tried = "; ".join(f"{s.url}: {type(e).__name__}: {e}" for s, e in errors)
            raise type(first)(f"kernel {key}: no source gave it ({tried})") from first
        raise first

    @staticmethod
    def _from_source(src: Source, key: str) -> Kernel:
        if not isinstance(src, ServiceSource):
            raise NotFoundError(f"{src.url} serves no unsigned records (a mirror is read through its manifest)")
        rec = src.record(key)
        k = Kernel.from_record(rec)  # the inputs must hash to the key
        if k.key != key:
            raise IntegrityError(f"{src.url} answered the record of {k.key} for {key}")
        raw = src.blob(k.sha256, k.size)
        return Kernel(**{**k.__dict__, "origin": {"source": src.url, "signed": False}, "code_object": raw})
