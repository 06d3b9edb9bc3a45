"""Fetching one kernel from a TUF-signed store of 100,000: whole processes, CPU and peak memory.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_tuf.py --kernels 100000 --out bench/results/tuf-100k.txt

One run:
  1. a synthetic store of N kernels (key inputs that hash to their keys, a record of about
     --record-bytes each: the family's launch contract of a real gemm spec, resources,
     provenance), signed by trust/repo.py
     (python-tuf's Metadata API) into a mirror tree: metadata/ + blobs/ for the kernels asked
  2. a static HTTP server (a subprocess: http.server) that logs the bytes it sends per file
  3. whole processes, each run by GNU time (peak RSS, wall; Debian's `time`), CPU (user+sys)
     from wait4's rusage of it, to the microsecond:
       baseline      python -c pass                      (the interpreter alone)
       cold          `rocke-aot fetch --mirror URL KEY`  (a fresh host: root, timestamp, snapshot,
                                                          targets, the key's bin, the blob)
       warm          the same, ROCKE_AOT_OFFLINE=1       (what the host verified; no network: the
                                                          script's warm path, rocke_aot/warm.py)
       warm, whole command line  python full.py fetch ... (cli.main's main())  (click and the library:
                                                          what runs when the warm path steps aside;
                                                          --compare runs the other checkout so)
       warm online   the same, online                    (timestamp and next root asked, nothing else)
     and the metadata bytes a cold host downloads for 1, 10 and 100 keys, against the
     repository's size (proportional to the bins used, not to the store)
Bin counts in the same rounds (`--bits 11 --bits 13 --bits 15`): the store is signed once per
count (2**B hashed bins, each tree in --work/tree-b<B>, served under its own path by the one
server), and each round runs every row against every tree (the baselines once), the trees'
order alternating; the rows name their bin count.
The figures: median of --rounds runs each, printed as a table and written to --out. Every process
runs with its bytecode cached (PYTHONPYCACHEPREFIX under the work folder, PYTHONDONTWRITEBYTECODE
dropped), as an installed wheel's is; the baselines of a round run before its fetches.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import zstandard

from rocke_aot.cache.keys import KeyInputs, artifact_key, inputs_dict
from rocke_aot.trust import keys, repo

SERVER = r'''
import sys, os
from http.server import ThreadingHTTPServer, SimpleHTTPRequestHandler
root, log = sys.argv[1], open(sys.argv[2], "a", buffering=1)
class H(SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory=root, **k)
    def log_message(self, *a):
        pass
    def send_head(self):
        f = super().send_head()
        path = self.translate_path(self.path)
        size = os.path.getsize(path) if f is not None and os.path.isfile(path) else 0
        log.write(f"{self.path} {size}\n")
        return f
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
'''


FULL = "import sys; sys.argv[0] = 'rocke-aot'; from rocke_aot.cli.main import main; main()"


def synthetic(n: int, record_bytes: int, seed: int = 1) -> dict[str, dict]:
    """N records of real gemm specs for gfx942 (the table's, in turn), each with the launch contract
    the family's formulas give (a host checks it: variants/contract.py); the keys differ by an
    option (``variant``), so N can exceed the table's specs."""
    from rocke_aot.variants import table
    from rocke_aot.variants.contract import expected_contract

    rnd = random.Random(seed)
    toolchain = {"kind": "llvm", "version": "22.1.0", "sha256": hashlib.sha256(b"tc").hexdigest()}
    specs = [s.to_dict() for s in table.enumerate_specs("gemm", "gfx942", "llvm22")]
    launches = [expected_contract("gemm", s, "gfx942").as_dict() for s in specs]
    out = {}
    for i in range(n):
        spec, launch = specs[i % len(specs)], launches[i % len(specs)]
        ki = KeyInputs(arch="gfx942", lane="llvm22", profile="llvm22", family="gemm", spec=spec,
                       recipe_digest=hashlib.sha256(b"recipe").hexdigest(), toolchain=toolchain,
                       options={"O": 3, "variant": i})
        key = artifact_key(ki)
        size = 20000 + rnd.randrange(20000)
        meta = {"launch": launch,
                "code_object": {"vgpr": 128, "sgpr": 96, "lds": 16384, "scratch": 0, "wavefront": 64,
                                "kernel": launch["kernel"]},
                "timing_us": 12.5 + i % 7}
        prov = {"built_by": "bench", "toolchain": toolchain, "host": "builder-1", "seconds": 1.25,
                "note": "x" * max(0, record_bytes - 2000)}
        out[key] = {**inputs_dict(ki), "sha256": hashlib.sha256(f"blob{i}".encode()).hexdigest(), "size": size,
                    "ir_sha256": hashlib.sha256(f"ir{i}".encode()).hexdigest(), "metadata": meta,
                    "provenance": prov, "generation": "g-bench"}
    return out


def measure(cmd: list[str], env: dict) -> tuple[float, float, int, str]:
    """(cpu seconds, wall seconds, peak RSS KiB, stdout) of one whole process. GNU time runs it
    and reads its peak RSS (a child of this benchmark would inherit its peak RSS from the fork);
    the CPU is the rusage wait4 reports for GNU time, which holds its reaped child's (to the
    microsecond: time's own %U %S print 10 ms steps; time itself adds well under 1 ms)."""
    with tempfile.NamedTemporaryFile("r") as t, tempfile.TemporaryFile("w+") as out, \
            tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(["/usr/bin/time", "-f", "%e %M", "-o", t.name, *cmd], env=env, stdout=out, stderr=err,
                             text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"{cmd} failed ({p.returncode}): {err.read()[-2000:]}")
        wall, rss = t.read().split()[-2:]
        return ru.ru_utime + ru.ru_stime, float(wall), int(rss), out.read()


def _make_tree(args, work: Path, tree: Path, say, bits: int | None = None) -> tuple[list[str], int]:
    """Synthesize --kernels records, sign them into tree/metadata, write the asked kernels' blobs:
    (the 100 asked keys, the repository's metadata bytes)."""
    t = time.perf_counter()
    kernels = synthetic(args.kernels, args.record_bytes)
    say(f"synthetic records: {time.perf_counter() - t:.1f} s")
    for name in ("root", "release"):
        if not (work / f"{name}.key").exists():
            keys.generate(work / f"{name}.key")
    rk, rel = keys.load_private(work / "root.key"), keys.load_private(work / "release.key")
    t = time.perf_counter()
    info = repo.write(tree / "metadata", {1: repo.signed_root(1, datetime.now(timezone.utc) + timedelta(days=30),
                                                             rk, [rel.public])}, kernels, [rel],
                      bit_length=bits)
    say(f"signed: {info['bins']} bins (bit_length {info['bit_length']}), {time.perf_counter() - t:.1f} s")
    repo_bytes = sum(p.stat().st_size for p in (tree / "metadata").iterdir())
    say(f"repository metadata: {repo_bytes} bytes ({repo_bytes / args.kernels:.0f} per kernel)")
    asked = random.Random(7).sample(sorted(kernels), 100)
    (tree / "blobs").mkdir(exist_ok=True)
    cz = zstandard.ZstdCompressor()
    for key in asked:  # bytes of the signed sha256 and size (synthetic: the client checks only those)
        e = kernels[key]
        raw = hashlib.sha256(f"blob{key}".encode()).digest() * (e["size"] // 32 + 1)
        raw = raw[:e["size"]]
        e["sha256"] = hashlib.sha256(raw).hexdigest()
        (tree / "blobs" / f"{e['sha256']}.zst").write_bytes(cz.compress(raw))
    # the asked kernels' sha256 changed: sign once more (only their bins are signed again)
    info = repo.write(tree / "metadata", {1: (tree / "metadata" / "1.root.json").read_bytes()}, kernels, [rel],
                      bit_length=bits)
    say(f"re-signed the 100 asked kernels' bins: {info['bins_written']} bins written, {info['bins_kept']} kept")
    return asked, repo_bytes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", type=int, default=100_000)
    ap.add_argument("--record-bytes", type=int, default=2000, help="about this many bytes of record per kernel")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", default=None, help="keep the tree here (default: a temp dir, removed); a tree "
                    "a run left there for the same --kernels and --record-bytes is measured again, not re-signed")
    ap.add_argument("--out", default=None)
    ap.add_argument("--bits", type=int, action="append", default=None,
                    help="2**B hashed bins (default: trust/repo.py's count for --kernels); repeated: one signed tree "
                         "per count, all measured in the same rounds")
    ap.add_argument("--compare", default=None, metavar="DIR",
                    help="also time the warm offline fetch with the rocke_aot of this folder (another commit's: "
                         "`git archive REV rocke_aot | tar -x -C DIR`) first on PYTHONPATH, in the same rounds")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-tuf-"))
    exe = str(Path(sys.executable).with_name("rocke-aot"))
    lines = []

    def say(s: str) -> None:
        print(s, flush=True)
        lines.append(s)

    say(f"# bench_tuf {datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%SZ} kernels={args.kernels} "
        f"record_bytes~{args.record_bytes} rounds={args.rounds} python={sys.version.split()[0]} "
        f"cpus={os.cpu_count()} load={os.getloadavg()[0]:.2f}")
    work.mkdir(parents=True, exist_ok=True)
    several = args.bits is not None and len(args.bits) > 1
    trees: dict[int | None, tuple[Path, list[str], int]] = {}  # bits -> (tree, asked keys, metadata bytes)
    for bits in args.bits or [None]:
        tail = "" if bits is None else f"-b{bits}"
        made = work / f"tree-{args.kernels}-{args.record_bytes}{tail}.txt"  # the asked keys, then the repository's bytes
        tree = work / f"tree{tail}"
        if made.exists():
            *asked, size = made.read_text().split()
            repo_bytes = int(size)
            say(f"reused the signed tree in {tree} ({len(asked)} asked keys, {repo_bytes} bytes of metadata)")
        else:
            asked, repo_bytes = _make_tree(args, work, tree, say, bits)
            made.write_text("\n".join([*asked, str(repo_bytes)]) + "\n")
        trees[bits] = (tree, asked, repo_bytes)
    log = work / "served.log"
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(work), str(log)], stdout=subprocess.PIPE, text=True)
    port = int(srv.stdout.readline())
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONDONTWRITEBYTECODE"}
    # bytecode cached, as an installed wheel's is (pip compiles it): the first process writes it
    base_env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    base_env.update(ROCKE_AOT_ROOT_KEY=str(work / "root.key.pub"), ROCKE_AOT_FETCH_WORKERS="1")
    full_py = work / "full.py"  # a script (its folder is sys.path[0], as the script's is; not the cwd's rocke_aot)
    full_py.write_text(FULL + "\n")
    try:
        def fetch_cmd(url: str, key: str, full: bool = False) -> list[str]:
            # full: click and the library (cli/main.py), as the script runs when its warm path
            # (cli/entry.py, rocke_aot/warm.py) steps aside, and as a checkout without it runs
            head = [sys.executable, str(full_py)] if full else [exe]
            return [*head, "fetch", "--mirror", url, key, "-o", str(work / "out.bin"), "--json"]

        rows: dict[str, list[tuple[float, float, int]]] = {}
        inproc: dict[str, list[float]] = {}
        for r in range(args.rounds):
            env0 = {**base_env, "ROCKE_AOT_CLIENT_HOME": str(work / "host-baseline")}
            rows.setdefault("baseline: python -c pass", []).append(measure([sys.executable, "-c", "pass"], env0)[:3])
            rows.setdefault("baseline: python -c 'import rocke_aot.client'", []).append(
                measure([sys.executable, "-c", "import rocke_aot.client"], env0)[:3])
            order = list(trees.items())
            if r % 2:
                order.reverse()
            for bits, (tree, asked, _) in order:
                url = f"http://127.0.0.1:{port}/{tree.name}"
                tag = f", 2**{bits} bins" if several else ""
                home = work / f"host{r}{tree.name[4:]}"
                shutil.rmtree(home, ignore_errors=True)
                env = {**base_env, "ROCKE_AOT_CLIENT_HOME": str(home)}
                key = asked[r % len(asked)]
                log.write_text("")
                rows.setdefault(f"cold fetch (fresh host){tag}", []).append(measure(fetch_cmd(url, key), env)[:3])
                rows.setdefault(f"warm fetch, ROCKE_AOT_OFFLINE=1{tag}", []).append(
                    measure(fetch_cmd(url, key), {**env, "ROCKE_AOT_OFFLINE": "1"})[:3])
                rows.setdefault(f"warm fetch, ROCKE_AOT_OFFLINE=1, the whole command line (click, the library){tag}",
                                []).append(measure(fetch_cmd(url, key, full=True), {**env, "ROCKE_AOT_OFFLINE": "1"})[:3])
                if args.compare:
                    rows.setdefault(f"warm fetch, ROCKE_AOT_OFFLINE=1, the rocke_aot of {args.compare}{tag}", []).append(
                        measure(fetch_cmd(url, key, full=True),
                                {**env, "ROCKE_AOT_OFFLINE": "1", "PYTHONPATH": args.compare})[:3])
                    rows.setdefault(f"warm fetch, ROCKE_AOT_OFFLINE=1 (again, after it){tag}", []).append(
                        measure(fetch_cmd(url, key), {**env, "ROCKE_AOT_OFFLINE": "1"})[:3])
                rows.setdefault(f"warm fetch, online (timestamp checked){tag}", []).append(
                    measure(fetch_cmd(url, key), env)[:3])
                lib = ("import sys, time\nt = time.process_time()\nfrom rocke_aot.client.fetch import Fetcher\n"
                       "from rocke_aot.client.local import LocalStore\nt1 = time.process_time()\n"
                       "f = Fetcher([], LocalStore(sys.argv[1]), offline=True)\nk = f.get(sys.argv[2])\n"
                       "print((t1 - t) * 1000, (time.process_time() - t1) * 1000)\n")
                cpu, wall, rss, out = measure([sys.executable, "-c", lib, str(home), key],
                                              {**env, "ROCKE_AOT_OFFLINE": "1"})
                rows.setdefault(f"warm fetch, library (Fetcher.get, offline){tag}", []).append((cpu, wall, rss))
                imp, get = (float(x) for x in out.split())
                inproc.setdefault(f"import{tag}", []).append(imp)
                inproc.setdefault(f"get{tag}", []).append(get)
        say("")
        say("| whole process | CPU ms (median) | wall ms | peak RSS MiB |")
        say("| --- | --- | --- | --- |")
        for name, vals in rows.items():
            cpu = statistics.median(v[0] for v in vals) * 1000
            wall = statistics.median(v[1] for v in vals) * 1000
            rss = statistics.median(v[2] for v in vals) / 1024
            say(f"| {name} | {cpu:.1f} | {wall:.1f} | {rss:.1f} |")
        for bits in trees:
            tag = f", 2**{bits} bins" if several else ""
            say(f"in the library process (CPU ms, median{tag}): imports {statistics.median(inproc[f'import{tag}']):.1f}, "
                f"Fetcher + get (state, local bin, blob read and hashed) {statistics.median(inproc[f'get{tag}']):.1f}")
        for bits, (tree, asked, repo_bytes) in trees.items():
            url = f"http://127.0.0.1:{port}/{tree.name}"
            say("")
            what = f" (2**{bits} bins)" if several else ""
            say(f"| keys asked by a fresh host{what} | metadata bytes downloaded "
                "| bins | of the repository |")
            say("| --- | --- | --- | --- |")
            for n in (1, 10, 100):
                home = work / f"cold{n}"
                shutil.rmtree(home, ignore_errors=True)
                log.write_text("")
                code = ("import sys\nfrom rocke_aot.client import Fetcher, LocalStore, MirrorSource\n"
                        "f = Fetcher([MirrorSource(sys.argv[1])], LocalStore(sys.argv[2]))\n"
                        "f.get_many(sys.argv[3:], workers=1)\n")
                measure([sys.executable, "-c", code, url, str(home), *asked[:n]], {**base_env})
                sent = [ln.split() for ln in log.read_text().splitlines()]
                meta = sum(int(s) for p, s in sent if "/metadata/" in p)
                bins = sum(1 for p, _ in sent if "bins-" in p)
                say(f"| {n} | {meta} | {bins} | {meta / repo_bytes:.5f} |")
    finally:
        srv.terminate()
        srv.wait(10)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.out:
        append_report(args.out, lines)


def append_report(path: str, lines: list[str]) -> None:
    """The run's lines appended to the raw file ``path`` (one block per run; the benches share it)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
