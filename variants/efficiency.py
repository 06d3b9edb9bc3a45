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
        CU granularity                   tiles / (ceil(tiles / CUs) * CUs)
        total                            product of all of them
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
from typing import Any, Callable, Iterable, Mapping

from rocke_aot.dtypes import DTYPE_BYTES, MAX_TENSOR_BYTES
from rocke_aot.errors import SpecError
from rocke_aot.arch import ArchInfo, arch_info
from rocke_aot.variants.problems import (PROBLEM_TYPES, ConvProblem, GemmProblem,
                                         PatchDgradProblem, problem_from_dict)



def _ceil(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class DimGranularity:
    name: str  # "M", "N", "OH", "cols", ...
    size: int  # problem extent along the dim
    tile: int  # the spec's tile along it
    granularity: float  # size / (ceil(size/tile) * tile)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "tile": self.tile, "granularity": self.granularity}


@dataclass(frozen=True)
class Efficiency:
    dims: tuple[DimGranularity, ...]
    tiles: int  # blocks doing work (work-groups / CTAs)
    cus: int
    cu_granularity: float
    total: float

    @property
    def tile_granularity(self) -> float:
        out = 1.0
        for d in self.dims:
            out *= d.granularity
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"dims": [d.as_dict() for d in self.dims], "tiles": self.tiles, "cus": self.cus,
                "tile_granularity": self.tile_granularity, "cu_granularity": self.cu_granularity,
                "total": self.total}


def dim(name: str, size: int, tile: int) -> DimGranularity:
    """Tile granularity along one dim: the useful fraction of the padded extent."""
    if tile < 1:
        raise SpecError(f"tile along {name} must be >= 1, got {tile}")
    if size <= 0:
        return DimGranularity(name, size, tile, 0.0)
    return DimGranularity(name, size, tile, size / (_ceil(size, tile) * tile))


def cu_granularity(tiles: int, cus: int) -> float:
    """The useful fraction of the last wave of blocks: tiles / (ceil(tiles/CUs) * CUs)."""
    if tiles <= 0:
        return 0.0
    return tiles / (_ceil(tiles, cus) * cus)


def _combine(dims: Iterable[DimGranularity], tiles: int, info: ArchInfo) -> Efficiency:
    dims = tuple(dims)
    cu = cu_granularity(tiles, info.cu_count)
    total = cu
    for d in dims:
        total *= d.granularity
    return Efficiency(dims, tiles, info.cu_count, cu, total)


def _too_big(what: str, elems: int, dtype: str) -> str | None:
    size = elems * DTYPE_BYTES[dtype]
    if size > MAX_TENSOR_BYTES:
        return (f"{what} is {size} bytes, over the {MAX_TENSOR_BYTES}-byte limit of 32-bit "
                f"offsets: split the batch")
    return None


def _first(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


# -- gemm ------------------------------------------------------------------------------------

def _gemm_accepts(spec: Any, p: GemmProblem) -> str | None:
    if p.dtype != spec.in_dtype:
        return f"dtype: problem is {p.dtype}, spec is baked for {spec.in_dtype}"
    if p.out_dtype is not None and p.out_dtype != spec.out_dtype:
        return f"out_dtype: problem wants {p.out_dtype}, spec writes {spec.out_dtype}"
    return _first(_too_big("A", p.m * p.k, p.dtype), _too_big("B", p.k * p.n, p.dtype),
                  _too_big("C", p.m * p.n, spec.out_dtype))


def _gemm_eff(spec: Any, p: GemmProblem, info: ArchInfo) -> Efficiency:
    tiles = _ceil(p.m, spec.block_m) * _ceil(p.n, spec.block_n) * p.batch
    return _combine((dim("M", p.m, spec.block_m), dim("N", p.n, spec.block_n)), tiles, info)


# -- conv_direct_fwd ---------------------------------------------------------------------------

def _fwd_accepts(spec: Any, p: ConvProblem) -> str | None:
    checks = (("dtype", p.dtype, spec.dtype), ("input channels C", p.c, spec.c),
              ("output channels K", p.k, spec.k), ("filter R", p.r, spec.r), ("filter S", p.s, spec.s),
              ("stride_h", p.stride_h, spec.stride_h), ("stride_w", p.stride_w, spec.stride_w),
              ("pad_h", p.pad_h, spec.pad_h), ("pad_w", p.pad_w, spec.pad_w),
              ("dil_h", p.dil_h, spec.dil_h), ("dil_w", p.dil_w, spec.dil_w))
    for name, want, baked in checks:
        if want != baked:
            return f"{name}: problem has {want}, spec is baked for {baked}"
    oh, ow = p.out_hw
    if oh < 1 or ow < 1:
        return f"output is empty ({oh}x{ow}) for a {p.h}x{p.w} input"
    return _first(_too_big("input", p.n * p.h * p.w * p.c, p.dtype),
                  _too_big("output", p.n * oh * ow * p.k, p.dtype))


def _fwd_eff(spec: Any, p: ConvProblem, info: ArchInfo) -> Efficiency:
    oh, ow = p.out_hw
    dims = (dim("OH", oh, spec.tile_h), dim("OW", ow, spec.tile_w), dim("K", p.k, spec.tile_k))
    tiles = p.n * _ceil(oh, spec.tile_h) * _ceil(ow, spec.tile_w) * _ceil(p.k, spec.tile_k)
    return _combine(dims, tiles, info)


# -- conv_dgrad_patch ----------------------------------------------------------------------------

def _patch_accepts(spec: Any, p: PatchDgradProblem) -> str | None:
    for name, want, baked in (("dtype", p.dtype, spec.dtype), ("patch size P", p.p, spec.p),
                              ("channels C", p.c, spec.c)):
        if want != baked:
            return f"{name}: problem has {want}, spec is baked for {baked}"
    if p.h < p.p or p.w < p.p:
        return f"image {p.h}x{p.w} is smaller than one {p.p}x{p.p} patch: no GEMM to run"
    return _first(_too_big("dX", p.n * p.h * p.w * p.c, p.dtype),
                  _too_big("dY", p.n * p.hp * p.wp * p.k, p.dtype))


def _patch_eff(spec: Any, p: PatchDgradProblem, info: ArchInfo) -> Efficiency:
    # GEMM rows: dY pixels, tiled tile_h x tile_w over the patch grid; GEMM columns: a
    # block's r_blk*P*C columns padded to whole 16-column tiles (the padding is waste).
    dims = (dim("Hp", p.hp, spec.tile_h), dim("Wp", p.wp, spec.tile_w),
            DimGranularity("cols", spec.cols, spec.cols_padded, spec.cols / spec.cols_padded))
    tiles = p.n * _ceil(p.hp, spec.tile_h) * _ceil(p.wp, spec.tile_w) * (spec.p // spec.r_blk)
    return _combine(dims, tiles, info)


@dataclass(frozen=True)
class Model:
    problem_type: type
    accepts: Callable[[Any, Any], str | None]
    efficiency: Callable[[Any, Any, ArchInfo], Efficiency]


MODELS: Mapping[str, Model] = {
    "gemm": Model(GemmProblem, _gemm_accepts, _gemm_eff),
    "conv_direct_fwd": Model(ConvProblem, _fwd_accepts, _fwd_eff),
    "conv_dgrad_patch": Model(PatchDgradProblem, _patch_accepts, _patch_eff),
}


def family_of(spec: Any) -> str:
    """The family a spec belongs to (spec classes carry it, GemmSpec by its type)."""
    fam = getattr(type(spec), "family", None)
    if isinstance(fam, str):
        return fam
    from rocke_aot.variants.gemm import GemmSpec

    if isinstance(spec, GemmSpec):
        return "gemm"
    raise SpecError(f"no efficiency model for a {type(spec).__name__}")


def _model(spec: Any, problem: Any) -> Model:
    fam = family_of(spec)
    model = MODELS.get(fam)
    if model is None:
        raise SpecError(f"no efficiency model for family {fam}")
    if not isinstance(problem, model.problem_type):
        raise SpecError(f"a {fam} spec takes a {model.problem_type.__name__}, got {type(problem).__name__}")
    return model


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
    from rocke_aot.variants import table

    if isinstance(problem, dict):
        problem = problem_from_dict(family, problem)
    return rank(table.enumerate_specs(family, arch, lane), problem, arch, min_efficiency=min_efficiency)


__all__ = ["rank_table", "DimGranularity", "Efficiency", "Model", "MODELS", "Ranked", "Rejected", "Ranking",
           "accepts", "efficiency", "rank", "dim", "cu_granularity", "family_of",
           "GemmProblem", "ConvProblem", "PatchDgradProblem", "problem_from_dict", "PROBLEM_TYPES"]
