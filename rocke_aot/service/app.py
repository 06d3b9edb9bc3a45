"""The artifact service: FastAPI over one Store.

    client ─HTTP─> MetricsMiddleware ─> Guard ─> BodyLimit ─> HotBlobs ─> routes ─> access.* ─> Store (SQLite | PostgreSQL)
                                          │                     └─ GET of a blob this worker verified: answered from memory
                                          └─ writes refused from the head (no body read), in-flight and time budget
                                                     └─ errors.install: library errors -> statuses

The routes, one router per resource (service/routes/), their inputs parsed once at the edge
(service/fields.py), what they share in ``app.state.service`` (service/state.py):

    GET|HEAD /v1/blobs/{sha256}      code object by content: ETag, immutable, 304, zstd pass-through   routes/blobs.py
    GET|HEAD /v1/kernels/{key}       the blob of that key (answered directly, Content-Location set)   routes/kernels.py
    GET  /v1/kernels/{key}/meta      the artifact record                                               routes/kernels.py
    GET  /v1/kernels                 keyset-paginated listing (arch, lane, family filters)             routes/kernels.py
    POST /v1/select                  the shared select(): ranked candidates + rejections              routes/select.py
    PUT  /v1/kernels/{key}           publish (bearer token; verified; 401/403/409/413/422)            routes/publish.py
    GET  /v1/trust/{name}, PUT /v1/trust   signed metadata of the generations                         service/trust.py
    GET|PUT /v1/triton/{key}         Triton cache entries by Triton's own key                          service/triton.py
    GET  /healthz, GET /metrics                                                                        routes/ops.py

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
import json
from concurrent.futures import ThreadPoolExecutor

from fastapi import FastAPI

from rocke_aot import boundedjson, record, settings
from rocke_aot.cache.store import Store
from rocke_aot.errors import CacheError
from rocke_aot.service import access, errors, guard
from rocke_aot.service import triton as triton_routes
from rocke_aot.service import trust as trust_routes
from rocke_aot.service.metrics import Metrics, MetricsMiddleware
from rocke_aot.service.routes import blobs, kernels, ops, publish, select
from rocke_aot.service.schemas import PublishRequest
from rocke_aot.service.state import ServiceState
from rocke_aot.service.views import IMMUTABLE, accepts_zstd
from rocke_aot.trust.keys import PublicKey, public_key

DEFAULT_MAX_PUBLISH = 16 << 20  # body bytes of one publish (base64 of a code object + metadata)
DEFAULT_MAX_BODY = 64 << 10  # any other request body (select)
# The bounded JSON reader's figures for request bodies (docs/reliability.md, "Bounds"): a publish
# carries a record (metadata at most record.MAX_DEPTH deep) and one long base64 string
PUBLISH_DEPTH, PUBLISH_ITEMS = record.MAX_DEPTH + 2, 100_000
BODY_DEPTH, BODY_ITEMS = 16, 10_000  # a select: a problem object and a few lists
DEFAULT_SELECT_SLOTS = 2  # selects ranking in worker threads at once, per worker process (the GIL: more only queue)

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

    def __init__(self, app, state: ServiceState, route_holder: dict):
        self.app, self.state, self.route_holder = app, state, route_holder
        self.frames, self.metrics = state.frames, state.metrics

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
        try:
            self.state.present()
        except CacheError:
            return False  # the route answers (503, through get_store)
        return True

    async def _send(self, scope, send, frame: access.Frame, accept: bytes | None) -> None:
        scope["route"] = self.route_holder.get("blob")  # the metrics label: the route template
        self.metrics.frame_hit.inc()
        self.metrics.lookup_hit.inc()
        if frame.zstd_frame is not None and accept is not None and accepts_zstd(accept.decode("latin-1")):
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


def create_app(store: Store | str, *, token: str | tuple[str, ...] | None = None, max_publish: int = DEFAULT_MAX_PUBLISH,
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
    the_store = store if isinstance(store, Store) else access.open_store(store, readonly=token is None)
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
    app.state.service = ServiceState(
        store=the_store, watch=access.StoreWatch(the_store), own_store=own_store, metrics=metrics, frames=frames, slots=asyncio.Semaphore(select_slots),
        health_pool=ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocke-healthz"))
    trust_routes.install(app, trust_dir, root_key)
    triton_routes.install(app)
    errors.install(app, on_integrity=lambda exc: metrics.verification_failures.inc())
    route_holder: dict = {}  # the blob route, once the routers are in (the metrics label)
    app.add_middleware(HotBlobs, state=app.state.service, route_holder=route_holder)
    app.add_middleware(BodyLimit, max_body=max_body, max_publish=max_publish)
    refused = {"ReadOnly": "read_only", "Unauthorized": "unauthorized"}
    app.add_middleware(guard.Guard, token=token, budget_s=budget_s, max_in_flight=max_in_flight,
                       on_refusal=lambda name: metrics.publishes.labels(refused.get(name, "unauthorized")).inc(),
                       max_body=max_body, max_publish=max_publish, body_timeout_s=body_timeout_s,
                       max_reading=max_reading, plain_tokens=plain_tokens)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    if own_store:
        app.router.on_shutdown.append(the_store.close)

    for router in (blobs.router, kernels.router, publish.router, select.router, ops.router):
        app.include_router(router)
    route_holder["blob"] = next(r for r in blobs.router.routes if getattr(r, "path", "") == "/v1/blobs/{sha256}"
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

    # FastAPI's documented way to extend the schema ("Extending OpenAPI") replaces the method
    app.openapi = openapi  # type: ignore[method-assign]
    return app


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
