"""PUT /v1/kernels/{key}: a code object published under its key by a bearer of a publish
token. Auth is answered from the head first (service/guard.py), the body parsed within its
bounds, and every check runs before the one write: a refusal writes nothing. What is stored
is recorded as published under the token's id: never signed, never counted as built, until a
build verifies it."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import APIRouter, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from rocke_aot import record
from rocke_aot.aot.codeobject import record_metadata
from rocke_aot.aot.codeobject import validate as validate_code_object
from rocke_aot.cache.codec import sha256_hex
from rocke_aot.cache.keys import KeyInputs, artifact_key
from rocke_aot.cache.provenance import Entry
from rocke_aot.cache.records import Artifact
from rocke_aot.cache.store import Store
from rocke_aot.errors import AdmissionError, KeyConflictError, LaneError, SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.service import access, errors, fields, guard
from rocke_aot.service.errors import Conflict, FieldError, ReadOnly, Unauthorized
from rocke_aot.service.schemas import PublishRequest, PublishResponse
from rocke_aot.service.state import Key, StoreDep, service
from rocke_aot.service.views import kernel_meta
from rocke_aot.variants.contract import admit_spec, check_record_launch

router = APIRouter(tags=["publish"])
_bearer = HTTPBearer(auto_error=False, description="The server's publish token (rocke-aot serve --token-file)")


@router.put("/v1/kernels/{key}", response_model=PublishResponse,
            responses=errors.responses(401, 403, 409, 413, 422, 500),
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/PublishRequest"}}}}},
            summary="Publish a code object under its key (bearer token)")
async def publish(request: Request, store: StoreDep, key: Key,
                  credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]) -> PublishResponse:
    metrics = service(request).metrics
    if not request.app.state.tokens:
        metrics.publishes.labels("read_only").inc()
        raise ReadOnly("this server is read-only: it was started without a publish token")
    want = guard.match_token(request.app.state.tokens, None if credentials is None else credentials.credentials)
    if want is None:
        metrics.publishes.labels("unauthorized").inc()
        raise Unauthorized("a publish needs the server's bearer token (Authorization: Bearer ...)")
    raw_body = await request.body()
    try:
        req = PublishRequest.model_validate_json(raw_body)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise FieldError(loc, f"{loc}: {first.get('msg')}") from None
    out = await run_in_threadpool(put_published, store, key, req, Entry.published(want))
    metrics.publishes.labels("created" if out[0] else "exists").inc()
    return PublishResponse(created=out[0], kernel=kernel_meta(out[1], request))


def put_published(store: Store, key: str, req: PublishRequest, entered: Entry) -> tuple[bool, Artifact]:
    """Every check before the one write; any refusal writes nothing. The spec must be one the
    family admits on that arch and lane (variants/contract.py admit_spec: gemm waves=3 is 422)
    and the launch contract the one its formulas give (check_record_launch: a grid 4x too large or
    an output sized m instead of m * n is 422). (created, the stored row)."""
    target = fields.target(req.arch)
    lane = fields.lane(req.lane)
    family = fields.family(req.family)
    try:
        code = base64.b64decode(req.code_object, validate=True)
    except (binascii.Error, ValueError) as e:
        raise FieldError("code_object", f"code_object is not base64: {e}") from None
    if not code:
        raise FieldError("code_object", "code_object is empty")
    got = sha256_hex(code)
    if got != req.sha256:
        raise FieldError("sha256", f"the code object hashes to {got}, not the declared {req.sha256}")
    profile = req.profile if req.profile is not None else get_lane(lane).profile_name
    try:
        inputs = KeyInputs(target.id, lane, profile, family, req.spec, req.recipe_digest, req.toolchain, req.options)
    except (SpecError, LaneError) as e:
        raise FieldError("spec", f"key inputs refused: {e}") from None
    want = artifact_key(inputs)
    if want != key:
        raise FieldError("key", f"the key inputs hash to {want}, not {key}")
    try:
        admit_spec(family, req.spec, target, lane)
    except (SpecError, AdmissionError) as e:
        raise FieldError("spec", f"the family does not admit this spec: {e}") from None
    info = validate_code_object(code, target)  # CodeObjectError -> 422
    existing = store.lookup_many([key]).get(key)
    if existing is not None and existing.ok:
        if existing.sha256 != got:
            raise Conflict(f"artifact {key} already holds code object {existing.sha256}; refusing {got}")
        return False, access.kernel_row(store, key)
    # the resources the server read from the object itself, the launch contract checked against it
    metadata = record_metadata(req.metadata, info)  # RecordError / CodeObjectError: 422
    try:
        check_record_launch(family, req.spec, target, metadata)
    except SpecError as e:
        raise FieldError("metadata.launch", str(e)) from None
    record.check_provenance(req.provenance)
    try:
        store.put(inputs, code, ir_sha256=req.ir_sha256, metadata=metadata, provenance=req.provenance,
                  entered=entered)
    except KeyConflictError as e:  # a concurrent publish of other bytes won the race
        raise Conflict(str(e)) from None
    return True, access.kernel_row(store, key)
