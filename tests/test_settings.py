"""One settings module: every ROCKE_AOT_* variable the product reads is registered there, and
read through it (rocke_aot/settings.py); `rocke-aot settings` prints them."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from _product import product_files
from _product import rel as product_rel
from click.testing import CliRunner

from rocke_aot import settings
from rocke_aot.cli.main import cli
from rocke_aot.errors import SettingError

ROOT = Path(__file__).resolve().parent.parent
# Worker plugin files run in a lane's interpreter, which may lack rocke_aot: they read the
# variable their parent set for them by its literal name.
WORKER_FILES = {"aot/compiler/_comgr_handler.py", "aot/toolchains/_triton24_worker.py"}
NAME = re.compile(r"ROCKE_AOT_[A-Z0-9_]*[A-Z0-9]")


def _product_files():
    return product_files()


def test_no_module_but_settings_spells_a_variable_name():
    offenders = []
    for p in _product_files():
        rel = product_rel(p)
        if rel == "settings.py" or rel in WORKER_FILES:
            continue
        for node in ast.walk(ast.parse(p.read_text(), rel)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                offenders.append(f"{rel}:{node.lineno}: {node.value}")
    assert offenders == [], "name these through rocke_aot.settings (register new ones there):\n" + "\n".join(offenders)


def test_every_variable_the_product_mentions_is_registered_and_every_registered_one_is_used():
    registered = {s.name for s in settings.SETTINGS}
    mentioned: dict[str, str] = {}
    used_constants = set()
    constants = {v: k for k, v in vars(settings).items() if isinstance(v, str) and NAME.fullmatch(v)}
    assert set(constants) == registered  # one constant per setting, no stray one
    for p in _product_files():
        rel = p.relative_to(ROOT).as_posix()
        if rel == "rocke_aot/settings.py":
            continue
        text = p.read_text()
        for m in NAME.finditer(text):
            mentioned.setdefault(m.group(0), rel)
        used_constants |= set(re.findall(r"settings\.([A-Z][A-Z0-9_]+)", text))
    unregistered = {n: f for n, f in mentioned.items() if n not in registered}
    assert unregistered == {}, f"add these to rocke_aot/settings.py: {unregistered}"
    unused = {constants[n] for n in registered} - used_constants
    assert unused == set(), f"registered but read nowhere: {sorted(unused)}"
    assert len(registered) >= 16


def test_values_are_checked_and_unknown_names_refused():
    assert settings.flag(settings.OFFLINE, {}) is False
    assert settings.flag(settings.OFFLINE, {settings.OFFLINE: "1"}) is True
    with pytest.raises(SettingError, match="ROCKE_AOT_OFFLINE must be 0 or 1"):
        settings.flag(settings.OFFLINE, {settings.OFFLINE: "yes"})
    assert settings.integer(settings.CACHE_MAX_BYTES, {settings.CACHE_MAX_BYTES: "1024"}) == 1024
    assert settings.integer(settings.CACHE_MAX_BYTES, {settings.CACHE_MAX_BYTES: ""}) is None
    for bad in ("-1", "1e6", "ten"):
        with pytest.raises(SettingError, match="non-negative integer"):
            settings.integer(settings.CACHE_MAX_BYTES, {settings.CACHE_MAX_BYTES: bad})
    with pytest.raises(SettingError, match="not a registered setting"):
        settings.raw("ROCKE_AOT_CACHE_MAXBYTES", {})


def test_the_store_and_the_client_read_through_settings(tmp_path, monkeypatch):
    from rocke_aot.cache.store import Store
    from rocke_aot.service.client import Client

    monkeypatch.setenv("ROCKE_AOT_CACHE_MAX_BYTES", "4096")
    with Store.open(tmp_path / "c.sqlite") as store:
        assert store.max_bytes == 4096
    monkeypatch.setenv("ROCKE_AOT_CACHE_MAX_BYTES", "4k")
    with pytest.raises(SettingError, match="ROCKE_AOT_CACHE_MAX_BYTES"):
        Store.open(tmp_path / "d.sqlite")
    monkeypatch.delenv("ROCKE_AOT_CACHE_MAX_BYTES")
    monkeypatch.setenv("ROCKE_AOT_OFFLINE", "1")
    assert Client(None, cache=tmp_path / "e.sqlite").offline is True


def test_the_settings_command_prints_values_and_hides_secrets():
    env = {"ROCKE_AOT_LANE": "llvm22", "ROCKE_AOT_TOKEN": "s3cret-token", "ROCKE_AOT_COMGR_LIB": "/x/libamd_comgr.so"}
    r = CliRunner().invoke(cli, ["settings", "--json"], env=env)
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in json.loads(r.output)}
    assert rows["ROCKE_AOT_LANE"]["value"] == "llvm22" and rows["ROCKE_AOT_LANE"]["set"]
    assert rows["ROCKE_AOT_TOKEN"]["value"] == "(set)" and "s3cret" not in r.output
    assert "ROCKE_AOT_COMGR_LIB" not in rows  # internal: only with --all
    r = CliRunner().invoke(cli, ["settings", "--all", "--json"], env=env)
    rows = {row["name"]: row for row in json.loads(r.output)}
    assert set(rows) == {s.name for s in settings.SETTINGS}
    assert rows["ROCKE_AOT_COMGR_LIB"]["value"] == "/x/libamd_comgr.so" and rows["ROCKE_AOT_COMGR_LIB"]["internal"]
    text = CliRunner().invoke(cli, ["settings"], env=env).output
    assert "ROCKE_AOT_HOME" in text and "s3cret" not in text
