"""Ed25519 keys as files the operator keeps (the `cryptography` library's implementation).

    generate(path)      path      the private key, PKCS#8 PEM, mode 0600 (never leaves the signer)
                        path.pub  {"keytype": "ed25519", "public": "<64 hex>"}: what hosts pin
    keyid(public)       sha256 of the 32 raw public-key bytes (hex): how metadata names a key
    public_key(value)   a .pub file's path, or "ed25519:<64 hex>" inline (an env var, a setting)

A root key signs root.json, which lists the release keys (and itself); a release key signs
timestamp, snapshot, targets and the bins (trust/repo.py). Hosts pin only the root public key,
so a release key can be rotated or revoked by a new root.json without touching any host.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocke_aot.errors import TrustConfigError

if TYPE_CHECKING:  # imported where used: a warm host that verifies nothing never loads cryptography
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

KEYTYPE = "ed25519"
_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class PublicKey:
    """An ed25519 public key: its 32 raw bytes as hex, and its key id."""

    public: str

    def __post_init__(self) -> None:
        if not isinstance(self.public, str) or len(self.public) != 64 or not set(self.public) <= _HEX:
            raise TrustConfigError(f"an ed25519 public key is 64 lowercase hex digits, got {self.public!r}")

    @property
    def keyid(self) -> str:
        return hashlib.sha256(bytes.fromhex(self.public)).hexdigest()

    def as_dict(self) -> dict[str, str]:
        return {"keytype": KEYTYPE, "public": self.public}

    def as_pin(self) -> str:
        """The inline form configuration takes: "ed25519:<hex>"."""
        return f"{KEYTYPE}:{self.public}"

    def verify(self, signature_hex: str, data: bytes) -> bool:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            sig = bytes.fromhex(signature_hex)
        except (TypeError, ValueError):
            return False
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(self.public)).verify(sig, data)
        except InvalidSignature:
            return False
        return True

    def tuf_key(self):
        """This key as python-tuf's Key (securesystemslib SSlibKey; TUF's key id: the sha256 of
        the key's canonical JSON, which is not ``keyid`` above)."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from securesystemslib.signer import SSlibKey

        return SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(bytes.fromhex(self.public)))

    @classmethod
    def from_dict(cls, d: object) -> PublicKey:
        if not isinstance(d, dict) or d.get("keytype") != KEYTYPE or not isinstance(d.get("public"), str):
            raise TrustConfigError(f"a public key is {{'keytype': 'ed25519', 'public': hex}}, got {d!r}")
        return cls(d["public"])


@dataclass(frozen=True)
class PrivateKey:
    """An ed25519 private key loaded from its file (repr shows only the key id)."""

    _key: Ed25519PrivateKey

    def __repr__(self) -> str:
        return f"PrivateKey(keyid={self.public.keyid[:16]}...)"

    @property
    def public(self) -> PublicKey:
        from cryptography.hazmat.primitives import serialization

        raw = self._key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return PublicKey(raw.hex())

    def sign(self, data: bytes) -> str:
        return self._key.sign(data).hex()

    def signer(self):
        """A securesystemslib Signer of this key (what python-tuf's Metadata.sign takes)."""
        from securesystemslib.signer import CryptoSigner

        return CryptoSigner(self._key, self.public.tuf_key())


def generate(path: str | os.PathLike) -> PublicKey:
    """Write a new private key to ``path`` (0600, refused if it exists) and its public half to
    ``path.pub``; returns the public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise TrustConfigError(f"{path} exists; a key file is never overwritten") from None
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub = PrivateKey(key).public
    Path(f"{path}.pub").write_text(json.dumps(pub.as_dict(), indent=2) + "\n")
    return pub


def load_private(path: str | os.PathLike) -> PrivateKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise TrustConfigError(f"cannot read the private key {path} ({e.strerror})") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as e:
        raise TrustConfigError(f"{path} is not an unencrypted PEM private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise TrustConfigError(f"{path} holds a {type(key).__name__}, not an ed25519 key")
    return PrivateKey(key)


def public_key(value: str | os.PathLike | PublicKey) -> PublicKey:
    """A pinned key from configuration: "ed25519:<hex>", or the path of a .pub file."""
    if isinstance(value, PublicKey):
        return value
    text = os.fspath(value)
    if text.startswith(f"{KEYTYPE}:"):
        return PublicKey(text[len(KEYTYPE) + 1:])
    try:
        doc = json.loads(Path(text).read_text())
    except OSError as e:
        raise TrustConfigError(f"cannot read the public key {text} ({e.strerror})") from None
    except ValueError as e:
        raise TrustConfigError(f"{text} is not a public key file (JSON: {e})") from None
    return PublicKey.from_dict(doc)
