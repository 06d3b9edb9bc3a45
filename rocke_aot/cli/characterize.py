"""`rocke-aot characterize`: the arch-domain probe of every toolchain here (aot/characterize.py).

    (default)        probe, print per lane and arch what is not "ok", and the named skips
    --check          compare fresh with recorded (the package data variants/characterization/;
                     same toolchain identity); exit 1 on a difference

Recording is maintainer tooling in a source checkout, outside the product: `python -m
devtools.characterize --out variants/characterization` (was --write) and `python -m
devtools.llvm24_report --out bench/results/llvm24-characterization.json` (was --llvm24-report); the
old flags are usage errors here that name them.
"""

from __future__ import annotations

import click

from rocke_aot.aot import characterize as ch
from rocke_aot.arch import ARCHES
from rocke_aot.cli.options import emit_json, json_option, lanes_option

MOVED = {"write": f"record them with `{ch.WRITE_COMMAND}`",
         "llvm24": "the LLVM 24 delta report is `python -m devtools.llvm24_report --out bench/results/llvm24-characterization.json`"}


@click.command("characterize")
@lanes_option(help="Only this lane (repeatable). Default: every lane of the registry.")
@click.option("--arch", "arches", multiple=True, type=click.Choice(list(ARCHES)), help="Only these arches (repeatable).")
@click.option("--check", "mode", flag_value="check", help="Compare with the recorded documents; exit 1 on a difference.")
@click.option("--write", "mode", flag_value="write", hidden=True)
@click.option("--llvm24-report", "mode", flag_value="llvm24", hidden=True)
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Probes in flight.")
@json_option
def characterize_cmd(lanes, arches, mode, jobs, as_json) -> int:
    """Probe every intrinsic and target feature the families use, on every wired arch,
    with every toolchain on this host; each probe in an isolated worker with a timeout.

    Status per probe: ok, arch_absent (with LLVM's message), name_absent,
    toolchain_crash or timeout. A lane without a toolchain here is a named skip
    ("unvalidated"), never measured.

    \b
    Example:
        rocke-aot characterize
        rocke-aot characterize --check
        rocke-aot characterize --check --lane llvm24 --arch gfx950
    """
    if mode in MOVED:
        raise click.UsageError(f"the characterization records are package data this command only reads; "
                               f"{MOVED[mode]} in a source checkout (docs/variants.md)")
    fresh, skips = ch.domain(list(lanes) or None, list(arches) or None, jobs=jobs)
    problems: dict[str, list[str]] = {}
    if mode == "check":
        recorded = ch.load_recorded()
        for lane, doc in fresh.items():
            if lane not in recorded:
                problems[lane] = [f"no recorded characterization for {lane} (record it: `{ch.WRITE_COMMAND} --lane {lane}`)"]
                continue
            diffs = ch.differences(recorded[lane], doc)
            if arches:
                diffs = [d for d in diffs if d.split(" ", 1)[0] in arches]
            if diffs:
                problems[lane] = diffs
    if as_json:
        emit_json({"lanes": fresh, "skipped": skips, "problems": problems})
    else:
        for lane, doc in fresh.items():
            t = doc["toolchain"]
            click.echo(f"{lane} ({t.get('kind')} LLVM {t.get('llvm_version')}): "
                       + ", ".join(f"{k} {v}" for k, v in doc["summary"].items() if v))
            for arch, entry in doc["arches"].items():
                bad = [("target", entry["target"])] if entry["target"]["status"] != "ok" else []
                bad += [(n, r) for n, r in entry["intrinsics"].items() if r["status"] != "ok"]
                bad += [(f"feature {n}", r) for n, r in entry["features"].items() if r["status"] != "ok"]
                click.echo(f"  {arch}: " + ("all ok" if not bad else f"{len(bad)} not ok"))
                for what, r in bad:
                    click.echo(f"    {what}: {r['status']}: {r.get('evidence', '')}")
        for what, why in skips.items():
            click.echo(f"skipped {what}: {why}")
        for lane, diffs in problems.items():
            for d in diffs:
                click.echo(f"DIFFERS {lane}: {d}")
        if mode == "check" and not problems:
            click.echo("characterization check: OK")
    return 1 if problems else 0
