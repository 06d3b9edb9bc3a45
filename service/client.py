"""The HTTP client of the artifact service, with a verifying local store in front.

    Client.get(key)
        local Store hit? ──yes──> Store.get(key) (decompress + sha256, as every local read)
             │ no
        offline (ROCKE_AOT_OFFLINE=1)? ──> OfflineMiss (a NotFoundError naming the key)
             │
        GET /v1/kernels/{key}/meta ──> KeyInputs; artifact_key(inputs) must equal key
        GET /v1/blobs/{sha256}  (Accept-Encoding: zstd) ──> codec.decode(frame, sha256, size)
             │                  (raw answers: size and sha256 checked the same way)
        Store.put(inputs, bytes, ...) ──> the next get answers locally, no request
    Client.get_blob(sha)   local blob or GET /v1/blobs/{sha}; verified; kept in memory
    Client.select(...)     POST /v1/select, the answer parsed strictly (parse_select: the service's
                           models); offline: the same select() over the local store
    Client.publish(...)    PUT /v1/kernels/{key} with the bearer token

Every request retries connection errors and 5xx answers with exponential backoff; the
server's error body becomes the library's named error (404 NotFoundError, 422 SpecError or
LaneError, 500 IntegrityError, 401 Unauthorized, 403 ReadOnly, 409 Conflict, 413 TooLarge).
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Mapping
from typing import Any

import httpx
import zstandard

from rocke_aot import settings
from rocke_aot.cache import codec
from rocke_aot.cache.keys import KeyInputs, artifact_key, check_key, thaw
from rocke_aot.cache.records import Artifact
from rocke_aot.cache.store import Store
from rocke_aot import errors
from rocke_aot.errors import (
    CacheError,
    IntegrityError,
    LaneError,
    NotFoundError,
    RockeError,
    SpecError,
    Conflict,
    ReadOnly,
    TooLarge,
    Unauthorized,
)
from rocke_aot.service import access

ENV_OFFLINE = settings.OFFLINE
ENV_TOKEN = settings.TOKEN
MAX_BLOB = 256 << 20  # refuse a frame that claims more (a code object is kilobytes to megabytes)
_SHA_CHARS = frozenset("0123456789abcdef")


class OfflineMiss(NotFoundError):
    """ROCKE_AOT_OFFLINE=1 and the local store does not hold what was asked for."""


class RemoteError(RockeError):
    """The server answered an error the client has no better name for."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


_BY_NAME: dict[str, type[RockeError]] = {
    "LaneError": LaneError, "IntegrityError": IntegrityError, "Unauthorized": Unauthorized,
    "ReadOnly": ReadOnly, "Conflict": Conflict, "TooLarge": TooLarge,
    # a refused signed generation (PUT /v1/trust) keeps its name
    **{c.__name__: c for c in (errors.TrustError, errors.SignatureError, errors.UnlistedKeyError,
                               errors.ExpiredError, errors.RollbackError, errors.BlobMismatchError,
                               errors.MixedGenerationError)},
}
_BY_STATUS: dict[int, type[RockeError]] = {
    401: Unauthorized, 403: ReadOnly, 404: NotFoundError, 409: Conflict, 413: TooLarge, 422: SpecError,
}


def _check_sha(sha: object) -> str:
    if not isinstance(sha, str) or len(sha) != 64 or not set(sha) <= _SHA_CHARS:
        raise SpecError(f"a blob sha256 is 64 lowercase hex digits, got {sha!r}")
    return sha


def _env_offline() -> bool:
    return settings.flag(ENV_OFFLINE)


class Client:
    """``Client(base_url, cache=URL|Store|None, token=None, offline=None)``.

    ``cache`` None opens the default local store ($ROCKE_AOT_CACHE, ...). ``offline`` None
    reads ROCKE_AOT_OFFLINE. ``http`` injects an httpx.Client (tests); ``retries`` and
    ``backoff`` bound the retry loop (sleeps backoff, 2*backoff, ...).
    """

    def __init__(self, base_url: str | None, cache: str | os.PathLike | Store | None = None, token: str | None = None,
                 offline: bool | None = None, *, retries: int = 3, backoff: float = 0.2, timeout: float = 30.0,
                 http: httpx.Client | None = None):
        self.offline = _env_offline() if offline is None else bool(offline)
        if base_url is None and not self.offline:
            raise SpecError("a Client needs a server URL unless it is offline")
        self.base_url = base_url.rstrip("/") if base_url else None
        self.token = token if token is not None else (settings.raw(ENV_TOKEN) or None)
        self._own_store = not isinstance(cache, Store)
        self._cache = cache
        self._store: Store | None = None if self._own_store else cache
        self.retries, self.backoff = retries, backoff
        self._http = http or httpx.Client(base_url=self.base_url or "http://offline.invalid", timeout=timeout)
        self._own_http = http is None
        self._frames = access.Frames(max_bytes=32 << 20)
        self._blobs: dict[str, bytes] = {}
        self.requests_made = 0

    @property
    def store(self) -> Store:
        """The local store, opened on first use (a remote select or publish never opens it)."""
        if self._store is None:
            self._store = Store.open(self._cache)
        return self._store

    def close(self) -> None:
        if self._own_http:
            self._http.close()
        if self._own_store and self._store is not None:
            self._store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- transport ----------------------------------------------------------------------

    def _request(self, method: str, path: str, *, wire: bool = False, **kw: Any) -> httpx.Response:
        """One request with retries. ``wire``: keep the body as sent (no content decoding),
        bounded by MAX_BLOB, in ``response.wire``."""
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1: no request to {method} {path}")
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                self.requests_made += 1
                r = self._http.send(self._http.build_request(method, self.base_url + path, **kw), stream=True)
                try:
                    if wire and r.status_code < 400:
                        r.wire = _bounded(r.iter_raw(), MAX_BLOB + (1 << 16), path)
                    else:
                        r.read()
                finally:
                    r.close()
            except httpx.TransportError as e:
                if attempt == self.retries:
                    raise CacheError(f"{method} {self.base_url}{path}: {type(e).__name__}: {e} "
                                     f"(after {self.retries + 1} attempts)") from None
            else:
                if r.status_code < 500 or attempt == self.retries:
                    return self._checked(r, method, path)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    @staticmethod
    def _checked(r: httpx.Response, method: str, path: str) -> httpx.Response:
        if r.status_code < 400:
            return r
        try:
            err = r.json()
            name, message = err.get("error", ""), err.get("message", r.text)
        except ValueError:
            name, message = "", r.text[:500]
        cls = _BY_NAME.get(name) or _BY_STATUS.get(r.status_code)
        if name == "FieldError" and str(err.get("field", "")).startswith("lane"):
            cls = LaneError
        where = f"{method} {path} -> {r.status_code}"
        if cls is None:
            raise RemoteError(f"{where}: {name or 'error'}: {message}", r.status_code)
        raise cls(f"{where}: {message}")

    # ---- fetch --------------------------------------------------------------------------

    def get(self, key: str) -> Artifact:
        """The artifact under ``key`` with verified bytes, from the local store or the server."""
        check_key(key)
        hit = self.store.lookup_many([key]).get(key)
        if hit is not None and hit.ok:
            return self.store.get(key)
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1 and artifact {key} is not in the local store {self.store}")
        meta = self._request("GET", f"/v1/kernels/{key}/meta").json()
        inputs = KeyInputs(meta["arch"], meta["lane"], meta["profile"], meta["family"], meta["spec"],
                           meta["recipe_digest"], meta["toolchain"], meta.get("options") or {})
        if artifact_key(inputs) != key:
            raise IntegrityError(f"the server's record of {key} hashes to {artifact_key(inputs)}")
        raw = self._fetch_blob(meta["sha256"], meta["size"])
        return self.store.put(inputs, raw, ir_sha256=meta["ir_sha256"], metadata=meta.get("metadata") or {},
                              provenance=meta.get("provenance") or {})

    def get_blob(self, sha256: str) -> bytes:
        """The code object with this content hash, verified; a second call makes no request."""
        sha = _check_sha(sha256)
        if sha in self._blobs:
            return self._blobs[sha]
        try:
            raw = self._frames.load(self.store, sha).raw  # any local artifact's blob, verified
        except NotFoundError:
            if self.offline:
                raise OfflineMiss(f"{ENV_OFFLINE}=1 and blob {sha} is not in the local store {self.store}") from None
            raw = self._fetch_blob(sha, None)
        self._blobs[sha] = raw
        return raw

    def _fetch_blob(self, sha: str, size: int | None) -> bytes:
        # The wire bytes, not httpx's decoding: the frame is decompressed and checked here.
        r = self._request("GET", f"/v1/blobs/{sha}", wire=True, headers={"Accept-Encoding": "zstd, identity;q=0.5"})
        body = r.wire
        if r.headers.get("content-encoding", "identity") == "zstd":
            claimed = _frame_size(body, sha)
            if size is not None and claimed != size:
                raise IntegrityError(f"blob {sha}: the frame claims {claimed} bytes, the record says {size}")
            return codec.decode(body, sha, claimed)  # bounded decompress + size + sha256
        if size is not None and len(body) != size:
            raise IntegrityError(f"blob {sha}: {len(body)} bytes received, the record says {size}")
        got = codec.sha256_hex(body)
        if got != sha:
            raise IntegrityError(f"blob {sha}: the server sent bytes that hash to {got}")
        return body

    # ---- select / publish -----------------------------------------------------------------

    def select(self, arch: str, family: str, problem: Mapping[str, Any], *, lanes=None,
               min_efficiency: float | None = None, limit: int | None = None, explain: bool = False,
               model: str = "auto", measured: str = "exact") -> dict[str, Any]:
        """Ranked candidates and rejections (the SelectResponse document: each accepted row with
        the basis of its rank). The server's answer is parsed strictly through the service's own
        models (types, closed field sets, the basis invariants): a malformed one is an
        IntegrityError. Offline: the same select() over the local store, in the same shape."""
        if self.offline:
            doc = access.select(self.store, arch, family, dict(problem), lanes=lanes, min_efficiency=min_efficiency,
                                limit=limit, explain=explain, model=model, measured=measured)
            doc["accepted"] = [{**c, "url": None, "kernel_url": None} for c in doc["accepted"]]
            return doc
        body: dict[str, Any] = {"arch": arch, "family": family, "problem": dict(problem)}
        if lanes is not None:
            body["lanes"] = list(lanes)
        if min_efficiency is not None:
            body["min_efficiency"] = min_efficiency
        if limit is not None:
            body["limit"] = limit
        if explain:
            body["explain"] = True
        if model != "auto":
            body["model"] = model
        if measured != "exact":
            body["measured"] = measured
        return parse_select(self._request("POST", "/v1/select", json=body).content)

    def publish_generation(self, root: str, index: str, manifest: str) -> dict[str, Any]:
        """PUT /v1/trust: the texts of a signed generation's root.json, index.json, manifest.json."""
        if not self.token:
            raise Unauthorized(f"publishing needs a token (token=..., or ${ENV_TOKEN})")
        return self._request("PUT", "/v1/trust", json={"root": root, "index": index, "manifest": manifest},
                             headers={"Authorization": f"Bearer {self.token}"}).json()

    def publish(self, inputs: KeyInputs, code_object: bytes, *, ir_sha256: str,
                metadata: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """PUT the artifact; returns the PublishResponse document (created, kernel)."""
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"publish needs KeyInputs, got {type(inputs).__name__}")
        if not self.token:
            raise Unauthorized(f"publishing needs a token (token=..., or ${ENV_TOKEN})")
        key = artifact_key(inputs)
        body = {
            "arch": inputs.arch, "lane": inputs.lane, "profile": inputs.profile, "family": inputs.family,
            "spec": thaw(inputs.spec), "recipe_digest": inputs.recipe_digest, "toolchain": thaw(inputs.toolchain),
            "options": thaw(inputs.options), "ir_sha256": ir_sha256, "sha256": codec.sha256_hex(bytes(code_object)),
            "code_object": base64.b64encode(bytes(code_object)).decode(),
            "metadata": thaw(metadata or {}), "provenance": thaw(provenance or {}),
        }
        return self._request("PUT", f"/v1/kernels/{key}", json=body,
                             headers={"Authorization": f"Bearer {self.token}"}).json()


def parse_select(body: bytes) -> dict[str, Any]:
    """A /v1/select answer, validated strictly (service/schemas.py SelectResponse: no coercion,
    no unknown field, the basis invariants) -> the document as plain data."""
    from pydantic import ValidationError

    from rocke_aot.service.schemas import SelectResponse

    try:
        doc = SelectResponse.model_validate_json(body, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "the answer"
        raise IntegrityError(f"POST /v1/select: the server's answer does not parse ({e.error_count()} errors; "
                             f"{where}: {first['msg']})") from None
    return doc.model_dump(mode="json")


def _bounded(chunks, limit: int, what: str) -> bytes:
    out, n = [], 0
    for c in chunks:
        n += len(c)
        if n > limit:
            raise IntegrityError(f"{what}: the server sent over {limit} bytes")
        out.append(c)
    return b"".join(out)


def _frame_size(frame: bytes, sha: str) -> int:
    try:
        n = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as e:
        raise IntegrityError(f"blob {sha}: the server's zstd frame is unreadable ({e})") from None
    if n < 0 or n > MAX_BLOB:
        raise IntegrityError(f"blob {sha}: the frame claims {n} bytes (unknown or over {MAX_BLOB})")
    return n
