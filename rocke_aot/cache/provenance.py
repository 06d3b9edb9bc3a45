"""How an artifact entered the store, and whether that makes it something a release may sign.

    Store.put(..., entered=Entry.built(toolchain, host))     the builder (the default of put)
    Store.put(..., entered=Entry.published(token))            PUT /v1/kernels (service/app.py)
    Store.put(..., entered=Entry.fetched(server))             a client keeping what it fetched
    Store.import_(path)  ──> Entry.imported(bundle sha256, file name)   (cache/bundle.py)
        │
        ▼ artifacts.entered / entered_json / verified_at   (rev 0010_provenance)
    a build that plans a key a row of another entry holds recompiles it (aot/builder/run.py):
        same bytes      -> verified_at = now (the row stays, its entry kept: who brought it)
        other bytes     -> the build's bytes replace the row (entered 'build'), reported
    signable(artifact): entered 'build', or verified_at set; every other row is left out of a
        release with its reason (trust/signable.py names them)

The entry is the store's own record, never the sender's word: a publisher's ``provenance``
object is kept as it was sent (what it says about itself), but ``entered`` is written by the
code path that stored the row. A token is recorded by its id (a sha256 prefix), never itself.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocke_aot.errors import SpecError

ENTRIES = ("build", "import", "publish", "fetch", "legacy")
SIGNABLE_ENTRY = "build"
_TOKEN_PREFIX = b"rocke-aot/publish-token/v1\n"


def token_id(token: str) -> str:
    """A publish token's id: 16 hex digits of a prefixed sha256 (the token itself is never stored)."""
    if not isinstance(token, str) or not token:
        raise SpecError("a publish token is a non-empty string")
    return hashlib.sha256(_TOKEN_PREFIX + token.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Entry:
    """How a row enters the store (``how``, one of ENTRIES) and by what (``by``: small, JSON)."""

    how: str
    by: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.how not in ENTRIES:
            raise SpecError(f"entry {self.how!r} is not one of {', '.join(ENTRIES)}")
        if not isinstance(self.by, Mapping):
            raise SpecError(f"entry {self.how}: 'by' must be a mapping, got {type(self.by).__name__}")

    @property
    def built(self) -> bool:
        return self.how == SIGNABLE_ENTRY

    def by_json(self) -> str:
        text = json.dumps(dict(self.by), sort_keys=True, separators=(",", ":"))
        if len(text) > 4096:
            raise SpecError(f"entry {self.how}: its detail is {len(text)} characters, over 4096")
        return text

    @classmethod
    def built_here(cls, toolchain: Mapping[str, Any] | None = None, host: str | None = None) -> Entry:
        by: dict[str, Any] = {}
        if toolchain is not None:
            by["toolchain"] = dict(toolchain)
        if host is not None:
            by["host"] = host
        return cls("build", by)

    @classmethod
    def imported(cls, bundle_sha256: str, name: str) -> Entry:
        return cls("import", {"bundle_manifest_sha256": bundle_sha256, "bundle": name[-200:]})

    @classmethod
    def published(cls, token: str) -> Entry:
        return cls("publish", {"token_id": token_id(token)})

    @classmethod
    def fetched(cls, server: str) -> Entry:
        return cls("fetch", {"server": server[:512]})


BUILD = Entry("build")


def signable(entered: str, verified_at: Any) -> bool:
    """Whether a row may be signed: built here, or verified by a build here since it entered."""
    return entered == SIGNABLE_ENTRY or verified_at is not None


def why_unsigned(entered: str, verified_at: Any) -> str | None:
    """None for a signable row, else why a release leaves it out (one sentence)."""
    if signable(entered, verified_at):
        return None
    how = {"import": "imported from a bundle", "publish": "published through the service",
           "fetch": "fetched from a server", "legacy": "stored before the store recorded provenance (schema < 9)"}
    return (f"{how.get(entered, entered)} and never verified by a build here "
            f"(rocke-aot build recompiles it and compares the bytes)")


__all__ = ["BUILD", "ENTRIES", "Entry", "signable", "token_id", "why_unsigned"]
