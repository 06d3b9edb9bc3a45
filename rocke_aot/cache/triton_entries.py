"""Triton cache entries in the store: the files a GPU host's Triton asks its cache manager for.

    entry_files(entry, json_text, binary) -> {filename: bytes}   what a build serves for one
        artifact: <kernel>.json (Triton's metadata, verbatim), the binary (the artifact's code
        object: the same blob), and the group file __grp__<kernel>.json whose child_paths are
        those two sorted, the form triton.runtime.cache.RemoteCacheManager.put_group writes.
        (Triton also keeps its IR stages; a host's CompiledKernel needs only the metadata and the
        binary, so a build serves those, as Triton does itself with TRITON_STORE_BINARY_ONLY=1.)
    publish(conn, key, files, version, target, artifact_key, source, put_blob)   every file a
        blob (put_blob: the store's own publish_blob), every (key, filename) one row; a file
        already stored under the key with other bytes is refused (EntryConflict): Triton's key
        covers what makes the bytes, so another binary under one key is a wrong entry
    publish_stored(conn, key, {filename: sha256}, ...)   the same for blobs already stored (an import)
    lookup(conn, key, publisher) -> {filename: EntryFile(blob_sha256, triton_version, target, artifact_key, source, size)}
        the build's entry; where none, the publisher's own host entry (triton_host_entries)
    publish_host(conn, key, publisher, files, ...)   a host's entry, its tenant's alone (publisher:
        the token id); refused where a build's entry holds the key (nothing shadows a prebuilt kernel)
    check_key / check_filename     the shapes Triton makes (base32 of a sha256; a file name
                                   without folders), refused otherwise (SpecError: HTTP 422)
    entry_of(metadata, binary, files)   a Triton build's put: the entry its record names, its
                                   files' sha256 checked against the record (None: not Triton)

TritonEntries is the store's part over this table (Store.put_triton_entry, Store.triton_entry);
a build's entry is written by the artifacts part inside its put's transaction.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, select

from rocke_aot.cache import codec, db
from rocke_aot.cache.models import blobs as B
from rocke_aot.cache.models import triton_entries as T
from rocke_aot.cache.models import triton_host_entries as H
from rocke_aot.errors import Conflict, SpecError

_KEY_RE = re.compile(r"^[A-Z2-7]{52}$")  # base32 of 32 bytes, '=' stripped (triton.runtime.cache._base32)
_FILE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
SOURCES = ("build", "host")
_Q = (select(T.c.filename, T.c.blob_sha256, T.c.triton_version, T.c.target, T.c.artifact_key, T.c.source, B.c.size)
      .select_from(T.join(B, T.c.blob_sha256 == B.c.sha256)).where(T.c.triton_key == bindparam("k")))


_QH = (select(H.c.filename, H.c.blob_sha256, H.c.triton_version, H.c.target, B.c.size)
       .select_from(H.join(B, H.c.blob_sha256 == B.c.sha256))
       .where(H.c.triton_key == bindparam("k"), H.c.publisher == bindparam("p")))


class EntryConflict(Conflict):
    """A file of a Triton entry is stored already, with other bytes."""


@dataclass(frozen=True)
class EntryFile:
    blob_sha256: str
    triton_version: str
    target: str
    artifact_key: str | None
    source: str
    size: int = 0


def check_key(key: object) -> str:
    if not isinstance(key, str) or not _KEY_RE.match(key):
        raise SpecError(f"a Triton cache key is 52 base32 characters (Triton's cache manager key), got {key!r}")
    return key


def check_filename(name: object) -> str:
    if not isinstance(name, str) or not _FILE_RE.match(name) or name in (".", ".."):
        raise SpecError(f"a Triton cache file name is letters, digits, '_', '.', '-' (no folders), got {name!r}")
    return name


def target_name(target: Mapping[str, Any]) -> str:
    """"hip:gfx942:64" / "cuda:90:32" from a GPUTarget as Triton's metadata JSON holds it."""
    return f"{target['backend']}:{target['arch']}:{target['warp_size']}"


def group_bytes(children: list[str]) -> bytes:
    return json.dumps({"child_paths": sorted(children)}).encode()


def entry_files(entry: Mapping[str, Any], json_text: bytes, binary: bytes) -> dict[str, bytes]:
    name = entry["name"]
    files = {f"{name}.json": bytes(json_text), entry["binary"]: bytes(binary)}
    files[f"__grp__{name}.json"] = group_bytes(list(files))
    return files


def publish(conn: Connection, key: str, files: Mapping[str, bytes], *, triton_version: str,
            target: str, artifact_key: str | None, source: str, put_blob: Callable[[bytes], str],
            now: float | None = None) -> None:
    check_key(key)
    for filename in files:
        check_filename(filename)
    publish_stored(conn, key, {f: put_blob(bytes(data)) for f, data in sorted(files.items())},
                   triton_version=triton_version, target=target, artifact_key=artifact_key, source=source, now=now)


def publish_stored(conn: Connection, key: str, shas: Mapping[str, str], *, triton_version: str, target: str,
                   artifact_key: str | None, source: str, now: float | None = None) -> None:
    """publish() of files whose blobs are stored already ({filename: blob sha256}: a bundle's import)."""
    check_key(key)
    if source not in SOURCES:
        raise SpecError(f"a Triton entry's source is one of {SOURCES}, got {source!r}")
    now = time.time() if now is None else now
    have = lookup(conn, key)
    for filename, sha in sorted(shas.items()):
        check_filename(filename)
        old = have.get(filename)
        if old is not None:
            if old.blob_sha256 != sha:
                raise EntryConflict(f"Triton entry {key} already holds {filename} with sha256 "
                                    f"{old.blob_sha256[:16]}, not {sha[:16]}")
            continue
        conn.execute(db.insert_ignore(conn, T), {"triton_key": key, "filename": filename, "blob_sha256": sha,
                                              "triton_version": triton_version, "target": target,
                                              "artifact_key": artifact_key, "source": source, "created_at": now})


def lookup(conn: Connection, key: str, publisher: str | None = None) -> dict[str, EntryFile]:
    """The build's entry under ``key``; where no build holds the key, ``publisher``'s own host
    entry (None: nobody's). A host's files never join or shadow a build's entry."""
    check_key(key)
    built = {r.filename: EntryFile(r.blob_sha256, r.triton_version, r.target, r.artifact_key, r.source, r.size)
             for r in conn.execute(_Q, {"k": key})}
    if built or publisher is None:
        return built
    return {r.filename: EntryFile(r.blob_sha256, r.triton_version, r.target, None, "host", r.size)
            for r in conn.execute(_QH, {"k": key, "p": publisher})}


def publish_host(conn: Connection, key: str, publisher: str, files: Mapping[str, bytes], *, triton_version: str,
                 target: str, put_blob: Callable[[bytes], str], now: float | None = None) -> None:
    """A GPU host's entry, its tenant's (``publisher``: the token's id) alone. Refused (EntryConflict)
    where a build's entry holds the key (an autotune file or any other never shadows a prebuilt
    kernel) or where this tenant stored a file of the key with other bytes."""
    check_key(key)
    if not isinstance(publisher, str) or not publisher or publisher == "legacy":
        raise SpecError(f"a host entry's publisher is a token id, got {publisher!r}")
    for filename in files:
        check_filename(filename)
    if conn.execute(_Q, {"k": key}).first() is not None:
        raise EntryConflict(f"Triton entry {key} is a build's (prebuilt): a host's files never join or shadow it")
    now = time.time() if now is None else now
    have = {r.filename: r.blob_sha256 for r in conn.execute(_QH, {"k": key, "p": publisher})}
    for filename, data in sorted(files.items()):
        sha = put_blob(bytes(data))
        if filename in have:
            if have[filename] != sha:
                raise EntryConflict(f"Triton entry {key} already holds {filename} with sha256 {have[filename][:16]}, "
                                    f"not {sha[:16]}")
            continue
        conn.execute(db.insert_ignore(conn, H), {"triton_key": key, "publisher": publisher, "filename": filename,
                                              "blob_sha256": sha, "triton_version": triton_version, "target": target,
                                              "created_at": now})


def entry_of(metadata: Mapping[str, Any], binary: bytes, files: Mapping[str, bytes] | None) -> dict[str, Any] | None:
    """The Triton cache entry of a Triton build's put (None for any other artifact)."""
    entry = metadata.get("triton")
    if entry is None:
        return None
    name = entry["name"]
    json_text = (files or {}).get(f"{name}.json")
    if json_text is None:
        if files is None:  # a code object reused by another plan key: its entry is stored already
            return None
        raise SpecError(f"a Triton build of {name} must store its {name}.json")
    if codec.sha256_hex(json_text) != entry["files"].get(f"{name}.json") or \
            codec.sha256_hex(binary) != entry["files"].get(entry["binary"]):
        raise SpecError(f"Triton entry {entry['key']}: its files' sha256 are not the ones its record states")
    return {"key": entry["key"], "triton_version": entry["triton_version"], "target": target_name(entry["target"]),
            "files": entry_files(entry, json_text, binary)}


class TritonEntries:
    """The Triton-entries part of one store: a host's publish and the lookup by Triton's key."""

    def __init__(self, handle: db.Handle, blobs):
        self.handle = handle
        self.blobs = blobs  # cache/blobs.py Blobs: every file is a blob

    def put(self, key: str, files: Mapping[str, bytes], *, triton_version: str, target: str,
            artifact_key: str | None = None, source: str = "host", publisher: str | None = None) -> None:
        """A build's entry (source 'build'), or a host's: then ``publisher`` (its token id) is required."""
        self.handle.writable("put a Triton entry")
        if source == "host" and publisher is None:
            raise SpecError("a host's Triton entry needs its publisher (the token id): entries are per tenant")
        with db.write_tx(self.handle.engine) as conn:
            now = time.time()

            def put_blob(data: bytes) -> str:
                return self.blobs.put(conn, data, "triton", "triton", now)

            if source == "host" and publisher is not None:  # checked above: a host's entry has one
                publish_host(conn, key, publisher, files, triton_version=triton_version, target=target,
                             put_blob=put_blob, now=now)
            else:
                publish(conn, key, files, triton_version=triton_version, target=target, artifact_key=artifact_key,
                        source=source, put_blob=put_blob, now=now)

    def lookup(self, key: str, publisher: str | None = None) -> dict[str, EntryFile]:
        with db.read_tx(self.handle.engine) as conn:
            return lookup(conn, key, publisher)
