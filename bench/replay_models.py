"""Selection quality of the time models on measured runs: every candidate of every problem was
timed on the device (`bench --candidates all`), so any ranking can be scored on the same times.

    docs/bench-raw/h200-run{4,5,6,7}/{quality,holdout}-<family>.json[.gz]   (or --runs DIR ...)
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
    .venv/bin/python bench/replay_models.py --json --runs docs/bench-raw/h200-run6
    .venv/bin/python bench/replay_models.py --runs docs/bench-raw/h200-run{1,2,3}   # older replicates
    .venv/bin/python bench/replay_models.py --first-touch       # where the staging loads' bytes come from
    .venv/bin/python bench/replay_models.py --models hardware --facts OLD.json   # another facts file

--facts FILE: the hardware model reads FILE (a facts document, variants/hw_model.py parse_facts)
for its processor instead of variants/hw_facts/<processor>.json, in this process only: how the
"before" and sensitivity rows of docs/selection.md are scored (e.g. the paper figures of commit
cd78bb9: `git show cd78bb9:variants/hw_facts/sm_90.json > OLD.json`).

--sass-dir DIR (what-if, sm_90 conv_direct_fwd only; docs/selection.md "conv_direct_fwd: what the
counts and the chain missed"): each candidate's cubin DIR/<kernel>.cubin (compiled with `rocke-aot
compile` where missing) is read with `cuobjdump -sass` ($CUOBJDUMP, else on PATH: the
nvidia-cuda-cuobjdump wheel), and the hardware model's conv_direct_fwd counts take two numbers of
ptxas's schedule in place of their own: the global latencies a step's staging exposes (a walk of
the step up to its first barrier, a load's result ready 331 cycles after it issues, one
instruction a cycle) as serial_loads, and the compute loop's dependency chain over its
instruction count (LDS 30, HMMA 33, other 4 cycles) as a factor on the chain's own instructions.
Not the shipped model: the schedule is the compiler's, not the spec's.

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
import re
import shutil
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.targets import Target
from rocke_aot.variants import counts, hw_model, table
from rocke_aot.variants.efficiency import efficiency
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank

RAW = Path(__file__).resolve().parents[1] / "docs" / "bench-raw"
FAMILIES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")
MODELS = ("fitted", "hardware", "efficiency")
_FIELDS = set(Resources.__dataclass_fields__)


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


def replay(family: str, doc: dict, model: str, worst: list | None = None, below: float = 0.7) -> list[float]:
    """Per problem: best measured time / the measured time of rank(model=)'s first choice, over
    the candidates the family's table still builds (a grid rule may have dropped some since).
    ``worst``: gets (quality, problem, first choice, measured best) of every problem below ``below``."""
    arch = doc["arch"]
    specs = {s.kernel_name: s.to_dict() for s in table.enumerate_specs(family, arch, "llvm22")}
    entry, target = get_family(family), Target.parse(arch)
    out = []
    for pr in doc["problems"]:
        rows = [r for r in pr["results"] if r.get("median_ms") and not r.get("error") and r["kernel"] in specs]
        if not rows:
            continue
        best = rank(candidates(family, arch, rows, specs), entry.problem_from(pr["problem"]), target,
                    model=model).best
        times = {r["key"]: r["median_ms"] for r in rows}
        q = min(times.values()) / times[best.key]
        out.append(q)
        if worst is not None and q < below:
            name = {r["key"]: r["kernel"] for r in rows}
            fastest = min(rows, key=lambda r: (r["median_ms"], r["key"]))
            worst.append((q, pr["problem"], f"{name[best.key]} {times[best.key]:.4f} ms",
                          f"{fastest['kernel']} {fastest['median_ms']:.4f} ms"))
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


# cycles until a result is ready (4 otherwise); LDG: the facts' global_latency (the H200 probe's)
_SASS_LAT = {"LDG": int(hw_model.facts_for("sm_90").global_latency), "LDS": 30, "HMMA": 33}


def _sass(cubin: Path, tool: str) -> list[tuple[int, str]]:
    out = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    return [(int(m.group(1), 16), m.group(2).strip())
            for m in re.finditer(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", out, re.M)]


def _walk(body: list[tuple[int, str]], stop_at_barrier: bool) -> tuple[int, int]:
    """(cycles, instructions) of one warp through ``body``: one instruction a cycle, each waiting
    for the registers it reads (results ready _SASS_LAT cycles after their instruction)."""
    t = n = 0
    ready: dict[str, int] = {}
    for _, text in body:
        op, _, rest = re.sub(r"^@!?U?P\w+\s+", "", text).partition(" ")
        if stop_at_barrier and op.startswith("BAR"):
            break
        n += 1
        fields = [f.strip() for f in rest.split(",")] if rest else []
        dst, srcs = ([], fields) if op.startswith("ST") else (fields[:1], fields[1:])
        srcs += [f for f in dst if "[" in f]
        t = max([t + 1] + [ready.get(r, 0) for f in srcs for r in re.findall(r"\bR\d+\b", f)])
        lat = next((v for k, v in _SASS_LAT.items() if op.startswith(k)), 4)
        for f in dst:
            if "[" not in f:
                for r in re.findall(r"\bR\d+\b", f):
                    ready[r] = t + lat
    return t, n


def sass_schedule(cubin: Path, tool: str) -> dict:
    """The two numbers of --sass-dir (module doc) for one cubin."""
    ins = _sass(cubin, tool)
    back = [(int(m.group(1), 16), a) for a, text in ins
            if (m := re.search(r"BRA\s+0x([0-9a-f]+)", text)) and int(m.group(1), 16) < a]
    loops = [[x for x in ins if lo <= x[0] <= hi] for lo, hi in back]
    bar = next(a for a, text in ins if text.startswith("BAR") or " BAR" in text)
    start = min((lo for lo, hi in back if lo <= bar <= hi), default=ins[0][0])
    t, n = _walk([x for x in ins if start <= x[0] <= bar], True)
    compute = [b for b in loops if any("FFMA" in text or "HMMA" in text for _, text in b)]
    ratio = None
    if compute:
        body = [x for x in min(compute, key=len)
                if not re.sub(r"^@!?U?P\w+\s+", "", x[1]).startswith(("LDG", "BAR"))]
        ct, cn = _walk(body, False)
        ratio = ct / cn
    return {"exposed_latencies": max(0.0, (t - n) / _SASS_LAT["LDG"]), "chain_ratio": ratio}


def use_sass_schedules(runs: list[Path], sass_dir: Path) -> None:
    """Compile (where missing) and read every measured conv_direct_fwd candidate of ``runs``, and
    make the hardware model use their schedules (module doc: --sass-dir)."""
    tool = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not tool:
        raise SystemExit("--sass-dir needs cuobjdump ($CUOBJDUMP or on PATH: the nvidia-cuda-cuobjdump wheel)")
    fam = "conv_direct_fwd"
    specs = {s.kernel_name: s for s in table.enumerate_specs(fam, "sm_90", "llvm22")}
    names = sorted({r["kernel"] for run in runs for which in ("quality", "holdout")
                    if (doc := load(run, f"{which}-{fam}")) is not None and doc["arch"] == "sm_90"
                    for p in doc["problems"] for r in p["results"] if r["kernel"] in specs})
    sass_dir.mkdir(parents=True, exist_ok=True)
    sched = {}
    for name in names:
        cubin = sass_dir / f"{name}.cubin"
        if not cubin.exists():
            cli = Path(sys.executable).with_name("rocke-aot")
            subprocess.run([str(cli) if cli.exists() else "rocke-aot", "compile", "--family", fam, "--arch", "sm_90", "--lane", "llvm22",
                            "--spec", json.dumps(specs[name].to_dict()), "-o", str(cubin)], check=True,
                           capture_output=True)
        sched[name] = sass_schedule(cubin, tool)
    ratio: dict = {}
    own_counts, own_terms = counts.fwd_counts, hw_model.step_terms

    def fwd_counts(spec, p, target, banks=32):
        c = own_counts(spec, p, target, banks)
        got = sched.get(spec.kernel_name)
        if got and str(target.processor) == "sm_90":
            c = dataclasses.replace(c, serial_loads=got["exposed_latencies"])
            if got["chain_ratio"]:
                ratio[c] = got["chain_ratio"]
        return c

    def step_terms(c, groups, f, resident=None):
        t = own_terms(c, groups, f, resident)
        if c in ratio:
            t["latency"] += c.instructions * (ratio[c] - 1)
        return t

    object.__setattr__(get_family(fam).model, "counts", fwd_counts)
    hw_model.step_terms = step_terms


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
                    help="what-if: conv_direct_fwd's counts take ptxas's schedule from DIR/<kernel>.cubin (module doc)")
    ap.add_argument("--list", nargs="*", default=["fitted", "hardware"], metavar="MODEL",
                    help="the models whose problems below --below are listed (the table counts every model's)")
    a = ap.parse_args()
    if a.facts:
        facts = hw_model.parse_facts(json.loads(Path(a.facts).read_text()), a.facts)
        if not isinstance(facts, hw_model.HardwareFacts):
            raise SystemExit(f"{a.facts}: {facts.reason}")
        shipped = hw_model.facts_for
        hw_model.facts_for = lambda proc: facts if proc == facts.processor else shipped(proc)
    if a.sass_dir:
        use_sass_schedules([Path(r) for r in a.runs], Path(a.sass_dir))
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
                    q = replay(fam, doc, m, w, a.below)
                    got[m] = summary(q)
                    pooled[m] += q
                    worst[m] += [{"run": run.name, "family": fam, "set": which, "quality": round(x[0], 4),
                                  "problem": x[1], "first_choice": x[2], "best": x[3]} for x in w]
                rows.append({"run": run.name, "family": fam, "set": which, **got})
    total = {m: summary(q) for m, q in pooled.items() if q}
    if a.json:
        print(json.dumps({"rows": rows, "all": total, "below": worst}, indent=2))
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
    for m in (m for m in a.models if m in a.list):
        print(f"\n{m}: {len(worst[m])} problem measurements below {a.below}")
        for x in worst[m]:
            prob = " ".join(f"{k}={v}" for k, v in x["problem"].items() if v is not None)
            print(f"  {x['quality']:.3f}  {x['run']} {x['family']} {x['set']}  {prob}\n"
                  f"         first choice {x['first_choice']}, best {x['best']}")


if __name__ == "__main__":
    main()
