"""`rocke-aot client ls|du|gc|verify|purge`: the GPU host's local store (client/local.py LocalStore).

    --local DIR (default: $ROCKE_AOT_CLIENT_HOME, else $ROCKE_AOT_HOME/client) ──> LocalStore
    verify [--origin URL]   every record (of that server) against the record schema, its blob
                            (present, size, sha256, an ELF for its arch), every blob against its
                            name; the records per origin ──> text or JSON; exit 1 on damage
    purge --origin URL      the records that server left, then every blob nothing references
    purge --bad             every record and blob verify refuses (also without an origin)
    ls                      every kernel kept: key(s), size, last use; most recent first
    du                      blobs, bytes, records, the bound ($ROCKE_AOT_CLIENT_MAX_BYTES)
    gc [--max-bytes N]      remove the least recently used kernels until the blobs fit N
                            (default: the bound); nothing to do without one

A record a server once made this host keep answers no later fetch from another source (the
Fetcher asks again); purge removes it for good. The signed kernels' blobs are checked
against the accepted manifest and are never purged by origin.
"""

from __future__ import annotations

import click

from rocke_aot import settings
from rocke_aot.cli.options import emit_json, json_option
from rocke_aot.client.local import LocalReport, LocalStore, max_bytes_setting

local_option = click.option(
    "--local", "local", metavar="DIR", default=None,
    help=f"The local store (default: ${settings.CLIENT_HOME}, else ${settings.HOME}/client).")


@click.group("client")
def client() -> None:
    """List, size, trim, verify and purge the client's local store of fetched kernels.

    \b
    Example:
        rocke-aot client ls
        rocke-aot client du
        rocke-aot client gc --max-bytes 2000000000
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
    store = _existing(local)
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
    store = _existing(local)
    report = store.purge(origin, bad=bad)
    if as_json:
        emit_json({"root": str(store.root), "origin": origin, **report.as_dict()})
    else:
        _show(report, f"{store.root} after purge")
    return 0 if report.ok else 1


def _existing(local) -> LocalStore:
    """The local store at ``local``; a read never creates one (a mistyped --local is an error)."""
    from rocke_aot.errors import NotFoundError

    store = LocalStore(local)
    if local is not None and not store.root.is_dir():
        raise NotFoundError(f"no local store at {store.root} (--local); `rocke-aot fetch` makes one")
    return store


def _time(t: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


@client.command("ls")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="At most this many rows.")
@local_option
@json_option
def ls_cmd(limit, local, as_json) -> None:
    """List the kernels kept: key, size, last use; most recently used first.

    \b
    Example:
        rocke-aot client ls
        rocke-aot client ls --limit 20 --json
    """
    store = _existing(local)
    ents = store.entries()[:limit] if limit else store.entries()
    if as_json:
        emit_json({"root": str(store.root), "kernels": [e.as_dict() for e in ents]})
        return
    for e in ents:
        keys = ", ".join(k[:16] for k in e.keys) or "(no key: an orphan)"
        click.echo(f"{keys:<34} {e.size:>10}  {_time(e.used)}  {e.sha256[:16]}")


@client.command("du")
@local_option
@json_option
def du_cmd(local, as_json) -> None:
    """How much the local store holds, and its bound ($ROCKE_AOT_CLIENT_MAX_BYTES).

    \b
    Example:
        rocke-aot client du
        rocke-aot client du --json
    """
    store = _existing(local)
    u = {**store.usage(), "max_bytes": max_bytes_setting()}
    if as_json:
        emit_json(u)
        return
    bound = f"bound {u['max_bytes']} bytes" if u["max_bytes"] is not None else \
        f"no bound (${settings.CLIENT_MAX_BYTES})"
    click.echo(f"{u['root']}: {u['blobs']} kernels, {u['blob_bytes']} bytes of code objects, {u['records']} unsigned "
               f"records, {u['trust_bytes']} bytes of signed metadata; {bound}")


@client.command("gc")
@click.option("--max-bytes", type=click.IntRange(min=0), default=None,
              help=f"Keep at most this many bytes of code objects (default: ${settings.CLIENT_MAX_BYTES}).")
@local_option
@json_option
def gc_cmd(max_bytes, local, as_json) -> int:
    """Remove the least recently used kernels until the store fits its bound.

    \b
    Example:
        ROCKE_AOT_CLIENT_MAX_BYTES=2000000000 rocke-aot client gc
        rocke-aot client gc --max-bytes 500000000 --json
    """
    bound = max_bytes if max_bytes is not None else max_bytes_setting()
    if bound is None:
        raise click.UsageError(f"no bound: give --max-bytes N or set ${settings.CLIENT_MAX_BYTES}")
    store = _existing(local)
    removed = store.gc(bound)
    left = store.usage()
    if as_json:
        emit_json({"root": str(store.root), "max_bytes": bound, "removed": [e.as_dict() for e in removed],
                   "blob_bytes": left["blob_bytes"], "blobs": left["blobs"]})
    else:
        click.echo(f"{store.root}: removed {len(removed)} kernels ({sum(e.size for e in removed)} bytes); "
                   f"{left['blobs']} kept, {left['blob_bytes']} bytes (bound {bound})")
    return 0
