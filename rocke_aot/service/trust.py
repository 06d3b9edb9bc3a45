"""Signed metadata beside the blobs: what the service serves of trust/, and how it takes a new version.

    GET /v1/trust/{name}          a file of the TUF repository in --trust-dir (trust/repo.py) as
                                  signed: N.root.json, V.snapshot.json, V.targets.json,
                                  V.bins-<hex>.json (immutable: cacheable forever), timestamp.json
                                  (no-cache: a host must see a new one at once)
    PUT /v1/trust/{name}          one file per request, streamed (no whole-repository body), bearer
                                  token (as a kernel publish); `rocke-aot trust publish` sends the
                                  versioned files first, timestamp.json last
        a versioned file: written if absent; the same bytes again: nothing; other bytes under a
            served name: 409 Conflict (a version is never rewritten)
        timestamp.json: the whole repository it names is checked as a host would, from the
            server's pinned root key (--root-key): root chain, signatures, expiry, snapshot,
            targets, every bin (trust/repo.verify); not older than the served timestamp (409
            RollbackError); every kernel target in the store with the signed sha256 and size;
            then, and only then, it replaces the served timestamp.json by rename

The service is not trusted by hosts (they check the same signatures against their own pin);
the checks here stop an operator's mistake or a stolen publish token from replacing what the
service offers with something hosts would refuse anyway.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, Request, Security
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from rocke_aot.cache.store import Store
from rocke_aot.errors import (
    BlobMismatchError,
    Conflict,
    NotFoundError,
    ReadOnly,
    RollbackError,
    SpecError,
    Unauthorized,
)
from rocke_aot.paths import atomic_write, exclusive
from rocke_aot.service import errors
from rocke_aot.service.guard import match_token
from rocke_aot.trust import repo
from rocke_aot.trust.keys import PublicKey

MAX_FILE = 64 << 20  # one metadata file (a snapshot of 65,536 bins is a few MiB)
_bearer = HTTPBearer(auto_error=False, description="The server's publish token (rocke-aot serve --token-file)")


def check_name(name: str) -> str:
    if not re.match(repo.NAME_RE, name):
        raise SpecError(f"{name[:80]!r} is not a metadata file name (N.role.json or timestamp.json)")
    return name


def accept_file(store: Store, trust_dir: Path, root_key: PublicKey, name: str, data: bytes,
                now: datetime | None = None) -> dict:
    """Take one file of a new repository version (see the module doc). Returns a summary."""
    check_name(name)
    repo.migrate_error(trust_dir)
    if repo.versioned(name):
        path = trust_dir / name
        if path.is_file():
            if path.read_bytes() != data:
                raise Conflict(f"{name} is already served with other content: a version is never rewritten")
            return {"name": name, "written": False}
        atomic_write(path, data)
        return {"name": name, "written": True}
    if name != "timestamp.json":
        raise SpecError(f"{name}: the only unversioned file is timestamp.json")
    now = now or datetime.now(timezone.utc)
    v = repo.verify(trust_dir, root_key, now, timestamp=data)
    cur = trust_dir / "timestamp.json"
    if cur.is_file():
        have = json.loads(cur.read_bytes())["signed"]["version"]
        if v.timestamp_version < have:
            raise RollbackError(f"timestamp.json version {v.timestamp_version} is older than the served version {have}")
        if v.timestamp_version == have and cur.read_bytes() != data:
            raise Conflict(f"timestamp.json version {have} is already served with other content: sign a new version")
    keys = list(v.kernels)
    hits = {}
    for i in range(0, len(keys), 1000):
        hits.update(store.lookup_many(keys[i:i + 1000]))
    missing = [k for k in keys if k not in hits or not hits[k].ok]
    if missing:
        raise NotFoundError(f"snapshot version {v.snapshot_version} lists {len(missing)} kernel(s) this store does "
                            f"not hold (first: {missing[0]}): publish them first")
    wrong = [k for k in keys if hits[k].sha256 != v.kernels[k]["sha256"]]
    if wrong:
        raise BlobMismatchError(f"snapshot version {v.snapshot_version}: kernel {wrong[0]} has sha256 "
                                f"{v.kernels[wrong[0]]['sha256']} signed, {hits[wrong[0]].sha256} stored")
    atomic_write(cur, data)
    return {"name": name, "written": True, "version": v.timestamp_version, "snapshot_version": v.snapshot_version,
            "kernels": len(keys), "root_version": v.root_version}


class FilePublished(BaseModel):
    name: str = Field(description="The file taken")
    written: bool = Field(description="False when the same bytes were already served")
    version: int | None = Field(default=None, description="timestamp.json: the version now served")
    snapshot_version: int | None = None
    kernels: int | None = Field(default=None, description="timestamp.json: how many kernel targets it vouches for")
    root_version: int | None = None


MetaName = Annotated[str, PathParam(description="A metadata file: N.root.json, timestamp.json, V.snapshot.json, "
                                                "V.targets.json, V.bins-<hex>.json", max_length=80)]
_JSON_DOC: dict[int | str, dict[str, Any]] = {200: {"description": "The file as it was signed",
                   "content": {"application/json": {"schema": {"type": "object"}}}}}


def install(app: FastAPI, trust_dir: str | Path | None, root_key: PublicKey | None) -> None:
    """The /v1/trust routes; ``trust_dir`` None: GET answers 404, PUT 403."""
    where = Path(trust_dir) if trust_dir is not None else None

    @app.get("/v1/trust/{name}", tags=["trust"], response_class=Response,
             responses={**_JSON_DOC, **errors.responses(404, 422)},
             summary="A file of the signed TUF repository (timestamp.json, N.root.json, V.snapshot.json, ...)")
    async def get_metadata(name: MetaName) -> Response:
        check_name(name)
        if where is None:
            raise NotFoundError("this server serves no signed metadata (rocke-aot serve --trust-dir)")
        try:
            body = await run_in_threadpool((where / name).read_bytes)
        except FileNotFoundError:
            raise NotFoundError(f"no {name} in the served metadata") from None
        cache = "public, max-age=31536000, immutable" if repo.versioned(name) else "no-cache"
        return Response(body, media_type="application/json", headers={"Cache-Control": cache})

    @app.put("/v1/trust/{name}", tags=["trust"], response_model=FilePublished,
             responses=errors.responses(401, 403, 404, 409, 413, 422),
             summary="Publish one file of a signed TUF repository (bearer token; timestamp.json last, checked whole)")
    async def put_metadata(request: Request, name: MetaName,
                           credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]
                           ) -> FilePublished:
        tokens = request.app.state.tokens
        if not tokens or where is None or root_key is None:
            raise ReadOnly("this server takes no signed metadata: it needs --token-file, --trust-dir and --root-key")
        if match_token(tokens, None if credentials is None else credentials.credentials) is None:
            raise Unauthorized("a publish needs the server's bearer token (Authorization: Bearer ...)")
        check_name(name)
        chunks, n = [], 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > MAX_FILE:
                raise SpecError(f"{name} is over {MAX_FILE} bytes")
            chunks.append(chunk)
        out = await run_in_threadpool(_locked_accept, request.app.state.store, where, root_key, name, b"".join(chunks))
        return FilePublished(**out)


def _locked_accept(store: Store, trust_dir: Path, root_key: PublicKey, name: str, data: bytes) -> dict:
    # one publish at a time across every worker process: the checks and the writes must not
    # interleave with another publish's
    trust_dir.mkdir(parents=True, exist_ok=True)
    with exclusive(trust_dir / ".publish.lock"):
        return accept_file(store, trust_dir, root_key, name, data)
