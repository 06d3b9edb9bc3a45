"""What the routes answer with, shared by them: a kernel's summary and record as the
service shows them, and the request headers they read (ETag, Accept-Encoding)."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from rocke_aot.cache.keys import thaw
from rocke_aot.cache.records import Artifact
from rocke_aot.service.schemas import KernelMeta, Resources

IMMUTABLE = "public, max-age=31536000, immutable"
RESOURCE_FIELDS = tuple(Resources.model_fields)


def etag_matches(header: str | None, sha: str) -> bool:
    if not header:
        return False
    for tag in header.split(","):
        tag = tag.strip()
        if tag == "*":
            return True
        tag = tag.removeprefix("W/")
        if tag.strip('"') == sha:
            return True
    return False


def accepts_zstd(header: str | None) -> bool:
    if not header:
        return False
    for item in header.split(","):
        name, _, params = item.strip().partition(";")
        if name.strip().lower() == "zstd":
            q = params.strip()
            if q.startswith("q="):
                try:
                    return float(q[2:]) > 0
                except ValueError:
                    return False
            return True
    return False


def prefix(request: Request) -> str:
    return request.scope.get("root_path", "")


def summary(a: Artifact, request: Request) -> dict[str, Any]:
    return {"key": a.key, "arch": a.arch, "lane": a.lane, "profile": a.profile, "family": a.family,
            "spec": thaw(a.spec), "sha256": a.sha256, "size": a.size,
            "url": f"{prefix(request)}/v1/blobs/{a.sha256}"}


def resources(metadata: dict[str, Any]) -> dict[str, Any]:
    """Code-object resources recorded at build time (aot/codeobject.py CodeObjectInfo)."""
    co = metadata.get("code_object") or {}
    return {f: co[f] for f in RESOURCE_FIELDS if co.get(f) is not None}


def _launch(md: dict[str, Any]) -> dict[str, Any] | None:
    """The record's launch contract (metadata["launch"]: every build, publish and import writes
    one and variants/contract.py refuses a record without it)."""
    launch = md.get("launch")
    return launch if isinstance(launch, dict) else None


def kernel_meta(a: Artifact, request: Request) -> KernelMeta:
    md = thaw(a.metadata)
    return KernelMeta(
        **summary(a, request), recipe_digest=a.recipe_digest, toolchain=dict(thaw(a.toolchain)),
        options=dict(thaw(a.options)),
        ir_sha256=a.ir_sha256, stored_size=a.stored_size,
        built_at=a.built_at.isoformat() if a.built_at else None,
        launch=_launch(md), resources=Resources(**resources(md)), provenance=thaw(a.provenance), metadata=md,
    )
