"""`rocke-aot fetch --server URL KEY [-o FILE]`: one kernel from a service, verified.

    KEY ──Client(server, cache).get(KEY)──> local store hit, or meta + blob over HTTP,
        sha256-checked and kept in the local store ──> FILE (or a one-line summary)
"""

from __future__ import annotations

from pathlib import Path

import click

from rocke_aot import settings
from rocke_aot.cli.options import emit_json, json_option
from rocke_aot.service.client import Client


@click.command("fetch")
@click.option("--server", required=True, metavar="URL", envvar=settings.SERVER,
              help="Service base URL, e.g. http://127.0.0.1:8080 (or $ROCKE_AOT_SERVER).")
@click.option("--cache", "cache_url", metavar="URL", default=None, help="Local store (default: $ROCKE_AOT_CACHE).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the code object here.")
@click.argument("key")
@json_option
def fetch(server, cache_url, output, key, as_json) -> None:
    """Fetch the code object of KEY (verified; cached locally; ROCKE_AOT_OFFLINE=1: local only).

    \b
    Example:
        rocke-aot fetch --server http://127.0.0.1:8080 3f2a...e9 -o gemm.hsaco
    """
    with Client(server, cache=cache_url) as client:
        art = client.get(key)
    if output:
        Path(output).write_bytes(art.code_object)
    info = {"key": art.key, "sha256": art.sha256, "size": art.size, "arch": art.arch, "lane": art.lane,
            "family": art.family, "output": output}
    if as_json:
        emit_json(info)
    else:
        click.echo(f"{art.key}  {art.arch} {art.lane} {art.family}  {art.size} bytes  sha256 {art.sha256}"
                   + (f"  -> {output}" if output else ""))
