"""A static mirror of signed generations: files any HTTP server, object store or CDN serves as is.

    TREE/
    ├── metadata/                              the TUF repository (`rocke-aot trust sign`,
    │                                          trust/repo.py): N.root.json, timestamp.json,
    │                                          V.snapshot.json, V.targets.json, V.bins-<hex>.json
    ├── targets/kernels/<sha256>.<key>         each kernel target, raw, where any TUF client
    │                                          (consistent snapshots) downloads it
    ├── blobs/<sha256>.zst                     each listed code object as one zstd frame, and
    │                                          the other files of each Triton entry
    └── triton/<Triton key>.json               the Triton cache entry of each listed Triton build,
                                               in the service's GET /v1/triton/{key} form (files:
                                               sha256, size, version, target, artifact_key: the
                                               listed kernel), what client/triton_cache.py reads

    export(store, signed_dir, tree)   every blob the manifest lists, read from the store
                                      (verified there: sha256 and size) and checked against
                                      the manifest's sha256 and size; every listed Triton
                                      build's entry (the store's, each file checked against the
                                      sha256 the signed record states: metadata and binary, the
                                      group file listing exactly those two), then the metadata
    sync(store, signed_dir, tree)     the same, writing only blobs the tree does not hold yet
                                      (and, with ``prune``, removing blobs and entries no longer
                                      listed)

Order: blobs and targets first, then the Triton entries, then the versioned metadata, then
timestamp.json (last), each by rename; a host reading the tree mid-update sees the old
timestamp (whose files are all there) or the new one. The repository is verified (from the
pin given, else from its own 1.root.json) before anything is written. Nothing here is trusted by hosts: they verify the signatures and
every blob themselves, and a Triton entry only when the signed manifest lists its build with
the same files (a listed build whose entry the store lacks is left out: a host compiles it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rocke_aot.cache import codec, triton_entries
from rocke_aot.cache.store import Store
from rocke_aot.errors import BlobMismatchError, TrustError
from rocke_aot.paths import atomic_write


@dataclass(frozen=True)
class MirrorReport:
    tree: str
    version: int
    kernels: int
    blobs_written: int
    blobs_kept: int
    blobs_pruned: int
    bytes_written: int
    triton_entries: int = 0  # the listed Triton builds whose cache entry the tree holds
    triton_missing: tuple[str, ...] = ()  # listed Triton builds whose entry the store lacks (keys)

    def as_dict(self) -> dict:
        return {**self.__dict__, "triton_missing": list(self.triton_missing)}


def blob_path(tree: Path, sha256: str) -> Path:
    return tree / "blobs" / f"{sha256}.zst"


def target_file(tree: Path, key: str, sha256: str) -> Path:
    """Where a TUF client (consistent snapshots) downloads the target "kernels/<key>"."""
    return tree / "targets" / repo_kernels() / f"{sha256}.{key}"


def repo_kernels() -> str:
    from rocke_aot.trust.repo import KERNELS

    return KERNELS


def entry_path(tree: Path, key: str) -> Path:
    return tree / "triton" / f"{triton_entries.check_key(key)}.json"


def _listed(signed_dir: Path, pin=None):
    """(the verified repository, {sha256: size}, {Triton key: (kernel key, its signed metadata["triton"])})
    of the TUF repository in ``signed_dir``, checked from ``pin`` (a root key; None: its own 1.root.json)."""
    from rocke_aot.trust import repo

    repo.migrate_error(signed_dir)
    if pin is None:
        try:
            pin = (signed_dir / "1.root.json").read_bytes()
        except FileNotFoundError:
            raise TrustError(f"{signed_dir} holds no 1.root.json (rocke-aot trust sign -o {signed_dir})") from None
    verified = repo.verify(signed_dir, pin)
    blobs = {k["sha256"]: k["size"] for k in verified.kernels.values()}
    tritons: dict[str, tuple[str, dict]] = {}
    for key, k in sorted(verified.kernels.items()):
        rec = (k.get("metadata") or {}).get("triton")
        if isinstance(rec, dict) and isinstance(rec.get("key"), str):
            tritons.setdefault(rec["key"], (key, rec))
    return verified, blobs, tritons


def _triton_entry(store: Store, tkey: str, kernel: str, rec: dict) -> dict | None:
    """The entry document of one listed Triton build from the store's entry, each file checked
    against the signed record (BlobMismatchError); None where the store holds no such entry."""
    name, binary = rec["name"], rec["binary"]
    want = {**rec["files"], f"__grp__{name}.json": codec.sha256_hex(triton_entries.group_bytes(list(rec["files"])))}
    have = store.triton_entry(tkey)
    if not set(want) <= set(have):
        return None
    for f, sha in want.items():
        if have[f].blob_sha256 != sha:
            raise BlobMismatchError(f"Triton entry {tkey}: the store holds {f} with sha256 {have[f].blob_sha256[:16]}, "
                                    f"the manifest signed {sha[:16]} (kernel {kernel})")
    return {"key": tkey, "files": {f: {"sha256": sha, "size": have[f].size, "triton_version": rec["triton_version"],
                                       "target": triton_entries.target_name(rec["target"]), "artifact_key": kernel,
                                       "source": "build"} for f, sha in sorted(want.items())},
            "binary": binary}


def sync(store: Store, signed_dir: str | Path, tree: str | Path, *, incremental: bool = True,
         prune: bool = False, pin=None, tuf_targets: bool = True) -> MirrorReport:
    """Bring ``tree`` to the generation signed in ``signed_dir`` (``incremental`` False: every
    blob is written again, as `mirror export` does)."""
    signed_dir, tree = Path(signed_dir), Path(tree)
    verified, blobs, tritons = _listed(signed_dir, pin)
    version = verified.timestamp_version
    entries, missing = {}, []
    for tkey, (kernel, rec) in sorted(tritons.items()):
        doc = _triton_entry(store, tkey, kernel, rec)
        if doc is None:
            missing.append(tkey)
            continue
        binary = doc.pop("binary")
        entries[tkey] = doc
        for f, info in doc["files"].items():
            if f != binary:  # the binary is the kernel's own blob
                blobs.setdefault(info["sha256"], info["size"])
    written = kept = nbytes = 0
    for sha, size in sorted(blobs.items()):
        path = blob_path(tree, sha)
        if incremental and path.is_file():
            kept += 1
            continue
        raw = store.get_blob(sha)  # verified against the store's own sha256 and size
        if len(raw) != size or codec.sha256_hex(raw) != sha:
            raise BlobMismatchError(f"blob {sha}: the store holds {len(raw)} bytes, the manifest signed {size}")
        frame = codec.encode(raw)
        atomic_write(path, frame)
        written += 1
        nbytes += len(frame)
    if tuf_targets:  # the raw target files any TUF client downloads (consistent snapshot names)
        for key, k in sorted(verified.kernels.items()):
            path = target_file(tree, key, k["sha256"])
            if not path.is_file():
                raw = store.get_blob(k["sha256"])
                if len(raw) != k["size"] or codec.sha256_hex(raw) != k["sha256"]:
                    raise BlobMismatchError(f"blob {k['sha256']}: the store holds other bytes than the target signed")
                atomic_write(path, raw)
    for tkey, doc in entries.items():
        atomic_write(entry_path(tree, tkey), json.dumps(doc, sort_keys=True).encode())
    for name in verified.files:  # versioned files (never rewritten once there), timestamp.json last
        dest = tree / "metadata" / name
        if name == "timestamp.json" or not dest.is_file():
            atomic_write(dest, (signed_dir / name).read_bytes())
    pruned = 0
    if prune and (tree / "blobs").is_dir():
        for p in (tree / "blobs").glob("*.zst"):
            if p.name[:-4] not in blobs:
                p.unlink()
                pruned += 1
    if prune and (tree / "triton").is_dir():
        for p in (tree / "triton").glob("*.json"):
            if p.name[:-5] not in entries:
                p.unlink()
    return MirrorReport(str(tree), version, len(blobs), written, kept, pruned, nbytes, len(entries), tuple(missing))


def export(store: Store, signed_dir: str | Path, tree: str | Path, *, pin=None) -> MirrorReport:
    """Write the whole tree (every blob, even one already there)."""
    return sync(store, signed_dir, tree, incremental=False, pin=pin)
