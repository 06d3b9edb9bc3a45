"""The family registry: ONE entry per kernel family; every layer reads it.

    FAMILIES["gemm"] = FamilyEntry(
        name="gemm",
        spec_type=GemmSpec,                 variants/gemm.py (to_dict/from_dict, geometry,
                                            launch_formulas: grid, tile count, arguments)
        problem_type=GemmProblem,           variants/problems.py
        table=tables.gemm.GEMM,             variants/tables/*.py (knob grid, lane decisions)
        model=models.GEMM,                  variants/models.py (accepts, efficiency)
        lowerer="rocke_aot.aot.families.gemm:lower_gemm")
                                            named as data: variants may not import aot; the
                                            aot side (aot/families/__init__.py) resolves it,
                                            and a test resolves every entry
    get_entry(name) / family_names() / entry_for_spec(spec)
    entry.launch(spec, problem, target) -> LaunchPlan(grid, block, args in kernarg order)
        = LaunchContract.build(spec.launch_formulas(), spec.geometry(target).threads).plan(problem)
    problem_from_dict(family, d)        the service's JSON -> the family's problem type

Adding a family is one entry below (plus its spec, table, model and lowerer modules).
The launch contract an artifact stores (aot/builder) is built from the same formulas,
with the argument layout read back from the compiled code object.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.launch import LaunchContract, LaunchFormulas, LaunchPlan
from rocke_aot.targets import Target
from rocke_aot.variants import models
from rocke_aot.variants._fields import check_known
from rocke_aot.variants.conv import ConvDgradPatchSpec, ConvDirectFwdSpec
from rocke_aot.variants.gemm import GemmSpec
from rocke_aot.variants.models import Model
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem
from rocke_aot.variants.table import FamilyTable
from rocke_aot.variants.tables.conv import CONV_DGRAD_PATCH, CONV_DIRECT_FWD
from rocke_aot.variants.tables.gemm import GEMM


@dataclass(frozen=True)
class FamilyEntry:
    name: str
    spec_type: type  # frozen dataclass: to_dict/from_dict, kernel_name, geometry, launch_formulas
    problem_type: type  # frozen dataclass of the runtime shape
    table: FamilyTable
    model: Model
    lowerer: str  # "module:function" under rocke_aot.aot.families: (spec, Target, Lane) -> LoweredKernel
    description: str = ""

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


FAMILIES: dict[str, FamilyEntry] = {e.name: e for e in (
    FamilyEntry("gemm", GemmSpec, GemmProblem, GEMM, models.GEMM,
                "rocke_aot.aot.families.gemm:lower_gemm",
                "C = A x B, row-major; mfma / wmma / mma (sm_90) / fma paths"),
    FamilyEntry("conv_direct_fwd", ConvDirectFwdSpec, ConvProblem, CONV_DIRECT_FWD, models.CONV_DIRECT_FWD,
                "rocke_aot.aot.families.conv_direct_fwd:lower_conv_direct_fwd",
                "NHWC forward convolution, baked filter/stride/padding/dilation/channels"),
    FamilyEntry("conv_dgrad_patch", ConvDgradPatchSpec, PatchDgradProblem, CONV_DGRAD_PATCH,
                models.CONV_DGRAD_PATCH,
                "rocke_aot.aot.families.conv_dgrad_patch:lower_conv_dgrad_patch",
                "dX of a patch embedding: one GEMM dY x W[K, P*P*C] + pixel shuffle, border zeroed"),
)}

for _name, _e in FAMILIES.items():  # the table names its family too; they must agree
    if _e.table.family != _name:
        raise RuntimeError(f"family {_name}: its variant table says {_e.table.family}")


def family_names() -> tuple[str, ...]:
    return tuple(FAMILIES)


def get_entry(name: object) -> FamilyEntry:
    if not isinstance(name, str):
        raise SpecError(f"a family name must be a string such as 'gemm', got {type(name).__name__} {name!r}")
    entry = FAMILIES.get(name)
    if entry is None:
        raise SpecError(f"unknown kernel family {name!r}; families: {', '.join(FAMILIES)}")
    return entry


def entry_for_spec(spec: object) -> FamilyEntry:
    for entry in FAMILIES.values():
        if type(spec) is entry.spec_type:
            return entry
    raise SpecError(f"no registered family has spec type {type(spec).__name__}")


def problem_from_dict(family: object, d: object) -> Any:
    """The family's problem from JSON (the service): unknown or missing fields refused."""
    if not isinstance(family, str) or family not in FAMILIES:
        raise SpecError(f"no problem type for family {family!r}; known: {', '.join(FAMILIES)}")
    if not isinstance(d, dict):
        raise SpecError(f"a {family} problem must be a mapping, got {type(d).__name__}")
    return FAMILIES[family].problem_from(d)


__all__ = ["FAMILIES", "FamilyEntry", "entry_for_spec", "family_names", "get_entry", "problem_from_dict"]
