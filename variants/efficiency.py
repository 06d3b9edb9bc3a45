"""Tile-efficiency models and candidate ranking (Tensile-style granularity product).

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
    rank(candidates, problem, arch, min_efficiency=0.0)
        -> Ranking(accepted=(Ranked(spec, eff), ...) best first,
                   rejected=(Rejected(spec, reason), ...))
    rank_table(family, problem, arch, lane, min_efficiency=0.0)
        the same over every spec the variant table serves for (arch, lane)

Everything here is a pure function of its arguments plus the arch table
(rocke_aot/arch.py, for the CU count): the builder, the service and the benchmark
runner all call the same code. Problems are frozen values; ``problem_from_dict``
builds one from JSON for the service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from rocke_aot.arch import ArchInfo, arch_info
from rocke_aot.errors import SpecError
from rocke_aot.variants import table
from rocke_aot.variants.families import entry_for_spec, problem_from_dict
from rocke_aot.variants.models import (DimGranularity, Efficiency, Model, cu_granularity, dim)
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem


def family_of(spec: Any) -> str:
    """The registered family a spec belongs to (by its type)."""
    try:
        return entry_for_spec(spec).name
    except SpecError:
        raise SpecError(f"no efficiency model for a {type(spec).__name__}") from None


def _model(spec: Any, problem: Any) -> Model:
    entry = entry_for_spec(spec)
    if not isinstance(problem, entry.problem_type):
        raise SpecError(f"a {entry.name} spec takes a {entry.problem_type.__name__}, got {type(problem).__name__}")
    return entry.model


def _info(arch: object) -> ArchInfo:
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


def efficiency(spec: Any, problem: Any, arch: object) -> Efficiency:
    return _model(spec, problem).efficiency(spec, problem, _info(arch))


@dataclass(frozen=True)
class Ranked:
    spec: Any
    efficiency: Efficiency


@dataclass(frozen=True)
class Rejected:
    spec: Any
    reason: str


@dataclass(frozen=True)
class Ranking:
    accepted: tuple[Ranked, ...]  # best first
    rejected: tuple[Rejected, ...]  # in the candidates' order

    @property
    def best(self) -> Any | None:
        return self.accepted[0].spec if self.accepted else None


def _order_key(r: Ranked) -> tuple:
    # Best total first; on a tie prefer more work per block (fewer blocks: less launch and
    # edge overhead), then the canonical spec text so the order never depends on input order.
    spec_text = repr(sorted(r.spec.to_dict().items())) if hasattr(r.spec, "to_dict") else repr(r.spec)
    return (-r.efficiency.total, r.efficiency.tiles, spec_text)


def rank(candidates: Iterable[Any], problem: Any, arch: object, *, min_efficiency: float = 0.0) -> Ranking:
    """Accepted candidates best first, and every rejected one with its reason.

    A candidate is rejected when it cannot run the problem (``accepts``), or when its
    total efficiency is below ``min_efficiency``.
    """
    if not 0.0 <= min_efficiency <= 1.0:
        raise SpecError(f"min_efficiency must be within 0..1, got {min_efficiency}")
    info = _info(arch)
    accepted, rejected = [], []
    for spec in candidates:
        try:
            model = _model(spec, problem)
        except SpecError as e:
            rejected.append(Rejected(spec, str(e)))
            continue
        why = model.accepts(spec, problem)
        if why:
            rejected.append(Rejected(spec, why))
            continue
        eff = model.efficiency(spec, problem, info)
        if eff.total < min_efficiency:
            worst = min(eff.dims + (DimGranularity("CU", eff.tiles, eff.cus, eff.cu_granularity),),
                        key=lambda d: d.granularity)
            rejected.append(Rejected(spec, f"efficiency {eff.total:.3f} < {min_efficiency:.3f} "
                                           f"(worst: {worst.name} {worst.granularity:.3f})"))
            continue
        accepted.append(Ranked(spec, eff))
    accepted.sort(key=_order_key)
    return Ranking(tuple(accepted), tuple(rejected))


def rank_table(family: str, problem: Any, arch: object, lane: object, *,
               min_efficiency: float = 0.0) -> Ranking:
    """Rank every spec the family's variant table serves for (arch, lane) on ``problem``.

    A refused (arch, lane) raises AdmissionError with the table's reason; a problem given
    as a dict is parsed with ``problem_from_dict`` (the service's JSON).
    """
    if isinstance(problem, dict):
        problem = problem_from_dict(family, problem)
    return rank(table.enumerate_specs(family, arch, lane), problem, arch, min_efficiency=min_efficiency)


__all__ = ["rank_table", "DimGranularity", "Efficiency", "Model", "Ranked", "Rejected", "Ranking",
           "accepts", "efficiency", "rank", "dim", "cu_granularity", "family_of", "ArchInfo",
           "GemmProblem", "ConvProblem", "PatchDgradProblem", "problem_from_dict"]
