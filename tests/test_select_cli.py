"""`rocke-aot select`, `build --problems` and the generation commands, through the real binary
and real compilers (build), or a synthetic store (errors, gc)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _selstore import put_fake

from rocke_aot.cache.store import Store

EXE = str(Path(sys.executable).with_name("rocke-aot"))
WHERE = ["--where", "block_k=32", "--where", "in_dtype=f16", "--where", "out_dtype=f32",
         "--where", "double_buffer=false", "--where", "waves=2", "--where", "path=mfma"]
PROBLEM = {"m": 1000, "n": 1000, "k": 512, "dtype": "f16"}
# (block_m, block_n) whose efficiency on PROBLEM reaches 0.5 on gfx942 (304 CUs), by hand:
# 32x32: 1024 tiles, 64x64: 256, 32x64/64x32: 512, 32x128/128x32: 256 -> (1000/1024)^2*16/19 = 0.803
# 64x128/128x64: 128 tiles -> 0.4015; 128x128: 64 tiles -> 0.2008 (below the floor).
# The two-wave mfma grid (block_k 32, f16->f32, single buffer) has no 32x32 tile on gfx942.
SERVING = {(32, 64), (64, 32), (64, 64), (32, 128), (128, 32)}


def run(*args, timeout=600):
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))


@pytest.fixture(scope="module")
def problems_build(tmp_path_factory, llvm22):
    d = tmp_path_factory.mktemp("pb")
    url = f"sqlite:///{d / 'cache.sqlite'}"
    pfile = d / "workload.json"
    pfile.write_text(json.dumps({"gemm": [PROBLEM]}))
    p = run("build", "--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", *WHERE, "--problems", str(pfile),
            "--min-efficiency", "0.5", "--cache", url, "--json")
    assert p.returncode == 0, p.stderr + p.stdout
    return url, json.loads(p.stdout), d


def test_build_problems_builds_only_serving_specs(problems_build):
    url, summary, _ = problems_build
    with Store.open(url, readonly=True) as store:
        arts = store.find(arch="gfx942", lane="llvm22", family="gemm")
    assert {(a.spec["block_m"], a.spec["block_n"]) for a in arts} == SERVING
    assert len(arts) == len(SERVING) == summary["built"]


def test_select_binary_ranks_real_code_objects(problems_build):
    url, _, d = problems_build
    (d / "p.json").write_text(json.dumps(PROBLEM))
    p = run("select", "--arch", "gfx942:sramecc+:xnack-", "--family", "gemm", "--problem", f"@{d / 'p.json'}",
            "--min-efficiency", "0.5", "--cache", url, "--json", "--explain")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    acc = out["accepted"]
    assert len(acc) == len(SERVING) and out["rejected"] == []
    for a in acc:
        assert a["efficiency"]["total"] == pytest.approx((1000 / 1024) ** 2 * 16 / 19)
        r = a["resources"]
        assert r["vgprs"] > 0 and r["sgprs"] > 0 and 1 <= r["occupancy"] <= 8  # from llvm's metadata
    occ = [a["resources"]["occupancy"] for a in acc]
    assert occ == sorted(occ, reverse=True)
    text = run("select", "--arch", "gfx942", "--family", "gemm", "--problem", json.dumps(PROBLEM), "--cache", url,
               "--limit", "2")
    assert text.returncode == 0 and "beyond --limit" in text.stdout
    # the build moved the ref: one current generation, listed
    g = json.loads(run("cache", "ls", "--generations", "--cache", url, "--json").stdout)
    assert [(x["arch"], x["lane"], x["current"], x["artifacts"]) for x in g] == [("gfx942", "llvm22", True, 5)]


@pytest.mark.parametrize("args,needle", [
    (["--family", "gemmx"], "accepted: attention, conv_dgrad_patch, conv_direct_fwd, gemm, "),  # the registry: names sorted
    (["--arch", "gfx999"], "gfx942"),
    (["--lane", "llvm21"], "llvm22"),
    (["--problem", '{"m": 1}'], "problem"),
    (["--problem", "@/nonexistent.json"], "cannot read"),
])
def test_select_bad_input_exits_2(tmp_path, args, needle):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    Store.open(url).close()
    base = {"--arch": "gfx942", "--family": "gemm", "--problem": json.dumps(PROBLEM)}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [x for kv in base.items() for x in kv]
    p = run("select", *flat, "--cache", url)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert needle in p.stderr


def test_select_nothing_qualifies_exits_1(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    Store.open(url).close()
    p = run("select", "--arch", "gfx942", "--family", "gemm", "--problem", json.dumps(PROBLEM), "--cache", url)
    assert p.returncode == 1 and "0 accepted" in p.stdout


def test_cache_gc_keep_and_stats(tmp_path):
    from _selstore import fake_inputs

    from rocke_aot.cache.generations import generation_of
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    spec = dict(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4, path="fma",
                double_buffer=False, vector_width=4, mma="auto")
    with Store.open(url) as store:
        for dg in ("d1", "d2", "d3"):
            put_fake(store, "gfx942", "llvm22", "gemm", spec, digest=dg)
            store.complete_generation(generation_of(fake_inputs("gfx942", "llvm22", "gemm", spec, dg)))
    s = json.loads(run("cache", "stats", "--cache", url, "--json").stdout)
    assert s["generations"] == {"total": 3, "current": 1, "stale": 2, "stale_artifacts": 2, "served": 1,
                                "shadowed": 2}
    p = run("cache", "gc", "--keep", "1", "--cache", url, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    d1 = generation_of(fake_inputs("gfx942", "llvm22", "gemm", spec, "d1"))
    assert rep["generations_dropped"] == [d1] and rep["artifacts_evicted"] == 1 and rep["blobs_deleted"] == 1
    s = json.loads(run("cache", "stats", "--cache", url, "--json").stdout)
    assert s["generations"]["total"] == 2 and s["artifacts"] == 2


@pytest.mark.parametrize("arch, path, model", [("sm_90", "mma", "hardware"), ("gfx942", "mfma", "hardware"),
                                               ("gfx1250", "wmma", "efficiency")])
def test_select_table_shows_the_estimate_it_ranked_by(tmp_path, arch, path, model):
    """The text table's "est ms" column is the JSON's estimate_ms (published hardware facts on
    sm_90 and gfx942: "auto" tries them first) and "-" where the arch has neither (gfx1250: its CU
    count, clock and more are not public, and the header says so)."""
    from _selstore import fake_inputs
    from click.testing import CliRunner

    from rocke_aot.cache.generations import generation_of
    from rocke_aot.cli.main import cli

    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    with Store.open(url) as store:
        for bm in (64, 128):
            spec = dict(in_dtype="f16", out_dtype="f32", block_m=bm, block_n=64, block_k=32, waves=4, path=path,
                        double_buffer=False, vector_width=4, mma="auto")
            put_fake(store, arch, "llvm22", "gemm", spec, digest="d1")
        store.complete_generation(generation_of(fake_inputs(arch, "llvm22", "gemm", spec, "d1")))
    args = ["select", "--arch", arch, "--family", "gemm", "--problem", json.dumps(PROBLEM), "--cache", url]
    doc = json.loads(CliRunner().invoke(cli, args + ["--json"]).output)
    text = CliRunner().invoke(cli, args).output.splitlines()
    assert text[1].startswith(f"ranked by: {model}") and doc["model"] == model
    if model == "efficiency":
        assert "not public" in text[1] and "cus" in doc["note"] and "clock_mhz" in doc["note"]
    head = text[2].split()
    col = head.index("est") if "est" in head else None
    assert col is not None and head[col + 1] == "ms"
    rows = [line.split() for line in text[3:5]]
    got = [r[col] for r in rows]  # '#', key, lane, arch precede the column, as in the header
    want = [f"{a['estimate_ms']:.4f}" if a.get("estimate_ms") is not None else "-" for a in doc["accepted"]]
    assert got == want and len(got) == 2
    assert (got[0] != "-") == (model != "efficiency")
    if model == "hardware":
        assert [r[col + 1] for r in rows] == [a["bound"] for a in doc["accepted"]]
    if model != "efficiency":
        assert float(got[0]) <= float(got[1])  # ranked by it
