"""`rocke-aot settings`: every ROCKE_AOT_* variable, its meaning, default and current value."""

from __future__ import annotations

import click

from rocke_aot import settings
from rocke_aot.cli.options import emit_json, json_option


@click.command("settings")
@click.option("--all", "show_all", is_flag=True, help="Also the internal ones rocke-aot sets for its own children.")
@json_option
def settings_cmd(show_all: bool, as_json: bool) -> None:
    """List the ROCKE_AOT_* environment variables: meaning, default, value here.

    One registry (rocke_aot/settings.py) names every variable the product reads; a secret
    (the client's token) shows as "(set)", never its value.

    \b
    Example:
        rocke-aot settings
        rocke-aot settings --all --json | jq '.[] | select(.set)'
    """
    rows = [r for r in settings.describe() if show_all or not r["internal"]]
    if as_json:
        emit_json(rows)
        return
    try:
        from rich.console import Console
        from rich.table import Table
    except ModuleNotFoundError:  # the base install (no rich): the same facts, a block per variable
        for r in rows:
            click.echo(f"{r['name']} = {'-' if r['value'] is None else r['value']}\n    {r['meaning']}\n"
                       f"    default: {r['default']}")
        return
    table = Table(title="settings")
    for col in ("variable", "value", "default", "meaning"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(str(r["name"]), "-" if r["value"] is None else str(r["value"]), str(r["default"]),
                      str(r["meaning"]))
    Console(width=200).print(table)
