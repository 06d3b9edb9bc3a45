"""`rocke-aot mirror export|sync`: a signed generation as a static tree (trust/mirror.py).

    export --cache URL --signed DIR -o TREE   TREE/metadata/ (the TUF repository) + targets/ + blobs/<sha256>.zst
                                              + triton/<key>.json (each listed Triton build's cache entry)
    sync   --cache URL --signed DIR TREE      the same, writing only the blobs TREE lacks
    --root-key PUB   check DIR from this root key (else from its own 1.root.json) before writing anything
"""

from __future__ import annotations

import click

from rocke_aot.cli.options import cache_option, emit_json, json_option

_cache = cache_option("The store holding the blobs (default: $ROCKE_AOT_CACHE).")
_signed = click.option("--signed", "signed_dir", required=True, type=click.Path(exists=True, file_okay=False),
                       help="The signed metadata (`rocke-aot trust sign -o DIR`).")
_root_key = click.option("--root-key", default=None, metavar="PUB",
                         help="Check DIR against this root public key first (.pub file or ed25519:<hex>).")


@click.group("mirror")
def mirror() -> None:
    """Static mirrors of signed generations for any HTTP server, object store or CDN.

    \b
    Example:
        rocke-aot mirror export --cache cache.sqlite --signed signed/ -o /srv/www/rocke
        rocke-aot mirror sync --cache cache.sqlite --signed signed/ /srv/www/rocke
    """


def _pin(root_key: str | None):
    if root_key is None:
        return None
    from rocke_aot.trust import keys

    return keys.public_key(root_key)


def _report(rep, as_json: bool) -> None:
    if as_json:
        emit_json(rep.as_dict())
    else:
        click.echo(f"{rep.tree}: timestamp version {rep.version}, {rep.kernels} blobs listed; "
                   f"{rep.blobs_written} written ({rep.bytes_written} bytes), {rep.blobs_kept} kept, "
                   f"{rep.blobs_pruned} pruned; {rep.triton_entries} Triton cache entries"
                   + (f" ({len(rep.triton_missing)} listed Triton builds have no entry in the store: hosts compile "
                      f"them)" if rep.triton_missing else ""))


@mirror.command("export")
@_cache
@_signed
@_root_key
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False), help="The tree to write.")
@json_option
def export_cmd(cache_url, signed_dir, root_key, out, as_json) -> None:
    """Write a signed generation and every blob it lists as a static tree.

    \b
    Example:
        rocke-aot mirror export --cache cache.sqlite --signed signed/ --root-key root.key.pub -o /srv/www/rocke
    """
    from rocke_aot.cache.store import Store
    from rocke_aot.trust import mirror as m

    with Store.open(cache_url, readonly=True) as store:
        _report(m.export(store, signed_dir, out, pin=_pin(root_key)), as_json)


@mirror.command("sync")
@_cache
@_signed
@_root_key
@click.option("--prune", is_flag=True, help="Also remove blobs the manifest no longer lists.")
@click.argument("tree", type=click.Path(file_okay=False))
@json_option
def sync_cmd(cache_url, signed_dir, root_key, prune, tree, as_json) -> None:
    """Update TREE to the signed generation, writing only the blobs it does not hold yet.

    \b
    Example:
        rocke-aot mirror sync --cache cache.sqlite --signed signed/ /srv/www/rocke --prune
    """
    from rocke_aot.cache.store import Store
    from rocke_aot.trust import mirror as m

    with Store.open(cache_url, readonly=True) as store:
        _report(m.sync(store, signed_dir, tree, prune=prune, pin=_pin(root_key)), as_json)
