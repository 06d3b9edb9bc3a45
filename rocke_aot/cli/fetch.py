"""`rocke-aot fetch [--mirror URL ...] [--server URL] KEY [-o FILE]`: one kernel, verified.

    KEY ──Fetcher(mirrors..., server; pinned root key)──> the local store (client/local.py), or
        the signed metadata + the blob from the first source that passes every check
        ──> FILE (or a one-line summary)

The pinned root key is --root-key or $ROCKE_AOT_ROOT_KEY; without one the fetch is refused
unless --insecure (or $ROCKE_AOT_INSECURE=1) asks for the unsigned path, which warns.
"""

from __future__ import annotations

from pathlib import Path

import click

from rocke_aot import settings
from rocke_aot.cli.options import emit_json, json_option
from rocke_aot.client import Fetcher, LocalStore, sources_from


@click.command("fetch")
@click.option("--server", default=None, metavar="URL", envvar=settings.SERVER,
              help=f"Service base URL, e.g. http://127.0.0.1:8080 (or ${settings.SERVER}); tried after the mirrors.")
@click.option("--mirror", "mirrors", multiple=True, metavar="URL", envvar=settings.MIRRORS,
              help=f"A static mirror (`rocke-aot mirror export`), tried in the order given (or ${settings.MIRRORS}).")
@click.option("--root-key", default=None, metavar="PUB",
              help=f"The pinned root public key: a .pub file or ed25519:<hex> (default: ${settings.ROOT_KEY}).")
@click.option("--insecure", is_flag=True, default=None,
              help=f"No pinned key: fetch unsigned kernels (warns; or ${settings.INSECURE}=1).")
@click.option("--local", "local", metavar="DIR", default=None,
              help=f"The local store (default: ${settings.CLIENT_HOME}, else ${settings.HOME}/client).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the code object here.")
@click.argument("key")
@json_option
def fetch(server, mirrors, root_key, insecure, local, output, key, as_json) -> None:
    """Fetch the code object of KEY (verified; cached locally; ROCKE_AOT_OFFLINE=1: local only).

    \b
    Example:
        rocke-aot fetch --mirror https://cdn.example/rocke --server http://127.0.0.1:8080 \\
            --root-key root.key.pub 3f2a...e9 -o gemm.hsaco
    """
    offline = settings.flag(settings.OFFLINE)  # offline: no source is made (no HTTP stack loaded)
    with Fetcher([] if offline else sources_from(server, mirrors), LocalStore(local), root_key=root_key,
                 insecure=insecure, offline=offline) as f:
        k = f.get(key)
    if output:
        Path(output).write_bytes(k.code_object)
    info = {"key": k.key, "sha256": k.sha256, "size": k.size, "arch": k.inputs.arch, "lane": k.inputs.lane,
            "family": k.inputs.family, "output": output, "origin": dict(k.origin)}
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{k.key}  {k.inputs.arch} {k.inputs.lane} {k.inputs.family}  {k.size} bytes  sha256 {k.sha256}"
                   + (f"  -> {output}" if output else ""))
