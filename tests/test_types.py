"""The type checker over the product (pyproject.toml [tool.mypy]): clean, with no module exempt.

Until issue 36 a ratchet of ``ignore_errors`` overrides let 76 modules carry 507 errors; it is empty
now, and these tests keep it so: the configured run is clean (once per test run, tests/_once.py),
pyproject declares no override that silences a module, and every ``# type: ignore`` in the product
names the error it silences (a bare one would hide any error on its line).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from _once import once

ROOT = Path(__file__).resolve().parent.parent
BARE_IGNORE = re.compile(r"#\s*type:\s*ignore(?!\[)")


def _configured_run(d: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(d / "cache")], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    (d / "run.json").write_text(json.dumps({"returncode": proc.returncode, "stdout": proc.stdout}))


@pytest.fixture(scope="module")
def configured(tmp_path_factory) -> Path:
    """`mypy` as scripts/run-tests.sh and `make quality` run it (pyproject.toml's config): its
    answer (run.json)."""
    return once(tmp_path_factory, "mypy-configured", _configured_run)


def test_no_module_is_exempt():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    silencing = [o for o in cfg.get("overrides", []) if o.get("ignore_errors") or o.get("disable_error_code")]
    assert silencing == [], f"an override silences type errors in {[o.get('module') for o in silencing]}: fix them"
    assert not cfg.get("disable_error_code"), "the product's mypy run silences error codes"


def test_every_type_ignore_names_its_error():
    bare = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "rocke_aot").rglob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if BARE_IGNORE.search(line)]
    assert bare == [], "a bare `# type: ignore` (name the code: # type: ignore[code]):\n" + "\n".join(bare)


def test_the_bare_ignore_scan_catches_one():
    assert BARE_IGNORE.search("x = f()  # type: ignore") and BARE_IGNORE.search("x  # type:ignore  # why")
    assert not BARE_IGNORE.search("x = f()  # type: ignore[arg-type]  # why")


def test_the_configured_run_is_clean(configured):
    run = json.loads((configured / "run.json").read_text())
    assert run["returncode"] == 0, run["stdout"][-4000:]
