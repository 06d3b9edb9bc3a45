"""100 kernels from nginx, whole processes: `rocke-aot fetch` (verifying, TUF) against plain httpx.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_fetch_process.py --kernels 5000 --rounds 7 \
        --out bench/results/client-raw/<date>-fetch-process.txt

One run (issue 39: "100 kernels from nginx through the verifying client >= 0.9x plain httpx
fetching the same files (whole process)"):
  1. a store of --kernels synthetic kernels (cache/store.py Store.put: real gemm specs of the
     gfx942 table, each with the launch contract the family's formulas give, as a host checks it;
     a code object of --size bytes, half random), signed and exported as docs/trust.md shows, by
     the operator's commands: `trust keygen` (root, release), `trust root`, `trust sign`,
     `mirror export` into a directory Debian's nginx serves (tests/_nginx.py, one worker)
  2. --fetch keys (100) drawn from the store; each round, interleaved, order alternating:
       plain httpx       python -c: import httpx, one httpx.Client, GET blobs/<sha256>.zst of each
                         key in turn, each written to a file; nothing checked
       plain, threads    the same GETs from 8 threads sharing one httpx.Client (8 connections): the
                         concurrent baseline for the verifying client's 8 workers
       verifying, cold   `rocke-aot fetch --mirror URL --root-key root.key.pub --from-file keys.txt`
                         into an empty local store (a fresh host: root, timestamp, snapshot,
                         targets, the bins holding the keys, every blob verified and kept);
                         once with the default workers and once with --workers 1
       baselines         python -c pass; python -c 'import httpx'
     each a whole process: CPU (user + sys) from wait4's rusage, wall, peak RSS (GNU time), as
     bench/bench_tuf.py measures them (its `measure`); bytecode cached as an installed wheel's is
  3. medians over the rounds; the ratio plain wall / verifying wall (the throughput ratio:
     >= 0.9 is the goal) and the same for CPU; plus the bytes each process downloaded (nginx's
     access log).

Bin counts in the same rounds (`--bins 7 --bins 9 --bins 11`): the store is signed once per bin
count (`trust sign --bins N`: its own keys, root and signed directory under --work, its own
exported tree and nginx), and each round runs the verifying fetch (default workers) against every
tree, interleaved with the plain processes (--workers 1 and --compare run for the first bin count only).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from _nginx import nginx, served_dir  # noqa: E402  (the tests' unprivileged nginx)
from bench_tuf import measure  # noqa: E402  (one way to time a whole process)

from rocke_aot.cache.keys import KeyInputs  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402

PLAIN = r'''
import sys
import httpx
base, out = sys.argv[1], sys.argv[2]
with httpx.Client() as c:
    for i, line in enumerate(open(sys.argv[3])):
        r = c.get(f"{base}/blobs/{line.strip()}.zst")
        r.raise_for_status()
        with open(f"{out}/{i}", "wb") as f:
            f.write(r.content)
'''

PLAIN_THREADS = r'''
import sys
from concurrent.futures import ThreadPoolExecutor
import httpx
base, out = sys.argv[1], sys.argv[2]
names = [line.strip() for line in open(sys.argv[3])]
with httpx.Client(limits=httpx.Limits(max_connections=8)) as c:
    def one(i):
        r = c.get(f"{base}/blobs/{names[i]}.zst")
        r.raise_for_status()
        with open(f"{out}/{i}", "wb") as f:
            f.write(r.content)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(len(names))))
'''

ACCESS_LOG = "access_log {log};"  # nginx's combined format: ... "GET /path HTTP/1.1" status bytes ...


def sent(log: Path) -> list[tuple[str, int]]:
    """(path, body bytes) of each request nginx logged."""
    out = []
    for ln in log.read_text().splitlines():
        f = ln.split()
        out.append((f[6], int(f[9])))
    return out


def fill(store: Store, n: int, size: int, seed: int = 1) -> list[tuple[str, str]]:
    """N kernels: real gemm specs (every arch and lane the gemm table serves, in turn: a store
    serves one kernel per spec, so N up to ~5,900), the launch contract the family's formulas
    give, --size bytes of code object (half random, so zstd keeps about half). (key, sha256) of
    each."""
    from rocke_aot.lanes import LANES, profile_of
    from rocke_aot.variants import table
    from rocke_aot.variants.contract import expected_contract

    rnd = random.Random(seed)
    toolchain = {"kind": "llvm", "version": "22.1.0", "sha256": hashlib.sha256(b"tc").hexdigest()}
    specs = []
    for arch in ("gfx942", "gfx950", "gfx90a", "gfx1250"):
        for lane in LANES:
            try:
                got = table.enumerate_specs("gemm", arch, lane.name)
            except Exception:  # a lane the arch is refused on (the table's admission)
                continue
            specs += [(arch, lane.name, s.to_dict()) for s in got]
    if n > len(specs):
        raise SystemExit(f"--kernels {n}: the gemm table serves {len(specs)} specs")
    out = []
    for i in range(n):
        arch, lane, spec = specs[i]
        launch = expected_contract("gemm", spec, arch).as_dict()
        ki = KeyInputs(arch=arch, lane=lane, profile=profile_of(lane).name, family="gemm", spec=spec,
                       recipe_digest=hashlib.sha256(b"recipe").hexdigest(), toolchain=toolchain, options={"O": 3})
        body = rnd.randbytes(size // 2) + bytes(size - size // 2)
        meta = {"launch": launch, "format": "hsaco",
                "code_object": {"vgpr": 128, "sgpr": 96, "lds": 16384, "scratch": 0, "wavefront": 64,
                                "kernel": launch["kernel"]}}
        a = store.put(ki, body, ir_sha256=hashlib.sha256(f"ir{i}".encode()).hexdigest(), metadata=meta,
                      provenance={"built_by": "bench", "host": "builder-1", "seconds": 1.25})
        out.append((a.key, a.sha256))
    return out


def run(cmd: list[str], **kw) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return r.stdout


def sign_and_export(work: Path, cache: Path, say, bins: int | None = None) -> Path:
    """The store signed and exported as docs/trust.md shows, by the operator's commands (trust
    keygen root + release, trust root, trust sign, mirror export) into a fresh directory nginx can
    read: that directory (root.key.pub, the host's pin, in ``work``); ``bins``: `trust sign --bins`
    (2**bins hashed bins; None: the command's default, about 64 kernels a bin)."""
    exe = str(Path(sys.executable).with_name("rocke-aot"))
    t = time.perf_counter()
    shutil.rmtree(work / "signed", ignore_errors=True)  # a fresh repository (its bin count is kept from DIR)
    for name in ("root.key", "root.key.pub", "release.key", "release.key.pub", "root.json"):
        (work / name).unlink(missing_ok=True)
    run([exe, "trust", "keygen", str(work / "root.key")])
    run([exe, "trust", "keygen", str(work / "release.key")])
    run([exe, "trust", "root", "--key", str(work / "root.key"), "--release", str(work / "release.key.pub"),
         "-o", str(work / "root.json")])
    run([exe, "trust", "sign", "--cache", str(cache), "--root", str(work / "root.json"), "--key",
         str(work / "release.key"), "-o", str(work / "signed"), *(["--bins", str(bins)] if bins else [])])
    tree = served_dir()
    run([exe, "mirror", "export", "--cache", str(cache), "--signed", str(work / "signed"), "--root-key",
         str(work / "root.key.pub"), "-o", str(tree)])
    meta = sum(p.stat().st_size for p in (tree / "metadata").iterdir())
    nbins = sum(1 for p in (tree / "metadata").iterdir() if ".bins-" in p.name)
    say(f"signed and exported (trust keygen, root, sign; mirror export): {time.perf_counter() - t:.1f} s; "
        f"metadata {meta} bytes in {nbins} bin files")
    return tree


def label(bins: int | None) -> str:
    return f"{2 ** bins} bins" if bins else "default bins"


def make_trees(args, work: Path, say) -> tuple[dict[int | None, Path], list[tuple[str, str]]]:
    """The store, signed and exported once per --bins (each in work/b<N>: keys, root, signed
    directory): ({bins: the served tree}, [(key, sha256)]). A tree a run left for the same
    --kernels, --size and bin count is reused."""
    made = work / "made.json"
    old = json.loads(made.read_text()) if made.exists() else None
    if not old or (old.get("n"), old.get("size")) != (args.kernels, args.size) or "trees" not in old:
        old = None
    cache = work / "cache.sqlite"
    if old is None:
        cache.unlink(missing_ok=True)
        t = time.perf_counter()
        with Store.open(f"sqlite:///{cache}") as store:
            kernels = fill(store, args.kernels, args.size)
        say(f"store: {args.kernels} kernels of {args.size} bytes, {time.perf_counter() - t:.1f} s")
        old = {"n": args.kernels, "size": args.size, "kernels": kernels, "trees": {}}
    else:
        kernels = [tuple(k) for k in old["kernels"]]
    trees: dict[int | None, Path] = {}
    for bins in args.bins:
        name = str(bins or "default")
        tree = old["trees"].get(name)
        if tree and Path(tree).is_dir() and (work / f"b{name}" / "root.key.pub").is_file():
            say(f"reused the signed tree {tree} ({label(bins)})")
        else:
            (work / f"b{name}").mkdir(exist_ok=True)
            tree = str(sign_and_export(work / f"b{name}", cache, say, bins))
            old["trees"][name] = tree
            made.write_text(json.dumps(old))
        trees[bins] = Path(tree)
    made.write_text(json.dumps(old))
    return trees, kernels


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=5000, help="kernels in the signed store")
    ap.add_argument("--fetch", type=int, default=100, help="kernels each process fetches")
    ap.add_argument("--size", type=int, default=32768, help="bytes of each code object")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--bins", type=int, action="append", default=None,
                    help="`trust sign --bins N` (2**N hashed bins; default: the command's, about 64 kernels a bin); "
                         "repeated: one signed tree per count, each fetched in the same rounds")
    ap.add_argument("--work", default=None, help="keep the store and tree here (reused by a later run with the "
                    "same --kernels and --size; default: a temp dir, removed)")
    ap.add_argument("--out", default=None, help="append the report to this file")
    ap.add_argument("--compare", default=None, metavar="DIR",
                    help="also time the verifying fetch (default workers) with the rocke_aot of this folder (another "
                         "commit's: `git archive REV rocke_aot | tar -x -C DIR`) first on PYTHONPATH, in the same rounds")
    args = ap.parse_args()
    args.bins = args.bins or [None]
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-fetch-process-"))
    work.mkdir(parents=True, exist_ok=True)
    exe = str(Path(sys.executable).with_name("rocke-aot"))
    lines: list[str] = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    head = run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent).strip()
    say(f"# bench_fetch_process {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} tree={head} kernels={args.kernels} "
        f"fetch={args.fetch} size={args.size} bins={','.join(str(b or 'default') for b in args.bins)} rounds={args.rounds} python={sys.version.split()[0]} "
        f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}")
    trees, kernels = make_trees(args, work, say)
    asked = random.Random(7).sample(kernels, args.fetch)
    (work / "keys.txt").write_text("".join(f"{k}\n" for k, _ in asked))
    (work / "blobs.txt").write_text("".join(f"{s}\n" for _, s in asked))
    plain_py = work / "plain.py"
    plain_py.write_text(PLAIN)
    threads_py = work / "plain_threads.py"
    threads_py.write_text(PLAIN_THREADS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")  # bytecode cached, as an installed wheel's is
    log = work / "access.log"
    log.touch()
    log.chmod(0o666)  # nginx may run as nobody
    os.chmod(work, 0o755)
    rows: dict[str, list[tuple[float, float, int]]] = {}
    got: dict[str, list[int]] = {}
    with contextlib.ExitStack() as stack:
        urls = {bins: stack.enter_context(nginx(tree, extra=ACCESS_LOG.format(log=log))) for bins, tree in trees.items()}
        first = args.bins[0]
        url = urls[first]  # the plain processes' (every tree holds the same blobs)

        def verifying(workers: int | None, bins: int | None = first) -> list[str]:
            home = work / "host"
            shutil.rmtree(home, ignore_errors=True)
            return [exe, "fetch", "--mirror", urls[bins], "--root-key",
                    str(work / f"b{bins or 'default'}" / "root.key.pub"), "--from-file",
                    str(work / "keys.txt"), "--local", str(home), "--json",
                    *(["--workers", str(workers)] if workers else [])]

        full_py = work / "full.py"  # a script: its folder is sys.path[0], not the cwd's rocke_aot
        full_py.write_text("import sys; sys.argv[0] = 'rocke-aot'; from rocke_aot.cli.main import main; main()\n")

        def plain(script: Path = plain_py) -> list[str]:
            out = work / "plain-out"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            return [sys.executable, str(script), url, str(out), str(work / "blobs.txt")]

        several = len(args.bins) > 1
        cases = {
            "plain httpx (GET each blob in turn, write it)": (plain, env),
            "plain httpx, 8 threads (one Client; GET each blob, write it)": (lambda: plain(threads_py), env),
        }
        for bins in args.bins:
            cases["rocke-aot fetch, cold, verifying (default workers)" + (f", {label(bins)}" if several else "")] = (
                lambda bins=bins: verifying(None, bins), env)
        cases["rocke-aot fetch, cold, verifying (--workers 1)" + (f", {label(first)}" if several else "")] = (
            lambda: verifying(1), env)
        if args.compare:
            cases[f"rocke-aot fetch, cold, verifying (default workers), the rocke_aot of {args.compare}"
                  + (f", {label(first)}" if several else "")] = (
                lambda: [sys.executable, str(full_py), *verifying(None)[1:]], {**env, "PYTHONPATH": args.compare})
        for cmd, cenv in cases.values():  # bytecode written
            measure(cmd(), cenv)
        for r in range(args.rounds):
            rows.setdefault("baseline: python -c pass", []).append(measure([sys.executable, "-c", "pass"], env)[:3])
            rows.setdefault("baseline: python -c 'import httpx'", []).append(
                measure([sys.executable, "-c", "import httpx"], env)[:3])
            order = list(cases.items())
            if r % 2:
                order.reverse()
            for name, (cmd, cenv) in order:
                c = cmd()
                log.write_text("")
                cpu, wall, rss, out = measure(c, cenv)
                if c[1] == "fetch" or c[2] == "fetch":
                    doc = json.loads(out)
                    if doc["failed"] or len(doc["kernels"]) != args.fetch:
                        raise SystemExit(f"{name}: {doc['failed'][:3]}")
                time.sleep(0.05)  # nginx's log line written
                logged = sent(log)
                got.setdefault(name, []).append(sum(b for _, b in logged))
                got.setdefault(name + " metadata", []).append(sum(b for p, b in logged if p.startswith("/metadata/")))
                rows.setdefault(name, []).append((cpu, wall, rss))
    med = {name: tuple(statistics.median(v[i] for v in vals) for i in range(3)) for name, vals in rows.items()}
    say("")
    say(f"| whole process (median of {args.rounds}) | CPU ms | wall ms | peak RSS MiB | bytes downloaded "
        "(metadata) |")
    say("| --- | --- | --- | --- | --- |")
    for name, (cpu, wall, rss) in med.items():
        b = f"{statistics.median(got[name]):.0f} ({statistics.median(got[name + ' metadata']):.0f})" \
            if name in got else ""
        say(f"| {name} | {cpu * 1e3:.1f} | {wall * 1e3:.1f} | {rss / 1024:.1f} | {b} |")
    for base, against in (("plain httpx (GET each blob in turn, write it)", "plain"),
                          ("plain httpx, 8 threads (one Client; GET each blob, write it)", "plain, 8 threads")):
        p = med[base]
        say("")
        for name in cases:
            if name.startswith("rocke-aot"):
                v = med[name]
                ratios = [pw / vw for (_, pw, _), (_, vw, _) in zip(rows[base], rows[name], strict=True)]
                say(f"{name}: throughput ratio ({against} wall / verifying wall) {p[1] / v[1]:.3f} (per round: "
                    f"{', '.join(f'{x:.2f}' for x in ratios)}); CPU ratio {p[0] / v[0]:.3f}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
        for tree in trees.values():
            shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    main()
