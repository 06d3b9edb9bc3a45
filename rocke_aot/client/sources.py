"""Where a client gets bytes from, through the one bounded HTTP exchange every client uses
(client/wire.py: Wire, as below).

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
                                           GET /v1/kernels?cursor=       keys from a prefix (keys_from)
                                           GET /v1/kernels/<key>/meta a server's record (unsigned)
                                           GET /v1/blobs/<sha256>     zstd frame or raw bytes
                                           GET /v1/triton/<key>       a Triton cache entry
    MirrorSource(url)    any HTTP server:  GET <url>/metadata/<name>  signed TUF metadata
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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import zstandard

from rocke_aot import errors
from rocke_aot.boundedjson import JSONLimitError, Limits
from rocke_aot.boundedjson import loads as bounded_loads
from rocke_aot.cache.keys import check_key
from rocke_aot.client.local import MAX_CODE_OBJECT, Kernel, check_record, check_sha, decoded, verified
from rocke_aot.client.wire import DEADLINE_S, MAX_ERROR_BODY, Answer, Wire, http_client
from rocke_aot.errors import (
    AnswerTooLargeError,
    IntegrityError,
    LaneError,
    MalformedAnswerError,
    NotFoundError,
    RemoteError,
    RockeError,
    SourceError,
    SpecError,
)

if TYPE_CHECKING:  # an injected httpx.Client (tests); httpx itself loads only where one is used (client/wire.py)
    import httpx

MAX_BLOB = MAX_CODE_OBJECT  # 256 MiB; a code object is kilobytes to megabytes
MAX_METADATA = 64 << 20  # a manifest of every kernel of a big build is a few megabytes
MAX_RECORD = 4 << 20  # one /meta answer: metadata and provenance are at most 1 MiB each (record.py)
MAX_DOCUMENT = 16 << 20  # a select answer (1,000 accepted + 1,000 rejected rows), a listing page
# every JSON answer (records, listings, select answers, publish answers) is read through the
# bounded reader; its byte bound is the call's own (the Wire stops reading past it)
ANSWER_LIMITS = Limits(MAX_METADATA, max_depth=64, max_items=1_000_000, max_string=MAX_RECORD)
ERROR_LIMITS = Limits(MAX_ERROR_BODY, max_depth=16, max_items=10_000, max_string=MAX_ERROR_BODY)
BLOB_SLACK = 1 << 16  # a zstd frame of incompressible bytes is a little larger than they are

JSON_HEADERS = {"Accept": "application/json", "Accept-Encoding": "identity"}
BLOB_HEADERS = {"Accept-Encoding": "zstd, identity;q=0.5"}

__all__ = ["BLOB_HEADERS", "DEADLINE_S", "JSON_HEADERS", "MAX_BLOB", "MAX_DOCUMENT", "MAX_ERROR_BODY",
           "MAX_METADATA", "MAX_RECORD", "Answer", "MirrorSource", "ServiceSource", "Source", "SourceError",
           "Wire", "document", "field", "http_client"]


# ---- strict documents ----------------------------------------------------------------------------

def document(answer: Answer, what: str) -> dict[str, Any]:
    """``answer``'s body as a JSON object: identity encoding, valid JSON, an object."""
    enc = answer.headers.get("content-encoding", "identity").strip().lower()
    if enc not in ("", "identity"):
        raise MalformedAnswerError(f"{what} from {answer.url} came with Content-Encoding {enc[:40]!r}; "
                                   "a JSON document is asked for, and accepted, with identity encoding only")
    try:  # bounded before anything is built (rocke_aot/boundedjson.py): depth, values, strings
        out = bounded_loads(answer.body, ANSWER_LIMITS, what)
    except JSONLimitError as e:
        raise MalformedAnswerError(f"{what} from {answer.url} is not JSON within its bounds ({e.limit}: "
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

    def get(self, path: str, limit: int, headers: dict[str, str] | None = None) -> tuple[bytes, Mapping]:
        """The body of GET url+path as sent on the wire (no content decoding), at most ``limit``."""
        ans = self.call("GET", path, limit, headers)
        if ans.status != 200:
            raise SourceError(f"{ans.where} -> {ans.status}, expected 200")
        return ans.body, ans.headers

    def refusal(self, ans: Answer) -> RockeError:
        if ans.status == 404:
            return NotFoundError(f"{ans.url}: 404")
        return SourceError(f"{ans.where} -> {ans.status}")

    def metadata(self, name: str, limit: int = MAX_METADATA) -> bytes:
        """A signed TUF metadata file (1.root.json, timestamp.json, 7.snapshot.json, 7.bins-0a.json,
        ...) as sent, at most ``limit`` bytes."""
        if not name.endswith(".json") or "/" in name or name.startswith("."):
            raise SpecError(f"{name!r} is not a metadata file name")
        body, headers = self.get(self._metadata_path(name), min(limit, MAX_METADATA), JSON_HEADERS)
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
    return decoded(frame, sha, size)  # bounded decompress + size + sha256, once per fetch


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
            err = bounded_loads(ans.body, ERROR_LIMITS, "an error body")
        except JSONLimitError:
            err = None
        if isinstance(err, dict):
            got = err.get("error")
            name = got if isinstance(got, str) else ""
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

    def keys_from(self, prefix: str, limit: int = 9) -> list[str]:
        """The served keys starting with ``prefix`` (at most ``limit``): one page of GET
        /v1/kernels from the cursor just below the prefix (the listing is ordered by key)."""
        from rocke_aot.client.keys import check_prefix, cursor_before

        check_prefix(prefix)
        cursor = cursor_before(prefix)
        path = f"/v1/kernels?limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        doc = document(self.call("GET", path, MAX_DOCUMENT, JSON_HEADERS), "the kernel listing")
        out = []
        for i, item in enumerate(field(doc, "items", list, "the kernel listing")):
            key = field(item, "key", str, f"the kernel listing: items[{i}]")
            try:
                check_key(key)
            except SpecError as e:
                raise MalformedAnswerError(f"the kernel listing from {self.url}: items[{i}].key: {e}") from None
            if key.startswith(prefix):
                out.append(key)
        return out

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
        return verified(body, sha256, size, f"blob {sha256} from {self.url}")


class MirrorSource(Source):
    """A static tree (``rocke-aot mirror export``) behind any HTTP server, object store or CDN."""

    kind = "mirror"

    def _metadata_path(self, name: str) -> str:
        return f"/metadata/{name}"

    def triton_path(self, key: str) -> str:
        return f"/triton/{key}.json"

    def blob(self, sha256: str, size: int | None) -> bytes:
        check_sha(sha256)
        body, _ = self.get(f"/blobs/{sha256}.zst", _blob_limit(size), {"Accept-Encoding": "identity"})
        return _decode_frame(body, sha256, size, self.url)
