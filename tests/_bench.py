"""The scripts under bench/ as modules for tests. bench/ is not a package: its folder goes at the
end of sys.path once, so a bench script imports its siblings by name here as it does when run
(``python bench/x.py`` puts bench/ first on the path)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    return importlib.import_module(name)
