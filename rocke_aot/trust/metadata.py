"""The OLD signed format (root.json, index.json, manifest.json), read only by `rocke-aot trust migrate`
(trust/release.py migrate) and tests of it; the signed metadata is TUF now (trust/repo.py).

The old format, as it was:

Every document is ``{"signed": {...}, "signatures": [{"keyid": hex, "sig": hex}]}``; a
signature is ed25519 over the canonical JSON of "signed" (sorted keys, no spaces: the
encoding cache/keys.py hashes keys with, so both sides serialize one way).

    root.json      _type root: version, expires, keys {keyid: public key},
                   roles {"root": {keyids, threshold}, "release": {keyids, threshold}}
                   signed by root keys; hosts pin a root public key (configuration)
    index.json     _type index: version, expires, the manifest's {version, sha256, size},
                   the generations it serves; signed by release keys. Small: a host reads
                   it at start-up and downloads the manifest only when its sha256 moved
    manifest.json  _type manifest: version, expires, generations [{arch, lane, family, generation}],
                   kernels {key: {key inputs, sha256, size, ir_sha256, metadata (the launch
                   contract is its "launch"), provenance, generation}}; signed by release keys

verify(doc, keys, role) checks the threshold of distinct listed keys with valid signatures;
check_* parse one document type, its expiry (against ``now``), its fields. What a host
remembers between runs (highest versions: rollback) is client/trusted.py's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from rocke_aot.cache.keys import canonical_json
from rocke_aot.errors import (
    ExpiredError,
    MixedGenerationError,
    SignatureError,
    TrustError,
    UnlistedKeyError,
)
from rocke_aot.trust.keys import PrivateKey, PublicKey

SPEC_VERSION = "rocke-aot/trust/1"
ROLES = ("root", "release")


def canonical(signed: Mapping[str, Any]) -> bytes:
    return canonical_json(signed).encode()


def iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object, what: str) -> datetime:
    if not isinstance(value, str):
        raise TrustError(f"{what}: expires must be an ISO 8601 UTC time, got {value!r}")
    try:
        t = datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        raise TrustError(f"{what}: expires must look like 2027-01-31T00:00:00Z, got {value!r}") from None
    return t.replace(tzinfo=timezone.utc)


def sign(signed: Mapping[str, Any], keys: list[PrivateKey]) -> dict[str, Any]:
    """The envelope of ``signed`` with one signature per key."""
    data = canonical(signed)
    return {"signed": json.loads(canonical_json(signed)),
            "signatures": [{"keyid": k.public.keyid, "sig": k.sign(data)} for k in keys]}


def dumps(doc: Mapping[str, Any]) -> bytes:
    """The bytes a document is published as (what index.json's sha256 is taken over)."""
    return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()


def loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise SignatureError(f"{what} is not JSON ({e}); unsigned") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("signed"), dict):
        raise SignatureError(f"{what} has no 'signed' object: unsigned")
    sigs = doc.get("signatures")
    if not isinstance(sigs, list) or not sigs:
        raise SignatureError(f"{what} carries no signatures")
    return doc


@dataclass(frozen=True)
class Role:
    keyids: tuple[str, ...]
    threshold: int


def verify(doc: Mapping[str, Any], keys: Mapping[str, PublicKey], role: Role, what: str) -> dict[str, Any]:
    """``doc["signed"]`` if at least ``role.threshold`` distinct keys of the role signed it."""
    data = canonical(doc["signed"])
    good, unlisted, bad = set(), [], []
    for s in doc["signatures"]:
        if not isinstance(s, dict):
            bad.append(repr(s)[:40])
            continue
        kid = s.get("keyid")
        if kid not in role.keyids or kid not in keys:
            unlisted.append(str(kid)[:16])
            continue
        sig = s.get("sig")
        if isinstance(sig, str) and keys[kid].verify(sig, data):
            good.add(kid)
        else:
            bad.append(str(kid)[:16])
    if len(good) >= role.threshold:
        return doc["signed"]
    if bad:
        raise SignatureError(f"{what}: bad signature by key {', '.join(bad)} "
                             f"({len(good)} of {role.threshold} needed are valid)")
    if unlisted:
        raise UnlistedKeyError(f"{what}: signed by key {', '.join(unlisted)}, which root.json does not list "
                               f"for this role ({len(good)} of {role.threshold} valid signatures)")
    raise SignatureError(f"{what}: {len(good)} valid signatures, {role.threshold} needed")


def _common(signed: Mapping[str, Any], type_: str, what: str, now: datetime) -> int:
    if signed.get("_type") != type_:
        raise TrustError(f"{what}: _type is {signed.get('_type')!r}, expected {type_!r}")
    if signed.get("spec_version") != SPEC_VERSION:
        raise TrustError(f"{what}: spec_version {signed.get('spec_version')!r}, this client reads {SPEC_VERSION!r}")
    v = signed.get("version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise TrustError(f"{what}: version must be a positive int, got {v!r}")
    expires = parse_time(signed.get("expires"), what)
    if expires <= now:
        raise ExpiredError(f"{what} version {v} expired at {iso(expires)} (now {iso(now)})")
    return v


@dataclass(frozen=True)
class Root:
    version: int
    expires: str
    keys: Mapping[str, PublicKey]
    roles: Mapping[str, Role]


def make_root(version: int, expires: datetime, root_keys: list[PublicKey], release_keys: list[PublicKey],
              threshold: int = 1) -> dict[str, Any]:
    keys = {k.keyid: k.as_dict() for k in [*root_keys, *release_keys]}
    return {"_type": "root", "spec_version": SPEC_VERSION, "version": version, "expires": iso(expires),
            "keys": keys,
            "roles": {"root": {"keyids": sorted(k.keyid for k in root_keys), "threshold": 1},
                      "release": {"keyids": sorted(k.keyid for k in release_keys), "threshold": threshold}}}


def check_root(doc: Mapping[str, Any], pinned: PublicKey, now: datetime) -> Root:
    """A root.json signed by the pinned key, listing it as a root key, not expired."""
    signed = doc["signed"]
    try:
        verify(doc, {pinned.keyid: pinned}, Role((pinned.keyid,), 1), "root.json")
    except UnlistedKeyError:
        raise UnlistedKeyError(f"root.json is not signed by the pinned root key {pinned.keyid[:16]} (signed by "
                               f"{', '.join(str(s.get('keyid'))[:16] for s in doc['signatures'] if isinstance(s, dict))})"
                               ) from None
    version = _common(signed, "root", "root.json", now)
    try:
        keys = {kid: PublicKey.from_dict(k) for kid, k in signed["keys"].items()}
        roles = {name: Role(tuple(signed["roles"][name]["keyids"]), int(signed["roles"][name]["threshold"]))
                 for name in ROLES}
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise TrustError(f"root.json version {version} is malformed ({type(e).__name__}: {e})") from None
    for kid, k in keys.items():
        if k.keyid != kid:
            raise TrustError(f"root.json lists key {kid[:16]} under another key's id")
    if pinned.keyid not in roles["root"].keyids:
        raise UnlistedKeyError(f"root.json version {version} does not list the pinned root key "
                               f"{pinned.keyid[:16]} as a root key")
    if roles["release"].threshold < 1:
        raise TrustError("root.json: the release threshold must be at least 1")
    return Root(version, signed["expires"], keys, roles)


@dataclass(frozen=True)
class Index:
    version: int
    manifest_version: int
    manifest_sha256: str
    manifest_size: int
    generations: tuple[tuple[str, str, str, str], ...]


def _generations(value: object, what: str) -> tuple[tuple[str, str, str, str], ...]:
    try:
        if not isinstance(value, Iterable):
            raise TypeError(f"'{type(value).__name__}' object is not iterable")
        gens = tuple(sorted((g["arch"], g["lane"], g["family"], g["generation"]) for g in value))
    except (KeyError, TypeError) as e:
        raise TrustError(f"{what}: generations must be [{{arch, lane, family, generation}}] ({e})") from None
    if len({g for *_, g in gens}) != len(gens):
        raise MixedGenerationError(f"{what} lists one generation under two (arch, lane, family)")
    return gens


def make_index(version: int, expires: datetime, manifest_bytes: bytes, manifest: Mapping[str, Any]) -> dict[str, Any]:
    return {"_type": "index", "spec_version": SPEC_VERSION, "version": version, "expires": iso(expires),
            "manifest": {"version": manifest["version"], "sha256": hashlib.sha256(manifest_bytes).hexdigest(),
                         "size": len(manifest_bytes)},
            "generations": manifest["generations"], "kernels": len(manifest["kernels"])}


def check_index(doc: Mapping[str, Any], root: Root, now: datetime) -> Index:
    signed = verify(doc, root.keys, root.roles["release"], "index.json")
    version = _common(signed, "index", "index.json", now)
    m = signed.get("manifest")
    if not isinstance(m, dict) or not isinstance(m.get("sha256"), str) or not isinstance(m.get("size"), int) \
            or not isinstance(m.get("version"), int):
        raise TrustError(f"index.json version {version}: manifest must be {{version, sha256, size}}")
    return Index(version, m["version"], m["sha256"], m["size"], _generations(signed.get("generations"), "index.json"))


@dataclass(frozen=True)
class Manifest:
    version: int
    generations: tuple[tuple[str, str, str, str], ...]
    kernels: Mapping[str, Mapping[str, Any]]


def make_manifest(version: int, expires: datetime, generations: list[dict[str, str]],
                  kernels: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {"_type": "manifest", "spec_version": SPEC_VERSION, "version": version, "expires": iso(expires),
            "generations": sorted(generations, key=lambda g: (g["arch"], g["lane"], g["family"], g["generation"])),
            "kernels": dict(kernels)}


def check_manifest(data: bytes, index: Index, root: Root, now: datetime) -> Manifest:
    """The manifest the index names (same sha256, size and version), signed, not expired, whose
    every kernel belongs to a generation it lists for that kernel's (arch, lane, family)."""
    sha = hashlib.sha256(data).hexdigest()
    if sha != index.manifest_sha256 or len(data) != index.manifest_size:
        raise MixedGenerationError(f"manifest.json ({len(data)} bytes, sha256 {sha[:16]}) is not the one "
                                   f"index.json version {index.version} names ({index.manifest_size} bytes, "
                                   f"sha256 {index.manifest_sha256[:16]})")
    doc = loads(data, "manifest.json")
    signed = verify(doc, root.keys, root.roles["release"], "manifest.json")
    version = _common(signed, "manifest", "manifest.json", now)
    if version != index.manifest_version:
        raise MixedGenerationError(f"manifest.json is version {version}, index.json names {index.manifest_version}")
    gens = _generations(signed.get("generations"), "manifest.json")
    if gens != index.generations:
        raise MixedGenerationError("index.json and manifest.json list different generations")
    # keyed by object: a kernel's "generation" is read from JSON unchecked, and only a match counts
    listed: dict[object, tuple[str, str, str]] = {g: (a, lane, fam) for a, lane, fam, g in gens}
    kernels = signed.get("kernels")
    if not isinstance(kernels, dict):
        raise TrustError(f"manifest.json version {version}: kernels must be an object")
    for key, k in kernels.items():
        if not isinstance(k, dict):
            raise TrustError(f"manifest.json: kernel {key} is not an object")
        if listed.get(k.get("generation")) != (k.get("arch"), k.get("lane"), k.get("family")):
            raise MixedGenerationError(f"manifest.json version {version}: kernel {key} is of generation "
                                       f"{k.get('generation')!r}, which it does not list for "
                                       f"({k.get('arch')}, {k.get('lane')}, {k.get('family')})")
    return Manifest(version, gens, kernels)
