"""The host's client of the artifact service: select (POST /v1/select) and publish, no store.

    ServiceClient(url, token=None)
      select(arch, family, problem, ...)  POST /v1/select; the answer parsed strictly through
                 client/answers.py's models (parse_select: types, closed field sets, the basis
                 invariants), then every row checked against the question (check_select: arch
                 compatible with the device, lanes asked, at most limit rows, keys and sha256s 64
                 hex digits, the Triton version asked for); the kernels it names are fetched
                 through the Fetcher (client/fetch.py: local store, signed metadata, sources)
      publish(inputs, code_object, ...)   PUT /v1/kernels/{key} with the bearer token; the answer
                 must name the key and sha256 published
      publish_metadata(name, data)        PUT /v1/trust/{name}: one file of a signed TUF repository
                 (`rocke-aot trust publish` sends every file, timestamp.json last)

Every request goes through client/sources.py's one bounded exchange (a ServiceSource's Wire):
an overall deadline per call, no redirects, bodies bounded before they are read, JSON asked
for and accepted in identity encoding only, retries of connection errors and 5xx with
exponential backoff; the server's error body becomes the library's named error. It opens no
local store and imports no server, database or compiler module: `rocke-aot select --server`
runs on the base install (tests/test_client_slim.py, tests/test_install_roles.py).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rocke_aot import settings
from rocke_aot.cache import codec
from rocke_aot.cache.keys import KeyInputs, artifact_key, check_key, thaw
from rocke_aot.client.fetch import OfflineMiss
from rocke_aot.client.local import check_sha
from rocke_aot.client.sources import JSON_HEADERS, MAX_DOCUMENT, MAX_RECORD, Answer, ServiceSource, document, field
from rocke_aot.errors import (
    AnswerMismatchError,
    LaneError,
    MalformedAnswerError,
    SpecError,
    Unauthorized,
)
from rocke_aot.lanes import LANE_NAMES
from rocke_aot.targets import Target, compatible

if TYPE_CHECKING:
    import httpx

MAX_REJECTED_ROWS = 1000  # the service lists at most this many rejections (answers.py MAX_REJECTED; pydantic loads on a select only)

__all__ = ["ServiceClient", "check_select", "parse_select"]


class ServiceClient:
    """``ServiceClient(base_url, token=None)``: select and publish against ``rocke-aot serve``.

    ``token`` None reads $ROCKE_AOT_TOKEN (publishing only). ``offline`` None reads
    $ROCKE_AOT_OFFLINE: an offline client makes no request (OfflineMiss). ``http`` injects an
    httpx.Client (tests); ``retries`` and ``backoff`` bound the retry loop; ``timeout`` each
    connect and read, ``deadline_s`` each call as a whole (client/wire.py DEADLINE_S).
    """

    def __init__(self, base_url: str | None, token: str | None = None, offline: bool | None = None, *,
                 retries: int = 3, backoff: float = 0.2, timeout: float = 30.0, deadline_s: float | None = None,
                 http: httpx.Client | None = None):
        self.offline = settings.flag(settings.OFFLINE) if offline is None else bool(offline)
        if base_url is None and not self.offline:
            raise SpecError("a service client needs a server URL unless it is offline")
        self.base_url = base_url.rstrip("/") if base_url else None
        self.token = token if token is not None else (settings.raw(settings.TOKEN) or None)
        self._source = ServiceSource(self.base_url or "http://offline.invalid", http=http, retries=retries,
                                     backoff=backoff, timeout=timeout, deadline_s=deadline_s)

    @property
    def requests_made(self) -> int:
        return self._source.requests

    def close(self) -> None:
        self._source.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, path: str, limit: int, **kw: Any) -> Answer:
        if self.offline:
            raise OfflineMiss(f"{settings.OFFLINE}=1: no request to {method} {path}")
        return self._source.call(method, path, limit, **kw)

    def select(self, arch: str, family: str, problem: Mapping[str, Any], *, lanes=None,
               min_efficiency: float | None = None, limit: int | None = None, explain: bool = False,
               model: str = "auto", measured: str = "exact", triton_version: str | None = None) -> dict[str, Any]:
        """Ranked candidates and rejections (the SelectResponse document: each accepted row with
        the basis of its rank). The server's answer is parsed strictly (a malformed one is
        MalformedAnswerError) and checked against the question (an answer to another is
        AnswerMismatchError). ``triton_version`` (a Triton family's): the host's Triton; every
        row answered must be that version's build."""
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
        document(ans, "the select answer")  # identity, bounded JSON, an object (named errors, before pydantic)
        return check_select(parse_select(ans.body), device, family, list(lanes) if lanes is not None else None,
                            limit, ans.url, triton_version=triton_version)

    def publish_metadata(self, name: str, data: bytes) -> dict[str, Any]:
        """PUT /v1/trust/{name}: one file of a signed TUF repository (the service checks it, and
        the whole repository when ``name`` is timestamp.json)."""
        if not self.token:
            raise Unauthorized(f"publishing needs a token (token=..., or ${settings.TOKEN})")
        if not name or "/" in name or not name.endswith(".json"):
            raise SpecError(f"not a metadata file name: {name[:80]!r}")
        ans = self._call("PUT", f"/v1/trust/{name}", MAX_RECORD,
                         headers={**JSON_HEADERS, "Content-Type": "application/json",
                                  "Authorization": f"Bearer {self.token}"}, json_body=bytes(data))
        return document(ans, f"the answer to publishing {name}")

    def publish(self, inputs: KeyInputs, code_object: bytes, *, ir_sha256: str,
                metadata: Mapping[str, Any] | None = None, provenance: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """PUT the artifact; returns the PublishResponse document (created, kernel), which must
        name the key and the sha256 sent."""
        if not isinstance(inputs, KeyInputs):
            raise SpecError(f"publish needs KeyInputs, got {type(inputs).__name__}")
        if not self.token:
            raise Unauthorized(f"publishing needs a token (token=..., or ${settings.TOKEN})")
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
    """A /v1/select answer, validated strictly (client/answers.py SelectResponse: no coercion,
    no unknown field, the basis invariants) -> the document as plain data; MalformedAnswerError
    (an IntegrityError too) naming the first field at fault."""
    from pydantic import ValidationError

    from rocke_aot.boundedjson import JSONLimitError, check
    from rocke_aot.client.answers import SelectResponse
    from rocke_aot.client.sources import ANSWER_LIMITS

    try:  # bounded before pydantic builds anything (parse_select is also called on bodies alone)
        check(body, ANSWER_LIMITS, "the select answer")
    except JSONLimitError as e:
        raise MalformedAnswerError(f"POST /v1/select: the server's answer is not JSON within its bounds "
                                   f"({e.limit}: {e})") from None
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
    fetched: Fetcher.get(key, family=...); a row's Triton version then by its key's toolchain.)"""
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
