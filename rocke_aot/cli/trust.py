"""`rocke-aot trust keygen|root|sign|timestamp|migrate|publish`: the operator's side of signed metadata.

The signed metadata is a TUF repository (trust/repo.py, written with python-tuf's Metadata API):

    keygen FILE                      FILE (private, 0600) + FILE.pub; hosts pin the ROOT key's .pub
    root --key ROOT --release PUB..  a TUF root.json: root key(s), release keys for the timestamp,
                                     snapshot, targets and bin roles; a new version rotates or
                                     revokes (signed by the old root keys too: --also-sign)
    sign --cache URL --root root.json --key RELEASE -o DIR
                                     the store's current generations -> DIR, a TUF repository
                                     (kernels as targets in hashed bins, consistent snapshots)
    timestamp --key RELEASE DIR      a new short-lived timestamp.json (a cron job's step)
    migrate DIR --root-key ROOT --key RELEASE
                                     a directory of the old format (root, index, manifest) -> TUF
    publish --server URL DIR         PUT /v1/trust/<file>, one file per request (streamed), the
                                     timestamp last: the service checks the whole repository first
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import click

from rocke_aot import settings
from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_option, lanes_option
from rocke_aot.errors import TrustError


@click.group("trust")
def trust() -> None:
    """Keys and signed metadata of generations (TUF, through python-tuf: root -> release keys -> bins).

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
        rocke-aot trust keygen root.key      # keep root.key offline; hosts pin root.key.pub
        rocke-aot trust keygen release.key   # listed by root.json (trust root --release), not pinned
    """
    from rocke_aot.trust import keys

    pub = keys.generate(file)
    info = {"private": file, "public": f"{file}.pub", "keyid": pub.keyid, "pin": f"ed25519:{pub.public}"}
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{file} (private, 0600), {file}.pub (public)  keyid {pub.keyid}\n"
                   f"hosts pin the ROOT key only: {settings.ROOT_KEY}=<root key>.pub (or its ed25519:<hex>), or the "
                   "initial root.json; if this is the root key: "
                   f"{settings.ROOT_KEY}={file}.pub; a release key is listed by `rocke-aot trust root --release "
                   f"{file}.pub`, never pinned")


@trust.command("root")
@click.option("--key", "root_keys", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A root private key: listed as a root key and signing root.json (hosts pin its public half); "
                   "repeatable.")
@click.option("--also-sign", "also_sign", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="An old root private key that signs this version without being listed (root key rotation: "
                   "a host walks from the old root to the new one).")
@click.option("--release", "release", required=True, multiple=True, metavar="PUB",
              help="A release public key (.pub file or ed25519:<hex>) for timestamp, snapshot, targets and bins; "
                   "repeatable.")
@click.option("--threshold", default=1, show_default=True, type=click.IntRange(1, 16),
              help="How many release keys must sign each release role.")
@click.option("--version", "version", type=click.IntRange(1), default=None,
              help="root.json version (default: one more than the --out file's, else 1).")
@click.option("--expires-days", default=365.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False), help="Where to write root.json.")
@json_option
def root_cmd(root_keys, also_sign, release, threshold, version, expires_days, out, as_json) -> None:
    """Sign a TUF root.json that lists the root keys and the release keys.

    A new version that omits a release key revokes it; one that adds a key rotates to it. Give
    every version to `trust sign --root` (hosts walk the chain from version 1 and keep their pin).

    \b
    Example:
        rocke-aot trust root --key root.key --release release2.key.pub -o root.json   # version 2
    """
    from rocke_aot.paths import atomic_write
    from rocke_aot.trust import keys, repo

    rks = [keys.load_private(k) for k in root_keys]
    rel = [keys.public_key(r) for r in release]
    if threshold > len(rel):
        raise TrustError(f"--threshold {threshold} with {len(rel)} release key(s): nothing could ever be signed")
    if version is None:
        try:
            version = repo.load_root(Path(out).read_bytes(), out).signed.version + 1
        except FileNotFoundError:
            version = 1
    expires = datetime.now(timezone.utc) + timedelta(days=expires_days)
    md = repo.make_root(version, expires, [k.public for k in rks], rel, threshold)
    for k in [*rks, *(keys.load_private(a) for a in also_sign)]:
        md.sign(k.signer(), append=True)
    atomic_write(Path(out), repo.dump_metadata(md))
    info = {"out": out, "version": version, "expires": md.signed.expires.isoformat(),
            "root_keyids": [k.public.keyid for k in rks], "release_keyids": [k.keyid for k in rel],
            "threshold": threshold}
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{out}: root version {version}, {len(rel)} release key(s), threshold {threshold}, "
                   f"expires {info['expires']}")


@trust.command("sign")
@cache_option("The store (default: $ROCKE_AOT_CACHE).")
@click.option("--root", "root_files", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="root.json (from `rocke-aot trust root`); repeatable: every version DIR does not hold yet.")
@click.option("--key", "key_files", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A release private key root.json lists (repeatable, up to its threshold).")
@arch_option("Only these arches (repeatable; default: every one).", multiple=True)
@lanes_option(help="Only these lanes (repeatable; default: every one).")
@click.option("--bins", "bit_length", type=click.IntRange(1, 16), default=None,
              help="2**N hashed bins (default: kept from DIR, else about 64 kernels a bin).")
@click.option("--expires-days", default=30.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Expiry of snapshot, targets and bins.")
@click.option("--timestamp-days", default=1.0, show_default=True, type=click.FloatRange(0, min_open=True),
              help="Expiry of timestamp.json: a fresh host accepts nothing older (re-sign with `trust timestamp`).")
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False), help="The repository directory.")
@json_option
def sign_cmd(cache_url, root_files, key_files, arches, lanes, bit_length, expires_days, timestamp_days, out,
             as_json) -> None:
    """Sign the store's current generations into DIR, a TUF repository (trust/repo.py).

    \b
    Example:
        rocke-aot trust sign --cache cache.sqlite --root root.json --key release.key --arch gfx942 -o signed/
    """
    from rocke_aot.cache.store import Store
    from rocke_aot.trust import keys
    from rocke_aot.trust.release import read_roots, release

    roots = read_roots(root_files, Path(out))
    with Store.open(cache_url, readonly=True) as store:
        info = release(store, out, roots, [keys.load_private(k) for k in key_files], expires_days=expires_days,
                       timestamp_days=timestamp_days, arches=[t.id for t in arches],
                       lanes=[lane.name for lane in lanes], bit_length=bit_length)
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{out}: timestamp version {info['version']}, {info['kernels']} kernels of "
                   f"{len(info['generations'])} generation(s) in {info['bins']} bins ({info['bins_written']} signed, "
                   f"{info['bins_kept']} unchanged), timestamp expires {info['expires']}")
        for x in info["left_out"][:20]:  # rows no build here made or verified, or a contract off its family's
            click.echo(f"left out {x['key'][:16]} {x['family']}/{x['arch']}/{x['lane']} ({x['entered']}): {x['reason']}")
        if len(info["left_out"]) > 20:
            click.echo(f"left out {len(info['left_out']) - 20} more (--json lists every one)")


@trust.command("timestamp")
@click.option("--key", "key_files", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A release private key (repeatable, up to the threshold).")
@click.option("--timestamp-days", default=1.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@json_option
def timestamp_cmd(key_files, timestamp_days, directory, as_json) -> None:
    """Sign a new timestamp.json over DIRECTORY's current snapshot (run it well within the expiry).

    \b
    Example:
        rocke-aot trust timestamp --key release.key signed/    # e.g. hourly from cron
    """
    from rocke_aot.trust import keys, repo

    info = repo.timestamp(directory, [keys.load_private(k) for k in key_files], timestamp_days=timestamp_days)
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{directory}: timestamp version {info['version']}, expires {info['expires']}")


@trust.command("migrate")
@click.option("--root-key", "root_key", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The root private key the old root.json is signed by (hosts keep pinning its .pub).")
@click.option("--key", "key_files", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A release private key the old root.json lists (repeatable).")
@click.option("--expires-days", default=30.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.option("--timestamp-days", default=1.0, show_default=True, type=click.FloatRange(0, min_open=True))
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@json_option
def migrate_cmd(root_key, key_files, expires_days, timestamp_days, directory, as_json) -> None:
    """Turn a directory of the old signed format (root.json, index.json, manifest.json) into TUF.

    The old documents are checked against the root key first, moved to DIRECTORY/legacy/, and
    their kernels signed again as TUF targets (root.json version 1 of the new format).

    \b
    Example:
        rocke-aot trust migrate --root-key root.key --key release.key signed/
    """
    from rocke_aot.trust import keys
    from rocke_aot.trust.release import migrate

    info = migrate(Path(directory), keys.load_private(root_key), [keys.load_private(k) for k in key_files],
                   expires_days=expires_days, timestamp_days=timestamp_days)
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{directory}: {info['kernels']} kernels migrated to TUF (timestamp version {info['version']}); "
                   f"the old files are in {info['legacy']}")


@trust.command("publish")
@click.option("--server", required=True, metavar="URL", help="Service base URL.")
@click.option("--token", default=None, envvar=settings.TOKEN, help=f"Publish token (or ${settings.TOKEN}).")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@json_option
def publish_cmd(server, token, directory, as_json) -> None:
    """Publish DIRECTORY's TUF repository to a service, one file per request, timestamp.json last.

    \b
    Example:
        ROCKE_AOT_TOKEN=... rocke-aot trust publish --server http://127.0.0.1:8080 signed/
    """
    from rocke_aot.client.sources import JSON_HEADERS, MAX_RECORD, ServiceSource, document
    from rocke_aot.errors import Unauthorized
    from rocke_aot.trust import repo

    if not token:
        raise Unauthorized(f"publishing needs a token (--token or ${settings.TOKEN})")
    d = Path(directory)
    verified = repo.verify(d, (d / "1.root.json").read_bytes() if (d / "1.root.json").is_file() else b"")
    src = ServiceSource(server)
    sent = 0
    try:
        for name in verified.files:  # the versioned files, then timestamp.json
            ans = src.call("PUT", f"/v1/trust/{name}", MAX_RECORD,
                           headers={**JSON_HEADERS, "Content-Type": "application/json",
                                    "Authorization": f"Bearer {token}"}, json_body=(d / name).read_bytes())
            out = document(ans, f"the answer to publishing {name}")
            sent += bool(out.get("written"))
    finally:
        src.close()
    out = {**out, "files": len(verified.files), "files_written": sent}
    if as_json:
        emit_json(out)
    else:
        click.echo(f"published timestamp version {out.get('version')} ({out.get('kernels')} kernels; "
                   f"{sent} of {len(verified.files)} files new) to {server}")
