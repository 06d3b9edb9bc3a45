"""The aot half of every family: its lowerer, registered against the family's name.

    variants/families.py   the registry: get_family("gemm") -> Family (spec, problem, table, model)
    here                   every native family's lowerer comes through its ``rocke_aot.lowerers``
                           entry point (rocke-aot's own family folders, rocke_aot/families/<name>/,
                           exactly as a plugin's), loaded on the family's first lookup below; every
                           Triton family gets the Triton kind's lowerer (triton.py: a compile request)
        lowerer(spec, target, lane) -> LoweredKernel whose .launch is the LaunchContract
            (spec.launch_formulas(), block = the kernel's block size, the lowering's kernargs:
             the family's ArgDefs laid out by launch.natural_layout; the builder re-checks the
             layout against the code object)
    get_family(name)       the registry's lookup, plus a plugin family's aot half: the first
                           lookup of a plugin family loads its ``rocke_aot.lowerers`` entry
                           point (LOWERER_GROUP; the same name, the same distribution):
                               [project.entry-points."rocke_aot.lowerers"]
                               rowsoftmax = "rocke_rowsoftmax.lower:lower_rowsoftmax"
                           and registers plugin_lowerer(fn): the launch contract attached as for
                           the built-ins, and every way the plugin can fail named (PluginError:
                           an import error, no or two entry points, a lowerer that raises
                           anything but a RockeError, returns something other than a
                           LoweredKernel of its family, or defines other kernel arguments)
    lowerer_error(name)    why a plugin family's lowerer did not load (None: it did, or built in)

A family's lowering code lives outside the recipe's modules (a plugin's package, or a folder of
rocke_aot/families/, which no layer imports); its plan key covers its own packages (aot/recipe.py
family_digest), so loading it through an entry point hides nothing from the key. What the
lowerers share stays here and in aot/lower (the recipe digest covers both): the conv engine
(_conv_ir.py, the two conv families' tile GEMM on LDS operands) and the Triton kind's lowerer.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from typing import Any

from rocke_aot.aot.families.triton import lower_triton
from rocke_aot.aot.lower.module import LoweredKernel
from rocke_aot.errors import PluginError, RockeError, SpecError
from rocke_aot.launch import LaunchContract, natural_layout
from rocke_aot.variants import families as registry
from rocke_aot.variants.families import LOWERER_GROUP, Family, FamilySource, family_names, register_lowerer
from rocke_aot.variants.triton import is_triton


def lowering_contract(spec: Any, kernel: Any) -> LaunchContract:
    """The launch contract from the spec's formulas and the lowering's own kernarg layout.

    The family's argument list must be the kernel's parameter list, in order, laid out by the
    one rule: a lowerer that defined its kernel from other arguments is a bug, refused here.
    """
    formulas = spec.launch_formulas()
    laid = natural_layout(formulas.args)
    if laid != kernel.kernargs:
        raise SpecError(f"{kernel.kernel_name}: the lowering's arguments {[a.name for a in kernel.kernargs]} are "
                        f"not the family's {[a.name for a in laid]} (define_kernel(spec.launch_formulas().args))")
    return LaunchContract.build(kernel.kernel_name, formulas, (kernel.block_size, 1, 1), laid,
                                kernel.kernarg_size, kernel.max_tensor_bytes, kernel.dynamic_lds_bytes)


# Every Triton family (variants/triton.py) lowers to a compile request with its own contract
# (the parameters Triton specializes away, its scratch pointers): one lowerer for the kind.
# (A plugin's Triton family gets the same lowerer when get_family below first sees it.)
for _name in registry.installed_builtin_names():  # no plugin discovery at import: that is lazy
    if is_triton(registry.get_family(_name)):
        register_lowerer(_name, lower_triton)


def plugin_lowerer(raw: Callable[..., Any], family: str, source: FamilySource) -> Callable[..., Any]:
    """A plugin's lowerer as the registry holds it: the launch contract attached, and every
    failure of the plugin's code a PluginError naming it. A RockeError the plugin raises on
    purpose (SpecError, CapabilityError: "this spec cannot lower here") passes through."""
    what = f"{source.describe()}: the lowerer of family {family}"

    def refuse(why: str) -> PluginError:
        return PluginError(f"{what} {why}", plugin=source.plugin, distribution=source.distribution, family=family)

    @functools.wraps(raw)
    def lowerer(spec: Any, target: Any, lane: Any) -> Any:
        try:
            kernel = raw(spec, target, lane)
        except RockeError:
            raise
        except Exception as e:  # noqa: BLE001 - the plugin's code: anything else is its bug
            raise refuse(f"raised {type(e).__name__}: {e}") from e
        if not isinstance(kernel, LoweredKernel):
            raise refuse(f"returned a {type(kernel).__name__}, not a LoweredKernel (KernelModule.lowered(family))")
        if kernel.family != family:
            raise refuse(f"returned a kernel of family {kernel.family!r} (KernelModule.lowered({family!r}))")
        try:
            contract = lowering_contract(spec, kernel)
        except SpecError as e:
            raise refuse(str(e)) from None
        return dataclasses.replace(kernel, launch=contract)

    lowerer.raw = raw  # type: ignore[attr-defined]
    return lowerer


_LOWERER_ERRORS: dict[str, PluginError] = {}
_LOWERER_LOCK = threading.Lock()


def _attach(family: Family) -> None:
    """Load and register the lowerer of a plugin family (once; a failure is kept and raised)."""
    source = registry.family_source(family.name)
    with _LOWERER_LOCK:
        if registry.has_lowerer(family.name) or family.name in _LOWERER_ERRORS:
            return
        if is_triton(family):  # the kind's lowerer: a compile request, no entry point of its own
            register_lowerer(family.name, lower_triton)
            return
        try:
            fn = _load_lowerer(family.name, source)
            register_lowerer(family.name, plugin_lowerer(fn, family.name, source))
        except PluginError as e:
            _LOWERER_ERRORS[family.name] = e


def _load_lowerer(name: str, source: FamilySource) -> Callable[..., Any]:
    def refuse(why: str) -> PluginError:
        return PluginError(f"{source.describe()}: {why}", plugin=source.plugin, distribution=source.distribution,
                           family=name)

    eps = [ep for ep in registry.entry_points(LOWERER_GROUP) if ep.name == name]
    mine = [ep for ep in eps if registry.plugin_source(ep).distribution == source.distribution]
    if not mine:
        others = ", ".join(f"{registry.plugin_source(ep).distribution}" for ep in eps)
        raise refuse(f"family {name} has no lowerer: declare {name} = \"module:function\" under "
                     f'[project.entry-points."{LOWERER_GROUP}"] of {source.distribution}'
                     + (f" (an entry point of that name in {others} does not count: a family's lowerer "
                        f"comes from its own distribution)" if others else ""))
    if len(mine) > 1:
        raise refuse(f"family {name} has {len(mine)} lowerer entry points: {', '.join(ep.value for ep in mine)}")
    ep = mine[0]
    # its own thread, a time bound, BaseException named (variants/families.py import_entry_point)
    fn = registry.import_entry_point(ep, source, name, what="its lowerer: ")
    if not callable(fn):
        raise refuse(f"its lowerer {ep.value} is a {type(fn).__name__}, not a function (spec, target, lane)")
    return fn


def get_family(name: object) -> Family:
    """The registry's Family, with its aot half attached (a plugin's lowerer loaded on first use)."""
    family = registry.get_family(name)
    if (not registry.has_lowerer(family.name) and family.name not in _LOWERER_ERRORS
            and registry.family_source(family.name).kind == "plugin"):
        _attach(family)
    err = _LOWERER_ERRORS.get(family.name)
    if err is not None:
        raise err
    return family


def lowerer_error(name: str) -> PluginError | None:
    """Why the lowerer of plugin family ``name`` cannot be used here (None: it can, or built in)."""
    try:
        get_family(name)
    except PluginError as e:
        return e
    return None


def families() -> tuple[str, ...]:
    return family_names()


__all__ = ["families", "get_family", "lowerer_error", "lowering_contract", "plugin_lowerer"]
