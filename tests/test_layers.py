"""The layers import one way (import-linter's contracts in .importlinter), checked on every run.

Each layer is a real folder of the one import package (rocke_aot/aot/, rocke_aot/cache/, ...), so
import-linter, type checkers and IDEs read the tree as it stands. The violation tests lint a copy
of the tree as git sees it, with one bad import added. The contracts name every subpackage of
rocke_aot (tests/_product.py derives the list from the tree), so no folder escapes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _product import SUBPACKAGES
from _tree import git_tree

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    # import-linter puts its working directory first on sys.path: the rocke_aot/ found is root's.
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([str(LINT), str(root / ".importlinter")], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_layer_contracts_hold(tmp_path):
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") >= 2


@pytest.mark.parametrize("where, bad_import", [
    ("rocke_aot/variants/problems.py", "from rocke_aot.aot.lower import module as _x\n"),  # variants -> aot
    ("rocke_aot/cache/keys.py", "from rocke_aot.variants import table as _x\n"),  # cache -> variants
    ("rocke_aot/lanes.py", "from rocke_aot.cache import keys as _x\n"),  # vocabulary -> cache
    ("rocke_aot/aot/toolchains/drift.py", "from rocke_aot.cli import options as _x\n"),  # aot -> cli
    ("rocke_aot/service/access.py", "from rocke_aot.cache import models as _x\n"),  # the service -> the store's tables
    ("rocke_aot/cli/cache.py", "from rocke_aot.cache import blobs as _x\n"),  # the CLI -> a part behind Store
])
def test_a_layering_violation_is_caught(tmp_path, where, bad_import):
    site = git_tree(tmp_path / "tree")
    path = site / where
    src = path.read_text()
    # after the module docstring and __future__ import, so the file stays valid Python
    anchor = "from __future__ import annotations\n"
    assert anchor in src
    path.write_text(src.replace(anchor, anchor + bad_import, 1))
    proc = _lint(site)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout, proc.stdout[-3000:]


def test_the_contracts_name_every_product_folder():
    """A folder added under rocke_aot/ must take its floor in .importlinter's layers (or its own
    forbidden contract): the list of product folders is the tree itself, not a hand-kept one."""
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(ROOT / ".importlinter")
    named = set()
    for section in cfg.sections():
        for field in ("layers", "source_modules"):
            for line in cfg[section].get(field, "").split():
                if line.startswith("rocke_aot."):
                    named.add(line.split(".")[1])
    assert SUBPACKAGES and set(SUBPACKAGES) <= named, sorted(set(SUBPACKAGES) - named)
