"""uvicorn's httptools protocol with bounded request heads (what `rocke-aot serve` runs).

    connection_made ── over MAX_CONNECTIONS open, or over MAX_PER_CLIENT from its address: the
                    │  oldest idle connection (no byte of a request received) of that set is closed
                    │  to make room; only when none is idle is the new one closed (no byte read):
                    │  1,100 idle connections never shut a new client out
                    └─ head timer: HEAD_TIMEOUT_S to deliver the request line and headers
    data_received   ── bytes of a head not yet complete > MAX_HEAD_BYTES: 431, closed
    on_headers_complete ── timer cancelled; the request runs (uvicorn's flow control then
                           pauses reading once 64 KiB of unread body are buffered)
    on_response_complete ── the next head gets the same budget (keep-alive idle time is
                           uvicorn's own timeout_keep_alive)

Why: uvicorn 0.55 bounds neither the size of a request head under httptools (an 8 MiB
header was answered 200; ten unfinished 50 MiB headers cost 500 MB) nor how long a client
may take to send it (one header line every few seconds kept a connection forever). A head
is the request line plus every header; 64 KiB holds any real client's (curl, httpx, nginx
send well under 8 KiB). What one connection can hold is then at most MAX_HEAD_BYTES plus
one read (asyncio reads up to 256 KiB at a time) before the check; docs/reliability.md
lists these bounds and the RSS measured while a hostile client runs.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rocke_aot import settings

MAX_HEAD_BYTES = 64 << 10
# seconds; read when a worker imports this module (settings.SERVE_HEAD_TIMEOUT_S)
HEAD_TIMEOUT_S = float(settings.integer(settings.SERVE_HEAD_TIMEOUT_S) or 10)
MAX_CONNECTIONS = 1024  # per worker; every one costs a head buffer at most (above)
MAX_PER_CLIENT = 256  # connections of one client address, per worker

_431 = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def _body(message: str) -> bytes:
    import json

    return json.dumps({"error": "HeadTooLarge", "message": message}).encode()


class BoundedHttpTools(HttpToolsProtocol):
    """HttpToolsProtocol plus the head bounds of the module doc (class attributes, so a test
    or a deployment can subclass with other numbers)."""

    max_head_bytes = MAX_HEAD_BYTES
    head_timeout_s = HEAD_TIMEOUT_S
    max_connections = MAX_CONNECTIONS
    max_per_client = MAX_PER_CLIENT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_bytes = 0
        self._in_head = True
        self._requests = 0
        self._made_at = self.loop.time()
        self._head_timer: asyncio.TimerHandle | None = None
        peer = transport.get_extra_info("peername")
        self._peer = peer[0] if isinstance(peer, tuple) and peer else None
        if len(self.connections) > self.max_connections and not self._make_room(None):
            transport.close()
            return
        if self._peer is not None:
            same = [c for c in self.connections if getattr(c, "_peer", None) == self._peer]
            if len(same) > self.max_per_client and not self._make_room(self._peer):
                transport.close()
                return
        self._arm()

    def _idle(self) -> bool:
        """Open, and no byte of a request received yet (a fresh connection, or one between requests)."""
        return (getattr(self, "_in_head", False) and getattr(self, "_head_bytes", 1) == 0
                and self.transport is not None and not self.transport.is_closing())

    def _make_room(self, peer: str | None) -> bool:
        """Close the oldest idle connection (of ``peer``, when given) other than this one: True if one was."""
        idle = [c for c in self.connections if c is not self and isinstance(c, BoundedHttpTools) and c._idle()
                and (peer is None or c._peer == peer)]
        if not idle:
            return False
        min(idle, key=lambda c: c._made_at).transport.close()
        return True

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self.transport.close()  # no answer: a client this slow is not reading one

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        if self._in_head:
            self._head_bytes += len(data)
            self._arm()
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            msg = _body(f"request line and headers over {self.max_head_bytes} bytes")
            self.transport.write(_431 % (len(msg), msg))
            self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._in_head = True
        self._head_bytes = 0
