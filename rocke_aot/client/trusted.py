"""A host's side of signed generations: python-tuf's ngclient, the pin, and what was verified.

    Trusted(pin, LocalStore.trust_dir)
    refresh(source) -> Accepted        TUF's client workflow by python-tuf's ngclient.Updater,
                                       unmodified (this module gives it only a FetcherInterface
                                       over the source's bounded Wire): root chain from the
                                       pin, timestamp, snapshot, top-level targets; then each
                                       kernel asked for loads and verifies only its hashed bin
                                       (verified_bin: ngclient's checks for a delegated role
                                       through python-tuf's Metadata API, the signature over the
                                       file's own signed bytes; any other layout: ngclient's walk)
        the pin: a root public key (ROCKE_AOT_ROOT_KEY="ed25519:<hex>" or a .pub file: the host
        fetches 1.root.json and accepts it only if that key is one of its root keys and signed
        it) or the initial root.json itself (ROCKE_AOT_ROOT_KEY=/path/root.json)
        under an exclusive file lock (trust_dir/tuf-<pin>/lock): the Updater's local metadata
        is the rollback floor, so two processes of one host never move it backwards, and a
        fresh host is floored by the short-lived timestamp (it accepts nothing older than a
        timestamp that has not expired)
        verified.state (JSON), written under the lock after a refresh: the snapshot version and sha256
        verified, the bins' layout, the earliest expiry of root, snapshot and targets
    cached() -> Accepted               ROCKE_AOT_OFFLINE=1: no network and no signature check:
                                       the snapshot file must be the bytes verified.state remembers
                                       (sha256), a bin the version and length that snapshot
                                       names; root, snapshot and targets not expired (the
                                       timestamp's freshness needs the network)

Accepted.kernel(key) -> {sha256, size, **custom} | None (the target "kernels/<key>").
Errors are the library's: SignatureError, ExpiredError, RollbackError, MixedGenerationError
(a file that is not what the snapshot or timestamp names), TrustError; a source's own errors
(NotFoundError, SourceError, ...) pass through, so a Fetcher moves to its next source.

Configuration, never code: the pin is ``root_key=`` or $ROCKE_AOT_ROOT_KEY. Without one, a fetch
is refused (TrustConfigError) unless ``insecure=True`` or $ROCKE_AOT_INSECURE=1 says to keep the
unsigned behaviour, which warns.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

from rocke_aot import settings
from rocke_aot.boundedjson import JSONLimitError, Limits
from rocke_aot.boundedjson import loads as bounded_loads
from rocke_aot.errors import (
    AnswerTooLargeError,
    ExpiredError,
    NotFoundError,
    RockeError,
    RollbackError,
    TrustConfigError,
    TrustError,
)
from rocke_aot.paths import atomic_write, exclusive
from rocke_aot.trust.keys import PublicKey, public_key
from rocke_aot.trust.repo import bin_of, record_of, target_path
from rocke_aot.warm import STATE

if TYPE_CHECKING:
    from tuf.ngclient import FetcherInterface

BASE_URL = "rocke-aot-source:/"  # the Updater's base URL; _source_fetcher maps it to the source's paths
MAX_SNAPSHOT = 32 << 20
MAX_TARGETS = 16 << 20

Pin = PublicKey | bytes
# what this module parses itself (verified.state, the host's verified bins and snapshot for the
# offline path and prefix lookups) goes through the bounded reader; python-tuf parses the rest
METADATA_LIMITS = Limits(MAX_SNAPSHOT, max_depth=32, max_items=2_000_000, max_string=MAX_SNAPSHOT)


def loads(data: bytes, limits: Limits, what: str, *, checked: bool = False) -> Any:
    """Bounded JSON of a metadata file; over a bound or malformed is a TrustError naming it
    (``checked``: boundedjson.loads's, these bytes passed the scan before)."""
    try:
        return bounded_loads(data, limits, what, checked=checked)
    except JSONLimitError as e:
        raise TrustError(f"{what}: {e}") from None


class InsecureFetchWarning(UserWarning):
    """Kernels are fetched without signature checks (no pinned root key, insecure=True)."""


def pinned_key(root_key: str | os.PathLike | PublicKey | bytes | None) -> Pin | None:
    """The host's pin from configuration: a root public key, or the bytes of an initial root.json."""
    if root_key is None:
        root_key = settings.raw(settings.ROOT_KEY) or None
    if root_key is None or isinstance(root_key, PublicKey | bytes):
        return root_key
    text = os.fspath(root_key)
    if not text.startswith("ed25519:"):
        try:
            data = Path(text).read_bytes()
        except OSError as e:
            raise TrustConfigError(f"cannot read the pinned key {text} ({e.strerror})") from None
        if b'"signed"' in data[:4096]:  # an initial root.json
            return data
    return public_key(text)


def pin_id(pin: Pin) -> str:
    return pin.keyid[:16] if isinstance(pin, PublicKey) else hashlib.sha256(pin).hexdigest()[:16]


def env_insecure() -> bool:
    return settings.flag(settings.INSECURE)


def _expires(doc: dict, what: str) -> datetime:
    try:
        return datetime.strptime(doc["signed"]["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    except (KeyError, TypeError, ValueError):
        raise TrustError(f"{what} has no readable expiry") from None


def _source_fetcher(source) -> FetcherInterface:
    """python-tuf's FetcherInterface over one Source: the Updater asks for BASE_URL + name."""
    from tuf.api import exceptions as x
    from tuf.ngclient import FetcherInterface

    class SourceFetcher(FetcherInterface):
        def _fetch(self, url: str):
            return iter([self.download_bytes(url, MAX_SNAPSHOT)])

        def download_bytes(self, url: str, max_length: int) -> bytes:
            name = url[len(BASE_URL):] if url.startswith(BASE_URL) else None  # as ngclient quoted it
            if not name or "/" in name:
                raise x.DownloadError(f"{url} is not a metadata file of {source.url}")
            try:
                return source.metadata(name, limit=max_length)
            except NotFoundError as e:
                raise x.DownloadHTTPError(str(e), 404) from None
            except AnswerTooLargeError as e:  # longer than the signed length (or the bound)
                raise x.DownloadLengthMismatchError(str(e)) from None

    return SourceFetcher()


def _translate(e: Exception, where: str) -> RockeError:
    from rocke_aot.trust.repo import tuf_error

    return tuf_error(e, where)


def _missing(e: Exception, url: str) -> RockeError:
    from rocke_aot.errors import SourceError

    if getattr(e, "status_code", None) == 404:
        return NotFoundError(f"{url} lacks a metadata file its signed metadata names ({e})")
    return SourceError(f"{url}: {type(e).__name__}: {str(e)[:300]}")


class Accepted:
    """Verified metadata: kernel(key) answers from the bin holding it."""

    version: int  # the snapshot version
    source: str

    def kernel(self, key: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def bins(self) -> Iterator[dict]:
        """The targets of every bin, one bin at a time (each verified first where online)."""
        raise NotImplementedError

    def keys(self) -> list[str]:
        """Every kernel key the verified metadata lists (every bin is read: a prefix lookup;
        a fetch by full key reads only its bin)."""
        return [k for targets in self.bins() for k in _keys_of(targets)]

    def entries(self, family: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """(key, record) of every kernel the verified metadata lists (every bin is read: what a
        select over the signed index ranks, client/index.py); with ``family``, a target whose
        plain custom "family" names another is passed over before its record is parsed."""
        head = target_path("")
        for targets in self.bins():
            for path, tf in targets.items():
                if not path.startswith(head) or not isinstance(tf, dict):
                    continue
                custom = tf.get("custom")
                if family is not None and isinstance(custom, dict) and custom.get("family", family) != family:
                    continue
                yield path[len(head):], record_of(path, custom, (tf.get("hashes") or {}).get("sha256"),
                                                  tf.get("length"))


def _probe_paths(bits: int, prefix: str) -> dict[str, str]:
    """{bin name: a target path that bin holds}: the public Updater loads a bin only for a path."""
    out: dict[str, str] = {}
    i = 0
    while len(out) < 2 ** bits:
        p = f"probe/{i}"
        out.setdefault(bin_of(p, bits, prefix), p)
        i += 1
    return out


def _bin_doc(trusted: Trusted, meta: dict, version: int, name: str, key: str | None = None) -> tuple[bytes, dict]:
    """(the bytes, the document) of bin ``name`` as this host's verified copy holds it (the
    version and length the snapshot names)."""
    mf = meta.get(f"{name}.json")
    if not isinstance(mf, dict):
        raise TrustError(f"snapshot version {version} does not list bin {name}")
    try:
        data = (trusted.dir / f"{quote(name, '')}.json").read_bytes()
    except FileNotFoundError:
        what = f" (kernel {key})" if key else ""
        raise TrustError(f"bin {name}{what} was never verified on this host: fetch once online") from None
    doc = loads(data, METADATA_LIMITS, f"bin {name}")
    if doc["signed"].get("version") != mf.get("version") or ("length" in mf and len(data) != mf["length"]):
        raise TrustError(f"the host's copy of bin {name} is not the version snapshot {version} names: "
                         "fetch once online")
    return data, doc


def _bin_targets(trusted: Trusted, meta: dict, version: int, name: str, key: str | None = None) -> dict:
    """The targets of bin ``name`` as this host's verified copy holds them (the version and length
    the snapshot names; not expired)."""
    _, doc = _bin_doc(trusted, meta, version, name, key)
    now = trusted.now
    if _expires(doc, name) <= now:
        raise ExpiredError(f"bin {name} version {meta[f'{name}.json'].get('version')} expired "
                           f"(now {now:%Y-%m-%dT%H:%M:%SZ})")
    targets = doc["signed"].get("targets", {})
    return targets if isinstance(targets, dict) else {}


def _keys_of(targets: dict) -> list[str]:
    head = target_path("")
    return [p[len(head):] for p in targets if p.startswith(head)]


_SIGNATURES, _SIGNED = b'{"signatures":', b',"signed":'


def _signed_slice(data: bytes) -> tuple[list, bytes] | None:
    """(the signatures, the exact bytes of the signed member) of a metadata file that is exactly
    ``{"signatures":X,"signed":S}`` (X and S each one JSON value, nothing else around them: how
    python-tuf's compact JSON and this project's signer write a file), else None."""
    if not data.startswith(_SIGNATURES) or not data.endswith(b"}"):
        return None
    try:
        text = data[: 1 << 20].decode()  # the signatures sit at the head (a few hundred bytes)
        sigs, end = json.JSONDecoder().raw_decode(text, len(_SIGNATURES))
    except ValueError:
        return None
    end = len(text[:end].encode())
    if not isinstance(sigs, list) or data[end:end + len(_SIGNED)] != _SIGNED:
        return None
    return sigs, data[end + len(_SIGNED):-1]


def verified_bin(delegator, snapshot, name: str, data: bytes, now: datetime):
    """The Targets of hashed bin ``name`` from ``data``, verified as python-tuf's ngclient
    verifies a delegated role (TrustedMetadataSet.update_delegated_targets: the snapshot's length
    and hashes, the delegator's keys and threshold, the version the snapshot names, the expiry),
    through python-tuf's Metadata API. One thing is cheaper: the signature is checked over the
    file's own signed member, the bytes the release key signed, and the bin is read from those
    very bytes; python-tuf rebuilds them instead (Metadata.signed_bytes: to_dict, then
    securesystemslib's canonical encoder, twice per file). A file of another layout, or whose
    signature does not verify over its own bytes, is decided by python-tuf's own path (the
    canonical re-encode), so what it refuses is refused with its error."""
    from tuf.api import exceptions as x
    from tuf.api.metadata import Metadata, Signature, Targets

    meta = snapshot.meta.get(f"{name}.json")
    if meta is None:
        raise x.RepositoryError(f"Snapshot does not contain information for '{name}'")
    meta.verify_length_and_hashes(data)
    md = None
    cut = _signed_slice(data)
    if cut is not None:
        sigs, payload = cut
        try:
            signed = json.loads(payload)
            signatures = {}
            for sd in sigs:
                sig = Signature.from_dict(dict(sd))
                if sig.keyid in signatures:
                    raise ValueError(f"multiple signatures found for keyid {sig.keyid}")
                signatures[sig.keyid] = sig
            if delegator.get_verification_result(name, payload, signatures):
                md = Metadata(Targets.from_dict(signed), signatures)
        except (ValueError, KeyError, TypeError, AttributeError):
            md = None  # python-tuf's own path decides below, with its own error
    if md is None:
        md = Metadata[Targets].from_bytes(data)
        if md.signed.type != Targets.type:
            raise x.RepositoryError(f"Expected 'targets', got '{md.signed.type}'")
        delegator.verify_delegate(name, md.signed_bytes, md.signatures)
    if md.signed.type != Targets.type:
        raise x.RepositoryError(f"Expected 'targets', got '{md.signed.type}'")
    if md.signed.version != meta.version:
        raise x.BadVersionNumberError(f"Expected {name} v{meta.version}, got v{md.signed.version}.")
    if md.signed.is_expired(now):
        raise x.ExpiredMetadataError(f"New {name} is expired")
    return md.signed


_WALK = object()  # _Online._bin_target's answer where the layout is not this project's: ngclient's own walk


class _Online(Accepted):
    def __init__(self, trusted: Trusted, updater, source) -> None:
        self.trusted, self.updater, self.source = trusted, updater, source.url
        self.version = trusted.state()["snapshot_version"]
        self._lock = threading.Lock()
        self._bins: dict[str, Any] = {}  # bin name -> its Targets, verified by verified_bin
        self._loading: dict[str, threading.Lock] = {}  # bin name -> held while that bin loads
        self._fetch = _source_fetcher(source)

    def targetinfo(self, path: str):
        """python-tuf's TargetFile of ``path`` (None: no such target): the bin step below for
        this project's layout, else ngclient's own walk (Updater.get_targetinfo) under the locks."""
        tf = self._bin_target(path)
        if tf is _WALK:
            with self._lock, exclusive(self.trusted.dir / "lock"):
                tf = self.updater.get_targetinfo(path)
        return tf

    def _bin_target(self, path: str):
        """python-tuf's get_targetinfo(path) for this project's layout (the top-level targets
        delegate every path to succinct hashed bins, and a bin delegates nothing further): the
        top-level target, else the target in the one bin the path hashes to, that bin loaded
        once per process by verified_bin and kept where ngclient keeps it (trust dir,
        "<bin>.json", written under the host's lock); _WALK for any other layout. Several
        threads load different bins at once (their downloads overlap); one bin is loaded once."""
        from urllib.parse import quote as q

        ts = self.updater._trusted_set  # noqa: SLF001 - read only: what ngclient verified
        top = ts.targets
        delegations = top.delegations
        succinct = delegations.succinct_roles if delegations is not None else None
        if path in top.targets:
            return top.targets[path]
        if succinct is None or delegations.roles:
            return _WALK
        name = succinct.get_role_for_target(path)
        targets = self._bins.get(name)
        if targets is None:
            meta = ts.snapshot.meta.get(f"{name}.json")
            if meta is None:
                return _WALK  # ngclient names the missing bin
            with self._lock:
                one = self._loading.setdefault(name, threading.Lock())
            with one:
                targets = self._bins.get(name)
                if targets is None:
                    from tuf.api import exceptions as x

                    if ts.snapshot.is_expired(ts.reference_time):  # ngclient's _check_final_snapshot
                        raise x.ExpiredMetadataError("snapshot.json is expired")
                    if ts.snapshot.version != ts.timestamp.snapshot_meta.version:
                        raise x.BadVersionNumberError(f"Expected snapshot version {ts.timestamp.snapshot_meta.version}, "
                                                      f"got {ts.snapshot.version}")
                    local = self.trusted.dir / f"{q(name, '')}.json"
                    try:  # the host's copy first, verified again (as ngclient's _load_targets does)
                        targets = verified_bin(top, ts.snapshot, name, local.read_bytes(), ts.reference_time)
                    except (OSError, x.RepositoryError):  # none, or not this snapshot's: download it
                        version = f"{meta.version}." if ts.root.consistent_snapshot else ""
                        data = self._fetch.download_bytes(f"{BASE_URL}{version}{q(name, '')}.json",
                                                          meta.length or MAX_TARGETS)
                        targets = verified_bin(top, ts.snapshot, name, data, ts.reference_time)
                        if targets.delegations is None:
                            with self._lock, exclusive(self.trusted.dir / "lock"):
                                atomic_write(local, data, durable=False)
                    if targets.delegations is not None:  # not this project's layout: ngclient walks it
                        return _WALK
                    self._bins[name] = targets
        return targets.targets.get(path)

    def kernel(self, key: str) -> dict[str, Any] | None:
        from tuf.api import exceptions as x

        from rocke_aot.trust.repo import entry_of

        try:
            tf = self.targetinfo(target_path(key))
        except (x.RepositoryError, x.DownloadLengthMismatchError) as e:
            raise _translate(e, f"the bin of {key} from {self.source}") from None
        except x.DownloadError as e:
            raise _missing(e, self.source) from None
        return None if tf is None else entry_of(key, tf)

    def bins(self) -> Iterator[dict]:
        from tuf.api import exceptions as x

        state = self.trusted.state()
        probes = _probe_paths(state["bit_length"], state["prefix"])
        with self._lock, exclusive(self.trusted.dir / "lock"):
            meta = loads((self.trusted.dir / "snapshot.json").read_bytes(), METADATA_LIMITS, "snapshot")["signed"]["meta"]
            for name, path in probes.items():
                try:
                    self.updater.get_targetinfo(path)  # loads and verifies the bin (python-tuf)
                except (x.RepositoryError, x.DownloadLengthMismatchError) as e:
                    raise _translate(e, f"bin {name} from {self.source}") from None
                except x.DownloadError as e:
                    raise _missing(e, self.source) from None
        for name in probes:  # read back one at a time (the version and length the snapshot names)
            yield _bin_targets(self.trusted, meta, self.version, name)


class _Offline(Accepted):
    def __init__(self, trusted: Trusted, state: dict, snapshot: dict) -> None:
        self.trusted, self.state, self.meta = trusted, state, snapshot["signed"]["meta"]
        self.version = state["snapshot_version"]
        self.source = str(trusted.dir)

    def kernel(self, key: str) -> dict[str, Any] | None:
        path = target_path(key)
        name = bin_of(path, self.state["bit_length"], self.state["prefix"])
        tf = _bin_targets(self.trusted, self.meta, self.version, name, key).get(path)
        if tf is None:
            return None
        return record_of(path, tf.get("custom"), tf.get("hashes", {}).get("sha256"), tf.get("length"))

    def bins(self) -> Iterator[dict]:
        for name in _probe_paths(self.state["bit_length"], self.state["prefix"]):
            yield _bin_targets(self.trusted, self.meta, self.version, name)


# STATE: "verified.state" (JSON; not *.json: the directory holds metadata files only under that
# suffix), named in rocke_aot/warm.py, which reads it too


class OnDisk(NamedTuple):
    """Trusted.on_disk's answer."""

    state_sha256: str
    snapshot_version: int
    bin: str
    bin_sha256: str
    bin_expires: str
    entry: dict[str, Any]


class Trusted:
    """``metadata_dir``: use exactly this directory (the conformance client's METADATA_DIR)
    instead of trust_dir/tuf-<pin>."""

    def __init__(self, pin: Pin, trust_dir: str | os.PathLike | None, *, now: datetime | None = None,
                 metadata_dir: str | os.PathLike | None = None):
        self.pin = pin
        self.root_key = pin
        if metadata_dir is not None:
            self.dir = Path(metadata_dir)
        elif trust_dir is not None:
            self.dir = Path(trust_dir) / f"tuf-{pin_id(pin)}"
        else:
            raise TrustConfigError("trusted metadata needs a trust directory or a metadata directory")
        self._now = now

    @property
    def now(self) -> datetime:
        return self._now or datetime.now(timezone.utc)

    def state(self) -> dict:
        try:
            return loads((self.dir / STATE).read_bytes(), METADATA_LIMITS, str(self.dir / STATE))
        except FileNotFoundError:
            return {}
        except TrustError as e:
            raise TrustError(f"{self.dir / STATE} is unreadable ({e}); remove it and fetch online") from None

    def _bootstrap(self, source) -> bytes:
        try:
            return (self.dir / "root.json").read_bytes()  # the newest root this host verified
        except FileNotFoundError:
            pass
        if isinstance(self.pin, bytes):
            return self.pin
        from rocke_aot.trust.repo import check_pinned, load_root

        data = source.metadata("1.root.json", limit=512000)
        check_pinned(load_root(data, f"1.root.json from {source.url}"), self.pin, f"1.root.json from {source.url}")
        return data

    def refresh(self, source) -> Accepted:
        """TUF's client workflow against ``source`` (python-tuf's Updater), under the host's lock."""
        from tuf.api import exceptions as x
        from tuf.ngclient import Updater, UpdaterConfig

        self.dir.mkdir(parents=True, exist_ok=True)
        with exclusive(self.dir / "lock"):
            try:
                updater = Updater(str(self.dir), BASE_URL, fetcher=_source_fetcher(source),
                                  config=UpdaterConfig(snapshot_max_length=MAX_SNAPSHOT,
                                                       targets_max_length=MAX_TARGETS),
                                  bootstrap=self._bootstrap(source))
                updater.refresh()
            except (x.RepositoryError, x.DownloadLengthMismatchError) as e:
                raise _translate(e, f"the signed metadata from {source.url}") from None
            except x.DownloadError as e:  # a file the verified metadata names is missing there
                raise _missing(e, source.url) from None
            self._remember()
        return _Online(self, updater, source)

    def _remember(self) -> None:
        """verified.state from the files the Updater persisted (called under the lock)."""
        snap_bytes = (self.dir / "snapshot.json").read_bytes()
        snap = loads(snap_bytes, METADATA_LIMITS, "verified metadata")
        ts = loads((self.dir / "timestamp.json").read_bytes(), METADATA_LIMITS, "verified metadata")
        targets = loads((self.dir / "targets.json").read_bytes(), METADATA_LIMITS, "verified metadata")
        root = loads((self.dir / "root.json").read_bytes(), METADATA_LIMITS, "verified metadata")
        succinct = (targets["signed"].get("delegations") or {}).get("succinct_roles") or {}
        old = self.state()
        new = {"pin": pin_id(self.pin), "root_version": root["signed"]["version"],
               "timestamp_version": ts["signed"]["version"], "snapshot_version": snap["signed"]["version"],
               "snapshot_sha256": hashlib.sha256(snap_bytes).hexdigest(),
               "bit_length": succinct.get("bit_length"), "prefix": succinct.get("name_prefix"),
               "expires": min(_expires(d, n) for d, n in ((root, "root"), (snap, "snapshot"), (targets, "targets"))
                              ).strftime("%Y-%m-%dT%H:%M:%SZ")}
        # never backwards (the Updater's local files are the floor, under this lock): a lower
        # timestamp or snapshot version is accepted only after a new root (TUF's fast-forward
        # recovery: rotating those keys resets their versions, and ngclient drops the old floor)
        keys = ("root_version",) if new["root_version"] > old.get("root_version", 0) else \
            ("root_version", "timestamp_version", "snapshot_version")
        for k in keys:
            if old.get(k, 0) > new[k]:
                raise RollbackError(f"{k} {new[k]} is older than {old[k]}, which this host verified")
        atomic_write(self.dir / STATE, json.dumps(new, sort_keys=True).encode())

    def on_disk(self, key: str) -> OnDisk | None:
        """What the host's verified files say of ``key`` now, each file read once: verified.state,
        the snapshot it names (by sha256), the bin holding the key (the version and length that
        snapshot names), the key's entry in those bytes; None when they do not hold together (a
        refresh moved them meanwhile), are expired or name no such kernel. A warm note
        (rocke_aot/warm.py) is written from this, and only if the entry is the one checked."""
        try:
            state_bytes = (self.dir / STATE).read_bytes()
            state = loads(state_bytes, METADATA_LIMITS, STATE)
            snap_bytes = (self.dir / "snapshot.json").read_bytes()
            if hashlib.sha256(snap_bytes).hexdigest() != state["snapshot_sha256"]:
                return None
            meta = loads(snap_bytes, METADATA_LIMITS, "snapshot.json")["signed"]["meta"]
            path = target_path(key)
            name = bin_of(path, state["bit_length"], state["prefix"])
            data, doc = _bin_doc(self, meta, state["snapshot_version"], name, key)
            expires = doc["signed"]["expires"]
            if _expires(doc, name) <= self.now or datetime.strptime(
                    state["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) <= self.now:
                return None
            tf = doc["signed"]["targets"].get(path)
            if not isinstance(tf, dict):
                return None
            entry = record_of(path, tf.get("custom"), tf.get("hashes", {}).get("sha256"), tf.get("length"))
        except (OSError, RockeError, KeyError, TypeError, ValueError, AttributeError):
            return None
        return OnDisk(hashlib.sha256(state_bytes).hexdigest(), state["snapshot_version"], name,
                      hashlib.sha256(data).hexdigest(), expires, entry)

    def cached(self) -> Accepted:
        """The metadata verified last, without the network and without verifying it again."""
        with exclusive(self.dir / "lock"):
            state = self.state()
            try:
                snap_bytes = (self.dir / "snapshot.json").read_bytes()
            except FileNotFoundError:
                snap_bytes = None
        if not state or snap_bytes is None or not state.get("bit_length"):
            raise TrustError(f"no verified metadata in {self.dir}: fetch once online first")
        if hashlib.sha256(snap_bytes).hexdigest() != state.get("snapshot_sha256"):
            raise TrustError(f"{self.dir / 'snapshot.json'} is not the snapshot this host verified: fetch online")
        exp = datetime.strptime(state["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        if exp <= self.now:
            raise ExpiredError(f"the metadata verified last expired at {state['expires']}: fetch online")
        # the bytes _remember scanned with these limits (their sha256 is the state's): not scanned again
        return _Offline(self, state, loads(snap_bytes, METADATA_LIMITS, "snapshot.json", checked=True))
