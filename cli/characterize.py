"""`rocke-aot characterize`: the arch-domain probe of every toolchain here (aot/characterize.py).

    (default)        probe, print per lane and arch what is not "ok", and the named skips
    --write          record the fresh documents in variants/characterization/<lane>.json
    --check          compare fresh with recorded (same toolchain identity); exit 1 on a difference
    --llvm24-report  the LLVM 24 vs LLVM 22 delta report (aot/characterize_llvm24.py) that
                     docs/llvm24-lane.md cites (docs/llvm24-characterization.json)
"""

from __future__ import annotations

import json

import click

from rocke_aot.aot import characterize as ch
from rocke_aot.arch import ARCHES
from rocke_aot.cli.options import emit_json, json_option, lanes_option


@click.command("characterize")
@lanes_option(help="Only this lane (repeatable). Default: every lane of the registry.")
@click.option("--arch", "arches", multiple=True, type=click.Choice(list(ARCHES)), help="Only these arches (repeatable).")
@click.option("--write", "mode", flag_value="write", help="Record the documents in variants/characterization/.")
@click.option("--check", "mode", flag_value="check", help="Compare with the recorded documents; exit 1 on a difference.")
@click.option("--llvm24-report", "mode", flag_value="llvm24", help="The LLVM 24 vs LLVM 22 delta report instead.")
@click.option("--out", type=click.Path(dir_okay=False, writable=True), help="--llvm24-report: write the JSON here.")
@click.option("--jobs", type=click.IntRange(1, 32), default=4, show_default=True, help="Probes in flight.")
@json_option
def characterize_cmd(lanes, arches, mode, out, jobs, as_json) -> int:
    """Probe every intrinsic and target feature the families use, on every wired arch,
    with every toolchain on this host; each probe in an isolated worker with a timeout.

    Status per probe: ok, arch_absent (with LLVM's message), name_absent,
    toolchain_crash or timeout. A lane without a toolchain here is a named skip
    ("unvalidated"), never measured.

    \b
    Example:
        rocke-aot characterize
        rocke-aot characterize --check
        rocke-aot characterize --write --lane llvm24
        rocke-aot characterize --llvm24-report --out docs/llvm24-characterization.json
    """
    if mode == "llvm24":
        from rocke_aot.aot.characterize_llvm24 import ARCHES as L24_ARCHES, characterize

        picked = tuple(a for a in arches if a in L24_ARCHES) or L24_ARCHES
        report = characterize("llvm24", picked)
        text = json.dumps(report, indent=2, sort_keys=True, default=str)
        if out:
            with open(out, "w") as f:
                f.write(text + "\n")
            click.echo(json.dumps(report["summary"], indent=2, sort_keys=True))
        else:
            click.echo(text)
        return 0
    names = [lane.name for lane in lanes] or None
    fresh, skips = ch.domain(names, list(arches) or None, jobs=jobs)
    problems: dict[str, list[str]] = {}
    if mode == "write":
        for path in ch.write_recorded(fresh):
            click.echo(f"wrote {path}", err=as_json)
    elif mode == "check":
        recorded = ch.load_recorded()
        for lane, doc in fresh.items():
            if lane not in recorded:
                problems[lane] = [f"no recorded characterization for {lane} (run --write)"]
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
