"""GET|HEAD /v1/kernels/{key} (the key's code object, Content-Location its blob), GET
/v1/kernels/{key}/meta (the artifact record), GET /v1/kernels (a keyset-paginated listing,
filtered by arch, lane and family)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from rocke_aot.cache.store import Store
from rocke_aot.errors import NotFoundError
from rocke_aot.lanes import LANE_NAMES
from rocke_aot.service import access, errors, fields
from rocke_aot.service.routes.blobs import BLOB_DOC, blob_response
from rocke_aot.service.schemas import MAX_PAGE, SHA_PATTERN, KernelMeta, KernelPage, KernelSummary
from rocke_aot.service.state import Key, StoreDep, service
from rocke_aot.service.views import kernel_meta, prefix, summary

router = APIRouter()


def _row(request: Request, store: Store, key: str):
    """The artifact of a key; a miss is counted (lookup_miss) and raised (404)."""
    try:
        return access.kernel_row(store, key)
    except NotFoundError:
        service(request).metrics.lookup_miss.inc()
        raise


async def _kernel_blob(request: Request, store: Store, key: str, head: bool) -> Response:
    art = await run_in_threadpool(_row, request, store, key)
    return await blob_response(request, store, art.sha256, head,
                               {"Content-Location": f"{prefix(request)}/v1/blobs/{art.sha256}"})


@router.get("/v1/kernels/{key}", tags=["fetch"], response_class=Response,
            responses={200: BLOB_DOC, **errors.responses(304, 404, 422, 500)},
            summary="The code object of an artifact key")
async def get_kernel(request: Request, store: StoreDep, key: Key) -> Response:
    return await _kernel_blob(request, store, key, head=False)


@router.head("/v1/kernels/{key}", tags=["fetch"], response_class=Response,
             responses={200: {"description": "Headers of the code object"}, **errors.responses(304, 404, 422, 500)},
             summary="Headers of the code object of an artifact key")
async def head_kernel(request: Request, store: StoreDep, key: Key) -> Response:
    return await _kernel_blob(request, store, key, head=True)


@router.get("/v1/kernels/{key}/meta", tags=["fetch"], response_model=KernelMeta,
            responses=errors.responses(404, 422, 500), summary="The artifact record of a key")
def get_meta(request: Request, store: StoreDep, key: Key) -> KernelMeta:
    art = _row(request, store, key)
    service(request).metrics.lookup_hit.inc()
    return kernel_meta(art, request)


@router.get("/v1/kernels", tags=["list"], response_model=KernelPage, responses=errors.responses(422, 500),
            summary="Artifacts, a page at a time, ordered by key")
def list_kernels(
    request: Request, store: StoreDep,
    arch: Annotated[str | None, Query(max_length=128, description="Exact target ID")] = None,
    lane: Annotated[str | None, Query(max_length=32, description=f"One of {', '.join(LANE_NAMES)}")] = None,
    family: Annotated[str | None, Query(max_length=64, description="Kernel family, e.g. gemm")] = None,
    cursor: Annotated[str | None, Query(pattern=SHA_PATTERN, description="next_cursor of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Page size, 1..{MAX_PAGE}")] = 100,
) -> KernelPage:
    arch_id = fields.target(arch).id if arch is not None else None
    lane_name = fields.lane(lane) if lane is not None else None
    fam = fields.family(family) if family is not None else None
    items, nxt = access.list_page(store, arch=arch_id, lane=lane_name, family=fam, cursor=cursor, limit=limit)
    return KernelPage(items=[KernelSummary(**summary(a, request)) for a in items], next_cursor=nxt)
