"""Fetch kernels for a GPU host: from its local store, else from its sources in order.

    Fetcher(sources=[mirror..., service], store=LocalStore(...), root_key=pinned)
    accepted()   once per Fetcher: TUF's refresh (python-tuf's ngclient: root chain, timestamp,
                 snapshot, targets) from the first source whose metadata verifies
                 (client/trusted.py); offline: what this host verified last, not re-verified
    get(key)
      the target "kernels/<key>" in its hashed bin (that bin only is fetched and verified)?
          ──no──> NotInManifestError (no source can make it trusted)
      the signed entry's inputs hash to key? ──no──> IntegrityError
      its launch contract the family's (variants/contract.py check_record_launch)? ──no──>
          LaunchContractError naming the field (a signature is no proof a contract is right);
          checked once per host and code: a marker of this record's check inputs under the
          stat of the checking code answers later processes (client/contracts.py)
      a local blob with the signed sha256 and size (read verified)? ──> the kernel, no request
          │ no                     offline (ROCKE_AOT_OFFLINE=1) ──> OfflineMiss
      for each source, in order:
          source.blob(signed sha256, signed size)  (bounded; anything else: BlobMismatchError)
          ──> LocalStore.put_blob (the bytes only: the record is the signed target's custom
              field, in the host's verified bin) ──> the next get answers locally
      a source that fails (down, 404, wrong bytes, bad metadata) hands over to the next; when
      every one failed, the error of the first that answered wrongly is raised (else the first);
      when a later one gave it, the kernel's origin names each that failed ("skipped": source, why)
    resolve(prefix)   a unique key prefix (select prints 16 digits) -> the full key: among the
      verified metadata's keys (pinned key: every bin is read), else the local store's and each service's listing
    get_many(keys, workers=$ROCKE_AOT_FETCH_WORKERS or 8)
      accepted() once, then get(key) for every key on a bounded thread pool: the transfers,
      nginx's or the service's work, sha256 and zstd (which release the GIL) and the file
      writes overlap, over the sources' kept-alive connections (one connection pool per source).
      The metadata is verified once per Fetcher and bin, never per blob. Every key is tried; the
      first failure in the order given is raised after the others ended (what verified is kept);
      the launch-contract markers of the batch are written as one list at its end (contracts.py)
    get_each(keys, on_done=)   the same, every key's Kernel or the error that refused it

    insecure (no pinned key, insecure=True / ROCKE_AOT_INSECURE=1; warns): the service's
    unsigned record instead of the signed target (strict: its inputs must hash to the key asked,
    the record schema holds), bytes that start as the arch's code objects do (ELF header);
    a local copy answers only if one of this Fetcher's sources sent it (its origin), else it
    is fetched again and replaced

Nothing is stored until every check passed. This module imports neither FastAPI nor
SQLAlchemy nor the builder: a GPU host installs only the client (pyproject's base
dependencies) and starts in about the time of the interpreter (bench/bench_startup.py).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from rocke_aot import settings
from rocke_aot.cache.keys import check_key
from rocke_aot.client.contracts import ContractMemo, check_contract
from rocke_aot.client.keys import check_prefix, match, unique
from rocke_aot.client.local import Kernel, LocalStore, check_elf_header
from rocke_aot.client.trusted import (
    Accepted,
    InsecureFetchWarning,
    Trusted,
    env_insecure,
    pinned_key,
)
from rocke_aot.errors import (
    AnswerMismatchError,
    BlobMismatchError,
    CodeObjectError,
    IntegrityError,
    NotFoundError,
    NotInManifestError,
    RockeError,
    SpecError,
    TrustConfigError,
)
from rocke_aot.targets import Target, compatible
from rocke_aot.trust.keys import PublicKey

if TYPE_CHECKING:  # sources (httpx, httpcore) load when a source is made: a warm offline fetch needs none
    from rocke_aot.client.sources import Source

# Workers hide round trips, not CPU, so the default is not scaled by cores: at a 10 ms round trip
# 2/4/8/16 workers fetched 170/325/651/882 kernels/s (docs/trust.md, "Fetch cost, measured"); a
# mirror on the same host is CPU-bound and fastest with $ROCKE_AOT_FETCH_WORKERS=1. Each worker
# is one kept-alive connection.
DEFAULT_WORKERS = 8


class OfflineMiss(NotFoundError):
    """ROCKE_AOT_OFFLINE=1 and the local store does not hold what was asked for."""


def env_offline() -> bool:
    return settings.flag(settings.OFFLINE)


def env_workers() -> int:
    n = settings.integer(settings.FETCH_WORKERS)
    if n is None:
        return DEFAULT_WORKERS
    if n < 1:
        raise SpecError(f"${settings.FETCH_WORKERS} must be at least 1, got {n}")
    return n


def sources_from(server: str | None = None, mirrors: Iterable[str] = ()) -> list[Source]:
    """Installed device wheels first (read-only, no network: client/device_kernels.py), then the
    mirrors (in the order given), then the service: the order a host tries them."""
    from rocke_aot.client.device_kernels import installed_sources
    from rocke_aot.client.sources import MirrorSource, ServiceSource

    out: list[Source] = [*installed_sources(), *(MirrorSource(m) for m in mirrors)]  # type: ignore[list-item]
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
                 root_key: str | os.PathLike | PublicKey | bytes | None = None, insecure: bool | None = None,
                 offline: bool | None = None, now: datetime | None = None, remember: bool = False):
        self.offline = env_offline() if offline is None else bool(offline)
        self.sources = list(sources)
        if not self.sources and not self.offline:
            raise SpecError("a Fetcher needs at least one source (a mirror or the service) unless it is offline")
        self.store = store if store is not None else LocalStore()
        key = pinned_key(root_key)
        self.insecure = key is None and (env_insecure() if insecure is None else bool(insecure))
        if key is None and not self.insecure:
            raise TrustConfigError(f"no pinned root key: set ${settings.ROOT_KEY} (or root_key=) to the root public key "
                                   f"(a .pub file or ed25519:<hex>), or ${settings.INSECURE}=1 to fetch unsigned kernels")
        if self.insecure:
            warnings.warn(InsecureFetchWarning(
                f"no pinned root key and insecure (or {settings.INSECURE}=1): kernels are fetched WITHOUT signature checks; "
                "any server or network path can hand this host code the builder never built"), stacklevel=2)
        self.trusted = Trusted(key, self.store.trust_dir, now=now) if key is not None else None
        self._accepted: Accepted | None = None
        self.metadata_skipped: list[tuple[str, str]] = []  # (source URL, why) that failed before the one accepted
        self._listed: list[str] | None = None
        self._contracts: set[str] = set()  # keys whose record's launch contract was checked
        # a signed record's contract checked once per host and code (client/contracts.py)
        self._memo = ContractMemo(self.trusted.dir / "contracts") if self.trusted is not None else None
        self.remember = remember  # a warm note per signed kernel got (rocke_aot/warm.py)

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
            if self.offline:
                self._accepted = self.trusted.cached()
            else:
                self._accepted, self.metadata_skipped = self._try_sources("the signed metadata", self.trusted.refresh)
        return self._accepted

    def get(self, key: str, *, arch: str | None = None, family: str | None = None,
            check: Callable[[Kernel], None] | None = None) -> Kernel:
        """The kernel under ``key`` with verified bytes, local first. ``arch`` (the device's
        target ID) and ``family``, when given, are the question: a kernel of another family or
        for a target the device cannot run is AnswerMismatchError, before any byte is fetched
        or kept (wherever its record came from). ``check(kernel)``, when given, runs on the
        kernel with its bytes before it is kept or returned (the runner validates the code
        object and its launch contract there); what it raises, nothing is kept."""
        check_key(key)
        device = Target.parse(arch) if arch is not None else None
        if self.trusted is None:
            return self._get_unsigned(key, device, family, check or _no_check)
        check = check or _no_check
        acc = self.accepted()
        entry = acc.kernel(key)
        if entry is None:
            raise NotInManifestError(f"kernel {key} is not a target of the signed metadata (snapshot version "
                                     f"{acc.version}, from {acc.source})")
        # the signed record: its inputs must hash to the key (IntegrityError: no source can fix it)
        signed = Kernel.from_record({**entry, "key": key, "origin": {}})
        _answers(signed, device, family, f"the signed record of {key}")
        if key not in self._contracts:  # a signature proves who signed a contract, not that it is right
            assert self._memo is not None
            self._memo.check(signed, f"the signed record of {key}")  # once per host and code
            self._contracts.add(key)
        origin = {"signed": True, "snapshot_version": acc.version, "generation": entry.get("generation")}
        raw = self._local_blob(signed.sha256, signed.size)
        if raw is not None:  # the bytes the signed target names, however they got here
            k = replace(signed, code_object=raw, origin={"source": str(self.store.root), **origin})
            check(k)
            self._remember(key, entry, signed)
            return k
        if self.offline:
            raise OfflineMiss(f"{settings.OFFLINE}=1 and kernel {key} is not in the local store {self.store.root}")
        k, skipped = self._try_sources(f"kernel {key}",
                                       lambda src: _checked(_signed_from(src, signed, origin, acc), check))
        self.store.put_blob(k.sha256, k.size, k.code_object)
        self._remember(key, entry, signed)
        return _with_skipped(k, skipped)

    def _remember(self, key: str, entry: dict, signed: Kernel) -> None:
        """With ``remember``: the warm note of ``key`` (rocke_aot/warm.py), from the host's files
        as they are now (Trusted.on_disk) and only if they name the very entry checked, under the
        contract marker that answers it; a host that cannot write it just has no note."""
        if not self.remember or self.trusted is None or self._memo is None:
            return
        basis = self.trusted.on_disk(key)
        proof = self._memo.proof(signed)
        if basis is None or proof is None or basis.entry != entry:
            return
        from rocke_aot.paths import atomic_write
        from rocke_aot.warm import ANSWERS, note

        code_file, code_id, contract = proof
        data = note(key=key, state_sha256=basis.state_sha256, bin_name=basis.bin, bin_sha256=basis.bin_sha256,
                    bin_expires=basis.bin_expires, code_file=code_file, code_id=code_id, contract=contract,
                    sha256=signed.sha256, size=signed.size, arch=signed.inputs.arch, lane=signed.inputs.lane,
                    family=signed.inputs.family, generation=entry.get("generation"),
                    snapshot_version=basis.snapshot_version)
        try:
            atomic_write(self.trusted.dir / ANSWERS / key, data, durable=False)
        except OSError:
            pass

    def get_many(self, keys: Iterable[str], *, workers: int | None = None, arch: str | None = None,
                 family: str | None = None, check: Callable[[Kernel], None] | None = None) -> dict[str, Kernel]:
        """Each kernel of ``keys`` (once, in the order given) with verified bytes, local first,
        ``workers`` fetches at a time (None: $ROCKE_AOT_FETCH_WORKERS, else 8; 1: in turn);
        ``arch``, ``family`` and ``check`` as for get, for every one."""
        got = self.get_each(keys, workers=workers, arch=arch, family=family, check=check)
        for v in got.values():  # the first failure, in the order given
            if isinstance(v, RockeError):
                raise v
        return got  # type: ignore[return-value]

    def get_each(self, keys: Iterable[str], *, workers: int | None = None, arch: str | None = None,
                 family: str | None = None, check: Callable[[Kernel], None] | None = None,
                 on_done: Callable[[str, Kernel | RockeError], None] | None = None) -> dict[str, Kernel | RockeError]:
        """get_many, every key tried: key -> its Kernel, or the RockeError that refused it
        (nothing of a refused one is kept). ``on_done(key, result)`` runs as each ends (the
        CLI's progress), from the fetching thread."""
        wanted = list(dict.fromkeys(check_key(k) for k in keys))
        n = env_workers() if workers is None else workers
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise SpecError(f"workers must be an int of at least 1, got {n!r}")
        if self.trusted is not None:
            self.accepted()  # the metadata once, before any thread reads it

        def one(k: str) -> Kernel | RockeError:
            try:
                out: Kernel | RockeError = self.get(k, arch=arch, family=family, check=check)
            except RockeError as e:
                out = e
            if on_done is not None:
                on_done(k, out)
            return out

        # the contract markers of these kernels written once, in one list (client/contracts.py batch)
        with self._memo.batch() if self._memo is not None else contextlib.nullcontext():
            if n == 1 or len(wanted) <= 1:
                return {k: one(k) for k in wanted}
            from concurrent.futures import ThreadPoolExecutor  # (with logging: only where threads are used)

            with ThreadPoolExecutor(max_workers=min(n, len(wanted)), thread_name_prefix="rocke-fetch") as pool:
                futures = {k: pool.submit(one, k) for k in wanted}
        return {k: f.result() for k, f in futures.items()}

    def resolve(self, key: str) -> str:
        """The full key of ``key``: itself when it has 64 digits, else the one key starting with
        it (client/keys.py) among those this Fetcher can answer: the signed manifest's (with a
        pinned key), else the local store's and each service's listing. No match is
        NotFoundError; several, AmbiguousKeyError naming them (bad input, exit 2)."""
        prefix = check_prefix(key)
        if len(prefix) == 64:
            return prefix
        if self.trusted is not None:
            acc = self.accepted()
            if self._listed is None:
                self._listed = sorted(acc.keys())
            return unique(prefix, match(prefix, self._listed), f"snapshot version {acc.version}, "
                                                               f"{len(self._listed)} kernels")
        found = match(prefix, self.store.keys())
        where = [f"the local store {self.store.root}"]
        if not self.offline:
            from rocke_aot.client.sources import ServiceSource

            for src in self.sources:
                if isinstance(src, ServiceSource):
                    found += src.keys_from(prefix)
                    where.append(src.url)
        return unique(prefix, found, ", ".join(where))

    def _local_blob(self, sha256: str, size: int) -> bytes | None:
        """The local bytes with this hash and size, or None (absent, or changed on disk: the
        store removes a changed blob when it reads it, and it is fetched again)."""
        try:
            return self.store.blob(sha256, size)
        except (NotFoundError, IntegrityError):
            return None

    def _local(self, key: str) -> Kernel | None:
        """The local copy, or None: absent, or lost/changed on disk (the store removes a changed
        blob when it reads it), which is a miss, fetched again."""
        if not self.store.has(key):
            return None
        try:
            return self.store.get(key)
        except (NotFoundError, IntegrityError):
            return None

    def _get_unsigned(self, key: str, device: Target | None, family: str | None, check) -> Kernel:
        k = self._local(key)
        # A local copy answers when one of these sources sent it: what another server once made
        # this host keep is fetched again (and replaced).
        if k is not None and (self.offline or k.origin.get("source") in {s.url for s in self.sources}):
            check_contract(k, f"the local copy of {key}")
            return _checked(_answers(k, device, family, f"the local copy of {key}"), check)
        if self.offline:
            raise OfflineMiss(f"{settings.OFFLINE}=1 and kernel {key} is not in the local store {self.store.root}")
        k, skipped = self._try_sources(f"kernel {key}",
                                       lambda src: _checked(_unsigned_from(src, key, device, family), check))
        return _with_skipped(self.store.put(k), skipped)

    def _first_good(self, what: str, fetch):
        return self._try_sources(what, fetch)[0]

    def _try_sources(self, what: str, fetch):
        """(the first source's answer that passes, [(source URL, "Type: why")] of those that
        failed before it): a failed source falls through to the next, and says so."""
        errors: list[tuple[Source, RockeError]] = []
        for src in self.sources:
            try:
                return fetch(src), [(s.url, f"{type(e).__name__}: {e}") for s, e in errors]
            except RockeError as e:
                errors.append((src, e))
        wrong = [(s, e) for s, e in errors if not isinstance(e, NotFoundError)]
        src, first = (wrong or errors)[0]
        if len(errors) > 1:
            tried = "; ".join(f"{s.url}: {type(e).__name__}: {e}" for s, e in errors)
            raise type(first)(f"{what}: no source gave it ({tried})") from first
        raise first


def _with_skipped(k: Kernel, skipped: list[tuple[str, str]]) -> Kernel:
    """``k`` with the sources that failed before the one it came from named in its origin."""
    if not skipped:
        return k
    return replace(k, origin={**k.origin, "skipped": [{"source": u, "error": e} for u, e in skipped]})


def _signed_from(src: Source, signed: Kernel, origin: dict, acc: Accepted) -> Kernel:
    """The kernel the manifest lists, its bytes from ``src``: they must have the signed sha256
    and size (src.blob checks them; LocalStore.put_blob checks them again)."""
    try:
        raw = src.blob(signed.sha256, signed.size)
    except IntegrityError as e:
        raise BlobMismatchError(f"kernel {signed.key} from {src.url}: {e} "
                                f"(snapshot version {acc.version})") from None
    return replace(signed, code_object=raw, origin={"source": src.url, **origin})


def check_asked(code_arch: str, code_family: str, device: Target | None, family: str | None, what: str) -> None:
    """Nothing if a kernel of ``code_family`` built for ``code_arch`` answers the question (the
    family asked, a target ``device`` can run: rocke_aot/targets.py compatible), else
    AnswerMismatchError naming ``what``. Both clients and the runner ask it."""
    if family is not None and code_family != family:
        raise AnswerMismatchError(f"{what} is a {code_family} kernel; {family} was asked for")
    if device is not None and not compatible(code_arch, device):
        raise AnswerMismatchError(f"{what} is built for {code_arch}, which {device.id} cannot run")


def _no_check(k: Kernel) -> None:
    return None


def _checked(k: Kernel, check: Callable[[Kernel], None]) -> Kernel:
    check(k)
    return k


def _answers(k: Kernel, device: Target | None, family: str | None, what: str) -> Kernel:
    check_asked(k.inputs.arch, k.inputs.family, device, family, what)
    return k


def _unsigned_from(src: Source, key: str, device: Target | None = None, family: str | None = None) -> Kernel:
    from rocke_aot.client.sources import ServiceSource

    if not isinstance(src, ServiceSource):
        raise NotFoundError(f"{src.url} serves no unsigned records (a mirror is read through its manifest)")
    k = _answers(src.record(key), device, family, f"{src.url}'s record of {key}")  # strict, then the question
    check_contract(k, f"{src.url}'s record of {key}")  # before a byte of it is fetched or kept
    raw = src.blob(k.sha256, k.size)
    try:
        check_elf_header(raw, k.inputs.target, f"kernel {key} from {src.url}")
    except CodeObjectError as e:
        raise AnswerMismatchError(str(e)) from None
    return Kernel(**{**k.__dict__, "origin": {"source": src.url, "signed": False}, "code_object": raw})
