"""The aot half of every built-in family: its lowerer, registered against the family's name.

    variants/families.py   the registry: get_family("gemm") -> Family (spec, problem, table, model)
    here                   register_lowerer("gemm", with_contract(lower_gemm)), for each built-in
                           family, when this package is imported (aot.lower.lower imports it)
        lowerer(spec, target, lane) -> LoweredKernel whose .launch is the LaunchContract
            (spec.launch_formulas(), block = the kernel's block size, the lowering's kernargs:
             the family's ArgDefs laid out by launch.natural_layout; the builder re-checks the
             layout against the code object)
    get_family / families  the registry's own lookup, re-exported so that a caller of the aot
                           layer gets families whose lowerers are registered

The lowerer modules are imported here statically, by name (no "module:function" strings):
the cache key's recipe rule follows these imports like any other. A family plugin registers
its lowerer the same way from its own aot-side module.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from rocke_aot.aot.families.conv_dgrad_patch import lower_conv_dgrad_patch
from rocke_aot.aot.families.conv_direct_fwd import lower_conv_direct_fwd
from rocke_aot.aot.families.gemm import lower_gemm
from rocke_aot.aot.families.triton import lower_triton
from rocke_aot.errors import SpecError
from rocke_aot.launch import LaunchContract, natural_layout
from rocke_aot.variants.families import family_names, get_family, register_lowerer
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
                                kernel.kernarg_size, kernel.max_tensor_bytes)


def with_contract(raw: Callable[..., Any]) -> Callable[..., Any]:
    """A lowerer that attaches the launch contract to what ``raw`` lowers (IR untouched: the
    contract is metadata). ``.raw`` is the family module's own function."""

    @functools.wraps(raw)
    def lowerer(spec: Any, target: Any, lane: Any) -> Any:
        kernel = raw(spec, target, lane)
        return dataclasses.replace(kernel, launch=lowering_contract(spec, kernel))

    lowerer.raw = raw  # type: ignore[attr-defined]
    return lowerer


BUILTIN_LOWERERS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("gemm", lower_gemm),
    ("conv_direct_fwd", lower_conv_direct_fwd),
    ("conv_dgrad_patch", lower_conv_dgrad_patch),
)
for _name, _raw in BUILTIN_LOWERERS:
    register_lowerer(_name, with_contract(_raw))
# Every Triton family (variants/triton.py) lowers to a compile request with its own contract
# (the parameters Triton specializes away, its scratch pointers): one lowerer for the kind.
for _name in family_names():
    if is_triton(get_family(_name)):
        register_lowerer(_name, lower_triton)


def families() -> tuple[str, ...]:
    return family_names()


__all__ = ["BUILTIN_LOWERERS", "families", "get_family", "lowering_contract", "with_contract"]
