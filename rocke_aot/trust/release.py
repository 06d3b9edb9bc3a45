"""The release step: sign what a store serves.

    trust/signable.py signable_rows: the served rows a release may sign (built or verified here, the
        launch contract the family's), page by page (filters: arches, lanes); the rest left out
        -> manifest kernels {key: {key inputs, sha256, size, ir_sha256, metadata, provenance,
                                   generation}}, generations [{arch, lane, family, generation}]
    -> a TUF repository in OUT (trust/repo.py): every root version, the kernels as targets in
       hashed bins, targets, snapshot, then timestamp.json last; a bin whose kernels did not
       change keeps its file and version

Versions only grow (one more than OUT's timestamp), which is what a host's rollback check expects.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rocke_aot.cache.generations import generation_of
from rocke_aot.cache.keys import inputs_dict, thaw
from rocke_aot.cache.store import Store
from rocke_aot.errors import SpecError, TrustError
from rocke_aot.trust.keys import PrivateKey
from rocke_aot.trust.signable import signable_rows


def current_kernels(store: Store, arches: Iterable[str] = (), lanes: Iterable[str] = (),
                    left_out: list | None = None) -> tuple[list[dict[str, str]], dict[str, dict[str, Any]]]:
    """(generations, kernels): every row the store serves (what select serves) of the selected
    arches and lanes that trust/signable.py lets a release sign (built or verified here, its
    launch contract the family's), and the generations those rows belong to (several generations
    of one family serve side by side while a new one takes over spec by spec:
    cache/generations.py). ``left_out`` (a list) receives every served row left out, with why."""
    gens: dict[str, dict[str, str]] = {}
    kernels: dict[str, dict[str, Any]] = {}
    rows, left = signable_rows(store, arches, lanes)
    if left_out is not None:
        left_out.extend(left)
    for a in rows:
        gen = generation_of(a.inputs)
        gens[gen] = {"arch": a.arch, "lane": a.lane, "family": a.family, "generation": gen}
        kernels[a.key] = {**inputs_dict(a), "sha256": a.sha256, "size": a.size, "ir_sha256": a.ir_sha256,
                          "metadata": thaw(a.metadata), "provenance": thaw(a.provenance), "generation": gen}
    if not kernels:
        raise SpecError("the store serves no signable kernel of the selected arches and lanes: nothing to sign"
                        + (f" ({len(left)} left out; first: {left[0].key[:16]} {left[0].reason})" if left else ""))
    return list(gens.values()), kernels


def read_roots(files: Iterable[str | Path], out: Path | None = None) -> dict[int, bytes]:
    """{version: bytes} of the given root.json files, with the versions ``out`` already holds."""
    from rocke_aot.trust.repo import load_root, root_files

    roots: dict[int, bytes] = {}
    if out is not None and out.is_dir():
        roots.update({v: p.read_bytes() for v, p in root_files(out).items()})
    for f in files:
        data = Path(f).read_bytes()
        v = load_root(data, str(f)).signed.version
        if roots.get(v, data) != data:
            raise TrustError(f"{f} is root version {v}, and {out} already holds another version {v}")
        roots[v] = data
    return roots


def release(store: Store, out: str | Path, roots: dict[int, bytes], keys: list[PrivateKey], *,
            expires_days: float = 30.0, timestamp_days: float = 1.0, arches: Iterable[str] = (),
            lanes: Iterable[str] = (), now: datetime | None = None, bit_length: int | None = None,
            min_version: int = 1) -> dict[str, Any]:
    """Sign what ``store`` serves of the selected arches and lanes and trust/signable.py lets a
    release sign into ``out`` (a TUF repository, trust/repo.py); returns a summary whose
    ``left_out`` names every served row not signed, with why."""
    from rocke_aot.trust import repo

    left: list = []
    gens, kernels = current_kernels(store, arches, lanes, left)
    info = repo.write(out, roots, kernels, keys, now=now or datetime.now(timezone.utc), expires_days=expires_days,
                      timestamp_days=timestamp_days, bit_length=bit_length, min_version=min_version)
    return {**info, "generations": gens, "left_out": [x.as_dict() for x in left]}


def migrate(directory: Path, root_key: PrivateKey, keys: list[PrivateKey], *, expires_days: float = 30.0,
            timestamp_days: float = 1.0, now: datetime | None = None) -> dict[str, Any]:
    """A directory of the old format (root.json, index.json, manifest.json, checked against
    ``root_key`` first) -> a TUF repository of the same kernels; the old files go to legacy/."""
    from datetime import timedelta

    from rocke_aot.trust import metadata as old
    from rocke_aot.trust import repo

    now = now or datetime.now(timezone.utc)
    docs = {}
    for name in ("root.json", "index.json", "manifest.json"):
        try:
            docs[name] = (directory / name).read_bytes()
        except FileNotFoundError:
            raise TrustError(f"{directory} lacks {name}: not a directory of the old format") from None
    r = old.check_root(old.loads(docs["root.json"], "root.json"), root_key.public, now)
    ix = old.check_index(old.loads(docs["index.json"], "index.json"), r, now)
    m = old.check_manifest(docs["manifest.json"], ix, r, now)
    release_pubs = [k.public for k in keys]
    listed = set(r.roles["release"].keyids)
    if not {k.keyid for k in release_pubs} <= listed:
        raise TrustError("a --key is not a release key of the old root.json: give the keys it lists")
    root = repo.make_root(1, now + timedelta(days=365), [root_key.public], release_pubs,
                          threshold=r.roles["release"].threshold)
    root.sign(root_key.signer())
    legacy = directory / "legacy"
    legacy.mkdir(exist_ok=True)
    for name in docs:
        (directory / name).rename(legacy / name)
    info = repo.write(directory, {1: repo.dump_metadata(root)}, m.kernels, keys, now=now, expires_days=expires_days,
                      timestamp_days=timestamp_days)
    return {**info, "legacy": str(legacy)}
