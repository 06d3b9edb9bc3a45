"""Select latency over a store of ~10,000 artifacts, against the bare SQL query of the same rows.

    store   every spec of the three families' tables for gfx942 (llvm24 artifacts built for
            gfx942:xnack-, to exercise target compatibility), gfx950 and gfx1250, on lanes
            llvm22 and llvm24, in two build generations each (the second made current):
            ~10,000 artifacts put through Store.put with small fake code objects (no compiler
            runs; the metadata's "code_object" section carries resources)
    timed   select(store, "gfx942:sramecc+:xnack-", family, problem) end to end (validation,
            the one query, Candidates, ranking), explain=True (every row of the processor, the
            stale and incompatible ones rejected with reasons) and explain=False (only the
            current, compatible rows: what a service answers), each against the bare SQL of the
            same rows (raw DBAPI cursor: execute + fetchall), interleaved in the same run; and
            select on a problem never asked before (explain=True): no verdict of the efficiency
            models reused (variants/selection.py keeps them per (problem, processor)); and
            explain=False right after a store change (Store's cached candidate lists dropped: the
            query, the rows, the ranking; what the first select after a build costs)
    reports p50 and p99 in ms and the ratios; the first (cold) select separately

A repeated select on an unchanged store is answered from Store's cached candidate lists and
service/selection.py's rankings (one PRAGMA read checks the store did not change).

Run:  .venv/bin/python bench/bench_select.py [--json] [--iters 200] [--url sqlite:///...]
Results and raw output go into docs/selection.md by hand; nothing here asserts anything.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _selstore import fake_inputs, put_fake  # noqa: E402

from rocke_aot.cache import db  # noqa: E402
from rocke_aot.cache.generations import generation_of  # noqa: E402
from rocke_aot.cache.selection_view import candidates_query  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402
from rocke_aot.service.selection import select  # noqa: E402
from rocke_aot.targets import Target  # noqa: E402
from rocke_aot.variants import table  # noqa: E402

DEVICE = "gfx942:sramecc+:xnack-"
ARCHES = {("gfx942", "llvm22"): "gfx942", ("gfx942", "llvm24"): "gfx942:xnack-",
          ("gfx950", "llvm22"): "gfx950", ("gfx950", "llvm24"): "gfx950",
          ("gfx1250", "llvm22"): "gfx1250", ("gfx1250", "llvm24"): "gfx1250"}
GENERATIONS = ("gen-a", "gen-b")
PROBLEMS = {
    "gemm": {"m": 4096, "n": 4096, "k": 4096, "dtype": "f16"},
    "conv_direct_fwd": {"n": 8, "h": 56, "w": 56, "c": 64, "k": 64, "r": 3, "s": 3, "stride_h": 1, "stride_w": 1,
                        "pad_h": 1, "pad_w": 1, "dtype": "f16"},
    "conv_dgrad_patch": {"n": 8, "h": 224, "w": 224, "c": 3, "k": 768, "p": 16, "dtype": "f16"},
}


def fill(store: Store) -> int:
    n = 0
    for (proc, lane), arch in ARCHES.items():
        for digest in GENERATIONS:
            for fam in table.family_names():
                for i, spec in enumerate(table.enumerate_specs(fam, proc, lane)):
                    put_fake(store, arch, lane, fam, spec.to_dict(), digest=digest,
                             vgprs=24 + 8 * (i % 20), sgprs=20 + (i % 90), lds=1024 * (i % 32), workgroup=256)
                    n += 1
                # the newest build is complete: it serves every spec
                store.complete_generation(generation_of(fake_inputs(arch, lane, fam, spec.to_dict(), digest)))
    return n


def bare(store: Store, sql: str, params: list) -> int:
    with db.read_tx(store.engine) as conn:
        cur = conn.connection.dbapi_connection.cursor()
        try:
            cur.execute(sql, params)
            return len(cur.fetchall())
        finally:
            cur.close()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--url", default=None, help="an existing store filled by a previous run (skips the fill)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rocke-bench-select-")
    url = args.url or f"sqlite:///{os.path.join(tmp, 'cache.sqlite')}"
    out: dict = {"host": platform.node(), "python": platform.python_version(), "iters": args.iters,
                 "cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()]}
    with Store.open(url) as store:
        if args.url is None:
            t = time.perf_counter()
            out["artifacts"] = fill(store)
            out["fill_s"] = round(time.perf_counter() - t, 1)
        else:
            out["artifacts"] = store.stats().artifacts
        out["generations"] = len(store.generations())
    results = {}
    for fam, problem in PROBLEMS.items():
        with Store.open(url, readonly=True) as store:  # a service replica's view
            t = time.perf_counter()
            first = select(store, DEVICE, fam, problem)
            cold = (time.perf_counter() - t) * 1e3
            # exactly the SQL select(explain=True) and select(explain=False) run (cache/selection_view.py)
            sql_all, p_all = candidates_query(store.backend, fam, Target.parse(DEVICE), compatible_only=False)
            sql_cur, p_cur = candidates_query(store.backend, fam, Target.parse(DEVICE), compatible_only=True, current_only=True)
            rows_all, rows_cur = bare(store, sql_all, p_all), bare(store, sql_cur, p_cur)
            t_sel, t_bare, t_fast, t_bare_cur, t_new, t_unc = [], [], [], [], [], []
            c_sel, c_bare, c_fast, c_bare_cur, c_new, c_unc = [], [], [], [], [], []

            def uncached():  # the first select after a store change: the candidate lists dropped
                store.selection.drop_lists()
                select(store, DEVICE, fam, problem, explain=False)
            first_dim = next(iter(problem))
            for i in range(args.iters):  # interleaved: drift on a shared machine hits all alike
                # a problem never asked before: no verdict of the efficiency models is reused
                fresh = {**problem, first_dim: problem[first_dim] + 1 + i}
                for fn, tw, tc in ((lambda: select(store, DEVICE, fam, problem), t_sel, c_sel),
                                   (lambda: bare(store, sql_all, p_all), t_bare, c_bare),
                                   (lambda: select(store, DEVICE, fam, problem, explain=False), t_fast, c_fast),
                                   (lambda: bare(store, sql_cur, p_cur), t_bare_cur, c_bare_cur),
                                   (lambda: select(store, DEVICE, fam, fresh), t_new, c_new)):
                    # wall time, and this thread's CPU time: on a loaded shared host the second
                    # leaves out the time spent waiting for a core (SQLite runs in-process)
                    c, t = time.thread_time(), time.perf_counter()
                    fn()
                    tw.append(time.perf_counter() - t)
                    tc.append(time.thread_time() - c)
            for _ in range(args.iters):  # a loop of its own: it drops every cached list of the store
                c, t = time.thread_time(), time.perf_counter()
                uncached()
                t_unc.append(time.perf_counter() - t)
                c_unc.append(time.thread_time() - c)
            fast = select(store, DEVICE, fam, problem, explain=False)
        ms = lambda xs, p: round(pct(xs, p) * 1e3, 3)  # noqa: E731
        results[fam] = {
            "rows_explain": rows_all, "rows_current": rows_cur,
            "accepted": len(first.accepted), "rejected": len(first.rejected),
            "accepted_fast": len(fast.accepted), "cold_ms": round(cold, 3),
            "select_p50_ms": ms(t_sel, 50), "select_p99_ms": ms(t_sel, 99),
            "bare_p50_ms": ms(t_bare, 50), "bare_p99_ms": ms(t_bare, 99),
            "ratio_p50": round(pct(t_sel, 50) / pct(t_bare, 50), 2),
            "fast_p50_ms": ms(t_fast, 50), "fast_p99_ms": ms(t_fast, 99),
            "bare_current_p50_ms": ms(t_bare_cur, 50), "bare_current_p99_ms": ms(t_bare_cur, 99),
            "ratio_fast_p50": round(pct(t_fast, 50) / pct(t_bare_cur, 50), 2),
            "new_problem_p50_ms": ms(t_new, 50), "new_problem_p99_ms": ms(t_new, 99),
            "cpu_new_problem_p50_ms": ms(c_new, 50),
            "uncached_p50_ms": ms(t_unc, 50), "uncached_p99_ms": ms(t_unc, 99), "cpu_uncached_p50_ms": ms(c_unc, 50),
            "cpu_select_p50_ms": ms(c_sel, 50), "cpu_bare_p50_ms": ms(c_bare, 50),
            "cpu_fast_p50_ms": ms(c_fast, 50), "cpu_bare_current_p50_ms": ms(c_bare_cur, 50),
            "cpu_ratio_p50": round(pct(c_sel, 50) / max(pct(c_bare, 50), 1e-9), 2),
            "cpu_ratio_fast_p50": round(pct(c_fast, 50) / max(pct(c_bare_cur, 50), 1e-9), 2),
        }
    out["results"] = results
    out["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"store: {out['artifacts']} artifacts, {out['generations']} generations"
          + (f" (filled in {out['fill_s']} s)" if "fill_s" in out else "") + f"; {args.iters} iterations each")
    print(f"{'family':<17} {'rows':>5} {'acc':>4} {'rej':>5} {'cold':>7} | {'select p50/p99':>15} "
          f"{'bare p50/p99':>13} {'x':>5} | {'rows':>5} {'fast p50/p99':>13} {'bare p50/p99':>13} {'x':>5}")
    for fam, r in results.items():
        print(f"{fam:<17} {r['rows_explain']:>5} {r['accepted']:>4} {r['rejected']:>5} {r['cold_ms']:>7.2f} | "
              f"{r['select_p50_ms']:>7.3f}/{r['select_p99_ms']:<7.3f} "
              f"{r['bare_p50_ms']:>6.3f}/{r['bare_p99_ms']:<6.3f} "
              f"{r['ratio_p50']:>5} | {r['rows_current']:>5} {r['fast_p50_ms']:>6.3f}/{r['fast_p99_ms']:<6.3f} "
              f"{r['bare_current_p50_ms']:>6.3f}/{r['bare_current_p99_ms']:<6.3f} {r['ratio_fast_p50']:>5}")
    print("CPU time (this thread), p50 ms:   select  bare   x  |  fast  bare   x  "
          "| new problem: wall p50/p99, CPU p50")
    for fam, r in results.items():
        print(f"  {fam:<17} {r['cpu_select_p50_ms']:>7.3f} {r['cpu_bare_p50_ms']:>6.3f} {r['cpu_ratio_p50']:>4} | "
              f"{r['cpu_fast_p50_ms']:>6.3f} {r['cpu_bare_current_p50_ms']:>6.3f} {r['cpu_ratio_fast_p50']:>4} | "
              f"{r['new_problem_p50_ms']:>7.3f}/{r['new_problem_p99_ms']:<7.3f} {r['cpu_new_problem_p50_ms']:>7.3f}")
    print("after a store change (candidate lists dropped, explain=False): wall p50/p99, CPU p50, x bare (CPU)")
    for fam, r in results.items():
        print(f"  {fam:<17} {r['uncached_p50_ms']:>7.3f}/{r['uncached_p99_ms']:<7.3f} {r['cpu_uncached_p50_ms']:>7.3f} "
              f"{r['cpu_uncached_p50_ms'] / max(r['cpu_bare_current_p50_ms'], 1e-9):>5.2f}")
    print(f"host {out['host']}: {out['cpus']} CPUs, load average {out['loadavg_start']} at start, "
          f"{out['loadavg_end']} at end")


if __name__ == "__main__":
    main()
