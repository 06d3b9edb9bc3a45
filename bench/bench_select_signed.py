"""`rocke-aot select --mirror URL` over a signed index: whole processes, cold host and offline.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_select_signed.py --kernels 10000 --rounds 5 \
        --work /tmp/bench-sel [--compare DIR] --out bench/results/select-signed-<date>.txt

The tree is bench/bench_tuf.py's (its --work layout: a synthetic store of --kernels gemm kernels for
gfx942 signed by trust/repo.py; made here when the work folder has none, else reused), served by
Debian's nginx (tests/_nginx.py). Each round, in turn: a fresh host's
`rocke-aot select --mirror URL --arch gfx942 --family gemm --problem P --limit 3` (every bin
downloaded and verified by python-tuf, every record read, checked and ranked), then the same
with ROCKE_AOT_OFFLINE=1 (the bins that host verified, read again); with --compare, both again
with the rocke_aot of DIR first on PYTHONPATH (another commit's: `git archive REV rocke_aot | tar -x
-C DIR`). CPU from wait4's rusage, wall and peak RSS from GNU time (bench_tuf.measure); medians.
Every process's answer must be the first one's (the same accepted keys in the same order).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from _nginx import nginx  # noqa: E402
from bench_fetch_process import run  # noqa: E402
from bench_tuf import _make_tree, append_report, measure  # noqa: E402

FULL = "import sys; sys.argv[0] = 'rocke-aot'; from rocke_aot.cli.main import main; main()\n"
PROBLEM = '{"m":4096,"n":4096,"k":4096}'


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=10_000)
    ap.add_argument("--record-bytes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", required=True, help="bench_tuf's work folder (its tree reused, or made here)")
    ap.add_argument("--compare", default=None, metavar="DIR")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)  # nginx may run as nobody
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    head = run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent).strip()
    say(f"# bench_select_signed {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} tree={head} kernels={args.kernels} "
        f"rounds={args.rounds} python={sys.version.split()[0]} cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}")
    made = work / f"tree-{args.kernels}-{args.record_bytes}.txt"
    if made.exists():
        say(f"reused the signed tree in {work / 'tree'}")
    else:
        asked, repo_bytes = _make_tree(args, work, work / "tree", say)
        made.write_text("\n".join([*asked, str(repo_bytes)]) + "\n")
    full_py = work / "full.py"
    full_py.write_text(FULL)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPYCACHEPREFIX=str(work / "pycache"), ROCKE_AOT_ROOT_KEY=str(work / "root.key.pub"))
    exe = str(Path(sys.executable).with_name("rocke-aot"))
    rows: dict[str, list[tuple[float, float, int]]] = {}
    answer = None
    with nginx(work / "tree") as url:
        trees = [("this tree", [exe], {})]
        if args.compare:
            trees.append((f"the rocke_aot of {args.compare}", [sys.executable, str(full_py)],
                          {"PYTHONPATH": args.compare}))
        for r in range(args.rounds):
            for label, head_cmd, extra in (trees if r % 2 == 0 else trees[::-1]):
                home = work / "selhost"
                shutil.rmtree(home, ignore_errors=True)
                cmd = [*head_cmd, "select", "--mirror", url, "--arch", "gfx942", "--family", "gemm", "--problem",
                       PROBLEM, "--limit", "3", "--json"]
                for mode, more in (("cold host", {}), ("offline (ROCKE_AOT_OFFLINE=1)", {"ROCKE_AOT_OFFLINE": "1"})):
                    cpu, wall, rss, out = measure(cmd, {**env, **extra, **more, "ROCKE_AOT_CLIENT_HOME": str(home)})
                    keys = [a["key"] for a in json.loads(out)["accepted"]]
                    if answer is None:
                        answer = keys
                    if keys != answer:
                        raise SystemExit(f"{label}, {mode}: accepted {keys}, the first answer was {answer}")
                    rows.setdefault(f"{mode}, {label}", []).append((cpu, wall, rss))
    say(f"accepted (every process): {answer}")
    say("")
    say(f"| `rocke-aot select --mirror` over {args.kernels} signed kernels (median of {args.rounds}) | CPU s | wall s | "
        "peak RSS MiB |")
    say("| --- | --- | --- | --- |")
    for name, vals in sorted(rows.items()):
        say(f"| {name} | {statistics.median(v[0] for v in vals):.2f} | {statistics.median(v[1] for v in vals):.2f} | "
            f"{statistics.median(v[2] for v in vals) / 1024:.0f} |")
    if args.out:
        append_report(args.out, lines)


if __name__ == "__main__":
    main()
