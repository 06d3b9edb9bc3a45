"""The aot side of the family registry: each entry of variants/families.py, with its lowerer
resolved and the launch contract attached to what it lowers.

    variants.families.FAMILIES["gemm"].lowerer = "rocke_aot.aot.families.gemm:lower_gemm"
        |  resolve_lowerer(text): import the module (under rocke_aot.aot.families only), getattr
        v
    kb.define_kernel(spec.launch_formulas().args)   what every family lowerer does: the
        family's ArgDefs are the IR's parameters and, laid out by launch.natural_layout, the
        launch contract's arguments (one list, one layout rule)
    get_family("gemm") -> Family(name, entry, spec_class=GemmSpec, lowerer=<lower + launch>)
        lowerer(spec, target, lane) -> LoweredKernel whose .launch is the LaunchContract
            (spec.launch_formulas(), block = the kernel's block size, the lowering's kernargs
             as the layout; the builder re-checks the layout against the code object)
    families() -> ("gemm", ...)       every registered family, in registry order

There is no list of families here: the variants registry is the only one.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from dataclasses import dataclass
from typing import Any, Callable

from rocke_aot.errors import SpecError
from rocke_aot.launch import LaunchContract, natural_layout
from rocke_aot.variants.families import FAMILIES, FamilyEntry, get_entry

_PACKAGE = __name__  # lowerers must live under rocke_aot.aot.families
# For the cache key's recipe rule (aot/recipe.py): resolve_lowerer imports only modules of
# this package (checked below), so every module of it is part of the recipe digest.
__recipe_imports__ = ("rocke_aot.aot.families",)


@dataclass(frozen=True)
class Family:
    name: str
    entry: FamilyEntry
    raw_lowerer: Callable[..., Any]  # (spec, Target, Lane) -> LoweredKernel without .launch

    @property
    def spec_class(self) -> type:
        return self.entry.spec_type

    @property
    def description(self) -> str:
        return self.entry.description

    def spec_from(self, spec: object) -> Any:
        return self.entry.spec_from(spec)

    def lowerer(self, spec: Any, target: Any, lane: Any) -> Any:
        """Lower, then attach the launch contract (IR untouched: the contract is metadata)."""
        kernel = self.raw_lowerer(spec, target, lane)
        return dataclasses.replace(kernel, launch=lowering_contract(spec, kernel))


def lowering_contract(spec: Any, kernel: Any) -> LaunchContract:
    """The launch contract from the spec's formulas and the lowering's own kernarg layout.

    The family's argument list (names, kinds, dtypes) must be the kernel's parameter list,
    in order: a lowerer and its formulas that disagree are a bug, refused here.
    """
    formulas = spec.launch_formulas()
    laid = natural_layout(formulas.args)
    if laid != kernel.kernargs:
        raise SpecError(f"{kernel.kernel_name}: the lowering's arguments {[a.name for a in kernel.kernargs]} are "
                        f"not the family's {[a.name for a in laid]} (define_kernel(spec.launch_formulas().args))")
    return LaunchContract.build(kernel.kernel_name, formulas, (kernel.block_size, 1, 1), laid,
                                kernel.kernarg_size, kernel.max_tensor_bytes)


def resolve_lowerer(text: str) -> Callable[..., Any]:
    """``"rocke_aot.aot.families.gemm:lower_gemm"`` -> the function (SpecError when it is not one)."""
    mod_name, sep, attr = text.partition(":")
    if not sep or not attr or not (mod_name == _PACKAGE or mod_name.startswith(_PACKAGE + ".")):
        raise SpecError(f"lowerer {text!r} must be 'module:function' under {_PACKAGE}")
    try:
        fn = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise SpecError(f"lowerer {text!r} does not resolve: {e}") from None
    if not callable(fn):
        raise SpecError(f"lowerer {text!r} is not callable")
    return fn


_LOADED: dict[str, Family] = {}
_LOAD_LOCK = threading.Lock()


def get_family(name: object) -> Family:
    entry = get_entry(name)  # SpecError for an unknown or non-string name
    fam = _LOADED.get(entry.name)
    if fam is None or fam.entry is not entry:
        # Builder (and Dask worker) threads may ask at once; resolving imports the family
        # module, so do it under a lock and publish the finished Family in one assignment.
        with _LOAD_LOCK:
            fam = _LOADED.get(entry.name)
            if fam is None or fam.entry is not entry:
                fam = Family(entry.name, entry, resolve_lowerer(entry.lowerer))
                _LOADED[entry.name] = fam
    return fam


def families() -> tuple[str, ...]:
    return tuple(FAMILIES)
