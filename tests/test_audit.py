"""`rocke-aot cache audit`: real kernels re-lowered; a digest hole is found and exits 1."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from rocke_aot.aot import audit as audit_mod
from rocke_aot.aot.builder import build
from rocke_aot.aot.recipe import recipe_digest
from rocke_aot.cache.store import Store
from rocke_aot.cli.main import cli
from rocke_aot.errors import SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

TINY = {"block_m": 32, "block_n": 32, "block_k": 32, "in_dtype": "f16", "out_dtype": "f32",
        "double_buffer": False, "path": "fma"}


def run(*args):
    return CliRunner().invoke(cli, list(args), standalone_mode=False, catch_exceptions=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory, all_toolchains):
    from rocke_aot.aot.toolchains import toolchains_for_lane

    url = f"sqlite:///{tmp_path_factory.mktemp('audit') / 'c.sqlite'}"
    llvm22 = toolchains_for_lane(get_lane("llvm22"), all_toolchains)[0]
    with Store.open(url) as store:
        s = build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=["llvm22"], store=store,
                  toolchains=[llvm22], where=TINY)
        assert s["built"] == 2 and s.exit_code == 0
    return url


def _copy(src: str, tmp_path) -> str:
    # each test damages its own copy of the built store
    dst = tmp_path / "copy.sqlite"
    dst.write_bytes(Path(src.removeprefix("sqlite:///")).read_bytes())
    return f"sqlite:///{dst}"


def test_a_clean_store_audits_clean(built):
    res = run("cache", "audit", "--cache", built, "--json")
    assert res.exception is None, res.output
    d = json.loads(res.output)
    assert (d["ok"], d["artifacts"], d["same_recipe"], d["checked"], d["holes"]) == (True, 2, 2, 2, [])
    assert d["recipe_digest"] == recipe_digest() and res.return_value == 0
    text = run("cache", "audit", "--cache", built, "--sample", "1")
    assert text.return_value == 0 and "1 re-lowered: ok" in text.output


def test_an_edited_ir_record_is_a_hole(built, tmp_path):
    url = _copy(built, tmp_path)
    with Store.open(url) as s:
        victim = sorted(a.key for a in s.find())[0]
        with s.engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE artifacts SET ir_sha256 = '{'0' * 64}' WHERE key = '{victim}'")
    res = run("cache", "audit", "--cache", url, "--json")
    d = json.loads(res.output)
    assert res.return_value == 1 and d["ok"] is False
    assert [h["key"] for h in d["holes"]] == [victim] and d["holes"][0]["stored_ir_sha256"] == "0" * 64
    text = run("cache", "audit", "--cache", url)
    assert text.return_value == 1 and f"hole {victim}" in text.output
    # the real binary's exit status
    exe = Path(sys.executable).with_name("rocke-aot")
    assert subprocess.run([str(exe), "cache", "audit", "--cache", url], capture_output=True).returncode == 1
    assert subprocess.run([str(exe), "cache", "audit", "--cache", built], capture_output=True).returncode == 0


def test_lowering_the_digest_does_not_see_is_a_hole_for_every_artifact(built, monkeypatch):
    # As if the IR depended on something outside the recipe rule (a data file, an environment
    # variable): the current code now lowers other IR under the same keys.
    real = audit_mod.lower

    def drifted(*a, **kw):
        k = real(*a, **kw)
        ir = k.ir + "\n; drifted\n"
        return dataclasses.replace(k, ir=ir, ir_sha256=hashlib.sha256(ir.encode()).hexdigest())

    monkeypatch.setattr(audit_mod, "lower", drifted)
    with Store.open(built) as s:
        report = audit_mod.audit(s)
        stored = {a.key: a.ir_sha256 for a in s.find()}
    assert not report.ok and report.checked == 2
    assert {h.key for h in report.holes} == set(stored)
    assert all(h.current_ir_sha256 != stored[h.key] for h in report.holes)


def test_artifacts_of_another_recipe_are_skipped(built, tmp_path):
    url = _copy(built, tmp_path)
    with Store.open(url) as s, s.engine.begin() as conn:
        # keys no longer match their inputs, but audit only asks "same recipe?": this row is not
        conn.exec_driver_sql("UPDATE artifacts SET recipe_digest = 'an-older-recipe', ir_sha256 = "
                             f"'{'1' * 64}' WHERE key IN (SELECT key FROM artifacts ORDER BY key LIMIT 1)")
    with Store.open(url) as s:
        report = audit_mod.audit(s)
    assert report.ok and (report.artifacts, report.same_recipe, report.checked) == (2, 1, 1)


def test_bad_sample_is_refused(built):
    with Store.open(built) as s, pytest.raises(SpecError):
        audit_mod.audit(s, sample=0)
