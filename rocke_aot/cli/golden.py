"""`rocke-aot golden --check`: the IR goldens of every lane (aot/golden.py, docs/goldens.md).

    --check   lower every case on every lane (or --lane/--family), compare with the golden
              file the package ships (aot/goldens/ir-goldens.json), print the drift report;
              exit 1 on any finding
    --write   moved to the maintainer tooling: `python -m devtools.goldens --out aot/goldens`
              in a source checkout (the product never writes its package data); a usage error
              here that names it
"""

from __future__ import annotations

import os

import click

from rocke_aot.aot import golden
from rocke_aot.cli.options import emit_json, json_option, lanes_option
from rocke_aot.variants.families import get_family


@click.command("golden")
@click.option("--check", "mode", flag_value="check", help="Compare fresh IR with the golden (CI runs this).")
@click.option("--write", "mode", flag_value="write", hidden=True)
@lanes_option(help="Only this lane (repeatable). Default: every lane of the registry.")
@click.option("--family", "families", multiple=True, help="Only this family (repeatable).")
@click.option("--jobs", type=click.IntRange(1, 64), default=lambda: min(4, os.cpu_count() or 1),
              show_default="min(4, cores)", help="Processes that lower in parallel.")
@json_option
def golden_cmd(mode, lanes, families, jobs, as_json) -> int:
    """Check the IR goldens: sha256, size and kernel of every case on every lane.

    Cases come from the variant tables by rule (every path and dtype, each knob's
    extremes); lowering takes the lane as an argument, so every lane is checked on
    any host. A drift prints the case, the lane, old and new hash and the first
    differing IR lines. Rewriting the goldens is maintainer tooling in a source
    checkout: python -m devtools.goldens --out aot/goldens (docs/goldens.md).

    \b
    Example:
        rocke-aot golden --check
        rocke-aot golden --check --lane llvm24 --family gemm
    """
    if mode == "write":
        raise click.UsageError(f"the goldens are package data this command only reads; rewrite them in a source "
                               f"checkout with `{golden.WRITE_COMMAND}` (docs/goldens.md)")
    if mode is None:
        raise click.UsageError("give --check")
    fams = list(families) or None
    if fams:
        for f in fams:
            get_family(f)  # an unknown family is a SpecError (exit 2)
    report = golden.check(lanes=list(lanes) or None, families=fams, jobs=jobs)
    if as_json:
        emit_json({"ok": report.ok, "lanes": report.checked, "aliases": report.aliases,
                   "findings": [{"kind": f.kind, "lane": f.lane, "case": f.case, "old": f.old, "new": f.new,
                                 "detail": list(f.detail)} for f in report.findings]})
    else:
        click.echo(report.render())
    return 0 if report.ok else 1
