"""GET /healthz (answered on its own thread, outside the request pool and the Guard's count:
a busy server still says whether it is alive) and GET /metrics (Prometheus text)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import Response

from rocke_aot.service import access, errors
from rocke_aot.service.schemas import Health
from rocke_aot.service.state import service

router = APIRouter(tags=["ops"])


@router.get("/healthz", response_model=Health, responses=errors.responses(503))
async def healthz(request: Request) -> Health:
    # The store this app opened (not an injected one) must still be at its path and answer.
    svc = service(request)
    store = request.app.state.store
    fn = svc.watch.check if store is svc.store else access.StoreWatch(store).check
    await asyncio.get_running_loop().run_in_executor(svc.health_pool, fn)
    return Health(status="ok", backend=store.backend)


@router.get("/metrics", response_class=Response,
            responses={200: {"description": "Prometheus text exposition",
                             "content": {"text/plain": {"schema": {"type": "string"}}}}})
def prometheus(request: Request) -> Response:
    payload, ctype = service(request).metrics.render()
    return Response(payload, media_type=ctype)
