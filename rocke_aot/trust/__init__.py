"""rocke_aot.trust: signed generations (TUF-style), so a host trusts the builder, not a server.

    keys.py      ed25519 key files (`rocke-aot trust keygen`), pinned public keys, key ids
    metadata.py  root.json / index.json / manifest.json: make, sign, verify, check (pure)
    release.py   the release step: a store's current generations -> a signed manifest + index

A host pins the root public key; root.json (signed by it) lists the release keys; the release
keys sign the index and the manifest, which binds every kernel key to its code object's sha256,
size, launch contract and provenance. client/trusted.py is the host's side (versions seen).
"""
