"""Where a client gets bytes from, and the one bounded HTTP exchange every client uses.

    Wire(url)            one base URL; request(method, path, limit=...) -> Answer(status, headers, body)
        every call: an overall deadline (deadline_s, retries and backoff included; each socket
            read and write is given at most the time left, so a server trickling one byte every
            few seconds ends in DeadlineError at the deadline, not at a per-read timeout)
        redirects never followed: a 3xx is RedirectError naming the URL and its Location
        the body as sent on the wire (no transparent gzip: a JSON document is asked for with
            Accept-Encoding: identity, and one that comes compressed anyway is refused)
        sizes bounded before reading: a Content-Length over the limit is refused unread, a
            streamed body is read until the limit and no further (AnswerTooLargeError);
            error bodies are read up to MAX_ERROR_BODY
        connection errors and 5xx answers retried with exponential backoff inside the deadline
    document(answer, what) -> dict   strict JSON: identity encoding, JSON, an object (or
                                     MalformedAnswerError); field() reads one typed field

    ServiceSource(url)   rocke-aot serve:  GET /v1/trust/<name>      signed metadata
                                           GET /v1/kernels/<key>/meta a server's record (unsigned)
                                           GET /v1/blobs/<sha256>     zstd frame or raw bytes
                                           GET /v1/triton/<key>       a Triton cache entry
    MirrorSource(url)    any HTTP server:  GET <url>/<name>           signed metadata
                                           GET <url>/blobs/<sha256>.zst  a zstd frame
                                           GET <url>/triton/<key>.json   a Triton cache entry
                         (triton_path(key): where each keeps the entry client/triton_cache.py reads)

Every value a server supplies is checked before it is used: a sha256 or key is 64 lowercase
hex digits before it goes into a URL, a record passes Kernel.from_record (its inputs hash to the
key asked, the record schema of rocke_aot/record.py) and names the key asked, and every blob is
checked against the sha256 and size the caller names. A source is never trusted, it only
carries bytes. service/client.py's Client makes its requests through a ServiceSource's Wire:
both clients share this one implementation. 404 is NotFoundError; the service's error bodies
become the library's named errors (ServiceSource), any other status SourceError naming the URL.
"""

from __future__ import annotations

import abc
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

import httpcore
import httpx
import zstandard

from rocke_aot import errors
from rocke_aot.cache import codec
from rocke_aot.cache.keys import check_key
from rocke_aot.client.local import MAX_CODE_OBJECT, Kernel, check_bytes, check_record, check_sha
from rocke_aot.errors import (
    AnswerTooLargeError,
    CacheError,
    DeadlineError,
    IntegrityError,
    LaneError,
    MalformedAnswerError,
    NotFoundError,
    RedirectError,
    RemoteError,
    RockeError,
    SourceError,
    SpecError,
)

MAX_BLOB = MAX_CODE_OBJECT  # 256 MiB; a code object is kilobytes to megabytes
MAX_METADATA = 64 << 20  # a manifest of every kernel of a big build is a few megabytes
MAX_RECORD = 4 << 20  # one /meta answer: metadata and provenance are at most 1 MiB each (record.py)
MAX_DOCUMENT = 16 << 20  # a select answer (1,000 accepted + 1,000 rejected rows), a listing page
MAX_ERROR_BODY = 64 << 10  # an error answer's body is read this far, the rest dropped
DEADLINE_S = 120.0  # one call: every attempt, read and backoff sleep
BLOB_SLACK = 1 << 16  # a zstd frame of incompressible bytes is a little larger than they are

JSON_HEADERS = {"Accept": "application/json", "Accept-Encoding": "identity"}
BLOB_HEADERS = {"Accept-Encoding": "zstd, identity;q=0.5"}

__all__ = ["BLOB_HEADERS", "DEADLINE_S", "JSON_HEADERS", "MAX_BLOB", "MAX_DOCUMENT", "MAX_ERROR_BODY",
           "MAX_METADATA", "MAX_RECORD", "Answer", "MirrorSource", "ServiceSource", "Source", "SourceError",
           "Wire", "document", "field", "http_client"]


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
    client = httpx.Client(timeout=timeout, follow_redirects=False)
    for transport in (client._transport, *client._mounts.values()):  # noqa: SLF001 - see above
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if backend is not None and not isinstance(backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(backend)  # noqa: SLF001
    return client


# ---- one bounded exchange ----------------------------------------------------------------------

@dataclass(frozen=True)
class Answer:
    """A final (non-3xx) answer: its status, headers and the body as sent, bounded."""

    method: str
    url: str
    status: int
    headers: httpx.Headers
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
    unless it came from http_client()); ``retries`` and ``backoff`` bound the retry loop
    (sleeps backoff, 2*backoff, ...); ``timeout`` bounds each connect/read; ``deadline_s`` the
    whole call.
    """

    def __init__(self, url: str, *, http: httpx.Client | None = None, retries: int = 2, backoff: float = 0.1,
                 timeout: float = 30.0, deadline_s: float | None = None):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise CacheError(f"a source URL is http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self._http = http or http_client(timeout)
        self._own_http = http is None
        self.retries, self.backoff, self.timeout = retries, backoff, timeout
        self.deadline_s = DEADLINE_S if deadline_s is None else float(deadline_s)
        self._lock = threading.Lock()  # Fetcher.get_many's threads share a source (httpx.Client is thread-safe)
        self._requests = 0

    @property
    def requests(self) -> int:
        """How many requests this Wire sent (each retry counts)."""
        return self._requests

    def close(self) -> None:
        if self._own_http:
            self._http.close()

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
                return self._once(method, url, limit, headers, json_body, end)
            except _Retry as r:
                if attempt == self.retries:
                    return r.answer
            except httpx.TransportError as e:
                if isinstance(e, httpx.TimeoutException) and time.monotonic() >= end - 0.05:
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

    def _once(self, method: str, url: str, limit: int, headers, json_body, end: float) -> Answer:
        left = end - time.monotonic()
        if left <= 0:
            raise DeadlineError(f"{method} {url}: the {self.deadline_s:g} s deadline passed before it was sent")
        _call.end = end
        try:
            with self._http.stream(method, url, headers=headers, json=json_body, follow_redirects=False,
                                   timeout=httpx.Timeout(min(self.timeout, left))) as r:
                status = r.status_code
                if 300 <= status < 400:
                    where = r.headers.get("location")
                    raise RedirectError(f"{method} {url} -> {status}, redirected to "
                                        f"{(where or '')[:200]!r}: redirects are not followed; give the "
                                        f"final URL")
                cap = limit if status < 400 else MAX_ERROR_BODY
                declared = r.headers.get("content-length", "")
                if status < 400 and declared.isdigit() and int(declared) > cap:
                    raise AnswerTooLargeError(f"{method} {url}: {declared} bytes announced, the limit is {cap}")
                # (an answer made in memory, e.g. by httpx.MockTransport, is already read: its bytes)
                chunks = iter([r.content]) if r.is_stream_consumed else r.iter_raw()
                body = _bounded(chunks, cap, f"{method} {url}", end, self.deadline_s, truncate=status >= 400)
                answer = Answer(method, url, status, r.headers, body)
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


# ---- strict documents ----------------------------------------------------------------------------

def document(answer: Answer, what: str) -> dict[str, Any]:
    """``answer``'s body as a JSON object: identity encoding, valid JSON, an object."""
    enc = answer.headers.get("content-encoding", "identity").strip().lower()
    if enc not in ("", "identity"):
        raise MalformedAnswerError(f"{what} from {answer.url} came with Content-Encoding {enc[:40]!r}; "
                                   "a JSON document is asked for, and accepted, with identity encoding only")
    try:
        out = json.loads(answer.body)
    except (ValueError, RecursionError) as e:
        raise MalformedAnswerError(f"{what} from {answer.url} is not JSON ({type(e).__name__}: "
                                   f"{str(e)[:200]})") from None
    if not isinstance(out, dict):
        raise MalformedAnswerError(f"{what} from {answer.url} is a JSON {type(out).__name__}, not an object")
    return out


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean", dict: "an object",
               list: "a list", type(None): "null"}


def field(doc: Any, name: str, types: type | tuple[type, ...], what: str, *, required: bool = True) -> Any:
    """``doc[name]`` if it is one of ``types`` (bool is never an int; an int is a float),
    else MalformedAnswerError naming the field; absent and not required: None."""
    if not isinstance(doc, dict):
        raise MalformedAnswerError(f"{what}: expected an object, got {type(doc).__name__}")
    if name not in doc:
        if required:
            raise MalformedAnswerError(f"{what}: the field {name!r} is missing")
        return None
    v = doc[name]
    types = types if isinstance(types, tuple) else (types,)
    ok = isinstance(v, types) and not (isinstance(v, bool) and bool not in types)
    if not ok and float in types and isinstance(v, int) and not isinstance(v, bool):
        ok = True
    if not ok:
        want = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise MalformedAnswerError(f"{what}: the field {name!r} must be {want}, got {type(v).__name__}")
    return v


# ---- sources -------------------------------------------------------------------------------------

class Source(abc.ABC):
    """A base URL and the Wire every source reads it through."""

    kind = "source"

    def __init__(self, url: str, *, http: httpx.Client | None = None, retries: int = 2, backoff: float = 0.1,
                 timeout: float = 30.0, deadline_s: float | None = None):
        self.wire = Wire(url, http=http, retries=retries, backoff=backoff, timeout=timeout, deadline_s=deadline_s)
        self.url = self.wire.url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    @property
    def requests(self) -> int:
        return self.wire.requests

    def close(self) -> None:
        self.wire.close()

    def call(self, method: str, path: str, limit: int, headers: dict[str, str] | None = None,
             json_body: Any = None) -> Answer:
        """A 2xx answer, or the named error its status (and body) stands for."""
        ans = self.wire.request(method, path, limit=limit, headers=headers, json_body=json_body)
        if ans.status >= 400 or ans.status < 200:
            raise self.refusal(ans)
        return ans

    def get(self, path: str, limit: int, headers: dict[str, str] | None = None) -> tuple[bytes, httpx.Headers]:
        """The body of GET url+path as sent on the wire (no content decoding), at most ``limit``."""
        ans = self.call("GET", path, limit, headers)
        if ans.status != 200:
            raise SourceError(f"{ans.where} -> {ans.status}, expected 200")
        return ans.body, ans.headers

    def refusal(self, ans: Answer) -> RockeError:
        if ans.status == 404:
            return NotFoundError(f"{ans.url}: 404")
        return SourceError(f"{ans.where} -> {ans.status}")

    def metadata(self, name: str) -> bytes:
        """A signed metadata document (root.json, index.json, manifest.json) as sent."""
        body, headers = self.get(self._metadata_path(name), MAX_METADATA, JSON_HEADERS)
        enc = headers.get("content-encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise MalformedAnswerError(f"{name} from {self.url} came with Content-Encoding {enc[:40]!r}; "
                                       "identity was asked for")
        return body

    @abc.abstractmethod
    def blob(self, sha256: str, size: int | None) -> bytes:
        """The raw code object with this sha256 (and size), verified, or IntegrityError."""

    @abc.abstractmethod
    def _metadata_path(self, name: str) -> str:
        """The path of a metadata document under this source's URL."""

    @abc.abstractmethod
    def triton_path(self, key: str) -> str:
        """The path of the Triton cache entry of Triton's cache ``key`` (the caller checked its shape)."""


def _decode_frame(frame: bytes, sha: str, size: int | None, where: str) -> bytes:
    try:
        claimed = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"blob {sha} from {where}: not a zstd frame ({e})") from None
    if size is None:
        if claimed < 0 or claimed > MAX_BLOB:
            raise IntegrityError(f"blob {sha} from {where}: the frame claims {claimed} bytes "
                                 f"(unknown or over {MAX_BLOB})")
        size = claimed
    if claimed != size:
        raise IntegrityError(f"blob {sha} from {where}: the frame claims {claimed} bytes, expected {size}")
    return codec.decode(frame, sha, size)  # bounded decompress + size + sha256


def _blob_limit(size: int | None) -> int:
    return MAX_BLOB + BLOB_SLACK if size is None else min(size + BLOB_SLACK, MAX_BLOB + BLOB_SLACK)


# The service's error bodies ({"error": name, "message": ...}) as the library's named errors.
_BY_NAME: dict[str, type[RockeError]] = {
    c.__name__: c for c in (LaneError, IntegrityError, errors.Unauthorized, errors.ReadOnly, errors.Conflict,
                            errors.TooLarge, errors.TrustError, errors.SignatureError, errors.UnlistedKeyError,
                            errors.ExpiredError, errors.RollbackError, errors.BlobMismatchError,
                            errors.MixedGenerationError)
}
_BY_STATUS: dict[int, type[RockeError]] = {
    401: errors.Unauthorized, 403: errors.ReadOnly, 404: NotFoundError, 409: errors.Conflict, 413: errors.TooLarge,
    422: SpecError,
}


class ServiceSource(Source):
    """``rocke-aot serve`` at ``url``."""

    kind = "service"

    def _metadata_path(self, name: str) -> str:
        return f"/v1/trust/{name}"

    def triton_path(self, key: str) -> str:
        return f"/v1/triton/{key}"

    def refusal(self, ans: Answer) -> RockeError:
        """The service's error body as the library's named error (404 NotFoundError, 422
        SpecError or LaneError, 500 IntegrityError, 401 Unauthorized, ...); the server's words
        are quoted, at most 500 characters, never used to pick a class outside this table."""
        name, message = "", ans.body[:500].decode("utf-8", "replace")
        try:
            err = json.loads(ans.body)
        except (ValueError, RecursionError):
            err = None
        if isinstance(err, dict):
            name = err.get("error") if isinstance(err.get("error"), str) else ""
            if isinstance(err.get("message"), str):
                message = err["message"][:500]
        cls = _BY_NAME.get(name) or _BY_STATUS.get(ans.status)
        if name == "FieldError" and isinstance(err, dict) and str(err.get("field", "")).startswith("lane"):
            cls = LaneError
        where = f"{ans.where} -> {ans.status}"
        if cls is None:
            return RemoteError(f"{where}: {name or 'error'}: {message}", ans.status)
        return cls(f"{where}: {message}")

    def record(self, key: str) -> Kernel:
        """The server's record of ``key`` (its /meta answer) as a Kernel: strict JSON, the
        inputs hash to ``key``, the record schema holds (rocke_aot/record.py); anything else is
        MalformedAnswerError naming the field."""
        check_key(key)
        ans = self.call("GET", f"/v1/kernels/{key}/meta", MAX_RECORD, JSON_HEADERS)
        doc = document(ans, f"the record of {key}")
        try:  # where it came from is this client's word, never the server's
            k = check_record({**doc, "origin": {"source": self.url, "signed": False}})
        except IntegrityError as e:
            raise errors.AnswerMismatchError(f"the record of {key} from {self.url}: {e}") from None
        except (SpecError, LaneError, KeyError, TypeError) as e:  # a missing or ill-typed field
            raise MalformedAnswerError(f"the record of {key} from {self.url}: {e}") from None
        if k.key != key:
            raise errors.AnswerMismatchError(f"{self.url} answered the record of {k.key} for {key}")
        return k

    def blob(self, sha256: str, size: int | None) -> bytes:
        check_sha(sha256)
        body, headers = self.get(f"/v1/blobs/{sha256}", _blob_limit(size), BLOB_HEADERS)
        enc = headers.get("content-encoding", "identity").strip().lower()
        if enc == "zstd":
            return _decode_frame(body, sha256, size, self.url)
        if enc not in ("", "identity"):
            raise MalformedAnswerError(f"blob {sha256} from {self.url} came with Content-Encoding {enc[:40]!r} "
                                       "(zstd or identity were asked for)")
        if size is None:
            if len(body) > MAX_BLOB:
                raise AnswerTooLargeError(f"blob {sha256} from {self.url}: {len(body)} bytes, over {MAX_BLOB}")
            size = len(body)
        return check_bytes(body, sha256, size, f"blob {sha256} from {self.url}")


class MirrorSource(Source):
    """A static tree (``rocke-aot mirror export``) behind any HTTP server, object store or CDN."""

    kind = "mirror"

    def _metadata_path(self, name: str) -> str:
        return f"/{name}"

    def triton_path(self, key: str) -> str:
        return f"/triton/{key}.json"

    def blob(self, sha256: str, size: int | None) -> bytes:
        check_sha(sha256)
        body, _ = self.get(f"/blobs/{sha256}.zst", _blob_limit(size), {"Accept-Encoding": "identity"})
        return _decode_frame(body, sha256, size, self.url)
