"""A fresh service's first selects of a model's shapes: what a fresh GPU host waits for in
rocke_aot.torch (its `resolve_ms` "select" part, docs/torch.md), on the CPU, this tree against
another commit's in the same rounds.

    store    the specs `rocke-aot build --problems FILE --min-efficiency F` plans for the file's
             families on --arch (every baked layer and the default grids), put into a SQLite store
             with small fake code objects (tests/_selstore.py; no compiler runs)
    timed    per round, one fresh process per tree: service/selection.py select() for every problem
             of the file, in order, once each (no ranking cached: a service that never saw them);
             the process's CPU seconds in the selects per family (time.process_time)
    reports  the median over rounds per tree and family, and the ratio this tree / --compare

Run:
    PYTHONPATH=$PWD .venv/bin/python bench/bench_first_select.py \\
        --problems bench/results/torch-h100-2026-12-06-run3/problems.json --arch sm_90 \\
        --rounds 5 --compare /tmp/base      # /tmp/base: git archive <commit> rocke_aot | tar -x -C /tmp/base
Nothing here asserts anything; raw output under bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[4])
from rocke_aot.aot.builder import Workload
from rocke_aot.cache.store import Store
from rocke_aot.service.selection import select
work = Workload(sys.argv[2], 0.0)
out = {}
with Store.open(sys.argv[1], readonly=True) as store:
    for family, problems in work.by_family.items():
        t = time.process_time()
        n, top = 0, []
        for p in problems:
            sel = select(store, sys.argv[3], family, p.__dict__)
            n += len(sel.accepted)
            top.append([c.candidate.key for c in sel.accepted[:3]])
        out[family] = {"cpu_s": time.process_time() - t, "problems": len(problems), "accepted": n, "top3": top}
print(json.dumps(out))
"""


def make_store(path: str, problems: str, arch: str, floor: float) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from _selstore import put_fake

    from rocke_aot.aot.builder import Workload
    from rocke_aot.cache.store import Store
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    work, target, sizes = Workload(problems, floor), Target.parse(arch), {}
    with Store.open(path) as store:
        for family in work.by_family:
            specs, _ = work.specs(family, target, get_lane("llvm22"))
            sizes[family] = len(specs)
            for s in specs:
                put_fake(store, target.processor, "llvm22", family, s.to_dict())
    return sizes


def child(tree: str, store: str, problems: str, arch: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = f"{tree}{os.pathsep}{ROOT / 'tests'}"
    p = subprocess.run([sys.executable, "-c", CHILD, store, problems, arch, tree], capture_output=True, text=True,
                       env=env, cwd=tempfile.gettempdir(), timeout=900)
    if p.returncode:
        raise SystemExit(f"child ({tree}) failed: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", required=True)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--min-efficiency", type=float, default=0.8, help="the build's floor (the store's specs)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--compare", help="a folder holding another commit's rocke_aot package")
    a = ap.parse_args()
    a.problems = os.path.abspath(a.problems)  # the children run elsewhere (no repository folder shadows a tree)
    trees = {"this tree": str(ROOT)}
    if a.compare:
        trees["compare"] = a.compare
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store.sqlite")
        sizes = make_store(store, a.problems, a.arch, a.min_efficiency)
        print(f"store: {json.dumps(sizes)} fake artifacts for {a.arch} (build --problems {a.problems} "
              f"--min-efficiency {a.min_efficiency}); {a.rounds} rounds, trees alternating", flush=True)
        runs: dict[str, list[dict]] = {t: [] for t in trees}
        for r in range(a.rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for t in order:
                got = child(trees[t], store, a.problems, a.arch)
                runs[t].append(got)
                print(f"round {r} {t}: " + ", ".join(f"{f} {v['cpu_s']:.3f} s ({v['problems']} problems, "
                                                     f"{v['accepted']} accepted)" for f, v in got.items()), flush=True)
    print("median CPU seconds of a fresh process's first selects:")
    fams = list(runs["this tree"][0])
    med = {t: {f: statistics.median(x[f]["cpu_s"] for x in rs) for f in fams} for t, rs in runs.items()}
    for t, m in med.items():
        print(f"  {t}: " + ", ".join(f"{f} {v:.3f}" for f, v in m.items()) + f", all {sum(m.values()):.3f}")
    if "compare" in med:
        same = all(x[f]["top3"] == y[f]["top3"] for x in runs["this tree"] for y in runs["compare"] for f in fams)
        print(f"  the same three top-ranked candidates per problem in every run of both trees: {same}")
        ratio = {f: med["this tree"][f] / med["compare"][f] for f in fams}
        total = sum(med["this tree"].values()) / sum(med["compare"].values())
        print("  this tree / compare: " + ", ".join(f"{f} {v:.2f}" for f, v in ratio.items()) + f", all {total:.2f}")


if __name__ == "__main__":
    main()
