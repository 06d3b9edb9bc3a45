"""Start-up cost of the slim client and the command line, against a bare interpreter, in one run.

    for each round (interleaved, so a busy moment of the shared machine hits every command):
        python -c pass                        the reference
        python -c "import rocke_aot.client"   what a GPU host pays before its first fetch
        rocke-aot --help                      what every command pays before it starts
    each a fresh process; wall time (time.perf_counter around fork + wait) and max RSS (wait4)
    -> per command: median, min, p90 of the wall time, median RSS, and median - bare median

Goal (issue 23): the client import and --help within 0.3 s of the bare interpreter.

    .venv/bin/python bench/bench_startup.py [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
EXE = str(Path(PY).with_name("rocke-aot"))
COMMANDS = {
    "bare": [PY, "-c", "pass"],
    "import rocke_aot.client": [PY, "-c", "import rocke_aot.client"],
    "rocke-aot --help": [EXE, "--help"],
}


def run_once(argv: list[str]) -> tuple[float, int]:
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    dt = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{argv} exited {p.returncode}: {p.stderr.read().decode()[-2000:]}")
    return dt, usage.ru_maxrss  # KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for argv in COMMANDS.values():  # warm the page cache and the .pyc files first
        run_once(argv)
    times = {k: [] for k in COMMANDS}
    rss = {k: [] for k in COMMANDS}
    for _ in range(args.rounds):
        for name, argv in COMMANDS.items():
            dt, kib = run_once(argv)
            times[name].append(dt)
            rss[name].append(kib)
    bare = statistics.median(times["bare"])
    out = {"rounds": args.rounds, "python": sys.version.split()[0], "cpus": os.cpu_count(), "results": {}}
    for name in COMMANDS:
        t = sorted(times[name])
        out["results"][name] = {
            "median_s": round(statistics.median(t), 4), "min_s": round(t[0], 4),
            "p90_s": round(t[min(len(t) - 1, int(0.9 * len(t)))], 4),
            "rss_mib": round(statistics.median(rss[name]) / 1024, 1),
            "over_bare_s": round(statistics.median(t) - bare, 4),
        }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.rounds} rounds, python {out['python']}, {out['cpus']} cpus")
    print(f"{'command':28} {'median s':>9} {'min s':>7} {'p90 s':>7} {'RSS MiB':>8} {'- bare s':>9}")
    for name, r in out["results"].items():
        print(f"{name:28} {r['median_s']:9.3f} {r['min_s']:7.3f} {r['p90_s']:7.3f} {r['rss_mib']:8.1f} "
              f"{r['over_bare_s']:9.3f}")
    worst = max(r["over_bare_s"] for n, r in out["results"].items() if n != "bare")
    print(f"goal (within 0.3 s of bare): {'met' if worst <= 0.3 else 'NOT met'} (worst {worst:.3f} s)")


if __name__ == "__main__":
    main()
