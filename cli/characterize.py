"""`rocke-aot characterize`: measure a lane's real compiler against LLVM 22 (aot/characterize.py)."""

from __future__ import annotations

import json

import click

from rocke_aot.aot.characterize import ARCHES, characterize
from rocke_aot.cli.options import LANE


@click.command("characterize")
@click.option("--lane", "lane", type=LANE, default="llvm24", show_default=True, help="The lane to characterize.")
@click.option("--arch", "arches", multiple=True, type=click.Choice(ARCHES), help="Only these arches (repeatable).")
@click.option("--out", "out", type=click.Path(dir_okay=False, writable=True), help="Write the JSON report here.")
def characterize_cmd(lane, arches, out) -> None:
    """Measure a lane's real compiler against LLVM 22: datalayout, triple, flags, intrinsics.

    The report is JSON; its "summary" lists every delta. Each compile runs in an
    isolated worker, so an intrinsic an arch lacks is recorded as "fails: ...".

    \b
    Example:
        rocke-aot characterize --lane llvm24 --out llvm24-report.json
        rocke-aot characterize --lane llvm24 --arch gfx1250
    """
    report = characterize(lane.name, tuple(arches) or ARCHES)
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
        click.echo(json.dumps(report["summary"], indent=2, sort_keys=True))
    else:
        click.echo(text)
