"""The build summary: one value, rendered as a rich table or as one JSON document."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rocke_aot.aot.builder.plan import Plan
from rocke_aot.variants.families import plugin_errors


@dataclass(frozen=True)
class BuildSummary:
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.data["failed"]

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def __getitem__(self, k: str) -> Any:
        return self.data[k]


def summarize(plan: Plan, outcome, *, store, arches, dry_run: bool, compiles: int, seconds: float) -> BuildSummary:
    refused: dict[str, list[str]] = defaultdict(list)
    for r in plan.refused:
        refused[r.reason].append(f"{r.family}/{r.arch}/{r.lane}")
    failed = [
        {"family": j.family, "arch": j.target.id, "lane": j.lane.name, "key": j.key, "error": err}
        for j, err in outcome.failed
    ]
    data = {
        "cache": getattr(store, "url", str(store)),
        "arches": [t.id for t in arches],
        "lanes": sorted(plan.toolchains),
        "toolchains": {k: dict(v) for k, v in sorted(plan.toolchains.items())},
        "dry_run": dry_run,
        "planned": plan.planned,
        "to_build": len(plan.to_build),
        # Stored by this build: compiled, or from a code object already stored (same IR).
        "built": len(outcome.built) + len(outcome.reused),
        "reused": len(outcome.reused),
        # Claimed by another builder, which stored them meanwhile (cache/claims.py).
        "built_by_others": len(outcome.by_others),
        "cached": len(plan.cached),
        # stored by no build here (published, imported, fetched, legacy): compiled again and compared
        "to_verify": len(plan.to_verify),
        "verified": len(getattr(outcome, "verified", ())),
        "replaced": [{"family": j.family, "arch": j.target.id, "lane": j.lane.name, "key": j.key, "entered": e,
                      "stored_sha256": old, "built_sha256": new}
                     for j, e, old, new in getattr(outcome, "replaced", ())],
        "known_failures": [
            {"family": j.family, "arch": j.target.id, "lane": j.lane.name, "key": j.key, "error": e}
            for j, e in plan.known_failures
        ],
        "failed": failed,
        "refused": [{"reason": reason, "count": len(c), "combinations": sorted(c)} for reason, c in sorted(refused.items())],
        "skipped": [{"lane": s.lane, "reason": s.reason} for s in plan.skipped],
        # Plugins whose family did not load (not built; every other family was): rocke-aot families
        "plugin_errors": [str(e) for e in plugin_errors()],
        # build --problems: per (family, arch, lane, baked set) the workload needs, the grid's
        # admitted specs, how many serve its problems, and every refused point's reason
        "layers": [layer.as_dict() for layer in plan.layers],
        "compiles": compiles,
        "seconds": round(seconds, 3),
        "compile_seconds": round(outcome.compile_seconds, 3),
    }
    return BuildSummary(data)


def render(summary: BuildSummary, console) -> None:
    from rich.table import Table

    d = summary.data
    t = Table(title=f"rocke-aot build: {', '.join(d['arches'])}  ({d['seconds']:.1f}s)", show_header=True)
    t.add_column("outcome")
    t.add_column("count", justify="right")
    t.add_column("detail", overflow="fold")
    t.add_row("planned", str(d["planned"]), f"lanes: {', '.join(d['lanes']) or 'none'}")
    t.add_row("built", str(d["built"]), "(dry run: nothing compiled)" if d["dry_run"] else f"{d['compiles']} compiles, {d['reused']} reused code objects")
    if d["built_by_others"]:
        t.add_row("built by another builder", str(d["built_by_others"]), "claimed by them first")
    t.add_row("already cached", str(d["cached"]), d["cache"])
    if d["to_verify"]:
        t.add_row("verified", str(d["verified"]), f"of {d['to_verify']} stored by no build here: compiled again, "
                                                  "same bytes")
    for r in d["replaced"]:
        t.add_row("[red]replaced[/red]", "", f"{r['family']}/{r['arch']}/{r['lane']} {r['key'][:16]}: the stored row "
                                             f"({r['entered']}) held {r['stored_sha256'][:16]}, this build makes "
                                             f"{r['built_sha256'][:16]}")
    for f in d["known_failures"][:5]:
        t.add_row("known failure", "", f"{f['family']}/{f['arch']}/{f['lane']}: {f['error']} (--force retries)")
    if len(d["known_failures"]) > 5:
        t.add_row("known failure", str(len(d["known_failures"])), "...")
    for r in d["refused"]:
        t.add_row("refused", str(r["count"]), r["reason"])
    for f in d["failed"]:
        t.add_row("[red]failed[/red]", "", f"{f['family']}/{f['arch']}/{f['lane']}: {f['error']}")
    for s in d["skipped"]:
        t.add_row("skipped lane", "", s["reason"])
    for e in d["plugin_errors"]:
        t.add_row("[red]broken plugin[/red]", "", e)
    for layer in d.get("layers", ()):
        t.add_row("layer", str(layer["serving"]), layer_line(layer))
    console.print(t)


def layer_line(layer: dict[str, Any]) -> str:
    """One line per baked set of a --problems build: where it comes from, what was admitted, why not."""
    baked = " ".join(f"{k}={v}" for k, v in layer["baked"].items())
    where = f"{layer['family']}/{layer['arch']}/{layer['lane']}"
    if layer["reason"] and not layer["admitted"]:
        return f"{where} {baked}: refused: {layer['reason']}"
    origin = "in the default list" if layer["default"] else "new (not in the default list)"
    refused = "; ".join(f"{r['reason']} ({r['count']})" for r in layer["refused"][:2])
    more = len(layer["refused"]) - 2
    return (f"{where} {baked}: {origin}; {layer['admitted']} of {layer['points']} grid points admitted, "
            f"{layer['serving']} serve its {layer['problems']} problem(s)"
            + (f" ({layer['below_floor']} below --min-efficiency: their best specs)" if layer.get("below_floor") else "")
            + (f"; refused: {refused}" if refused else "") + (f"; {more} more reasons (--json)" if more > 0 else ""))
