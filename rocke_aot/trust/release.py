"""The release step: sign what a store serves.

    trust/signable.py signable_rows: the served rows a release may sign (built or verified here, the
        launch contract the family's), page by page (filters: arches, lanes); the rest left out
        -> manifest kernels {key: {key inputs, sha256, size, ir_sha256, metadata, provenance,
                                   generation}}, generations [{arch, lane, family, generation}]
    manifest.json  signed by the release key, version V
    index.json     signed by the release key, version V, naming manifest.json's sha256 and size
    written to OUT: root.json (copied, checked first), manifest.json, then index.json, each by
    rename, so a reader of OUT never sees an index naming a manifest that is not there yet

V defaults to one more than the index already in OUT (1 for a new directory): versions only
grow, which is what a host's rollback check expects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from rocke_aot.cache.generations import generation_of
from rocke_aot.cache.keys import inputs_dict, thaw
from rocke_aot.cache.store import Store
from rocke_aot.errors import SpecError, TrustError
from rocke_aot.paths import atomic_write
from rocke_aot.trust import metadata as md
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


def next_version(out: Path) -> int:
    try:
        return int(json.loads((out / "index.json").read_text())["signed"]["version"]) + 1
    except FileNotFoundError:
        return 1
    except (ValueError, KeyError, TypeError) as e:
        raise TrustError(f"{out / 'index.json'} is not an index ({e}); give --version") from None


def release(store: Store, out: str | Path, root_doc: dict[str, Any], key: PrivateKey, *, version: int | None = None,
            expires_days: float = 30.0, arches: Iterable[str] = (), lanes: Iterable[str] = (),
            now: datetime | None = None) -> dict[str, Any]:
    """Sign what ``store`` serves of the selected arches and lanes into ``out``; returns a summary."""
    out = Path(out)
    now = now or datetime.now(timezone.utc)
    keyid = key.public.keyid
    roles = root_doc.get("signed", {}).get("roles", {}) if isinstance(root_doc, dict) else {}
    if keyid not in roles.get("release", {}).get("keyids", ()):
        raise TrustError(f"root.json does not list key {keyid[:16]} as a release key: hosts would refuse "
                         "what it signs (sign a new root.json that lists it first)")
    version = next_version(out) if version is None else version
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SpecError(f"version must be a positive int, got {version!r}")
    expires = now + timedelta(days=expires_days)
    left: list = []
    gens, kernels = current_kernels(store, arches, lanes, left)
    manifest = md.make_manifest(version, expires, gens, kernels)
    manifest_bytes = md.dumps(md.sign(manifest, [key]))
    index_bytes = md.dumps(md.sign(md.make_index(version, expires, manifest_bytes, manifest), [key]))
    atomic_write(out / "root.json", md.dumps(root_doc))
    atomic_write(out / "manifest.json", manifest_bytes)
    atomic_write(out / "index.json", index_bytes)
    return {"version": version, "expires": md.iso(expires), "generations": gens, "kernels": len(kernels),
            "manifest_bytes": len(manifest_bytes), "index_bytes": len(index_bytes), "out": str(out),
            "left_out": [x.as_dict() for x in left]}
