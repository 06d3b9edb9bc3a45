"""The type checker over the product, with its ratchet (pyproject.toml [tool.mypy]).

One mypy run without the ratchet's ``ignore_errors`` override gives the modules that carry type
errors. Every one of them must be on the ratchet list (a module off the list, new ones included,
is clean), and every module on the list must still carry an error (one that has become clean is
taken off, so the list only shrinks).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
ERROR = re.compile(r"^(rocke_aot/\S+\.py):\d+: error: ")


def _module(path: str) -> str:
    mod = path[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def test_the_product_type_checks_and_the_ratchet_only_shrinks(tmp_path):
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    ratchet = {m for o in cfg.get("overrides", []) if o.get("ignore_errors") for m in o["module"]}
    ini = tmp_path / "mypy.ini"
    ini.write_text("[mypy]\npython_version = 3.11\nignore_missing_imports = True\n")
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ini), "--cache-dir",
                           str(tmp_path / "cache"), "rocke_aot"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    erring = {_module(m.group(1)) for line in proc.stdout.splitlines() if (m := ERROR.match(line))}
    new = sorted(erring - ratchet)
    assert new == [], "type errors outside the ratchet list:\n" + "\n".join(
        line for line in proc.stdout.splitlines() if any(line.startswith(n.replace(".", "/")) for n in new))
    clean = sorted(ratchet - erring)
    assert clean == [], f"these modules type-check now: take them off [tool.mypy] overrides: {clean}"


def test_the_configured_run_is_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:]
