"""The artifact service: FastAPI over one Store.

    client ─HTTP─> MetricsMiddleware ─> Guard ─> BodyLimit ─> HotBlobs ─> routes ─> access.* ─> Store (SQLite | PostgreSQL)
                                          │                     └─ GET of a blob this worker verified: answered from memory
                                          └─ writes refused from the head (no body read), in-flight and time budget
                                                     └─ errors.install: library errors -> statuses

    GET|HEAD /v1/blobs/{sha256}      code object by content: ETag, immutable, 304, zstd pass-through
    GET|HEAD /v1/kernels/{key}       the blob of that key (answered directly, Content-Location set)
    GET  /v1/kernels/{key}/meta      the artifact record
    GET  /v1/kernels                 keyset-paginated listing (arch, lane, family filters)
    POST /v1/select                  the shared select(): ranked candidates + rejections
    PUT  /v1/kernels/{key}           publish (bearer token; verified; 401/403/409/413/422)
    GET  /v1/trust/{name}, PUT /v1/trust   signed metadata of the generations (service/trust.py)
    GET|PUT /v1/triton/{key}         Triton cache entries by Triton's own key (service/triton.py)
    GET  /healthz, GET /metrics

Reads never write (no last-read touches): a replica can run on a read-only role. Hot blob
fetches are answered from a per-worker cache of verified blobs (access.Frames) without a
thread hop; everything that touches the database runs in the threadpool, selects through
at most ``select_slots`` threads at once (a cold select over SQLite once held the event loop
for every other request: /healthz took p50 1.2 s under 4 clients). Every bound is listed in
docs/reliability.md ("Bounds").
``create_app(store_or_url, token=...)`` builds an app; ``app_from_env`` is the factory
``rocke-aot serve`` hands uvicorn (each worker opens its own Store).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields as dc_fields
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from rocke_aot import boundedjson, record, settings
from rocke_aot.aot.codeobject import record_metadata
from rocke_aot.aot.codeobject import validate as validate_code_object
from rocke_aot.arch import ARCHES
from rocke_aot.cache.keys import KeyInputs, artifact_key, thaw
from rocke_aot.cache.provenance import Entry
from rocke_aot.cache.records import Artifact
from rocke_aot.cache.store import Store
from rocke_aot.errors import AdmissionError, CacheError, LaneError, NotFoundError, PluginError, SpecError
from rocke_aot.lanes import LANE_NAMES, get_lane
from rocke_aot.service import access, errors, guard
from rocke_aot.service import triton as triton_routes
from rocke_aot.service import trust as trust_routes
from rocke_aot.service.errors import (
    Conflict,
    FieldError,
    ReadOnly,
    Unauthorized,
)
from rocke_aot.service.metrics import Metrics, MetricsMiddleware
from rocke_aot.service.schemas import (
    MAX_PAGE,
    MAX_REJECTED,
    SHA_PATTERN,
    Health,
    KernelMeta,
    KernelPage,
    KernelSummary,
    NoCandidateAnswer,
    PublishRequest,
    PublishResponse,
    RankedKernel,
    Rejection,
    Resources,
    SelectRequest,
    SelectResponse,
)
from rocke_aot.service.selection import check_triton_version, select_families
from rocke_aot.targets import Target
from rocke_aot.trust.keys import PublicKey, public_key
from rocke_aot.variants import table
from rocke_aot.variants.contract import admit_spec, check_record_launch
from rocke_aot.variants.families import FAMILIES, get_family, problem_from_dict

IMMUTABLE = "public, max-age=31536000, immutable"
DEFAULT_MAX_PUBLISH = 16 << 20  # body bytes of one publish (base64 of a code object + metadata)
DEFAULT_MAX_BODY = 64 << 10  # any other request body (select)
# The bounded JSON reader's figures for request bodies (docs/reliability.md, "Bounds"): a publish
# carries a record (metadata at most record.MAX_DEPTH deep) and one long base64 string
PUBLISH_DEPTH, PUBLISH_ITEMS = record.MAX_DEPTH + 2, 100_000
BODY_DEPTH, BODY_ITEMS = 16, 10_000  # a select: a problem object and a few lists
DEFAULT_SELECT_SLOTS = 2  # selects ranking in worker threads at once, per worker process (the GIL: more only queue)

Sha = Annotated[str, Path(pattern=SHA_PATTERN, description="sha256 of the raw code object, 64 lowercase hex")]
Key = Annotated[str, Path(pattern=SHA_PATTERN, description="Artifact key, 64 lowercase hex")]


async def get_store(request: Request) -> Store:
    """The Store, injected into every route (the app's; tests may override it). Async on
    purpose: FastAPI runs a sync dependency in the threadpool, a thread hop per request. A store
    file deleted or replaced under the server is refused here (CacheAccessError, 503), as
    /healthz says: no read is answered from the open descriptor of a store that is gone."""
    watch = getattr(request.app.state, "watch", None)
    if watch is not None:
        watch.present()
    return request.app.state.store


StoreDep = Annotated[Store, Depends(get_store)]
_bearer = HTTPBearer(auto_error=False, description="The server's publish token (rocke-aot serve --token-file)")


class BodyLimit:
    """Bounded request bodies: a declared or streamed body over the limit is 413 before any
    route sees it (publish: ``max_publish``; everything else: ``max_body``); then the body is
    scanned by the bounded JSON reader (rocke_aot/boundedjson.py: depth, values, string length)
    before any parser builds an object from it: over a bound is 413 (bytes) or 422, cut short."""

    def __init__(self, app, max_body: int, max_publish: int):
        self.app, self.max_body, self.max_publish = app, max_body, max_publish
        self.limits = {"PUT": boundedjson.Limits(max_publish, PUBLISH_DEPTH, PUBLISH_ITEMS, max_publish),
                       "other": boundedjson.Limits(max_body, BODY_DEPTH, BODY_ITEMS, max_body)}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit = self.max_publish if scope["method"] == "PUT" else self.max_body
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await self._refuse(send, limit)
        chunks, total, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            total += len(chunk)
            if total > limit:
                return await self._refuse(send, limit)
            chunks.append(chunk)
            more = msg.get("more_body", False)
        whole = b"".join(chunks)
        if whole:
            try:
                boundedjson.check(whole, self.limits["PUT" if scope["method"] == "PUT" else "other"], "request body")
            except boundedjson.JSONLimitError as e:
                return await self._refuse(send, limit, status=413 if e.limit == "bytes" else 422, message=str(e))
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    async def _refuse(send, limit: int, status: int = 413, message: str | None = None):
        name = "TooLarge" if status == 413 else "SpecError"
        payload = json.dumps(errors.body(name, message or f"request body over the {limit}-byte limit")).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": payload})


class HotBlobs:
    """The hot path: ``GET /v1/blobs/{sha256}`` of a blob this worker already verified
    (access.Frames hit, no If-None-Match) is answered here, before FastAPI's routing and
    dependency resolution (which cost more than the rest of the request; docs/service.md).
    Every other request, and every miss, goes to the documented route, which answers the
    same headers and bytes."""

    def __init__(self, app, frames: access.Frames, metrics: Metrics, route_holder: dict):
        self.app, self.frames, self.metrics, self.route_holder = app, frames, metrics, route_holder
        self.watch_holder = route_holder

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            path = scope["path"]
            if len(path) == 74 and path.startswith("/v1/blobs/"):
                frame = self.frames.cached(path[10:])
                if frame is not None and self._store_present():
                    headers = dict(scope["headers"])
                    if b"if-none-match" not in headers:
                        return await self._send(scope, send, frame, headers.get(b"accept-encoding"))
        await self.app(scope, receive, send)

    def _store_present(self) -> bool:
        watch = self.watch_holder.get("watch")
        try:
            if watch is not None:
                watch.present()
        except CacheError:
            return False  # the route answers (503, through get_store)
        return True

    async def _send(self, scope, send, frame: access.Frame, accept: bytes | None) -> None:
        scope["route"] = self.route_holder.get("blob")  # the metrics label: the route template
        self.metrics.frame_hit.inc()
        self.metrics.lookup_hit.inc()
        if frame.zstd_frame is not None and accept is not None and _accepts_zstd(accept.decode("latin-1")):
            content, encoding = frame.zstd_frame, "zstd"
        else:
            content, encoding = frame.raw, "identity"
        headers = [(b"etag", f'"{frame.sha256}"'.encode()), (b"cache-control", IMMUTABLE.encode()),
                   (b"vary", b"Accept-Encoding")]
        if encoding == "zstd":
            headers.append((b"content-encoding", b"zstd"))
        headers += [(b"content-length", str(len(content)).encode()), (b"content-type", b"application/octet-stream")]
        self.metrics.served[encoding].inc(len(content))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": content})


# ---- field validation: the library's named errors, with the field and its accepted values ----

def _arch(value: str, field: str = "arch") -> Target:
    try:
        return Target.parse(value)
    except SpecError as e:
        raise FieldError(field, str(e), list(ARCHES)) from None


def _lane(value: object, field: str = "lane") -> str:
    try:
        return get_lane(value, source=field).name
    except LaneError as e:
        raise FieldError(field, str(e), list(LANE_NAMES)) from None


def _family(value: str, field: str = "family") -> str:
    try:
        get_family(value)
    except (SpecError, PluginError) as e:  # unknown, or a plugin of that name failed to load (its error)
        raise FieldError(field, str(e), list(table.family_names())) from None
    return value


def _families(value: str) -> tuple[str, ...]:
    """The families of a select (service/selection.py select_families): each known, and one
    operation on one problem type (FamilyMixError, a 422 on the family field, naming each)."""
    for name in value.split(","):
        _family(name.strip())
    try:
        return select_families(value)
    except SpecError as e:
        raise FieldError("family", str(e), list(table.family_names())) from None


def _triton_version(family, value: str | None) -> str | None:
    try:
        return check_triton_version(family, value)
    except SpecError as e:
        raise FieldError("triton_version", str(e)) from None


def _problem(family: str, value: dict) -> Any:
    try:
        return problem_from_dict(family, value)
    except SpecError as e:
        names = [f.name for f in dc_fields(FAMILIES[family].problem_type)]
        raise FieldError("problem", str(e), names) from None


# ---- responses -----------------------------------------------------------------------------

def _etag_matches(header: str | None, sha: str) -> bool:
    if not header:
        return False
    for tag in header.split(","):
        tag = tag.strip()
        if tag == "*":
            return True
        tag = tag.removeprefix("W/")
        if tag.strip('"') == sha:
            return True
    return False


def _accepts_zstd(header: str | None) -> bool:
    if not header:
        return False
    for item in header.split(","):
        name, _, params = item.strip().partition(";")
        if name.strip().lower() == "zstd":
            q = params.strip()
            if q.startswith("q="):
                try:
                    return float(q[2:]) > 0
                except ValueError:
                    return False
            return True
    return False


def _prefix(request: Request) -> str:
    return request.scope.get("root_path", "")


def _summary(a: Artifact, request: Request) -> dict[str, Any]:
    return {"key": a.key, "arch": a.arch, "lane": a.lane, "profile": a.profile, "family": a.family,
            "spec": thaw(a.spec), "sha256": a.sha256, "size": a.size,
            "url": f"{_prefix(request)}/v1/blobs/{a.sha256}"}


RESOURCE_FIELDS = tuple(Resources.model_fields)


def resources(metadata: dict[str, Any]) -> dict[str, Any]:
    """Code-object resources recorded at build time (aot/codeobject.py CodeObjectInfo)."""
    co = metadata.get("code_object") or {}
    return {f: co[f] for f in RESOURCE_FIELDS if co.get(f) is not None}


_LAUNCH_FIELDS = ("kernel_name", "kernargs", "kernarg_size", "block_size", "lds_bytes", "max_tensor_bytes")


def _launch(md: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(md.get("launch"), dict):
        return md["launch"]
    kernel = md.get("kernel")
    if not isinstance(kernel, dict):
        return None
    out = {k: kernel[k] for k in _LAUNCH_FIELDS if k in kernel}
    if isinstance(kernel.get("metadata"), dict):
        out["family_facts"] = kernel["metadata"]
    return out or None


def kernel_meta(a: Artifact, request: Request) -> KernelMeta:
    md = thaw(a.metadata)
    return KernelMeta(
        **_summary(a, request), recipe_digest=a.recipe_digest, toolchain=dict(thaw(a.toolchain)),
        options=dict(thaw(a.options)),
        ir_sha256=a.ir_sha256, stored_size=a.stored_size,
        built_at=a.built_at.isoformat() if a.built_at else None,
        launch=_launch(md), resources=Resources(**resources(md)), provenance=thaw(a.provenance), metadata=md,
    )


def create_app(store: Store | str, *, token: str | None = None, max_publish: int = DEFAULT_MAX_PUBLISH,
               max_body: int = DEFAULT_MAX_BODY, frame_cache_bytes: int = 64 << 20,
               budget_s: float = guard.DEFAULT_BUDGET_S, max_in_flight: int = guard.DEFAULT_MAX_IN_FLIGHT,
               select_slots: int = DEFAULT_SELECT_SLOTS, trust_dir: str | None = None,
               root_key: PublicKey | None = None, body_timeout_s: float = guard.DEFAULT_BODY_TIMEOUT_S,
               max_reading: int = guard.DEFAULT_MAX_READING, plain_tokens: bool = True) -> FastAPI:
    """The service over ``store`` (a Store, or a URL opened read-only where possible).

    ``token`` None: publishing is off (403). A token (or a tuple of them, one per tenant) enables PUT
    for bearers of it; what a bearer publishes is recorded under its token's id (a Triton entry
    a host publishes is its tenant's alone: service/triton.py).
    ``budget_s``: a request not answering by then gets 503; ``max_in_flight`` requests at once
    per process, more get 503 Busy; ``select_slots`` selects rank at once (others wait, within
    the budget).
    ``trust_dir``: the signed metadata served at /v1/trust/ (service/trust.py); ``root_key``
    the pinned key a PUT /v1/trust is checked against. ``body_timeout_s`` / ``max_reading``: a
    request body arrives within this, and this many are received at once, outside the in-flight
    slots (service/guard.py). ``plain_tokens`` False: a publish token over plain HTTP from a
    client that is not on loopback is refused (403); `rocke-aot serve` passes False unless
    --allow-plain-tokens (an app built in-process, a test's, keeps True).
    """
    own_store = not isinstance(store, Store)
    the_store = access.open_store(store, readonly=token is None) if own_store else store
    metrics = Metrics()
    frames = access.Frames(max_bytes=frame_cache_bytes)
    app = FastAPI(
        title="rocke-aot artifact service",
        version="1",
        summary="Precompiled AMD GPU kernels by key, by content and by problem (tile efficiency).",
        description="Every code object is verified (sha256 of its raw bytes) before it leaves the server; "
                    "clients verify again after decompressing. Errors answer an ErrorBody naming the error "
                    "class, the field at fault and its accepted values.",
    )
    app.state.store = the_store
    app.state.metrics = metrics
    app.state.frames = frames
    app.state.tokens = guard.tokens_of(token)  # one per tenant (the token file's lines)
    app.state.token = app.state.tokens[0] if app.state.tokens else None
    watch = access.StoreWatch(the_store)
    app.state.watch = watch if own_store else None
    health_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocke-healthz")
    slots = asyncio.Semaphore(select_slots)
    trust_routes.install(app, trust_dir, root_key)
    triton_routes.install(app)
    errors.install(app, on_integrity=lambda exc: metrics.verification_failures.inc())
    route_holder: dict = {"watch": app.state.watch}
    app.add_middleware(HotBlobs, frames=frames, metrics=metrics, route_holder=route_holder)
    app.add_middleware(BodyLimit, max_body=max_body, max_publish=max_publish)
    refused = {"ReadOnly": "read_only", "Unauthorized": "unauthorized"}
    app.add_middleware(guard.Guard, token=token, budget_s=budget_s, max_in_flight=max_in_flight,
                       on_refusal=lambda name: metrics.publishes.labels(refused.get(name, "unauthorized")).inc(),
                       max_body=max_body, max_publish=max_publish, body_timeout_s=body_timeout_s,
                       max_reading=max_reading, plain_tokens=plain_tokens)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if own_store:
        app.router.on_shutdown.append(the_store.close)

    async def blob_response(request: Request, store: Store, sha: str, head: bool,
                            extra: dict[str, str] | None = None) -> Response:
        headers = {"ETag": f'"{sha}"', "Cache-Control": IMMUTABLE, "Vary": "Accept-Encoding", **(extra or {})}
        if _etag_matches(request.headers.get("if-none-match"), sha):
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
        if frame.zstd_frame is not None and _accepts_zstd(request.headers.get("accept-encoding")):
            content, encoding = frame.zstd_frame, "zstd"
            headers["Content-Encoding"] = "zstd"
        else:
            content, encoding = frame.raw, "identity"
        headers["Content-Length"] = str(len(content))
        if head:
            return Response(b"", headers=headers, media_type="application/octet-stream")
        metrics.served[encoding].inc(len(content))
        return Response(content, headers=headers, media_type="application/octet-stream")

    blob_doc = {"description": "The code object (raw, or the stored zstd frame with Content-Encoding: zstd)",
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}

    @app.get("/v1/blobs/{sha256}", tags=["fetch"], response_class=Response,
             responses={200: blob_doc, **errors.responses(304, 404, 422, 500)},
             summary="A code object by content (immutable)")
    async def get_blob(request: Request, store: StoreDep, sha256: Sha) -> Response:
        return await blob_response(request, store, sha256, head=False)

    @app.head("/v1/blobs/{sha256}", tags=["fetch"], response_class=Response,
              responses={200: {"description": "Headers of the code object"}, **errors.responses(304, 404, 422, 500)},
              summary="Headers of a code object by content")
    async def head_blob(request: Request, store: StoreDep, sha256: Sha) -> Response:
        return await blob_response(request, store, sha256, head=True)

    async def kernel_blob(request: Request, store: Store, key: str, head: bool) -> Response:
        try:
            art = await run_in_threadpool(access.kernel_row, store, key)
        except NotFoundError:
            metrics.lookup_miss.inc()
            raise
        return await blob_response(request, store, art.sha256, head,
                                   {"Content-Location": f"{_prefix(request)}/v1/blobs/{art.sha256}"})

    @app.get("/v1/kernels/{key}", tags=["fetch"], response_class=Response,
             responses={200: blob_doc, **errors.responses(304, 404, 422, 500)},
             summary="The code object of an artifact key")
    async def get_kernel(request: Request, store: StoreDep, key: Key) -> Response:
        return await kernel_blob(request, store, key, head=False)

    @app.head("/v1/kernels/{key}", tags=["fetch"], response_class=Response,
              responses={200: {"description": "Headers of the code object"}, **errors.responses(304, 404, 422, 500)},
              summary="Headers of the code object of an artifact key")
    async def head_kernel(request: Request, store: StoreDep, key: Key) -> Response:
        return await kernel_blob(request, store, key, head=True)

    @app.get("/v1/kernels/{key}/meta", tags=["fetch"], response_model=KernelMeta,
             responses=errors.responses(404, 422, 500), summary="The artifact record of a key")
    def get_meta(request: Request, store: StoreDep, key: Key) -> KernelMeta:
        try:
            art = access.kernel_row(store, key)
        except NotFoundError:
            metrics.lookup_miss.inc()
            raise
        metrics.lookup_hit.inc()
        return kernel_meta(art, request)

    @app.get("/v1/kernels", tags=["list"], response_model=KernelPage, responses=errors.responses(422, 500),
             summary="Artifacts, a page at a time, ordered by key")
    def list_kernels(
        request: Request, store: StoreDep,
        arch: Annotated[str | None, Query(max_length=128, description="Exact target ID")] = None,
        lane: Annotated[str | None, Query(max_length=32, description=f"One of {', '.join(LANE_NAMES)}")] = None,
        family: Annotated[str | None, Query(max_length=64, description="Kernel family, e.g. gemm")] = None,
        cursor: Annotated[str | None, Query(pattern=SHA_PATTERN, description="next_cursor of the previous page")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Page size, 1..{MAX_PAGE}")] = 100,
    ) -> KernelPage:
        arch_id = _arch(arch).id if arch is not None else None
        lane_name = _lane(lane) if lane is not None else None
        fam = _family(family) if family is not None else None
        items, nxt = access.list_page(store, arch=arch_id, lane=lane_name, family=fam, cursor=cursor, limit=limit)
        return KernelPage(items=[KernelSummary(**_summary(a, request)) for a in items], next_cursor=nxt)

    @app.post("/v1/select", tags=["select"], response_model=SelectResponse,
              responses=errors.responses(413, 422, 500),
              summary="Stored candidates for a problem, best first with the basis of each rank (measured, fitted, "
                      "hardware or efficiency), and the rejected ones with reasons")
    async def select(request: Request, store: StoreDep, req: SelectRequest) -> Response:
        target = _arch(req.arch)
        fams = _families(req.family)  # "gemm" or, across families, "gemm,triton_matmul"
        family = ",".join(fams)
        lanes = [_lane(l, f"lanes.{i}") for i, l in enumerate(req.lanes)] if req.lanes else None
        problem = _problem(fams[0], req.problem)
        version = _triton_version(fams, req.triton_version)
        args = (store, target, family, problem)
        # The rejected entries are listed only when asked to explain (rejected_count always counts
        # them): they were ~90% of a default answer's bytes and of its serialization.
        kw = dict(lanes=lanes, min_efficiency=req.min_efficiency, limit=req.limit, explain=req.explain,
                  max_rejected=MAX_REJECTED if req.explain else 0, model=req.model, measured=req.measured,
                  triton_version=version)
        # Off the event loop, through a few threads: a cold select (after a store change) ranks
        # every row of the family, and on the loop it stalled every other request of the worker.
        async with slots:
            got = await run_in_threadpool(access.select, *args, **kw)
        p = _prefix(request)
        doc = SelectResponse(
            accepted=[RankedKernel(**c, url=f"{p}/v1/blobs/{c['sha256']}", kernel_url=f"{p}/v1/kernels/{c['key']}")
                      for c in got["accepted"]],
            rejected=[Rejection(**r) for r in got["rejected"]], rejected_count=got["rejected_count"],
            model=got["model"], note=got["note"],
            no_candidate=None if got["no_candidate"] is None else NoCandidateAnswer(**got["no_candidate"]),
            triton_version=got["triton_version"], triton_versions=got["triton_versions"],
        )
        # Validated above against the documented models, serialized here by pydantic-core: a
        # returned Response skips FastAPI's second validation of the model (run in the threadpool
        # for a sync route) and its serialization (docs/service.md, "Selection").
        return Response(doc.model_dump_json().encode(), media_type="application/json")

    @app.put("/v1/kernels/{key}", tags=["publish"], response_model=PublishResponse,
             responses=errors.responses(401, 403, 409, 413, 422, 500),
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}}}}},
             summary="Publish a code object under its key (bearer token)")
    async def publish(request: Request, store: StoreDep, key: Key,
                      credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]) -> PublishResponse:
        if not request.app.state.tokens:
            metrics.publishes.labels("read_only").inc()
            raise ReadOnly("this server is read-only: it was started without a publish token")
        want = guard.match_token(request.app.state.tokens, None if credentials is None else credentials.credentials)
        if want is None:
            metrics.publishes.labels("unauthorized").inc()
            raise Unauthorized("a publish needs the server's bearer token (Authorization: Bearer ...)")
        raw_body = await request.body()
        try:
            req = PublishRequest.model_validate_json(raw_body)
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first.get("loc", ())) or "body"
            raise FieldError(loc, f"{loc}: {first.get('msg')}") from None
        out = await run_in_threadpool(_publish, store, key, req, Entry.published(want))
        metrics.publishes.labels("created" if out[0] else "exists").inc()
        return PublishResponse(created=out[0], kernel=kernel_meta(out[1], request))

    @app.get("/healthz", tags=["ops"], response_model=Health, responses=errors.responses(503))
    async def healthz(request: Request) -> Health:
        # The store this app opened (not an injected one) must still be at its path and answer. On its
        # own thread, not the request pool (nor the Guard's in-flight count): a busy server still
        # says whether it is alive.
        store = request.app.state.store
        fn = watch.check if store is the_store else access.StoreWatch(store).check
        await asyncio.get_running_loop().run_in_executor(health_pool, fn)
        return Health(status="ok", backend=store.backend)

    @app.get("/metrics", tags=["ops"], response_class=Response,
             responses={200: {"description": "Prometheus text exposition",
                              "content": {"text/plain": {"schema": {"type": "string"}}}}})
    def prometheus() -> Response:
        payload, ctype = metrics.render()
        return Response(payload, media_type=ctype)

    route_holder["blob"] = next(r for r in app.routes if getattr(r, "path", "") == "/v1/blobs/{sha256}"
                                and "GET" in getattr(r, "methods", ()))

    # The publish body is read by hand (auth first, then a bounded parse), so FastAPI does not
    # see the model; add it to the document's components for the $ref above.
    def openapi():
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(title=app.title, version=app.version, summary=app.summary,
                                 description=app.description, routes=app.routes)
            comps = schema.setdefault("components", {}).setdefault("schemas", {})
            comps["PublishRequest"] = PublishRequest.model_json_schema(ref_template="#/components/schemas/{model}")
            comps["TritonPublish"] = triton_routes.TritonPublish.model_json_schema(
                ref_template="#/components/schemas/{model}")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    return app


def _publish(store: Store, key: str, req: PublishRequest, entered: Entry) -> tuple[bool, Artifact]:
    """Every check before the one write; any refusal writes nothing. The spec must be one the
    family admits on that arch and lane (variants/contract.py admit_spec: gemm waves=3 is 422)
    and the launch contract the one its formulas give (check_record_launch: a grid 4x too large or
    an output sized m instead of m * n is 422). What is stored is recorded as published under
    ``entered``'s token id: never signed, never counted as built, until a build verifies it."""
    target = _arch(req.arch)
    lane = _lane(req.lane)
    family = _family(req.family)
    try:
        code = base64.b64decode(req.code_object, validate=True)
    except (binascii.Error, ValueError) as e:
        raise FieldError("code_object", f"code_object is not base64: {e}") from None
    if not code:
        raise FieldError("code_object", "code_object is empty")
    from rocke_aot.cache.codec import sha256_hex

    got = sha256_hex(code)
    if got != req.sha256:
        raise FieldError("sha256", f"the code object hashes to {got}, not the declared {req.sha256}")
    profile = req.profile if req.profile is not None else get_lane(lane).profile_name
    try:
        inputs = KeyInputs(target.id, lane, profile, family, req.spec, req.recipe_digest, req.toolchain, req.options)
    except (SpecError, LaneError) as e:
        raise FieldError("spec", f"key inputs refused: {e}") from None
    want = artifact_key(inputs)
    if want != key:
        raise FieldError("key", f"the key inputs hash to {want}, not {key}")
    try:
        admit_spec(family, req.spec, target, lane)
    except (SpecError, AdmissionError) as e:
        raise FieldError("spec", f"the family does not admit this spec: {e}") from None
    info = validate_code_object(code, target)  # CodeObjectError -> 422
    existing = store.lookup_many([key]).get(key)
    if existing is not None and existing.ok:
        if existing.sha256 != got:
            raise Conflict(f"artifact {key} already holds code object {existing.sha256}; refusing {got}")
        return False, access.kernel_row(store, key)
    # the resources the server read from the object itself, the launch contract checked against it
    metadata = record_metadata(req.metadata, info)  # RecordError / CodeObjectError: 422
    try:
        check_record_launch(family, req.spec, target, metadata)
    except SpecError as e:
        raise FieldError("metadata.launch", str(e)) from None
    record.check_provenance(req.provenance)
    try:
        store.put(inputs, code, ir_sha256=req.ir_sha256, metadata=metadata, provenance=req.provenance,
                  entered=entered)
    except CacheError as e:
        if "already holds" in str(e):  # a concurrent publish of other bytes won the race
            raise Conflict(str(e)) from None
        raise
    return True, access.kernel_row(store, key)


def app_from_env() -> FastAPI:
    """uvicorn factory for ``rocke-aot serve`` (every worker process builds its own app)."""
    url = settings.raw(settings.SERVE_CACHE)
    if not url:
        raise CacheError(f"{settings.SERVE_CACHE} is not set (rocke-aot serve sets it)")
    token = None
    path = settings.raw(settings.SERVE_TOKEN_FILE)
    if path:
        with open(path, encoding="utf-8") as f:  # one token per line: one per tenant (publisher)
            token = tuple(line.strip() for line in f.read().splitlines() if line.strip()) or None
    max_publish = settings.integer(settings.SERVE_MAX_PUBLISH)
    max_publish = DEFAULT_MAX_PUBLISH if max_publish is None else max_publish
    root = settings.raw(settings.SERVE_ROOT_KEY)
    body_s = settings.integer(settings.SERVE_BODY_TIMEOUT_S)
    return create_app(url, token=token, max_publish=max_publish, trust_dir=settings.raw(settings.SERVE_TRUST_DIR),
                      root_key=public_key(root) if root else None,
                      body_timeout_s=guard.DEFAULT_BODY_TIMEOUT_S if body_s is None else float(body_s),
                      plain_tokens=settings.flag(settings.SERVE_PLAIN_TOKENS))
