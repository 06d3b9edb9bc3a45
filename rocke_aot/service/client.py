"""A store-to-store client of the artifact service: the host client (client/service.py
ServiceClient: select, publish) with a *builder's* local SQLite Store in front of get.

The GPU host's client is rocke_aot.client (Fetcher, LocalStore, ServiceClient): one package, no
database, no compiler. This one is for a machine that has the [serve] or [build] install and
keeps fetched artifacts in a full Store (a staging cache, a second builder), validating each code
object whole (aot/codeobject.py) before it is kept:

    Client.get(key, arch=None, family=None)
        a pinned root key (root_key= or $ROCKE_AOT_ROOT_KEY)? ──> the Fetcher (client/fetch.py:
             the signed TUF target decides sha256, size and record), validated, then kept
        no pin: the unsigned path below, with an InsecureFetchWarning once per Client
        local Store hit, kept from this server (provenance "origin") or built/imported here?
             │ no                    ──yes──> Store.get(key) (decompress + sha256, as every local read)
        offline (ROCKE_AOT_OFFLINE=1)? ──> OfflineMiss (a NotFoundError naming the key)
             │
        GET /v1/kernels/{key}/meta ──ServiceSource.record──> a Kernel: strict JSON, the inputs
             │                      hash to key, the record schema (rocke_aot/record.py)
        the arch and family asked? (targets.compatible; else AnswerMismatchError)
        GET /v1/blobs/{sha256}  (Accept-Encoding: zstd) ──> bounded, decoded, size + sha256
        aot/agreement.py checked_metadata (aot.codeobject validate + record_metadata): a code object for that arch whose
             │                  resources and launch contract agree with the record
        Store.put(inputs, bytes, provenance + origin {source: this server}) ──> the next get
             answers locally, no request
    Client.get_blob(sha)   local blob or GET /v1/blobs/{sha}; verified; a bounded LRU in memory
    Client.select(...)     ServiceClient.select; offline: the same select() over the local store
    Client.publish(...)    ServiceClient.publish

parse_select and check_select are the host client's (client/service.py), re-exported here.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx

from rocke_aot import settings
from rocke_aot.aot.agreement import checked_metadata
from rocke_aot.cache.keys import check_key, thaw
from rocke_aot.cache.provenance import Entry
from rocke_aot.cache.records import Artifact
from rocke_aot.cache.store import Store
from rocke_aot.client.fetch import OfflineMiss, check_asked
from rocke_aot.client.local import check_sha
from rocke_aot.client.service import ServiceClient, check_select, parse_select
from rocke_aot.client.trusted import InsecureFetchWarning, pinned_key
from rocke_aot.errors import AnswerMismatchError, NotFoundError, RemoteError, SpecError
from rocke_aot.service import access
from rocke_aot.targets import Target

MAX_BLOB_MEMORY = 64 << 20  # get_blob's in-memory LRU of fetched blobs

__all__ = ["Client", "OfflineMiss", "RemoteError", "check_select", "parse_select"]


def origin_of(art: Artifact) -> str | None:
    """The server a locally kept artifact was fetched from (None: built or imported here)."""
    o = art.provenance.get("origin") if isinstance(art.provenance, Mapping) else None
    src = o.get("source") if isinstance(o, Mapping) else None
    return src if isinstance(src, str) else None


class Client(ServiceClient):
    """``Client(base_url, cache=URL|Store|None, token=None, offline=None)``.

    ``cache`` None opens the default local store ($ROCKE_AOT_CACHE, ...). ``offline`` None
    reads ROCKE_AOT_OFFLINE. ``http`` injects an httpx.Client (tests); ``retries`` and
    ``backoff`` bound the retry loop (sleeps backoff, 2*backoff, ...); ``timeout`` each
    connect and read, ``deadline_s`` each call as a whole (client/sources.py DEADLINE_S).
    """

    def __init__(self, base_url: str | None, cache: str | os.PathLike | Store | None = None, token: str | None = None,
                 offline: bool | None = None, *, retries: int = 3, backoff: float = 0.2, timeout: float = 30.0,
                 deadline_s: float | None = None, http: httpx.Client | None = None,
                 root_key: str | os.PathLike | None = None):
        super().__init__(base_url, token, offline, retries=retries, backoff=backoff, timeout=timeout,
                         deadline_s=deadline_s, http=http)
        # One verification path: with a pin (root_key= or $ROCKE_AOT_ROOT_KEY) every get goes
        # through client/fetch.py's Fetcher (the signed TUF target: sha256, size, record); without
        # one the unsigned path warns, as every client does.
        self._pin = pinned_key(root_key)
        self._warned = False
        self._fetcher: Any = None
        self._own_store = not isinstance(cache, Store)
        self._cache: str | os.PathLike | None = None if isinstance(cache, Store) else cache
        self._store: Store | None = cache if isinstance(cache, Store) else None
        self._frames = access.Frames(max_bytes=32 << 20)
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._blob_bytes = 0

    @property
    def store(self) -> Store:
        """The local store, opened on first use (a remote select or publish never opens it)."""
        if self._store is None:
            self._store = Store.open(self._cache)
        return self._store

    def close(self) -> None:
        super().close()
        if self._fetcher is not None:
            self._fetcher.close()
        if self._own_store and self._store is not None:
            self._store.close()

    # ---- fetch --------------------------------------------------------------------------

    def get(self, key: str, *, arch: str | None = None, family: str | None = None) -> Artifact:
        """The artifact under ``key`` with verified bytes, from the local store or the server.

        ``arch`` (the device's target ID) and ``family``, when given, are the question: a
        record for a target the device cannot run or of another family is AnswerMismatchError,
        wherever it comes from. A server's answer is kept only after every check passed.
        """
        check_key(key)
        if self._pin is not None:
            return self._get_signed(key, arch, family)
        if not self._warned:
            self._warned = True
            warnings.warn(InsecureFetchWarning(
                f"rocke_aot.service.client.Client.get without a pinned root key (${settings.ROOT_KEY}): kernels are "
                "checked against the server's own record only, not a signature"), stacklevel=2)
        device = Target.parse(arch) if arch is not None else None
        hit = self.store.lookup_many([key]).get(key)
        local = self.store.get(key) if hit is not None and hit.ok else None
        came_from = origin_of(local) if local is not None else None
        if local is not None and (self.offline or came_from in (None, self.base_url)):
            check_asked(local.arch, local.family, device, family, f"the local copy of {key}")
            return local
        if self.offline:
            raise OfflineMiss(f"{settings.OFFLINE}=1 and artifact {key} is not in the local store {self.store}")
        k = self._source.record(key)  # strict; the inputs hash to the key
        check_asked(k.inputs.arch, k.inputs.family, device, family, f"{self.base_url}'s record of {key}")
        if local is not None and local.sha256 != k.sha256:
            raise AnswerMismatchError(
                f"the local store {self.store} holds other bytes ({local.sha256}) for {key}, fetched from "
                f"{came_from}; {self.base_url} names {k.sha256}. Remove what that server left with "
                f"`rocke-aot client purge --cache <local store> --origin {came_from}`")
        if local is not None:
            assert local.code_object is not None, "Store.get returns the artifact with its code object"
            raw = local.code_object
        else:
            raw = self._source.blob(k.sha256, k.size)
        metadata = checked_metadata(raw, k.inputs.arch, k.metadata,
                                    f"{self.base_url} answered {key} with a code object its record does not describe")
        if local is not None:  # the same bytes, kept from another server: its record must be this one's
            if thaw(local.metadata) != metadata:
                raise AnswerMismatchError(
                    f"the local store {self.store} keeps {key} with another record (from {came_from}) than "
                    f"{self.base_url} answers; remove it with `rocke-aot client purge --cache <local store> "
                    f"--origin {came_from}`")
            return local
        provenance = {**thaw(k.provenance), "origin": {"source": self.base_url, "signed": False}}
        assert self.base_url is not None, "a client that is not offline has a base URL (ServiceClient)"
        if k.ir_sha256 is None:
            raise SpecError(f"{self.base_url}'s record of {key} has no ir_sha256: the store keeps artifacts by it")
        return self.store.put(k.inputs, raw, ir_sha256=k.ir_sha256, metadata=metadata, provenance=provenance,
                              entered=Entry.fetched(self.base_url))

    def _get_signed(self, key: str, arch: str | None, family: str | None) -> Artifact:
        """``key`` through the Fetcher under the pin: the signed target decides the bytes and the
        record; a local artifact answers only if it is those bytes."""
        from rocke_aot.client.fetch import Fetcher
        from rocke_aot.client.local import LocalStore

        if self._fetcher is None:
            self._fetcher = Fetcher([self._source] if not self.offline else [], LocalStore(), root_key=self._pin,
                                    offline=self.offline)
        k = self._fetcher.get(key, arch=arch, family=family)
        hit = self.store.lookup_many([key]).get(key)
        if hit is not None and hit.ok:
            local = self.store.get(key)
            if local.sha256 == k.sha256:
                return local
            raise AnswerMismatchError(f"the local store {self.store} holds other bytes ({local.sha256}) for {key} "
                                      f"than the signed target ({k.sha256}); remove them with `rocke-aot client "
                                      f"purge --cache <local store> --origin {origin_of(local)}`")
        metadata = checked_metadata(k.code_object, k.inputs.arch, k.metadata,
                                    f"the signed kernel {key} is not the code object its record describes")
        provenance = {**thaw(k.provenance), "origin": {"source": k.origin.get("source"), "signed": True,
                                                       "snapshot_version": k.origin.get("snapshot_version")}}
        return self.store.put(k.inputs, k.code_object, ir_sha256=k.ir_sha256, metadata=metadata,
                              provenance=provenance, entered=Entry.fetched(str(k.origin.get("source"))))

    def get_blob(self, sha256: str) -> bytes:
        """The code object with this content hash, verified; a second call makes no request."""
        sha = check_sha(sha256)
        if sha in self._blobs:
            self._blobs.move_to_end(sha)
            return self._blobs[sha]
        try:
            raw = self._frames.load(self.store, sha).raw  # any local artifact's blob, verified
        except NotFoundError:
            if self.offline:
                raise OfflineMiss(f"{settings.OFFLINE}=1 and blob {sha} is not in the local store {self.store}") from None
            raw = self._source.blob(sha, None)  # bounded by MAX_BLOB, size and sha256 checked
        if len(raw) <= MAX_BLOB_MEMORY:
            self._blobs[sha] = raw
            self._blob_bytes += len(raw)
            while self._blob_bytes > MAX_BLOB_MEMORY:
                self._blob_bytes -= len(self._blobs.popitem(last=False)[1])
        return raw

    # ---- select ----------------------------------------------------------------------------

    def select(self, arch: str, family: str, problem: Mapping[str, Any], **kw: Any) -> dict[str, Any]:
        """ServiceClient.select; offline: the same select() over the local store, in the same shape."""
        if self.offline:
            doc = access.select(self.store, arch, family, dict(problem), **kw)
            doc["accepted"] = [{**c, "url": None, "kernel_url": None} for c in doc["accepted"]]
            return doc
        return super().select(arch, family, problem, **kw)
