"""Host time per call of rocke_aot.torch's linear on this CPU, no GPU: a runtime whose launch does
nothing, so what is left is the dispatch itself (shape lookup, output allocation, operand layout,
pointer writes) beside torch.empty of the output alone. The GPU figure (beside a real bare launch
and a Triton JIT launch) is bench/torch_models.py overhead, run by bench/torch_device.sh.

    .venv/bin/python bench/torch_host_overhead.py [--base REV] [--rounds 7] \
        > bench/results/torch-host-overhead-<date>.txt

--base REV: the same figures for this tree's rocke_aot and REV's (git archive into a temporary
directory), one child process each, alternated for --rounds rounds (so both see the same load on
a shared box); prints each round and the medians, and new minus old. Without it: this tree only.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ("eager_us", "op_us", "launch_path_us", "empty_us")
LABELS = {"eager_us": "linear_impl (eager path)", "op_us": "torch.ops.rocke_aot.linear",
          "launch_path_us": "launch path (pointers + launch)", "empty_us": "torch.empty alone"}


def child(n: int) -> dict:
    import torch

    import rocke_aot
    import rocke_aot.torch as rt
    from rocke_aot.launch import LaunchContract
    from rocke_aot.targets import Target
    from rocke_aot.torch import ops
    from rocke_aot.variants import table

    spec = next(s for s in table.enumerate_specs("gemm", "gfx942", "llvm22")
                if s.in_dtype == "f16" and s.out_dtype == "f16")
    c = LaunchContract.build(spec.kernel_name, spec.launch_formulas(),
                             (spec.geometry(Target.parse("gfx942")).threads, 1, 1))

    class Src:
        def ranked(self, *a, **k):
            return [{"key": "k", "lane": "llvm22", "spec": spec.to_dict(), "efficiency": 1.0}]

        def load(self, key):
            return b"img", {"launch": c.as_dict()}

    class Noop:
        launches = 0

        def load(self, i): return 1
        def function(self, m, n): return 2
        def unload(self, m): pass
        def allow_dynamic_shared(self, f, n): pass

        def launch_params(self, *a):
            Noop.launches += 1

    d = rt.configure(Src(), runtime=Noop(), arch="gfx942", summary_at_exit=False)
    x, w = torch.randn(2, 1024).half(), torch.randn(256, 1024).half()  # decode-sized: m=2 n=256 k=1024

    def t(fn):
        for _ in range(200):
            fn()
        best = 1e9
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        return best

    ops.linear_impl(x, w, None)
    assert Noop.launches == 1, "the op did not reach the launch"
    path = next(v for v in d.table.values() if isinstance(v, rt.LaunchPath))
    ptrs = {"A": x.data_ptr(), "B": 1, "C": 2}
    return {"rocke_aot": os.path.dirname(rocke_aot.__file__),
            "eager_us": t(lambda: ops.linear_impl(x, w, None)),
            "op_us": t(lambda: torch.ops.rocke_aot.linear(x, w, None)),
            "launch_path_us": t(lambda: path(ptrs, 0)),
            "empty_us": t(lambda: torch.empty((2, 256), dtype=torch.float16)),
            "torch": torch.__version__}


def run_child(src: str, n: int) -> dict:
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--n", str(n)], env=env, cwd=src,
                         check=True, capture_output=True, text=True).stdout
    doc = json.loads(out.strip().splitlines()[-1])
    if os.path.realpath(doc["rocke_aot"]) != os.path.realpath(os.path.join(src, "rocke_aot")):
        raise SystemExit(f"child imported {doc['rocke_aot']}, not {src}/rocke_aot")
    return doc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--base", help="a git revision to compare with (its rocke_aot, git archive)")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.n)))
        return
    print(time.strftime("%a %b %d %H:%M:%S UTC %Y", time.gmtime()), "|", os.cpu_count(), "cpus |",
          "load average", " ".join(f"{v:.2f}" for v in os.getloadavg()))
    trees = {"new": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if a.base:
            rev = subprocess.run(["git", "rev-parse", a.base], cwd=ROOT, check=True, capture_output=True,
                                 text=True).stdout.strip()
            arc = subprocess.run(["git", "archive", rev, "rocke_aot"], cwd=ROOT, check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=arc, check=True)
            trees = {"old": tmp, "new": ROOT}
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "rocke_aot"], cwd=ROOT, capture_output=True,
                                   text=True).stdout.strip()
            print("old = rocke_aot at", rev, "| new = this tree's rocke_aot at", head,
                  "plus uncommitted changes" if dirty else "(clean)")
        rows: dict[str, list[dict]] = {k: [] for k in trees}
        for r in range(a.rounds):
            for name, src in (trees.items() if r % 2 == 0 else reversed(trees.items())):
                doc = run_child(src, a.n)
                rows[name].append(doc)
                print(f"round {r} {name}: " + " ".join(f"{f} {doc[f]:.2f}" for f in FIGURES), flush=True)
        med = {name: {f: statistics.median(d[f] for d in docs) for f in FIGURES} for name, docs in rows.items()}
        print(f"medians of {a.rounds} rounds (each figure: best of 5 x {a.n} calls), us per call:")
        for f in FIGURES:
            line = f"  {LABELS[f]:34s}" + "".join(f" {name} {med[name][f]:6.2f}" for name in trees)
            if "old" in med:
                diff = statistics.median(n[f] - o[f] for n, o in zip(rows["new"], rows["old"]))
                line += f"   new - old {med['new'][f] - med['old'][f]:+6.2f} (median of each round's: {diff:+6.2f})"
            print(line)
    print("host", platform.processor() or platform.machine(), "torch", rows["new"][0]["torch"],
          "| load average after", " ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
