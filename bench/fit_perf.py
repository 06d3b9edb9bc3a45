"""Fit the time model's per-arch constants to measured runs, and replay selection on them.

    rocke-aot bench --run-from-cache --candidates all --json (every candidate of every problem,
      timed on the device: bench/results/bench-raw/quality-*.json)            ─┐
    the cache those candidates came from (--cache: specs and code-object  ├─> rows: one per
      resources, matched by kernel name, which names one spec per family) ─┘   (problem, kernel)
        │ variants/perf.py features: the family's TileWork, tiles, groups per CU, spills
        ▼
    fit:    1. least squares on log(estimate / measured), each row weighted by
               (best time of its problem / its time)^4 so the fit cares about the fast end,
               the constants in log space (all >= 0), through perf.estimate_core itself;
            2. from there, the expected regret of the ranking itself (Powell): per problem,
               log(measured / best measured) averaged under a softmin of the estimates
               (temperature 0.05 in log time), mean over problems, each family weighing
               the same. Least squares alone fits
               times, not order; on the H200 runs step 2 took the fit-set median from 0.918 to
               0.941 and the hold-out one from 0.960 to 0.972 (docs/bench.md)
    --loo:  the same fit leaving each problem out in turn, ranking the left-out problem
    --write FILE: the constants with their provenance (variants/perf_constants/<arch>.json)
    Measured kernels the family's table no longer builds (a grid rule dropped them) are left
    out of the fit and the replay alike: both rank what the grid holds now.
    --check: no fit; replay the package's own ranking (variants/selection.rank with the
            constants it ships) over the runs: per problem, measured time of the top-ranked
            candidate vs the best measured one (the selection-quality figure of docs/bench.md)

Needs scipy for the fit (not for --check): `.venv/bin/pip install scipy`.

    .venv/bin/python bench/fit_perf.py --cache sqlite:///... --arch sm_90 bench/results/bench-raw/quality-*.json* --loo
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hashlib
import json
import statistics
import sys
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from rocke_aot.cache.store import Store
from rocke_aot.targets import Target
from rocke_aot.variants import perf, table
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank

NAMES = [f.name for f in fields(perf.PerfConstants) if f.name != "load_factor"]
START = dict(launch=5e-3, lat_sb=1e-3, lat_db=1e-3, warp_mma=1e-8, warp_fma=1e-7, thread_load=1e-6, cu_mma=1e-9,
             cu_fma=1e-8, cu_load=1e-8, cu_lds=1e-7, warp_lds=1e-6, store=1e-8, spill=1e-6, barrier=1e-5,
             cu_warp=1e-5)
WEIGHT_POWER = 4
TAU = 0.05  # softmin temperature of the regret objective, in log time
ANCHOR = 1.0  # weight of the (weighted) time fit next to the regret in step 2 (--anchor)


def load_runs(paths: list[str]) -> list[dict]:
    docs = []
    for p in paths:
        raw = Path(p).read_bytes()
        doc = json.loads(gzip.decompress(raw) if p.endswith(".gz") else raw)
        doc["_file"], doc["_sha256"] = p, hashlib.sha256(raw).hexdigest()
        docs.append(doc)
    return docs


def rows_for(store: Store, target: Target, docs: list[dict]) -> tuple[list[dict], dict]:
    """One row per measured (problem, kernel): the spec and resources from the cache."""
    by_name: dict[tuple[str, str], object] = {}
    cands: dict[str, list] = {}
    for doc in docs:
        fam = doc["family"]
        if fam not in cands:
            cands[fam] = list(store.candidates(fam, target))
            for c in cands[fam]:
                spec = get_family(fam).spec_from(dict(c.spec))
                by_name[(fam, spec.kernel_name)] = (spec, c)
    rows, missing, outside = [], set(), set()
    for doc in docs:
        fam, entry = doc["family"], get_family(doc["family"])
        grid = grid_names(fam, target)
        for pi, pr in enumerate(doc["problems"]):
            problem = entry.problem_from(pr["problem"])
            for r in pr["results"]:
                if not r.get("median_ms") or r.get("error"):
                    continue
                if r["kernel"] not in grid:  # measured, but the table no longer builds it
                    outside.add(r["kernel"])
                    continue
                got = by_name.get((fam, r["kernel"]))
                if got is None:
                    missing.add(r["kernel"])
                    continue
                spec, cand = got
                work = entry.model.work(spec, problem, target)
                eff = entry.model.efficiency(spec, problem, target.info)
                res = cand.resources
                groups = perf.resident_groups(target.info, work, res)
                rows.append(dict(family=fam, pid=f"{fam}:{doc['_file']}:{pi}", kernel=r["kernel"], ms=r["median_ms"], work=work,
                                 tiles=eff.tiles, groups=groups, spill=res.private_segment_bytes or 0))
    return rows, {"missing_kernels": sorted(missing), "outside_grid": len(outside),
                  "candidates": {f: len(v) for f, v in cands.items()}}


def grid_names(family: str, target: Target, lane: str = "llvm22") -> set[str]:
    """Kernel names of the family's current grid: runs measured before a grid rule dropped a
    variant (variants/tables/) still hold it; the fit and the replay rank what is built now."""
    return {s.kernel_name for s in table.enumerate_specs(family, target, lane)}


def arrays(rows: list[dict], cus: int) -> dict:
    w = [r["work"] for r in rows]
    a = {k: np.array(v, dtype=float) for k, v in dict(
        tiles=[r["tiles"] for r in rows], groups=[max(1, r["groups"]) for r in rows],
        steps=[x.steps for x in w], threads=[max(1, x.threads) for x in w], macs=[x.macs_per_step for x in w],
        load=[x.load_bytes_per_step for x in w], wavefronts=[x.lds_wavefronts_per_step for x in w],
        store=[x.store_bytes for x in w], matrix=[float(x.matrix) for x in w],
        double_buffer=[float(x.double_buffer) for x in w], spill=[r["spill"] for r in rows]).items()}
    a["cus"] = cus
    return a


def predict(theta: np.ndarray, a: dict, fam_idx: np.ndarray, fams: list[str]) -> np.ndarray:
    k = SimpleNamespace(**dict(zip(NAMES, np.exp(theta[:len(NAMES)]))))
    lf = np.exp(np.concatenate([[0.0], theta[len(NAMES):]]))[fam_idx]  # gemm's factor is 1
    return perf.estimate_core(k, load_factor=lf, **a)


def quality(ms: np.ndarray, score: np.ndarray, pids: np.ndarray) -> dict[str, float]:
    out = {}
    for u in dict.fromkeys(pids):
        m = pids == u
        out[u] = float(ms[m].min() / ms[m][np.argmin(score[m])])
    return out


def summary(q: dict[str, float]) -> dict[str, dict]:
    fams = sorted({u.split(":")[0] for u in q})
    out = {}
    for f in fams:
        v = [x for u, x in q.items() if u.startswith(f + ":")]
        out[f] = {"problems": len(v), "median": round(statistics.median(v), 4), "min": round(min(v), 4),
                  "below_0.7": sum(x < 0.7 for x in v)}
    return out


def shipped_start(processor: str) -> dict | None:
    """The shipped constants as a starting point (a better basin than START), read as plain
    data so a constant the model gained since they were fitted starts from START."""
    path = Path(perf.__file__).parent / "perf_constants" / f"{processor}.json"
    if not path.exists():
        return None
    got = json.loads(path.read_text())["constants"]
    return {**START, **{n: got[n] for n in NAMES if n in got}, "load_factor": got.get("load_factor", {})}


def fit(rows: list[dict], cus: int, loo: bool, start: dict | None = None,
        anchor: float = ANCHOR) -> dict:
    from scipy.optimize import least_squares, minimize

    fams = ["gemm"] + sorted({r["family"] for r in rows} - {"gemm"})
    fam_idx = np.array([fams.index(r["family"]) for r in rows])
    a = arrays(rows, cus)
    ms = np.array([r["ms"] for r in rows])
    pids = np.array([r["pid"] for r in rows])
    best = {u: ms[pids == u].min() for u in dict.fromkeys(pids)}
    weight = np.array([(best[u] / t) ** WEIGHT_POWER for u, t in zip(pids, ms)])
    theta0 = np.log(np.array([START[n] for n in NAMES] + [1.0] * (len(fams) - 1)))
    if start is not None:  # from constants fitted before (the shipped ones): a better basin
        theta0 = np.log(np.maximum(1e-15, np.array([start[n] for n in NAMES]
                                                    + [start["load_factor"].get(f, 1.0) for f in fams[1:]])))

    def resid(theta, idx):
        return (weight * np.log(predict(theta, a, fam_idx, fams) / ms))[idx]

    groups = {u: np.where(pids == u)[0] for u in dict.fromkeys(pids)}
    family_of = {u: u.split(":")[0] for u in groups}
    per_family = {f: sum(1 for u in groups if family_of[u] == f) for f in fams}

    def regret(theta, keep):
        # Each family weighs the same, its problems equally within it: the goal is per family,
        # and a family with 7 problems must not drown under one with 34 (on the H200 runs this
        # took the leave-one-out conv_direct_fwd median from 0.92 to 0.975, docs/bench.md).
        logp = np.log(predict(theta, a, fam_idx, fams))
        total, err, wsum = 0.0, 0.0, 0.0
        for u in keep:
            g, wu = groups[u], 1.0 / per_family[family_of[u]]
            w = np.exp(-(logp[g] - logp[g].min()) / TAU)
            total += wu * float(np.dot(w / w.sum(), np.log(ms[g] / ms[g].min())))
            err += wu * float(np.mean((weight[g] * (logp[g] - np.log(ms[g]))) ** 2))
            wsum += wu
        # the anchor keeps the estimates times (a user reads estimate_ms), not just an order
        return (total + anchor * err) / wsum

    def solve(mask, keep, start):
        ls = least_squares(resid, start, args=(mask,), method="trf")
        return minimize(regret, ls.x, args=(keep,), method="Powell",
                        options={"maxiter": 20000, "xtol": 1e-3, "ftol": 1e-6}).x

    x = solve(np.ones(len(rows), bool), list(groups), theta0)
    pred = predict(x, a, fam_idx, fams)
    res = {"theta": x, "fams": fams, "in_sample": summary(quality(ms, pred, pids)),
           "rmse_log": float(np.sqrt(np.mean(np.log(pred / ms) ** 2))),
           # the same, each row weighted as the fit weighs it (the fast end of each problem)
           "rmse_log_weighted": float(np.sqrt(np.sum((weight * np.log(pred / ms)) ** 2) / np.sum(weight ** 2)))}
    if loo:
        q = {}
        for u in groups:
            x2 = solve(pids != u, [v for v in groups if v != u], x)
            p2 = predict(x2, a, fam_idx, fams)
            m = pids == u
            q[u] = float(ms[m].min() / ms[m][np.argmin(p2[m])])
        res["leave_one_problem_out"] = summary(q)
        res["loo_per_problem"] = q
    return res


def check(store: Store, target: Target, docs: list[dict]) -> dict:
    """Replay the package's own ranking over the measured runs (no fit)."""
    q = {}
    for doc in docs:
        fam, entry = doc["family"], get_family(doc["family"])
        cands = list(store.candidates(fam, target))
        name_of = {c.key: entry.spec_from(dict(c.spec)).kernel_name for c in cands}
        grid = grid_names(fam, target)
        for pi, pr in enumerate(doc["problems"]):
            times = {r["kernel"]: r["median_ms"] for r in pr["results"]
                     if r.get("median_ms") and not r.get("error") and r["kernel"] in grid}
            problem = entry.problem_from(pr["problem"])
            ranking = rank([c for c in cands if name_of[c.key] in times], problem, target)
            if ranking.best is None:
                continue
            q[f"{fam}:{doc['_file']}:{pi}"] = min(times.values()) / times[name_of[ranking.best.key]]
    return {"replay": summary(q), "per_problem": q}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="bench --json reports (.json or .json.gz) with every candidate timed")
    ap.add_argument("--cache", required=True, help="the cache the candidates came from (specs, resources)")
    ap.add_argument("--arch", required=True)
    ap.add_argument("--loo", action="store_true", help="leave-one-problem-out check of the fit")
    ap.add_argument("--write", help="write the constants (with provenance) to this file")
    ap.add_argument("--check", action="store_true", help="no fit: replay the shipped ranking over the runs")
    ap.add_argument("--fresh", action="store_true", help="start the fit from generic values, not the shipped constants")
    ap.add_argument("--holdout", nargs="*", default=[], help="runs the fit never sees; their quality is reported")
    ap.add_argument("--anchor", type=float, default=ANCHOR, help="weight of the time fit next to the ranking regret")
    a = ap.parse_args()
    target = Target.parse(a.arch)
    store = Store.open(a.cache, create=False, readonly=True)
    docs = load_runs(a.runs)
    if a.check:
        print(json.dumps(check(store, target, docs), indent=2))
        return
    rows, info = rows_for(store, target, docs)
    if info["missing_kernels"]:
        sys.exit(f"{len(info['missing_kernels'])} measured kernels are not in {a.cache} "
                 f"(first: {info['missing_kernels'][:3]}): build the same grid first")
    res = fit(rows, target.info.cu_count, a.loo, None if a.fresh else shipped_start(target.processor), a.anchor)
    theta, fams = res.pop("theta"), res.pop("fams")
    hold_docs = load_runs(a.holdout)
    if hold_docs:
        hold, hinfo = rows_for(store, target, hold_docs)
        if hinfo["missing_kernels"]:
            sys.exit(f"hold-out kernels missing from {a.cache}: {hinfo['missing_kernels'][:3]}")
        fi = np.array([fams.index(r["family"]) for r in hold])
        hp = predict(theta, arrays(hold, target.info.cu_count), fi, fams)
        res["holdout"] = summary(quality(np.array([r["ms"] for r in hold]), hp, np.array([r["pid"] for r in hold])))
    consts = dict(zip(NAMES, (float(x) for x in np.exp(theta[:len(NAMES)]))))
    consts["load_factor"] = {"gemm": 1.0, **{f: float(np.exp(x)) for f, x in zip(fams[1:], theta[len(NAMES):])}}
    doc = {"processor": target.processor, "constants": consts, "fit": {
        "command": "bench/fit_perf.py " + " ".join(sys.argv[1:]), "date": dt.date.today().isoformat(),
        "rows": len(rows), "outside_grid": info["outside_grid"], "devices": sorted({d.get("device", "?") for d in docs}),
        "runs": [{"file": d["_file"], "sha256": d["_sha256"]} for d in docs],
        "holdout_runs": [{"file": d["_file"], "sha256": d["_sha256"]} for d in hold_docs], **res}}
    print(json.dumps({k: v for k, v in doc["fit"].items() if k != "loo_per_problem"} | {"constants": consts}, indent=2))
    if a.write:
        Path(a.write).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
