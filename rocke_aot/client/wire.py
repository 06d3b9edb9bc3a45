"""The one bounded HTTP exchange every client uses (client/sources.py's module doc says what it
guarantees: an overall deadline down to every socket read, no redirects, the body as sent on
the wire, sizes bounded before reading, retries with backoff inside the deadline).

Two ways onto the network, one contract:
    _CorePool     the default: an httpcore connection pool (httpx's own transport layer), used
                  directly. The exchange needs a status, headers and raw body chunks, never
                  httpx's content decoding, cookies, redirects or request building; going
                  through httpx.Client's streaming machinery cost a verified fetch about a
                  third of its client CPU (docs/trust.md, "Fetch cost, measured")
    _HttpxClient  an httpx.Client: one a caller injected (tests route it to an ASGI app or an
                  httpx.MockTransport; service/client.py passes one through), or the one built
                  when the environment names a proxy for the URL (httpx mounts its proxy
                  transports from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY)
Either one's transport failures become one of two things in _failure(), the only place that
names httpcore's or httpx's exception classes: a timeout (DeadlineError once the deadline is
spent) or a transport failure (retried, then SourceError).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpcore

from rocke_aot.errors import AnswerTooLargeError, CacheError, DeadlineError, RedirectError, SourceError

# httpx loads only where an httpx.Client is used (injected, or for a proxy) or TLS is set up: a
# plain-HTTP mirror's fetch runs on httpcore alone (bench/bench_fetch_process.py)
if TYPE_CHECKING:
    import httpx

MAX_ERROR_BODY = 64 << 10  # an error answer's body is read this far, the rest dropped
DEADLINE_S = 120.0  # one call: every attempt, read and backoff sleep
USER_AGENT = "rocke-aot-client"
_USER_AGENT = (b"User-Agent", USER_AGENT.encode())

__all__ = ["DEADLINE_S", "MAX_ERROR_BODY", "Answer", "Headers", "Wire", "http_client"]


# ---- the deadline, down to every socket read -------------------------------------------------

_call = threading.local()  # .end: time.monotonic() by which the current call must finish


def _left(timeout: float | None, exc: type[Exception]) -> float | None:
    end = getattr(_call, "end", None)
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise exc("the call's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket stream whose every read/write waits at most until the call's deadline."""

    def __init__(self, inner: httpcore.NetworkStream):
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if buffer:  # h11 hands over an empty end of a bodiless request: nothing to send, no clock read
            self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname,
                                                     _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                       local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        return _DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                               socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def http_client(timeout: float = 30.0) -> httpx.Client:
    """An httpx.Client whose sockets honour the deadline of the Wire call using them (its own
    transport and any proxy transport httpx mounted from the environment). httpcore's pool
    takes a network backend; httpx builds the pool itself, so the backend is wrapped in place
    (tests/test_hostile_client.py's trickle case fails if a new httpx stops allowing it)."""
    import httpx

    client = httpx.Client(timeout=timeout, follow_redirects=False)
    for transport in (client._transport, *client._mounts.values()):  # noqa: SLF001 - see above
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if pool is not None and backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # noqa: SLF001
    return client


# ---- two transports, one shape: (status, headers, raw body chunks) -----------------------------

class Headers(Mapping):
    """An answer's headers from httpcore's (name, value) byte pairs: read-only, names
    case-insensitive, a repeated name's values joined by ", " (as httpx.Headers reads them).
    httpx.Headers would do, at about ten times the cost per answer (it keeps every spelling
    and normalizes eagerly): a blob's GET reads two headers."""

    __slots__ = ("_d",)

    def __init__(self, raw: list[tuple[bytes, bytes]]):
        d: dict[str, str] = {}
        for k, v in raw:
            name, value = k.decode("latin-1").lower(), v.decode("latin-1")
            d[name] = f"{d[name]}, {value}" if name in d else value
        self._d = d

    def __getitem__(self, name: str) -> str:
        return self._d[name.lower()]

    def get(self, name: str, default=None):
        return self._d.get(name.lower(), default)

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"Headers({self._d!r})"


class _CorePool:
    """httpcore's connection pool with the deadline backend: the limits httpx.Client uses by
    default (100 connections, 20 kept alive for 5 s), httpx's TLS context (certifi, or
    SSL_CERT_FILE / SSL_CERT_DIR) for an https:// URL only: loading the CA bundle costs tens of
    milliseconds, which a plain-HTTP mirror on a LAN need not pay at start-up."""

    def __init__(self, url: str):
        tls = None
        if url.startswith("https://"):
            import httpx

            tls = httpx.create_ssl_context()
        self._pool = httpcore.ConnectionPool(
            ssl_context=tls, max_connections=100, max_keepalive_connections=20,
            keepalive_expiry=5.0, network_backend=_DeadlineBackend(httpcore.SyncBackend()))
        # The base URL parsed once (by httpcore, as it would parse each request's): a URL
        # string costs a urllib parse per request, most of what this exchange adds to a bare
        # GET (bench/bench_mirror.py's per-step line); each request only appends its path.
        base = httpcore.URL(url)
        self._origin = (base.scheme, base.host, base.port)
        self._prefix = base.target.rstrip(b"/")

    def close(self) -> None:
        self._pool.close()

    @contextmanager
    def exchange(self, method: str, url: str, headers: dict[str, str] | None, json_body: Any, timeout: float,
                 path: str):
        scheme, host, port = self._origin
        target = httpcore.URL(scheme=scheme, host=host, port=port, target=self._prefix + path.encode("ascii"))
        head = [_USER_AGENT]
        head += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
        # httpcore adds Host, and Content-Length for bytes content (none for a bodiless GET)
        content = None if method in ("GET", "HEAD") else b""
        if isinstance(json_body, bytes):  # a body already encoded (a signed metadata file, as signed)
            content = json_body
        elif json_body is not None:
            content = json.dumps(json_body, separators=(",", ":"), allow_nan=False).encode()
            head.append((b"Content-Type", b"application/json"))
        ext = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}}
        with self._pool.stream(method.encode(), target, headers=head, content=content, extensions=ext) as r:
            yield r.status, Headers(r.headers), r.iter_stream()


class _HttpxClient:
    """An httpx.Client (module doc: injected, or for a proxy)."""

    def __init__(self, client: httpx.Client, own: bool):
        self._client, self._own = client, own

    def close(self) -> None:
        if self._own:
            self._client.close()

    @contextmanager
    def exchange(self, method: str, url: str, headers: dict[str, str] | None, json_body: Any, timeout: float,
                 path: str):
        import httpx

        body = {"content": json_body} if isinstance(json_body, bytes) else {"json": json_body}
        with self._client.stream(method, url, headers=headers, **body, follow_redirects=False,
                                 timeout=httpx.Timeout(timeout)) as r:
            # (an answer made in memory, e.g. by httpx.MockTransport, is already read: its bytes)
            yield r.status_code, r.headers, iter([r.content]) if r.is_stream_consumed else r.iter_raw()


_TIMEOUTS = (httpcore.TimeoutException,)
_TRANSPORT = (httpcore.NetworkError, httpcore.ProtocolError, httpcore.ProxyError, httpcore.UnsupportedProtocol)


def _failure(e: BaseException) -> str | None:
    """What a transport exception means to Wire.request: "timeout", "transport", or None (not a
    transport failure: it propagates). The one place that knows httpcore's and httpx's classes
    (httpx's only where httpx is loaded: no httpx exception is raised before it is)."""
    httpx = sys.modules.get("httpx")
    if isinstance(e, _TIMEOUTS) or (httpx is not None and isinstance(e, httpx.TimeoutException)):
        return "timeout"
    if isinstance(e, _TRANSPORT) or (httpx is not None and isinstance(e, httpx.TransportError)):
        return "transport"
    return None


def _proxied(url: str) -> bool:
    """Whether the environment names a proxy for ``url`` (the variables httpx reads)."""
    proxies = urllib.request.getproxies_environment()
    if not (proxies.get(urlsplit(url).scheme) or proxies.get("all")):
        return False
    # typeshed leaves out proxy_bypass_environment (CPython has it since 3.3; httpx's rule is the same)
    return not urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
        urlsplit(url).hostname or "", proxies)


# ---- one bounded exchange ----------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """A final (non-3xx) answer: its status, headers and the body as sent, bounded."""

    method: str
    url: str
    status: int
    headers: Mapping  # Headers, or an injected httpx.Client's httpx.Headers: .get(name) either way
    body: bytes

    @property
    def where(self) -> str:
        return f"{self.method} {self.url}"


class _Retry(Exception):
    def __init__(self, answer: Answer):
        self.answer = answer


class Wire:
    """Bounded, retried HTTP calls to one base URL under an overall deadline (module doc).

    ``http`` injects an httpx.Client (tests; the deadline is then checked between reads only,
    unless it came from http_client()); without it the calls go through an httpcore pool (or
    http_client() when the environment names a proxy). ``retries`` and ``backoff`` bound the
    retry loop (sleeps backoff, 2*backoff, ...); ``timeout`` bounds each connect/read;
    ``deadline_s`` the whole call.
    """

    def __init__(self, url: str, *, http: httpx.Client | None = None, retries: int = 2, backoff: float = 0.1,
                 timeout: float = 30.0, deadline_s: float | None = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise CacheError(f"a source URL is http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        if http is not None:
            self._net: _CorePool | _HttpxClient = _HttpxClient(http, own=False)
        elif _proxied(self.url):
            self._net = _HttpxClient(http_client(timeout), own=True)
        else:
            self._net = _CorePool(self.url)
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.deadline_s = DEADLINE_S if deadline_s is None else float(deadline_s)
        self._lock = threading.Lock()  # Fetcher.get_many's threads share a source (both pools are thread-safe)
        self._requests = 0

    @property
    def requests(self) -> int:
        """How many requests this Wire sent (each retry counts)."""
        return self._requests

    def close(self) -> None:
        self._net.close()

    def request(self, method: str, path: str, *, limit: int, headers: dict[str, str] | None = None,
                json_body: Any = None) -> Answer:
        """The final answer to ``method url+path`` (any status but 3xx; 5xx only once retries
        are spent), its body at most ``limit`` bytes as sent on the wire."""
        url = self.url + path
        end = time.monotonic() + self.deadline_s
        delay = self.backoff
        for attempt in range(self.retries + 1):
            with self._lock:
                self._requests += 1
            try:
                return self._once(method, url, path, limit, headers, json_body, end)
            except _Retry as r:
                if attempt == self.retries:
                    return r.answer
            except Exception as e:
                kind = _failure(e)
                if kind is None:
                    raise
                if kind == "timeout" and time.monotonic() >= end - 0.05:
                    raise DeadlineError(f"{method} {url}: not answered within the {self.deadline_s:g} s deadline "
                                        f"(attempt {attempt + 1}; {type(e).__name__})") from None
                if attempt == self.retries:
                    raise SourceError(f"{method} {url}: {type(e).__name__}: {e} "
                                      f"(after {attempt + 1} attempts)") from None
            pause = min(delay, end - time.monotonic())
            if pause <= 0:
                raise DeadlineError(f"{method} {url}: not answered within the {self.deadline_s:g} s deadline "
                                    f"(after {attempt + 1} attempts)")
            time.sleep(pause)
            delay *= 2
        raise AssertionError("unreachable")

    def _once(self, method: str, url: str, path: str, limit: int, headers, json_body, end: float) -> Answer:
        left = end - time.monotonic()
        if left <= 0:
            raise DeadlineError(f"{method} {url}: the {self.deadline_s:g} s deadline passed before it was sent")
        _call.end = end
        try:
            with self._net.exchange(method, url, headers, json_body, min(self.timeout, left),
                                    path) as (status, hdrs, chunks):
                if 300 <= status < 400:
                    where = hdrs.get("location")
                    raise RedirectError(f"{method} {url} -> {status}, redirected to "
                                        f"{(where or '')[:200]!r}: redirects are not followed; give the "
                                        f"final URL")
                cap = limit if status < 400 else MAX_ERROR_BODY
                declared = hdrs.get("content-length", "")
                if status < 400 and declared.isdigit() and int(declared) > cap:
                    raise AnswerTooLargeError(f"{method} {url}: {declared} bytes announced, the limit is {cap}")
                body = _bounded(chunks, cap, f"{method} {url}", end, self.deadline_s, truncate=status >= 400)
                answer = Answer(method, url, status, hdrs, body)
        finally:
            _call.end = None
        if status >= 500:
            raise _Retry(answer)
        return answer


def _bounded(chunks: Iterator[bytes], cap: int, where: str, end: float, deadline_s: float, *,
             truncate: bool) -> bytes:
    out, n = [], 0
    for chunk in chunks:
        if time.monotonic() > end:
            raise DeadlineError(f"{where}: the body did not arrive within the {deadline_s:g} s deadline "
                                f"({n} bytes by then)")
        n += len(chunk)
        if n > cap:
            if truncate:
                out.append(chunk[:cap - (n - len(chunk))])
                break
            raise AnswerTooLargeError(f"{where}: over {cap} bytes sent (reading stopped there)")
        out.append(chunk)
    return b"".join(out)


