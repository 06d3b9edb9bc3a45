"""The family registry: one ``Family`` object per kernel family, found by one name; every layer reads it.

    register(Family(name="gemm",
                    spec_type=GemmSpec,          variants/gemm.py (to_dict/from_dict, geometry,
                                                 launch_formulas: grid, tile count, arguments)
                    problem_type=GemmProblem,    variants/problems.py
                    table=tables.gemm.GEMM,      variants/tables/*.py (knob grid, lane decisions)
                    model=models.GEMM))          variants/models.py (accepts, efficiency)
        the built-in families: variants/builtin.py, imported by rocke_aot.variants itself, so
        any import of the variants layer has them
    register_lowerer("gemm", lower_gemm)         the aot half, against the same name
        (aot/families/gemm.py; rocke_aot.aot.families imports every built-in lowerer)

    get_family(name) -> Family     the one lookup: .spec_type, .problem_type, .table, .model,
                                   .lowerer, .launch(spec, problem, target), .spec_from(d)
    family_names() / family_for_spec(spec) / problem_from_dict(family, d) / FAMILIES (read-only)

Why two registrations for one object: a family has a variants half (its spec, problem, grid
and model: data and arithmetic, what a service host with no compiler needs) and an aot half
(its lowerer, which builds LLVM IR). Layers import one way, variants below aot, so the Family
is registered here with the variants half, and the lowerer is attached from aot/ by name; the
Family's ``lowerer`` reads it (a named SpecError where no aot half was loaded, never a silent
None). No "module:function" strings, no dynamic imports: the aot half is imported statically,
so the cache key's recipe rule sees it. A family plugin (a later entry-point group
``rocke_aot.families``) is one module pair doing the same two calls.

``entry.launch(spec, problem, target)`` -> LaunchPlan(grid, block, args in kernarg order)
    = LaunchContract.build(spec.launch_formulas(), spec.geometry(target).threads).plan(problem)
The launch contract an artifact stores (aot/builder) is built from the same formulas, with
the argument layout read back from the compiled code object.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from rocke_aot.errors import SpecError
from rocke_aot.launch import LaunchContract, LaunchFormulas, LaunchPlan
from rocke_aot.targets import Target
from rocke_aot.variants._fields import check_known

if TYPE_CHECKING:  # annotations only: the table and model modules import nothing of this one
    from rocke_aot.variants.models import Model
    from rocke_aot.variants.table import FamilyTable

_REGISTRY: dict[str, "Family"] = {}
_LOWERERS: dict[str, Callable[..., Any]] = {}
_LOCK = threading.Lock()
FAMILIES: Mapping[str, "Family"] = MappingProxyType(_REGISTRY)  # name -> Family, registration order


@dataclass(frozen=True)
class Family:
    """One kernel family: everything about it, found by its name (``get_family(name)``)."""

    name: str
    spec_type: type  # frozen dataclass: to_dict/from_dict, kernel_name, geometry, launch_formulas
    problem_type: type  # frozen dataclass of the runtime shape
    table: FamilyTable  # the knob grid per (arch, lane) and every lane decision (variants/table.py)
    model: Model  # accepts(spec, problem), efficiency (variants/models.py)
    description: str = ""

    @property
    def lowerer(self) -> Callable[..., Any]:
        """(spec, Target, Lane) -> LoweredKernel: the aot half, registered against this name by
        ``register_lowerer`` (rocke_aot.aot.families does it for the built-in families)."""
        fn = _LOWERERS.get(self.name)
        if fn is None:
            raise SpecError(f"family {self.name} has no lowerer in this process: its aot half registers one "
                            f"(import rocke_aot.aot.families, or the plugin's lowering module)")
        return fn

    def spec_from(self, spec: object) -> Any:
        """A spec of this family from an instance or its canonical dict."""
        if isinstance(spec, self.spec_type):
            return spec
        if isinstance(spec, dict):
            return self.spec_type.from_dict(spec)
        raise SpecError(f"family {self.name}: a spec must be a {self.spec_type.__name__} or a dict, "
                        f"got {type(spec).__name__}")

    def problem_from(self, problem: object) -> Any:
        if isinstance(problem, self.problem_type):
            return problem
        if isinstance(problem, dict):
            check_known(self.problem_type, problem, f"{self.name} problem")
            try:
                return self.problem_type(**problem)
            except TypeError as e:  # a required field is missing
                raise SpecError(f"{self.name} problem: {e}") from None
        raise SpecError(f"a {self.name} spec takes a {self.problem_type.__name__}, got {type(problem).__name__}")

    def formulas(self, spec: object) -> LaunchFormulas:
        return self.spec_from(spec).launch_formulas()

    def launch(self, spec: object, problem: object, target: object) -> LaunchPlan:
        """Grid, block and the kernel arguments (kernarg order, types, values) for one problem.

        Refuses (SpecError with the reason) a problem the spec cannot run: another baked
        filter or dtype, a tensor over the 32-bit offset limit.
        """
        spec, problem = self.spec_from(spec), self.problem_from(problem)
        why = self.model.accepts(spec, problem)
        if why:
            raise SpecError(f"{spec.kernel_name} cannot run this {self.name} problem: {why}")
        threads = spec.geometry(Target.parse(target)).threads
        return LaunchContract.build(spec.kernel_name, spec.launch_formulas(), (threads, 1, 1)).plan(problem)


def register(family: Family) -> Family:
    """Add a family; a second family of the same name, or a table naming another family, is refused."""
    if not isinstance(family, Family):
        raise SpecError(f"register() takes a Family, got {type(family).__name__}")
    if family.table.family != family.name:
        raise SpecError(f"family {family.name}: its variant table says {family.table.family}")
    with _LOCK:
        if family.name in _REGISTRY and _REGISTRY[family.name] is not family:
            raise SpecError(f"family {family.name} is already registered")
        if any(f.spec_type is family.spec_type for n, f in _REGISTRY.items() if n != family.name):
            raise SpecError(f"family {family.name}: spec type {family.spec_type.__name__} belongs to another family")
        _REGISTRY[family.name] = family
    return family


def register_lowerer(name: str, fn: Callable[..., Any]) -> None:
    """Attach the aot half of a registered family: ``fn(spec, Target, Lane) -> LoweredKernel``."""
    get_family(name)
    if not callable(fn):
        raise SpecError(f"family {name}: the lowerer must be callable, got {type(fn).__name__}")
    with _LOCK:
        if _LOWERERS.get(name, fn) is not fn:
            raise SpecError(f"family {name} already has a lowerer ({_LOWERERS[name].__qualname__})")
        _LOWERERS[name] = fn


def family_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get_family(name: object) -> Family:
    if not isinstance(name, str):
        raise SpecError(f"a family name must be a string such as 'gemm', got {type(name).__name__} {name!r}")
    family = _REGISTRY.get(name)
    if family is None:
        raise SpecError(f"unknown family {name!r}; known: {', '.join(_REGISTRY)}")
    return family


def family_for_spec(spec: object) -> Family:
    for family in _REGISTRY.values():
        if type(spec) is family.spec_type:
            return family
    raise SpecError(f"no registered family has spec type {type(spec).__name__}")


def problem_from_dict(family: object, d: object) -> Any:
    """The family's problem from JSON (the service): unknown or missing fields refused."""
    if not isinstance(family, str) or family not in _REGISTRY:
        raise SpecError(f"no problem type for family {family!r}; known: {', '.join(_REGISTRY)}")
    if not isinstance(d, dict):
        raise SpecError(f"a {family} problem must be a mapping, got {type(d).__name__}")
    return _REGISTRY[family].problem_from(d)


__all__ = ["FAMILIES", "Family", "family_for_spec", "family_names", "get_family", "problem_from_dict", "register",
           "register_lowerer"]
