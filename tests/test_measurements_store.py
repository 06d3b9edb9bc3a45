"""Measurements in the store (cache/measurements.py, migration 0007_measurements) on SQLite and
PostgreSQL: a bench report recorded against real store rows, selection then ranking by it and
saying so, and a measurement that never outlives its artifact or generation."""

from __future__ import annotations

import json

import pytest
from _pg import pg_database, store_url  # noqa: F401
from _selstore import fake_inputs, put_fake
from click.testing import CliRunner

from rocke_aot.cache import measurements as stored
from rocke_aot.cache.generations import generation_of
from rocke_aot.cache.store import Store
from rocke_aot.errors import ReadOnlyError, SpecError
from rocke_aot.service.selection import select

PROBLEM = {"m": 2048, "n": 2048, "k": 2048, "dtype": "f16"}


def _spec(bm: int, bn: int) -> dict:
    return dict(in_dtype="f16", out_dtype="f32", block_m=bm, block_n=bn, block_k=32, waves=4, path="mfma",
                double_buffer=False, vector_width=4, mma="auto")


def _store(url: str, digest: str = "d1"):
    store = Store.open(url)
    arts = {(bm, bn): put_fake(store, "gfx942", "llvm22", "gemm", _spec(bm, bn), digest=digest, vgprs=96)
            for bm, bn in ((64, 64), (128, 128), (64, 128))}
    store.complete_generation(generation_of(fake_inputs("gfx942", "llvm22", "gemm", _spec(64, 64), digest)))
    return store, arts


def _report(arts, times, problem=PROBLEM, reps=7):
    return {"arch": "gfx942", "device": "AMD Instinct MI300X", "family": "gemm", "runtime": "hip", "reps": reps,
            "problems": [{"problem": problem, "results": [
                {"key": arts[t].key, "median_ms": ms, "error": None, "verified": True} for t, ms in times.items()]
                + [{"key": "0" * 64, "median_ms": 1.0, "error": None, "verified": True},  # not in this store
                   {"key": arts[(64, 64)].key, "median_ms": None, "error": "launch failed", "verified": None}]}]}


def test_recorded_times_outrank_the_model_and_say_so(store_url):
    store, arts = _store(store_url)
    with store:
        model = select(store, "gfx942", "gemm", PROBLEM)
        assert model.model == "hardware" and all(c.basis == "hardware" for c in model.accepted)
        # the model's last choice measured fastest: measured beats modeled
        last = next(t for t, a in arts.items() if a.key == model.accepted[-1].key)
        times = {t: (0.5 if t == last else 2.0 + t[0] / 1000) for t in arts}
        rep = stored.record(store, stored.from_report(_report(arts, times)), source="run-1")
        assert (rep.recorded, rep.already, rep.unknown_keys) == (3, 0, ("0" * 64,))
        assert stored.record(store, stored.from_report(_report(arts, times)), source="run-1").already == 3
        sel = select(store, "gfx942", "gemm", PROBLEM)
        assert sel.best.key == arts[last].key and sel.best.basis == "measured"
        assert [c.measured.median_ms for c in sel.accepted] == sorted(times.values())
        assert sel.best.measured.repeats == 7 and sel.best.measured.device == "AMD Instinct MI300X"
        assert sel.as_dict()["accepted"][0]["basis"] == "measured"
        # another problem: the model's order, untouched
        other = {**PROBLEM, "m": 512}
        assert [c.key for c in select(store, "gfx942", "gemm", other).accepted] == \
            [c.key for c in select(store, "gfx942", "gemm", other, measured="off").accepted]
        # the same shape class (2048..4095 in every extent) only when asked
        near = {**PROBLEM, "m": 3000}
        assert select(store, "gfx942", "gemm", near).best.basis == "hardware"
        assert select(store, "gfx942", "gemm", near, measured="class").best.key == arts[last].key
        assert select(store, "gfx942", "gemm", PROBLEM, measured="off").best.basis == "hardware"


def test_a_measurement_never_outlives_its_generation_or_artifact(store_url):
    store, arts = _store(store_url)
    with store:
        times = {t: 1.0 + i for i, t in enumerate(arts)}
        stored.record(store, stored.from_report(_report(arts, times)), source="run-1")
        assert len(stored.for_family(store, "gemm", "gfx942")) == 3
        assert stored.for_family(store, "gemm", "gfx950") == []
        # a rebuild under a new recipe: new keys, a new generation; the old rows apply to nothing new
        new = {t: put_fake(store, "gfx942", "llvm22", "gemm", _spec(*t), digest="d2", vgprs=96) for t in arts}
        store.complete_generation(generation_of(fake_inputs("gfx942", "llvm22", "gemm", _spec(64, 64), "d2")))
        sel = select(store, "gfx942", "gemm", PROBLEM)
        assert {c.key for c in sel.accepted} == {a.key for a in new.values()}
        assert all(c.basis == "hardware" for c in sel.accepted)
        store.gc_generations(keep=0)  # the measured generation is gone
        assert stored.for_family(store, "gemm", "gfx942") == []
        assert stored.count(store) == (3, 0)
        assert stored.prune(store) == 3 and stored.count(store) == (0, 0)


def test_read_only_stores_and_bad_reports_are_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    store, arts = _store(url)
    store.close()
    with Store.open(url, readonly=True) as ro:
        with pytest.raises(ReadOnlyError):
            stored.record(ro, [], source="x")
        with pytest.raises(ReadOnlyError):
            stored.prune(ro)
    with pytest.raises(SpecError):
        stored.from_report({"arch": "gfx942", "family": "gemm", "problems": []})  # no repeats known
    with pytest.raises(SpecError):
        stored.from_report({**_report(arts, {(64, 64): 1.0}), "arch": "gfx9999"})
    bad = _report(arts, {(64, 64): -1.0})
    with pytest.raises(SpecError):
        stored.from_report(bad)


def test_cli_records_lists_and_selects(tmp_path):
    from rocke_aot.cli.main import cli

    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    store, arts = _store(url)
    store.close()
    report = tmp_path / "r.json"
    doc = _report(arts, {(64, 64): 3.0, (128, 128): 1.0, (64, 128): 2.0})
    doc.pop("reps")
    report.write_text(json.dumps(doc))
    run = CliRunner()
    r = run.invoke(cli, ["measurements", "record", str(report), "--cache", url])
    assert r.exit_code == 2 and "repeats" in r.output  # the report does not say: refused, not guessed
    r = run.invoke(cli, ["measurements", "record", str(report), "--cache", url, "--repeats", "15", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)[str(report)]["recorded"] == 3
    rows = json.loads(run.invoke(cli, ["measurements", "ls", "--family", "gemm", "--arch", "gfx942", "--cache", url,
                                       "--json"]).output)
    assert sorted(m["median_ms"] for m in rows) == [1.0, 2.0, 3.0] and {m["repeats"] for m in rows} == {15}
    args = ["select", "--arch", "gfx942", "--family", "gemm", "--problem", json.dumps(PROBLEM), "--cache", url]
    doc = json.loads(run.invoke(cli, args + ["--json"]).output)
    assert doc["accepted"][0]["key"] == arts[(128, 128)].key and doc["accepted"][0]["basis"] == "measured"
    text = run.invoke(cli, args).output.splitlines()
    head = text[2].split()
    # the header spells "est ms" in two words, so a row's columns sit one to the left
    assert text[3].split()[head.index("basis") - 1] == "1.0000"
