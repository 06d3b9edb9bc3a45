"""The type checker over the product, with its ratchet (pyproject.toml [tool.mypy]).

One mypy run without the ratchet's ``ignore_errors`` override gives the modules that carry type
errors. Every one of them must be on the ratchet list (a module off the list, new ones included,
is clean), and every module on the list must still carry an error (one that has become clean is
taken off, so the list only shrinks).

The configured run goes first (once per test run, tests/_once.py): it is clean, so mypy caches
every module. The run without the ratchet starts from a copy of that cache with the same options
but the ratchet's ``ignore_errors``: only the ratchet's modules are checked again (a cold run of
each took as long; the cache holds no error, mypy writes none for a module with errors).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from _once import once

ROOT = Path(__file__).resolve().parent.parent
ERROR = re.compile(r"^(rocke_aot/\S+\.py):\d+: error: ")


def _module(path: str) -> str:
    mod = path[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _configured_run(d: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(d / "cache")], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    (d / "run.json").write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout}))


@pytest.fixture(scope="module")
def configured(tmp_path_factory) -> Path:
    """`mypy` as scripts/run-tests.sh and `make quality` run it (pyproject.toml's config): its
    answer (run.json) and its cache."""
    return once(tmp_path_factory, "mypy-configured", _configured_run)


def _ini_value(v) -> str:
    if isinstance(v, bool):
        return str(v)
    return ", ".join(v) if isinstance(v, list) else str(v)


def test_the_product_type_checks_and_the_ratchet_only_shrinks(tmp_path, configured):
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    ratchet = {m for o in cfg.get("overrides", []) if o.get("ignore_errors") for m in o["module"]}
    assert ratchet and all(set(o) <= {"module", "ignore_errors"} for o in cfg.get("overrides", [])), \
        "an override other than the ratchet's: carry it into the run below"
    # pyproject's options without the ratchet's overrides (the cache stays valid for every other module)
    ini = tmp_path / "mypy.ini"
    ini.write_text("[mypy]\n" + "".join(f"{k} = {_ini_value(v)}\n" for k, v in cfg.items() if k != "overrides"))
    shutil.copytree(configured / "cache", tmp_path / "cache")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ini), "--cache-dir",
                           str(tmp_path / "cache")], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    erring = {_module(m.group(1)) for line in proc.stdout.splitlines() if (m := ERROR.match(line))}
    new = sorted(erring - ratchet)
    assert new == [], "type errors outside the ratchet list:\n" + "\n".join(
        line for line in proc.stdout.splitlines() if any(line.startswith(n.replace(".", "/")) for n in new))
    clean = sorted(ratchet - erring)
    assert clean == [], f"these modules type-check now: take them off [tool.mypy] overrides: {clean}"


def test_the_configured_run_is_clean(configured):
    run = json.loads((configured / "run.json").read_text())
    assert run["returncode"] == 0, run["stdout"][-4000:]
