"""The family registry: family name -> (spec class, lowerer).

    get_family("gemm") -> Family(name, spec_class=GemmSpec, lowerer=lower_gemm)
    families()         -> ("gemm", ...)            every registered family, in registry order

A family module exposes ``FAMILY = Family(...)``; adding one is one line in
``_FAMILY_MODULES``. Modules are imported on first use (not at package import), so the
lowering toolkit (aot/lower) can be imported by a family without an import cycle.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable

from rocke_aot.errors import SpecError

# Family modules under rocke_aot.aot.families, one per line.
_FAMILY_MODULES: tuple[str, ...] = (
    "gemm",
    "conv_direct_fwd",
    "conv_dgrad_patch",
)


@dataclass(frozen=True)
class Family:
    name: str
    spec_class: type  # frozen dataclass with to_dict()/from_dict() and kernel_name
    lowerer: Callable[..., Any]  # (spec, Target, Lane) -> LoweredKernel
    description: str = ""

    def spec_from(self, spec: object) -> Any:
        """A spec instance of this family from an instance or its canonical dict."""
        if isinstance(spec, self.spec_class):
            return spec
        if isinstance(spec, dict):
            return self.spec_class.from_dict(spec)
        raise SpecError(f"family {self.name}: a spec must be a {self.spec_class.__name__} or a dict, "
                        f"got {type(spec).__name__}")


_LOADED: dict[str, Family] = {}
_LOAD_LOCK = threading.Lock()


def _load() -> dict[str, Family]:
    # Builder threads (and Dask worker threads) may ask at once: load under a lock and
    # publish the complete table in one assignment, so nobody sees it half-filled.
    if not _LOADED:
        with _LOAD_LOCK:
            if not _LOADED:
                table: dict[str, Family] = {}
                for mod_name in _FAMILY_MODULES:
                    fam = importlib.import_module(f"{__name__}.{mod_name}").FAMILY
                    if fam.name in table:
                        raise RuntimeError(f"family {fam.name} registered twice")
                    table[fam.name] = fam
                _LOADED.update(table)
    return _LOADED


def families() -> tuple[str, ...]:
    return tuple(_load())


def get_family(name: object) -> Family:
    if not isinstance(name, str):
        raise SpecError(f"a family name must be a string, got {type(name).__name__} {name!r}")
    fam = _load().get(name)
    if fam is None:
        raise SpecError(f"unknown kernel family {name!r}; families: {', '.join(_load())}")
    return fam
