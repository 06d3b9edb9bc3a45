"""What the two conv families' specs share (the conv spec toolkit): the checks every conv spec
starts with, its canonical form, and how a conv tile maps onto an arch.

    ConvSpecBase         a frozen dataclass naming ``family``, BAKED and KNOBS gets:
                         to_dict() / from_dict(d) (canonical, JSON-able, round-trips exactly),
                         baked() / knobs() (the two halves, for tables, keys and the CLI),
                         _check_basics() (field types, dtype, path) and _at_least(low, names)
    ConvGeometry         what spec.geometry(target) returns: threads, wave size, accumulators per
                         thread (fma), the matrix instruction (None: fma) and the LDS bytes
    fma_split            (threads, columns per thread) of an fma tile: one row per thread
    mma_instr            the arch's first matrix instruction shape that tiles a block tile
    path_allowed         refuses a matrix path the arch or the dtype lacks, by name

The specs themselves live in their family folders (rocke_aot/families/conv_direct_fwd/spec.py
ConvDirectFwdSpec, rocke_aot/families/conv_dgrad_patch/spec.py ConvDgradPatchSpec). This module
stays in the variants layer because the shared conv lowering engine (aot/families/_conv_ir.py,
which both lowerers build on) reads ConvGeometry, and no layer imports a family folder
(.importlinter); being imported by the lowering, it is covered by the recipe digest.
"""

from __future__ import annotations

from dataclasses import Field, asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from rocke_aot import mma
from rocke_aot.dtypes import DTYPES
from rocke_aot.errors import CapabilityError, SpecError
from rocke_aot.targets import Target
from rocke_aot.variants._fields import check_types

PATHS = ("mfma", "wmma", "mma", "fma")  # mma: NVPTX mma.sync (sm_90)
FMA_TARGET_THREADS = 256  # fma: a block aims at this many threads
MAX_ACC_PER_THREAD = 64  # mma tiles x result registers per lane
MAX_FMA_PER_THREAD = 16  # fma accumulators per thread: more needs ~300 VGPRs (measured on gfx942)



def _from_dict(cls: Any, d: object) -> Any:
    if not isinstance(d, dict):
        raise SpecError(f"a {cls.family} spec must be a mapping, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    missing = sorted(known - set(d))
    if unknown or missing:
        raise SpecError(f"{cls.family} spec: unknown fields {unknown}, missing fields {missing}")
    return cls(**d)


class ConvSpecBase:
    """What both conv specs do alike: the field checks every spec starts with and the
    canonical form. A subclass is a frozen dataclass naming ``family``, BAKED and KNOBS."""

    family: ClassVar[str]
    BAKED: ClassVar[tuple[str, ...]]
    KNOBS: ClassVar[tuple[str, ...]]
    if TYPE_CHECKING:  # what every subclass's dataclass declares (the fields read here)
        __dataclass_fields__: ClassVar[dict[str, Field[Any]]]
        dtype: str
        path: str

        def geometry(self, target: Target) -> ConvGeometry: ...

    def _check_basics(self) -> None:
        check_types(self, self.family)
        if self.dtype not in DTYPES:
            raise SpecError(f"{self.family} dtype {self.dtype!r} not in {DTYPES}")
        if self.path not in PATHS:
            raise SpecError(f"{self.family} path {self.path!r} not in {PATHS}")

    def _at_least(self, low: int, names: tuple[str, ...]) -> None:
        for name in names:
            if getattr(self, name) < low:
                raise SpecError(f"{self.family} {name}={getattr(self, name)} must be >= {low}")

    def to_dict(self) -> dict[str, Any]:
        return dict(sorted(asdict(self).items()))

    @classmethod
    def from_dict(cls, d: object) -> Any:
        return _from_dict(cls, d)

    def baked(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.BAKED}

    def knobs(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in self.KNOBS}


@dataclass(frozen=True)
class ConvGeometry:
    """How one conv spec maps onto one arch (counts per block)."""

    threads: int
    wave_size: int
    per_thread: int  # fma: outputs (channels / columns) per thread
    instr: str | None  # mma instruction key, None for fma
    lds_bytes: int


def fma_split(rows: int, cols: int, what: str, max_threads: int) -> tuple[int, int]:
    """(threads, columns per thread): one row per thread, columns split so threads <= 256."""
    per = max(1, rows * cols // FMA_TARGET_THREADS)
    while cols % per:
        per -= 1
    threads = rows * (cols // per)
    if per > MAX_FMA_PER_THREAD:
        raise SpecError(f"{what}: {per} accumulators per thread > {MAX_FMA_PER_THREAD}")
    if threads > max_threads:
        raise SpecError(f"{what}: {threads} threads per block > {max_threads}")
    return threads, per


def mma_instr(target: Target, path: str, dtype: str, rows: int, cols: int, kdim: int, what: str) -> Any:
    """The arch's first instruction shape (its default first) that tiles rows x cols and kdim."""
    shapes = mma.shapes_for(target.processor, path, dtype)
    if not shapes:
        mma.select(target.processor, path, dtype)  # raises CapabilityError with the reason
    for shape in shapes:
        instr = mma.select(target.processor, path, dtype, shape)
        if rows % instr.m == 0 and cols % instr.n == 0 and kdim % instr.k == 0:
            return instr
    raise SpecError(f"{what}: no {path} shape of {target.processor} ({', '.join(shapes)}) tiles a "
                    f"{rows}x{cols} block tile with a reduction step of {kdim}")


def path_allowed(target: Target, path: str, dtype: str, what: str) -> None:
    unit = target.info.matrix_unit
    if path == "fma":
        return
    if dtype == "f32":
        raise SpecError(f"{what}: path {path} needs f16 or bf16 inputs, not f32")
    if unit != path:
        raise CapabilityError(f"{what}: path {path} needs an arch with {path}; "
                              f"{target.processor} has {unit or 'no matrix unit wired'}")
