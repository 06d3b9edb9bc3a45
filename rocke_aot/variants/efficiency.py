"""Tile-efficiency models (Tensile-style granularity product), per spec and problem.

    problem  (GemmProblem | ConvProblem | PatchDgradProblem)
    spec     (GemmSpec | ConvDirectFwdSpec | ConvDgradPatchSpec)
        |
        v
    accepts(spec, problem)            -> None, or why this spec cannot run this problem at all
                                         (baked filter / stride / channels / dtype, 32-bit offsets)
    efficiency(spec, problem, arch)   -> Efficiency(dims=(DimGranularity, ...), tiles,
                                                    cu_granularity, total)
        tile granularity per tiled dim   size / (ceil(size / tile) * tile)
        tiles                            spec.launch_formulas().tiles(problem): the
                                         launch contract's own tile count
        CU granularity                   tiles / (ceil(tiles / CUs) * CUs)
        total                            product of all of them
    (the per-family models themselves: variants/models.py, named by the registry entry
     of each family, variants/families.py)

Ranking what the cache holds is variants/selection.py's (one rank for the CLI, the service
and the runner); this module only answers "can it run, and how much of the grid is useful".

Everything here is a pure function of its arguments plus the arch table
(rocke_aot/arch.py, for the CU count): the builder, the service and the benchmark
runner all call the same code. Problems are frozen values; ``problem_from_dict``
builds one from JSON for the service.
"""

from __future__ import annotations

from typing import Any

from rocke_aot.arch import ArchInfo, arch_info
from rocke_aot.errors import SpecError
from rocke_aot.targets import Target
from rocke_aot.variants.families import family_for_spec, problem_from_dict
from rocke_aot.variants.models import DimGranularity, Efficiency, Model, cu_granularity, dim
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem


def _model(spec: Any, problem: Any) -> Model:
    entry = family_for_spec(spec)
    if not isinstance(problem, entry.problem_type):
        raise SpecError(f"a {entry.name} spec takes a {entry.problem_type.__name__}, got {type(problem).__name__}")
    return entry.model


def _info(arch: ArchInfo | Target | str) -> ArchInfo:
    if isinstance(arch, ArchInfo):
        return arch
    if isinstance(arch, str):
        return arch_info(arch.split(":")[0])
    info = getattr(arch, "info", None)  # a Target
    if isinstance(info, ArchInfo):
        return info
    raise SpecError(f"an arch must be a processor name, target ID or Target, got {arch!r}")


def accepts(spec: Any, problem: Any) -> str | None:
    """None when the spec can run the problem at all; otherwise the reason it cannot."""
    return _model(spec, problem).accepts(spec, problem)


def efficiency(spec: Any, problem: Any, arch: ArchInfo | Target | str) -> Efficiency:
    return _model(spec, problem).efficiency(spec, problem, _info(arch))


__all__ = ["DimGranularity", "Efficiency", "Model", "accepts", "efficiency", "dim", "cu_granularity",
           "ArchInfo", "GemmProblem", "ConvProblem", "PatchDgradProblem", "problem_from_dict"]
