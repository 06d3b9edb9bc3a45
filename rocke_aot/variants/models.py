"""The efficiency models: per family, can a spec run a problem, and how well (pure data).

    Model(accepts, efficiency, work)           one per family, named by its registry entry
                                               (variants/families.py)
    accepts(spec, problem)    -> None | why    baked filter / stride / channels / dtype, 32-bit offsets
    efficiency(spec, problem, ArchInfo) -> Efficiency(dims, tiles, cus, cu_granularity, total)
        tile granularity per tiled dim   size / (ceil(size / tile) * tile)
        tiles                            spec.launch_formulas().tiles(problem): the same
                                         formula the launch contract's grid is built from
        CU granularity                   tiles / (ceil(tiles / CUs) * CUs)
        total                            product of all of them
    work(spec, problem, Target) -> TileWork    what one block does (variants/perf.py): threads,
                                               reduction steps, per step MACs, bytes staged
                                               into LDS and fragment wavefronts, bytes stored
    counts(spec, problem, Target, banks) -> KernelCounts   what one block issues per step,
                                               counted from the lowering (variants/counts.py),
                                               for the hardware-fact model (variants/hw_model.py)

Ranking and the per-spec dispatch through the registry live in variants/efficiency.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rocke_aot import mma
from rocke_aot.arch import ArchInfo
from rocke_aot.dtypes import DTYPE_BYTES, MAX_TENSOR_BYTES
from rocke_aot.errors import SpecError
from rocke_aot.launch import LaunchFormulas, ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.perf import TileWork, fragment_wavefronts


@functools.lru_cache(maxsize=8192)
def formulas(spec: Any) -> LaunchFormulas:
    """spec.launch_formulas(), memoized: ranking evaluates the same (frozen) specs again and again."""
    return spec.launch_formulas()



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
    return DimGranularity(name, size, tile, size / (ceil_div(size, tile) * tile))


def cu_granularity(tiles: int, cus: int) -> float:
    """The useful fraction of the last wave of blocks: tiles / (ceil(tiles/CUs) * CUs)."""
    if tiles <= 0:
        return 0.0
    return tiles / (ceil_div(tiles, cus) * cus)


def combine(dims: Iterable[DimGranularity], tiles: int, info: ArchInfo) -> Efficiency:
    """The efficiency of a launch: each dimension's tile granularity times the CU granularity."""
    dims = tuple(dims)
    cu = cu_granularity(tiles, info.cu_count)
    total = cu
    for d in dims:
        total *= d.granularity
    return Efficiency(dims, tiles, info.cu_count, cu, total)


def too_big(what: str, elems: int, dtype: str) -> str | None:
    size = elems * DTYPE_BYTES[dtype]
    if size > MAX_TENSOR_BYTES:
        return (f"{what} is {size} bytes, over the {MAX_TENSOR_BYTES}-byte limit of 32-bit "
                f"offsets: split the batch")
    return None


def first_reason(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


# -- work (the time model's input, variants/perf.py) --------------------------------------------

@functools.lru_cache(maxsize=8192)
def geometry_of(spec: Any, target: Target) -> Any:
    return spec.geometry(target)


@functools.lru_cache(maxsize=8192)
def _wavefronts_per_instr(spec: Any, target: Target) -> tuple[int, int]:
    """(fragment wavefronts, MACs) of one matrix instruction reading the spec's LDS layout."""
    ins = mma.INSTRS[geometry_of(spec, target).instr]
    dtype = getattr(spec, "in_dtype", None) or spec.dtype
    return (fragment_wavefronts(ins, spec.lds_a_index, spec.lds_b_index, DTYPE_BYTES[dtype]),
            ins.m * ins.n * ins.k)


def matrix_wavefronts(spec: Any, target: Target, macs: int) -> float:
    if spec.path == "fma":
        return 0.0
    wf, per = _wavefronts_per_instr(spec, target)
    return wf * macs / per


@dataclass(frozen=True)
class Model:
    accepts: Callable[[Any, Any], str | None]
    efficiency: Callable[[Any, Any, ArchInfo], Efficiency]
    work: Callable[[Any, Any, Any], TileWork]
    counts: Callable[..., Any] | None = None  # (spec, problem, Target, banks) -> KernelCounts
    # the hardware model takes ptxas's schedule recorded with the artifact (its SASS: the staging's
    # exposed global latencies and the compute loop's chain) in place of those two counts, where
    # one is recorded (variants/hw_model.py with_schedule; docs/selection.md, "Run 16 with the
    # schedule shipped")
    reads_schedule: bool = False
