"""Signed metadata beside the blobs: what the service serves of trust/, and how it takes a new generation.

    GET /v1/trust/{root,index,manifest}.json   the files of --trust-dir as they were signed
                                               (no-cache: a host must see a new index at once)
    PUT /v1/trust                              {"root": text, "index": text, "manifest": text}
        bearer token (as a kernel publish) ──> checks, all before any write:
            the server has a pinned root key (--root-key), else ReadOnly (403)
            root.json signed by it; index.json and manifest.json by root's release keys;
            none expired; the index names this manifest           (trust/metadata.py)
            no version older than the one being served (409 RollbackError); the same version
            with other bytes: 409 Conflict
            every kernel the manifest lists is in the store with the signed sha256
        ──> root.json, manifest.json, then index.json written by rename (a reader never sees an
            index naming a manifest that is not there yet)

The service is not trusted by hosts (they check the same signatures against their own pinned
key); the checks here stop an operator's mistake or a stolen publish token from replacing
what the service offers with something hosts would refuse anyway.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal

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
from rocke_aot.trust import metadata as md
from rocke_aot.trust.keys import PublicKey

NAMES = ("root.json", "index.json", "manifest.json")
_bearer = HTTPBearer(auto_error=False, description="The server's publish token (rocke-aot serve --token-file)")


def _current(trust_dir: Path, name: str) -> dict | None:
    try:
        return json.loads((trust_dir / name).read_bytes())
    except FileNotFoundError:
        return None


def accept(store: Store, trust_dir: Path, root_key: PublicKey, root: str, index: str, manifest: str,
           now: datetime | None = None) -> dict:
    """Check a signed generation as a host would, then against the store; write it. Returns a summary."""
    now = now or datetime.now(timezone.utc)
    texts = {"root.json": root, "index.json": index, "manifest.json": manifest}
    if not all(isinstance(t, str) for t in texts.values()):
        raise SpecError("a signed generation is {root, index, manifest}, each the text of its file")
    data = {n: t.encode() for n, t in texts.items()}
    r = md.check_root(md.loads(data["root.json"], "root.json"), root_key, now)
    ix = md.check_index(md.loads(data["index.json"], "index.json"), r, now)
    m = md.check_manifest(data["manifest.json"], ix, r, now)
    for name, version in (("root.json", r.version), ("index.json", ix.version)):
        cur = _current(trust_dir, name)
        if cur is None:
            continue
        have = cur["signed"]["version"]
        if version < have:
            raise RollbackError(f"{name} version {version} is older than the served version {have}")
        if version == have and (trust_dir / name).read_bytes() != data[name]:
            raise Conflict(f"{name} version {version} is already served with other content: sign a new version")
    hits = store.lookup_many(list(m.kernels))
    missing = [k for k in m.kernels if k not in hits or not hits[k].ok]
    if missing:
        raise NotFoundError(f"manifest version {m.version} lists {len(missing)} kernel(s) this store does not hold "
                            f"(first: {missing[0]}): publish them first")
    wrong = [k for k, e in m.kernels.items() if hits[k].sha256 != e.get("sha256")]
    if wrong:
        raise BlobMismatchError(f"manifest version {m.version}: kernel {wrong[0]} has sha256 "
                                f"{m.kernels[wrong[0]].get('sha256')} signed, {hits[wrong[0]].sha256} stored")
    for name in NAMES:  # root, manifest, index: the index last
        if name != "index.json":
            atomic_write(trust_dir / name, data[name])
    atomic_write(trust_dir / "index.json", data["index.json"])
    return {"version": m.version, "kernels": len(m.kernels), "root_version": r.version,
            "generations": [{"arch": a, "lane": lane, "family": f, "generation": g} for a, lane, f, g in m.generations]}


class SignedGeneration(BaseModel):
    """The three files of a signed generation, each as the exact text that was signed."""

    root: str = Field(description="The text of root.json")
    index: str = Field(description="The text of index.json")
    manifest: str = Field(description="The text of manifest.json")


class GenerationPublished(BaseModel):
    version: int = Field(description="The manifest version now served")
    kernels: int = Field(description="How many kernels it lists")
    root_version: int
    generations: list[dict[str, str]] = Field(description="arch, lane, family and generation id of each one served")


MetaName = Annotated[Literal["root.json", "index.json", "manifest.json"],
                     PathParam(description="Which document: root.json, index.json or manifest.json")]
_JSON_DOC = {200: {"description": "The document as it was signed",
                   "content": {"application/json": {"schema": {"type": "object"}}}}}


def install(app: FastAPI, trust_dir: str | Path | None, root_key: PublicKey | None) -> None:
    """The /v1/trust routes; ``trust_dir`` None: GET answers 404, PUT 403."""
    where = Path(trust_dir) if trust_dir is not None else None

    @app.get("/v1/trust/{name}", tags=["trust"], response_class=Response,
             responses={**_JSON_DOC, **errors.responses(404, 422)},
             summary="Signed metadata of the served generations (root.json, index.json, manifest.json)")
    async def get_metadata(name: MetaName) -> Response:
        if where is None:
            raise NotFoundError("this server serves no signed metadata (rocke-aot serve --trust-dir)")
        try:
            body = await run_in_threadpool((where / name).read_bytes)
        except FileNotFoundError:
            raise NotFoundError(f"no {name} in the served metadata yet") from None
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-cache"})

    @app.put("/v1/trust", tags=["trust"], response_model=GenerationPublished,
             responses=errors.responses(401, 403, 404, 409, 413, 422),
             summary="Publish a signed generation (bearer token; every signature checked before writing)")
    async def put_metadata(request: Request, doc: SignedGeneration,
                           credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)]
                           ) -> GenerationPublished:
        tokens = request.app.state.tokens
        if not tokens or where is None or root_key is None:
            raise ReadOnly("this server takes no signed metadata: it needs --token-file, --trust-dir and --root-key")
        if match_token(tokens, None if credentials is None else credentials.credentials) is None:
            raise Unauthorized("a publish needs the server's bearer token (Authorization: Bearer ...)")
        out = await run_in_threadpool(_locked_accept, request.app.state.store, where, root_key,
                                      doc.root, doc.index, doc.manifest)
        return GenerationPublished(**out)


def _locked_accept(store: Store, trust_dir: Path, root_key: PublicKey, *texts) -> dict:
    # one publish at a time across every worker process: the version checks and the writes
    # must not interleave with another publish's
    trust_dir.mkdir(parents=True, exist_ok=True)
    with exclusive(trust_dir / ".publish.lock"):
        return accept(store, trust_dir, root_key, *texts)
