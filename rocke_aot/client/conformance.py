"""The host client as tuf-conformance's client-under-test (its CLIENT-CLI.md protocol).

    python -m rocke_aot.client.conformance --metadata-dir D init ROOT
    python -m rocke_aot.client.conformance --metadata-dir D --metadata-url URL refresh
    python -m rocke_aot.client.conformance --metadata-dir D --metadata-url URL \\
        --target-name P [--target-name P2 ...] --target-base-url TURL --target-dir T download

The same verification path every kernel fetch takes: client/trusted.py's Trusted (python-tuf's
ngclient.Updater under the host's lock, fed by the project's bounded Wire through a MirrorSource;
a target in a succinct hashed bin is looked up by the host's own bin step, verified_bin, as
`rocke-aot fetch` looks it up, any other delegation by ngclient's walk),
with D as its metadata directory; a target's bytes come through the same Wire, bounded by the
signed length and checked against every signed hash before they are written. Exit 0 on
success, 1 on any failure (the suite reads only that, D, T and the requests it served).
bench/tuf_conformance.sh runs the suite against it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from urllib.parse import quote


def _source(url: str):
    from rocke_aot.client.sources import MirrorSource

    class MetadataSource(MirrorSource):  # the metadata URL as given (a mirror keeps it under /metadata/)
        def _metadata_path(self, name: str) -> str:
            return f"/{name}"

    return MetadataSource(url, retries=0)


def _trusted(metadata_dir: str):
    from rocke_aot.client.trusted import Trusted

    return Trusted((Path(metadata_dir) / "root.json").read_bytes(), None, metadata_dir=metadata_dir)


def refresh(metadata_dir: str, metadata_url: str):
    src = _source(metadata_url)
    return _trusted(metadata_dir).refresh(src), src


def download(metadata_dir: str, metadata_url: str, names: list[str], base: str, target_dir: str) -> None:
    from rocke_aot.client.sources import MirrorSource
    from rocke_aot.errors import NotInManifestError
    from rocke_aot.paths import atomic_write

    acc, _ = refresh(metadata_dir, metadata_url)
    targets = MirrorSource(base, retries=0)
    consistent = acc.updater._trusted_set.root.consistent_snapshot  # noqa: SLF001 - read only
    for name in names:
        tf = acc.targetinfo(name)  # the host's own step: its bin verified as a fetch verifies it, else ngclient's walk
        if tf is None:
            raise NotInManifestError(f"{name} is not a target of the signed metadata")
        path = Path(target_dir) / quote(tf.path, "")
        if path.is_file():
            try:
                tf.verify_length_and_hashes(path.read_bytes())
                continue  # already downloaded, the signed bytes
            except Exception:  # noqa: BLE001 - LengthOrHashMismatchError: download again
                pass
        rel = tf.path
        if consistent:
            d, sep, b = rel.rpartition("/")
            rel = f"{d}{sep}{next(iter(tf.hashes.values()))}.{b}"
        body, _ = targets.get("/" + quote(rel), tf.length)
        tf.verify_length_and_hashes(body)
        atomic_write(path, body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="rocke-aot-conformance", description=__doc__.splitlines()[0])
    ap.add_argument("--metadata-url")
    ap.add_argument("--metadata-dir", required=True)
    ap.add_argument("--target-name", action="append", default=[])
    ap.add_argument("--target-dir")
    ap.add_argument("--target-base-url")
    ap.add_argument("-v", "--verbose", action="count", default=0)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("init").add_argument("trusted_root")
    sub.add_parser("refresh")
    sub.add_parser("download")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "init":
            shutil.copyfile(a.trusted_root, Path(a.metadata_dir) / "root.json")
        elif a.cmd == "refresh":
            refresh(a.metadata_dir, a.metadata_url)
        else:
            download(a.metadata_dir, a.metadata_url, a.target_name, a.target_base_url, a.target_dir)
    except Exception as e:  # noqa: BLE001 - the protocol: any failure is exit 1, named on stderr
        print(f"rocke-aot conformance client: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
