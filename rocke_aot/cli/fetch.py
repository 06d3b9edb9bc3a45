"""`rocke-aot fetch KEY... | --from-file FILE | --problem P --arch A --family F`: kernels, verified.

    KEY...  (full 64-hex keys or unique prefixes, e.g. the 16 digits `select` prints)
    --from-file FILE (one key per line, # comments; - is stdin)
    --problem JSON --arch --family [--limit N]  select on --server first (client/service.py), or with
                                                no service over the --mirror's signed index (the
                                                same select: client/index.py), then fetch every
                                                accepted kernel: select-then-fetch
        ──Fetcher.resolve──> full keys (no match: NotFoundError, exit 1; several: the matches
                             named, exit 2), before any byte is fetched
        ──Fetcher.get_each (mirrors, then the server; a failed source falls through to the next,
                            and the line says which failed and why)──> the local store
        ──> -o FILE (one kernel) or --out-dir DIR (<key>.hsaco|.cubin); one line per kernel, or
            one JSON document (--json); progress lines on stderr when fetching several
        ──> $ROCKE_AOT_CLIENT_MAX_BYTES: the local store trimmed to it (least recently used
            first, never what this command fetched)
    exit 0: every kernel fetched; 1: any refused (each named; the others are kept)

The pinned root key is --root-key or $ROCKE_AOT_ROOT_KEY; without one the fetch is refused
unless --insecure (or $ROCKE_AOT_INSECURE=1) asks for the unsigned path, which warns.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import click

from rocke_aot import settings
from rocke_aot.cli.options import arch_option, emit_json, json_option, lanes_option
from rocke_aot.cli.progress import PeriodicLines
from rocke_aot.client import Fetcher, LocalStore, sources_from
from rocke_aot.client.local import max_bytes_setting
from rocke_aot.errors import RockeError, SpecError


def _keys_from_file(path: str) -> list[str]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise SpecError(f"--from-file {path}: cannot read it ({e.strerror})") from None
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(line)
    return out


def _selected(server, mirrors, root_key, local, arch, family, problem, limit, lanes, triton_version
              ) -> list[tuple[str, str]]:
    """(key, family) of every kernel the service accepts for the problem, best first; with no
    service, what the same select accepts over the mirrors' signed index (cli/select.py
    signed_index, client/index.py)."""
    import json

    from rocke_aot.cli.select import problem_text

    if server is None and not mirrors:
        raise click.UsageError("--problem selects on a service (--server URL, or $ROCKE_AOT_SERVER) or over a "
                               "mirror's signed index (--mirror URL)")
    if arch is None or family is None:
        raise click.UsageError("--problem needs --arch (the device's target ID) and --family")
    try:
        prob = json.loads(problem_text(problem))
    except json.JSONDecodeError as e:
        raise SpecError(f"problem: not JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(prob, dict):
        raise SpecError(f"problem must be a JSON object of {family} problem fields, got {type(prob).__name__}")
    lane_names = [ln.name for ln in lanes] or None
    if server is None:
        from rocke_aot.cli.select import signed_index
        from rocke_aot.service.selection import select

        with signed_index(mirrors, root_key, local) as index:
            sel = select(index, arch, family, prob, lanes=lane_names, limit=limit, triton_version=triton_version)
        if not sel.accepted:
            nc = sel.no_candidate
            raise click.ClickException(f"no kernel accepted for the problem over the signed index of {mirrors[0]}"
                                       + (f": {nc.message}" if nc else ""))
        return [(ch.candidate.key, ch.candidate.family) for ch in sel.accepted]
    from rocke_aot.client.service import ServiceClient

    with ServiceClient(server, offline=False) as client:
        doc = client.select(arch.id, family, prob, lanes=lane_names, limit=limit, triton_version=triton_version)
    if not doc["accepted"]:
        nc = doc.get("no_candidate")
        raise click.ClickException(f"no kernel accepted for the problem on {server}"
                                   + (f": {nc['message']}" if nc else ""))
    return [(c["key"], c["family"]) for c in doc["accepted"]]


def _suffix(arch: str) -> str:
    return "cubin" if arch.startswith("sm_") else "hsaco"


@click.command("fetch")
@click.argument("keys", nargs=-1)
@click.option("--from-file", "from_file", default=None, metavar="FILE",
              help="Also fetch the keys in FILE, one per line (# comments; - reads stdin).")
@click.option("--problem", default=None, metavar="JSON|@FILE",
              help="Select on --server first (with --arch and --family; no --server: over the --mirror's signed "
                   "index), then fetch every accepted kernel.")
@arch_option("The device's target ID: every kernel must be one it can run (and --problem's device).")
@click.option("--family", default=None, help="Every kernel must be of this family (and --problem's family).")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="With --problem: the N best only.")
@lanes_option(help="With --problem: only this lane (repeatable).")
@click.option("--triton-version", default=None, metavar="VERSION",
              help="With --problem, a Triton family: only what this Triton version built.")
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
              help="Write the code object here (one kernel only).")
@click.option("--out-dir", type=click.Path(file_okay=False), default=None,
              help="Write each code object here as <key>.hsaco (or .cubin for sm_*).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help=f"Kernels fetched at once (default: ${settings.FETCH_WORKERS}, else 8).")
@click.option("--progress-interval", default=2.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between progress lines on stderr when fetching several kernels.")
@json_option
def fetch(keys, from_file, problem, arch, family, limit, lanes, triton_version, server, mirrors, root_key, insecure,
          local, output, out_dir, workers, progress_interval, as_json) -> int:
    """Fetch kernels by KEY (or unique prefix), from a file, or the ones a select accepts; verified, cached locally.

    Sources: the mirrors in order, then the server; a source that fails (down, a wrong byte, a
    bad signature) falls through to the next, and the output says which failed and why.
    ROCKE_AOT_OFFLINE=1: the local store only. Exit 1 when any kernel was refused.

    \b
    Example:
        rocke-aot fetch --server http://127.0.0.1:8080 --root-key root.key.pub 3f2a9c0d11e8b7a4 -o gemm.hsaco
        rocke-aot fetch --mirror https://cdn.example/rocke --from-file keys.txt --out-dir kernels/ --json
        rocke-aot fetch --server http://127.0.0.1:8080 --arch gfx942 --family gemm \\
            --problem '{"m": 4096, "n": 4096, "k": 4096}' --limit 3 --out-dir kernels/
    """
    wanted: list[tuple[str, str | None]] = [(k, family) for k in keys]
    if from_file is not None:
        wanted += [(k, family) for k in _keys_from_file(from_file)]
    if problem is not None:
        wanted += _selected(server, mirrors, root_key, local, arch, family, problem, limit, lanes, triton_version)
    elif limit is not None or lanes or triton_version is not None:
        raise click.UsageError("--limit, --lane and --triton-version go with --problem")
    if not wanted:
        raise click.UsageError("give a KEY, --from-file FILE or --problem JSON (with --arch, --family, --server)")
    if output is not None and len(wanted) > 1:
        raise click.UsageError(f"-o writes one kernel; {len(wanted)} were asked for: use --out-dir DIR")
    store = LocalStore(local)
    offline = settings.flag(settings.OFFLINE)  # offline: no source is made (no HTTP stack loaded)
    # one kernel: its warm note written, so the next `rocke-aot fetch KEY` answers without the
    # library (rocke_aot/warm.py, cli/entry.py)
    with Fetcher([] if offline else sources_from(server, mirrors), store, root_key=root_key, insecure=insecure,
                 offline=offline, remember=len(wanted) == 1) as f:
        resolved: dict[str, str | None] = {}
        for k, fam in wanted:  # every prefix resolved (or refused) before anything is fetched
            resolved.setdefault(f.resolve(k), fam)
        total = len(resolved)
        done = {"n": 0, "bytes": 0, "failed": 0}
        lock = threading.Lock()

        def on_done(key, result) -> None:
            with lock:
                done["n"] += 1
                if isinstance(result, RockeError):
                    done["failed"] += 1
                else:
                    done["bytes"] += result.size

        lines = PeriodicLines(progress_interval, lambda: f"fetch: {done['n']}/{total} kernels, "
                                                           f"{done['bytes']} bytes, {done['failed']} refused")
        results: dict = {}
        by_family: dict[str | None, list[str]] = {}
        for k, fam in resolved.items():
            by_family.setdefault(fam, []).append(k)
        with lines if total > 1 else _Quiet():
            for fam, ks in by_family.items():
                results.update(f.get_each(ks, workers=workers, arch=arch.id if arch else None, family=fam,
                                          on_done=on_done))
        meta_skipped = list(f.metadata_skipped)
    kernels, failed = [], []
    for key in resolved:
        r = results[key]
        if isinstance(r, RockeError):
            failed.append({"key": key, "error": type(r).__name__, "message": str(r)})
            continue
        path = output if output else (str(Path(out_dir) / f"{key}.{_suffix(r.inputs.arch)}") if out_dir else None)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(r.code_object)
        kernels.append({"key": r.key, "sha256": r.sha256, "size": r.size, "arch": r.inputs.arch,
                        "lane": r.inputs.lane, "family": r.inputs.family, "output": path, "origin": dict(r.origin)})
    if failed and len(resolved) == 1 and not as_json:  # one kernel: its error is the command's (cli/main.py)
        raise results[failed[0]["key"]]
    bound = max_bytes_setting()
    trimmed = store.gc(bound, keep={k["sha256"] for k in kernels}) if bound is not None else []
    if as_json:
        emit_json({"kernels": kernels, "failed": failed, "metadata_skipped": [
            {"source": u, "error": e} for u, e in meta_skipped], "local": str(store.root),
            "trimmed": [e.as_dict() for e in trimmed]})
    else:
        for u, e in meta_skipped:
            click.echo(f"metadata: {u} failed ({e}); used the next source", err=True)
        for kern in kernels:
            src = kern["origin"].get("source")
            click.echo(f"{kern['key']}  {kern['arch']} {kern['lane']} {kern['family']}  {kern['size']} bytes  "
                       f"sha256 {kern['sha256']}" + (f"  from {src}" if src else "")
                       + (f"  -> {kern['output']}" if kern["output"] else ""))
            for s in kern["origin"].get("skipped", ()):
                click.echo(f"  {s['source']} failed first: {s['error']}")
        for x in failed:
            click.echo(f"REFUSED {x['key']}: {x['error']}: {x['message']}", err=True)
        if trimmed:
            click.echo(f"local store over ${settings.CLIENT_MAX_BYTES} ({bound} bytes): removed {len(trimmed)} "
                       f"least recently used kernels ({sum(e.size for e in trimmed)} bytes)", err=True)
    return 1 if failed else 0


class _Quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None
