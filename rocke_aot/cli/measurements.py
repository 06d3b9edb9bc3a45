"""`rocke-aot measurements`: measured kernel times in the cache (cache/measurements.py).

    record REPORT... [--cache URL] [--repeats N]   bench --json reports -> rows stamped with
                                                 their artifact's current generation
    ls [--family F] [--arch A] [--cache URL]     the rows that still apply
    prune [--cache URL]                          delete rows whose artifact or generation is gone

Selection ranks by them (`rocke-aot select`, `--measured exact|class|off`; docs/selection.md
"Measured beats modeled"). Library errors go through cli/main.py's one translation point.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import click

from rocke_aot.cache import measurements as stored
from rocke_aot.cache.store import Store
from rocke_aot.cli.options import arch_option, cache_option, emit_json, json_option
from rocke_aot.errors import SpecError


@click.group("measurements")
def measurements() -> None:
    """Record, list and prune measured kernel times (they outrank the time model).

    \b
    Example:
        rocke-aot bench --run-from-cache --arch gfx942 --family gemm --problems p.json --json --out r.json
        rocke-aot measurements record r.json --cache ~/.cache/rocke-aot/cache.sqlite
    """


def _read(path: str) -> dict:
    raw = Path(path).read_bytes()
    try:
        return json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)
    except (OSError, ValueError) as e:
        raise SpecError(f"{path}: not a JSON bench report ({e})") from None


@measurements.command("record")
@click.argument("reports", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@cache_option("The cache the kernels came from.")
@click.option("--repeats", type=click.IntRange(min=1), default=None,
              help="Repeats per median, for reports that do not record them (bench --reps).")
@json_option
def record_cmd(reports, cache_url, repeats, as_json) -> None:
    """Record the timed results of bench --json REPORTS as measurements.

    Every result with a median time that did not fail verification becomes one row, stamped
    with its artifact's generation; keys the cache does not hold are skipped and listed.

    \b
    Example:
        rocke-aot measurements record bench/results/bench-raw/h200-run6/quality-gemm.json.gz --repeats 15
    """
    out = {}
    with Store.open(cache_url) as store:
        for path in reports:
            rows = stored.from_report(_read(path), repeats=repeats)
            out[path] = stored.record(store, rows, source=path).as_dict()
    if as_json:
        emit_json(out)
        return
    for path, r in out.items():
        click.echo(f"{path}: {r['recorded']} recorded, {r['already']} already, "
                   f"{len(r['unknown_keys'])} keys not in the cache")


@measurements.command("ls")
@click.option("--family", required=True, help="Kernel family.")
@arch_option("The device's processor or target ID.", required=True)
@cache_option()
@json_option
def ls_cmd(family, arch, cache_url, as_json) -> None:
    """List the measurements of FAMILY on ARCH that still apply (artifact and generation alive).

    \b
    Example:
        rocke-aot measurements ls --family gemm --arch sm_90 --json
    """
    with Store.open(cache_url, readonly=True) as store:
        rows = stored.for_family(store, family, arch.processor)
    if as_json:
        emit_json([m.as_dict() for m in rows])
        return
    for m in rows:
        click.echo(f"{m.key[:16]} {m.arch:<12} {m.median_ms:>10.4f} ms x{m.repeats:<4} {m.problem_text}  {m.device}")


@measurements.command("prune")
@cache_option()
@json_option
def prune_cmd(cache_url, as_json) -> None:
    """Delete the measurements whose artifact or generation no longer exists.

    \b
    Example:
        rocke-aot measurements prune --cache ~/.cache/rocke-aot/cache.sqlite
    """
    with Store.open(cache_url) as store:
        n = stored.prune(store)
    if as_json:
        emit_json({"deleted": n})
    else:
        click.echo(f"{n} measurements deleted")
