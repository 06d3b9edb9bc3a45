"""`rocke-aot client verify|purge`: the GPU host's local store (client/local.py LocalStore).

    --local DIR (default: $ROCKE_AOT_CLIENT_HOME, else $ROCKE_AOT_HOME/client) ──> LocalStore
    verify [--origin URL]   every record (of that server) against the record schema, its blob
                            (present, size, sha256, an ELF for its arch), every blob against its
                            name; the records per origin ──> text or JSON; exit 1 on damage
    purge --origin URL      the records that server left, then every blob nothing references
    purge --bad             every record and blob verify refuses (also without an origin)

A record a server once made this host keep answers no later fetch from another source (the
Fetcher asks again); purge removes it for good. The signed kernels' blobs are checked
against the accepted manifest and are never purged by origin.
"""

from __future__ import annotations

import click

from rocke_aot import settings
from rocke_aot.cli.options import emit_json, json_option
from rocke_aot.client.local import LocalReport, LocalStore

local_option = click.option(
    "--local", "local", metavar="DIR", default=None,
    help=f"The local store (default: ${settings.CLIENT_HOME}, else ${settings.HOME}/client).")


@click.group("client")
def client() -> None:
    """Verify and purge the client's local store of fetched kernels.

    \b
    Example:
        rocke-aot client verify
        rocke-aot client purge --origin http://10.0.0.7:8080
    """


def _show(report: LocalReport, what: str) -> None:
    click.echo(f"{what}: {report.records} records, {report.blobs} blobs: " + ("ok" if report.ok else "DAMAGED"))
    for path, reason in report.bad:
        click.echo(f"  bad {path}: {reason}")
    for source, n in report.origins:
        click.echo(f"  {n} records from {source}")
    if report.orphans:
        click.echo(f"  {len(report.orphans)} blobs nothing references (purge removes them)")
    for path in report.removed:
        click.echo(f"  removed {path}")


@client.command("verify")
@click.option("--origin", default=None, metavar="URL", help="Only the records fetched from this server.")
@local_option
@json_option
def verify(origin, local, as_json) -> int:
    """Check every record and blob of the local store; exit 1 on damage.

    \b
    Example:
        rocke-aot client verify
        rocke-aot client verify --origin http://10.0.0.7:8080 --json
    """
    store = LocalStore(local)
    report = store.verify(origin)
    if as_json:
        emit_json({"root": str(store.root), "origin": origin, **report.as_dict()})
    else:
        _show(report, f"{store.root}" + (f" (from {origin})" if origin else ""))
    return 0 if report.ok else 1


@client.command("purge")
@click.option("--origin", default=None, metavar="URL", help="Remove every record fetched from this server.")
@click.option("--bad", is_flag=True, help="Remove every record and blob that verify refuses.")
@local_option
@json_option
def purge(origin, bad, local, as_json) -> int:
    """Remove what a server left in the local store (--origin), or what fails verify (--bad).

    \b
    Example:
        rocke-aot client purge --origin http://10.0.0.7:8080
        rocke-aot client purge --bad --json
    """
    if origin is None and not bad:
        raise click.UsageError("give --origin URL (the server whose records go), --bad, or both")
    store = LocalStore(local)
    report = store.purge(origin, bad=bad)
    if as_json:
        emit_json({"root": str(store.root), "origin": origin, **report.as_dict()})
    else:
        _show(report, f"{store.root} after purge")
    return 0 if report.ok else 1
