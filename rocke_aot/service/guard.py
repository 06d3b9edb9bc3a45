"""The service's first middleware: refuse from the request head alone, and bound what any
one request may cost the others.

    request head ──> Guard
        PUT /v1/kernels/...   read-only server -> 403 ReadOnly; no or wrong bearer -> 401
                              Unauthorized: answered from the headers, the body never read
                              (uvicorn stops reading the socket once 64 KiB are buffered,
                              and "connection: close" drops the rest)
        a token over plain HTTP from a non-loopback client -> 403 PlainHTTP (unless allowed)
        POST/PUT/PATCH: the body received first, outside the in-flight slots: at most
                              max_reading at once (else 503 Busy), within body_timeout_s (else 408),
                              at most the size limit (else 413); then replayed to the app
        GET /healthz           never counted nor budgeted: answered however busy the server is
        in flight >= max_in_flight   -> 503 Busy (Retry-After), nothing else runs
        otherwise: the app, under a budget of budget_s seconds; a request that has not
        started its answer by then is answered 503 RequestBudget

Work that runs in a worker thread (a cold select, a blob read) cannot be interrupted; it
finishes, and the select slots (service/app.py) bound how many such threads there can be,
so the event loop and /healthz stay free (docs/reliability.md: "Bounds").
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Sequence

from rocke_aot.service import errors

DEFAULT_BUDGET_S = 30.0
DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_BODY_TIMEOUT_S = 30.0  # a request body must arrive whole within this (ROCKE_AOT_SERVE_BODY_TIMEOUT_S)
DEFAULT_MAX_READING = 64  # request bodies being received at once, per process (outside the in-flight slots)
BODY_METHODS = ("POST", "PUT", "PATCH")
LOOPBACK = ("127.", "::1", "::ffff:127.")


def tokens_of(token: str | tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """The publish tokens (one per tenant; a single str is one tenant), () when read-only."""
    if token is None:
        return ()
    got = (token,) if isinstance(token, str) else tuple(token)
    if not all(isinstance(t, str) and t for t in got):
        raise ValueError("publish tokens are non-empty strings")
    return got


def match_token(tokens: tuple[str, ...], got: bytes | str | None) -> str | None:
    """The token ``got`` equals (compared with every one, in constant time each), else None."""
    if got is None or not tokens:
        return None
    raw = got.encode() if isinstance(got, str) else got
    found = None
    for t in tokens:
        if hmac.compare_digest(raw, t.encode()):
            found = t
    return found


def _loopback(scope) -> bool:
    client = scope.get("client")
    return bool(client) and isinstance(client[0], str) and client[0].startswith(LOOPBACK)


def _bearer(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"authorization":
            scheme, _, cred = value.partition(b" ")
            return cred.strip() if scheme.lower() == b"bearer" and cred.strip() else None
    return None


async def answer(send, status: int, error: str, message: str, *, close: bool = False,
                 extra: Sequence[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(errors.body(error, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *extra]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class Guard:
    """Pure ASGI middleware (module doc). ``token`` None: the server is read-only."""

    def __init__(self, app, *, token: str | tuple[str, ...] | None, budget_s: float = DEFAULT_BUDGET_S,
                 max_in_flight: int = DEFAULT_MAX_IN_FLIGHT, on_refusal=None, max_body: int = 64 << 10,
                 max_publish: int = 16 << 20, body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
                 max_reading: int = DEFAULT_MAX_READING, plain_tokens: bool = False):
        self.app = app
        self.tokens = tokens_of(token)
        self.max_body, self.max_publish = max_body, max_publish
        self.body_timeout_s, self.max_reading, self.reading = body_timeout_s, max_reading, 0
        self.plain_tokens = plain_tokens  # tokens accepted over plain HTTP from a non-loopback client
        self.budget_s = budget_s
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.on_refusal = on_refusal  # (outcome) -> None: the publish metric

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if scope["path"] == "/healthz":  # never in the request pool: a full server still answers it
            return await self.app(scope, receive, send)
        if scope["method"] not in ("GET", "HEAD", "POST", "OPTIONS"):
            refusal = self._auth(scope)
            if refusal is not None:
                if self.on_refusal is not None:
                    self.on_refusal(refusal[1])
                return await answer(send, *refusal, close=True)
        if scope["method"] in BODY_METHODS:
            # the body is received before the request takes an in-flight slot, by at most
            # max_reading requests at once and within body_timeout_s: slow senders wait here, not
            # in the slots every other request needs
            got = await self._receive_body(scope, receive, send)
            if got is None:
                return
            receive = got
        if self.in_flight >= self.max_in_flight:
            return await answer(send, 503, "Busy", f"over {self.max_in_flight} requests in flight; retry later",
                                extra=[(b"retry-after", b"1")])
        self.in_flight += 1
        started = False

        async def tracked(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            async with asyncio.timeout(self.budget_s):
                await self.app(scope, receive, tracked)
        except TimeoutError:
            if not started:
                await answer(send, 503, "RequestBudget", f"the request ran over its {self.budget_s:g} s budget",
                             close=True)
        finally:
            self.in_flight -= 1

    async def _receive_body(self, scope, receive, send):
        """A receive() replaying the whole body, or None once an answer was sent (503 when too many
        bodies are being received, 408 past the deadline, 413 over the size limit)."""
        limit = self.max_publish if scope["method"] == "PUT" else self.max_body
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            await answer(send, 413, "TooLarge", f"request body over the {limit}-byte limit", close=True)
            return None
        if self.reading >= self.max_reading:
            await answer(send, 503, "Busy", f"over {self.max_reading} request bodies being received; retry later",
                         close=True, extra=[(b"retry-after", b"1")])
            return None
        self.reading += 1
        chunks, total = [], 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                more = True
                while more:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return None
                    chunk = msg.get("body", b"")
                    total += len(chunk)
                    if total > limit:
                        await answer(send, 413, "TooLarge", f"request body over the {limit}-byte limit", close=True)
                        return None
                    chunks.append(chunk)
                    more = msg.get("more_body", False)
        except TimeoutError:
            await answer(send, 408, "BodyTimeout", f"the request body did not arrive within {self.body_timeout_s:g} s",
                         close=True)
            return None
        finally:
            self.reading -= 1
        whole, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()

        return replay

    def _auth(self, scope) -> tuple[int, str, str] | None:
        """(status, error, message) when the head alone decides a write is refused."""
        if not self.tokens:
            return 403, "ReadOnly", "this server is read-only: it was started without a publish token"
        if not self.plain_tokens and scope.get("scheme") != "https" and not _loopback(scope):
            return 403, "PlainHTTP", ("a publish token is taken over HTTPS only (serve --tls-cert/--tls-key), or from "
                                      "loopback, unless the server allows plain tokens (--allow-plain-tokens)")
        if match_token(self.tokens, _bearer(scope["headers"])) is None:
            return 401, "Unauthorized", "a publish needs the server's bearer token (Authorization: Bearer ...)"
        return None
