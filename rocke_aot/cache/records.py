"""Value types the store hands out (all frozen), and their conversion from table rows.

    artifacts row ──to_artifact──> Artifact   (status 'ok'; code_object filled by get() only)
                  ──to_failure───> Failure    (status 'failed'; a cached negative entry)
    lookup_many ─────────────────> Hit        (key, kind, blob sha256 or error; no blob loaded)

Artifact and Failure share their leading fields (the key and its KeyInputs) through _Keyed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rocke_aot.cache import provenance
from rocke_aot.cache.keys import INPUT_FIELDS, KeyInputs, freeze, inputs_dict, thaw

# a table row by column name: a dict, or SQLAlchemy's RowMapping (keyed by a name or a Column)
RowLike = Mapping[Any, Any]


def _ts(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, tz=timezone.utc)


def _at(t: float) -> datetime:
    """A NOT NULL timestamp column (models.py) as a datetime."""
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


@dataclass(frozen=True)
class _Keyed:
    """A stored entry's key and the KeyInputs it was computed from."""

    key: str
    arch: str
    lane: str
    profile: str
    family: str
    spec: Mapping[str, Any]
    recipe_digest: str
    toolchain: Mapping[str, str]
    options: Mapping[str, Any]

    __hash__ = None  # type: ignore[assignment]  # mappings inside; compare, don't hash

    @property
    def inputs(self) -> KeyInputs:
        return KeyInputs(self.arch, self.lane, self.profile, self.family, self.spec, self.recipe_digest,
                         self.toolchain, self.options)

    def _keyed_dict(self, status: str) -> dict[str, Any]:
        return {"key": self.key, "status": status, **inputs_dict(self)}


@dataclass(frozen=True)
class Artifact(_Keyed):
    ir_sha256: str | None
    sha256: str  # of the raw code object (the blob id)
    size: int  # raw code-object bytes
    stored_size: int  # compressed bytes as stored (shared by every artifact of that blob)
    metadata: Mapping[str, Any]
    provenance: Mapping[str, Any]
    built_at: datetime
    last_read_at: datetime | None
    # Verified bytes from Store.get(); None in listings (find), which never load blobs.
    code_object: bytes | None = field(default=None, repr=False, compare=False)
    # How it entered the store (cache/provenance.py; the store's record, not the sender's word)
    entered: str = "legacy"
    entered_by: Mapping[str, Any] = field(default_factory=dict)
    verified_at: datetime | None = None

    __hash__ = None  # type: ignore[assignment]  # (dataclass would add one to a subclass)

    @property
    def signable(self) -> bool:
        """Built here, or verified by a build here since it entered (cache/provenance.py)."""
        return provenance.signable(self.entered, self.verified_at)

    @property
    def blob_sha256(self) -> str:
        """The blob id (sha256 of the raw code object); same as ``sha256``."""
        return self.sha256

    def as_dict(self) -> dict[str, Any]:
        return {
            **self._keyed_dict("ok"),
            "ir_sha256": self.ir_sha256,
            "sha256": self.sha256,
            "size": self.size,
            "stored_size": self.stored_size,
            "metadata": thaw(self.metadata),
            "provenance": thaw(self.provenance),
            "built_at": _iso(self.built_at),
            "last_read_at": _iso(self.last_read_at),
            "entered": self.entered,
            "entered_by": thaw(self.entered_by),
            "verified_at": _iso(self.verified_at),
        }


@dataclass(frozen=True)
class Failure(_Keyed):
    """A cached build failure: the builder does not retry it unless forced."""

    error: str
    log: str
    failed_at: datetime

    __hash__ = None  # type: ignore[assignment]

    def as_dict(self) -> dict[str, Any]:
        return {
            **self._keyed_dict("failed"),
            "error": self.error,
            "log": self.log,
            "failed_at": _iso(self.failed_at),
        }


@dataclass(frozen=True)
class Hit:
    """One present key from lookup_many: an artifact (``sha256`` set) or a cached failure."""

    key: str
    kind: str  # "artifact" | "failure"
    sha256: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.kind == "artifact"


@dataclass(frozen=True)
class StoreStats:
    url: str
    backend: str
    schema_version: int
    artifacts: int
    failures: int
    blobs: int
    raw_bytes: int  # sum of distinct blobs' raw sizes
    stored_bytes: int  # sum of distinct blobs' compressed sizes
    referenced_raw_bytes: int  # sum over artifacts (what the store would hold without dedup)
    orphan_blobs: int
    by_arch_lane: tuple[tuple[str, str, int], ...]
    max_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["by_arch_lane"] = [{"arch": a, "lane": l, "artifacts": n} for a, l, n in self.by_arch_lane]
        d["compression_ratio"] = round(self.raw_bytes / self.stored_bytes, 3) if self.stored_bytes else None
        return d


@dataclass(frozen=True)
class VerifyReport:
    checked_blobs: int
    checked_artifacts: int
    corrupt: tuple[tuple[str, str], ...]  # (blob sha256, reason)
    affected_keys: tuple[str, ...]  # artifacts whose blob is corrupt or missing
    bad_keys: tuple[tuple[str, str], ...]  # (key, reason): key != artifact_key(stored inputs)
    orphan_blobs: int
    bad_records: tuple[tuple[str, str], ...] = ()  # (key, reason): metadata/provenance the record schema refuses
    origins: tuple[tuple[str, int], ...] = ()  # (server URL, artifacts a client fetched from it), most first

    @property
    def ok(self) -> bool:
        return not (self.corrupt or self.affected_keys or self.bad_keys or self.bad_records)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "checked_blobs": self.checked_blobs,
            "checked_artifacts": self.checked_artifacts,
            "corrupt": [{"sha256": s, "reason": r} for s, r in self.corrupt],
            "affected_keys": list(self.affected_keys),
            "bad_keys": [{"key": k, "reason": r} for k, r in self.bad_keys],
            "bad_records": [{"key": k, "reason": r} for k, r in self.bad_records],
            "origins": [{"source": s, "artifacts": n} for s, n in self.origins],
            "orphan_blobs": self.orphan_blobs,
        }


@dataclass(frozen=True)
class GcReport:
    artifacts_evicted: int
    blobs_deleted: int
    bytes_freed: int  # stored (compressed) bytes
    stored_bytes_after: int
    generations_dropped: tuple[str, ...] = ()  # gc --keep N: generations no ref points to

    def as_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["generations_dropped"] = list(self.generations_dropped)
        return d


def _loads(s: str | None) -> Any:
    return None if s is None else json.loads(s)


def _keyed(row: RowLike) -> dict[str, Any]:
    """The _Keyed fields of a row, its inputs validated and canonicalized through KeyInputs."""
    inputs = KeyInputs(
        row["arch"], row["lane"], row["profile"], row["family"],
        _loads(row["spec_json"]), row["recipe_digest"], _loads(row["toolchain_json"]), _loads(row["options_json"]),
    )
    return {"key": row["key"], **{n: getattr(inputs, n) for n in INPUT_FIELDS}}


def to_artifact(row: RowLike, code_object: bytes | None = None) -> Artifact:
    return Artifact(
        **_keyed(row),
        ir_sha256=row["ir_sha256"],
        sha256=row["blob_sha256"],
        size=row["size"],
        stored_size=row["stored_size"],
        metadata=freeze(_loads(row["metadata_json"])),
        provenance=freeze(_loads(row["provenance_json"])),
        built_at=_at(row["built_at"]),
        last_read_at=_ts(row["last_read_at"]),
        code_object=code_object,
        entered=row.get("entered") or "legacy",
        entered_by=freeze(_loads(row.get("entered_json") or "{}")),
        verified_at=_ts(row.get("verified_at")),
    )


def to_failure(row: RowLike) -> Failure:
    return Failure(
        **_keyed(row),
        error=row["error"],
        log=row["log"] or "",
        failed_at=_at(row["built_at"]),
    )
