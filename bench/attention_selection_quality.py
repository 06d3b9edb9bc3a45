"""Selection quality of the attention ranking on recorded H100 runs, offline (no GPU): issue 38's
"best measured / top-ranked >= 0.95 median, no problem below 0.8".

    PYTHONPATH=$PWD .venv/bin/python bench/attention_selection_quality.py --order [--no-phased] \
        > bench/results/attention-selection-2026-12-06-c.txt

Reads the `rocke-aot bench --candidates all` JSON files of the H100 runs (default: RUNS below), and
for every problem re-ranks the candidates that were measured, with their recorded resources (registers,
LDS, work-groups per SM, ptxas's schedule: build-time facts of each artifact, never a time), through
the same function `select` calls (rocke_aot.variants.selection.rank on sm_90, no measurements given):

    before   the model without the native family's counts (Model.counts None: the native candidates
             ranked by efficiency, as when these runs were ranked; a Triton candidate, estimated, ahead
             of every native one in a select across both)
    after    the model of this tree (families/attention/counts.py native_counts: the hardware-fact
             model of variants/hw_model.py)

quality = the fastest measured median of the problem's candidates / the measured median of the
top-ranked one. Scopes: each run's own candidates ("native" or "triton", as that bench ranked them),
and "both" where a problem was measured for both families (their runs took place on the same kind of
H100 on the same day; the decode problems' native rows from the split-KV run, which re-measured the
earlier ones). The measured medians are read here only to score the rankings: no figure of the model
was fitted to them (its constants are variants/hw_facts/sm_90.json's).

Left out, and said so in the output: rows of the native kernel from before its K/V staging in LDS (the
names without ``_n``: no spec of this tree builds that code; their measurement is of another kernel)
and a Triton row whose spec cannot be recovered (a Triton row's JSON names its kernel function only:
the spec is the table's one whose estimate, recomputed with the row's recorded resources by the
unchanged Triton counts, equals the estimate recorded in the run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rocke_aot.candidates import Candidate, Resources, Schedule
from rocke_aot.families.attention.native import AttentionSpec
from rocke_aot.families.attention.problem import AttentionProblem
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import selection, table
from rocke_aot.variants.families import get_family

ROOT = Path(__file__).resolve().parent / "results"
RUNS = (  # (file, family, run label): later runs of a problem's native rows replace earlier ones
    ("attention-h100-2026-12-06/rest/bench-attention.json", "attention", "native call 3"),
    ("attention-h100-2026-12-06-split/bench-attention-split.json", "attention", "native split-KV call"),
    ("attention-h100-2026-12-06/bench-triton_attention.json", "triton_attention", "triton call 2"),
    ("attention-h100-2026-12-06/rest/bench-triton_attention.json", "triton_attention", "triton call 3"),
    # the reworked Triton kernel (docs/attention.md "Fourth call"): one file per problem; its rows replace
    # call 3's of the same problems (Llama and Qwen2 prefill, ViT, the decode batch)
    *((f"attention-h100-2026-12-06-tri38d/bench-triton_attention-{i}.json", "triton_attention", "triton call 4")
      for i in (0, 1, 3, 4)),
)
EXCLUDED_RUNS = {"attention-h100-2026-12-06/bench-attention.json":
                 "native call 2: only the kernel from before K/V staging in LDS (names without _n)"}
NAME = re.compile(r"^attention_(f16|bf16)_d(\d+)_(causal|full)_(mma|mfma|wmma)_w(\d)_n(\d+)"
                  r"(_varlen)?(_paged)?(_splitkv)?$")
DEVICE = Target.parse("sm_90")
LANE = get_lane("llvm22")


def native_spec(kernel: str) -> AttentionSpec | None:
    m = NAME.match(kernel)
    if m is None:
        return None
    dt, d, c, path, w, n, vl, pg, sk = m.groups()
    return AttentionSpec(dtype=dt, head_dim=int(d), causal=int(c == "causal"), warps=int(w), path=path,
                         block_n=int(n), varlen=int(bool(vl)), paged=int(bool(pg)), split_kv=int(bool(sk)))


def resources(rec: dict[str, Any] | None, schedule: bool = True) -> Resources:
    r = dict(rec or {})
    sched = r.get("schedule") if schedule else None
    return Resources(r.get("vgprs"), r.get("sgprs"), r.get("agprs"), r.get("lds_bytes"), r.get("vgpr_spills"),
                     r.get("sgpr_spills"), r.get("private_segment_bytes"), r.get("workgroup_size"),
                     r.get("occupancy"), r.get("groups_per_cu"),
                     None if sched is None else Schedule.from_dict(sched))


def candidate(key: str, family: str, spec: Any, res: Resources, triton: str | None) -> Candidate:
    return Candidate(key, "0" * 64, family, spec.to_dict(), DEVICE, LANE, "release", "recorded", True, res,
                     datetime(2026, 12, 6, tzinfo=timezone.utc), triton)


def triton_spec(row: dict[str, Any], problem: AttentionProblem, res: Resources) -> Any:
    """The table's triton_attention spec whose estimate with the row's resources is the recorded one
    (the counts as the runs had them: without the phased step, hw_model.step_terms)."""
    est = row.get("estimate_ms")
    if est is None:
        return None
    hits = []
    with phased(False):
        for i, spec in enumerate(table.enumerate_specs("triton_attention", DEVICE, LANE)):
            # a key of its own per trial: selection caches verdicts and estimates by the key
            ch = candidate(f"{row['key']}?{i}", "triton_attention", spec, res, "3.6.0")
            got = selection.rank([ch], problem, DEVICE).accepted
            if got and got[0].estimate_ms is not None and abs(got[0].estimate_ms - est) <= 1e-9 * max(1.0, est):
                hits.append(spec)
    return hits[0] if len(hits) == 1 else None


@contextmanager
def phased(on: bool | None) -> Iterator[None]:
    """Both attention families' counts with KernelCounts.phased forced to ``on`` (None: as this tree
    counts them): False is the model before the phased step (variants/hw_model.py step_terms)."""
    if on is None:
        yield
        return
    fams = [get_family(f) for f in ("attention", "triton_attention")]
    models = [f.model for f in fams]
    for fam, model in zip(fams, models):
        counts = model.counts
        object.__setattr__(fam, "model", dataclasses.replace(
            model, counts=lambda *a, _c=counts, **k: dataclasses.replace(_c(*a, **k), phased=on)))
    selection.clear_verdicts()
    try:
        yield
    finally:
        for fam, model in zip(fams, models):
            object.__setattr__(fam, "model", model)
        selection.clear_verdicts()


@contextmanager
def without_native_counts() -> Iterator[None]:
    """The model as the runs ranked: the native family without kernel counts."""
    fam = get_family("attention")
    model = fam.model
    object.__setattr__(fam, "model", dataclasses.replace(model, counts=None, reads_schedule=False))
    selection.clear_verdicts()
    try:
        yield
    finally:
        object.__setattr__(fam, "model", model)
        selection.clear_verdicts()


def label(p: AttentionProblem) -> str:
    lay = "paged" if p.paged else "dense"
    lens = "var" if p.varlen else ""
    w = f" w{p.window}" if p.window else ""
    return (f"{p.batch}x{p.seqlen_q}/{p.seqlen_k}{lens} {p.heads_q}/{p.heads_kv}h d{p.head_dim} {p.dtype} "
            f"{'causal' if p.causal else 'full'}{w} {lay}")


def load(root: Path, schedule: bool = True) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """problem JSON -> {"problem", "rows": {family: {kernel-or-key: row}}}; and what was left out."""
    problems: dict[str, dict[str, Any]] = {}
    left: list[str] = [f"{f}: {why}" for f, why in EXCLUDED_RUNS.items()]
    for rel, family, run in RUNS:
        doc = json.loads((root / rel).read_text())
        if doc.get("device", "").find("H100") < 0 or doc.get("arch") != "sm_90":
            raise SystemExit(f"{rel}: not an sm_90 H100 run ({doc.get('device')!r}, {doc.get('arch')!r})")
        for prob in doc["problems"]:
            p = AttentionProblem(**prob["problem"])
            entry = problems.setdefault(json.dumps(prob["problem"], sort_keys=True), {"problem": p, "rows": {}})
            fresh: dict[str, Any] = {}
            for r in prob["results"]:
                if r.get("error") or not r.get("verified") or r.get("median_ms") is None:
                    left.append(f"{run} {label(p)}: {r['kernel']} {r['key'][:8]} (no verified median)")
                    continue
                res = resources(r.get("resources"), schedule)
                if family == "attention":
                    spec = native_spec(r["kernel"])
                    if spec is None:
                        left.append(f"{run} {label(p)}: {r['kernel']} {r['key'][:8]} (the kernel from before K/V "
                                    f"staging in LDS: no spec of this tree)")
                        continue
                    fresh[r["kernel"]] = {**r, "spec": spec, "res": res, "family": family, "run": run}
                else:
                    spec = triton_spec(r, p, res)
                    if spec is None:
                        left.append(f"{run} {label(p)}: triton {r['key'][:8]} (spec not recovered from its "
                                    f"recorded estimate)")
                        continue
                    fresh[r["key"]] = {**r, "spec": spec, "res": res, "family": family, "run": run}
            if fresh:
                entry["rows"][family] = fresh  # a later run of the family replaces an earlier one
                entry.setdefault("recorded", {})[family] = prob.get("selection_quality")
    return problems, left


def top(rows: list[dict[str, Any]], p: AttentionProblem) -> dict[str, Any]:
    cands = [candidate(r["key"], r["family"], r["spec"], r["res"], "3.6.0" if r["family"] != "attention" else None)
             for r in rows]
    ranking = selection.rank(cands, p, DEVICE)
    if not ranking.accepted:
        raise SystemExit(f"{label(p)}: nothing accepted: {[(x.reason, x.detail) for x in ranking.rejected]}")
    first = ranking.accepted[0].candidate.key
    hit = next(r for r in rows if r["key"] == first)
    return {"row": hit, "estimate": ranking.accepted[0].estimate_ms,
            "order": [(c.candidate.key, c.estimate_ms) for c in ranking.accepted]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT, help="the bench/results folder")
    ap.add_argument("--json", type=Path, help="also write the per-problem figures here")
    ap.add_argument("--order", action="store_true", help="print every candidate's estimate and median, after")
    ap.add_argument("--no-phased", action="store_true",
                    help="the attention counts without the phased step (KernelCounts.phased: a block's matrix and "
                         "vector work one after the other): the model before it, for the comparison")
    ap.add_argument("--no-schedule", action="store_true",
                    help="drop ptxas's recorded schedule (the counts' own latencies and chain: an artifact built "
                         "without cuobjdump, or an AMD one)")
    a = ap.parse_args(argv)
    problems, left = load(a.results, not a.no_schedule)
    with phased(False if a.no_phased else None):
        return report(a, problems, left)


def report(a: argparse.Namespace, problems: dict[str, dict[str, Any]], left: list[str]) -> int:
    scopes: dict[str, list[tuple[str, float | None, float, float, str, str, str]]] = {}
    for entry in problems.values():
        p = entry["problem"]
        groups = {fam: list(rows.values()) for fam, rows in entry["rows"].items()}
        if len(groups) == 2:
            groups["both"] = [r for rows in entry["rows"].values() for r in rows.values()]
        for scope, rows in groups.items():
            if len(rows) < 2:
                continue  # one candidate: nothing to rank
            best = min(rows, key=lambda r: r["median_ms"])
            with without_native_counts():
                before = top(rows, p)
            after = top(rows, p)
            qb = best["median_ms"] / before["row"]["median_ms"]
            qa = best["median_ms"] / after["row"]["median_ms"]
            name = "native" if scope == "attention" else ("triton" if scope == "triton_attention" else "both")
            recorded = entry.get("recorded", {}).get(scope)  # the run's own figure, its old-kernel rows included
            scopes.setdefault(name, []).append((label(p), recorded, qb, qa, best["kernel"] + f" {best['median_ms']:.4f}",
                                                before["row"]["kernel"] + f" {before['row']['median_ms']:.4f}",
                                                after["row"]["kernel"] + f" {after['row']['median_ms']:.4f}"))
            if a.order:
                print(f"# {name} {label(p)}")
                by_key = {r["key"]: r for r in rows}
                for k, est in after["order"]:
                    r = by_key[k]
                    print(f"#   {r['kernel']:<52} {r['key'][:8]} est {est if est is None else round(est, 4)!s:>8} "
                          f"measured {r['median_ms']:.4f}")
    print("run: the quality the run itself recorded (its ranking over every row it measured, the kernel from\n"
          "before K/V staging included); before / after: this script's re-ranking of the rows kept (module doc)")
    print("selection quality on the recorded H100 runs (best measured / measured of the top-ranked), "
          "sm_90 facts, no measurements given to the ranking"
          + (", without ptxas's recorded schedule" if a.no_schedule else ", with each artifact's recorded schedule")
          + (", attention counts without the phased step" if a.no_phased else ""))
    out: dict[str, Any] = {}
    for name in ("native", "triton", "both"):
        rows = scopes.get(name, [])
        if not rows:
            continue
        print(f"\n== {name}: {len(rows)} problems with 2+ measured candidates")
        print(f"{'problem':<46} {'run':>6} {'before':>6} {'after':>6}  best measured | top before | top after")
        for lab, rec, qb, qa, best, tb, ta in rows:
            run = "-" if rec is None else f"{rec:.3f}"
            print(f"{lab:<46} {run:>6} {qb:6.3f} {qa:6.3f}  {best} | {tb} | {ta}")
        qb_all, qa_all = [r[2] for r in rows], [r[3] for r in rows]
        print(f"{'median':<46} {'':>6} {statistics.median(qb_all):6.3f} {statistics.median(qa_all):6.3f}")
        print(f"{'min':<46} {'':>6} {min(qb_all):6.3f} {min(qa_all):6.3f}")
        out[name] = {"problems": [dict(zip(("problem", "run", "before", "after", "best", "top_before", "top_after"), r))
                                  for r in rows],
                     "median_before": statistics.median(qb_all), "median_after": statistics.median(qa_all),
                     "min_before": min(qb_all), "min_after": min(qa_all)}
    print("\nleft out:")
    for line in left:
        print(f"  {line}")
    if a.json:
        a.json.write_text(json.dumps({**out, "left_out": left}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
