"""Prometheus metrics of the service, and the ASGI middleware that records requests.

    request ──MetricsMiddleware──> app ──> response start (status) ──> end
                 └─ requests_total{route,method,status} += 1, request_seconds{route}.observe
    handlers ──> bytes_served_total{encoding}, lookups_total{result=hit|miss},
                 frame_cache_total{result=hit|miss}, not_modified_total, verification_failures_total
    GET /metrics ──render()──> text exposition

``route`` is the route *template* (``/v1/blobs/{sha256}``), never the raw path, so a client
cannot grow the label set; an unmatched path is ``<unmatched>``. ``method`` is one of
METHODS or ``OTHER``: uvicorn's h11 fallback passes any token a client invents (3,000
invented methods once made 3,001 series).

Several workers: when ``PROMETHEUS_MULTIPROC_DIR`` is set (``rocke-aot serve --workers N``
sets it to a fresh directory), prometheus-client's multiprocess mode keeps each worker's
values in files there and ``render`` sums them, so any worker answers for all of them.
"""

from __future__ import annotations

import os
import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
ENV_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT"})


class Metrics:
    """One set of metric objects (one per app, so tests can build several apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("rocke_http_requests_total", "HTTP requests by route template, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("rocke_http_request_seconds", "Request latency by route template", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.bytes_served = Counter("rocke_bytes_served_total", "Body bytes of blob responses",
                                    ["encoding"], registry=r)
        self.lookups = Counter("rocke_lookups_total", "Kernel and blob lookups: found (hit) or not (miss)",
                               ["result"], registry=r)
        self.frame_cache = Counter("rocke_frame_cache_total", "In-memory verified-blob cache: hit or miss",
                                   ["result"], registry=r)
        self.not_modified = Counter("rocke_not_modified_total", "304 answers to If-None-Match", registry=r)
        self.verification_failures = Counter(
            "rocke_verification_failures_total", "Blobs refused because they failed verification", registry=r)
        # The hot path's children, bound once (labels() validates and takes a lock each call).
        self.lookup_hit, self.lookup_miss = self.lookups.labels("hit"), self.lookups.labels("miss")
        self.frame_hit, self.frame_miss = self.frame_cache.labels("hit"), self.frame_cache.labels("miss")
        self.served = {e: self.bytes_served.labels(e) for e in ("identity", "zstd")}
        self.publishes = Counter("rocke_publishes_total", "Publish attempts by outcome", ["outcome"], registry=r)

    def render(self) -> tuple[bytes, str]:
        if os.environ.get(ENV_MULTIPROC):
            from prometheus_client import multiprocess

            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)
            return generate_latest(reg), CONTENT_TYPE_LATEST
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class MetricsMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware: it would copy every body through a queue)."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics
        self._children: dict[tuple[str, str, int], tuple] = {}  # bounded: route templates x methods x statuses

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = [500]

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", None) or "<unmatched>"
            method = scope.get("method", "")
            k = (name, method if method in METHODS else "OTHER", status[0])
            children = self._children.get(k)
            if children is None:  # labels() validates and locks; keep the children per label set
                children = self._children[k] = (self.metrics.requests.labels(name, k[1], str(k[2])),
                                                self.metrics.latency.labels(name))
            children[0].inc()
            children[1].observe(time.perf_counter() - start)
