"""`rocke-aot variants`: what the variant tables serve, per (family, arch, lane).

    table.report(families, arches, lanes) -> rows (count of specs, or refusal reason;
                                              per-path refusals such as "wmma needs gfx1250")
        -> a rich table, or --json (one document: rows + refusals + completeness holes)

Each served row also says whether a recorded arch-domain characterization backs it
(aot/characterize.py ``backing``: every intrinsic its golden cases use is "ok" on that lane's
measured toolchain) or whether it is "unvalidated" (no toolchain of that lane was measured).

A family whose problem type declares ``REFUSED`` ({what: reason}: problems no kernel of it serves,
refused on construction by name, e.g. attention's head dims 80/96/512) has them listed too
(``problem_refusals`` in --json): they are decided on the problem, not per arch and lane.

Exit code 1 when the tables are incomplete (a registered lane some family neither
serves nor refuses on purpose), so CI catches it from the command line as well. A plugin
whose family failed to load is listed as broken (``plugin_errors``); the rest is unaffected.
"""

from __future__ import annotations

from collections.abc import Sequence

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rocke_aot.aot import characterize, golden
from rocke_aot.cli.options import arch_option, emit_json, json_option, lanes_option, lanes_or_env
from rocke_aot.lanes import Lane
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family, plugin_errors


@click.command("variants")
@click.option("--family", "families", multiple=True, help="Only this family (repeatable).")
@arch_option("Only this arch target ID (repeatable).", multiple=True)
@lanes_option(help="Only this lane (repeatable); validated like every --lane. Default: every lane.")
@json_option
def variants(families, arches, lanes, as_json: bool) -> int:
    """Count the specs each (family, arch, lane) serves, and list every refusal with its reason.

    Counts come from the variant tables alone: nothing is lowered or compiled.
    A refused combination (for example gfx1250 on llvm20) and a refused path
    (for example wmma on gfx942) are listed with the reason.

    \b
    Example:
        rocke-aot variants
        rocke-aot variants --family conv_dgrad_patch --arch gfx1250 --json
    """
    asked = lanes_or_env(lanes)
    rows = _with_backing(table.report(families or None, arches or None, asked or None),
                         asked or table.registered_lanes())
    holes = table.check_complete()
    refusals = [{"family": r.family, "arch": r.arch, "lane": r.lane, "scope": "all", "reason": r.reason}
                for r in rows if not r.served]
    refusals += [{"family": r.family, "arch": r.arch, "lane": r.lane, "scope": f"path {p}", "reason": why}
                 for r in rows if r.served for p, why in r.paths.items() if why != "served"]
    broken = [str(e) for e in plugin_errors()]  # not listed above; every other family is
    problem_refusals = [{"family": f, "problem": what, "reason": why}
                        for f in dict.fromkeys(r.family for r in rows)
                        for what, why in (getattr(get_family(f).problem_type, "REFUSED", None) or {}).items()]
    if as_json:
        emit_json({"rows": [r.as_dict() for r in rows], "refusals": refusals, "problem_refusals": problem_refusals,
                   "total": sum(r.count for r in rows), "holes": [str(h) for h in holes],
                   "plugin_errors": broken})
        return 1 if holes else 0
    con = Console(width=200)
    counts = Table(title="variant tables")
    for col in ("family", "arch", "lane", "specs", "paths", "backing"):
        counts.add_column(col, overflow="fold")
    for r in rows:
        paths = " ".join(p for p, why in r.paths.items() if why == "served")
        counts.add_row(r.family, r.arch, r.lane, str(r.count) if r.served else "refused", paths or "-",
                       r.backing or "-")
    con.print(counts)
    if refusals:
        ref = Table(title="refusals")
        for col in ("family", "arch", "lane", "scope", "reason"):
            ref.add_column(col, overflow="fold")
        for x in refusals:
            ref.add_row(x["family"], x["arch"], x["lane"], x["scope"], x["reason"])
        con.print(ref)
    if problem_refusals:
        pref = Table(title="problems refused by every spec (by name, on the problem)")
        for col in ("family", "problem", "reason"):
            pref.add_column(col, overflow="fold")
        for x in problem_refusals:
            pref.add_row(x["family"], x["problem"], escape(x["reason"]))
        con.print(pref)
    con.print(f"total specs: {sum(r.count for r in rows)}")
    for h in holes:
        con.print(f"[red]INCOMPLETE[/red] {h}")
    for e in broken:
        con.print(f"[red]BROKEN PLUGIN[/red] {e} (rocke-aot families)")
    return 1 if holes else 0


def _with_backing(rows: list[table.Row], lanes: Sequence[Lane]) -> list[table.Row]:
    """Served rows gain their backing: characterized / contradicted / unvalidated. ``lanes``: the
    Lanes the report was asked for (its rows name them)."""
    import dataclasses

    by_name = {lane.name: lane for lane in lanes}
    recorded = characterize.load_recorded()
    doc = golden.load()
    out = []
    for r in rows:
        if r.served:
            state, detail = characterize.backing(r.family, r.arch, by_name[r.lane], recorded, doc)
            r = dataclasses.replace(r, backing=state, backing_detail=detail)
        out.append(r)
    return out
