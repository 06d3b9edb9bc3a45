"""The service's overload answers (service/guard.py), driven through the ASGI protocol itself (the
messages uvicorn exchanges with the app: http.request in, http.response.start/body out), so each
answer is the bytes a client would get:

    over max_in_flight   -> 503 Busy, Retry-After: 1, the error body; the app never runs; the
                            slot count returns to 0 when the held requests finish, and the next runs
    over budget_s        -> 503 RequestBudget, Connection: close, when the app had not started its
                            answer; an answer already started is left as it is (no second start)
    a write's head       -> 403 ReadOnly (no token), 401 Unauthorized (no or wrong bearer), the body
                            never read; the refusal reported to on_refusal; the right token runs the app
"""

from __future__ import annotations

import asyncio
import json

from rocke_aot.service.guard import Guard


def _scope(method="GET", path="/v1/select", headers=()):
    # a loopback client: a token over plain HTTP is taken from it (tests/test_service_hygiene.py: from others, 403)
    return {"type": "http", "method": method, "path": path, "headers": list(headers), "scheme": "http",
            "client": ("127.0.0.1", 50000)}


class _App:
    """An app that answers 200 "ok", after ``wait`` (an Event) or ``delay`` seconds; ``early``: it
    starts its answer before waiting."""

    def __init__(self, wait: asyncio.Event | None = None, delay: float = 0.0, early: bool = False):
        self.wait, self.delay, self.early, self.calls, self.read = wait, delay, early, 0, 0

    async def __call__(self, scope, receive, send):
        self.calls += 1
        if self.early:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        if self.wait is not None:
            await self.wait.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if not self.early:
            await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def _request(app, scope, body=b"x" * 10):
    sent = []
    reads = []

    async def receive():
        reads.append(1)
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, sent  # exactly one answer, never a second start
    payload = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return starts[0]["status"], dict(starts[0]["headers"]), payload, len(reads)


def test_over_max_in_flight_is_503_busy_with_retry_after():
    async def main():
        gate = asyncio.Event()
        inner = _App(wait=gate)
        guard = Guard(inner, token=None, max_in_flight=2)
        held = [asyncio.create_task(_request(guard, _scope())) for _ in range(2)]
        await asyncio.sleep(0.05)
        assert guard.in_flight == 2 and inner.calls == 2
        status, headers, payload, _ = await _request(guard, _scope())
        assert status == 503 and headers[b"retry-after"] == b"1"
        assert headers[b"content-type"] == b"application/json" and int(headers[b"content-length"]) == len(payload)
        assert json.loads(payload) == {"error": "Busy", "message": "over 2 requests in flight; retry later"}
        assert inner.calls == 2  # the refused request never reached the app
        gate.set()
        assert [(s, p) for s, _, p, _ in await asyncio.gather(*held)] == [(200, b"ok")] * 2
        assert guard.in_flight == 0
        assert (await _request(guard, _scope()))[:1] == (200,) and inner.calls == 3

    asyncio.run(main())


def test_over_budget_is_503_request_budget_unless_the_answer_started():
    async def main():
        slow = Guard(_App(delay=5.0), token=None, budget_s=0.05)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        status, headers, payload, _ = await _request(slow, _scope())
        assert loop.time() - t0 < 2.0  # answered at the budget, not after the app's 5 s
        assert status == 503 and headers[b"connection"] == b"close"
        assert json.loads(payload) == {"error": "RequestBudget", "message": "the request ran over its 0.05 s budget"}
        assert slow.in_flight == 0
        started = Guard(_App(delay=5.0, early=True), token=None, budget_s=0.05)
        status, headers, payload, _ = await _request(started, _scope())
        assert status == 200 and payload == b""  # the started answer stands; it is cut, not replaced
        assert started.in_flight == 0

    asyncio.run(main())


def test_a_write_is_refused_from_its_head():
    async def main():
        refusals = []
        app = _App()
        ro = Guard(app, token=None, on_refusal=refusals.append)
        status, headers, payload, reads = await _request(ro, _scope("PUT", "/v1/kernels/k"))
        assert (status, json.loads(payload)["error"], headers[b"connection"], reads) == (403, "ReadOnly", b"close", 0)
        rw = Guard(app, token="s3cret", on_refusal=refusals.append)
        for auth in ((), ((b"authorization", b"Bearer nope"),), ((b"authorization", b"Basic s3cret"),)):
            status, _, payload, reads = await _request(rw, _scope("PUT", "/v1/kernels/k", auth))
            assert (status, json.loads(payload)["error"], reads) == (401, "Unauthorized", 0)
        assert refusals == ["ReadOnly", "Unauthorized", "Unauthorized", "Unauthorized"] and app.calls == 0
        status, _, payload, _ = await _request(rw, _scope("PUT", "/v1/kernels/k", ((b"authorization", b"Bearer s3cret"),)))
        assert (status, payload, app.calls) == (200, b"ok", 1)
        assert (await _request(ro, _scope("GET")))[0] == 200  # reads need no token

    asyncio.run(main())
