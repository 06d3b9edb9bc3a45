"""Kernels installed as device wheels (`rocke-aot export --wheel`), read before the network, and
the check of a kpack bundle manifest's signature.

    pip install rocke_aot_device_gfx942-1-py3-none-any.whl
        site-packages/rocke_aot_device_gfx942/
            device.json                {"schema": "rocke.aot.device-wheel/v1", "arch", "manifest", "kpack",
                                        "frames": {sha256: [frame offset, frame size, size]}}
            rocke_aot_gfx942.kpack     the kernels (TheRock RFC0008, zstd per kernel)
            rocke_aot_gfx942.json      the rocke.aot.bundle/v1 manifest (+ .sig.json, its signature)
            signed/                    the arch's signed TUF repository (trust/repo.py): N.root.json,
                                       V.targets.json, V.bins-<hex>.json, V.snapshot.json, timestamp.json
        the distribution's entry point  [rocke_aot.device_kernels] <arch> = rocke_aot_device_gfx942

    installed_sources()  one DeviceWheelSource per installed device wheel (entry-point group
                         ENTRY_POINTS), found without importing the package; sources_from puts
                         them before the mirrors and the service (client/fetch.py)
    DeviceWheelSource    a read-only Source over the installed files: metadata(name) reads
                         signed/<name>, and the Fetcher verifies it as it does a mirror's
                         (client/trusted.py: python-tuf's Updater, the root chain walked from
                         the host's pinned root key, every version at least the host's last),
                         blob(sha256, size) finds the kernel in device.json's frames
                         index, reads its zstd frame from the kpack at that offset and
                         decodes it bounded by ``size``, then checks size and sha256: a wheel is
                         an index of bytes, never trusted; a tampered kpack is IntegrityError
                         (the Fetcher names it BlobMismatchError), a tampered signed document
                         the trust error its check raises, and the next source is tried
    verify_signature(manifest bytes, signature doc, root key, root.json bytes=None)
                         the ed25519 signature over a bundle manifest's exact bytes, by the
                         pinned root key itself or by a release key (the targets role) of a TUF
                         root.json the pinned key signed (SignatureError / UnlistedKeyError
                         otherwise)

No msgpack here: a host reads the kpack's frames at the offsets of the manifest, so the base
install (no [serve] extra) reads a device wheel. Imports only what client/ may (tests/test_client_slim.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from importlib import metadata as importlib_metadata
from importlib import util as importlib_util
from pathlib import Path
from typing import Any

from rocke_aot.boundedjson import JSONLimitError, Limits
from rocke_aot.boundedjson import loads as bounded_loads
from rocke_aot.client.local import check_sha, decoded
from rocke_aot.errors import (
    AnswerTooLargeError,
    ExpiredError,
    IntegrityError,
    KpackError,
    NotFoundError,
    SignatureError,
    UnlistedKeyError,
)
from rocke_aot.trust.keys import PublicKey

ENTRY_POINTS = "rocke_aot.device_kernels"
DEVICE_SCHEMA = "rocke.aot.device-wheel/v1"
SIGNATURE_SCHEMA = "rocke.aot.bundle-signature/v1"
MAX_DOCUMENT = 64 << 20  # a signed manifest or a bundle manifest of a big build is a few megabytes
MAX_FRAME = (256 << 20) + (1 << 16)
DEVICE_LIMITS = Limits(64 << 20, max_depth=8, max_items=4_000_000, max_string=1 << 16)  # device.json (frames index)
SIGNATURE_LIMITS = Limits(1 << 16, max_depth=4, max_items=64, max_string=4096)


def verify_signature(manifest_bytes: bytes, signature: Mapping[str, Any] | bytes, root_key: PublicKey,
                     root_doc: bytes | None = None, *, now: datetime | None = None) -> str:
    """The key id that signed ``manifest_bytes``, if the signature verifies and that key is the
    pinned root key or a release key of ``root_doc`` (signed by the pinned root key, unexpired)."""
    if isinstance(signature, (bytes, bytearray)):
        try:
            signature = bounded_loads(bytes(signature), SIGNATURE_LIMITS, "the manifest signature")
        except JSONLimitError as e:
            raise SignatureError(f"the manifest signature is not JSON within its bounds ({e})") from None
    if not isinstance(signature, Mapping) or signature.get("schema") != SIGNATURE_SCHEMA:
        raise SignatureError(f"not a {SIGNATURE_SCHEMA} document")
    keyid, sig = signature.get("keyid"), signature.get("signature")
    if not isinstance(keyid, str) or not isinstance(sig, str):
        raise SignatureError("the manifest signature lacks its keyid or signature")
    keys = {root_key.keyid: root_key}
    if root_doc is not None and keyid != root_key.keyid:
        keys.update(release_keys(root_doc, root_key, now or datetime.now(timezone.utc)))
    if keyid not in keys:
        raise UnlistedKeyError(f"the bundle manifest is signed by {keyid[:16]}, which is neither the pinned root key "
                               f"{root_key.keyid[:16]} nor a release key its root.json lists")
    if not keys[keyid].verify(sig, manifest_bytes):
        raise SignatureError(f"the bundle manifest's signature by {keyid[:16]} does not verify: the manifest "
                             "or its signature was changed")
    return keyid


def release_keys(root_doc: bytes, root_key: PublicKey, now: datetime) -> dict[str, PublicKey]:
    """{keyid: key} of the release keys (the targets role) of a TUF root.json that the pinned
    ``root_key`` lists and signed, unexpired."""
    from rocke_aot.trust.repo import check_pinned, load_root

    root = load_root(root_doc, "root.json")
    check_pinned(root, root_key, "root.json")
    if root.signed.is_expired(now):
        raise ExpiredError(f"root.json version {root.signed.version} expired at {root.signed.expires}")
    out = {}
    for kid in root.signed.roles["targets"].keyids:
        public = root.signed.keys[kid].keyval.get("public")
        if isinstance(public, str):
            k = PublicKey(public)
            out[k.keyid] = k
    return out


def _read(path: Path, limit: int, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise NotFoundError(f"{what}: {path} is not there") from None
    except OSError as e:
        raise KpackError(f"{what}: cannot read {path} ({e.strerror})") from None
    if len(data) > limit:
        raise KpackError(f"{what}: {path} is over {limit} bytes")
    return data


class DeviceWheelSource:
    """An installed device wheel's directory as a read-only source (module doc)."""

    kind = "device-wheel"

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.url = self.root.as_uri()
        self._index: dict[str, tuple[int, int, int]] | None = None
        self._device: dict[str, Any] | None = None
        self.reads = 0

    def __repr__(self) -> str:
        return f"DeviceWheelSource({str(self.root)!r})"

    @property
    def requests(self) -> int:
        return self.reads

    def close(self) -> None:
        return None

    @property
    def device(self) -> dict[str, Any]:
        if self._device is None:
            try:
                doc = bounded_loads(_read(self.root / "device.json", DEVICE_LIMITS.max_bytes, "device wheel"),
                                    DEVICE_LIMITS, "device.json")
            except JSONLimitError as e:
                raise KpackError(f"{self.root / 'device.json'}: {e}") from None
            if not isinstance(doc, dict) or doc.get("schema") != DEVICE_SCHEMA or not isinstance(doc.get("manifest"), str) \
                    or "/" in doc["manifest"]:
                raise KpackError(f"{self.root / 'device.json'} is not a {DEVICE_SCHEMA} document")
            self._device = doc
        return self._device

    @property
    def arch(self) -> str:
        return str(self.device.get("arch"))

    def metadata(self, name: str, limit: int | None = None) -> bytes:
        """signed/<name>, a file of the wheel's TUF repository, at most ``limit`` bytes (the
        length the verified metadata names; longer is AnswerTooLargeError)."""
        if not name or "/" in name or "\\" in name or name.startswith(".") or not name.endswith(".json"):
            raise NotFoundError(f"{self.url}: no signed file {name[:80]!r}")
        self.reads += 1
        bound = MAX_DOCUMENT if limit is None else min(limit, MAX_DOCUMENT)
        try:
            return _read(self.root / "signed" / name, bound, f"device wheel {self.root.name}")
        except KpackError as e:
            if "is over" in str(e):
                raise AnswerTooLargeError(str(e)) from None
            raise

    def _where(self) -> dict[str, tuple[int, int, int]]:
        """sha256 -> (frame offset, frame size, raw size): device.json's "frames" (an index only;
        every byte it points at is checked against the signed sha256 and size)."""
        if self._index is None:
            frames = self.device.get("frames")
            if not isinstance(frames, dict):
                raise KpackError(f"{self.root / 'device.json'}: no frames index")
            index = {}
            for sha, where in frames.items():
                try:
                    offset, frame_size, size = (int(x) for x in where)
                except (TypeError, ValueError):
                    raise KpackError(f"{self.root / 'device.json'}: a malformed frame of {str(sha)[:64]}") from None
                index[str(sha)] = (offset, frame_size, size)
            self._index = index
        return self._index

    def blob(self, sha256: str, size: int | None) -> bytes:
        check_sha(sha256)
        where = self._where().get(sha256)
        if where is None:
            raise NotFoundError(f"{self.url}: no kernel {sha256} in this device wheel")
        offset, frame_size, raw_size = where
        size = raw_size if size is None else size
        if frame_size < 0 or frame_size > MAX_FRAME or offset < 0:
            raise IntegrityError(f"blob {sha256} from {self.url}: a frame of {frame_size} bytes at {offset}")
        self.reads += 1
        with open(self._kpack(), "rb") as f:
            f.seek(offset)
            frame = f.read(frame_size)
        if len(frame) != frame_size:
            raise IntegrityError(f"blob {sha256} from {self.url}: the kpack ends inside its frame")
        try:
            import zstandard

            claimed = zstandard.frame_content_size(frame)
        except Exception as e:  # zstandard.ZstdError: not a frame at all
            raise IntegrityError(f"blob {sha256} from {self.url}: not a zstd frame ({e})") from None
        if claimed != size:
            raise IntegrityError(f"blob {sha256} from {self.url}: the frame claims {claimed} bytes, expected {size}")
        return decoded(frame, sha256, size)  # bounded decompress, size and sha256 checked

    def _kpack(self) -> Path:
        name = self.device.get("kpack")
        if not isinstance(name, str) or "/" in name or not name.endswith(".kpack"):
            raise KpackError(f"{self.root / 'device.json'}: no kpack file named")
        return self.root / name

    def triton_path(self, key: str) -> str:
        raise NotFoundError(f"{self.url}: a device wheel carries no Triton cache entries")


def frame_index(manifest: Mapping[str, Any]) -> dict[str, list[int]]:
    """device.json's "frames" from a bundle manifest: sha256 -> [frame offset, frame size, size]."""
    return {e["sha256"]: [e["frame_offset"], e["frame_size"], e["size"]] for e in manifest["entries"]}


_ROOTS: list[tuple[Path, ...]] = []  # installed_roots' answer, once per process


def installed_roots() -> list[Path]:
    """The directory of every installed device wheel's package, found by its entry point (the
    package is located, never imported), in name order. Read once per process (the entry point
    scan of every installed distribution is ~17 ms): a wheel installed later is seen by the next
    process."""
    if not _ROOTS:
        out = []
        for ep in sorted(importlib_metadata.entry_points(group=ENTRY_POINTS), key=lambda e: (e.name, e.value)):
            spec = importlib_util.find_spec(ep.value)
            locations = list(spec.submodule_search_locations or ()) if spec is not None else []
            if locations:
                out.append(Path(locations[0]))
        _ROOTS.append(tuple(out))
    return list(_ROOTS[0])


def installed_sources() -> list[DeviceWheelSource]:
    return [DeviceWheelSource(p) for p in installed_roots()]


__all__ = ["DEVICE_SCHEMA", "ENTRY_POINTS", "SIGNATURE_SCHEMA", "DeviceWheelSource", "frame_index",
           "installed_roots", "installed_sources", "verify_signature"]
