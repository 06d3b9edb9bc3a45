"""`rocke-aot families`: every kernel family, where it comes from, and every plugin that is broken.

    variants/families.py   family_names(), family_source(name)      built in | plugin (entry point,
                           failed_plugins()                         distribution, version); the
                                                                    entry points that did not load
    aot/families           lowerer_error(name)                      a plugin's lowerer: loads, or why not
        -> a rich table (one row per family, one per broken plugin), or --json

Exit code 1 when a plugin is broken (its family failed to load, or its lowerer did not), so a
CI job installing plugins catches it; every other family works either way.
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from rocke_aot.aot.families import lowerer_error
from rocke_aot.cli.options import emit_json, json_option
from rocke_aot.variants import families as registry


def rows(names: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One dict per family (installed or failed), in registry order, failed plugins last."""
    out = []
    for name in registry.family_names():
        if names and name not in names:
            continue
        fam = registry.get_family(name)
        src = fam.source
        err = lowerer_error(name)
        out.append({"family": name, "source": src.as_dict(), "from": src.describe(), "description": fam.description,
                    "lowerer": "built in" if src.builtin else ("error" if err else "ok"),
                    "status": "error" if err else "ok", "error": str(err) if err else None})
    for name, (src, err) in registry.failed_plugins().items():
        if names and name not in names:
            continue
        out.append({"family": name, "source": src.as_dict(), "from": src.describe(), "description": "",
                    "lowerer": "-", "status": "error", "error": str(err)})
    return out


@click.command("families")
@click.option("--family", "names", multiple=True, help="Only this family (repeatable).")
@json_option
def families_cmd(names, as_json: bool) -> int:
    """List the kernel families: built in or from a plugin (entry point, distribution), and every broken plugin.

    A plugin is a Python distribution declaring ``rocke_aot.families`` and ``rocke_aot.lowerers``
    entry points (docs/plugins.md). A plugin whose module does not import, whose entry point is
    not a Family, whose grid refuses without a reason or whose lowerer does not load is listed
    with its error (exit 1); every other family keeps working in every command.

    \b
    Example:
        rocke-aot families
        rocke-aot families --json | jq '.[] | select(.status == "error")'
    """
    got = rows(tuple(names))
    if as_json:
        emit_json(got)
        return 1 if any(r["status"] == "error" for r in got) else 0
    table = Table(title="families")
    for col in ("family", "from", "lowerer", "status"):
        table.add_column(col, overflow="fold")
    for r in got:
        table.add_row(r["family"], r["from"], r["lowerer"], "ok" if r["status"] == "ok" else f"[red]{r['error']}[/red]")
    Console(width=200).print(table)
    return 1 if any(r["status"] == "error" for r in got) else 0
