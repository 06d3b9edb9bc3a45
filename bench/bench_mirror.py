"""Fetch N kernels three ways in one run: a verified static mirror on nginx, `rocke-aot serve`,
and bare nginx serving the same files with no verification at all, each WORKERS at a time.

    store: N synthetic code objects (SIZE bytes each, half random so zstd keeps ~half, the gemm
           family's real launch contract), one generation, signed (trust/release.py) and
           exported (trust/mirror.py) to a tree
    verified mirror   Fetcher([MirrorSource(nginx)], pinned key): cold = empty local store
                      (root + index + manifest once, then per kernel: GET the frame, decompress,
                      sha256 + size against the signed entry, the signed inputs hashed to the
                      key, blob + record written by rename); warm = a new Fetcher over the
                      filled local store (root + index, local reads, each verified)
    rocke-aot serve   the same Fetcher over ServiceSource (serve --trust-dir), cold and warm
    bare nginx        GET of every blobs/<sha>.zst into memory, nothing checked or kept, twice:
                      through httpx.Client (.get().content) and through an httpcore connection
                      pool (the HTTP stack the verified client's Wire uses, client/wire.py)
    one harness for every path: WORKERS threads (the client's default, Fetcher.get_many's) over
    one connection pool (as a Source has); per call latency -> p50, p99;
    kernels/s over the pass; the client process's CPU time per kernel (all its threads; not
    nginx's or the service's: the figure a busy shared machine moves least), and once per round
    that CPU split by step of a verified cold fetch (HTTP GET, decode, key check, blob file); plus Fetcher.get_many itself (cold, its own pool) and, for
    reference, the verified mirror and bare nginx one kernel at a time
    network path (--net RATE[:RTT], repeatable; needs root, i.e. CAP_NET_ADMIN): a second nginx
                      over the same tree in a network namespace the bench makes, reached over a
                      veth pair shaped by tbf to RATE in both directions (tc's units: 1gbit,
                      100mbit) instead of loopback; with RTT (e.g. 1gbit:10ms) that round trip
                      is added by a relay in front of nginx in the namespace (bench/netdelay.c,
                      built here; half of it each way), because this kernel has no netem
                      (CONFIG_NET_SCH_NETEM unset; tbf and htb are its only shapers). The
                      verified mirror (cold, warm) and both bare clients run over it in the
                      same rounds; the path's round trip is measured (median GET /healthz).
                      The namespace, the veth pair and its private /30 (10.213.x.0/30), the
                      relay and nginx are removed on exit; nothing outside this machine is
                      addressed
    each ROUNDS times, interleaved; medians of the rounds
    ratios: verified mirror (cold) kernels/s / bare nginx kernels/s, against each bare client,
            on loopback and on each network path
            (goal issue 23: >= 0.9 against "bare nginx serving the same files without
            verification"; the fair bare client is the one on the same HTTP stack, httpcore)
    --local DIR: where the hosts' local stores go (default: the bench's temp dir); the cost of
            creating a file there is part of every cold fetch (the blob file step), and on ext4
            it varies by directory (tens to hundreds of microseconds here): the bench prints it

    .venv/bin/python bench/bench_mirror.py [--kernels 300] [--size 32768] [--rounds 3] [--workers 8]
        [--net 1gbit] [--net 1gbit:10ms] [--net 100mbit] [--local DIR] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpcore
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _nginx import nginx, served_dir  # noqa: E402  (the tests' unprivileged nginx)
from _service import free_port, serve_process  # noqa: E402

from rocke_aot.cache.keys import KeyInputs  # noqa: E402
from rocke_aot.cache.store import Store  # noqa: E402
from rocke_aot.client import Fetcher, LocalStore, MirrorSource, ServiceSource  # noqa: E402
from rocke_aot.client.fetch import DEFAULT_WORKERS  # noqa: E402
from rocke_aot.launch import LaunchContract  # noqa: E402
from rocke_aot.trust import keys, mirror, repo  # noqa: E402
from rocke_aot.trust.release import release  # noqa: E402
from rocke_aot.variants.families import get_family  # noqa: E402


def fill(store: Store, n: int, size: int) -> list[str]:
    """N kernels with the gemm family's real launch contract (the record schema checks it)."""
    spec = get_family("gemm").spec_from({})
    launch = LaunchContract.build(spec.kernel_name, spec.launch_formulas(), (256, 1, 1)).as_dict()
    out = []
    for i in range(n):
        ins = KeyInputs("gfx942", "llvm22", "llvm22", "gemm", {"bench": i}, "bench-recipe",
                        {"kind": "llvmlite", "llvm": "22.1.0"}, {})
        body = os.urandom(size // 2) + bytes(size - size // 2)
        out.append(store.put(ins, body, ir_sha256="0" * 64, metadata={"launch": launch, "format": "hsaco"},
                             provenance={"bench": True}).key)
    return out


def timed(fn, items, workers: int) -> dict:
    """fn over items on a pool of ``workers`` threads (1: in turn, no pool): kernels/s over the
    whole pass, and each call's own latency (p50, p99). Every path runs through this one harness."""
    lat: list[float] = []

    def one(it):
        t = time.perf_counter()
        fn(it)
        lat.append(time.perf_counter() - t)

    c0, t0 = time.process_time(), time.perf_counter()
    if workers == 1:
        for it in items:
            one(it)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(one, items))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    lat.sort()
    return {"kernels_per_s": round(len(items) / wall, 1), "wall_s": round(wall, 4),
            "client_cpu_ms_per_kernel": round(cpu / len(items) * 1e3, 3),
            "p50_ms": round(lat[len(lat) // 2] * 1e3, 3), "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3, 3)}


class NoNetworkPath(Exception):
    """This sandbox cannot make the network path (not root, no `ip`/`tc`, or refused)."""


def _sh(*argv: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode:
        raise NoNetworkPath(f"{' '.join(argv)}: {(r.stderr or r.stdout).strip()}")


NETDELAY = Path(__file__).with_name("netdelay.c")


@contextlib.contextmanager
def network_path(spec: str, index: int, tree: Path):
    """Yield the base URL of nginx serving ``tree`` across a network path: a namespace of its own
    joined to this one by a veth pair, tbf-shaped to the spec's rate on both ends (a queue of at
    most 50 ms, a burst of 64 KiB: one GSO packet), and, for a round trip ("1gbit:10ms"), the
    bench's relay (netdelay.c) in front of nginx in that namespace holding each direction half
    of it. Everything is removed on exit, whatever happened."""
    rate, _, rtt = spec.partition(":")
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc"):
        raise NoNetworkPath("the network path needs root (CAP_NET_ADMIN) and iproute2's ip and tc")
    ns, here = f"rocke-bench-{os.getpid()}-{index}", f"rkb{os.getpid() % 100000}n{index}"
    subnet = f"10.213.{index}"
    if subnet + "." in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout:
        raise NoNetworkPath(f"{subnet}.0/30 is already in use on this machine")
    shape = ["root", "tbf", "rate", rate, "burst", "64kb", "latency", "50ms"]
    bin_dir = Path(tempfile.mkdtemp(prefix="rocke-bench-netdelay-"))
    try:
        with contextlib.ExitStack() as stack:
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", here, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _sh("ip", "addr", "add", f"{subnet}.1/30", "dev", here)
            _sh("ip", "link", "set", here, "up")
            _sh("ip", "-n", ns, "addr", "add", f"{subnet}.2/30", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("tc", "qdisc", "add", "dev", here, *shape)
            _sh("tc", "-n", ns, "qdisc", "add", "dev", "eth0", *shape)
            base = stack.enter_context(nginx(tree, host=f"{subnet}.2", netns=ns))
            if rtt:
                yield stack.enter_context(_delayed(base, ns, _milliseconds(rtt), bin_dir))
            else:
                yield base
    finally:  # deleting the namespace deletes its end of the pair, and so the pair
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", here], capture_output=True)
        shutil.rmtree(bin_dir, ignore_errors=True)


def _milliseconds(text: str) -> float:
    if not text.endswith("ms"):
        raise SystemExit(f"--net RATE:RTT takes the round trip in ms (e.g. 1gbit:10ms), got {text!r}")
    return float(text[:-2])


@contextlib.contextmanager
def _delayed(base: str, ns: str, rtt_ms: float, bin_dir: Path):
    """The base URL of netdelay (built here) relaying to ``base`` inside ``ns``, each direction
    held rtt_ms / 2; it runs as nobody, like nginx."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise NoNetworkPath("no C compiler to build bench/netdelay.c (the link's delay)")
    binary = bin_dir / "netdelay"
    _sh(cc, "-O2", "-o", str(binary), str(NETDELAY))
    bin_dir.chmod(0o755)
    host, port = base.rsplit("/", 1)[1].rsplit(":", 1)
    relay_port = free_port()
    argv = ["ip", "netns", "exec", ns, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
            str(binary), host, str(relay_port), host, port, str(round(rtt_ms * 500))]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if proc.stdout.readline().strip() != "ready":
            raise NoNetworkPath(f"netdelay did not start: {proc.stdout.read()[:500]}")
        yield f"http://{host}:{relay_port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def get_rtt_ms(base: str, n: int = 21) -> float:
    """The median time of GET /healthz (a few bytes) on a kept-alive connection, in ms: the
    path's round trip plus nginx's least work."""
    with httpcore.ConnectionPool() as pool:
        pool.request("GET", f"{base}/healthz")
        times = []
        for _ in range(n):
            t = time.perf_counter()
            assert pool.request("GET", f"{base}/healthz").status == 200
            times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1e3, 3)


def file_cost_us(where: Path, size: int, n: int = 200) -> float:
    """Client CPU of creating one blob-sized file (temp file, write, rename) under ``where``:
    the floor of the blob file step there, in microseconds."""
    d = Path(tempfile.mkdtemp(prefix="file-cost-", dir=where))
    data = os.urandom(size)
    try:
        c = time.process_time()
        for i in range(n):
            tmp, final = d / f"{i}.tmp", d / str(i)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
            os.replace(tmp, final)
        return round((time.process_time() - c) / n * 1e6, 1)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def steps(fetcher: Fetcher, ks: list[str]) -> dict:
    """One cold pass, one kernel at a time, with the client CPU of each step of a verified
    fetch added up (process_time around the step's function; ms per kernel)."""
    from rocke_aot.client import local, sources

    spent: dict[str, float] = {}
    patched = []

    def wrap(owner, name, label):
        orig = getattr(owner, name)

        def timed_step(*a, **k):
            c = time.process_time()
            try:
                return orig(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - c

        patched.append((owner, name, orig))
        setattr(owner, name, timed_step)

    wrap(sources.Source, "get", "HTTP GET (httpcore)")
    wrap(sources, "_decode_frame", "zstd decode + sha256")
    wrap(local.Kernel, "from_record", "signed inputs -> key")
    wrap(local.LocalStore, "put_blob", "blob file (write; hashed on download)")
    try:
        fetcher.accepted()
        c = time.process_time()
        for k in ks:
            fetcher.get(k)
        total = time.process_time() - c
    finally:
        for owner, name, orig in patched:
            setattr(owner, name, orig)
    out = {label: round(v / len(ks) * 1e3, 3) for label, v in spent.items()}
    out["total"] = round(total / len(ks) * 1e3, 3)
    return out


def run(n: int, size: int, rounds: int, workers: int, nets: list[str] = (), local: Path | None = None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="rocke-bench-mirror-"))
    hosts = Path(tempfile.mkdtemp(prefix="rocke-bench-hosts-", dir=local)) if local is not None else work
    www = served_dir()
    links: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    try:
        keys.generate(work / "root.key")
        keys.generate(work / "rel.key")
        rk, rel = keys.load_private(work / "root.key"), keys.load_private(work / "rel.key")
        root = {1: repo.signed_root(1, datetime.now(timezone.utc) + timedelta(days=1), rk, [rel.public])}
        with Store.open(work / "c.sqlite") as store:
            ks = fill(store, n, size)
            release(store, work / "signed", root, [rel])
            mirror.export(store, work / "signed", www / "tree")
            shas = [store.lookup_many([k])[k].sha256 for k in ks]
        pin = str(work / "root.key.pub")
        results: dict[str, list[dict]] = {}
        fresh = iter(range(1 << 30))

        def add(name, r):
            results.setdefault(name, []).append(r)

        def verified(label, src, w, suffix=""):
            local = LocalStore(hosts / f"host-{next(fresh)}")
            for state in ("cold", "warm"):
                with Fetcher([src()], local, root_key=pin) as f:
                    t = time.perf_counter()
                    f.accepted()
                    meta = time.perf_counter() - t
                    r = timed(f.get, ks, w)
                    r["metadata_s"] = round(meta, 4)
                    add(f"{label}, {state}{suffix}", r)

        def bare(base, w, suffix=""):
            with httpx.Client() as c:  # one connection pool, as a Source has
                add(f"bare nginx (no verification){suffix}",
                    timed(lambda s: c.get(f"{base}/blobs/{s}.zst").raise_for_status().content, shas, w))
            with httpcore.ConnectionPool() as pool:

                def get(s):
                    r = pool.request("GET", f"{base}/blobs/{s}.zst")
                    assert r.status == 200
                    return r.content

                add(f"bare nginx, httpcore (no verification){suffix}", timed(get, shas, w))

        with contextlib.ExitStack() as stack:
            mbase = stack.enter_context(nginx(www / "tree"))
            _, sbase = stack.enter_context(serve_process(f"sqlite:///{work / 'c.sqlite'}",
                                                         extra=["--trust-dir", str(work / "signed")]))
            for i, spec in enumerate(nets):
                try:
                    base = stack.enter_context(network_path(spec, i, www / "tree"))
                except NoNetworkPath as e:
                    skipped[spec] = str(e)
                    continue
                links[spec] = {"base": base, "rtt_ms": get_rtt_ms(base)}
            loopback_rtt = get_rtt_ms(mbase)
            for _ in range(rounds):
                for rate, link in links.items():  # the network paths: verified and bare, same workers
                    verified("verified mirror (nginx)", lambda b=link["base"]: MirrorSource(b), workers, f", {rate} link")
                    bare(link["base"], workers, f", {rate} link")
                verified("verified mirror (nginx)", lambda: MirrorSource(mbase), workers)
                verified("rocke-aot serve", lambda: ServiceSource(sbase), workers)
                bare(mbase, workers)
                # the API itself: Fetcher.get_many (its own pool), cold, for throughput
                with Fetcher([MirrorSource(mbase)], LocalStore(hosts / f"host-{next(fresh)}"), root_key=pin) as f:
                    f.accepted()
                    t = time.perf_counter()
                    got = f.get_many(ks, workers=workers)
                    wall = time.perf_counter() - t
                    assert len(got) == n
                    add("verified mirror (nginx), cold, get_many", {"kernels_per_s": round(n / wall, 1),
                                                                    "wall_s": round(wall, 4)})
                with Fetcher([MirrorSource(mbase)], LocalStore(hosts / f"host-{next(fresh)}"), root_key=pin) as f:
                    add("client CPU per step, ms per kernel (verified mirror, cold, 1 worker)", steps(f, ks))
                if workers != 1:  # one at a time, both sides, for reference
                    verified("verified mirror (nginx)", lambda: MirrorSource(mbase), 1, ", 1 worker")
                    bare(mbase, 1, ", 1 worker")
        file_us = file_cost_us(hosts, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(www, ignore_errors=True)
        if hosts != work:
            shutil.rmtree(hosts, ignore_errors=True)
    summary = {}
    for name, rs in results.items():
        summary[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    bare_w = summary["bare nginx (no verification)"]["kernels_per_s"]
    bare_core = summary["bare nginx, httpcore (no verification)"]["kernels_per_s"]
    cold = summary["verified mirror (nginx), cold"]["kernels_per_s"]
    network = {}
    for rate, link in links.items():
        suffix = f", {rate} link"
        v = summary[f"verified mirror (nginx), cold{suffix}"]["kernels_per_s"]
        bw, _, rtt = rate.partition(":")
        network[rate] = {"link": f"veth between network namespaces, tbf {bw} each way, "
                                 + (f"{rtt} round trip added (netdelay.c)" if rtt else "no added delay"),
                         "rtt_ms": link["rtt_ms"],
                         "ratio_verified_mirror_cold_over_bare_nginx":
                             round(v / summary[f"bare nginx (no verification){suffix}"]["kernels_per_s"], 3),
                         "ratio_verified_mirror_cold_over_bare_httpcore":
                             round(v / summary[f"bare nginx, httpcore (no verification){suffix}"]["kernels_per_s"], 3)}
    out = {"kernels": n, "size": size, "rounds": rounds, "workers": workers, "cpus": os.cpu_count(),
           "load_avg": os.getloadavg(), "local_stores": str(hosts), "file_create_us": file_us,
           "loopback_rtt_ms": loopback_rtt, "network": network, "network_skipped": skipped,
           "median_of_rounds": summary, "raw": results,
           "ratio_verified_mirror_cold_over_bare_nginx":
               round(cold / bare_w, 3),
           "ratio_verified_mirror_cold_over_bare_httpcore": round(cold / bare_core, 3),
           "ratio_get_many_over_bare_nginx":
               round(summary["verified mirror (nginx), cold, get_many"]["kernels_per_s"] / bare_w, 3)}
    if workers != 1:
        out["ratio_one_worker"] = round(summary["verified mirror (nginx), cold, 1 worker"]["kernels_per_s"]
                                        / summary["bare nginx (no verification), 1 worker"]["kernels_per_s"], 3)
        out["ratio_one_worker_over_bare_httpcore"] = round(
            summary["verified mirror (nginx), cold, 1 worker"]["kernels_per_s"]
            / summary["bare nginx, httpcore (no verification), 1 worker"]["kernels_per_s"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=300)
    ap.add_argument("--size", type=int, default=32768)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                    help="concurrent fetches, the same on every path (default: the client's, %(default)s)")
    ap.add_argument("--net", action="append", default=[], metavar="RATE[:RTT]",
                    help="also over a veth link shaped to RATE (tc units: 1gbit, 100mbit), with RTT ms added "
                         "(1gbit:10ms); repeatable; needs root")
    ap.add_argument("--local", type=Path, default=None, metavar="DIR",
                    help="make the hosts' local stores under DIR (default: the bench's temp dir)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = run(a.kernels, a.size, a.rounds, a.workers, a.net, a.local)
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{out['kernels']} kernels x {out['size']} bytes, {out['workers']} workers on every path, median of "
          f"{out['rounds']} rounds, {out['cpus']} cpus, load average {out['load_avg'][0]:.1f}")
    print(f"local stores under {out['local_stores']} (a blob-sized file created there: {out['file_create_us']} us "
          f"of CPU); GET /healthz on loopback: {out['loopback_rtt_ms']} ms")
    for rate, why in out["network_skipped"].items():
        print(f"network path {rate}: SKIPPED ({why})")
    print(f"{'path':48} {'kernels/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'metadata s':>11} {'client cpu ms':>14}")
    nan = float("nan")
    for name, r in out["median_of_rounds"].items():
        if "kernels_per_s" not in r:
            continue
        print(f"{name:48} {r['kernels_per_s']:10.1f} {r.get('p50_ms', nan):8.3f} {r.get('p99_ms', nan):8.3f} "
              f"{r.get('metadata_s', nan):11.4f} {r.get('client_cpu_ms_per_kernel', nan):14.3f}")
    ratio, core = out["ratio_verified_mirror_cold_over_bare_nginx"], out["ratio_verified_mirror_cold_over_bare_httpcore"]
    print(f"verified mirror (cold) / bare nginx, {out['workers']} workers each: {ratio:.3f} against bare httpx "
          f"(goal >= 0.9: {'met' if ratio >= 0.9 else 'NOT met'}), {core:.3f} against bare httpcore "
          f"(goal >= 0.9: {'met' if core >= 0.9 else 'NOT met'}); get_many / bare httpx: "
          f"{out['ratio_get_many_over_bare_nginx']:.3f}")
    for rate, r in out["network"].items():
        a, c = r["ratio_verified_mirror_cold_over_bare_nginx"], r["ratio_verified_mirror_cold_over_bare_httpcore"]
        print(f"over the {rate} link ({r['link']}; GET /healthz {r['rtt_ms']} ms): verified / bare nginx, "
              f"{out['workers']} workers each: {a:.3f} against bare httpx (goal >= 0.9: {'met' if a >= 0.9 else 'NOT met'}), "
              f"{c:.3f} against bare httpcore (goal >= 0.9: {'met' if c >= 0.9 else 'NOT met'})")
    if "ratio_one_worker" in out:
        print(f"one worker each: {out['ratio_one_worker']:.3f} against bare httpx, "
              f"{out['ratio_one_worker_over_bare_httpcore']:.3f} against bare httpcore")
    for name, r in out["median_of_rounds"].items():
        if "kernels_per_s" not in r:
            print(f"{name}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()))


if __name__ == "__main__":
    main()
