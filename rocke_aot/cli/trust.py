"""`rocke-aot trust keygen|root|sign|publish`: the operator's side of signed generations.

    keygen FILE                      FILE (private, 0600) + FILE.pub (what hosts pin / root lists)
    root --key ROOT --release PUB..  root.json: root key(s) + release keys, version, expiry,
                                     signed by ROOT (rotate/revoke a release key: a new version)
    sign --cache URL --root root.json --key RELEASE -o DIR
                                     the store's current generations -> DIR/manifest.json +
                                     DIR/index.json (+ root.json), trust/release.py
    publish --server URL DIR         PUT /v1/trust: the service checks every signature (against
                                     its own pinned root key) and the kernels before writing
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from rocke_aot import settings
from rocke_aot.cli.options import emit_json, json_option
from rocke_aot.errors import TrustError


@click.group("trust")
def trust() -> None:
    """Keys and signed metadata of generations (TUF-style: root -> release key -> manifest).

    \b
    Example:
        rocke-aot trust keygen root.key && rocke-aot trust keygen release.key
        rocke-aot trust root --key root.key --release release.key.pub -o root.json
        rocke-aot trust sign --cache cache.sqlite --root root.json --key release.key -o signed/
    """


@trust.command("keygen")
@click.argument("file", type=click.Path(dir_okay=False))
@json_option
def keygen(file, as_json) -> None:
    """Write a new ed25519 private key to FILE (mode 0600) and its public key to FILE.pub.

    \b
    Example:
        rocke-aot trust keygen root.key     # keep root.key offline; hosts pin root.key.pub
    """
    from rocke_aot.trust import keys

    pub = keys.generate(file)
    info = {"private": file, "public": f"{file}.pub", "keyid": pub.keyid, "pin": f"ed25519:{pub.public}"}
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{file} (private, 0600), {file}.pub (public)  keyid {pub.keyid}\n"
                   f"pin on hosts: {settings.ROOT_KEY}={file}.pub  (or ed25519:{pub.public})")


@trust.command("root")
@click.option("--key", "root_key", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The root private key that signs root.json (hosts pin its public half).")
@click.option("--release", "release", required=True, multiple=True, metavar="PUB",
              help="A release public key (.pub file or ed25519:<hex>) that may sign manifests; repeatable.")
@click.option("--threshold", default=1, show_default=True, type=click.IntRange(1, 16),
              help="How many release keys must sign index.json and manifest.json.")
@click.option("--version", "version", type=click.IntRange(1), default=None,
              help="root.json version (default: one more than the --out file's, else 1).")
@click.option("--expires-days", default=365.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="Where to write root.json.")
@json_option
def root_cmd(root_key, release, threshold, version, expires_days, out, as_json) -> None:
    """Sign a root.json that lists the root key and the release keys.

    A new version that omits a release key revokes it; one that adds a key rotates to it. Hosts
    keep their pinned root key and pick the new root.json up with the next metadata.

    \b
    Example:
        rocke-aot trust root --key root.key --release release2.key.pub -o signed/root.json
    """
    from rocke_aot.paths import atomic_write
    from rocke_aot.trust import keys
    from rocke_aot.trust import metadata as md

    rk = keys.load_private(root_key)
    rel = [keys.public_key(r) for r in release]
    if threshold > len(rel):
        raise TrustError(f"--threshold {threshold} with {len(rel)} release key(s): nothing could ever be signed")
    if version is None:
        try:
            version = int(json.loads(Path(out).read_text())["signed"]["version"]) + 1
        except FileNotFoundError:
            version = 1
        except (ValueError, KeyError, TypeError) as e:
            raise TrustError(f"{out} is not a root.json ({e}); give --version") from None
    expires = datetime.now(timezone.utc) + timedelta(days=expires_days)
    doc = md.sign(md.make_root(version, expires, [rk.public], rel, threshold), [rk])
    atomic_write(Path(out), md.dumps(doc))
    info = {"out": out, "version": version, "expires": doc["signed"]["expires"], "root_keyid": rk.public.keyid,
            "release_keyids": [k.keyid for k in rel], "threshold": threshold}
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{out}: root version {version}, {len(rel)} release key(s), threshold {threshold}, "
                   f"expires {info['expires']}")


@trust.command("sign")
@click.option("--cache", "cache_url", metavar="URL", default=None, help="The store (default: $ROCKE_AOT_CACHE).")
@click.option("--root", "root_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="root.json (from `rocke-aot trust root`), copied into DIR.")
@click.option("--key", "key_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="A release private key root.json lists.")
@click.option("--arch", "arches", multiple=True, help="Only these arches (repeatable; default: every one).")
@click.option("--lane", "lanes", multiple=True, help="Only these lanes (repeatable; default: every one).")
@click.option("--version", "version", type=click.IntRange(1), default=None,
              help="Manifest version (default: one more than DIR's index.json, else 1).")
@click.option("--expires-days", default=30.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False), help="Directory of the metadata.")
@json_option
def sign_cmd(cache_url, root_file, key_file, arches, lanes, version, expires_days, out, as_json) -> None:
    """Sign the store's current generations: DIR/manifest.json, DIR/index.json and DIR/root.json.

    \b
    Example:
        rocke-aot trust sign --cache cache.sqlite --root root.json --key release.key --arch gfx942 -o signed/
    """
    from rocke_aot.cache.store import Store
    from rocke_aot.trust import keys
    from rocke_aot.trust.release import release

    try:
        root_doc = json.loads(Path(root_file).read_text())
    except ValueError as e:
        raise TrustError(f"{root_file} is not JSON ({e})") from None
    with Store.open(cache_url, readonly=True) as store:
        info = release(store, out, root_doc, keys.load_private(key_file), version=version,
                       expires_days=expires_days, arches=arches, lanes=lanes)
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{out}: manifest version {info['version']}, {info['kernels']} kernels of "
                   f"{len(info['generations'])} generation(s), expires {info['expires']}")
        for x in info["left_out"][:20]:  # rows no build here made or verified, or a contract off its family's
            click.echo(f"left out {x['key'][:16]} {x['family']}/{x['arch']}/{x['lane']} ({x['entered']}): {x['reason']}")
        if len(info["left_out"]) > 20:
            click.echo(f"left out {len(info['left_out']) - 20} more (--json lists every one)")


@trust.command("publish")
@click.option("--server", required=True, metavar="URL", help="Service base URL.")
@click.option("--token", default=None, envvar=settings.TOKEN, help=f"Publish token (or ${settings.TOKEN}).")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@json_option
def publish_cmd(server, token, directory, as_json) -> None:
    """Publish DIRECTORY's signed metadata to a service (it checks the signatures first).

    \b
    Example:
        ROCKE_AOT_TOKEN=... rocke-aot trust publish --server http://127.0.0.1:8080 signed/
    """
    from rocke_aot.service.client import Client

    docs = {name: (Path(directory) / f"{name}.json").read_text() for name in ("root", "index", "manifest")}
    with Client(server, token=token, offline=False) as client:
        out = client.publish_generation(**docs)
    if as_json:
        emit_json(out)
    else:
        click.echo(f"published manifest version {out['version']} ({out['kernels']} kernels) to {server}")
