"""`rocke-aot export --kpack|--wheel --arch A`: one arch's kernels where the ROCm ecosystem looks.

A top-level command (beside `cache export`, whose bundle is this project's own format):

    --kpack  OUT/rocke_aot_<arch>.kpack        TheRock RFC0008 archive (cache/kpack.py)
             OUT/rocke_aot_<arch>.json         the rocke.aot.bundle/v1 manifest (rocKE's sidecar
                                               fields per kernel, canonical JSON)
             OUT/rocke_aot_<arch>.sig.json     {"schema": "rocke.aot.bundle-signature/v1", "keyid",
                                               "signature"}: --key's ed25519 signature over the
                                               manifest's exact bytes (trust/keys.py sign)
             OUT/rocke_aot_<arch>.root.json    --root, when given: what makes a release key's
                                               signature checkable by a host that pins the root key
    --wheel  OUT/rocke_aot_device_<arch>-<version>-py3-none-any.whl   the same four files plus
             the arch's signed TUF repository (trust/release.py -> trust/repo.py: every root
             version, --version.targets.json, the bins, the snapshot and a timestamp that expires
             with the rest, every version at least --version) under signed/, in package
             rocke_aot_device_<arch>, with the entry point [rocke_aot.device_kernels] that
             client/device_kernels.py finds (cache/wheel.py)

A host verifies a kpack it found on disk with `rocke-aot cache import --manifest M --root-key PUB`
(or client/device_kernels.py verify_signature); a device wheel through the Fetcher like a mirror:
python-tuf's Updater over the wheel's signed/ directory, pinned on the host's root key.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import click

from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_option
from rocke_aot.errors import SpecError
from rocke_aot.targets import Target

_SAFE = str.maketrans({":": "_", "+": "p", "-": "m"})


def package_name(arch: str) -> str:
    """rocke_aot_device_<arch> with a target ID's ':', '+', '-' spelled '_', 'p', 'm'."""
    name = f"rocke_aot_device_{arch.translate(_SAFE)}"
    if not re.match(r"^[a-z0-9_]+$", name):
        raise SpecError(f"arch {arch!r} makes no package name")
    return name


def signature_doc(key, data: bytes) -> bytes:
    import hashlib

    from rocke_aot.client.device_kernels import SIGNATURE_SCHEMA

    doc = {"schema": SIGNATURE_SCHEMA, "keyid": key.public.keyid, "signature": key.sign(data),
           "manifest_sha256": hashlib.sha256(data).hexdigest()}
    return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"


@click.command("export")
@click.option("--kpack", "want_kpack", is_flag=True, help="Write a kpack archive + bundle manifest (+ signature).")
@click.option("--wheel", "want_wheel", is_flag=True, help="Write a pip-installable device wheel of the arch's kernels.")
@arch_option("The target ID whose served kernels are exported, e.g. gfx942.", required=True)
@click.option("--family", "families", multiple=True, help="Only this family (repeatable; --kpack only).")
@click.option("--key", "key_path", required=True, type=click.Path(exists=True, dir_okay=False), metavar="KEY",
              help="The private key that signs: a release key (with --root) or the root key itself.")
@click.option("--root", "root_path", type=click.Path(exists=True, dir_okay=False), default=None, metavar="ROOT_JSON",
              help="The signed TUF root.json (`rocke-aot trust root`) listing --key as a release key (required for --wheel).")
@click.option("--version", "version", type=click.IntRange(min=1), default=1, show_default=True,
              help="--wheel: the wheel's version and the least version of every signed file (only grows on a host).")
@click.option("--expires-days", type=click.FloatRange(min=0.01), default=365.0, show_default=True,
              help="--wheel: days until the signed metadata expires.")
@cache_option()
@click.option("-o", "--out", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Directory to write into (created).")
@json_option
def export(want_kpack, want_wheel, arch, families, key_path, root_path, version, expires_days, cache_url, out,
           as_json) -> None:
    """Export ARCH's kernels as a kpack archive (TheRock RFC0008) with a signed rocKE bundle
    manifest, and/or as a pip-installable device wheel that hosts read before the network.

    \b
    Example:
        rocke-aot export --kpack --arch gfx942 --family gemm --key release.key --root root.json -o dist/
        rocke-aot export --wheel --arch gfx942 --key release.key --root root.json --version 3 -o dist/
        pip install dist/rocke_aot_device_gfx942-3-py3-none-any.whl
    """
    from rocke_aot.cache import kpack
    from rocke_aot.cache.store import Store
    from rocke_aot.trust.keys import load_private

    if not (want_kpack or want_wheel):
        raise SpecError("say what to export: --kpack, --wheel, or both")
    if want_wheel and root_path is None:
        raise SpecError("--wheel needs --root: a host checks the wheel's signed metadata against its pinned root key")
    if want_wheel and families:
        raise SpecError("--wheel carries every kernel the arch's signed manifest lists; --family is for --kpack")
    key = load_private(key_path)
    root_bytes = Path(root_path).read_bytes() if root_path else None
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"arch": arch.id}
    with Store.open(cache_url, readonly=True) as store:
        if want_kpack:
            kp, mp, doc, body = kpack.export(store, out, arch, families)
            stem = kpack.file_stem(arch.id)
            (out / f"{stem}.sig.json").write_bytes(signature_doc(key, body))
            if root_bytes is not None:
                (out / f"{stem}.root.json").write_bytes(root_bytes)
            report["kpack"] = {"kpack": str(kp), "manifest": str(mp), "kernels": len(doc["entries"]),
                               "kpack_bytes": doc["kpack_size"], "signed_by": key.public.keyid}
        if want_wheel:
            report["wheel"] = _wheel(store, arch, key, root_bytes, version, expires_days, out)
    if as_json:
        emit_json(report)
        return
    if "kpack" in report:
        r = report["kpack"]
        click.echo(f"wrote {r['kpack']} ({r['kernels']} kernels, {r['kpack_bytes']} bytes) and {r['manifest']}, "
                   f"signed by {r['signed_by'][:16]}")
    if "wheel" in report:
        click.echo(f"wrote {report['wheel']['wheel']} ({report['wheel']['kernels']} kernels, signed metadata "
                   f"version {version})")


def _wheel(store, target: Target, key, root_bytes: bytes | None, version: int, expires_days: float, out: Path) -> dict:
    from rocke_aot.cache import kpack, wheel
    from rocke_aot.client.device_kernels import DEVICE_SCHEMA, ENTRY_POINTS, frame_index
    from rocke_aot.trust.release import read_roots, release

    arch = target.id

    pkg = package_name(arch)
    stem = kpack.file_stem(arch)
    with tempfile.TemporaryDirectory(prefix="rocke-wheel-") as tmp_name:
        tmp = Path(tmp_name)
        assert root_bytes is not None  # --wheel requires --root (checked at the edge)
        (tmp / "root.json").write_bytes(root_bytes)
        # a wheel is frozen: its timestamp cannot be renewed, so it expires with the rest
        summary = release(store, tmp / "signed", read_roots([tmp / "root.json"]), [key], expires_days=expires_days,
                          timestamp_days=expires_days, arches=[arch], min_version=version)
        kp, mp, doc, body = kpack.export(store, tmp, target)
        if len(doc["entries"]) != summary["kernels"]:
            left = summary["left_out"]
            raise SpecError(f"{arch}: {summary['kernels']} kernels signed, {len(doc['entries'])} in the kpack"
                            + (f" ({len(left)} left out of the signature; first: {left[0]['key'][:16]} "
                               f"{left[0]['reason']})" if left else ""))
        device = {"schema": DEVICE_SCHEMA, "arch": arch, "manifest": mp.name, "kpack": kp.name,
                  "signed_version": version, "frames": frame_index(doc)}
        files = {f"{pkg}/__init__.py": f'"""Device kernels of rocke-aot for {arch} (read by rocke_aot.client)."""\n'
                                      f"ARCH = {arch!r}\n".encode(),
                 f"{pkg}/device.json": json.dumps(device, indent=2, sort_keys=True).encode() + b"\n",
                 f"{pkg}/{kp.name}": kp.read_bytes(), f"{pkg}/{mp.name}": body,
                 f"{pkg}/{stem}.sig.json": signature_doc(key, body), f"{pkg}/{stem}.root.json": root_bytes}
        for f in sorted((tmp / "signed").iterdir()):
            if f.is_file() and f.name.endswith(".json"):
                files[f"{pkg}/signed/{f.name}"] = f.read_bytes()
        path = wheel.write(out, pkg.replace("_", "-"), str(version), files,
                           entry_points={ENTRY_POINTS: {pkg: pkg}},
                           summary=f"rocke-aot device kernels for {arch} ({len(doc['entries'])} kernels)")
    return {"wheel": str(path), "package": pkg, "kernels": len(doc["entries"]), "bytes": path.stat().st_size}
