"""Cache benchmarks (not tests): zstd level vs ratio, trained dictionaries, get latency, bulk lookup.

    corpus  ── --corpus-cache URL: code objects of a real cache (what the builder stored)
            └─ otherwise: compile small AMDGPU kernels here, llvmlite (O3 pipeline, then
               emit_object) + ld.lld -shared, for several arches x families x knob values
    1. zstd level 1..22: total ratio, compress ms/kernel, decompress us/kernel
    2. per (arch, family): a zstd dictionary trained on half of the kernels, ratio on the
       other half, with vs without (same level)
    3. a SQLite store holding the corpus: get latency (decompress + sha256, no touch and
       with touch), bulk lookup_many of 10,000 keys (half present)

Run:  .venv/bin/python bench/bench_cache.py [--json] [--per 16] [--corpus-cache URL]
The numbers go into docs/cache.md by hand; nothing here asserts anything.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import zstandard

ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1250")  # the wired AMD arches (rocke_aot/arch.py)
LLD = os.environ.get("ROCKE_AOT_LLD", "/usr/lib/llvm-22/bin/ld.lld")

# Three small kernel families, with knobs that change the generated code (unroll, loop
# trip counts, element type, work-group size), like a real variant grid does.
_HEADER = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
"""


def _gid(wg: int) -> str:
    return f"""  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %bid, {wg}
  %gid32 = add i32 %base, %tid
  %gid = zext i32 %gid32 to i64
"""


def vadd(name: str, ty: str, unroll: int, wg: int) -> str:
    op = "fadd" if ty in ("float", "half") else "add"
    body = []
    for u in range(unroll):
        body.append(f"""  %i{u} = add i64 %gid, {u * 1048576}
  %pa{u} = getelementptr {ty}, ptr addrspace(1) %a, i64 %i{u}
  %pb{u} = getelementptr {ty}, ptr addrspace(1) %b, i64 %i{u}
  %pc{u} = getelementptr {ty}, ptr addrspace(1) %c, i64 %i{u}
  %va{u} = load {ty}, ptr addrspace(1) %pa{u}
  %vb{u} = load {ty}, ptr addrspace(1) %pb{u}
  %s{u} = {op} {ty} %va{u}, %vb{u}
  store {ty} %s{u}, ptr addrspace(1) %pc{u}
""")
    return f"""{_HEADER}
define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %b, ptr addrspace(1) noalias %c) #0 {{
entry:
{_gid(wg)}{''.join(body)}  ret void
}}
attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{wg}" }}
"""


def reduce_(name: str, ty: str, trip: int, wg: int) -> str:
    op = "fadd" if ty in ("float", "half") else "add"
    zero = "0.0" if ty in ("float", "half") else "0"
    return f"""{_HEADER}
define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %a, ptr addrspace(1) noalias %out) #0 {{
entry:
{_gid(wg)}  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %loop]
  %acc = phi {ty} [{zero}, %entry], [%acc1, %loop]
  %off = mul i64 %k, 65536
  %idx = add i64 %gid, %off
  %p = getelementptr {ty}, ptr addrspace(1) %a, i64 %idx
  %v = load {ty}, ptr addrspace(1) %p
  %acc1 = {op} {ty} %acc, %v
  %k1 = add i64 %k, 1
  %done = icmp eq i64 %k1, {trip}
  br i1 %done, label %exit, label %loop
exit:
  %po = getelementptr {ty}, ptr addrspace(1) %out, i64 %gid
  store {ty} %acc1, ptr addrspace(1) %po
  ret void
}}
attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{wg}" }}
"""


def gemm(name: str, ty: str, kdim: int, wg: int) -> str:
    op_mul = "fmul" if ty in ("float", "half") else "mul"
    op_add = "fadd" if ty in ("float", "half") else "add"
    zero = "0.0" if ty in ("float", "half") else "0"
    return f"""{_HEADER}
define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %A, ptr addrspace(1) noalias %B, ptr addrspace(1) noalias %C, i64 %n) #0 {{
entry:
{_gid(wg)}  %row = udiv i64 %gid, %n
  %col = urem i64 %gid, %n
  %rowk = mul i64 %row, {kdim}
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %loop]
  %acc = phi {ty} [{zero}, %entry], [%acc1, %loop]
  %ia = add i64 %rowk, %k
  %kn = mul i64 %k, %n
  %ib = add i64 %kn, %col
  %pa = getelementptr {ty}, ptr addrspace(1) %A, i64 %ia
  %pb = getelementptr {ty}, ptr addrspace(1) %B, i64 %ib
  %va = load {ty}, ptr addrspace(1) %pa
  %vb = load {ty}, ptr addrspace(1) %pb
  %m = {op_mul} {ty} %va, %vb
  %acc1 = {op_add} {ty} %acc, %m
  %k1 = add i64 %k, 1
  %done = icmp eq i64 %k1, {kdim}
  br i1 %done, label %exit, label %loop
exit:
  %pc = getelementptr {ty}, ptr addrspace(1) %C, i64 %gid
  store {ty} %acc1, ptr addrspace(1) %pc
  ret void
}}
attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{wg}" }}
"""


def variants(per: int):
    """(family, knobs, generator) triples, ``per`` of each family."""
    tys = ("float", "half", "i32")
    wgs = (64, 128, 256)
    out = []
    for n in range(per):
        ty, wg = tys[n % 3], wgs[(n // 3) % 3]
        out.append(("vadd", {"ty": ty, "unroll": 1 + n % 8, "wg": wg}, lambda nm, k: vadd(nm, k["ty"], k["unroll"], k["wg"])))
        out.append(("reduce", {"ty": ty, "trip": 4 + 4 * (n % 6), "wg": wg}, lambda nm, k: reduce_(nm, k["ty"], k["trip"], k["wg"])))
        out.append(("gemm", {"ty": ty, "kdim": (8, 16, 32, 64)[n % 4], "wg": wg}, lambda nm, k: gemm(nm, k["ty"], k["kdim"], k["wg"])))
    return out


def build_corpus(per: int, arches: tuple[str, ...] = ARCHES) -> list[dict]:
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple("amdgcn-amd-amdhsa")
    corpus = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in arches:
            tm = target.create_target_machine(cpu=arch, opt=3, reloc="pic", codemodel="default")
            for i, (family, knobs, gen) in enumerate(variants(per)):
                name = f"{family}_{'_'.join(f'{k}{v}' for k, v in knobs.items())}"
                mod = llvm.parse_assembly(gen(name, knobs))
                mod.triple = "amdgcn-amd-amdhsa"
                mod.data_layout = str(tm.target_data)
                mod.verify()
                pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
                pb.getModulePassManager().run(mod, pb)
                obj = Path(tmp) / f"{arch}_{i}.o"
                hsaco = obj.with_suffix(".hsaco")
                obj.write_bytes(tm.emit_object(mod))
                subprocess.run([LLD, "-shared", str(obj), "-o", str(hsaco)], check=True, capture_output=True)
                corpus.append({"arch": arch, "family": family, "knobs": knobs, "data": hsaco.read_bytes()})
    return corpus


def corpus_from_cache(url: str) -> list[dict]:
    from rocke_aot.cache.store import Store

    with Store.open(url) as s:
        return [
            {"arch": a.arch, "family": a.family, "knobs": dict(a.spec), "data": s.get(a.key).code_object}
            for a in s.find()
        ]


def bench_levels(corpus: list[dict]) -> list[dict]:
    raw = sum(len(c["data"]) for c in corpus)
    rows = []
    for level in (1, 3, 6, 9, 12, 15, 19, 22):
        cctx = zstandard.ZstdCompressor(level=level)
        dctx = zstandard.ZstdDecompressor()
        t0 = time.perf_counter()
        frames = [cctx.compress(c["data"]) for c in corpus]
        t1 = time.perf_counter()
        for f in frames:
            dctx.decompress(f)
        t2 = time.perf_counter()
        stored = sum(map(len, frames))
        rows.append({
            "level": level, "ratio": round(raw / stored, 3), "stored_bytes": stored,
            "compress_ms_per_kernel": round((t1 - t0) * 1e3 / len(corpus), 3),
            "decompress_us_per_kernel": round((t2 - t1) * 1e6 / len(corpus), 1),
        })
    return rows


def bench_dictionaries(corpus: list[dict], level: int = 15, dict_size: int = 16384) -> list[dict]:
    groups: dict[tuple[str, str], list[bytes]] = defaultdict(list)
    for c in corpus:
        groups[(c["arch"], c["family"])].append(c["data"])
    rows = []
    for (arch, family), blobs in sorted(groups.items()):
        train, test = blobs[0::2], blobs[1::2]
        if len(train) < 4 or not test:
            continue
        try:
            d = zstandard.train_dictionary(dict_size, train)
        except zstandard.ZstdError as e:
            rows.append({"arch": arch, "family": family, "error": str(e)})
            continue
        plain = zstandard.ZstdCompressor(level=level)
        with_d = zstandard.ZstdCompressor(level=level, dict_data=d)
        raw = sum(map(len, test))
        s_plain = sum(len(plain.compress(b)) for b in test)
        s_dict = sum(len(with_d.compress(b)) for b in test)
        rows.append({
            "arch": arch, "family": family, "train": len(train), "test": len(test),
            "mean_kernel_bytes": raw // len(test), "dict_bytes": len(d.as_bytes()),
            "ratio_plain": round(raw / s_plain, 2), "ratio_dict": round(raw / s_dict, 2),
            # The dictionary is stored once per (arch, family); it pays off after this many kernels.
            "break_even_kernels": (round(len(d.as_bytes()) / ((s_plain - s_dict) / len(test)), 1)
                                   if s_plain > s_dict else None),
        })
    return rows


def bench_store(corpus: list[dict], n_lookup: int = 10_000) -> dict:
    from rocke_aot.cache.keys import KeyInputs
    from rocke_aot.cache.store import Store

    tc = {"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "bench"}
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.sqlite"
        with Store.open(url, touch_interval=3600) as s:
            t0 = time.perf_counter()
            keys = []
            # Fill to n_lookup/2 artifacts by repeating the corpus under distinct specs.
            n_fill = n_lookup // 2
            with_inputs = []
            for i in range(n_fill):
                c = corpus[i % len(corpus)]
                inp = KeyInputs(c["arch"], "llvm22", "llvm22", c["family"], {**c["knobs"], "i": i}, "bench", tc, {})
                with_inputs.append((inp, c["data"]))
            for inp, data in with_inputs:
                a = s.put(inp, data, ir_sha256=hashlib.sha256(data).hexdigest(), metadata={}, provenance={})
                keys.append(a.key)
            t_put = time.perf_counter() - t0
            absent = [hashlib.sha256(f"absent{i}".encode()).hexdigest() for i in range(n_lookup - len(keys))]
            lookup = keys + absent
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                hits = s.lookup_many(lookup)
                times.append(time.perf_counter() - t0)
            assert len(hits) == len(keys)
            # The floor: the same chunked query on a bare sqlite3 connection.
            import sqlite3

            raw = sqlite3.connect(f"{tmp}/bench.sqlite")
            floor = []
            for _ in range(5):
                t0 = time.perf_counter()
                for i in range(0, len(lookup), 900):
                    ch = lookup[i:i + 900]
                    marks = ",".join("?" * len(ch))
                    raw.execute(f"SELECT key, status, blob_sha256, error FROM artifacts WHERE key IN ({marks})",
                                ch).fetchall()
                floor.append(time.perf_counter() - t0)
            raw.close()
            sample = keys[: min(500, len(keys))]
            lat_cold = []
            for k in sample:  # first read of each key refreshes last_read_at (a write)
                t0 = time.perf_counter()
                s.get(k)
                lat_cold.append(time.perf_counter() - t0)
            lat = []
            for k in sample:  # within touch_interval: a pure read
                t0 = time.perf_counter()
                s.get(k)
                lat.append(time.perf_counter() - t0)
            st = s.stats()
    best = min(times)
    return {
        "artifacts": len(keys), "blobs": st.blobs, "put_ms_per_artifact": round(t_put * 1e3 / len(keys), 3),
        "lookup_keys": len(lookup), "lookup_ms_best": round(best * 1e3, 2),
        "lookup_keys_per_s": int(len(lookup) / best),
        "lookup_raw_sqlite3_ms_best": round(min(floor) * 1e3, 2),
        "get_us_median": round(statistics.median(lat) * 1e6, 1),
        "get_us_p95": round(sorted(lat)[int(0.95 * len(lat))] * 1e6, 1),
        "get_with_touch_us_median": round(statistics.median(lat_cold) * 1e6, 1),
        "mean_kernel_bytes": st.raw_bytes // max(st.blobs, 1),
    }


def calibration() -> dict:
    """How fast this machine is right now (shared CI boxes vary a lot): a fixed Python loop."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        acc = 0
        for i in range(1_000_000):
            acc += i
        best = min(best, time.perf_counter() - t0)
    return {"python_loop_1e6_ms": round(best * 1e3, 1), "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--per", type=int, default=16, help="variants per family per arch")
    ap.add_argument("--corpus-cache", default=None, help="take code objects from this cache instead")
    ap.add_argument("--lookups", type=int, default=10_000)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    corpus = corpus_from_cache(args.corpus_cache) if args.corpus_cache else build_corpus(args.per)
    t_corpus = time.perf_counter() - t0
    if not corpus:
        sys.exit("empty corpus")
    result = {
        "calibration": calibration(),
        "corpus": {
            "source": args.corpus_cache or f"llvmlite + {LLD}", "kernels": len(corpus),
            "arches": sorted({c["arch"] for c in corpus}), "families": sorted({c["family"] for c in corpus}),
            "raw_bytes": sum(len(c["data"]) for c in corpus),
            "distinct": len({hashlib.sha256(c["data"]).digest() for c in corpus}),
            "build_s": round(t_corpus, 1),
        },
        "levels": bench_levels(corpus),
        "dictionaries": bench_dictionaries(corpus),
        "dictionary_levels": [
            {"level": lv, "mean_ratio_plain": round(statistics.mean(r["ratio_plain"] for r in rows), 2),
             "mean_ratio_dict": round(statistics.mean(r["ratio_dict"] for r in rows), 2)}
            for lv in (9, 12, 15, 19)
            for rows in [[r for r in bench_dictionaries(corpus, level=lv) if "error" not in r]]
        ],
        "store": bench_store(corpus, args.lookups),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    cal = result["calibration"]
    print(f"machine: {cal['cpus']} cpus, load {cal['loadavg_1m']}, python 1e6-add loop {cal['python_loop_1e6_ms']} ms")
    c = result["corpus"]
    print(f"corpus: {c['kernels']} code objects ({c['distinct']} distinct), {c['raw_bytes']} bytes, "
          f"arches {' '.join(c['arches'])}, families {' '.join(c['families'])}; built in {c['build_s']} s")
    print("\nlevel  ratio  compress ms/kernel  decompress us/kernel")
    for r in result["levels"]:
        print(f"{r['level']:>5}  {r['ratio']:>5.2f}  {r['compress_ms_per_kernel']:>18.3f}  {r['decompress_us_per_kernel']:>20.1f}")
    print("\narch     family  train/test  mean bytes  dict bytes  ratio plain  ratio dict  break-even kernels")
    for r in result["dictionaries"]:
        if "error" in r:
            print(f"{r['arch']:<8} {r['family']:<7} {r['error']}")
            continue
        print(f"{r['arch']:<8} {r['family']:<7} {r['train']:>5}/{r['test']:<4}  {r['mean_kernel_bytes']:>10}  "
              f"{r['dict_bytes']:>10}  {r['ratio_plain']:>11.2f}  {r['ratio_dict']:>10.2f}  {r['break_even_kernels']}")
    print("\nlevel  mean ratio plain  mean ratio with dictionary")
    for r in result["dictionary_levels"]:
        print(f"{r['level']:>5}  {r['mean_ratio_plain']:>16.2f}  {r['mean_ratio_dict']:>26.2f}")
    s = result["store"]
    print(f"\nstore (SQLite): {s['artifacts']} artifacts, put {s['put_ms_per_artifact']} ms each; "
          f"lookup_many of {s['lookup_keys']} keys: {s['lookup_ms_best']} ms ({s['lookup_keys_per_s']} keys/s; "
          f"bare sqlite3 {s['lookup_raw_sqlite3_ms_best']} ms); "
          f"get median {s['get_us_median']} us (p95 {s['get_us_p95']}), with last_read_at touch "
          f"{s['get_with_touch_us_median']} us")


if __name__ == "__main__":
    main()
