"""Where rocke_aot.torch's kernels come from: the ONE module that couples it to the client.

    open_source(server=, mirrors=, local=, root_key=, insecure=, cache=) -> Source (runner/bench.py)
        a server (argument, else $ROCKE_AOT_SERVER):
            ServerSource(Client(server), Fetcher(sources_from(server, mirrors), LocalStore(local), ...))
            the ranking from the service's select (measured times first, the model otherwise),
            every kernel through the verifying Fetcher: the host's local store first, then the
            installed device wheels, the mirrors ($ROCKE_AOT_MIRRORS) and the service; kept in the
            local store; signed metadata checked where a root key is pinned ($ROCKE_AOT_ROOT_KEY)
        else a cache of this host's own (argument, else $ROCKE_AOT_CACHE, else the default store):
            StoreSource(Store.open(cache, readonly=True)): a builder host, select over its store

Everything rocke_aot.torch needs of a Source is ``ranked(target, family, problem, lanes, limit=1)`` and
``load(key) -> (image, metadata)`` (runner/bench.py); ``close()`` here ends what was opened. When
the service client moves (rocke_aot/client/service.py), only this module changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rocke_aot import settings


class OpenedSource:
    """A runner Source plus what must be closed with it."""

    def __init__(self, source: Any, closers: Sequence[Any], where: str):
        self.source, self._closers, self.where = source, list(closers), where

    def ranked(self, target, family, problem, lanes, triton_version=None, limit=None):
        return self.source.ranked(target, family, problem, lanes, triton_version, limit)

    def load(self, key):
        return self.source.load(key)

    def close(self) -> None:
        for c in reversed(self._closers):
            c.close()
        self._closers.clear()

    def __repr__(self) -> str:
        return f"OpenedSource({self.where})"


def _mirrors(mirrors: Sequence[str] | None) -> list[str]:
    if mirrors is not None:
        return list(mirrors)
    raw = settings.raw(settings.MIRRORS) or ""
    return [m for m in raw.replace(",", " ").split() if m]


def open_source(*, server: str | None = None, mirrors: Sequence[str] | None = None, local: str | None = None,
                root_key: str | None = None, insecure: bool | None = None, cache: str | None = None) -> OpenedSource:
    """The Source a process's ops rank and load from (module doc)."""
    from rocke_aot.runner.bench import ServerSource, StoreSource

    server = server or (None if cache is not None else settings.raw(settings.SERVER))
    if server:
        from rocke_aot.client import Fetcher, LocalStore, sources_from
        from rocke_aot.service.client import Client

        fetcher = Fetcher(sources_from(server, _mirrors(mirrors)), LocalStore(local), root_key=root_key,
                          insecure=insecure)
        client = Client(server)  # ranks only: it opens no store
        return OpenedSource(ServerSource(client, fetcher), [fetcher, client], f"server {server}")
    from rocke_aot.cache.store import Store

    store = Store.open(cache, readonly=True, create=False)
    return OpenedSource(StoreSource(store), [store], f"cache {store.url if hasattr(store, 'url') else cache}")
