"""Where a client gets bytes from: the artifact service, or a static mirror tree.

    ServiceSource(url)   rocke-aot serve:  GET /v1/trust/<name>      signed metadata
                                           GET /v1/kernels/<key>/meta a server's record (unsigned)
                                           GET /v1/blobs/<sha256>     zstd frame or raw bytes
    MirrorSource(url)    any HTTP server:  GET <url>/<name>           signed metadata
                                           GET <url>/blobs/<sha256>.zst  a zstd frame

Every read is bounded (metadata by MAX_METADATA, a blob by the size the caller expects, never
over MAX_BLOB) and every blob is checked against the sha256 and size the caller names before it
is returned: a source is never trusted, it only carries bytes. Connection errors and 5xx
answers are retried with exponential backoff; 404 is NotFoundError; other answers are
SourceError naming the URL and status.
"""

from __future__ import annotations

import abc
import json
import threading
import time
from typing import Any

import httpx
import zstandard

from rocke_aot.cache import codec
from rocke_aot.client.local import check_bytes, check_sha
from rocke_aot.errors import CacheError, IntegrityError, NotFoundError

MAX_BLOB = 256 << 20  # a code object is kilobytes to megabytes
MAX_METADATA = 64 << 20  # a manifest of every kernel of a big build is a few megabytes
MAX_RECORD = 1 << 20


class SourceError(CacheError):
    """A source answered something other than the bytes asked for (status, transport)."""


class Source(abc.ABC):
    """A base URL and the bounded, retried GET every source uses."""

    kind = "source"

    def __init__(self, url: str, *, http: httpx.Client | None = None, retries: int = 2, backoff: float = 0.1,
                 timeout: float = 30.0):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise CacheError(f"a source URL is http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self._http = http or httpx.Client(timeout=timeout)
        self._own_http = http is None
        self.retries, self.backoff = retries, backoff
        self._lock = threading.Lock()  # get_many's threads share a source (httpx.Client is thread-safe)
        self._requests = 0

    @property
    def requests(self) -> int:
        """How many GETs this source sent (each retry counts)."""
        return self._requests

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def get(self, path: str, limit: int, headers: dict[str, str] | None = None) -> tuple[bytes, httpx.Headers]:
        """The body of GET url+path as sent on the wire (no content decoding), at most ``limit``."""
        url = self.url + path
        delay = self.backoff
        for attempt in range(self.retries + 1):
            with self._lock:
                self._requests += 1
            try:
                with self._http.stream("GET", url, headers=headers) as r:
                    if r.status_code == 404:
                        raise NotFoundError(f"{url}: 404")
                    if r.status_code >= 500 and attempt < self.retries:
                        r.close()
                        time.sleep(delay)
                        delay *= 2
                        continue
                    if r.status_code != 200:
                        raise SourceError(f"GET {url} -> {r.status_code}")
                    declared = r.headers.get("content-length")
                    if declared is not None and declared.isdigit() and int(declared) > limit:
                        raise IntegrityError(f"GET {url}: {declared} bytes announced, the limit is {limit}")
                    out, n = [], 0
                    for chunk in r.iter_raw():
                        n += len(chunk)
                        if n > limit:
                            raise IntegrityError(f"GET {url}: over {limit} bytes sent")
                        out.append(chunk)
                    return b"".join(out), r.headers
            except httpx.TransportError as e:
                if attempt == self.retries:
                    raise SourceError(f"GET {url}: {type(e).__name__}: {e} (after {attempt + 1} attempts)") from None
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def metadata(self, name: str) -> bytes:
        """A signed metadata document (root.json, index.json, manifest.json) as sent."""
        body, _ = self.get(self._metadata_path(name), MAX_METADATA)
        return body

    @abc.abstractmethod
    def blob(self, sha256: str, size: int) -> bytes:
        """The raw code object with this sha256 and size, verified, or IntegrityError."""

    @abc.abstractmethod
    def _metadata_path(self, name: str) -> str:
        """The path of a metadata document under this source's URL."""


def _decode_frame(frame: bytes, sha: str, size: int, where: str) -> bytes:
    try:
        claimed = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"blob {sha} from {where}: not a zstd frame ({e})") from None
    if claimed != size:
        raise IntegrityError(f"blob {sha} from {where}: the frame claims {claimed} bytes, expected {size}")
    return codec.decode(frame, sha, size)  # bounded decompress + size + sha256


class ServiceSource(Source):
    """``rocke-aot serve`` at ``url``."""

    kind = "service"

    def _metadata_path(self, name: str) -> str:
        return f"/v1/trust/{name}"

    def record(self, key: str) -> dict[str, Any]:
        """The server's record of ``key`` (its /meta answer); a Kernel checks it hashes to the key."""
        body, _ = self.get(f"/v1/kernels/{key}/meta", MAX_RECORD)
        try:
            out = json.loads(body)
        except ValueError as e:
            raise SourceError(f"{self.url}: the record of {key} is not JSON ({e})") from None
        if not isinstance(out, dict):
            raise SourceError(f"{self.url}: the record of {key} is not a JSON object")
        return out

    def blob(self, sha256: str, size: int) -> bytes:
        check_sha(sha256)
        body, headers = self.get(f"/v1/blobs/{sha256}", min(size + (1 << 16), MAX_BLOB),
                                 {"Accept-Encoding": "zstd, identity;q=0.5"})
        if headers.get("content-encoding", "identity") == "zstd":
            return _decode_frame(body, sha256, size, self.url)
        return check_bytes(body, sha256, size, f"blob {sha256} from {self.url}")


class MirrorSource(Source):
    """A static tree (``rocke-aot mirror export``) behind any HTTP server, object store or CDN."""

    kind = "mirror"

    def _metadata_path(self, name: str) -> str:
        return f"/{name}"

    def blob(self, sha256: str, size: int) -> bytes:
        check_sha(sha256)
        body, _ = self.get(f"/blobs/{sha256}.zst", min(size + (1 << 16), MAX_BLOB))
        return _decode_frame(body, sha256, size, self.url)
