"""Fetch kernels for a GPU host: from its local store, else from its sources in order.

    Fetcher(sources=[mirror..., service], store=LocalStore(...), root_key=pinned)
    accepted()   once per Fetcher: root.json + index.json (+ manifest.json when it moved) from
                 the first source whose metadata passes client/trusted.py's checks
    get(key)
      the manifest lists key? ──no──> NotInManifestError (no source can make it trusted)
      local store has it, from a signed fetch, with the signed sha256 and size? ──> LocalStore.get
          │ no                     offline (ROCKE_AOT_OFFLINE=1) ──> OfflineMiss
      for each source, in order:
          source.blob(signed sha256, signed size)  (bounded; anything else: BlobMismatchError)
          the signed entry's inputs must hash to key
          ──> LocalStore.put ──> the next get answers locally
      a source that fails (down, 404, wrong bytes, bad metadata) hands over to the next; when
      every one failed, the error of the first that answered wrongly is raised (else the first)

    insecure (no pinned key, insecure=True / ROCKE_AOT_INSECURE=1; warns): the service's
    unsigned record instead of the manifest (its inputs must hash to the key), as before

Nothing is stored until every check passed. This module imports neither FastAPI nor
SQLAlchemy nor the builder: a GPU host installs only the client (pyproject's base
dependencies) and starts in about the time of the interpreter (bench/bench_client_import.py).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from datetime import datetime

from rocke_aot.cache.keys import check_key
from rocke_aot import settings
from rocke_aot.client.local import Kernel, LocalStore, check_bytes
from rocke_aot.client.sources import MirrorSource, ServiceSource, Source
from rocke_aot.client.trusted import (
    ENV_INSECURE,
    ENV_ROOT_KEY,
    Accepted,
    InsecureFetchWarning,
    Trusted,
    env_insecure,
    pinned_key,
)
from rocke_aot.errors import (
    BlobMismatchError,
    IntegrityError,
    NotFoundError,
    NotInManifestError,
    RockeError,
    SpecError,
    TrustConfigError,
)
from rocke_aot.trust.keys import PublicKey

ENV_OFFLINE = settings.OFFLINE


class OfflineMiss(NotFoundError):
    """ROCKE_AOT_OFFLINE=1 and the local store does not hold what was asked for."""


def env_offline() -> bool:
    return settings.flag(ENV_OFFLINE)


def sources_from(server: str | None = None, mirrors: Iterable[str] = ()) -> list[Source]:
    """Mirrors first (in the order given), then the service: the order a host tries them."""
    out: list[Source] = [MirrorSource(m) for m in mirrors]
    if server:
        out.append(ServiceSource(server))
    return out


class Fetcher:
    """``Fetcher(sources, store=None, root_key=None, insecure=None, offline=None)``.

    ``store`` None opens the default LocalStore ($ROCKE_AOT_CLIENT_HOME). ``root_key`` None
    reads $ROCKE_AOT_ROOT_KEY; with no key at all the Fetcher refuses to start unless
    ``insecure`` (None: $ROCKE_AOT_INSECURE) is set, which warns and keeps the unsigned path.
    ``offline`` None reads ROCKE_AOT_OFFLINE. ``now`` fixes the clock (tests).
    """

    def __init__(self, sources: Sequence[Source], store: LocalStore | None = None, *,
                 root_key: str | os.PathLike | PublicKey | None = None, insecure: bool | None = None,
                 offline: bool | None = None, now: datetime | None = None):
        self.offline = env_offline() if offline is None else bool(offline)
        self.sources = list(sources)
        if not self.sources and not self.offline:
            raise SpecError("a Fetcher needs at least one source (a mirror or the service) unless it is offline")
        self.store = store if store is not None else LocalStore()
        key = pinned_key(root_key)
        self.insecure = key is None and (env_insecure() if insecure is None else bool(insecure))
        if key is None and not self.insecure:
            raise TrustConfigError(f"no pinned root key: set ${ENV_ROOT_KEY} (or root_key=) to the root public key "
                                   f"(a .pub file or ed25519:<hex>), or ${ENV_INSECURE}=1 to fetch unsigned kernels")
        if self.insecure:
            warnings.warn(InsecureFetchWarning(
                f"no pinned root key and insecure (or {ENV_INSECURE}=1): kernels are fetched WITHOUT signature checks; "
                "any server or network path can hand this host code the builder never built"), stacklevel=2)
        self.trusted = Trusted(key, self.store.trust_dir, now=now) if key is not None else None
        self._accepted: Accepted | None = None

    def close(self) -> None:
        for s in self.sources:
            s.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def accepted(self) -> Accepted:
        """The signed metadata this Fetcher works under: read once, from the first source that
        passes every check (offline: the copy accepted last time, checked again)."""
        if self.trusted is None:
            raise TrustConfigError("an insecure Fetcher has no signed metadata")
        if self._accepted is None:
            self._accepted = self.trusted.cached() if self.offline else \
                self._first_good("the signed metadata", self.trusted.refresh)
        return self._accepted

    def get(self, key: str) -> Kernel:
        """The kernel under ``key`` with verified bytes, local first."""
        check_key(key)
        if self.trusted is None:
            return self._get_unsigned(key)
        acc = self.accepted()
        entry = acc.manifest.kernels.get(key)
        if entry is None:
            raise NotInManifestError(f"kernel {key} is not listed by manifest version {acc.manifest.version} "
                                     f"(from {acc.source})")
        k = self._local(key)
        if k is not None and k.origin.get("signed") and k.sha256 == entry.get("sha256") \
                and k.size == entry.get("size"):
            return k
        # not here, kept by an unsigned fetch, or of another build: fetch what the manifest says
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1 and kernel {key} is not in the local store {self.store.root}")
        return self.store.put(self._first_good(f"kernel {key}", lambda src: _signed_from(src, key, entry, acc)))

    def _local(self, key: str) -> Kernel | None:
        """The local copy, or None: absent, or lost/changed on disk (the store removes a changed
        blob when it reads it), which is a miss, fetched again."""
        if not self.store.has(key):
            return None
        try:
            return self.store.get(key)
        except (NotFoundError, IntegrityError):
            return None

    def _get_unsigned(self, key: str) -> Kernel:
        k = self._local(key)
        if k is not None:
            return k
        if self.offline:
            raise OfflineMiss(f"{ENV_OFFLINE}=1 and kernel {key} is not in the local store {self.store.root}")
        return self.store.put(self._first_good(f"kernel {key}", lambda src: _unsigned_from(src, key)))

    def _first_good(self, what: str, fetch):
        errors: list[tuple[Source, RockeError]] = []
        for src in self.sources:
            try:
                return fetch(src)
            except RockeError as e:
                errors.append((src, e))
        wrong = [(s, e) for s, e in errors if not isinstance(e, NotFoundError)]
        src, first = (wrong or errors)[0]
        if len(errors) > 1:
            tried = "; ".join(f"{s.url}: {type(e).__name__}: {e}" for s, e in errors)
            raise type(first)(f"{what}: no source gave it ({tried})") from first
        raise first


def _signed_from(src: Source, key: str, entry: dict, acc: Accepted) -> Kernel:
    """The kernel the manifest lists under ``key``, its bytes from ``src``: they must have the
    signed sha256 and size, and the signed inputs must hash to the key."""
    try:
        raw = src.blob(entry.get("sha256"), entry.get("size"))
    except IntegrityError as e:
        raise BlobMismatchError(f"kernel {key} from {src.url}: {e} (manifest version {acc.manifest.version})") from None
    origin = {"source": src.url, "signed": True, "manifest_version": acc.manifest.version,
              "generation": entry.get("generation")}
    k = Kernel.from_record({**entry, "key": key, "origin": origin}, raw)
    check_bytes(raw, k.sha256, k.size, f"kernel {key}")
    return k


def _unsigned_from(src: Source, key: str) -> Kernel:
    if not isinstance(src, ServiceSource):
        raise NotFoundError(f"{src.url} serves no unsigned records (a mirror is read through its manifest)")
    k = Kernel.from_record(src.record(key))  # the inputs must hash to the key
    if k.key != key:
        raise IntegrityError(f"{src.url} answered the record of {k.key} for {key}")
    raw = src.blob(k.sha256, k.size)
    return Kernel(**{**k.__dict__, "origin": {"source": src.url, "signed": False}, "code_object": raw})
