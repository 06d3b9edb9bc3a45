"""One signed world for the TUF and mirror tests (tests/test_tuf.py, tests/test_mirror.py): both
made the same keys, releases and exported tree from the same build, once per module each.

    signed_world (session fixture, conftest.py) -> {"d", "k", "store", "pin", "info", "export"}
        d/root.key, release.key, evil.key (+ .pub)   keys.generate
        d/built.sqlite     a copy of kernel_bundle's build (tests/_service.py: built_store), open as "store"
        d/root.json        root version 1 (root key; the release key signs every other role)
        d/signed1          the first release (timestamp version 1), copied before the second
        d/signed           the second release into the same folder (version 2; its answer: "info")
        d/expired          a release made three days ago (its timestamp expired)
        d/evil             a release under another root key (evil's own)
        d/tree             `rocke-aot mirror export` of the store and d/signed, pinned to
                           root.key.pub (its --json answer: "export")

The tests read it and copy what they change (a tree per test, tests/_nginx.py's served_dir).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
from _service import EXE, built_store

from rocke_aot.trust import keys, repo
from rocke_aot.trust.release import release


def root_bytes(k, release_pub, version=1, days=365) -> bytes:
    md = repo.make_root(version, datetime.now(timezone.utc) + timedelta(days=days), [k.public], [release_pub])
    md.sign(k.signer())
    return repo.dump_metadata(md)


def make_keys(d) -> dict:
    """d/root.key, d/release.key, d/evil.key (and their .pub), loaded: {"root": ..., ...}."""
    for name in ("root", "release", "evil"):
        keys.generate(d / f"{name}.key")
    return {n: keys.load_private(d / f"{n}.key") for n in ("root", "release", "evil")}


@pytest.fixture(scope="session")
def signed_world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("signed")
    k = make_keys(d)
    store = built_store(d / "built.sqlite", kernel_bundle)
    roots = {1: root_bytes(k["root"], k["release"].public)}
    (d / "root.json").write_bytes(roots[1])
    release(store, d / "signed", roots, [k["release"]])
    shutil.copytree(d / "signed", d / "signed1")  # timestamp version 1
    info = release(store, d / "signed", roots, [k["release"]])  # version 2
    release(store, d / "expired", roots, [k["release"]], now=datetime.now(timezone.utc) - timedelta(days=3))
    release(store, d / "evil", {1: root_bytes(k["evil"], k["evil"].public)}, [k["evil"]])
    p = subprocess.run([EXE, "mirror", "export", "--cache", str(d / "built.sqlite"), "--signed", str(d / "signed"),
                        "--root-key", str(d / "root.key.pub"), "-o", str(d / "tree"), "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    yield {"d": d, "k": k, "store": store, "pin": str(d / "root.key.pub"), "info": info,
           "export": json.loads(p.stdout)}
    store.close()
