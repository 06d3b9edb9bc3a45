"""What every route of one app shares (``app.state.service``), and the dependencies that hand
it out: the store (checked still present on every read), the metrics, the per-worker cache of
verified blobs, the select slots and the /healthz thread."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request

from rocke_aot.cache.store import Store
from rocke_aot.service import access
from rocke_aot.service.metrics import Metrics
from rocke_aot.service.schemas import SHA_PATTERN

Sha = Annotated[str, Path(pattern=SHA_PATTERN, description="sha256 of the raw code object, 64 lowercase hex")]
Key = Annotated[str, Path(pattern=SHA_PATTERN, description="Artifact key, 64 lowercase hex")]


@dataclass
class ServiceState:
    store: Store  # the store this app opened (or was given); a test may inject another per request
    watch: access.StoreWatch  # of store: /healthz compares its file with the one opened
    own_store: bool  # the app opened the store itself: every read checks it is still present, too
    metrics: Metrics
    frames: access.Frames
    slots: asyncio.Semaphore  # selects ranking in worker threads at once
    health_pool: ThreadPoolExecutor  # /healthz's own thread: never behind the request pool

    def present(self) -> None:
        """CacheAccessError when the store the app opened was deleted or replaced under it (a
        store handed in by the caller is the caller's to watch)."""
        if self.own_store:
            self.watch.present()


def service(request: Request) -> ServiceState:
    return request.app.state.service


async def get_store(request: Request) -> Store:
    """The Store, injected into every route (the app's; tests may override it). Async on
    purpose: FastAPI runs a sync dependency in the threadpool, a thread hop per request. A store
    file deleted or replaced under the server is refused here (CacheAccessError, 503), as
    /healthz says: no read is answered from the open descriptor of a store that is gone."""
    service(request).present()
    return request.app.state.store


StoreDep = Annotated[Store, Depends(get_store)]
