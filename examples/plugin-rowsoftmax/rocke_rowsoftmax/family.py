"""The variants half of the rowsoftmax family: spec, problem, variant table, model, Family.

    RowSoftmaxSpec(dtype, threads, path="fma")     baked: dtype; knob: threads (block size)
        .to_dict() / .from_dict(d)                 canonical JSON form (the key hashes it)
        .kernel_name                               rowsoftmax_<dtype>_t<threads>
        .geometry(target)                          threads (a whole number of waves), LDS bytes
        .launch_formulas()                         kernel(X, Y, R, C), grid = rows work-groups
    RowSoftmaxProblem(rows, cols, dtype)           what a caller asks to run
    ROWSOFTMAX_TABLE                               per (arch, lane): dtypes x thread counts
    MODEL                                          accepts / efficiency / work / counts
    REFERENCE                                      what it computes (numpy softmax) and the error a
                                                   correct kernel makes: what `bench --run-from-cache`
                                                   checks every output against
    FAMILY = Family("rowsoftmax", ..., reference=REFERENCE)   what the entry point names

Imports only rocke-aot's variants layer and vocabulary: no llvmlite, so a service host (the
[serve] extra) can select and serve this family's kernels; numpy only inside the reference's
functions (a GPU host running the bench has it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from rocke_aot.dtypes import DTYPE_BYTES, MAX_EXTENT, MAX_TENSOR_BYTES
from rocke_aot.errors import SpecError
from rocke_aot.lanes import Lane
from rocke_aot.launch import ArgDef, LaunchFormulas, Split
from rocke_aot.targets import Target
from rocke_aot.variants.counts import KernelCounts
from rocke_aot.variants.families import Family, Reference
from rocke_aot.variants.models import Efficiency, Model, cu_granularity, dim
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.table import SERVE, FamilyTable

DTYPES = ("f32", "f16", "bf16")
THREADS = (32, 64, 128, 256, 512)
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e)): one hardware instruction on both targets
PASSES = 3  # over the row: its max, the sum of exp(x - max), the stores


@dataclass(frozen=True)
class Geometry:
    threads: int
    wave_size: int
    lds_bytes: int  # the reduction scratch: one f32 per thread


@dataclass(frozen=True)
class RowSoftmaxSpec:
    dtype: str = "f32"
    threads: int = 256
    path: str = "fma"  # every family's grid has a path knob; a row-wise kernel has only fma

    def __post_init__(self) -> None:
        for f in fields(self):
            want = {"dtype": str, "threads": int, "path": str}[f.name]
            if type(getattr(self, f.name)) is not want:
                raise SpecError(f"rowsoftmax spec field {f.name} must be {want.__name__}, got {getattr(self, f.name)!r}")
        if self.dtype not in DTYPES:
            raise SpecError(f"rowsoftmax dtype {self.dtype!r} not in {DTYPES}")
        if self.threads < 1 or self.threads & (self.threads - 1):
            raise SpecError(f"rowsoftmax threads={self.threads} must be a power of two (a tree reduction)")
        if self.path != "fma":
            raise SpecError(f"rowsoftmax path {self.path!r}: only fma (no matrix instruction)")

    def to_dict(self) -> dict[str, Any]:
        return dict(sorted(asdict(self).items()))

    @classmethod
    def from_dict(cls, d: object) -> RowSoftmaxSpec:
        if not isinstance(d, dict):
            raise SpecError(f"a rowsoftmax spec must be a mapping, got {type(d).__name__}")
        known = {f.name for f in fields(cls)}
        if set(d) - known:
            raise SpecError(f"rowsoftmax spec: unknown fields {sorted(set(d) - known)}")
        return cls(**d)

    @property
    def kernel_name(self) -> str:
        return f"rowsoftmax_{self.dtype}_t{self.threads}"

    def geometry(self, target: Target) -> Geometry:
        info = target.info
        if self.threads % info.wave_size or self.threads > info.max_block:
            raise SpecError(f"rowsoftmax threads={self.threads}: {target.processor} runs blocks of whole "
                            f"{info.wave_size}-lane waves, at most {info.max_block} threads")
        return Geometry(self.threads, info.wave_size, 4 * self.threads)

    def launch_formulas(self) -> LaunchFormulas:
        """kernel(X, Y, R, C): one work-group per row (grid = rows), ``threads`` work-items each."""
        return LaunchFormulas(
            problem=("rows", "cols"),
            lets=(("tiles", "rows"),),
            grid=("rows", "1", "1"),
            args=(ArgDef("X", "global_pointer", self.dtype, "rows * cols", "read_only"),
                  ArgDef("Y", "global_pointer", self.dtype, "rows * cols", "write_only"),
                  ArgDef("R", "scalar", "i32", "rows"),
                  ArgDef("C", "scalar", "i32", "cols")),
            split=Split("rows", (("X", "cols"), ("Y", "cols"))),  # rows are independent
        )


@dataclass(frozen=True)
class RowSoftmaxProblem:
    rows: int
    cols: int
    dtype: str = "f32"

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if type(v) is not int or not 1 <= v <= MAX_EXTENT:
                raise SpecError(f"RowSoftmaxProblem.{name} must be an int in 1..2**40, got {v!r}")
        if self.dtype not in DTYPES:
            raise SpecError(f"RowSoftmaxProblem.dtype must be one of {DTYPES}, got {self.dtype!r}")


# -- the variant table -------------------------------------------------------------------------

def _baked(target: Target, lane: Lane) -> tuple[Mapping[str, Any], ...]:
    return tuple({"dtype": d} for d in DTYPES)


def _knobs(baked: Mapping[str, Any], target: Target, lane: Lane) -> dict[str, tuple]:
    return {"threads": THREADS}


def _make(baked: Mapping[str, Any], knobs: Mapping[str, Any]) -> RowSoftmaxSpec:
    return RowSoftmaxSpec(**baked, **knobs)


ROWSOFTMAX_TABLE = FamilyTable(
    family="rowsoftmax",
    # Every lane of the registry, decided on purpose. sm_90 on llvm23 / llvm24 (AMDGPU-only
    # profiles) and gfx1250 on llvm20 are refused by the lanes' own profiles, with their reasons.
    lane_decisions={"llvm20": SERVE, "llvm22": SERVE, "llvm23": SERVE, "llvm24": SERVE},
    baked=_baked,
    knobs=_knobs,
    make_spec=_make,
    check=lambda spec, target: spec.geometry(target),  # 32 threads: not a whole wave64
    spec_from_dict=RowSoftmaxSpec.from_dict,
)


# -- the model -----------------------------------------------------------------------------------

def _accepts(spec: RowSoftmaxSpec, p: RowSoftmaxProblem) -> str | None:
    if p.dtype != spec.dtype:
        return f"dtype: problem is {p.dtype}, spec is baked for {spec.dtype}"
    size = p.rows * p.cols * DTYPE_BYTES[p.dtype]
    if size > MAX_TENSOR_BYTES:
        return f"X is {size} bytes, over the {MAX_TENSOR_BYTES}-byte limit of 32-bit offsets: split the rows"
    return None


def _efficiency(spec: RowSoftmaxSpec, p: RowSoftmaxProblem, info: Any) -> Efficiency:
    # A pass covers `threads` columns: the last pass of a row leaves the rest of the block idle.
    cols = dim("cols", p.cols, spec.threads)
    tiles = spec.launch_formulas().tiles(p)
    cu = cu_granularity(tiles, info.cu_count)
    return Efficiency((cols,), tiles, info.cu_count, cu, cols.granularity * cu)


def _steps(spec: RowSoftmaxSpec, p: RowSoftmaxProblem) -> int:
    return PASSES * -(-p.cols // spec.threads)


def _work(spec: RowSoftmaxSpec, p: RowSoftmaxProblem, target: Target) -> TileWork:
    e = DTYPE_BYTES[spec.dtype]
    return TileWork(threads=spec.threads, steps=_steps(spec, p), macs_per_step=spec.threads,
                    load_bytes_per_step=spec.threads * e, lds_wavefronts_per_step=0.0,
                    store_bytes=p.cols * e, matrix=False, double_buffer=False, lds_bytes=4 * spec.threads)


# Per element of a pass, counted in lower.py's IR: the column and bound test (3), the address
# (3), the select or guard (1), the loop step (2).
INT_OPS_PER_ELEM = 9


def _counts(spec: RowSoftmaxSpec, p: RowSoftmaxProblem, target: Target, banks: int = 32) -> KernelCounts:
    """What one work-group issues per step (one element per thread of one pass), from lower.py:
    a global load, a max / subtract-multiply-exp2-add / exp2-multiply, a conversion for 16-bit
    dtypes. The tree reductions (2 x log2(threads) LDS rounds per row) are left out: per row
    they are a constant, the passes grow with the columns."""
    e = DTYPE_BYTES[spec.dtype]
    cvt = 0.0 if spec.dtype == "f32" else 1.0
    wave = target.info.wave_size
    lines = -(-wave * e // 128)  # a wave's loads are consecutive elements: whole 128-byte lines
    return KernelCounts(
        threads=spec.threads, wave_size=wave, steps=_steps(spec, p), instr=None, mma=0.0,
        lds_reads=0.0, lds_read_wavefronts=0.0, fma=2.0, cvt=cvt, global_loads=1.0, lds_writes=0.0,
        lds_write_wavefronts=0.0, global_wavefronts=float(lines), serial_loads=1, int_ops=float(INT_OPS_PER_ELEM),
        staged_bytes=spec.threads * e,
        barriers=0, double_buffer=False, store_bytes=p.cols * e, stores=-(-p.cols // spec.threads),
        unique_bytes=2 * p.rows * p.cols * e, macs=spec.threads)


MODEL = Model(_accepts, _efficiency, _work, _counts)


# -- the reference -------------------------------------------------------------------------------

U = 2.0**-24  # f32 unit roundoff: the kernel computes in f32 whatever the dtype
U_OUT = {"f32": 2.0**-24, "f16": 2.0**-11, "bf16": 2.0**-8}  # one rounding of the output
EXP2_REL = 2.0**-20  # an allowance for the hardware exp2 (v_exp_f32, ex2.approx.f32): 16 f32 ulps


def _softmax(p: RowSoftmaxProblem, inputs: Mapping[str, Any]) -> Any:
    """The exact output: softmax of each row of X (float64, flat, row-major like Y)."""
    import numpy as np

    x = np.asarray(inputs["X"], dtype=np.float64).reshape(p.rows, p.cols)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).ravel()


def _bound(p: RowSoftmaxProblem, inputs: Mapping[str, Any], ref: Any, out_dtype: str) -> Any:
    """The largest error of a correct kernel per element, relative to the exact output y:
    each exp2 argument (x - m) * log2(e) carries 3 roundings, |x - m| <= 2 for the runner's
    inputs in [-1, 1), so 2^t is off by at most ln 2 * 2 * log2(e) * 3u = 6u, plus the exp2
    allowance; y = e_c * (1 / s) takes that twice (once in e_c, once in s), the sum s of cols
    terms gamma_cols (Higham), the division and the product u each; then the output's rounding,
    and 2^-25 absolute for f16 subnormals (as the runner's own bound)."""
    n = p.cols + 2
    rel = 2 * (6 * U + EXP2_REL) + n * U / (1 - n * U)
    return (rel + U_OUT[out_dtype] * (1 + rel)) * ref + 2.0**-25


def _flops(p: RowSoftmaxProblem) -> int:
    return 5 * p.rows * p.cols  # per element: max, subtract, exp, add, multiply


REFERENCE = Reference(output="Y", compute=_softmax, flops=_flops, bound=_bound)

FAMILY = Family("rowsoftmax", RowSoftmaxSpec, RowSoftmaxProblem, ROWSOFTMAX_TABLE, MODEL,
                "row-wise softmax of a rows x cols matrix, one work-group per row (plugin example)",
                reference=REFERENCE)
