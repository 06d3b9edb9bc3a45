"""`rocke-aot cache ...` through click's CliRunner on the real group (standalone mode: the exit
codes and messages the binary gives, library errors translated by the group), and once as the
real binary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _pg import code_object, inputs, pg_database, put, store_url  # noqa: F401
from click.testing import CliRunner

from rocke_aot.cache import models
from rocke_aot.cache.store import Store
from rocke_aot.cli.main import cli

ROOT = Path(__file__).resolve().parents[1]


def run(*args, ok: bool = True):
    res = CliRunner().invoke(cli, list(args))
    if ok:
        assert res.exit_code == 0, res.output + repr(res.exception)
    return res


@pytest.fixture
def filled(store_url):
    with Store.open(store_url) as s:
        arts = [put(s, i) for i in range(3)]
        put(s, 3, arch="gfx950")
        s.put_failure(inputs(4), "LLVM ERROR: Cannot select", "log")
    return store_url, arts


def test_stats_json(filled):
    url, _ = filled
    d = json.loads(run("cache", "stats", "--cache", url, "--json").output)
    assert (d["artifacts"], d["failures"], d["blobs"], d["schema_version"]) == (4, 1, 4, models.SCHEMA_VERSION)
    assert d["backend"] in ("sqlite", "postgresql")
    text = run("cache", "stats", "--cache", url).output
    assert "artifacts  4" in text and "gfx950" in text


def test_ls(filled):
    url, arts = filled
    rows = json.loads(run("cache", "ls", "--cache", url, "--json", "--arch", "gfx942").output)
    assert sorted(r["key"] for r in rows) == sorted(a.key for a in arts)
    fails = json.loads(run("cache", "ls", "--cache", url, "--json", "--status", "failed").output)
    assert [f["error"] for f in fails] == ["LLVM ERROR: Cannot select"]
    assert arts[0].key[:16] in run("cache", "ls", "--cache", url).output
    bad = run("cache", "ls", "--cache", url, "--lane", "llvm21", ok=False)
    assert bad.exit_code == 2 and "unknown compiler lane" in bad.stderr


def test_show_by_prefix_and_out(filled, tmp_path):
    url, arts = filled
    d = json.loads(run("cache", "show", arts[1].key[:10], "--cache", url, "--json").output)
    assert d["key"] == arts[1].key and d["sha256"] == arts[1].sha256
    run("cache", "show", arts[1].key, "--cache", url, "--out", str(tmp_path / "k.hsaco"))
    assert (tmp_path / "k.hsaco").read_bytes() == code_object(1)
    res = run("cache", "show", "0000beef", "--cache", url, ok=False)
    assert res.exit_code == 1 and res.stderr.startswith("Error: NotFoundError: ")
    res = run("cache", "show", "xyz", "--cache", url, ok=False)  # a SpecError: bad input, exit 2
    assert res.exit_code == 2 and res.stderr.startswith("Error: ") and "SpecError" not in res.stderr


def test_verify_and_gc(filled):
    url, arts = filled
    res = run("cache", "verify", "--cache", url, "--json")
    assert json.loads(res.output)["ok"] is True and res.exit_code == 0
    with Store.open(url) as s, s.engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE blobs SET data = data || data WHERE sha256 = '{arts[0].sha256}'")
    res = run("cache", "verify", "--cache", url, "--json", ok=False)
    d = json.loads(res.stdout)
    assert d["ok"] is False and d["affected_keys"] == [arts[0].key] and res.exit_code == 1
    res = run("cache", "show", arts[0].key, "--cache", url, ok=False)
    assert res.exit_code == 1 and res.stderr.startswith("Error: IntegrityError: ")
    d = json.loads(run("cache", "gc", "--cache", url, "--json", "--max-bytes", "0").output)
    assert d["artifacts_evicted"] == 4 and d["stored_bytes_after"] == 0


def test_export_import(filled, tmp_path):
    url, arts = filled
    bundle = tmp_path / "x.bundle"
    d = json.loads(run("cache", "export", str(bundle), "--cache", url, "--json", "--no-failures").output)
    assert (d["artifacts"], d["failures"]) == (4, 0)
    other = f"sqlite:///{tmp_path / 'o.sqlite'}"
    # these artifacts' blobs are not code objects: the CLI validates each one like a publish
    res = run("cache", "import", str(bundle), "--cache", other, "--json", ok=False)
    assert res.exit_code == 1 and "BundleError" in res.stderr and "not a valid code object" in res.stderr
    with Store.open(other) as o:
        assert o.find(status="all") == []


def test_train_dicts_reports_each_pair(filled):
    url, _ = filled
    rows = json.loads(run("cache", "train-dicts", "--cache", url, "--json", "--min-samples", "50").output)
    assert {(r["arch"], r["family"]) for r in rows} == {("gfx942", "gemm"), ("gfx950", "gemm")}
    assert not any(r["adopted"] for r in rows) and all("samples" in r["reason"] for r in rows)
    assert "skipped" in run("cache", "train-dicts", "--cache", url).output


def test_help_has_examples():
    for sub in ("stats", "ls", "show", "verify", "audit", "gc", "export", "import", "train-dicts"):
        out = run("cache", sub, "--help").output
        assert "Example:" in out and "--cache" in out and "--json" in out, sub


def _bin(*args, env):
    return subprocess.run([str(ROOT / ".venv" / "bin" / "rocke-aot"), *args], capture_output=True, text=True, env=env)


def test_real_binary_stats_json_and_exit_codes(tmp_path):
    env = {**os.environ, "ROCKE_AOT_HOME": str(tmp_path / "home")}
    env.pop("ROCKE_AOT_CACHE", None)
    # a read command never creates what it reads (issue 39): no default cache yet is a named error
    proc = _bin("cache", "stats", "--json", env=env)
    assert proc.returncode == 1 and "NotFoundError: no cache at" in proc.stderr, proc.stderr
    assert not (tmp_path / "home" / "cache.sqlite").exists()
    Store.open(tmp_path / "home" / "cache.sqlite").close()
    proc = _bin("cache", "stats", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["url"] == f"sqlite:///{tmp_path / 'home' / 'cache.sqlite'}" and d["artifacts"] == 0
    with Store.open(tmp_path / "home" / "cache.sqlite") as s:
        a = put(s, 1)
        with s.engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE blobs SET data = x'00' || data WHERE sha256 = '{a.sha256}'")
    assert _bin("cache", "verify", env=env).returncode == 1
    proc = _bin("cache", "show", a.key, env=env)
    assert proc.returncode == 1 and "IntegrityError" in proc.stderr
    assert _bin("cache", "show", "nothex", env=env).returncode == 2
    assert sys.executable  # the binary ran under the project venv, not this interpreter's PATH
