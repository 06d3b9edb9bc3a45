"""Selection across families on an H200: the native gemm and triton_matmul from ONE prebuilt cache,
timed from the cache beside torch.matmul, and what `select --family gemm,triton_matmul` picks.

CPU side first (bench/across_h200_prepare.sh): one cache with the sm_90 native gemm (path mma,
f16 in and out) and every sm_90 triton_matmul config, built by Triton 3.6.0 (the H200's).
Then on the GPU host, from the repository root (scripts/gpu-site.sh installs the project):

    python3 bench/across_h200.py --cache .state/across-h200/cache.sqlite --out $OUT

    1. bench    `rocke-aot bench --run-from-cache --verify` of each family on the same problems
                (bench/problems/triton-h200.json: both families hold the same five shapes), the
                top --candidates of each family's own ranking, and torch.matmul beside (the
                report's vendor_ms); each output checked against the float64 reference
    2. select   per problem, `select --family gemm,triton_matmul` with the model alone
                (measured off): its top-ranked candidate, its family, and where that candidate's
                measured time stands against the best measured of both families
    3. measured the two bench reports recorded as measurements (into a copy of the cache), the
                same select again: measured times override the model, so its top must be the
                best measured candidate (checked, reported as measured_top_is_best)

Writes $OUT/across-h200.json (everything, the bench reports beside it) and prints a table per
problem: best native, best triton, torch, the model's pick (family, ms, pick/best) and the
measured pick. --no-run skips step 1 (a CPU host: steps 2 and 3 over no measurements, so the
argument parsing, the cache and the selection step can be checked without a GPU). --replay RUN_DIR
takes step 1's reports from a stored run instead, so today's model is scored on the CPU against
that run's times (pick/best per problem; the same prebuilt cache, for the keys to match):

    .venv/bin/python bench/across_h200.py --cache .state/across-h200/cache.sqlite --out /tmp/acr \
        --replay bench/results/triton-raw/h200-2026-12-04-across
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBLEMS = REPO / "bench" / "problems" / "triton-h200.json"
ARCH, LANE = "sm_90", "llvm22"
FAMILIES = ("gemm", "triton_matmul")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", required=True, help="the prebuilt cache (bench/across_h200_prepare.sh)")
    ap.add_argument("--out", required=True, help="where the report goes ($OUT on the device)")
    ap.add_argument("--problems", default=str(PROBLEMS), help="JSON {family: [problems]} holding both families")
    ap.add_argument("--candidates", type=int, default=8, help="the top N of each family's ranking are timed")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--triton-version", default="3.6.0", help="the host's Triton (only its builds are served)")
    ap.add_argument("--no-run", action="store_true", help="skip the bench (no GPU): selection only")
    ap.add_argument("--replay", metavar="RUN_DIR",
                    help="no GPU: take step 1's bench reports from a stored run (bench-<family>.json[.gz]) and "
                         "score today's selection on its times")
    args = ap.parse_args(argv)
    if args.replay and args.no_run:
        ap.error("--replay and --no-run exclude each other")
    if args.candidates < 1 or args.reps < 1:
        ap.error("--candidates and --reps must be positive")
    doc = json.loads(Path(args.problems).read_text())
    shapes = {f: [_shape(p) for p in doc.get(f, [])] for f in FAMILIES}
    if not shapes["gemm"] or shapes["gemm"] != shapes["triton_matmul"]:
        ap.error(f"{args.problems}: gemm and triton_matmul must list the same problems (m, n, k), got {shapes}")
    args.problem_list = doc["gemm"]
    return args


def _shape(p: dict) -> tuple[int, int, int]:
    return (p["m"], p["n"], p["k"])


def ra(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocke_aot.cli", *args], capture_output=True, text=True)


def bench_family(fam: str, args, cache: Path, out: Path) -> dict:
    """Step 1 for one family: its top candidates, verified, timed, torch beside."""
    rep = out / f"bench-{fam}.json"
    extra = ["--triton-version", args.triton_version] if fam.startswith("triton") else []
    t = time.time()
    r = ra("bench", "--run-from-cache", "--arch", ARCH, "--family", fam, "--problems", args.problems,
           "--cache", str(cache), "--lane", LANE, "--candidates", f"top:{args.candidates}", "--verify",
           "--reps", str(args.reps), "--out", str(rep), "--json", *extra)
    (out / f"bench-{fam}.log").write_text(r.stdout[-20000:] + r.stderr[-20000:])
    try:
        got = json.loads(rep.read_text())
    except (OSError, ValueError):
        return {"error": f"exit {r.returncode}: {r.stderr[-1500:]}", "seconds": round(time.time() - t, 1)}
    got["seconds"] = round(time.time() - t, 1)
    return got


def measured_by_key(reports: dict) -> dict[tuple, dict]:
    """{(m, n, k): {key: (family, median_ms)}} of every verified, timed result; and torch's time."""
    out: dict[tuple, dict] = {}
    for fam, rep in reports.items():
        for p in rep.get("problems", []):
            slot = out.setdefault(_shape(p["problem"]), {"runs": {}, "torch_ms": None})
            if p.get("vendor_ms"):
                slot["torch_ms"] = p["vendor_ms"]  # torch.matmul on the same problem (either report's)
            for x in p.get("results", []):
                if x.get("median_ms") is not None and x.get("verified") is not False:
                    slot["runs"][x["key"]] = (fam, x["median_ms"])
    return out


def stored_report(run_dir: Path, fam: str, work: Path) -> dict:
    """Step 1's report of ``fam`` from a stored run (plain or gzip JSON), copied as plain JSON into
    ``work`` (`measurements record` reads that copy)."""
    for name in (f"bench-{fam}.json", f"bench-{fam}.json.gz"):
        src = run_dir / name
        if src.exists():
            text = (gzip.decompress(src.read_bytes()) if name.endswith(".gz") else src.read_bytes()).decode()
            dst = work / f"bench-{fam}.json"
            dst.write_text(text)
            return {**json.loads(text), "_path": str(dst)}
    raise SystemExit(f"{run_dir}: no bench-{fam}.json[.gz]")


def select_all(cache: Path, problems: list[dict], measured: str, version: str) -> list[dict]:
    """Step 2 / 3: `select --family gemm,triton_matmul` per problem, the top row of each."""
    out = []
    for p in problems:
        r = ra("select", "--arch", ARCH, "--family", ",".join(FAMILIES), "--problem", json.dumps(p),
               "--cache", str(cache), "--lane", LANE, "--measured", measured, "--triton-version", version, "--json")
        try:
            doc = json.loads(r.stdout)
        except ValueError:
            out.append({"problem": p, "error": f"exit {r.returncode}: {r.stderr[-800:]}"})
            continue
        rows = doc["accepted"]
        out.append({"problem": p, "model": doc["model"], "accepted": len(rows),
                    "families": sorted({c["family"] for c in rows}),
                    "top": None if not rows else {k: rows[0][k] for k in ("key", "family", "basis", "estimate_ms",
                                                                         "measured_ms")}})
    return out


def record(cache: Path, reports: dict) -> dict:
    """The bench reports as measurements (rocke-aot measurements record)."""
    got = {}
    for fam, rep in reports.items():
        if "problems" not in rep:
            continue
        r = ra("measurements", "record", str(Path(rep["_path"])), "--cache", str(cache))
        got[fam] = {"rc": r.returncode, "out": (r.stdout + r.stderr)[-600:]}
    return got


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    work = Path(tempfile.mkdtemp(prefix="across-h200-"))
    cache = work / "cache.sqlite"
    shutil.copy(args.cache, cache)  # measurements are written into the copy, never into the prebuilt cache
    t0 = time.time()
    report: dict = {"arch": ARCH, "lane": LANE, "candidates": args.candidates, "reps": args.reps,
                    "triton_version": args.triton_version, "problems_file": args.problems, "bench": {}}
    if args.replay:
        for fam in FAMILIES:
            report["bench"][fam] = stored_report(Path(args.replay), fam, work)
        report["replayed"] = args.replay
    elif not args.no_run:
        for fam in FAMILIES:
            report["bench"][fam] = bench_family(fam, args, cache, out)
            report["bench"][fam]["_path"] = str(out / f"bench-{fam}.json")
    report["model_picks"] = select_all(cache, args.problem_list, "off", args.triton_version)
    report["recorded"] = record(cache, report["bench"])
    report["measured_picks"] = select_all(cache, args.problem_list, "exact", args.triton_version)
    report["rows"] = rows(report)
    report["seconds"] = round(time.time() - t0, 1)
    (out / "across-h200.json").write_text(json.dumps(report, indent=1))
    table(report)
    return 0


def rows(r: dict) -> list[dict]:
    """Per problem: best native, best triton, torch, the model's pick against the best measured."""
    runs = measured_by_key(r["bench"])
    out = []
    for mp, ms in zip(r["model_picks"], r["measured_picks"]):
        shape = _shape(mp["problem"])
        slot = runs.get(shape, {"runs": {}, "torch_ms": None})
        best = {f: min((ms_ for fam, ms_ in slot["runs"].values() if fam == f), default=None) for f in FAMILIES}
        overall = min((v for v in best.values() if v is not None), default=None)
        pick = mp.get("top") or {}
        pick_ms = slot["runs"].get(pick.get("key"), (None, None))[1]
        mtop = ms.get("top") or {}
        out.append({"shape": shape, "native_ms": best["gemm"], "triton_ms": best["triton_matmul"],
                    "torch_ms": slot["torch_ms"], "model_pick_family": pick.get("family"),
                    "model_pick_basis": pick.get("basis"), "model_pick_ms": pick_ms,
                    "pick_over_best": (pick_ms / overall) if pick_ms and overall else None,
                    "measured_pick_family": mtop.get("family"), "measured_pick_basis": mtop.get("basis"),
                    "measured_top_is_best": (slot["runs"].get(mtop.get("key"), (None, None))[1] == overall)
                    if overall is not None else None,
                    "families_ranked": mp.get("families"), "error": mp.get("error") or ms.get("error")})
    return out


def _f(v, fmt: str = ".4f") -> str:
    return "-" if v is None else format(v, fmt)


def table(r: dict) -> None:
    for fam, rep in r["bench"].items():
        print(f"bench {fam}: {rep.get('seconds')} s " + (rep["error"][:300] if "error" in rep else
                                                          json.dumps(rep.get("summary"))[:300]))
    print(f"{'m x n x k':<20} {'native ms':>10} {'triton ms':>10} {'torch ms':>9} {'model pick':<24} "
          f"{'pick ms':>9} {'pick/best':>9} {'measured pick':<24} {'=best':>5}")
    for x in r["rows"]:
        shape = "x".join(map(str, x["shape"]))
        print(f"{shape:<20} {_f(x['native_ms']):>10} {_f(x['triton_ms']):>10} {_f(x['torch_ms']):>9} "
              f"{str(x['model_pick_family']) + '/' + str(x['model_pick_basis']):<24} {_f(x['model_pick_ms']):>9} "
              f"{_f(x['pick_over_best'], '.3f'):>9} "
              f"{str(x['measured_pick_family']) + '/' + str(x['measured_pick_basis']):<24} "
              f"{str(x['measured_top_is_best']):>5}" + (f"  {x['error'][:200]}" if x["error"] else ""))
    print(f"total {r['seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
