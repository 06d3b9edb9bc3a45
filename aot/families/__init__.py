"""The aot side of the family registry: each entry of variants/families.py, with its lowerer
resolved and the launch contract attached to what it lowers.

    variants.families.FAMILIES["gemm"].lowerer = "rocke_aot.aot.families.gemm:lower_gemm"
        |  resolve_lowerer(text): import the module (under rocke_aot.aot.families only), getattr
        v
    kernel_params(spec) -> [("A", "ptr addrspace(1)", "read_only"), ..., ("K", "i32", None)]
        what every family lowerer passes to define_kernel: the arguments of the spec's
        launch_formulas, so the IR's parameters and the launch contract are one list
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
from rocke_aot.launch import KernelArg, LaunchContract
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


# LLVM type text of each contract argument kind / scalar dtype (both targets: global memory
# is addrspace(1) on amdgcn and nvptx64).
_LLVM_TYPES = {"global_pointer": "ptr addrspace(1)", "i32": "i32", "u32": "i32", "i64": "i64"}


def kernel_params(spec: Any) -> list[tuple[str, str, str | None]]:
    """The kernel's parameters (name, LLVM type text, access) for KernelModule.define_kernel,
    from the spec's launch formulas: the argument list is defined once, in the family's spec."""
    return [(a.name, _LLVM_TYPES["global_pointer" if a.kind == "global_pointer" else a.dtype], a.access)
            for a in spec.launch_formulas().args]


def lowering_contract(spec: Any, kernel: Any) -> LaunchContract:
    """The launch contract from the spec's formulas and the lowering's own kernarg layout.

    The family's argument list (names, kinds, dtypes) must be the kernel's parameter list,
    in order: a lowerer and its formulas that disagree are a bug, refused here.
    """
    formulas = spec.launch_formulas()
    if len(formulas.args) != len(kernel.kernargs):
        raise SpecError(f"{kernel.kernel_name}: the family defines {len(formulas.args)} arguments, "
                        f"the lowering {len(kernel.kernargs)}")
    laid = []
    for d, k in zip(formulas.args, kernel.kernargs, strict=True):
        want_kind = "global_pointer" if k.kind == "global_buffer" else "scalar"
        if (d.name, d.kind) != (k.name, want_kind) or (d.kind == "scalar" and d.dtype != k.type):
            raise SpecError(f"{kernel.kernel_name}: argument {k.name} ({k.kind} {k.type}) does not match "
                            f"the family's {d.name} ({d.kind} {d.dtype})")
        laid.append(KernelArg(d.name, d.kind, d.dtype, d.expr, k.offset, k.size, k.size, d.access))
    return LaunchContract.build(kernel.kernel_name, formulas, (kernel.block_size, 1, 1), tuple(laid),
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
