"""The service's Triton cache routes: what a GPU host's Triton asks its remote cache for.

    GET /v1/triton/{key}   the entry under Triton's cache key (base32, 52 chars): every file's
                           sha256, size, Triton version, target, the artifact a build stored it
                           with (null: published by a host) -> the host fetches each file as a
                           blob (GET /v1/blobs/{sha256}, verified) and checks it (client/triton_cache.py)
    PUT /v1/triton/{key}   a host publishes what its Triton compiled (bearer token, as every
                           publish): {"triton_version", "files": {filename: base64}}. Checked before
                           the one write: names are Triton's (no folders); the group file
                           __grp__<kernel>.json lists exactly the other files; <kernel>.json is
                           Triton's metadata whose "hash" base32-encodes to {key}, whose
                           triton_version is the one declared, whose target the binary
                           (<kernel>.hsaco / .cubin) validates for (aot/codeobject.py); an
                           autotuner's <kernel>.autotune.json alone is JSON with "key" and
                           "configs_timings". A file stored under the key with other bytes: 409.
                           Per tenant: a host's entry is its token's alone (the token's id keys it,
                           cache/triton_entries.py publish_host); a GET with that bearer token sees
                           it, anyone else does not; a key a build's entry holds is refused (409):
                           an autotune file (or any) never shadows a prebuilt kernel
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any

from fastapi import FastAPI, Path, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rocke_aot.cache import triton_entries
from rocke_aot.errors import CodeObjectError, NotFoundError, SpecError
from rocke_aot.service import errors
from rocke_aot.service.errors import FieldError

TRITON_KEY_PATTERN = r"^[A-Z2-7]{52}$"
TritonKey = Annotated[str, Path(pattern=TRITON_KEY_PATTERN, description="Triton's cache key (base32 of a sha256)")]
_EM = {"hip": 224, "cuda": 190}  # ELF e_machine: EM_AMDGPU, EM_CUDA


class TritonFile(BaseModel):
    sha256: str
    size: int
    triton_version: str
    target: str
    artifact_key: str | None
    source: str


class TritonEntry(BaseModel):
    key: str
    files: dict[str, TritonFile]


class TritonPublish(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    triton_version: str = Field(max_length=64)
    files: dict[str, str] = Field(max_length=32, description="filename -> the bytes, base64")


class TritonPublished(BaseModel):
    key: str
    files: list[str]


def _entry(store, key: str, publisher: str | None = None) -> TritonEntry:
    rows = store.triton_entry(key, publisher)
    if not rows:
        raise NotFoundError(f"no Triton entry {key}")
    return TritonEntry(key=key, files={f: TritonFile(sha256=r.blob_sha256, size=r.size,
                                                     triton_version=r.triton_version, target=r.target,
                                                     artifact_key=r.artifact_key, source=r.source)
                                       for f, r in sorted(rows.items())})


def check_entry(key: str, version: str, files: dict[str, bytes]) -> str:
    """The target of a host's entry ("" for an autotune record), or FieldError / CodeObjectError."""
    from rocke_aot.aot.codeobject import validate
    from rocke_aot.targets import Target

    for name in files:
        try:
            triton_entries.check_filename(name)
        except SpecError as e:
            raise FieldError("files", str(e)) from None
    groups = [f for f in files if f.startswith("__grp__")]
    if not groups:
        tuned = [f for f in files if f.endswith(".autotune.json")]
        if len(files) != 1 or not tuned:
            raise FieldError("files", "an entry without a group file is one <kernel>.autotune.json")
        doc = _json(files[tuned[0]], tuned[0])
        if not isinstance(doc, dict) or "configs_timings" not in doc or "key" not in doc:
            raise FieldError("files", f"{tuned[0]} is not Triton's autotune record (key, configs_timings)")
        return ""
    if len(groups) != 1:
        raise FieldError("files", f"one group file per entry, got {groups}")
    grp = _json(files[groups[0]], groups[0])
    children = grp.get("child_paths") if isinstance(grp, dict) else None
    if not isinstance(children, list) or sorted(children) != sorted(f for f in files if f != groups[0]):
        raise FieldError("files", f"{groups[0]} must list exactly the entry's other files")
    name = groups[0][len("__grp__"):-len(".json")]
    meta = _json(files.get(f"{name}.json", b"null"), f"{name}.json")
    if not isinstance(meta, dict) or not isinstance(meta.get("hash"), str) or not isinstance(meta.get("target"), dict):
        raise FieldError("files", f"{name}.json is not Triton's metadata of kernel {name} (hash, target)")
    try:
        got = base64.b32encode(bytes.fromhex(meta["hash"])).decode().rstrip("=")
    except ValueError:
        raise FieldError("files", f"{name}.json: hash {meta['hash']!r} is not hex") from None
    if got != key:
        raise FieldError("key", f"{name}.json says hash {meta['hash'][:16]}..., whose cache key is {got}, not {key}")
    if meta.get("triton_version") != version or meta.get("name") != name:
        raise FieldError("triton_version", f"{name}.json is kernel {meta.get('name')!r} of Triton "
                                           f"{meta.get('triton_version')!r}; the publish says {name!r}, {version!r}")
    t = meta["target"]
    backend = t.get("backend")
    if backend not in _EM:
        raise FieldError("files", f"{name}.json: target backend {backend!r} is not hip or cuda")
    binary = files.get(f"{name}.{'hsaco' if backend == 'hip' else 'cubin'}")
    if binary is None:
        raise FieldError("files", f"the entry of {name} has no {name}.{'hsaco' if backend == 'hip' else 'cubin'}")
    try:
        target = Target.parse(str(t["arch"]) if backend == "hip" else f"sm_{t['arch']}")
    except (SpecError, KeyError) as e:
        raise FieldError("files", f"{name}.json: target {t!r} is not one rocke-aot knows ({e})") from None
    info = validate(binary, target)  # CodeObjectError -> 422
    if info.kernel != name:
        raise CodeObjectError(f"the binary holds kernel {info.kernel!r}, the metadata names {name!r}")
    return triton_entries.target_name(t)


def publish(store, key: str, req: TritonPublish, publisher: str) -> list[str]:
    files = {}
    for name, text in req.files.items():
        try:
            files[name] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as e:
            raise FieldError("files", f"{name} is not base64: {e}") from None
    target = check_entry(key, req.triton_version, files)
    store.put_triton_entry(key, files, triton_version=req.triton_version, target=target, source="host",
                           publisher=publisher)
    return sorted(files)


def install(app: FastAPI) -> None:
    @app.get("/v1/triton/{key}", tags=["triton"], response_model=TritonEntry,
             responses=errors.responses(404, 422, 500),
             summary="A Triton cache entry by Triton's own cache key: each file's sha256 (fetch it as a blob)")
    def get_triton(request: Request, key: TritonKey) -> TritonEntry:
        # the build's entry; where none, the bearer's own tenant's (no token: nobody's)
        return _entry(request.app.state.store, key, _publisher(request))

    @app.put("/v1/triton/{key}", tags=["triton"], response_model=TritonPublished,
             responses=errors.responses(401, 403, 409, 413, 422, 500),
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": {"$ref": "#/components/schemas/TritonPublish"}}}}},
             summary="Publish what a host's Triton compiled under its cache key (bearer token)")
    async def put_triton(request: Request, key: TritonKey) -> TritonPublished:
        try:
            req = TritonPublish.model_validate_json(await request.body())
        except ValidationError as e:
            first = e.errors()[0]
            loc = ".".join(str(p) for p in first.get("loc", ())) or "body"
            raise FieldError(loc, f"{loc}: {first.get('msg')}") from None
        publisher = _publisher(request)
        if publisher is None:  # the Guard let only a bearer of a token through
            raise FieldError("authorization", "a Triton publish needs a publish token")
        names = await run_in_threadpool(publish, request.app.state.store, key, req, publisher)
        return TritonPublished(key=key, files=names)



def _publisher(request: Request) -> str | None:
    """The tenant of the request: its bearer token's id, when it is one of the server's tokens."""
    from rocke_aot.cache.provenance import token_id
    from rocke_aot.service.guard import match_token

    scheme, _, cred = (request.headers.get("authorization") or "").partition(" ")
    got = match_token(request.app.state.tokens, cred.strip()) if scheme.lower() == "bearer" and cred.strip() else None
    return None if got is None else token_id(got)


def _json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data)
    except ValueError as e:
        raise FieldError("files", f"{what} is not JSON: {e}") from None
