"""Selection across families of one operation (issue 25): a cache holding native gemm and
triton_matmul artifacts for sm_90 and gfx942 ranks both kinds for one problem, the same way
through select(), the CLI, the service and its client; a recorded time puts its Triton kernel
first; families of different operations or problem types are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from _bench import load_bench
from _selstore import put_fake
from _service import HTTP_TIMEOUT_S, live_server
from click.testing import CliRunner

from rocke_aot.cache import measurements as stored
from rocke_aot.cache.store import Store
from rocke_aot.errors import FamilyMixError
from rocke_aot.service.client import Client
from rocke_aot.service.selection import select
from rocke_aot.variants import table

TRITON = {"kind": "triton", "triton_version": "3.6.0", "llvm": "22.0.0"}
PROBLEM = {"m": 1024, "n": 1024, "k": 1024}
ARCHES = ("sm_90", "gfx942")
FAMS = "gemm,triton_matmul"


@pytest.fixture(scope="module")
def store_url(tmp_path_factory):
    """Six specs of each family per arch, from the variant tables (the builder's grid)."""
    url = str(tmp_path_factory.mktemp("across") / "cache.sqlite")
    with Store.open(url) as store:
        for arch in ARCHES:
            for sp in list(table.enumerate_specs("gemm", arch, "llvm22"))[:6]:
                put_fake(store, arch, "llvm22", "gemm", sp.to_dict(), vgprs=96)
            for sp in _triton_specs(arch):
                put_fake(store, arch, "llvm22", "triton_matmul", sp.to_dict(), toolchain=TRITON, vgprs=96)
    return url


def _triton_specs(arch: str) -> list:
    """Six configs of the family's grid, specialized for M, N, K divisible by 16 (PROBLEM's class)."""
    return [s for s in table.enumerate_specs("triton_matmul", arch, "llvm22")
            if s.m_class == s.n_class == s.k_class == "div16"][:6]


def _order_ok(rows) -> None:
    """Measured rows first by median, then the estimated by estimate, then the rest."""
    est = [r for r in rows if r["basis"] != "measured" and r["estimate_ms"] is not None]
    assert [r["estimate_ms"] for r in est] == sorted(r["estimate_ms"] for r in est)
    kinds = [0 if r["basis"] == "measured" else 1 if r["estimate_ms"] is not None else 2 for r in rows]
    assert kinds == sorted(kinds)


@pytest.mark.parametrize("arch", ARCHES)
def test_select_across_ranks_both_families_and_names_each_rows_family(store_url, arch):
    with Store.open(store_url, readonly=True) as store:
        sel = select(store, arch, FAMS, PROBLEM, measured="off")
        doc = sel.as_dict()
        # each row's family is its artifact's own (the stored record, not the ranking's say)
        for c in sel.accepted:
            assert store.get(c.candidate.key).family == c.candidate.family
    assert sel.family == FAMS
    fams = {c["family"] for c in doc["accepted"]}
    assert fams == {"gemm", "triton_matmul"}
    # every artifact of both is answered, none lost to the other family: accepted, or refused by
    # its own family's rule (reason and detail printed on failure)
    stored_n = 6 + len(_triton_specs(arch))  # gfx942's hip config list has fewer div16 configs than six
    assert len(doc["accepted"]) == stored_n, [(r["reason"], r["detail"]) for r in doc["rejected"]]
    _order_ok(doc["accepted"])
    # one family alone gives its own rows in the same relative order as across families
    with Store.open(store_url, readonly=True) as store:
        alone = [c.candidate.key for c in select(store, arch, "gemm", PROBLEM, measured="off").accepted]
    assert [c["key"] for c in doc["accepted"] if c["family"] == "gemm"] == alone


def test_cli_service_and_client_give_the_same_answer(store_url, tmp_path):
    from rocke_aot.cli.main import cli

    with Store.open(store_url, readonly=True) as store:
        want = [(c.candidate.key, c.candidate.family, c.basis) for c in
                select(store, "sm_90", FAMS, PROBLEM).accepted]
    r = CliRunner().invoke(cli, ["select", "--arch", "sm_90", "--family", FAMS, "--problem", json.dumps(PROBLEM),
                                 "--cache", store_url, "--json"])
    assert r.exit_code == 0, r.output
    cli_doc = json.loads(r.output)
    assert [(c["key"], c["family"], c["basis"]) for c in cli_doc["accepted"]] == want
    with live_server(store_url) as base:
        with Client(base, cache=tmp_path / "local.sqlite") as client:
            doc = client.select("sm_90", FAMS, PROBLEM)
        assert [(c["key"], c["family"], c["basis"]) for c in doc["accepted"]] == want
        bad = httpx.post(f"{base}/v1/select", json={"arch": "sm_90", "family": "gemm,triton_softmax",
                                                    "problem": PROBLEM}, timeout=HTTP_TIMEOUT_S)
        assert bad.status_code == 422 and "triton_softmax" in bad.text and "gemm" in bad.text
    r = CliRunner().invoke(cli, ["select", "--arch", "sm_90", "--family", FAMS, "--problem", json.dumps(PROBLEM),
                                 "--cache", store_url])
    assert r.exit_code == 0 and "[triton_matmul]" in r.output and "[gemm]" in r.output


def test_a_measured_triton_candidate_goes_first(tmp_path):
    url = str(tmp_path / "m.sqlite")
    with Store.open(url) as store:
        for sp in list(table.enumerate_specs("gemm", "sm_90", "llvm22"))[:6]:
            put_fake(store, "sm_90", "llvm22", "gemm", sp.to_dict(), vgprs=96)
        for sp in _triton_specs("sm_90"):
            put_fake(store, "sm_90", "llvm22", "triton_matmul", sp.to_dict(), toolchain=TRITON, vgprs=96)
        before = select(store, "sm_90", FAMS, PROBLEM)
        last = [c for c in before.accepted if c.candidate.family == "triton_matmul"][-1]  # its lowest-ranked
        assert before.best.candidate.key != last.candidate.key
        stored.record(store, [stored.ReportRow(last.candidate.key, "sm_90", "NVIDIA H200", "triton_matmul",
                                               PROBLEM, 0.001, 20)], source="test")
        after = select(store, "sm_90", FAMS, PROBLEM)
    assert after.best.candidate.key == last.candidate.key and after.best.basis == "measured"
    assert after.best.candidate.family == "triton_matmul"
    assert [c.basis for c in after.accepted[1:]].count("measured") == 0


@pytest.mark.parametrize("mix, names", [("gemm,triton_softmax", ("gemm", "triton_softmax")),
                                        ("conv_direct_fwd,gemm", ("conv_direct_fwd", "gemm"))])
def test_families_of_different_operations_are_refused_by_name(store_url, mix, names):
    from rocke_aot.cli.main import cli

    with Store.open(store_url, readonly=True) as store, pytest.raises(FamilyMixError) as e:
        select(store, "sm_90", mix, PROBLEM)
    assert all(n in str(e.value) for n in names)
    r = CliRunner().invoke(cli, ["select", "--arch", "sm_90", "--family", mix, "--problem", json.dumps(PROBLEM),
                                 "--cache", store_url])
    assert r.exit_code == 2 and all(n in r.output for n in names)


def test_triton_version_across_families_keeps_the_native_rows(store_url):
    with Store.open(store_url, readonly=True) as store:
        sel = select(store, "sm_90", FAMS, PROBLEM, triton_version="3.6.0")
        other = select(store, "sm_90", FAMS, PROBLEM, triton_version="3.9.0")
    assert {c.candidate.family for c in sel.accepted} == {"gemm", "triton_matmul"}
    assert {c.candidate.family for c in other.accepted} == {"gemm"}  # no 3.9.0 build: the natives only


def test_the_h200_bench_script_parses_and_refuses_problem_lists_that_differ(tmp_path):
    mod = load_bench("across_h200")
    args = mod.parse(["--cache", "c.sqlite", "--out", str(tmp_path)])
    assert args.candidates == 8 and args.triton_version == "3.6.0" and len(args.problem_list) == 5
    bad = tmp_path / "p.json"
    bad.write_text(json.dumps({"gemm": [PROBLEM], "triton_matmul": [{**PROBLEM, "k": 512}]}))
    with pytest.raises(SystemExit):
        mod.parse(["--cache", "c.sqlite", "--out", str(tmp_path), "--problems", str(bad)])


def test_the_h200_bench_script_replays_a_stored_run(tmp_path):
    """--replay reads step 1's reports of the stored H200 run (gzip JSON in docs/), and the rows
    score a pick by that run's times: the best native time of 4096^3 there is the smallest verified
    gemm median_ms of the raw report, read here with gzip + json alone."""
    import gzip

    mod = load_bench("across_h200")
    run = Path(__file__).resolve().parents[1] / "bench" / "results" / "triton-raw" / "h200-2026-12-04-across"
    with pytest.raises(SystemExit):
        mod.parse(["--cache", "c.sqlite", "--out", str(tmp_path), "--replay", str(run), "--no-run"])
    reports = {f: mod.stored_report(run, f, tmp_path) for f in mod.FAMILIES}
    assert all(Path(r["_path"]).is_file() for r in reports.values())
    raw = json.load(gzip.open(run / "bench-gemm.json.gz"))
    p = next(p for p in raw["problems"] if (p["problem"]["m"], p["problem"]["n"], p["problem"]["k"]) == (4096,) * 3)
    native = min(x["median_ms"] for x in p["results"] if x.get("median_ms") and x.get("verified") is not False)
    pick = {"key": p["results"][0]["key"], "family": "gemm", "basis": "hardware"}
    rows = mod.rows({"bench": reports, "model_picks": [{"problem": p["problem"], "top": pick}],
                     "measured_picks": [{"top": pick}]})
    assert rows[0]["native_ms"] == native and rows[0]["triton_ms"] < native
    assert rows[0]["pick_over_best"] == p["results"][0]["median_ms"] / rows[0]["triton_ms"]
    with pytest.raises(SystemExit):
        mod.stored_report(tmp_path / "nothing", "gemm", tmp_path)
