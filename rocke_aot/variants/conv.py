"""The convolution specs: baked parameters apart from tuning knobs, validated.

    ConvDirectFwdSpec   NHWC forward conv, KRSC weights, NHWK output
        baked  dtype, c, k, r, s, stride_h/w, pad_h/w, dil_h/w     (fixed in the binary)
        knobs  tile_h, tile_w, tile_k, c_chunk, path              (tuning)
        runtime kernel args: batch N, height H, width W
    ConvDgradPatchSpec  dX of a patch embedding (stride == filter == P, no padding)
        baked  dtype, c, p
        knobs  tile_h, tile_w (dY pixels per block), r_blk (patch rows per block),
               k_chunk (dY channels per step), path
        runtime kernel args: N, H, W (of dX) and K (dY channels)

    spec.to_dict() / Spec.from_dict(d)   canonical, JSON-able, round-trips exactly
    spec.baked() / spec.knobs()          the two halves, for tables, keys and the CLI
    spec.kernel_name                     deterministic symbol name
    spec.geometry(target)                the arch layout the lowerer uses (threads, LDS);
                                         SpecError/CapabilityError where it cannot run
    spec.launch_formulas()               grid (main + border blocks), tile count and kernel
                                         arguments as data (rocke_aot/launch.py): the one
                                         definition the launch contract and the efficiency
                                         model both evaluate

Construction checks what does not depend on the arch; ``geometry`` the rest. The
variant tables (variants/tables/conv.py) filter their knob grids through these
same checks, so a served spec always lowers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

from rocke_aot import mma
from rocke_aot.dtypes import DTYPE_BYTES, DTYPES
from rocke_aot.errors import CapabilityError, SpecError
from rocke_aot.launch import ArgDef, LaunchFormulas, Split
from rocke_aot.variants._fields import check_types
from rocke_aot.variants.problems import out_extent

PATHS = ("mfma", "wmma", "mma", "fma")  # mma: NVPTX mma.sync (sm_90)
PATCH_SIZES = (4, 14, 16)
COL_TILE = 16  # dgrad_patch: GEMM columns are padded to whole 16-column tiles
B_T_PAD = 4  # dgrad_patch, mfma: elements after each transposed B row (lds_b_transposed)
# dgrad_patch, mfma: B is transposed only up to this many staged B elements (k_chunk x
# cols_padded). Measured on every served f16 mfma spec, both layouts (llvm22, gfx942 and gfx950,
# bench/results/bench-raw/conv-dgrad-b-layout-{kn,transposed}.jsonl): the interior loop loses
# 5-25% of its instructions everywhere, but past 16384 elements (r_blk 14 / 16 at k_chunk 32)
# VGPRs climb to 212-256 and p14c4 r14 kc32 spills (37 VGPRs on gfx942 t4x8, 2 on gfx950 t4x4),
# and p14c4 r7 kc32 (12800) spills 12-13 SGPRs where it spilled none; up to 12288: at most 182
# VGPRs, no new spill
B_T_MAX_ELEMS = 12288
FMA_TARGET_THREADS = 256  # fma: a block aims at this many threads
MAX_ACC_PER_THREAD = 64  # mma tiles x result registers per lane
MAX_FMA_PER_THREAD = 16  # fma accumulators per thread: more needs ~300 VGPRs (measured on gfx942)
BORDER_ELEMS_PER_BLOCK = 1024  # dgrad_patch: border elements one zeroing block covers per pass
MAX_BORDER_BLOCKS = 65535


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _from_dict(cls: Any, d: object) -> Any:
    if not isinstance(d, dict):
        raise SpecError(f"a {cls.family} spec must be a mapping, got {type(d).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(d) - known)
    missing = sorted(known - set(d))
    if unknown or missing:
        raise SpecError(f"{cls.family} spec: unknown fields {unknown}, missing fields {missing}")
    return cls(**d)


class _ConvSpec:
    """What both conv specs do alike: the field checks every spec starts with and the
    canonical form. A subclass is a frozen dataclass naming ``family``, BAKED and KNOBS."""

    family: ClassVar[str]
    BAKED: ClassVar[tuple[str, ...]]
    KNOBS: ClassVar[tuple[str, ...]]

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


def _fma_split(rows: int, cols: int, what: str, max_threads: int) -> tuple[int, int]:
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


def _mma_instr(target: Any, path: str, dtype: str, rows: int, cols: int, kdim: int, what: str) -> Any:
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


def _path_allowed(target: Any, path: str, dtype: str, what: str) -> None:
    unit = target.info.matrix_unit
    if path == "fma":
        return
    if dtype == "f32":
        raise SpecError(f"{what}: path {path} needs f16 or bf16 inputs, not f32")
    if unit != path:
        raise CapabilityError(f"{what}: path {path} needs an arch with {path}; "
                              f"{target.processor} has {unit or 'no matrix unit wired'}")


@dataclass(frozen=True)
class ConvDirectFwdSpec(_ConvSpec):
    family: ClassVar[str] = "conv_direct_fwd"
    BAKED: ClassVar[tuple[str, ...]] = ("dtype", "c", "k", "r", "s", "stride_h", "stride_w",
                                        "pad_h", "pad_w", "dil_h", "dil_w")
    KNOBS: ClassVar[tuple[str, ...]] = ("tile_h", "tile_w", "tile_k", "c_chunk", "path")

    dtype: str = "f16"
    c: int = 64
    k: int = 64
    r: int = 3
    s: int = 3
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 1
    pad_w: int = 1
    dil_h: int = 1
    dil_w: int = 1
    tile_h: int = 8
    tile_w: int = 8
    tile_k: int = 32
    c_chunk: int = 16
    path: str = "fma"

    def __post_init__(self) -> None:
        self._check_basics()
        self._at_least(1, ("c", "k", "r", "s", "stride_h", "stride_w", "dil_h", "dil_w",
                           "tile_h", "tile_w", "tile_k", "c_chunk"))
        self._at_least(0, ("pad_h", "pad_w"))
        if self.c % self.c_chunk:
            raise SpecError(f"{self.family} c_chunk={self.c_chunk} must divide c={self.c}")
        if self.pad_h >= self.dil_h * (self.r - 1) + 1 or self.pad_w >= self.dil_w * (self.s - 1) + 1:
            raise SpecError(f"{self.family}: padding must be smaller than the dilated filter")

    @property
    def kernel_name(self) -> str:
        return (f"conv_fwd_{self.dtype}_c{self.c}k{self.k}_r{self.r}s{self.s}"
                f"_u{self.stride_h}v{self.stride_w}_p{self.pad_h}q{self.pad_w}_d{self.dil_h}e{self.dil_w}"
                f"_{self.path}_t{self.tile_h}x{self.tile_w}x{self.tile_k}_cc{self.c_chunk}")

    # -- shape helpers (shared by the lowerer, the efficiency model and the GPU test) --------
    @property
    def halo_h(self) -> int:
        return (self.tile_h - 1) * self.stride_h + (self.r - 1) * self.dil_h + 1

    @property
    def halo_w(self) -> int:
        return (self.tile_w - 1) * self.stride_w + (self.s - 1) * self.dil_w + 1

    # -- the LDS layout (one definition: the lowerer builds its addresses with these on
    #    symbolic values, the time model (variants/perf.py) counts bank conflicts with them) --
    def lds_a_index(self, row: Any, kk: Any, r: Any = 0, q: Any = 0) -> Any:
        """Element index of A[row][kk] (output pixel ``row`` of the tile, channel ``kk`` of the
        chunk) at filter tap (r, q): the halo is [halo_h][halo_w][c_chunk]."""
        py, px = row // self.tile_w, row % self.tile_w
        return ((py * self.stride_h + r * self.dil_h) * self.halo_w + px * self.stride_w + q * self.dil_w) \
            * self.c_chunk + kk

    def lds_b_index(self, kk: Any, col: Any, tap: Any = 0) -> Any:
        """Element index of B[kk][col] at tap ``tap``: weights [tile_k][r*s][c_chunk] after the halo."""
        halo = self.halo_h * self.halo_w * self.c_chunk
        return halo + (col * (self.r * self.s) + tap) * self.c_chunk + kk

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        return (out_extent(h, self.r, self.stride_h, self.pad_h, self.dil_h),
                out_extent(w, self.s, self.stride_w, self.pad_w, self.dil_w))

    def launch_formulas(self) -> LaunchFormulas:
        """kernel(X, Wt, Y, N, H, W) over a 1-D grid of N * ceil(OH/tile_h) * ceil(OW/tile_w)
        * ceil(K/tile_k) blocks; OH, OW as out_extent (problems.py) computes them."""
        def extent(size: str, filt: int, stride: int, pad: int, dil: int) -> str:
            return f"max(({size} + {2 * pad - dil * (filt - 1) - 1}) // {stride} + 1, 0)"

        return LaunchFormulas(
            problem=("n", "h", "w"),
            lets=(("oh", extent("h", self.r, self.stride_h, self.pad_h, self.dil_h)),
                  ("ow", extent("w", self.s, self.stride_w, self.pad_w, self.dil_w)),
                  ("tiles", f"n * ceil_div(oh, {self.tile_h}) * ceil_div(ow, {self.tile_w}) * "
                            f"{_ceil(self.k, self.tile_k)}")),
            grid=("tiles", "1", "1"),
            args=(ArgDef("X", "global_pointer", self.dtype, f"n * h * w * {self.c}", "read_only"),
                  ArgDef("Wt", "global_pointer", self.dtype, f"{self.k * self.r * self.s * self.c}", "read_only"),
                  ArgDef("Y", "global_pointer", self.dtype, f"n * oh * ow * {self.k}", "write_only"),
                  ArgDef("N", "scalar", "i32", "n"),
                  ArgDef("H", "scalar", "i32", "h"),
                  ArgDef("W", "scalar", "i32", "w")),
            split=Split("n", (("X", f"h * w * {self.c}"), ("Y", f"oh * ow * {self.k}"))),  # the batch
        )

    def lds_bytes(self) -> int:
        e = DTYPE_BYTES[self.dtype]
        return e * (self.halo_h * self.halo_w * self.c_chunk + self.tile_k * self.r * self.s * self.c_chunk)

    def geometry(self, target: Any) -> ConvGeometry:
        info = target.info
        what = self.family
        _path_allowed(target, self.path, self.dtype, what)
        lds = self.lds_bytes() + 4  # + 4: lowering rounds LDS arrays up to 16-byte alignment
        if lds > info.static_lds_limit:
            raise SpecError(f"{what}: needs about {lds} bytes of LDS, {target.processor} allows "
                            f"{info.static_lds_limit} static")
        if self.path == "fma":
            threads, per = _fma_split(self.tile_h * self.tile_w, self.tile_k, what, info.max_block)
            return ConvGeometry(threads, info.wave_size, per, None, lds)
        rows = self.tile_h * self.tile_w
        instr = _mma_instr(target, self.path, self.dtype, rows, self.tile_k, self.c_chunk, what)
        waves = (rows // instr.m) * (self.tile_k // instr.n)
        threads = waves * info.wave_size
        if threads > info.max_block:
            raise SpecError(f"{what}: {waves} waves x {info.wave_size} = {threads} threads > {info.max_block}")
        return ConvGeometry(threads, info.wave_size, 0, instr.key, lds)


@dataclass(frozen=True)
class ConvDgradPatchSpec(_ConvSpec):
    family: ClassVar[str] = "conv_dgrad_patch"
    BAKED: ClassVar[tuple[str, ...]] = ("dtype", "c", "p")
    KNOBS: ClassVar[tuple[str, ...]] = ("tile_h", "tile_w", "r_blk", "k_chunk", "path")

    dtype: str = "f16"
    c: int = 3
    p: int = 16
    tile_h: int = 4
    tile_w: int = 8
    r_blk: int = 2
    k_chunk: int = 16
    path: str = "fma"

    def __post_init__(self) -> None:
        self._check_basics()
        if self.p not in PATCH_SIZES:
            raise SpecError(f"{self.family} patch size p={self.p} not in {PATCH_SIZES}")
        self._at_least(1, ("c", "tile_h", "tile_w", "r_blk", "k_chunk"))
        if self.p % self.r_blk:
            raise SpecError(f"{self.family} r_blk={self.r_blk} must divide p={self.p}")
        # Admission of the column tiling: a block's r_blk*P*C GEMM columns are padded to
        # whole 16-column tiles with at most one eighth of padding.
        cols = self.cols
        if (self.cols_padded - cols) * 8 > cols:
            raise SpecError(
                f"{self.family}: r_blk*P*C = {self.r_blk}*{self.p}*{self.c} = {cols} GEMM columns pad to "
                f"{self.cols_padded}, more than one eighth of padding"
            )

    @property
    def kernel_name(self) -> str:
        return (f"conv_dgrad_patch_{self.dtype}_p{self.p}c{self.c}_{self.path}"
                f"_t{self.tile_h}x{self.tile_w}_r{self.r_blk}_kc{self.k_chunk}")

    @property
    def cols(self) -> int:
        """GEMM columns one block owns: r_blk patch rows x P columns x C channels."""
        return self.r_blk * self.p * self.c

    @property
    def cols_padded(self) -> int:
        return _ceil(self.cols, COL_TILE) * COL_TILE

    @property
    def rows(self) -> int:
        """GEMM rows one block owns: tile_h x tile_w dY pixels."""
        return self.tile_h * self.tile_w

    # -- the LDS layout (the lowerer's addresses and the time model's bank count, one definition) --
    @property
    def lds_row_pad(self) -> int:
        """Elements of padding after each LDS row of A and B (8 on the mma path, else 0).

        An mma.sync fragment reads A at rows g (8 of them) and B at K rows 2t.. (4 of them)
        for the same columns; rows of k_chunk = 16 / 32 f16 (32 / 64 bytes) or of a multiple
        of 16 columns put those rows on the same banks, 2- to 4-way (measured on the H200:
        k_chunk 32 up to 1.4x slower than 16 on the same tile, docs/bench.md). 8 elements
        (16 bytes) more per row shifts each row by four banks, which makes every fragment
        read conflict free (variants/perf.py fragment_wavefronts; tests/test_perf.py), as
        GemmSpec.lds_row_pad does for gemm. fma and the AMD paths keep unpadded rows."""
        return 8 if self.path == "mma" else 0

    @property
    def lds_a_stride(self) -> int:
        return self.k_chunk + self.lds_row_pad

    @property
    def lds_b_transposed(self) -> bool:
        """B stored [cols_padded][k_chunk + B_T_PAD] on mfma up to B_T_MAX_ELEMS (issue 37): an
        mfma lane's B fragment is consecutive K of one column, so each fragment read is one 8- or
        16-byte LDS read (ds_read_b64 / read2_b64) instead of element reads (ds_read_u16), as
        gemm's b_lds "nk". NVPTX mma, fma and gfx1250's wmma (measured: its p14c3 r7 loop grew
        599 -> 719 instructions) keep [k_chunk][cols_padded + pad]."""
        return self.path == "mfma" and self.k_chunk * self.cols_padded <= B_T_MAX_ELEMS

    @property
    def lds_b_stride(self) -> int:
        """Elements between two LDS rows of B (a K row; a column when transposed)."""
        return self.k_chunk + B_T_PAD if self.lds_b_transposed else self.cols_padded + self.lds_row_pad

    def lds_a_index(self, row: Any, kk: Any) -> Any:
        """Element index of A[row][kk]: dY rows [rows][k_chunk + pad]."""
        return row * self.lds_a_stride + kk

    def lds_b_index(self, kk: Any, col: Any) -> Any:
        """Element index of B[kk][col]: weights [k_chunk][cols_padded + pad] after A, or
        [cols_padded][k_chunk + B_T_PAD] (lds_b_transposed)."""
        if self.lds_b_transposed:
            return self.rows * self.lds_a_stride + col * self.lds_b_stride + kk
        return self.rows * self.lds_a_stride + kk * self.lds_b_stride + col

    # The staging copy (aot/families/conv_dgrad_patch.py) walks A and B element by element in
    # row-major order, e = row * k_chunk + kk (A) or kk * cols_padded + col (B); the same
    # addresses written as e plus the padding of the rows before it, so an unpadded layout
    # stages at e itself and a padded one costs one multiply-add (tests/test_perf.py checks
    # both forms agree everywhere).
    def lds_a_staged(self, e: Any, row: Any) -> Any:
        """lds_a_index(row, kk) of the e-th staged A element (row = e // k_chunk)."""
        return e + row * self.lds_row_pad if self.lds_row_pad else e

    def lds_b_staged(self, e: Any, kk: Any) -> Any:
        """lds_b_index(kk, col) of the e-th staged B element (kk = e // cols_padded)."""
        if self.lds_b_transposed:
            return self.lds_b_index(kk, e - kk * self.cols_padded)
        at = e + self.rows * self.lds_a_stride
        return at + kk * self.lds_row_pad if self.lds_row_pad else at

    def lds_elems(self) -> int:
        """LDS elements of the block: A and B with their row padding."""
        b_rows = self.cols_padded if self.lds_b_transposed else self.k_chunk
        return self.rows * self.lds_a_stride + b_rows * self.lds_b_stride

    def staged_elems(self) -> int:
        """Elements one reduction step copies from global memory into LDS (no padding)."""
        return self.rows * self.k_chunk + self.k_chunk * self.cols_padded

    def launch_formulas(self) -> LaunchFormulas:
        """kernel(dY, Wt, dX, N, H, W, K) over a 1-D grid: the main (GEMM tile) blocks, then
        the border blocks zeroing the dX elements no patch covers (none when P divides H and W)."""
        p, c = self.p, self.c
        return LaunchFormulas(
            problem=("n", "h", "w", "k"),
            lets=(("hp", f"h // {p}"), ("wp", f"w // {p}"),
                  ("tiles", f"n * ceil_div(hp, {self.tile_h}) * ceil_div(wp, {self.tile_w}) * {p // self.r_blk}"),
                  ("border", f"n * (h * w - hp * {p} * wp * {p}) * {c}"),
                  ("border_blocks", f"min(ceil_div(border, {BORDER_ELEMS_PER_BLOCK}), {MAX_BORDER_BLOCKS})")),
            grid=("tiles + border_blocks", "1", "1"),
            args=(ArgDef("dY", "global_pointer", self.dtype, "n * hp * wp * k", "read_only"),
                  ArgDef("Wt", "global_pointer", self.dtype, f"k * {p * p * c}", "read_only"),
                  ArgDef("dX", "global_pointer", self.dtype, f"n * h * w * {c}", "write_only"),
                  ArgDef("N", "scalar", "i32", "n"),
                  ArgDef("H", "scalar", "i32", "h"),
                  ArgDef("W", "scalar", "i32", "w"),
                  ArgDef("K", "scalar", "i32", "k")),
            split=Split("n", (("dY", "hp * wp * k"), ("dX", f"h * w * {c}"))),  # the batch
        )

    def lds_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype] * self.lds_elems()

    def geometry(self, target: Any) -> ConvGeometry:
        info = target.info
        what = self.family
        _path_allowed(target, self.path, self.dtype, what)
        lds = self.lds_bytes() + 16
        if lds > info.static_lds_limit:
            raise SpecError(f"{what}: needs about {lds} bytes of LDS, {target.processor} allows "
                            f"{info.static_lds_limit} static")
        if self.path == "fma":
            threads, per = _fma_split(self.rows, self.cols_padded, what, info.max_block)
            return ConvGeometry(threads, info.wave_size, per, None, lds)
        instr = _mma_instr(target, self.path, self.dtype, self.rows, self.cols_padded, self.k_chunk, what)
        tiles = (self.rows // instr.m) * (self.cols_padded // instr.n)
        # Up to 8 waves share the tiles: as few tiles per wave as 8 waves allow, then as few
        # waves as that needs (the last round may leave some waves a spare tile to skip).
        per_wave = _ceil(tiles, min(8, 1024 // info.wave_size))
        waves = _ceil(tiles, per_wave)
        if per_wave * instr.acc_per_lane > MAX_ACC_PER_THREAD:
            raise SpecError(f"{what}: {per_wave} {instr.mnemonic} tiles per wave hold more than "
                            f"{MAX_ACC_PER_THREAD} accumulators per lane")
        return ConvGeometry(waves * info.wave_size, info.wave_size, 0, instr.key, lds)
