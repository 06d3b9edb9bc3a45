"""GET|HEAD /v1/blobs/{sha256}: a code object by content (immutable, ETag, 304 for a blob that
verifies now, the stored zstd frame to a client that accepts zstd)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from rocke_aot.cache.store import Store
from rocke_aot.errors import NotFoundError
from rocke_aot.service import errors
from rocke_aot.service.state import Sha, StoreDep, service
from rocke_aot.service.views import IMMUTABLE, accepts_zstd, etag_matches

router = APIRouter(tags=["fetch"])

BLOB_DOC = {"description": "The code object (raw, or the stored zstd frame with Content-Encoding: zstd)",
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}


async def blob_response(request: Request, store: Store, sha: str, head: bool,
                        extra: dict[str, str] | None = None) -> Response:
    """The answer for one blob (a blob route's, and a kernel route's once it has the key's blob)."""
    svc = service(request)
    metrics, frames = svc.metrics, svc.frames
    headers = {"ETag": f'"{sha}"', "Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding", **(extra or {})}
    if etag_matches(request.headers.get("if-none-match"), sha):
        # 304 only for a blob that verifies now (a corrupt one is the IntegrityError, 500): the
        # client's copy matching a tag says nothing about the bytes this server holds
        try:
            await run_in_threadpool(frames.load, store, sha)
        except NotFoundError:
            metrics.lookup_miss.inc()
            raise NotFoundError(f"no blob {sha} in the store") from None
        metrics.not_modified.inc()
        return Response(status_code=304, headers=headers)
    frame = frames.cached(sha)
    if frame is None:
        metrics.frame_miss.inc()
        try:
            frame = await run_in_threadpool(frames.load, store, sha)
        except NotFoundError:
            metrics.lookup_miss.inc()
            raise
    else:
        metrics.frame_hit.inc()
    metrics.lookup_hit.inc()
    if frame.zstd_frame is not None and accepts_zstd(request.headers.get("accept-encoding")):
        content, encoding = frame.zstd_frame, "zstd"
        headers["Content-Encoding"] = "zstd"
    else:
        content, encoding = frame.raw, "identity"
    headers["Content-Length"] = str(len(content))
    if head:
        return Response(b"", headers=headers, media_type="application/octet-stream")
    metrics.served[encoding].inc(len(content))
    return Response(content, headers=headers, media_type="application/octet-stream")


@router.get("/v1/blobs/{sha256}", response_class=Response,
            responses={200: BLOB_DOC, **errors.responses(304, 404, 422, 500)},
            summary="A code object by content (immutable)")
async def get_blob(request: Request, store: StoreDep, sha256: Sha) -> Response:
    return await blob_response(request, store, sha256, head=False)


@router.head("/v1/blobs/{sha256}", response_class=Response,
             responses={200: {"description": "Headers of the code object"}, **errors.responses(304, 404, 422, 500)},
             summary="Headers of a code object by content")
async def head_blob(request: Request, store: StoreDep, sha256: Sha) -> Response:
    return await blob_response(request, store, sha256, head=True)
