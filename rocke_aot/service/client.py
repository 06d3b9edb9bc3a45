"""The HTTP client of the artifact service, with a verifying local store in front.

    Client.get(key, arch=None, family=None)
        local Store hit, kept from this server (provenance "origin") or built/imported here?
             │ no                    ──yes──> Store.get(key) (decompress + sha256, as every local read)
        offline (ROCKE_AOT_OFFLINE=1)? ──> OfflineMiss (a NotFoundError naming the key)
             │
        GET /v1/kernels/{key}/meta ──ServiceSource.record──> a Kernel: strict JSON, the inputs
             │                      hash to key, the record schema (rocke_aot/record.py)
        the arch and family asked? (targets.compatible; else AnswerMismatchError)
        GET /v1/blobs/{sha256}  (Accept-Encoding: zstd) ──> bounded, decoded, size + sha256
        aot.codeobject.validate(bytes, arch) + record_metadata: a code object for that arch whose
             │                  resources and launch contract agree with the record (the
             │                  resources kept are the ones read from the object)
        Store.put(inputs, bytes, provenance + origin {source: this server}) ──> the next get
             answers locally, no request
    Client.get_blob(sha)   local blob or GET /v1/blobs/{sha}; verified; a bounded LRU in memory
    Client.select(...)     POST /v1/select; the answer parsed strictly through the service's own
                           models (parse_select: types, closed field sets, the basis invariants),
                           then every row checked against the question (check_select: arch
                           compatible with the target, lanes asked, at most limit rows, keys and
                           sha256s 64 hex digits, the Triton version asked for: the answer names
                           it and every row is its build); offline: the same select() over the
                           local store
    Client.publish(...)    PUT /v1/kernels/{key} with the bearer token; the answer must name the
                           key and sha256 published

Every request goes through client/sources.py's one bounded exchange (a ServiceSource's Wire):
an overall deadline per call, no redirects, bodies bounded before they are read, JSON asked
for and accepted in identity encoding only, retries of connection errors and 5xx with
exponential backoff; the server's error body becomes the library's named error (404
NotFoundError, 422 SpecError or LaneError, 500 IntegrityError, 401 Unauthorized, 403
ReadOnly, 409 Conflict, 413 TooLarge). Nothing a check refuses is stored or returned.
"""

from __future__ import annotations

import base64
import math
import os
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx

from rocke_aot import settings
from rocke_aot.aot.codeobject import record_metadata
from rocke_aot.aot.codeobject import validate as validate_code_object
from rocke_aot.cache import codec
from rocke_aot.cache.keys import KeyInputs, artifact_key, check_key, thaw
from rocke_aot.cache.records import Artifact
from rocke_aot.cache.store import Store
from rocke_aot.client.fetch import OfflineMiss, check_asked
from rocke_aot.client.local import check_sha
from rocke_aot.client.sources import (
    JSON_HEADERS,
    MAX_DOCUMENT,
    MAX_RECORD,
    Answer,
    ServiceSource,
    document,
    field,
)
from rocke_aot.client.trusted import InsecureFetchWarning, pinned_key
from rocke_aot.errors import (
    AnswerMismatchError,
    CodeObjectError,
    LaneError,
    MalformedAnswerError,
    NotFoundError,
    RemoteError,
    SpecError,
    Unauthorized,
)
from rocke_aot.lanes import LANE_NAMES
from rocke_aot.record import RecordError
from rocke_aot.service import access
from rocke_aot.targets import Target, compatible

ENV_OFFLINE = settings.OFFLINE
ENV_TOKEN = settings.TOKEN
MAX_BLOB_MEMORY = 64 << 20  # get_blob's in-memory LRU of fetched blobs
MAX_REJECTED_ROWS = 1000  # the service lists at most this many rejections (service/schemas.py MAX_REJECTED)

__all__ = ["ENV_OFFLINE", "ENV_TOKEN", "Client", "OfflineMiss", "RemoteError", "check_select", "parse_select"]


def _env_offline() -> bool:
    return settings.flag(ENV_OFFLINE)


def origin_of(art: Artifact) -> str | None:
    """The server a locally kept artifact was fetched from (None: built or imported here)."""
    o = art.provenance.get("origin") if isinstance(art.provenance, Mapping) else None
    src = o.get("source") if isinstance(o, Mapping) else None
    return src if isinstance(src, str) else None


class Client:
    """``Client(base_url, cache=URL|Store|None, token=None, offline=None)``.

    ``cache`` None opens the default local store ($ROCKE_AOT_CACHE, ...). ``offline`` None
    reads ROCKE_AOT_OFFLINE. ``http`` injects an httpx.Client (tests); ``retries`` and
    ``backoff`` bound the retry loop (sleeps backoff, 2*backoff, ...); ``timeout`` each
    connect and read, ``deadline_s`` each call as a whole (client/sources.py DEADLINE_S).
    """

    def __init__(self, base_url: str | None, cache: str | os.PathLike | Store | None = None, token: str | None = None,
                 offline: bool | None = None, *, retries: int = 3, backoff: float = 0.2, timeout: float = 30.0,
                 deadline_s: float | None = None, http: httpx.Client | None = None,
                 root_key: str | os.PathLike | None = None):
        self.offline = _env_offline() if offline is None else bool(offline)
        # One verification path: with a pin (root_key= or $ROCKE_AOT_ROOT_KEY) every get goes
        # through client/fetch.py's Fetcher (the signed TUF target: sha256, size, record); without
        # one the unsigned path warns, as every client does.
        self._pin = pinned_key(root_key)
        self._warned = False
        self._fetcher = None
        if base_url is None and not self.offline:
            raise SpecError("a Client needs a server URL unless it is offline")
        self.base_url = base_url.rstrip("/") if base_url else None
        self.token = token if token is not None else (settings.raw(ENV_TOKEN) or None)
        self._own_store = not isinstance(cache, Store)
        self._cache = cache
        self._store: Store | None = None if self._own_store else cache
        self._source = ServiceSource(self.base_url or "http://offline.invalid", http=http, retries=retries,
                                     backoff=backoff, timeout=timeout, deadline_s=deadline_s)
        self._frames = access.Frames(max_bytes=32 << 20)
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._blob_bytes = 0

    @property
    def requests_made(self) -> int:
        return self._source.requests

    @property
    def store(self) -> Store:
        """The local store, opened on first use (a remote select or publish never opens it)."""
        if self._store is None:
            self._store = Store.open(self._cache)
        return self._store

    def close(self) -> None:
        self._source.close()
        if self._fetcher is not None:
            self._fetcher.close()
        if self._own_store and self._store is not None:
            self._store.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, limit: int, **kw: Any) -> Answer:
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1: no request to {method} {path}")
        return self._source.call(method, path, limit, **kw)

    # ---- fetch --------------------------------------------------------------------------

    def get(self, key: str, *, arch: str | None = None, family: str | None = None) -> Artifact:
        """The artifact under ``key`` with verified bytes, from the local store or the server.

        ``arch`` (the device's target ID) and ``family``, when given, are the question: a
        record for a target the device cannot run or of another family is AnswerMismatchError,
        wherever it comes from. A server's answer is kept only after every check passed.
        """
        check_key(key)
        if self._pin is not None:
            return self._get_signed(key, arch, family)
        if not self._warned:
            self._warned = True
            warnings.warn(InsecureFetchWarning(
                f"rocke_aot.service.client.Client.get without a pinned root key (${settings.ROOT_KEY}): kernels are "
                "checked against the server's own record only, not a signature"), stacklevel=2)
        device = Target.parse(arch) if arch is not None else None
        hit = self.store.lookup_many([key]).get(key)
        local = self.store.get(key) if hit is not None and hit.ok else None
        came_from = origin_of(local) if local is not None else None
        if local is not None and (self.offline or came_from in (None, self.base_url)):
            check_asked(local.arch, local.family, device, family, f"the local copy of {key}")
            return local
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1 and artifact {key} is not in the local store {self.store}")
        k = self._source.record(key)  # strict; the inputs hash to the key
        check_asked(k.inputs.arch, k.inputs.family, device, family, f"{self.base_url}'s record of {key}")
        if local is not None and local.sha256 != k.sha256:
            raise AnswerMismatchError(
                f"the local store {self.store} holds other bytes ({local.sha256}) for {key}, fetched from "
                f"{came_from}; {self.base_url} names {k.sha256}. Remove what that server left with "
                f"`rocke-aot client purge --cache <local store> --origin {came_from}`")
        raw = local.code_object if local is not None else self._source.blob(k.sha256, k.size)
        try:
            info = validate_code_object(raw, k.inputs.arch)
            metadata = record_metadata(thaw(k.metadata), info)
        except (CodeObjectError, RecordError) as e:
            raise AnswerMismatchError(f"{self.base_url} answered {key} with a code object its record does not "
                                      f"describe: {type(e).__name__}: {e}") from None
        if local is not None:  # the same bytes, kept from another server: its record must be this one's
            if thaw(local.metadata) != metadata:
                raise AnswerMismatchError(
                    f"the local store {self.store} keeps {key} with another record (from {came_from}) than "
                    f"{self.base_url} answers; remove it with `rocke-aot client purge --cache <local store> "
                    f"--origin {came_from}`")
            return local
        provenance = {**thaw(k.provenance), "origin": {"source": self.base_url, "signed": False}}
        return self.store.put(k.inputs, raw, ir_sha256=k.ir_sha256, metadata=metadata, provenance=provenance)

    def _get_signed(self, key: str, arch: str | None, family: str | None) -> Artifact:
        """``key`` through the Fetcher under the pin: the signed target decides the bytes and the
        record; a local artifact answers only if it is those bytes."""
        from rocke_aot.client.fetch import Fetcher
        from rocke_aot.client.local import LocalStore

        if self._fetcher is None:
            self._fetcher = Fetcher([self._source] if not self.offline else [], LocalStore(), root_key=self._pin,
                                    offline=self.offline)
        k = self._fetcher.get(key, arch=arch, family=family)
        hit = self.store.lookup_many([key]).get(key)
        if hit is not None and hit.ok:
            local = self.store.get(key)
            if local.sha256 == k.sha256:
                return local
            raise AnswerMismatchError(f"the local store {self.store} holds other bytes ({local.sha256}) for {key} "
                                      f"than the signed target ({k.sha256}); remove them with `rocke-aot client "
                                      f"purge --cache <local store> --origin {origin_of(local)}`")
        try:
            info = validate_code_object(k.code_object, k.inputs.arch)
            metadata = record_metadata(thaw(k.metadata), info)
        except (CodeObjectError, RecordError) as e:
            raise AnswerMismatchError(f"the signed kernel {key} is not the code object its record describes: "
                                      f"{type(e).__name__}: {e}") from None
        provenance = {**thaw(k.provenance), "origin": {"source": k.origin.get("source"), "signed": True,
                                                       "snapshot_version": k.origin.get("snapshot_version")}}
        return self.store.put(k.inputs, k.code_object, ir_sha256=k.ir_sha256, metadata=metadata,
                              provenance=provenance)

    def get_blob(self, sha256: str) -> bytes:
        """The code object with this content hash, verified; a second call makes no request."""
        sha = check_sha(sha256)
        if sha in self._blobs:
            self._blobs.move_to_end(sha)
            return self._blobs[sha]
        try:
            raw = self._frames.load(self.store, sha).raw  # any local artifact's blob, verified
        except NotFoundError:
            if self.offline:
                raise OfflineMiss(f"{ENV_OFFLINE}=1 and blob {sha} is not in the local store {self.store}") from None
            raw = self._source.blob(sha, None)  # bounded by MAX_BLOB, size and sha256 checked
        if len(raw) <= MAX_BLOB_MEMORY:
            self._blobs[sha] = raw
            self._blob_bytes += len(raw)
            while self._blob_bytes > MAX_BLOB_MEMORY:
                self._blob_bytes -= len(self._blobs.popitem(last=False)[1])
        return raw

    # ---- select / publish -----------------------------------------------------------------

    def select(self, arch: str, family: str, problem: Mapping[str, Any], *, lanes=None,
               min_efficiency: float | None = None, limit: int | None = None, explain: bool = False,
               model: str = "auto", measured: str = "exact", triton_version: str | None = None) -> dict[str, Any]:
        """Ranked candidates and rejections (the SelectResponse document: each accepted row with
        the basis of its rank). The server's answer is parsed strictly through the service's own
        models (a malformed one is MalformedAnswerError) and checked against the question (an
        answer to another is AnswerMismatchError). ``triton_version`` (a Triton family's): the
        host's Triton; every row answered must be that version's build. Offline: the same
        select() over the local store, in the same shape."""
        if self.offline:
            doc = access.select(self.store, arch, family, dict(problem), lanes=lanes, min_efficiency=min_efficiency,
                                limit=limit, explain=explain, model=model, measured=measured,
                                triton_version=triton_version)
            doc["accepted"] = [{**c, "url": None, "kernel_url": None} for c in doc["accepted"]]
            return doc
        device = Target.parse(arch)
        body: dict[str, Any] = {"arch": device.id, "family": family, "problem": dict(problem)}
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
        if triton_version is not None:
            body["triton_version"] = triton_version
        ans = self._call("POST", "/v1/select", MAX_DOCUMENT, headers=JSON_HEADERS, json_body=body)
        document(ans, "the select answer")  # identity encoding, JSON, an object (named errors, before pydantic)
        return check_select(parse_select(ans.body), device, family, list(lanes) if lanes is not None else None,
                            limit, ans.url, triton_version=triton_version)

    def publish(self, inputs: KeyInputs, code_object: bytes, *, ir_sha256: str,
                metadata: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """PUT the artifact; returns the PublishResponse document (created, kernel), which must
        name the key and the sha256 sent."""
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"publish needs KeyInputs, got {type(inputs).__name__}")
        if not self.token:
            raise Unauthorized(f"publishing needs a token (token=..., or ${ENV_TOKEN})")
        key = artifact_key(inputs)
        sha = codec.sha256_hex(bytes(code_object))
        body = {
            "arch": inputs.arch, "lane": inputs.lane, "profile": inputs.profile, "family": inputs.family,
            "spec": thaw(inputs.spec), "recipe_digest": inputs.recipe_digest, "toolchain": thaw(inputs.toolchain),
            "options": thaw(inputs.options), "ir_sha256": ir_sha256, "sha256": sha,
            "code_object": base64.b64encode(bytes(code_object)).decode(),
            "metadata": thaw(metadata or {}), "provenance": thaw(provenance or {}),
        }
        ans = self._call("PUT", f"/v1/kernels/{key}", MAX_RECORD,
                         headers={**JSON_HEADERS, "Authorization": f"Bearer {self.token}"}, json_body=body)
        doc = document(ans, "the publish answer")
        what = f"the publish answer from {ans.url}"
        field(doc, "created", bool, what)
        kernel = field(doc, "kernel", dict, what)
        if field(kernel, "key", str, what) != key or field(kernel, "sha256", str, what) != sha:
            raise AnswerMismatchError(f"{what} names {kernel.get('key')!r} / {kernel.get('sha256')!r}, "
                                      f"not the {key} / {sha} published")
        return doc


def parse_select(body: bytes) -> dict[str, Any]:
    """A /v1/select answer, validated strictly (service/schemas.py SelectResponse: no coercion,
    no unknown field, the basis invariants) -> the document as plain data; MalformedAnswerError
    (an IntegrityError too) naming the first field at fault."""
    from pydantic import ValidationError

    from rocke_aot.service.schemas import SelectResponse

    try:
        doc = SelectResponse.model_validate_json(body, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "the answer"
        raise MalformedAnswerError(f"POST /v1/select: the server's answer does not parse ({e.error_count()} errors; "
                                   f"{where}: {first['msg']})") from None
    return doc.model_dump(mode="json")


def _checked(value: Any, check, what: str) -> Any:
    try:
        return check(value)
    except (SpecError, LaneError) as e:
        raise MalformedAnswerError(f"{what}: {e}") from None


def check_select(doc: dict[str, Any], device: Target, family: str, lanes: list[str] | None, limit: int | None,
                 url: str, *, triton_version: str | None = None) -> dict[str, Any]:
    """A select answer as asked: every field the runner and the CLI read present and typed,
    keys and sha256s 64 hex digits (before any goes into a URL), every accepted candidate for
    an arch ``device`` can run and a lane asked for, at most ``limit`` of them, of the Triton
    version asked for (when one was: the answer names it, and every row is its build; when none
    was, every row's version is one the answer lists); else MalformedAnswerError /
    AnswerMismatchError naming the row. (The family of each is checked when its record is
    fetched: Client.get(key, family=...); a row's Triton version then by its key's toolchain.)"""
    what = f"the select answer from {url} ({family} on {device.id})"
    asked = field(doc, "triton_version", (str, type(None)), what)
    versions = field(doc, "triton_versions", list, what)
    if asked != triton_version:
        raise AnswerMismatchError(f"{what}: it answers Triton {asked!r}, the request named {triton_version!r}")
    accepted = field(doc, "accepted", list, what)
    rejected = field(doc, "rejected", list, what)
    count = field(doc, "rejected_count", int, what)
    if count < 0 or len(rejected) > MAX_REJECTED_ROWS:
        raise MalformedAnswerError(f"{what}: {len(rejected)} rejections listed, rejected_count {count}")
    if limit is not None and len(accepted) > limit:
        raise AnswerMismatchError(f"{what}: {len(accepted)} candidates for a limit of {limit}")
    allowed = set(lanes) if lanes else set(LANE_NAMES)
    seen: set[str] = set()
    for i, c in enumerate(accepted):
        row = f"{what}: accepted[{i}]"
        key = _checked(field(c, "key", str, row), check_key, f"{row}.key")
        _checked(field(c, "sha256", str, row), check_sha, f"{row}.sha256")
        arch = _checked(field(c, "arch", str, row), Target.parse, f"{row}.arch")
        lane = field(c, "lane", str, row)
        fam = field(c, "family", str, row)
        if fam not in family.split(","):  # across families: one of those asked
            raise AnswerMismatchError(f"{row}: a {fam} kernel, the request asked for {family}")
        if key in seen:
            raise MalformedAnswerError(f"{row}: key {key} listed twice")
        seen.add(key)
        if not compatible(arch, device):
            raise AnswerMismatchError(f"{row}: {key} is built for {arch.id}, which {device.id} cannot run")
        if lane not in allowed:
            raise AnswerMismatchError(f"{row}: {key} is of lane {lane[:40]!r}, not one asked for "
                                      f"({', '.join(sorted(allowed))})")
        field(c, "spec", dict, row)
        eff = field(c, "efficiency", dict, row)
        total = field(eff, "total", float, f"{row}.efficiency")
        if not (math.isfinite(total) and 0.0 <= total <= 1.0):
            raise MalformedAnswerError(f"{row}: efficiency.total {total!r} is not within 0..1")
        est = field(c, "estimate_ms", (float, type(None)), row, required=False)
        if est is not None and not (math.isfinite(est) and est >= 0):
            raise MalformedAnswerError(f"{row}: estimate_ms {est!r} is not a non-negative number")
        field(c, "resources", dict, row)
        built_by = field(c, "triton_version", (str, type(None)), row)
        if triton_version is not None and built_by != triton_version:
            raise AnswerMismatchError(f"{row}: {key} was built by Triton {built_by}, not the {triton_version} "
                                      f"asked for: a host's Triton must equal the builder's")
        if built_by is not None and built_by not in versions:
            raise MalformedAnswerError(f"{row}: {key} is Triton {built_by}'s, which triton_versions does not list")
        for name in ("generation", "url", "kernel_url"):
            field(c, name, (str, type(None)), row, required=False)
    for i, r in enumerate(rejected):
        row = f"{what}: rejected[{i}]"
        _checked(field(r, "key", str, row), check_key, f"{row}.key")
        for name in ("arch", "lane", "reason"):
            field(r, name, str, row)
        field(r, "spec", dict, row)
    return doc
