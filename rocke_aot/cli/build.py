"""`rocke-aot build`: fill the kernel cache for one or more arches.

    options -> aot.builder.build(..., where=parse_where(--where), problems=--problems, on_plan, on_result)
        progress, on stderr:  a terminal (and no --json)  -> a rich progress bar
                              not a terminal (CI logs)    -> PlainProgress: a line
                                  "built X/Y, cached C, failed F, elapsed Ns" every
                                  --progress-interval seconds (default 10), from a timer
                                  thread, so a long compile still shows the build is alive
        result -> rich table, or --json (one document on stdout); exit code 0 only when
                  nothing failed
"""

from __future__ import annotations

import contextlib
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from rocke_aot.aot.builder import build as run_build
from rocke_aot.aot.builder.plan import parse_where
from rocke_aot.aot.builder.summary import render
from rocke_aot.cache.store import Store
from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_option, lanes_option, lanes_or_env
from rocke_aot.cli.progress import PeriodicLines
from rocke_aot.errors import SpecError


@click.command("build")
@arch_option("Target ID to build for (repeatable): gfx942, gfx950, gfx1250, gfx942:sramecc+:xnack-, sm_90. "
             "Required unless --instances gives each instance's arch.", multiple=True)
@click.option("--family", "families", multiple=True, help="Only this kernel family (repeatable); default: all.")
@lanes_option()
@click.option("--where", "where", multiple=True, metavar="FIELD=VALUE",
              help="Only specs whose FIELD equals VALUE (repeatable), e.g. --where path=fma --where block_m=64.")
@click.option("--problems", "problems", type=click.Path(exists=True, dir_okay=False), default=None, metavar="FILE",
              help='Build the specs these problems need, a model\'s layers the default tables lack included (each '
                   'layer\'s baked parameters x the knob grid): JSON {"conv_direct_fwd": [{...}], "gemm": [...]} '
                   '(bench/problems/models/, bench/model_problems.py).')
@click.option("--min-efficiency", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="With --problems: a spec must reach this tile efficiency on at least one problem "
                   "(a problem no spec serves at the floor keeps its best specs).")
@click.option("--instances", "instances", type=click.Path(exists=True, dir_okay=False), default=None, metavar="FILE",
              help="Build a rocKE instance list (aot_list.json: rocke.aot.instance/v1 objects, each a family, an arch "
                   "and a compile_spec matched against the family's table like --where); every instance whose "
                   "family this project lacks is reported by name (aot/builder/instances.py).")
@cache_option()
@click.option("--jobs", "-j", type=click.IntRange(1, 512), default=None, help="Parallel compiles (default: one per core).")
@click.option("--force", is_flag=True, help="Retry cached failures.")
@click.option("--dry-run", is_flag=True, help="Plan and look up only; compile nothing.")
@click.option("--timeout", type=click.FloatRange(1, 3600), default=300.0, show_default=True, help="Seconds per compile.")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT", help="Run the compiles on this Dask scheduler.")
@click.option("--progress-interval", type=click.FloatRange(0.01, 3600), default=10.0, show_default=True,
              metavar="SECONDS", help="When stderr is not a terminal (CI logs): a plain progress line this often.")
@json_option
def build(arches, families, lanes, where, problems, min_efficiency, instances, cache_url, jobs, force, dry_run,
          timeout, scheduler, progress_interval, as_json) -> int:
    """Build (or top up) the kernel cache for ARCH on every lane with a toolchain here.

    Specs come from the variant tables; each key is computed without lowering and
    all keys are looked up in one query, so only misses are compiled. A second run
    compiles nothing; a killed build, run again, compiles only what is missing.
    Combinations a table refuses are listed with their reason; a requested lane
    with no toolchain on this host is a named skip, never counted as built.
    Exit code 0 only when nothing failed. --where takes a field of the family's
    spec and a value of that field's type (ints like 64, bools true/false,
    text as is); an unknown field or a mistyped value exits 2. When stderr is
    not a terminal, a plain progress line is written every --progress-interval
    seconds. With --problems, the specs that serve the file's problems: the default
    grid's, and each problem's own baked set (a conv layer's channels, filter, stride,
    padding, dilation, dtype) crossed with the family's knob grid, admitted by the
    table's rules; the summary lists each layer, what was admitted and why not.

    \b
    Example:
        rocke-aot build --arch gfx1250
        rocke-aot build --arch gfx942 --arch gfx950 --family gemm --lane llvm22 --json
        rocke-aot build --arch gfx950 --where path=mfma --where block_m=128
        rocke-aot build --arch gfx942 --scheduler tcp://10.0.0.5:8786
        rocke-aot build --arch gfx942 --problems workload.json --min-efficiency 0.5
        rocke-aot build --arch gfx942 --problems bench/problems/models/resnet50.json --dry-run
        rocke-aot build --instances aot_list.json --json
    """
    lanes = lanes_or_env(lanes)
    if instances is not None:
        if arches or families or where or problems or scheduler:
            raise SpecError("--instances names each instance's family, arch and spec: give it without --arch, "
                            "--family, --where, --problems or --scheduler")
        return _build_instances(instances, lanes, cache_url, jobs, force, dry_run, timeout, as_json)
    if not arches:
        raise SpecError("give --arch (repeatable) or --instances FILE")
    console = Console(stderr=True)
    show_progress = not as_json and console.is_terminal
    plain = None if console.is_terminal else PlainProgress(progress_interval)
    submit = None
    client = None
    if scheduler:
        from rocke_aot.aot.builder.dask_backend import connect, dask_submitter

        client = connect(scheduler)
        submit = dask_submitter(client, timeout=timeout)
    with Store.open(cache_url) as store:
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("planned {task.fields[planned]} cached {task.fields[cached]} "
                                       "built {task.fields[built]} failed {task.fields[failed]}"),
                            TimeElapsedColumn(), console=console, disable=not show_progress)
        state: dict[str, TaskID] = {}  # "task": the progress bar's, once planned

        def on_plan(plan) -> None:
            if show_progress:
                console.print(f"planned {plan.planned}: {len(plan.cached)} cached, {len(plan.to_build)} to build, "
                              f"{len(plan.refused)} refused combinations")
            counts["cached"] = len(plan.cached)
            state["task"] = progress.add_task("compiling", total=len(plan.to_build), planned=plan.planned, **counts)
            if plain is not None:
                plain.planned(len(plan.to_build), len(plan.cached))

        # reused: a stored code object, no compile; cached: planned cached, or stored by another
        # builder while this one ran (the builder's statuses, aot/builder/run.py).
        counts: dict[str, Any] = {"built": 0, "failed": 0, "reused": 0, "cached": 0}  # rich's task fields

        def on_result(job, status) -> None:
            counts[status] += 1
            progress.update(state["task"], advance=1, description=job.label, **counts)
            if plain is not None:
                plain.result(status)

        try:
            with progress, (plain or contextlib.nullcontext()):
                summary = run_build(arches=arches, families=families or None, lanes=lanes, store=store,
                                    jobs=jobs, force=force, dry_run=dry_run, timeout=timeout, submit=submit,
                                    where=parse_where(where), problems=problems, min_efficiency=min_efficiency,
                                    on_plan=on_plan, on_result=on_result)
        finally:
            if client is not None:
                client.close()
    if as_json:
        emit_json(summary.data)
    else:
        render(summary, Console())
    if summary.data["planned"] == 0 and not summary.data.get("refused") and not summary.data.get("skipped"):
        # nothing to build and no refusal saying why (the summary lists those): not a success
        asked = [f"--arch {' '.join(a.id for a in arches)}"] + [f"--family {f}" for f in families] + \
            [f"--where {w}" for w in where] + (["--problems"] if problems else [])
        click.echo(f"nothing planned: no spec the variant tables serve matches {' '.join(asked)} on the lanes "
                   f"{', '.join(summary.data.get('lanes') or []) or '(none with a toolchain here)'} "
                   "(`rocke-aot variants` lists what each family serves)", err=True)
        return 1
    return summary.exit_code


class PlainProgress(PeriodicLines):
    """Build progress lines when stderr is not a terminal (cli/progress.py)."""

    def __init__(self, interval: float):
        super().__init__(interval)
        self.total: int | None = None
        self.cached = self.built = self.failed = 0

    def planned(self, to_build: int, cached: int) -> None:
        self.total, self.cached = to_build, cached

    def result(self, status: str) -> None:
        if status in ("built", "reused"):
            self.built += 1
        elif status == "cached":
            self.cached += 1
        else:
            self.failed += 1

    def line(self) -> str:
        if self.total is None:
            return f"planning, {self.elapsed()}"
        return f"built {self.built}/{self.total}, cached {self.cached}, failed {self.failed}, {self.elapsed()}"


def _build_instances(path, lanes, cache_url, jobs, force, dry_run, timeout, as_json) -> int:
    from rocke_aot.aot.builder.instances import build_instances

    with Store.open(cache_url) as store:
        report = build_instances(path, store=store, lanes=lanes, jobs=jobs, force=force, dry_run=dry_run,
                                 timeout=timeout)
    if as_json:
        emit_json(report)
    else:
        for r in report["instances"]:
            click.echo(f"{r['name']}: {r['family']} {r['arch']}: planned {r['planned']}, built {r['built']}, "
                       f"cached {r['cached']}, failed {len(r['failed'])}")
        for r in report["refused"]:
            click.echo(f"{r['name']}: NOT BUILT ({r['family']} {r['arch']}): {r['reason']}")
    return 0 if report["ok"] else 1
