"""Selection quality of the time models on measured runs: every candidate of every problem was
timed on the device (`bench --candidates all`), so any ranking can be scored on the same times.

    bench/results/bench-raw/h200-run{4,5,6,7}/{quality,holdout}-<family>.json[.gz]   (or --runs DIR ...)
        │ per problem: the measured candidates as Candidates (kernel -> spec from the family's
        │ table, the device's resources), ranked by variants/selection.rank(model=M)
        ▼
    per (run, family, set) and model: problems, median and minimum of best measured time /
    the top-ranked candidate's time, problems below 0.7, and the share whose top pick is more
    than 10% slower than the best (quality < 1/1.1, the rocBLAS/hipBLASLt default-choice
    comparisons' measure); then, per model of --list (fitted, hardware), every problem below
    --below (0.7) with its first choice and the measured best

Models: "fitted" (variants/perf_constants/sm_90.json, fitted on runs 4-5), "hardware"
(variants/hw_facts/sm_90.json: published numbers and microbenchmarks, no fitting), "efficiency"
(tile efficiency, matrix path, bytes staged per MAC, occupancy). Runs 6 and 7 are measurements
no fit has seen (taken after the fitted constants were shipped).

    .venv/bin/python bench/replay_models.py                     # the table of docs/selection.md
    .venv/bin/python bench/replay_models.py --json --runs bench/results/bench-raw/h200-run6
    .venv/bin/python bench/replay_models.py --runs bench/results/bench-raw/h200-run{1,2,3}   # older replicates
    .venv/bin/python bench/replay_models.py --first-touch       # where the staging loads' bytes come from
    .venv/bin/python bench/replay_models.py --model-error --runs bench/results/bench-raw/h200-run{18,20}   # gemm's error by warps, split
    .venv/bin/python bench/replay_models.py --models hardware --facts OLD.json   # another facts file
    .venv/bin/python bench/replay_models.py --sass-dir /tmp/sm90-cubins --runs bench/results/bench-raw/h200-run16

--facts FILE: the hardware model reads FILE (a facts document, variants/hw_model.py parse_facts)
for its processor instead of variants/hw_facts/<processor>.json, in this process only: how the
"before" and sensitivity rows of docs/selection.md are scored (e.g. the paper figures of commit
cd78bb9: `git show cd78bb9:variants/hw_facts/sm_90.json > OLD.json`).

--sass-dir DIR: the schedule the build records (aot/sass.py; docs/selection.md "Run 16 with the
schedule shipped"). Every measured sm_90 candidate of a family whose model reads_schedule
(variants/models.py: conv_direct_fwd, conv_dgrad_patch) gets the Schedule aot/sass.py read_schedule reads off
DIR/<kernel>.cubin; a missing cubin is built through the builder's own path (aot/builder/run.py
build_one, llvm22 lane; its metadata carries the schedule, as a stored artifact's does) and kept
for the next replay. The candidates are then ranked exactly as a store's are: the hardware model
takes the schedule where it is available and says "schedule: sass", else its counts ("counts",
with why). cuobjdump is found as the build finds it (ROCKE_AOT_CUOBJDUMP, this interpreter's
venv, PATH); without one every schedule is "unavailable" and the replay says so (stderr, and the
first choices' schedule lines under the table). Without --sass-dir no schedule is read at all:
the hardware model uses its counts for every family, which it also says.
--read-schedule FAMILY ... (with --sass-dir): a what-if for this process only: those families'
models read the schedule too (how gemm was evaluated, and not shipped: the same docs section).

--first-touch: per family, over every measured candidate of every problem, the share of the bytes
its staging loads copy (tiles x steps x staged bytes, variants/counts.py) that can be a first touch
of their byte, at most the problem's unique bytes over them; the rest are bytes the L2 already
held, which is why the facts' global_latency is the probe's L2-resident loaded latency
(docs/selection.md, "The L2 probe on the H200").
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from rocke_aot.candidates import Candidate, Resources, Schedule
from rocke_aot.targets import Target
from rocke_aot.variants import hw_model, table
from rocke_aot.variants.efficiency import efficiency
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank

RAW = Path(__file__).resolve().parents[1] / "bench" / "results" / "bench-raw"
FAMILIES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")
MODELS = ("fitted", "hardware", "efficiency")
_FIELDS = set(Resources.__dataclass_fields__) - {"schedule"}  # a run's resources are the device's; the schedule is read here


def load(run: Path, name: str) -> dict | None:
    for p in (run / f"{name}.json", run / f"{name}.json.gz"):
        if p.exists():
            raw = p.read_bytes()
            return json.loads(gzip.decompress(raw) if p.suffix == ".gz" else raw)
    return None


def candidates(family: str, arch: str, rows: list[dict], specs: dict[str, dict]) -> list[Candidate]:
    at = datetime(2026, 12, 3, tzinfo=timezone.utc)
    return [Candidate(r["key"], r["key"], family, specs[r["kernel"]], arch, r["lane"], "default", "g", True,
                      Resources(**{k: v for k, v in (r.get("resources") or {}).items() if k in _FIELDS}), at)
            for r in rows]


def replay(family: str, doc: dict, model: str, worst: list | None = None, below: float = 0.7,
           sched: Mapping[str, Schedule] | None = None, used: dict | None = None) -> list[float]:
    """Per problem: best measured time / the measured time of rank(model=)'s first choice, over
    the candidates the family's table still builds (a grid rule may have dropped some since).
    ``worst``: gets (quality, problem, first choice, measured best) of every problem below ``below``.
    ``sched``: kernel -> the schedule its artifact records (schedules()); ``used``: counts how many
    first choices' estimates came from "sass" and from "counts" (with the note why)."""
    arch = doc["arch"]
    specs = {s.kernel_name: s.to_dict() for s in table.enumerate_specs(family, arch, "llvm22")}
    entry, target = get_family(family), Target.parse(arch)
    out = []
    for pr in doc["problems"]:
        rows = [r for r in pr["results"] if r.get("median_ms") and not r.get("error") and r["kernel"] in specs]
        if not rows:
            continue
        best = rank(_with_schedules(family, arch, rows, specs, sched), entry.problem_from(pr["problem"]), target,
                    model=model).best
        if used is not None and best.schedule is not None:
            label = best.schedule + (f" ({best.schedule_note})" if best.schedule_note else "")
            used[label] = used.get(label, 0) + 1
        times = {r["key"]: r["median_ms"] for r in rows}
        q = min(times.values()) / times[best.key]
        out.append(q)
        if worst is not None and q < below:
            name = {r["key"]: r["kernel"] for r in rows}
            fastest = min(rows, key=lambda r: (r["median_ms"], r["key"]))
            worst.append((q, pr["problem"], f"{name[best.key]} {times[best.key]:.4f} ms",
                          f"{fastest['kernel']} {fastest['median_ms']:.4f} ms"))
    return out


def model_error(doc: dict, min_gflop: float = 2.0) -> dict[str, list[float]]:
    """gemm: measured / the hardware model's estimate of every asynchronous (cp.async pipeline)
    candidate of every problem above ``min_gflop``, grouped by warps and split (--model-error)."""
    specs = {s.kernel_name: s.to_dict() for s in table.enumerate_specs("gemm", doc["arch"], "llvm22")}
    entry, target, out = get_family("gemm"), Target.parse(doc["arch"]), {}
    for pr in doc["problems"]:
        p = pr["problem"]
        if 2 * p["m"] * p["n"] * p["k"] * (p.get("batch") or 1) < min_gflop * 1e9:
            continue
        rows = [r for r in pr["results"] if r.get("median_ms") and not r.get("error") and r["kernel"] in specs]
        times = {r["key"]: r["median_ms"] for r in rows}
        for ch in rank(candidates("gemm", doc["arch"], rows, specs), entry.problem_from(p), target,
                       model="hardware").accepted:
            if ch.spec.stages and ch.estimate_ms:
                group = f"{ch.spec.waves} warps, split {'1' if ch.spec.split_k == 1 else '2-4'}"
                out.setdefault(group, []).append(times[ch.candidate.key] / ch.estimate_ms)
    return out


def first_touch(family: str, doc: dict) -> list[float]:
    """Per measured candidate: min(1, unique bytes / bytes its staging loads copy) (module doc)."""
    arch = doc["arch"]
    specs = {s.kernel_name: s for s in table.enumerate_specs(family, arch, "llvm22")}
    entry, target = get_family(family), Target.parse(arch)
    out = []
    for pr in doc["problems"]:
        problem = entry.problem_from(pr["problem"])
        for r in pr["results"]:
            if r.get("median_ms") and not r.get("error") and r["kernel"] in specs:
                spec = specs[r["kernel"]]
                c = entry.model.counts(spec, problem, target, 32)
                staged = efficiency(spec, problem, target.info).tiles * c.steps * c.staged_bytes
                out.append(min(1.0, c.unique_bytes / staged))
    return out


def schedules(runs: list[Path], sass_dir: Path, families: tuple[str, ...], jobs: int = 4) -> dict[str, Schedule]:
    """kernel name -> ptxas's schedule as the build records it (aot/sass.py read_schedule), for every
    measured sm_90 candidate of ``families`` in ``runs``: each cubin read from DIR/<kernel>.cubin,
    built where missing through the builder's own path (aot/builder/run.py build_one, whose
    metadata carries the schedule) and kept there for the next replay."""
    import concurrent.futures
    import threading

    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.builder.run import build_one
    from rocke_aot.aot.sass import read_schedule
    from rocke_aot.lanes import get_lane

    lane, target = get_lane("llvm22"), Target.parse("sm_90")
    todo = []
    for fam in families:
        specs = {s.kernel_name: s for s in table.enumerate_specs(fam, "sm_90", "llvm22")}
        names = sorted({r["kernel"] for run in runs for which in ("quality", "holdout")
                        if (doc := load(run, f"{which}-{fam}")) is not None and doc["arch"] == "sm_90"
                        for p in doc["problems"] for r in p["results"] if r["kernel"] in specs})
        todo += [(fam, specs[n]) for n in names]
    sass_dir.mkdir(parents=True, exist_ok=True)
    tc = None
    slots = threading.Semaphore(jobs)

    def one(fam: str, spec) -> tuple[str, Schedule]:
        cubin = sass_dir / f"{spec.kernel_name}.cubin"
        if cubin.exists():
            sched = read_schedule(cubin.read_bytes(), target, spec.kernel_name)
        else:
            out = build_one(fam, spec.to_dict(), target, lane, tc, slots=slots)
            tmp = cubin.with_name(cubin.name + ".tmp")
            tmp.write_bytes(out.code_object)
            os.replace(tmp, cubin)
            sched = Schedule.from_dict(out.metadata["code_object"]["schedule"])
        return spec.kernel_name, sched

    if any(not (sass_dir / f"{s.kernel_name}.cubin").exists() for _, s in todo):
        tc = tcs.toolchain_for(get_lane(lane), Target.parse("sm_90"))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(lambda x: one(*x), todo))


def _with_schedules(family: str, arch: str, rows: list[dict], specs: dict[str, dict],
                    sched: Mapping[str, Schedule] | None) -> list[Candidate]:
    cands = candidates(family, arch, rows, specs)
    if not sched:
        return cands
    return [dataclasses.replace(c, resources=dataclasses.replace(c.resources, schedule=sched.get(r["kernel"])))
            for c, r in zip(cands, rows)]


def summary(q: list[float]) -> dict:
    return {"problems": len(q), "median": round(statistics.median(q), 4), "min": round(min(q), 4),
            "below_0.7": sum(x < 0.7 for x in q), "over_10pct_slower": round(sum(x < 1 / 1.1 for x in q) / len(q), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", nargs="*", default=[str(RAW / f"h200-run{i}") for i in (4, 5, 6, 7)])
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--below", type=float, default=0.7, help="list every problem whose quality is below this")
    ap.add_argument("--facts", default=None, metavar="FILE",
                    help="a facts file the hardware model reads for its processor instead of the shipped one")
    ap.add_argument("--first-touch", action="store_true",
                    help="per family: the share of staged bytes that can be a first touch (module doc)")
    ap.add_argument("--sass-dir", default=None, metavar="DIR",
                    help="the schedule the build records: read from DIR/<kernel>.cubin, built where missing (module doc)")
    ap.add_argument("--read-schedule", nargs="*", default=[], metavar="FAMILY",
                    help="what-if: these families' models also take the schedule (with --sass-dir; module doc)")
    ap.add_argument("--model-error", action="store_true",
                    help="gemm: measured / estimated (hardware) of the asynchronous kernels on problems above 2 GFLOP, "
                         "by warps and split (module doc)")
    ap.add_argument("--jobs", type=int, default=4, help="cubins built or read at once (--sass-dir)")
    ap.add_argument("--list", nargs="*", default=["fitted", "hardware"], metavar="MODEL",
                    help="the models whose problems below --below are listed (the table counts every model's)")
    a = ap.parse_args()
    if a.facts:
        facts = hw_model.parse_facts(json.loads(Path(a.facts).read_text()), a.facts)
        if not isinstance(facts, hw_model.HardwareFacts):
            raise SystemExit(f"{a.facts}: {facts.reason}")
        shipped = hw_model.facts_for
        hw_model.facts_for = lambda proc: facts if proc == facts.processor else shipped(proc)
    sched: dict[str, Schedule] | None = None
    for fam in a.read_schedule:  # a what-if for this process only: the shipped families say so in variants/models.py
        object.__setattr__(get_family(fam).model, "reads_schedule", True)
    if a.sass_dir:
        reading = tuple(f for f in FAMILIES if get_family(f).model.reads_schedule)
        sched = schedules([Path(r) for r in a.runs], Path(a.sass_dir), reading, a.jobs)
        missing = {s.reason for s in sched.values() if not s.available}
        print(f"schedules: {sum(s.available for s in sched.values())} of {len(sched)} {'/'.join(reading)} kernels "
              f"read off their SASS" + "".join(f"; unavailable: {r}" for r in sorted(missing)[:3]), file=sys.stderr)
    else:
        print("schedules: none (no --sass-dir): the hardware model uses its counts for every family", file=sys.stderr)
    used: dict[str, int] = {}
    if a.model_error:
        groups: dict[str, list[float]] = {}
        for run in map(Path, a.runs):
            for which in ("quality", "holdout"):
                if (doc := load(run, f"{which}-gemm")) is not None:
                    for g, v in model_error(doc).items():
                        groups.setdefault(g, []).extend(v)
        for g, v in sorted(groups.items()):
            dec = statistics.quantiles(v, n=10)
            print(f"{g:<22} {len(v):>5} candidates: measured / estimated median {statistics.median(v):.2f}, "
                  f"10-90% {dec[0]:.2f}-{dec[-1]:.2f}")
        return
    if a.first_touch:
        for fam in FAMILIES:
            shares = [x for run in map(Path, a.runs) for which in ("quality", "holdout")
                      if (doc := load(run, f"{which}-{fam}")) is not None for x in first_touch(fam, doc)]
            if shares:
                dec = statistics.quantiles(shares, n=10)
                print(f"{fam:<17} {len(shares):>6} candidates: first-touch share of staged bytes median "
                      f"{statistics.median(shares):.3f}, 90th percentile {dec[-1]:.3f}, max {max(shares):.3f}")
        return
    rows, pooled = [], {m: [] for m in a.models}
    worst: dict[str, list] = {m: [] for m in a.models}
    for run in map(Path, a.runs):
        for fam in FAMILIES:
            for which in ("quality", "holdout"):
                doc = load(run, f"{which}-{fam}")
                if doc is None:
                    continue
                got = {}
                for m in a.models:
                    w: list = []
                    q = replay(fam, doc, m, w, a.below, sched, used if m == "hardware" else None)
                    got[m] = summary(q)
                    pooled[m] += q
                    worst[m] += [{"run": run.name, "family": fam, "set": which, "quality": round(x[0], 4),
                                  "problem": x[1], "first_choice": x[2], "best": x[3]} for x in w]
                rows.append({"run": run.name, "family": fam, "set": which, **got})
    total = {m: summary(q) for m, q in pooled.items() if q}
    if a.json:
        print(json.dumps({"rows": rows, "all": total, "below": worst, "schedule_of_first_choices": used}, indent=2))
        return
    head = "  ".join(f"{m:>30}" for m in a.models)
    print(f"{'run':<10} {'family':<17} {'set':<8} {head}")
    print(f"{'':<37}" + "  ".join(f"{'median / min / <0.7 / >10%':>30}" for _ in a.models))
    for r in rows:
        cells = "  ".join(f"{r[m]['median']:>7.3f} / {r[m]['min']:.3f} / {r[m]['below_0.7']:>2} / "
                          f"{r[m]['over_10pct_slower']:>5.2f}" for m in a.models)
        print(f"{r['run']:<10} {r['family']:<17} {r['set']:<8} {cells}")
    cells = "  ".join(f"{t['median']:>7.3f} / {t['min']:.3f} / {t['below_0.7']:>2} / {t['over_10pct_slower']:>5.2f}"
                      for t in total.values())
    print(f"{'all':<37}{cells}   ({next(iter(total.values()))['problems']} problem measurements)")
    for label, n in sorted(used.items()):
        print(f"hardware model's first choices, schedule: {label}: {n}")
    for m in (m for m in a.models if m in a.list):
        print(f"\n{m}: {len(worst[m])} problem measurements below {a.below}")
        for x in worst[m]:
            prob = " ".join(f"{k}={v}" for k, v in x["problem"].items() if v is not None)
            print(f"  {x['quality']:.3f}  {x['run']} {x['family']} {x['set']}  {prob}\n"
                  f"         first choice {x['first_choice']}, best {x['best']}")


if __name__ == "__main__":
    main()
