"""rocke_aot.trust: signed metadata as TUF (python-tuf), so a host trusts the builder, not a server.

    keys.py      ed25519 key files (`rocke-aot trust keygen`), pinned public keys, key ids
    repo.py      the TUF repository: root, timestamp, snapshot, targets, hashed bins of kernel
                 targets (python-tuf's Metadata API); write, verify whole, refuse the old format
    release.py   the release step: a store's served rows -> repo.write; migrate an old directory
    mirror.py    a static tree of the repository, the targets and the blobs
    metadata.py  the OLD three-document format, read only by `trust migrate`

A host pins the root public key (or the initial root.json); root.json lists the release keys
that sign timestamp, snapshot, targets and every bin. client/trusted.py is the host's side
(python-tuf's ngclient.Updater, under a lock, and what it verified).
"""
