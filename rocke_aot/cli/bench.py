"""`rocke-aot bench --run-from-cache`: run problems with cached kernels only (runner/bench.py)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rocke_aot import settings
from rocke_aot.cache.store import Store
from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_option, lanes_option, lanes_or_env
from rocke_aot.cli.progress import PeriodicLines
from rocke_aot.errors import SpecError
from rocke_aot.runner.bench import ServerSource, StoreSource, bench, host_triton_version, parse_candidates
from rocke_aot.runner.runtime import open_runtime
from rocke_aot.service.selection import check_triton_version, parse_problem


def load_problems(family: str, problems_file: str | None, problem: str | None) -> list:
    """Problems from --problem JSON or --problems FILE (a list, or {family: [...]})."""
    if (problems_file is None) == (problem is None):
        raise click.UsageError("give exactly one of --problems FILE and --problem JSON")
    try:
        if problem is not None:
            doc = json.loads(problem)
        else:
            assert problems_file is not None  # exactly one of the two is given (checked above)
            doc = json.loads(Path(problems_file).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SpecError(f"cannot read the problems: {e}") from None
    if isinstance(doc, dict) and family in doc and isinstance(doc[family], list):
        doc = doc[family]
    elif isinstance(doc, dict) and problem is not None:
        doc = [doc]
    if not isinstance(doc, list) or not doc:
        raise SpecError(f"problems must be a non-empty JSON list (or {{\"{family}\": [...]}}), got {type(doc).__name__}")
    return doc


@click.command("bench")
@click.option("--run-from-cache", "from_cache", is_flag=True, required=True,
              help="Run kernels from the cache (or server) only; nothing is compiled. Required.")
@arch_option("Target ID of the device (sm_90, gfx942:sramecc+:xnack-, ...).", required=True)
@click.option("--family", required=True, help="Kernel family (gemm, conv_direct_fwd, conv_dgrad_patch).")
@click.option("--problems", "problems_file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="JSON file: a list of problems, or {FAMILY: [...]} (bench/problems/*.json).")
@click.option("--problem", default=None, help="One problem as JSON, e.g. '{\"m\": 1024, \"n\": 1024, \"k\": 1024}'.")
@cache_option("This host's own cache (default: $ROCKE_AOT_CACHE); not with --server.")
@click.option("--server", default=None, metavar="URL",
              help="Rank on a rocke-aot server and fetch its kernels through the verifying client instead.")
@click.option("--mirror", "mirrors", multiple=True, metavar="URL", envvar=settings.MIRRORS,
              help=f"With --server: static mirrors tried first for the kernels, in order (or ${settings.MIRRORS}).")
@click.option("--root-key", default=None, metavar="PUB",
              help=f"With --server: the pinned root public key (default: ${settings.ROOT_KEY}); every kernel "
              "must be listed by the signed metadata it vouches for.")
@click.option("--insecure", is_flag=True, default=None,
              help=f"With --server and no pinned key: unsigned kernels (warns; or ${settings.INSECURE}=1).")
@click.option("--local", "local", metavar="DIR", default=None,
              help=f"With --server: the client's local store (default: ${settings.CLIENT_HOME}).")
@click.option("--candidates", default="all", show_default=True, help="'all', or 'top:N' (the N best-ranked).")
@click.option("--triton-version", default=None, metavar="VERSION",
              help="A Triton family's: the Triton version whose builds to run (default: the triton installed "
                   "here; a host's Triton must equal the builder's).")
@lanes_option()
@click.option("--verify/--no-verify", default=True, show_default=True, help="Check every output against a float64 reference.")
@click.option("--vendor/--no-vendor", default=True, show_default=True, help="Time the vendor library on the same problems.")
@click.option("--warmup", default=2, show_default=True, type=click.IntRange(0, 1000),
              help="Untimed calls per candidate, then more until 10 ms of device time (the GPU's clock "
                   "recovers from the host's reference work); 0: none.")
@click.option("--reps", default=10, show_default=True, type=click.IntRange(1, 10000))
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="Also write the JSON report here.")
@click.option("--progress-interval", default=10.0, show_default=True, type=click.FloatRange(0.1, 3600),
              help="Seconds between progress lines when stderr is not a terminal.")
@json_option
def bench_cmd(from_cache, arch, family, problems_file, problem, cache_url, server, mirrors, root_key, insecure, local,
              candidates, triton_version, lanes, verify, vendor, warmup, reps, out, progress_interval, as_json) -> int:
    """Run problems with cached kernels: verify each candidate, time it, rank the results.

    Candidates come from the same select() as `rocke-aot select`: over this host's cache, or
    on a server with --server, whose kernels then come through the verifying client (mirrors
    first, signed against the pinned root key, kept in the client's local store). Exit code
    77 when this host has no GPU runtime or device (a named skip).

    \b
    Example:
        rocke-aot bench --run-from-cache --arch sm_90 --family gemm --problem '{"m": 4096, "n": 4096, "k": 4096}'
        rocke-aot bench --run-from-cache --arch sm_90 --family conv_direct_fwd \\
            --problems bench/problems/conv_direct_fwd.json --candidates top:8 --json
    """
    # Bad input is refused before anything looks for a GPU (exit 2 on any host).
    probs = [parse_problem(family, p) for p in load_problems(family, problems_file, problem)]
    limit = parse_candidates(candidates)
    version = check_triton_version(family, host_triton_version(family, triton_version))
    fetcher = None
    if server:
        if cache_url:
            raise click.UsageError("--cache is this host's own cache; with --server the kernels are fetched into "
                                   "the client's local store (--local)")
        from rocke_aot.client import Fetcher, LocalStore, sources_from

        # the trust configuration is checked before any GPU is looked for (TrustConfigError)
        fetcher = Fetcher(sources_from(server, mirrors), LocalStore(local), root_key=root_key, insecure=insecure)
    elif mirrors or root_key or insecure or local:
        raise click.UsageError("--mirror, --root-key, --insecure and --local go with --server")
    rt = open_runtime(arch)  # RuntimeUnavailable -> exit 77 (cli/main.py)
    lane_names = [ln.name for ln in lanes_or_env(lanes)] or None
    console = Console(stderr=True)
    done = {"n": 0, "total": 0, "problems": 0}
    # problems x candidates: the total grows as each problem's candidates are known
    bar = Progress(TextColumn("bench {task.fields[problem]}/" + str(len(probs)) + " problems"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                   disable=as_json or not console.is_terminal)
    task = bar.add_task("runs", total=0, problem=0)
    # a log (stderr not a terminal) gets a line every interval, --json or not (JSON goes to stdout)
    lines = None if console.is_terminal else PeriodicLines(
        progress_interval, lambda: f"problem {done['problems']}/{len(probs)}, ran {done['n']}/{done['total']} "
                                   f"candidate runs")

    def on_problem(n: int) -> None:
        done["total"] += n
        done["problems"] += 1
        bar.update(task, total=done["total"], problem=done["problems"])

    def write_out(partial) -> None:
        if out:  # after every problem, temp then rename: a run killed at its time limit keeps its problems
            tmp = Path(f"{out}.tmp")
            tmp.write_text(json.dumps(partial.as_dict(), indent=2, sort_keys=True, default=str) + "\n")
            os.replace(tmp, out)

    def progress() -> None:
        done["n"] += 1
        bar.update(task, advance=1)

    with bar, (lines or contextlib.nullcontext()):
        if fetcher is not None:
            from rocke_aot.client import ServiceClient

            # one local store: the Fetcher's (client/local.py); the service client ranks only
            with ServiceClient(server) as client, fetcher:
                report = bench(ServerSource(client, fetcher), rt, arch, family, probs, candidates=limit,
                               lanes=lane_names, verify=verify, warmup=warmup, reps=reps, vendor=vendor,
                               on_problem=on_problem, progress=progress, triton_version=version,
                               on_report=write_out)
        else:
            with Store.open(cache_url, readonly=True) as store:
                report = bench(StoreSource(store), rt, arch, family, probs, candidates=limit, lanes=lane_names,
                               verify=verify, warmup=warmup, reps=reps, vendor=vendor, on_problem=on_problem,
                               progress=progress, triton_version=version, on_report=write_out)
    doc = report.as_dict()
    if not report.problems:
        write_out(report)  # otherwise on_report wrote it after the last problem
    if as_json:
        emit_json(doc)
    else:
        _render(console, report)
    return 1 if report.summary()["failed_runs"] else 0


def _render(console: Console, report) -> None:
    out = Console()
    if not out.is_terminal:  # a log or a pipe: wide enough for whole kernel names
        out = Console(width=200)
    for p in report.problems:
        t = Table(title=f"{report.family} {json.dumps(p.problem)} on {report.device}")
        for col in ("rank", "kernel", "lane", "efficiency", "est. ms", "median ms", "TFLOP/s", "verified", "note"):
            t.add_column(col)
        best = p.best
        for r in sorted(p.results, key=lambda r: (r.median_ms is None, r.median_ms or 0)):
            t.add_row(str(r.rank), ("* " if best and r.key == best.key else "") + r.kernel, r.lane,
                      f"{r.efficiency:.3f}" if r.efficiency is not None else "-",
                      f"{r.estimate_ms:.4f}" if r.estimate_ms is not None else "-",
                      f"{r.median_ms:.4f}" if r.median_ms is not None else "-",
                      f"{r.tflops:.2f}" if r.tflops is not None else "-",
                      {True: "yes", False: "NO", None: "-"}[r.verified], r.error or (f"{r.chunks} chunks" if r.chunks > 1 else ""))
        out.print(t)
        if p.vendor_ms and best:
            out.print(f"  vendor {p.vendor}: {p.vendor_ms:.4f} ms; best kernel at {p.vendor_ms / best.median_ms:.2f}x "
                      f"of its speed; selection quality {p.selection_quality:.3f}")
    out.print(json.dumps(report.summary(), indent=1))
