"""A static mirror of signed generations: files any HTTP server, object store or CDN serves as is.

    TREE/
    ├── root.json, index.json, manifest.json   the signed metadata (`rocke-aot trust sign`)
    └── blobs/<sha256>.zst                     each listed code object as one zstd frame

    export(store, signed_dir, tree)   every blob the manifest lists, read from the store
                                      (verified there: sha256 and size) and checked against
                                      the manifest's sha256 and size, then the metadata
    sync(store, signed_dir, tree)     the same, writing only blobs the tree does not hold yet
                                      (and, with ``prune``, removing blobs no longer listed)

Order: blobs first, then root.json, manifest.json and index.json (last), each by rename; a host
reading the tree mid-update sees the old index (whose blobs are all there) or the new one.
Nothing here is trusted by hosts: they verify the signatures and every blob themselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rocke_aot.cache import codec
from rocke_aot.cache.store import Store
from rocke_aot.errors import BlobMismatchError, TrustError
from rocke_aot.paths import atomic_write

METADATA = ("root.json", "manifest.json", "index.json")  # the order they are written in


@dataclass(frozen=True)
class MirrorReport:
    tree: str
    version: int
    kernels: int
    blobs_written: int
    blobs_kept: int
    blobs_pruned: int
    bytes_written: int

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def blob_path(tree: Path, sha256: str) -> Path:
    return tree / "blobs" / f"{sha256}.zst"


def _listed(signed_dir: Path) -> tuple[int, dict[str, int]]:
    """(manifest version, {sha256: size}) of the signed manifest in ``signed_dir``."""
    try:
        doc = json.loads((signed_dir / "manifest.json").read_bytes())
        signed = doc["signed"]
        kernels = signed["kernels"]
        blobs = {k["sha256"]: k["size"] for k in kernels.values()}
    except FileNotFoundError:
        raise TrustError(f"{signed_dir} holds no manifest.json (rocke-aot trust sign -o {signed_dir})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise TrustError(f"{signed_dir / 'manifest.json'} is not a signed manifest ({type(e).__name__}: {e})") from None
    for name in METADATA:
        if not (signed_dir / name).is_file():
            raise TrustError(f"{signed_dir} lacks {name}")
    return signed["version"], blobs


def sync(store: Store, signed_dir: str | Path, tree: str | Path, *, incremental: bool = True,
         prune: bool = False) -> MirrorReport:
    """Bring ``tree`` to the generation signed in ``signed_dir`` (``incremental`` False: every
    blob is written again, as `mirror export` does)."""
    signed_dir, tree = Path(signed_dir), Path(tree)
    version, blobs = _listed(signed_dir)
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
    for name in METADATA:
        atomic_write(tree / name, (signed_dir / name).read_bytes())
    pruned = 0
    if prune and (tree / "blobs").is_dir():
        for p in (tree / "blobs").glob("*.zst"):
            if p.name[:-4] not in blobs:
                p.unlink()
                pruned += 1
    return MirrorReport(str(tree), version, len(blobs), written, kept, pruned, nbytes)


def export(store: Store, signed_dir: str | Path, tree: str | Path) -> MirrorReport:
    """Write the whole tree (every blob, even one already there)."""
    return sync(store, signed_dir, tree, incremental=False)
