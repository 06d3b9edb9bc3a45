"""`rocke-aot toolchains` and `rocke-aot toolchain install|register|remove`."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table

from rocke_aot.aot import toolchains as tcs
from rocke_aot.cli.options import LANE, emit_json, json_option, lanes_option, lanes_or_env


@click.command("toolchains")
@lanes_option(help="Only toolchains of this lane (repeatable); validated like every --lane.")
@json_option
def toolchains(lanes, as_json: bool) -> None:
    """List the compilers on this host: kind, location, LLVM version, lane or refusal.

    Each row is a real toolchain probed now: its LLVM major comes from the
    toolchain itself and resolves to a qualified lane, or the row says why it is
    refused (unknown major, datalayout drift). DRIFT compares the lane's emission
    profile datalayout with what the toolchain's target machine reports.

    \b
    Example:
        rocke-aot toolchains
        rocke-aot toolchains --json | jq '.[] | select(.lane == "llvm20")'
    """
    wanted = {lane.name for lane in lanes_or_env(lanes)}
    rows = [tc.detect().as_dict() for tc in tcs.detect_all()]
    if wanted:
        rows = [r for r in rows if r["lane"] in wanted]
    if as_json:
        emit_json(rows)
        return
    table = Table(title="toolchains", show_lines=False)
    for col in ("kind", "location", "LLVM", "lane", "arches", "drift"):
        table.add_column(col, overflow="fold")
    for r in rows:
        drift = "ok" if r["drift"] and all(v == "ok" for v in r["drift"].values()) else (
            "-" if not r["drift"] else "DRIFT")
        lane = r["lane"] if not r["refusal"] else f"refused: {r['refusal']}"
        table.add_row(r["kind"], r["location"], r["llvm_version"] or "?", lane, " ".join(r["arches"]), drift)
    Console(width=200).print(table)


@click.group("toolchain")
def toolchain() -> None:
    """Install, register or remove lane toolchains.

    \b
    Example:
        rocke-aot toolchain install llvm20
        rocke-aot toolchain register --python /opt/llvm20-env/bin/python
    """


@toolchain.command("install")
@click.argument("what")
@click.option("--python", "python", default="python3", show_default=True,
              help="triton==X.Y.Z only: the interpreter of the environment (a path, or a command such as "
                   "python3.12, found on PATH or among ~/.pyenv/versions); a GPU host's Python, so that the "
                   "Triton wheel, hence Triton's cache key, is the host's")
def install(what: str, python: str) -> None:
    """Create a lane environment in the user cache dir and register it: a LANE, or triton==X.Y.Z.

    Idempotent: a second run reuses the environment. llvm20 installs
    llvmlite 0.46 (LLVM 20); llvm24 installs the LLVM 24 AMDGPU code generator;
    triton==X.Y.Z installs that Triton under --python (its lane: the LLVM its HSACOs record).

    \b
    Example:
        rocke-aot toolchain install llvm20
        rocke-aot toolchain install triton==3.6.0 --python python3.12
    """
    if what.startswith("triton"):
        with Console(stderr=True).status(f"installing {what} under {python}"):
            tc = tcs.install_triton(what, python)
        info = tc.detect()
        click.echo(f"{what}: {info.kind} (Python {info.extra.get('python_version')}) LLVM {info.llvm_version} "
                   f"-> {info.lane} at {info.location}; targets {' '.join(info.arches)}")
        return
    lane = LANE.convert(what, None, None)
    with Console(stderr=True).status(f"installing the {lane.name} toolchain"):
        tc = tcs.install_lane(lane)
    info = tc.detect()
    click.echo(f"{lane.name}: {info.kind} LLVM {info.llvm_version} at {info.location}")


@toolchain.command("register")
@click.option("--python", "python", type=click.Path(exists=True, dir_okay=False), help="An interpreter whose llvmlite provides LLVM.")
def register_cmd(python: str | None) -> None:
    """Register an existing interpreter (offline use); it must detect as a qualified lane.

    \b
    Example:
        rocke-aot toolchain register --python /opt/llvm20-env/bin/python
    """
    if not python:
        raise click.UsageError("give --python PATH")
    tc = tcs.register({"kind": "llvmlite", "python": python})
    info = tc.detect()
    click.echo(f"registered {info.kind} LLVM {info.llvm_version} ({info.lane}) at {info.location}")


@toolchain.command("remove")
@click.argument("location")
def remove(location: str) -> None:
    """Forget a registered toolchain by its interpreter, library or environment path.

    \b
    Example:
        rocke-aot toolchain remove /opt/llvm20-env/bin/python
        rocke-aot toolchain remove ~/.cache/rocke-aot/lanes/llvm24
    """
    n = tcs.unregister(location)
    if not n:
        raise click.ClickException(f"no registered toolchain at {location}")
    click.echo(f"removed {n} registration(s)")
