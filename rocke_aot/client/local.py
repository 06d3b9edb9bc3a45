"""The client's local store: verified kernels as plain files, no database.

    ROOT ($ROCKE_AOT_CLIENT_HOME, default $ROCKE_AOT_HOME/client)
    ├── blobs/<sha256>        raw code objects, named by their content hash
    ├── kernels/<key>.json    the record an unsigned fetch accepted a kernel under (key inputs,
    │                         sha256, size, launch contract in metadata, provenance, origin)
    └── trust/                the signed metadata accepted last (root, index, manifest: the
                              records of every signed kernel) and the highest versions seen

    put_blob(sha, size, b)  a signed fetch keeps the bytes only: its record is the signed
                            manifest entry, kept once in trust/ (one file per kernel, not two:
                            creating a file is most of what a cold fetch costs on ext4);
                            bytes this module checked on download (Verified: verified() or
                            decoded() made them) are not hashed again, any other bytes are
    put(kernel)   an unsigned fetch: the blob, then the record; each written to a temp file
                  and renamed; no fsync (a crash may lose an entry, and a record whose blob
                  was lost reads as a miss, fetched again)
    get(key)      record -> blob;  blob(sha, size): sha256 and size checked on every read (a
                  changed file is an IntegrityError and is removed, never returned)
    verify(origin=None) -> LocalReport   every record (of that origin) against the record
                  schema (check_record), its file name, its blob (present, size, sha256, an ELF
                  for its arch); every blob file against its name; the blobs the accepted
                  signed manifest lists; what no record or manifest entry references (orphans)
    entries() / usage()   every blob with its size, last use and the keys that name it (an
                  unsigned record, or the accepted signed manifest); the bytes kept
    gc(max_bytes, keep=())   remove the least recently used kernels (blob + unsigned record)
                  until the blobs fit max_bytes ($ROCKE_AOT_CLIENT_MAX_BYTES: `rocke-aot fetch`
                  and `client gc`), never a blob of ``keep``; a read (blob()) marks its use
    purge(origin=URL, bad=False) -> LocalReport   remove the records a server at URL left
                  (their origin), with bad: every record and blob verify refuses; then every
                  blob nothing references any more (no get could return it)

A GPU host needs no SQLite, SQLAlchemy or migrations to keep a few hundred code objects;
files named by hash also make concurrent writers safe (two writers of one key write the
same bytes, and ``os.replace`` is atomic).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocke_aot import paths, record, settings
from rocke_aot.boundedjson import is_int
from rocke_aot.cache.keys import KeyInputs, artifact_key, check_key, thaw
from rocke_aot.errors import CodeObjectError, IntegrityError, NotFoundError, SpecError, TrustError
from rocke_aot.paths import atomic_write
from rocke_aot.targets import Target
from rocke_aot.warm import ANSWERS

MAX_CODE_OBJECT = 256 << 20  # the largest code object a record may name (client/sources.py MAX_BLOB)
MAX_RECORD_TEXT = 3 << 20  # a whole record: metadata and provenance of at most 1 MiB each, + key inputs


@dataclass(frozen=True)
class Kernel:
    """One accepted kernel: its key inputs and the facts it was accepted under.

    ``origin`` says where it came from: the source URL, and for a signed fetch the manifest
    version and generation that listed it. ``code_object`` is filled by reads, not listings.
    """

    key: str
    inputs: KeyInputs
    sha256: str
    size: int
    ir_sha256: str | None
    metadata: Mapping[str, Any]
    provenance: Mapping[str, Any]
    origin: Mapping[str, Any]
    code_object: bytes | None = field(default=None, repr=False, compare=False)

    __hash__ = None  # type: ignore[assignment]

    @property
    def launch(self) -> Mapping[str, Any] | None:
        """The launch contract the builder recorded (metadata's "launch" block)."""
        return self.metadata.get("launch")

    def _fields(self) -> dict[str, Any]:
        return {"key": self.key, "arch": self.inputs.arch, "lane": self.inputs.lane, "profile": self.inputs.profile,
                "family": self.inputs.family, "spec": self.inputs.spec, "recipe_digest": self.inputs.recipe_digest,
                "toolchain": self.inputs.toolchain, "options": self.inputs.options, "sha256": self.sha256,
                "size": self.size, "ir_sha256": self.ir_sha256, "metadata": self.metadata,
                "provenance": self.provenance, "origin": self.origin}

    def record(self) -> dict[str, Any]:
        """The record as plain JSON values (what kernels/<key>.json holds)."""
        return thaw(self._fields())

    def record_json(self) -> bytes:
        """record() as JSON text (sorted keys), without copying the frozen parts first."""
        return json.dumps(self._fields(), sort_keys=True, default=_plain).encode()

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], code_object: bytes | None = None) -> Kernel:
        """A Kernel from a record (ours, a manifest's or a server's); the key must be the hash
        of the inputs (else IntegrityError), the sha256 64 hex digits, the size an int within
        1..MAX_CODE_OBJECT, metadata, provenance and origin objects (else SpecError). A record
        from a server is checked against the whole record schema first: check_record."""
        if not isinstance(rec, Mapping):
            raise SpecError(f"a kernel record is a JSON object, got {type(rec).__name__}")
        try:
            inputs = KeyInputs.from_dict(rec)
            key, sha, size = check_key(rec["key"]), rec["sha256"], rec["size"]
        except KeyError as e:
            raise SpecError(f"a kernel record lacks {e}") from None
        md, prov, origin = (_object(rec.get(n), n) for n in ("metadata", "provenance", "origin"))
        if artifact_key(inputs) != key:
            raise IntegrityError(f"the record of {key} names inputs that hash to {artifact_key(inputs)}")
        check_sha(sha)
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= MAX_CODE_OBJECT:
            raise SpecError(f"kernel {key}: size must be an int within 1..{MAX_CODE_OBJECT}, got {size!r}")
        ir = rec.get("ir_sha256")
        if ir is not None:
            check_sha(ir)
        return cls(key, inputs, sha, size, ir, md, prov, origin, code_object)


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise record.RecordError(what, f"must be an object, got {type(value).__name__}")
    return value


def check_record(rec: Any) -> Kernel:
    """A record a server sent (or a local file holds) through the one record schema
    (rocke_aot/record.py: JSON types of bounded size and depth, metadata with its resources and
    launch contract, provenance), then Kernel.from_record. SpecError (RecordError) names the
    field; IntegrityError: inputs that do not hash to the key."""
    if not isinstance(rec, Mapping):
        raise SpecError(f"a kernel record is a JSON object, got {type(rec).__name__}")
    record.check_json(rec, "kernel record", max_bytes=MAX_RECORD_TEXT)
    record.check_metadata(_object(rec.get("metadata"), "metadata"))
    record.check_provenance(_object(rec.get("provenance"), "provenance"))
    origin = _object(rec.get("origin"), "origin")
    if not isinstance(origin.get("source", ""), str):
        raise record.RecordError("origin.source", f"must be a URL, got {origin.get('source')!r}")
    return Kernel.from_record(rec)


def _plain(value: Any) -> Any:
    """json.dumps' fallback for the frozen mappings of KeyInputs (tuples it writes as lists)."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


_SHA_RE = re.compile(r"[0-9a-f]{64}")


def check_sha(sha: object) -> str:
    if not isinstance(sha, str) or not _SHA_RE.fullmatch(sha):
        raise SpecError(f"a sha256 is 64 lowercase hex digits, got {sha!r}")
    return sha


def check_elf_header(data: bytes, target: Target, what: str) -> bytes:
    """``data`` if it starts as a code object for ``target`` does (ELF64, little-endian, the
    e_machine of its family), else CodeObjectError. A cheap gate for the slim client,
    which has no ELF parser: aot/codeobject.py validates the whole object where one is
    installed (service/client.py, the runner)."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CodeObjectError(f"{what}: not a code object (an ELF64 little-endian file); it starts {data[:16]!r}")
    machine = int.from_bytes(data[18:20], "little")
    if machine != target.elf_machine:
        raise CodeObjectError(f"{what}: ELF machine {machine}, not {target.elf_machine} as {target.id}'s code objects")
    return data


class Verified(bytes):
    """Bytes whose sha256 and size were checked: made only by verified() and decoded() below,
    after the check. bytes are immutable, so what was checked is what put_blob keeps; that
    lets a fetch hash each blob once (on download) instead of twice. Reads never trust it:
    LocalStore.blob hashes the file on every read."""

    sha256: str

    @classmethod
    def _after_check(cls, data: bytes, sha256: str) -> Verified:
        out = cls(data)
        out.sha256 = sha256
        return out


def verified(data: bytes, sha256: str, size: int, what: str) -> Verified:
    """``data`` as Verified if it has exactly this size and sha256, else IntegrityError."""
    return Verified._after_check(check_bytes(data, sha256, size, what), sha256)


def decoded(frame: bytes, sha256: str, size: int) -> Verified:
    """A zstd frame's raw bytes as Verified: cache/codec.decode bounds the decompress and
    checks size and sha256 (IntegrityError otherwise). (zstandard loads here: the local store
    keeps raw bytes, so a warm fetch never needs it.)"""
    from rocke_aot.cache import codec

    return Verified._after_check(codec.decode(frame, sha256, size), sha256)


def check_bytes(data: bytes, sha256: str, size: int, what: str) -> bytes:
    """``data`` if it has exactly this size and sha256, else IntegrityError naming ``what``."""
    if len(data) != size:
        raise IntegrityError(f"{what}: {len(data)} bytes, expected {size}")
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise IntegrityError(f"{what}: the bytes hash to {got}, expected {sha256}")
    return data


def _check_once(data: bytes, sha256: str, size: int) -> None:
    """IntegrityError unless ``data`` has this sha256 and size; bytes checked on download
    against these very values (Verified) are not hashed again."""
    if not (isinstance(data, Verified) and data.sha256 == sha256 and len(data) == size):
        check_bytes(data, sha256, size, f"blob {sha256}")


def default_root() -> Path:
    value = settings.raw(settings.CLIENT_HOME)
    return Path(value) if value else paths.home() / "client"


class LocalStore:
    """Verified kernels under ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.trust_dir = self.root / "trust"
        self._blobs_dir = os.path.join(self.root, "blobs", "")
        self._dirs: set[str] = set()  # blobs/, kernels/ made (once per LocalStore, not per put)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _blob(self, sha: str) -> Path:
        return self.root / "blobs" / check_sha(sha)

    def _blob_path(self, sha: str) -> str:
        """_blob as a string (pathlib costs more than a read on the hot path)."""
        return self._blobs_dir + check_sha(sha)

    def _record(self, key: str) -> Path:
        return self.root / "kernels" / f"{check_key(key)}.json"

    def has(self, key: str) -> bool:
        return self._record(key).is_file()

    def record(self, key: str) -> Kernel:
        """The record of ``key`` without its bytes; NotFoundError if absent."""
        try:
            text = self._record(key).read_text()
        except FileNotFoundError:
            raise NotFoundError(f"kernel {key} is not in the local store {self.root}") from None
        try:
            rec = json.loads(text)
        except ValueError as e:
            raise IntegrityError(f"the local record of {key} is not JSON ({e})") from None
        k = Kernel.from_record(rec)
        if k.key != key:
            raise IntegrityError(f"the local record file of {key} holds kernel {k.key}")
        return k

    def get(self, key: str) -> Kernel:
        """The kernel with verified bytes; a blob that changed on disk is removed and refused."""
        k = self.record(key)
        return Kernel(**{**k.__dict__, "code_object": self.blob(k.sha256, k.size)})

    def blob(self, sha256: str, size: int) -> bytes:
        path = self._blob_path(sha256)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise NotFoundError(f"blob {sha256} is not in the local store {self.root}") from None
        try:
            out = check_bytes(data, sha256, size, f"local blob {path}")
        except IntegrityError:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            raise
        try:  # its last use, for gc's least-recently-used order
            os.utime(path)
        except OSError:
            pass
        return out

    def _mkdirs(self, *names: str) -> None:
        for d in names:
            if d not in self._dirs:
                (self.root / d).mkdir(parents=True, exist_ok=True)
                self._dirs.add(d)

    def put_blob(self, sha256: str, size: int, data: bytes) -> None:
        """Keep verified bytes under their hash. Bytes checked on download against this very
        sha256 and size (Verified) are not hashed again; any others are checked here first
        (IntegrityError, nothing written). Every caller calls it after blob() missed, so it
        does not look again: a copy another writer kept meanwhile is replaced by the same
        bytes (an atomic rename), which costs less than one more stat on every cold fetch."""
        path = self._blob_path(sha256)
        _check_once(data, sha256, size)
        self._mkdirs("blobs")
        # No fsync: every read checks size and sha256, so a crash can lose a blob (fetched
        # again) but never make a wrong one pass.
        atomic_write(path, data, durable=False, make_parent=False)

    def put(self, kernel: Kernel) -> Kernel:
        """Keep a kernel and its record (the caller verified it; its bytes are checked again).
        A blob already kept (another kernel's bytes, the same sha256) is not written again."""
        if kernel.code_object is None:
            raise SpecError(f"put of {kernel.key} without its code object")
        if os.path.isfile(self._blob_path(kernel.sha256)):
            _check_once(kernel.code_object, kernel.sha256, kernel.size)
        else:
            self.put_blob(kernel.sha256, kernel.size, kernel.code_object)
        self._mkdirs("kernels")
        atomic_write(self._record(kernel.key), kernel.record_json(), durable=False, make_parent=False)
        return kernel

    def keys(self) -> list[str]:
        d = self.root / "kernels"
        return sorted(p.stem for p in d.glob("*.json")) if d.is_dir() else []

    def entries(self) -> list[LocalEntry]:
        """Every blob kept: its size, last use (mtime) and the keys that name it (unsigned
        records, the accepted signed manifest), most recently used first. Reads names and
        stat only (verify checks the bytes)."""
        names: dict[str, list[str]] = {}
        for sha, keys in _signed_blobs(self).items():
            names.setdefault(sha, []).extend(keys)
        for key in self.keys():
            try:
                rec = json.loads(self._record(key).read_bytes())
                rec_sha = rec["sha256"] if isinstance(rec, dict) else None
            except (OSError, ValueError, RecursionError, KeyError):
                continue
            if isinstance(rec_sha, str):
                names.setdefault(rec_sha, []).append(key)
        out = []
        d = self.root / "blobs"
        for name in (os.listdir(d) if d.is_dir() else ()):
            try:
                st = os.stat(d / name)
            except FileNotFoundError:
                continue
            out.append(LocalEntry(name, st.st_size, st.st_mtime, tuple(sorted(set(names.get(name, ()))))))
        return sorted(out, key=lambda e: (-e.used, e.sha256))

    def usage(self) -> dict[str, Any]:
        """What the store holds: blobs (count, bytes), unsigned records, the signed metadata's bytes."""
        ents = self.entries()
        trust = sum(p.stat().st_size for p in self.trust_dir.rglob("*") if p.is_file()) if self.trust_dir.is_dir() else 0
        return {"root": str(self.root), "blobs": len(ents), "blob_bytes": sum(e.size for e in ents),
                "records": len(self.keys()), "trust_bytes": trust}

    def gc(self, max_bytes: int, keep: Iterable[str] = ()) -> list[LocalEntry]:
        """Remove the least recently used blobs (and the unsigned records naming them) until the
        blobs kept total at most ``max_bytes``; a blob of ``keep`` (sha256s) is never removed
        (what a command just fetched). Returns what was removed, least recent first."""
        if not is_int(max_bytes) or max_bytes < 0:
            raise SpecError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        keep = set(keep)
        ents = self.entries()
        total = sum(e.size for e in ents)
        removed: list[LocalEntry] = []
        for e in reversed(ents):  # least recently used first
            if total <= max_bytes:
                break
            if e.sha256 in keep:
                continue
            for key in e.keys:
                self._record(key).unlink(missing_ok=True)
            (self.root / "blobs" / e.sha256).unlink(missing_ok=True)
            total -= e.size
            removed.append(e)
        if removed:  # the contract memos are bounded by the store's bound (client/contracts.py)
            drop_memos(self.trust_dir)
        return removed

    def verify(self, origin: str | None = None) -> LocalReport:
        """Every record (only those from ``origin`` when given) against the record schema, its
        file name and its blob; every blob file against its name (module doc). Nothing is
        changed: a bad entry is reported, and purge removes it."""
        return _verify(self, origin)[0]

    def purge(self, origin: str | None = None, *, bad: bool = False) -> LocalReport:
        """Remove the records whose origin is ``origin`` (a server URL), and with ``bad`` every
        record and blob verify refuses; then every blob nothing references any more. Returns
        verify's report afterwards, with the files removed."""
        return _purge(self, origin, bad)


@dataclass(frozen=True)
class LocalEntry:
    """One blob of the local store: its sha256, size, last use (Unix time) and the keys naming it."""

    sha256: str
    size: int
    used: float
    keys: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size, "used": self.used, "keys": list(self.keys)}


def max_bytes_setting() -> int | None:
    """$ROCKE_AOT_CLIENT_MAX_BYTES: the local store's bound in bytes of blobs, or None (no bound)."""
    return settings.integer(settings.CLIENT_MAX_BYTES)


_TOP_LEVEL = ("root.json", "timestamp.json", "snapshot.json", "targets.json")


def _signed_entries(store: LocalStore) -> dict[str, tuple[int, list[str]]]:
    """sha256 -> (size, keys) of every kernel target in the bins this host verified (python-tuf's
    copies under trust/tuf-<pin>/, client/trusted.py): what the signed metadata lists here.
    Raises OSError / TrustError on an unreadable one (verify reports it)."""
    from rocke_aot.boundedjson import JSONLimitError, Limits
    from rocke_aot.boundedjson import loads as bounded_loads

    limits = Limits(32 << 20, max_depth=32, max_items=2_000_000, max_string=32 << 20)
    out: dict[str, tuple[int, list[str]]] = {}
    if not store.trust_dir.is_dir():
        return out
    for d in sorted(store.trust_dir.glob("tuf-*")):
        for f in sorted(d.glob("*.json")):
            if f.name in _TOP_LEVEL:
                continue
            try:
                doc = bounded_loads(f.read_bytes(), limits, str(f))
                targets = doc["signed"]["targets"]
                for path, tf in targets.items():
                    if not path.startswith("kernels/"):
                        continue
                    sha, size = tf["hashes"]["sha256"], tf["length"]
                    out.setdefault(sha, (size, []))[1].append(path[len("kernels/"):])
            except (JSONLimitError, KeyError, TypeError, AttributeError) as e:
                raise TrustError(f"{f}: not a verified bin ({type(e).__name__}: {e})") from None
    return out


def _signed_blobs(store: LocalStore) -> dict[str, list[str]]:
    """sha256 -> the keys the verified signed metadata lists with it ({} when none, or unreadable:
    verify reports that)."""
    try:
        return {sha: keys for sha, (_, keys) in _signed_entries(store).items()}
    except (OSError, TrustError):
        return {}


@dataclass(frozen=True)
class LocalReport:
    """What LocalStore.verify found (or purge removed): counts, the records and blobs refused
    with why, the origins of the records checked, the blobs nothing references."""

    records: int
    blobs: int
    bad: tuple[tuple[str, str], ...] = ()  # (kernels/<key>.json or blobs/<sha256>, why)
    origins: tuple[tuple[str, int], ...] = ()  # (source URL, records), most first
    orphans: tuple[str, ...] = ()  # blob sha256s no record or signed manifest entry names
    removed: tuple[str, ...] = ()  # purge: the files removed (relative to the root)

    @property
    def ok(self) -> bool:
        return not self.bad

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "records": self.records, "blobs": self.blobs,
                "bad": [{"path": p, "reason": r} for p, r in self.bad],
                "origins": [{"source": s, "records": n} for s, n in self.origins],
                "orphans": list(self.orphans), "removed": list(self.removed)}


def _source(origin: Any) -> str | None:
    src = origin.get("source") if isinstance(origin, Mapping) else None
    return src.rstrip("/") if isinstance(src, str) else None


def _verify(store: LocalStore, origin: str | None) -> tuple[LocalReport, set[str]]:
    """(the report, the sha256s referenced by records that passed) of LocalStore.verify."""
    want = origin.rstrip("/") if origin is not None else None
    bad: list[tuple[str, str]] = []
    origins: dict[str, int] = {}
    referenced: set[str] = set()
    checked = 0
    blob_names = sorted(os.listdir(store.root / "blobs")) if (store.root / "blobs").is_dir() else []
    for key in store.keys():  # noqa: SIM118 - LocalStore.keys(), not a dict's
        rel = f"kernels/{key}.json"
        try:
            rec = json.loads((store.root / rel).read_bytes())
        except (OSError, ValueError, RecursionError) as e:
            bad.append((rel, f"unreadable: {type(e).__name__}: {e}"))
            continue
        src = _source(rec.get("origin") if isinstance(rec, dict) else None)
        if want is not None and src != want:
            continue
        checked += 1
        origins[src or "(none)"] = origins.get(src or "(none)", 0) + 1
        try:
            k = check_record(rec)
            if k.key != key:
                raise IntegrityError(f"the file of {key} holds the record of {k.key}")
            path = store.root / "blobs" / k.sha256
            data = path.read_bytes() if path.is_file() else None
            if data is None:
                raise NotFoundError(f"its blob {k.sha256} is missing")
            check_bytes(data, k.sha256, k.size, f"its blob {k.sha256}")
            check_elf_header(data, k.inputs.target, f"its blob {k.sha256}")
        except (SpecError, IntegrityError, NotFoundError, CodeObjectError) as e:
            bad.append((rel, f"{type(e).__name__}: {e}"))
            continue
        referenced.add(k.sha256)
    signed: dict[str, int] = {}
    try:
        signed = {sha: size for sha, (size, _) in _signed_entries(store).items()}
    except (OSError, TrustError) as e:
        bad.append(("trust/", f"unreadable: {type(e).__name__}: {e}"))
    if want is None:  # every blob file: named by its content, the signed ones of the signed size
        for name in blob_names:
            rel = f"blobs/{name}"
            try:
                data = (store.root / rel).read_bytes()
                got = hashlib.sha256(data).hexdigest()
                if got != name:
                    raise IntegrityError(f"its bytes hash to {got}")
                if name in signed and len(data) != signed[name]:
                    raise IntegrityError(f"{len(data)} bytes; the signed manifest says {signed[name]}")
            except (OSError, IntegrityError) as e:
                bad.append((rel, f"{type(e).__name__}: {e}"))
    orphans = tuple(n for n in blob_names if n not in referenced and n not in signed) if want is None else ()
    report = LocalReport(checked, len(blob_names) if want is None else len(referenced), tuple(bad),
                         tuple(sorted(origins.items(), key=lambda x: (-x[1], x[0]))), orphans)
    return report, referenced | set(signed)


def _purge(store: LocalStore, origin: str | None, bad: bool) -> LocalReport:
    if origin is None and not bad:
        raise SpecError("purge what? give an origin (the URL of the server whose records go) or bad=True")
    want = origin.rstrip("/") if origin is not None else None
    removed: list[str] = []
    for key in store.keys() if want is not None else ():
        rel = f"kernels/{key}.json"
        try:
            rec = json.loads((store.root / rel).read_bytes())
            src = _source(rec.get("origin") if isinstance(rec, dict) else None)
        except (OSError, ValueError, RecursionError):
            continue  # unreadable: attributed to no origin (bad=True removes it)
        if src == want:
            (store.root / rel).unlink(missing_ok=True)
            removed.append(rel)
    report, _ = _verify(store, None)
    if bad:
        for rel, _why in report.bad:
            if rel.startswith(("kernels/", "blobs/")):
                (store.root / rel).unlink(missing_ok=True)
                removed.append(rel)
        report, _ = _verify(store, None)
    for sha in report.orphans:  # nothing names them any more: no get can return them
        (store.root / "blobs" / sha).unlink(missing_ok=True)
        removed.append(f"blobs/{sha}")
    report, _ = _verify(store, None)
    return replace(report, removed=tuple(removed))


def drop_memos(trust_dir: str | os.PathLike) -> None:
    """Remove every pin's launch-contract memo (client/contracts.py: ``<trust dir>/tuf-<pin>/contracts``)
    and warm-fetch notes (rocke_aot/warm.py: ``.../answers``) under a local store's trust folder: what
    gc calls when it evicts, so both are bounded by the store's own bound; the next fetch of each
    kernel checks its contract in full once more (and writes its note again)."""
    for pattern in ("tuf-*/contracts", f"tuf-*/{ANSWERS}"):
        for d in Path(trust_dir).glob(pattern):
            shutil.rmtree(d, ignore_errors=True)
