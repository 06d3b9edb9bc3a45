"""The basis of every rank, on every surface: `rocke-aot select --json`, the service's
`/v1/select` (service/schemas.py RankedKernel) and the client's strict parse of it.

    gfx942 (public facts)     basis "hardware", an estimate and its bound, no fallback
    gfx1250 (facts not public) basis "efficiency", no estimate, the fallback names exactly the
                               facts variants/hw_facts/gfx1250.json leaves null (read here as JSON)
    model="efficiency" asked   basis "efficiency", no fallback (nothing fell back)
    model="fitted", none       the fallback says so
    a recorded time            basis "measured", its median and the measurement
    one instruction unpublished the rows it runs on fall back one by one, after the estimated rows

References the code under test did not produce: the facts file read as plain JSON, the
measured times this test recorded, the order of the estimates themselves; a tampered answer
(made here from a real one) must be refused by the client as an IntegrityError.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _selstore import fake_inputs, put_fake
from click.testing import CliRunner
from fastapi.testclient import TestClient

from rocke_aot.cache import measurements as stored
from rocke_aot.cache.generations import generation_of
from rocke_aot.cache.store import Store
from rocke_aot.candidates import Candidate, Resources
from rocke_aot.cli.main import cli
from rocke_aot.errors import IntegrityError
from rocke_aot.lanes import get_lane
from rocke_aot.service.app import create_app
from rocke_aot.service.client import Client, parse_select
from rocke_aot.targets import Target
from rocke_aot.variants import hw_model, table
from rocke_aot.variants.problems import GemmProblem
from rocke_aot.variants.selection import rank

FACTS = Path(__file__).resolve().parents[1] / "rocke_aot" / "variants" / "hw_facts"
PROBLEM = {"m": 2048, "n": 2048, "k": 2048, "dtype": "f16"}
BOUNDS = {"compute", "issue", "lds", "memory", "latency"}


def _spec(bm: int, bn: int, path: str) -> dict:
    return dict(in_dtype="f16", out_dtype="f32", block_m=bm, block_n=bn, block_k=32, waves=4, path=path,
                double_buffer=False, vector_width=4, mma="auto")


@pytest.fixture
def store(tmp_path):
    """gemm artifacts for gfx942 (mfma) and gfx1250 (wmma), one complete generation each."""
    s = Store.open(f"sqlite:///{tmp_path / 'basis.sqlite'}")
    arts = {}
    for arch, path in (("gfx942", "mfma"), ("gfx1250", "wmma")):
        for bm, bn in ((64, 64), (128, 128), (64, 128)):
            arts[(arch, bm, bn)] = put_fake(s, arch, "llvm22", "gemm", _spec(bm, bn, path), vgprs=96)
        s.complete_generation(generation_of(fake_inputs(arch, "llvm22", "gemm", _spec(64, 64, path))))
    yield s, arts
    s.close()


def _not_public(processor: str) -> list[str]:
    doc = json.loads((FACTS / f"{processor}.json").read_text())
    return sorted(k for k, f in doc["facts"].items() if f["value"] is None)


def _post(c: TestClient, arch: str, **kw) -> dict:
    r = c.post("/v1/select", json={"arch": arch, "family": "gemm", "problem": PROBLEM, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def test_service_answer_carries_the_basis_of_every_rank(store):
    s, arts = store
    with TestClient(create_app(s)) as c:
        doc = _post(c, "gfx942")
        assert doc["model"] == "hardware" and doc["note"] is None and len(doc["accepted"]) == 3
        est = [a["estimate_ms"] for a in doc["accepted"]]
        assert est == sorted(est) and all(e > 0 for e in est)
        for a in doc["accepted"]:
            assert a["basis"] == "hardware" and a["bound"] in BOUNDS and a["fallback"] is None
            assert a["measured_ms"] is None and a["measurement"] is None

        # gfx1250: the arch's facts are not public; every row says which, and falls back
        doc = _post(c, "gfx1250")
        missing = _not_public("gfx1250")
        assert missing and doc["model"] == "efficiency"
        assert all(f"{k} (" in doc["note"] for k in missing)  # the note gives every fact with its why
        for a in doc["accepted"]:
            assert a["basis"] == "efficiency" and a["estimate_ms"] is None and a["bound"] is None
            assert a["fallback"] == f"gfx1250: hardware facts not public: {', '.join(missing)}"

        # the efficiency order asked for: nothing fell back
        doc = _post(c, "gfx942", model="efficiency")
        assert doc["model"] == "efficiency" and doc["note"] is None
        assert all(a["basis"] == "efficiency" and a["fallback"] is None for a in doc["accepted"])
        # fitted constants asked for where none exist
        doc = _post(c, "gfx942", model="fitted")
        assert all(a["basis"] == "efficiency" and "no fitted constants" in a["fallback"] for a in doc["accepted"])
        # an unknown model is refused with the field named
        r = c.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": PROBLEM, "model": "guess"})
        assert r.status_code == 422 and r.json()["field"] == "body.model"


def test_measured_rows_say_so_with_their_time(store):
    s, arts = store
    slow_model_pick = arts[("gfx942", 64, 64)].key
    times = {slow_model_pick: 0.25, arts[("gfx942", 128, 128)].key: 0.5}
    report = {"arch": "gfx942", "device": "AMD Instinct MI300X", "family": "gemm", "runtime": "hip", "reps": 9,
              "problems": [{"problem": PROBLEM, "results": [{"key": k, "median_ms": ms, "error": None,
                                                             "verified": True} for k, ms in times.items()]}]}
    stored.record(s, stored.from_report(report), source="bench-report.json")
    with TestClient(create_app(s)) as c:
        doc = _post(c, "gfx942")
        got = [(a["key"], a["basis"], a["measured_ms"]) for a in doc["accepted"]]
        assert got[:2] == [(slow_model_pick, "measured", 0.25), (arts[("gfx942", 128, 128)].key, "measured", 0.5)]
        assert got[2][1] == "hardware" and got[2][2] is None
        m = doc["accepted"][0]["measurement"]
        assert (m["key"], m["median_ms"], m["repeats"], m["device"], m["source"]) == \
            (slow_model_pick, 0.25, 9, "AMD Instinct MI300X", "bench-report.json")
        assert doc["accepted"][0]["estimate_ms"] > 0  # the model's estimate is still shown beside it
        assert all(a["basis"] == "hardware" for a in _post(c, "gfx942", measured="off")["accepted"])

        # the client asks the same and parses the answer strictly: the same document
        with Client("http://testserver", cache=s, offline=False, http=c) as client:
            assert client.select("gfx942", "gemm", PROBLEM) == doc
            assert [a["basis"] for a in client.select("gfx942", "gemm", PROBLEM, measured="off")["accepted"]] == \
                ["hardware"] * 3
        # offline over the local store: the same rows (no URLs)
        with Client(None, cache=s, offline=True) as client:
            off = client.select("gfx942", "gemm", PROBLEM)
            assert [{k: v for k, v in a.items() if k not in ("url", "kernel_url")} for a in off["accepted"]] == \
                [{k: v for k, v in a.items() if k not in ("url", "kernel_url")} for a in doc["accepted"]]
            assert (off["model"], off["note"]) == (doc["model"], doc["note"])


def _tampered(doc: dict) -> list[tuple[str, dict]]:
    def row(**kw):
        return {**doc, "accepted": [{**doc["accepted"][0], **kw}, *doc["accepted"][1:]]}

    first = doc["accepted"][0]
    return [
        ("an unknown basis", row(basis="guessed")),
        ("an estimate as text", row(estimate_ms=str(first["estimate_ms"]))),
        ("an unknown bound", row(bound="vibes")),
        ("an unknown field", row(confidence=0.9)),
        ("measured without a time", row(basis="measured")),
        ("a time without measured", row(measured_ms=1.0)),
        ("a fallback beside an estimate", row(fallback="no facts")),
        ("a time model without an estimate", row(estimate_ms=None, bound=None)),
        ("a bound without an estimate", {**doc, "accepted": [{**first, "basis": "efficiency", "estimate_ms": None}]}),
        ("no basis", {**doc, "accepted": [{k: v for k, v in first.items() if k != "basis"}]}),
        ("an unknown model", {**doc, "model": "oracle"}),
        ("a missing note", {k: v for k, v in doc.items() if k != "note"}),
    ]


def test_client_refuses_a_malformed_basis(store):
    s, _ = store
    with TestClient(create_app(s)) as c:
        doc = _post(c, "gfx942")
    assert parse_select(json.dumps(doc).encode()) == doc
    for what, bad in _tampered(doc):
        with pytest.raises(IntegrityError, match="/v1/select"):
            parse_select(json.dumps(bad).encode())
            pytest.fail(what)


def test_one_candidate_without_published_cycles_falls_back_alone(monkeypatch):
    """A facts file without one matrix instruction's cycles: the candidates on that instruction
    are ranked after the estimated ones, by efficiency, each saying which instruction."""
    arch = "gfx942"
    specs = [s for s in table.enumerate_specs("gemm", arch, "llvm22") if s.block_k == 32 and s.waves == 4
             and s.in_dtype == "f16" and s.out_dtype == "f32" and not s.double_buffer]
    cands = [Candidate(s.kernel_name, "-", "gemm", s.to_dict(), Target.parse(arch), get_lane("llvm22"), "default", "g", True,
                       Resources(*([None] * 9)), None) for s in specs]
    dev = Target.parse(arch)
    instrs = {table.spec_from_dict("gemm", c.spec).geometry(dev).instr for c in cands} - {None}
    dropped = sorted(instrs)[0]
    doc = json.loads((FACTS / f"{arch}.json").read_text())
    del doc["matrix"][dropped]
    facts = hw_model.parse_facts(doc, "test")
    monkeypatch.setattr(hw_model, "facts_for", lambda processor: facts)
    r = rank(cands, GemmProblem(2048, 2048, 2048), dev)
    on = {c.candidate.key for c in r.accepted
          if table.spec_from_dict("gemm", c.candidate.spec).geometry(dev).instr == dropped}
    assert on and r.model == "hardware"
    bases = [c.basis for c in r.accepted]
    assert bases == ["hardware"] * (len(bases) - len(on)) + ["efficiency"] * len(on)  # estimated ones first
    for c in r.accepted:
        if c.candidate.key in on:
            assert c.estimate_ms is None and c.fallback == f"{arch}: no published cycles for matrix instruction " \
                                                          f"{dropped} (variants/hw_facts/{arch}.json)"
        else:
            assert c.estimate_ms > 0 and c.fallback is None
    tail = [c.efficiency.total for c in r.accepted if c.candidate.key in on]
    assert tail == sorted(tail, reverse=True)


def test_cli_json_and_table_show_the_basis(store):
    s, _ = store
    url, run = s.url, CliRunner()

    args = ["select", "--family", "gemm", "--problem", json.dumps(PROBLEM), "--cache", url]
    doc = json.loads(run.invoke(cli, args + ["--arch", "gfx1250", "--json"]).output)
    missing = _not_public("gfx1250")
    assert [a["basis"] for a in doc["accepted"]] == ["efficiency"] * 3
    assert {a["fallback"] for a in doc["accepted"]} == {f"gfx1250: hardware facts not public: {', '.join(missing)}"}
    text = run.invoke(cli, args + ["--arch", "gfx1250"]).output
    assert f"no estimate for 3 of 3: gfx1250: hardware facts not public: {', '.join(missing)}" in text
    doc = json.loads(run.invoke(cli, args + ["--arch", "gfx942", "--json"]).output)
    assert [a["basis"] for a in doc["accepted"]] == ["hardware"] * 3
    assert all(a["bound"] in BOUNDS and a["fallback"] is None for a in doc["accepted"])
