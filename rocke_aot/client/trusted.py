"""A host's side of signed generations: the pinned root key, and what it has accepted so far.

    Trusted(root_key, LocalStore.trust_dir)
    refresh(source)                    one source's metadata, all or nothing:
        root.json     signed by the pinned key, lists it, not expired, version >= seen
        index.json    signed by root's release keys (threshold), not expired, version >= seen;
                      the same version as seen but naming another manifest: MixedGenerationError
        manifest.json the cached copy when its sha256 is the one the index names (a warm
                      start reads only root.json and index.json), else fetched; checked by
                      metadata.check_manifest (sha256/size/version as the index says, signed,
                      not expired, every kernel of a generation it lists); version >= seen
        then, and only then: the three documents and the versions seen are written to
        trust_dir (temp file + rename each; state.json last)
    cached()                           the last accepted metadata, re-checked now (expiry) for
                                       ROCKE_AOT_OFFLINE=1

Configuration, never code: the pinned key is ``root_key=`` or $ROCKE_AOT_ROOT_KEY ("ed25519:<hex>"
or the path of a .pub file). Without one, a fetch is refused (TrustConfigError) unless
``insecure=True`` or $ROCKE_AOT_INSECURE=1 says to keep the unsigned behaviour, which warns.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rocke_aot import settings
from rocke_aot.errors import MixedGenerationError, RollbackError, TrustError
from rocke_aot.paths import atomic_write
from rocke_aot.trust import metadata as md
from rocke_aot.trust.keys import PublicKey, public_key

ENV_ROOT_KEY = settings.ROOT_KEY
ENV_INSECURE = settings.INSECURE
NAMES = ("root.json", "index.json", "manifest.json")


class InsecureFetchWarning(UserWarning):
    """Kernels are fetched without signature checks (no pinned root key, insecure=True)."""


def pinned_key(root_key: str | os.PathLike | PublicKey | None) -> PublicKey | None:
    if root_key is None:
        root_key = settings.raw(ENV_ROOT_KEY) or None
    return None if root_key is None else public_key(root_key)


def env_insecure() -> bool:
    return settings.flag(ENV_INSECURE)


@dataclass(frozen=True)
class Accepted:
    """Metadata that passed every check, with where it came from."""

    root: md.Root
    index: md.Index
    manifest: md.Manifest
    source: str


class Trusted:
    def __init__(self, root_key: PublicKey, trust_dir: str | os.PathLike, *, now: datetime | None = None):
        self.root_key = root_key
        self.dir = Path(trust_dir)
        self._now = now

    @property
    def now(self) -> datetime:
        return self._now or datetime.now(timezone.utc)

    def _state(self) -> dict:
        try:
            state = json.loads((self.dir / "state.json").read_text())
        except FileNotFoundError:
            return {}
        except ValueError as e:
            raise TrustError(f"{self.dir / 'state.json'} is unreadable ({e}); the versions seen are lost") from None
        if state.get("root_key") not in (None, self.root_key.keyid):
            return {}  # a host re-pinned to another root: what the old one vouched for does not count
        return state

    def refresh(self, source) -> Accepted:
        """Verify ``source``'s metadata against the pinned key and what this host has seen."""
        seen = self._state()
        now = self.now
        root_bytes = source.metadata("root.json")
        root = md.check_root(md.loads(root_bytes, f"root.json from {source.url}"), self.root_key, now)
        _not_older("root.json", root.version, seen.get("root_version"), source.url)
        index_bytes = source.metadata("index.json")
        index = md.check_index(md.loads(index_bytes, f"index.json from {source.url}"), root, now)
        _not_older("index.json", index.version, seen.get("index_version"), source.url)
        if index.version == seen.get("index_version") and index.manifest_sha256 != seen.get("manifest_sha256"):
            raise MixedGenerationError(f"index.json version {index.version} from {source.url} names manifest "
                                       f"{index.manifest_sha256[:16]}; this host accepted version {index.version} "
                                       f"naming {str(seen.get('manifest_sha256'))[:16]}")
        cached = self._cached_bytes("manifest.json")
        if cached is None or seen.get("manifest_sha256") != index.manifest_sha256:
            cached = source.metadata("manifest.json")
        manifest = md.check_manifest(cached, index, root, now)
        _not_older("manifest.json", manifest.version, seen.get("manifest_version"), source.url)
        for name, data in zip(NAMES, (root_bytes, index_bytes, cached)):
            atomic_write(self.dir / name, data)
        atomic_write(self.dir / "state.json", json.dumps({
            "root_key": self.root_key.keyid, "root_version": root.version, "index_version": index.version,
            "manifest_version": manifest.version, "manifest_sha256": index.manifest_sha256}).encode())
        return Accepted(root, index, manifest, source.url)

    def _cached_bytes(self, name: str) -> bytes | None:
        try:
            return (self.dir / name).read_bytes()
        except FileNotFoundError:
            return None

    def cached(self) -> Accepted:
        """The metadata last accepted, checked again against the pinned key and the clock."""
        docs = [self._cached_bytes(n) for n in NAMES]
        if any(d is None for d in docs):
            raise TrustError(f"no accepted metadata in {self.dir}: fetch once online first")
        now = self.now
        root = md.check_root(md.loads(docs[0], "cached root.json"), self.root_key, now)
        index = md.check_index(md.loads(docs[1], "cached index.json"), root, now)
        return Accepted(root, index, md.check_manifest(docs[2], index, root, now), str(self.dir))


def _not_older(name: str, version: int, seen: int | None, url: str) -> None:
    if seen is not None and version < seen:
        raise RollbackError(f"{name} version {version} from {url} is older than version {seen}, "
                            "which this host has already accepted")
