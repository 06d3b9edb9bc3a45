"""The layers import one way (import-linter's contracts in .importlinter), checked on every run.

rocke_aot spans several folders (aot/, cache/, cli/, ...) mapped into one import package; an
editable install hides that from import-linter's file scan, so the test lays the package out as
an installed wheel would (a copy in a temporary directory) and lints that copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lay_out(dest: Path) -> Path:
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for pkg, folder in dirs.items():
        shutil.copytree(ROOT / folder, dest.joinpath(*pkg.split(".")),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)
    return dest


def _lint(site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(site))
    # cwd is the temporary directory so the repository's own rocke_aot/ folder cannot shadow the copy.
    return subprocess.run([str(LINT), str(ROOT / ".importlinter")], cwd=site, env=env,
                          capture_output=True, text=True, timeout=120)


def test_layer_contracts_hold(tmp_path):
    proc = _lint(_lay_out(tmp_path / "site"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") >= 2


@pytest.mark.parametrize("where, bad_import", [
    ("variants/gemm.py", "from rocke_aot.aot.lower import module as _x\n"),  # variants -> aot
    ("cache/keys.py", "from rocke_aot.variants import table as _x\n"),  # cache -> variants
    ("rocke_aot/lanes.py", "from rocke_aot.cache import keys as _x\n"),  # vocabulary -> cache
    ("aot/drift.py", "from rocke_aot.cli import options as _x\n"),  # aot -> cli
])
def test_a_layering_violation_is_caught(tmp_path, where, bad_import):
    site = _lay_out(tmp_path / "site")
    dirs = {"rocke_aot": "rocke_aot", "aot": "rocke_aot/aot", "cache": "rocke_aot/cache",
            "variants": "rocke_aot/variants", "cli": "rocke_aot/cli"}
    folder, name = where.split("/", 1)
    path = site / dirs[folder] / name
    src = path.read_text()
    # after the module docstring and __future__ import, so the file stays valid Python
    anchor = "from __future__ import annotations\n"
    assert anchor in src
    path.write_text(src.replace(anchor, anchor + bad_import, 1))
    proc = _lint(site)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout, proc.stdout[-3000:]
