"""A TUF repository of kernels, written and checked with python-tuf's Metadata API.

    DIR/                                   (`rocke-aot trust sign -o DIR`; a mirror's metadata/)
    ├── 1.root.json, 2.root.json, ...      every root version: a host walks the chain from its pin
    ├── timestamp.json                     the only file that changes in place: short-lived
    │                                      (default 1 day), names the snapshot version
    ├── V.snapshot.json                    every targets role's version and length
    ├── V.targets.json                     delegates every path to hashed bins (TAP 15 succinct
    │                                      roles: 2**bit_length bins "bins-<hex>")
    └── V.bins-<hex>.json                  the kernels of one bin: target "kernels/<key>",
                                           length and sha256 of the code object, custom = the
                                           project's own record (key inputs, ir_sha256, metadata
                                           with the launch contract, provenance, generation) as
                                           canonical JSON text (CUSTOM_PLAIN beside it)

Consistent snapshots: every file but timestamp.json is named by its version and never rewritten,
so a CDN can cache it forever. A host downloads timestamp, snapshot, targets and only the bins
holding the keys it asks for (the bin of a key: the first bit_length bits of
sha256("kernels/<key>")). Roles: root (the root keys: what hosts pin), timestamp, snapshot,
targets and every bin (the release keys, one threshold).

    make_root(version, expires, root_keys, release_keys, threshold) -> Metadata[Root]
    write(out, root_files, kernels, signers, ...)  one new repository version in ``out``; a bin
        whose kernels did not change keeps its file and version (hosts do not fetch it again)
    verify(dir, pin, now) -> VerifiedRepository  the whole repository as a host would check it
                                           (root chain from the pin, timestamp, snapshot,
                                           targets, every bin), for export, publish and checks
    migrate_error(dir)                     a directory of the old three-document format is refused by name
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from rocke_aot.cache.keys import canonical_json
from rocke_aot.errors import (
    ExpiredError,
    MixedGenerationError,
    RollbackError,
    SignatureError,
    TrustConfigError,
    TrustError,
    UnlistedKeyError,
)
from rocke_aot.paths import atomic_write
from rocke_aot.trust.keys import PrivateKey, PublicKey

SPEC_VERSION = "1.0.31"
BIN_PREFIX = "bins"
KERNELS = "kernels"
# the bins are sized for this many kernels each on average: measured against 2x-16x the bins in the
# same rounds (docs/trust.md "Bin size"), more bins do not make a 100-kernel fetch cheaper and cost
# every online host (the snapshot it verifies lists every bin)
PER_BIN = 64
MAX_BIT_LENGTH = 16
RELEASE_ROLES = ("timestamp", "snapshot", "targets")
OLD_FORMAT = ("index.json", "manifest.json")
# custom = {"record": the project's record as canonical JSON text (key inputs, ir_sha256, metadata
# with the launch contract, provenance, generation: floats included, which TUF's canonical JSON
# cannot sign as values), and these fields again as plain strings for people and tools}
CUSTOM_PLAIN = ("arch", "lane", "family", "generation")


def target_path(key: str) -> str:
    return f"{KERNELS}/{key}"


def bin_of(path: str, bit_length: int, prefix: str = BIN_PREFIX) -> str:
    """The bin holding ``path`` (TAP 15, as SuccinctRoles.get_role_for_target computes it)."""
    h = hashlib.sha256(path.encode()).digest()
    index = int.from_bytes(h[:4], "big") >> (32 - bit_length)
    width = len(f"{2 ** bit_length - 1:x}")
    return f"{prefix}-{index:0{width}x}"


def bit_length_for(n: int) -> int:
    b = 1
    while b < MAX_BIT_LENGTH and n > PER_BIN * (1 << b):
        b += 1
    return b


def _utc(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(microsecond=0)


def migrate_error(directory: Path) -> None:
    """TrustConfigError if ``directory`` holds signed metadata of the old format."""
    if any((directory / n).is_file() for n in OLD_FORMAT) and not (directory / "timestamp.json").is_file():
        raise TrustConfigError(
            f"{directory} holds the old signed format (root.json, index.json, manifest.json); migrate it to TUF "
            f"metadata with: rocke-aot trust migrate {directory} --key RELEASE_KEY (the release key the old "
            "root.json lists), then serve or export the same directory")


# ---- root ----------------------------------------------------------------------------------------

def make_root(version: int, expires: datetime, root_keys: list[PublicKey], release_keys: list[PublicKey],
              threshold: int = 1, root_threshold: int = 1):
    from tuf.api.metadata import Metadata, Role, Root

    root = Root(version=version, expires=_utc(expires), consistent_snapshot=True, spec_version=SPEC_VERSION)
    root.roles = {name: Role([], 1) for name in ("root", *RELEASE_ROLES)}
    for k in root_keys:
        root.add_key(k.tuf_key(), "root")
    for k in release_keys:
        for role in RELEASE_ROLES:
            root.add_key(k.tuf_key(), role)
    root.roles["root"].threshold = root_threshold
    for role in RELEASE_ROLES:
        root.roles[role].threshold = threshold
    return Metadata(root)


def load_root(data: bytes, what: str):
    from tuf.api.metadata import Metadata, Root

    try:
        md = Metadata[Root].from_bytes(data)
    except Exception as e:  # noqa: BLE001 - python-tuf raises DeserializationError and friends
        raise TrustError(f"{what} is not TUF root metadata ({type(e).__name__}: {str(e)[:200]})") from None
    if md.signed.type != "root":
        raise TrustError(f"{what} is {md.signed.type} metadata, not root")
    return md


def check_pinned(root_md, pin: PublicKey, what: str) -> None:
    """``root_md`` lists ``pin`` as a root key, is signed by it, and by the root threshold."""
    keyid = pin.tuf_key().keyid
    if keyid not in root_md.signed.roles["root"].keyids:
        raise UnlistedKeyError(f"{what} does not list the pinned root key {pin.keyid[:16]} as a root key")
    try:
        root_md.signed.verify_delegate("root", root_md.signed_bytes, root_md.signatures)
    except Exception as e:  # noqa: BLE001 - UnsignedMetadataError
        raise SignatureError(f"{what}: {e}") from None
    sig = root_md.signatures.get(keyid)
    try:
        assert sig is not None
        root_md.signed.get_key(keyid).verify_signature(sig, root_md.signed_bytes)
    except Exception:  # noqa: BLE001 - the pinned key's own signature is required
        raise SignatureError(f"{what} is not signed by the pinned root key {pin.keyid[:16]}") from None


def root_files(directory: Path) -> dict[int, Path]:
    out = {}
    for p in directory.glob("*.root.json"):
        head = p.name.split(".", 1)[0]
        if head.isdigit():
            out[int(head)] = p
    return out


# ---- writing -------------------------------------------------------------------------------------

def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return None


@dataclass
class Previous:
    """What the last version in a directory holds (versions, bins' content)."""

    timestamp: int = 0
    snapshot: int = 0
    targets: int = 0
    targets_doc: dict | None = None
    bit_length: int | None = None
    bins: dict[str, int] = field(default_factory=dict)  # bin name -> version

    @classmethod
    def read(cls, out: Path) -> Previous:
        ts = _read_json(out / "timestamp.json")
        if ts is None:
            return cls()
        try:
            tv = ts["signed"]["version"]
            sv = ts["signed"]["meta"]["snapshot.json"]["version"]
            snap = json.loads((out / f"{sv}.snapshot.json").read_bytes())["signed"]["meta"]
            tgv = snap["targets.json"]["version"]
            tdoc = json.loads((out / f"{tgv}.targets.json").read_bytes())
            bits = tdoc["signed"]["delegations"]["succinct_roles"]["bit_length"]
            bins = {n[:-5]: m["version"] for n, m in snap.items() if n != "targets.json"}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise TrustError(f"{out} holds a timestamp.json whose repository cannot be read ({type(e).__name__}: "
                             f"{e}); sign into a new directory") from None
        return cls(tv, sv, tgv, tdoc, bits, bins)


def _entry_target(key: str, entry: Mapping[str, Any]):
    from tuf.api.metadata import TargetFile

    record = {k: v for k, v in entry.items() if k not in ("sha256", "size")}
    custom = {"record": canonical_json(record), **{k: record[k] for k in CUSTOM_PLAIN if isinstance(record.get(k), str)}}
    return TargetFile(length=entry["size"], hashes={"sha256": entry["sha256"]}, path=target_path(key),
                      unrecognized_fields={"custom": custom})


def dump_metadata(md) -> bytes:
    from tuf.api.serialization.json import JSONSerializer

    return md.to_bytes(JSONSerializer(compact=True))


def write(out: str | Path, roots: Mapping[int, bytes], kernels: Mapping[str, Mapping[str, Any]],
          keys: list[PrivateKey], *, now: datetime | None = None, expires_days: float = 30.0,
          timestamp_days: float = 1.0, bit_length: int | None = None, min_version: int = 1) -> dict[str, Any]:
    """Write the next repository version of ``kernels`` ({key: {sha256, size, ...custom}}) into
    ``out``, signed by the release ``keys``; ``roots`` are the root versions' bytes (1..N, each
    written as N.root.json). Every file written has a version of at least ``min_version`` (a
    device wheel's version: a newer wheel's metadata never rolls a host back). Returns a summary."""
    from tuf.api.metadata import (
        Delegations,
        Metadata,
        MetaFile,
        Snapshot,
        SuccinctRoles,
        Targets,
        Timestamp,
    )

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    migrate_error(out)
    now = _utc(now or datetime.now(timezone.utc))
    if not roots or sorted(roots) != list(range(1, max(roots) + 1)):
        raise TrustConfigError(f"the root versions given are {sorted(roots)}; a host walks the chain from "
                               "1.root.json, so every version from 1 is needed (give each root.json)")
    root = load_root(roots[max(roots)], f"root version {max(roots)}")
    signers = [k.signer() for k in keys]
    have = {s.public_key.keyid for s in signers}
    for role in RELEASE_ROLES:
        r = root.signed.roles[role]
        if len(have & set(r.keyids)) < r.threshold:
            raise TrustError(f"root.json version {root.signed.version} does not list enough of the given keys for "
                             f"the {role} role ({len(have & set(r.keyids))} of {r.threshold}): hosts would refuse "
                             "what they sign (sign a new root.json that lists them first)")
    release = [s for s in signers if s.public_key.keyid in root.signed.roles["targets"].keyids]
    prev = Previous.read(out)
    bits = bit_length or prev.bit_length or bit_length_for(len(kernels))
    if prev.bit_length and bits == prev.bit_length and len(kernels) > 4 * PER_BIN * (1 << bits) \
            and bits < MAX_BIT_LENGTH and bit_length is None:
        bits = bit_length_for(len(kernels))  # outgrown: every bin is signed again
    expires = now + timedelta(days=expires_days)
    renew_before = now + timedelta(days=expires_days / 2)
    succinct = SuccinctRoles([s.public_key.keyid for s in release], root.signed.roles["targets"].threshold,
                             bits, BIN_PREFIX)
    grouped: dict[str, dict[str, Any]] = {name: {} for name in succinct.get_roles()}
    for key in sorted(kernels):
        path = target_path(key)
        grouped[bin_of(path, bits)][path] = kernels[key]
    delegations = Delegations(keys={s.public_key.keyid: s.public_key for s in release}, roles=None,
                              succinct_roles=succinct)
    same_keys = prev.targets_doc is not None and prev.targets_doc["signed"].get("delegations") == delegations.to_dict()
    written = kept = 0
    meta: dict[str, MetaFile] = {}
    files: list[tuple[str, bytes]] = []
    for name, entries in grouped.items():
        pv = prev.bins.get(name) if bits == prev.bit_length else None
        reuse = pv is not None and same_keys  # a bin signed by keys the new targets still delegates to
        targets = {p: _entry_target(p.split("/", 1)[1], e) for p, e in entries.items()}
        if reuse:
            old = _read_json(out / f"{pv}.{name}.json")
            if old is not None and pv is not None:
                old_exp = datetime.strptime(old["signed"]["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
                same = old["signed"].get("targets", {}) == {p: t.to_dict() for p, t in targets.items()}
                if same and old_exp > renew_before:
                    meta[f"{name}.json"] = MetaFile(pv, length=(out / f"{pv}.{name}.json").stat().st_size)
                    kept += 1
                    continue
        md = Metadata(Targets(version=max((pv or 0) + 1, min_version), expires=expires, targets=targets, spec_version=SPEC_VERSION))
        for s in release:
            md.sign(s, append=True)
        data = dump_metadata(md)
        files.append((f"{md.signed.version}.{name}.json", data))
        meta[f"{name}.json"] = MetaFile(md.signed.version, length=len(data))
        written += 1
    tmd: Metadata[Targets] | None = Metadata(Targets(version=max(prev.targets + 1, min_version), expires=expires,
                                                     targets={}, delegations=delegations, spec_version=SPEC_VERSION))
    if prev.targets_doc is not None:
        old_exp = datetime.strptime(prev.targets_doc["signed"]["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=timezone.utc)
        if prev.targets_doc["signed"].get("delegations") == delegations.to_dict() and old_exp > renew_before:
            tmd = None
    if tmd is None:
        meta["targets.json"] = MetaFile(prev.targets, length=(out / f"{prev.targets}.targets.json").stat().st_size)
    else:
        for s in release:
            tmd.sign(s, append=True)
        data = dump_metadata(tmd)
        files.append((f"{tmd.signed.version}.targets.json", data))
        meta["targets.json"] = MetaFile(tmd.signed.version, length=len(data))
    smd = Metadata(Snapshot(version=max(prev.snapshot + 1, min_version), expires=expires, meta=meta, spec_version=SPEC_VERSION))
    for s in release:
        smd.sign(s, append=True)
    sdata = dump_metadata(smd)
    files.append((f"{smd.signed.version}.snapshot.json", sdata))
    ts = Metadata(Timestamp(version=max(prev.timestamp + 1, min_version), expires=now + timedelta(days=timestamp_days),
                            snapshot_meta=MetaFile(smd.signed.version, length=len(sdata),
                                                   hashes={"sha256": hashlib.sha256(sdata).hexdigest()}),
                            spec_version=SPEC_VERSION))
    for s in release:
        ts.sign(s, append=True)
    for v, data in sorted(roots.items()):
        p = out / f"{v}.root.json"
        if not p.is_file() or p.read_bytes() != data:
            if p.is_file():
                raise TrustError(f"{p} exists with other bytes: a root version is never rewritten")
            files.append((p.name, data))
    for name, data in files:  # every versioned file first, timestamp.json last: a reader sees old or new
        atomic_write(out / name, data)
    atomic_write(out / "timestamp.json", dump_metadata(ts))
    return {"version": ts.signed.version, "snapshot_version": smd.signed.version, "expires": ts.signed.expires.isoformat(),
            "kernels": len(kernels), "bins": len(grouped), "bit_length": bits, "bins_written": written,
            "bins_kept": kept, "root_version": max(roots), "out": str(out)}


def timestamp(out: str | Path, keys: list[PrivateKey], *, now: datetime | None = None,
              timestamp_days: float = 1.0) -> dict[str, Any]:
    """Sign a new timestamp.json over the current snapshot (a cron job's step: hosts need a fresh one)."""
    from tuf.api.metadata import Metadata, Timestamp

    out = Path(out)
    now = _utc(now or datetime.now(timezone.utc))
    try:
        old = Metadata[Timestamp].from_bytes((out / "timestamp.json").read_bytes())
    except FileNotFoundError:
        raise TrustError(f"{out} has no timestamp.json (rocke-aot trust sign -o {out} first)") from None
    old.signed.version += 1
    old.signed.expires = now + timedelta(days=timestamp_days)
    old.signatures.clear()
    for k in keys:
        old.sign(k.signer(), append=True)
    atomic_write(out / "timestamp.json", dump_metadata(old))
    return {"version": old.signed.version, "expires": old.signed.expires.isoformat(), "out": str(out)}


# ---- checking a whole repository -----------------------------------------------------------------

@dataclass
class VerifiedRepository:
    root_version: int
    timestamp_version: int
    snapshot_version: int
    bit_length: int
    files: list[str]  # every metadata file a host may ask for (versioned names), timestamp.json last
    kernels: dict[str, dict[str, Any]]  # key -> {sha256, size, **custom}


def tuf_error(e: Exception, what: str) -> TrustError:
    from tuf.api import exceptions as x

    msg = f"{what}: {str(e)[:300]}"
    if isinstance(e, x.ExpiredMetadataError):
        return ExpiredError(msg)
    if isinstance(e, x.BadVersionNumberError):
        return RollbackError(msg)
    if isinstance(e, x.UnsignedMetadataError):
        return SignatureError(msg)
    if isinstance(e, x.LengthOrHashMismatchError | x.DownloadLengthMismatchError):
        return MixedGenerationError(msg)
    return TrustError(msg)


def entry_of(key: str, tf) -> dict[str, Any]:
    """The project's record of one kernel target: {sha256, size, **custom}."""
    return record_of(tf.path, tf.unrecognized_fields.get("custom"), tf.hashes.get("sha256"), tf.length)


def record_of(path: str, custom: object, sha: object, length: object) -> dict[str, Any]:
    """{sha256, size, **record} of a kernel target's custom field (its "record": JSON text)."""
    text = custom.get("record") if isinstance(custom, dict) else None
    if not isinstance(text, str):
        raise TrustError(f"target {path} carries no custom record")
    if not isinstance(sha, str) or not isinstance(length, int):
        raise TrustError(f"target {path} has no sha256 or length")
    from rocke_aot.boundedjson import JSONLimitError, Limits, loads

    try:  # bounded: a record is key inputs + metadata and provenance of at most 1 MiB each
        record = loads(text, Limits(4 << 20, max_depth=32, max_items=200_000, max_string=1 << 20), f"target {path}")
    except JSONLimitError as e:
        raise TrustError(f"target {path}: its custom record is not JSON within its bounds ({e})") from None
    if not isinstance(record, dict):
        raise TrustError(f"target {path}: its custom record is not an object")
    return {**record, "sha256": sha, "size": length}


def verify(directory: str | Path, pin: PublicKey | bytes, now: datetime | None = None, *,
           timestamp: bytes | None = None) -> VerifiedRepository:
    """Check the repository in ``directory`` as a host would, from the pin (a root key, or the
    bytes of a trusted root.json) through every bin (``timestamp``: these bytes instead of the
    directory's timestamp.json: a publish checks the one it is given before it replaces it)."""
    from tuf.api.metadata import Metadata, Snapshot, Targets, Timestamp

    d = Path(directory)
    migrate_error(d)
    now = now or datetime.now(timezone.utc)
    roots = root_files(d)
    if 1 not in roots:
        raise TrustError(f"{d} has no 1.root.json")
    trusted = load_root(roots[1].read_bytes(), "1.root.json")
    if isinstance(pin, PublicKey):
        check_pinned(trusted, pin, "1.root.json")
    elif trusted.signed_bytes != load_root(pin, "the pinned root.json").signed_bytes:
        raise SignatureError("1.root.json is not the pinned root.json")
    files = ["1.root.json"]
    v = 2
    while v in roots:
        new = load_root(roots[v].read_bytes(), f"{v}.root.json")
        try:
            trusted.signed.verify_delegate("root", new.signed_bytes, new.signatures)
            new.signed.verify_delegate("root", new.signed_bytes, new.signatures)
        except Exception as e:  # noqa: BLE001
            raise tuf_error(e, f"{v}.root.json") from None
        if new.signed.version != v:
            raise TrustError(f"{v}.root.json says version {new.signed.version}")
        trusted, v = new, v + 1
        files.append(f"{new.signed.version}.root.json")
    root = trusted.signed
    try:
        if root.is_expired(now):
            raise ExpiredError(f"root version {root.version} expired at {root.expires}")
        ts = Metadata[Timestamp].from_bytes(timestamp if timestamp is not None else (d / "timestamp.json").read_bytes())
        root.verify_delegate("timestamp", ts.signed_bytes, ts.signatures)
        if ts.signed.is_expired(now):
            raise ExpiredError(f"timestamp.json version {ts.signed.version} expired at {ts.signed.expires}")
        sv = ts.signed.snapshot_meta.version
        sdata = (d / f"{sv}.snapshot.json").read_bytes()
        ts.signed.snapshot_meta.verify_length_and_hashes(sdata)
        snap = Metadata[Snapshot].from_bytes(sdata)
        root.verify_delegate("snapshot", snap.signed_bytes, snap.signatures)
        if snap.signed.version != sv or snap.signed.is_expired(now):
            raise TrustError(f"{sv}.snapshot.json is version {snap.signed.version}, expires {snap.signed.expires}")
        tv = snap.signed.meta["targets.json"].version
        tdata = (d / f"{tv}.targets.json").read_bytes()
        snap.signed.meta["targets.json"].verify_length_and_hashes(tdata)
        targets = Metadata[Targets].from_bytes(tdata)
        root.verify_delegate("targets", targets.signed_bytes, targets.signatures)
        if targets.signed.version != tv or targets.signed.is_expired(now):
            raise TrustError(f"{tv}.targets.json is version {targets.signed.version}, expires {targets.signed.expires}")
        succinct = targets.signed.delegations.succinct_roles if targets.signed.delegations else None
        if succinct is None:
            raise TrustError(f"{tv}.targets.json delegates to no hashed bins")
        files += [f"{sv}.snapshot.json", f"{tv}.targets.json"]
        kernels: dict[str, dict[str, Any]] = {}
        for name in succinct.get_roles():
            mf = snap.signed.meta.get(f"{name}.json")
            if mf is None:
                raise TrustError(f"snapshot version {sv} does not list bin {name}")
            bdata = (d / f"{mf.version}.{name}.json").read_bytes()
            mf.verify_length_and_hashes(bdata)
            b = Metadata[Targets].from_bytes(bdata)
            targets.signed.verify_delegate(name, b.signed_bytes, b.signatures)
            if b.signed.version != mf.version or b.signed.is_expired(now):
                raise TrustError(f"{mf.version}.{name}.json is version {b.signed.version}, expires {b.signed.expires}")
            files.append(f"{mf.version}.{name}.json")
            for path, tf in b.signed.targets.items():
                if bin_of(path, succinct.bit_length, succinct.name_prefix) != name:
                    raise TrustError(f"bin {name} lists {path}, which belongs to another bin")
                if path.startswith(f"{KERNELS}/"):
                    kernels[path.split("/", 1)[1]] = entry_of(path, tf)
    except TrustError:
        raise
    except FileNotFoundError as e:
        raise TrustError(f"{d} lacks {Path(e.filename).name}") from None
    except Exception as e:  # noqa: BLE001 - python-tuf's errors, named
        raise tuf_error(e, str(d)) from None
    files.append("timestamp.json")
    return VerifiedRepository(root.version, ts.signed.version, sv, succinct.bit_length, files, kernels)


NAME_RE = r"^(?:[1-9][0-9]{0,9}\.)?[A-Za-z][A-Za-z0-9_-]{0,63}\.json$"  # a metadata file's name


def versioned(name: str) -> bool:
    """Consistent-snapshot names (N.role.json) are never rewritten; timestamp.json is."""
    return name.split(".", 1)[0].isdigit()


def signed_root(version: int, expires: datetime, root_key: PrivateKey, release_keys: list[PublicKey],
                threshold: int = 1) -> bytes:
    """The bytes of a root.json listing ``root_key`` and ``release_keys``, signed by ``root_key``."""
    md = make_root(version, expires, [root_key.public], release_keys, threshold)
    md.sign(root_key.signer())
    return dump_metadata(md)
