"""conv_dgrad_patch's spec: baked parameters apart from tuning knobs, validated.

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
                                         arguments as data (rocke_aot/launch.py)
    spec.lds_a_index / lds_b_index       the LDS layout (padded rows on mma, B transposed on
    spec.lds_a_staged / lds_b_staged     mfma / wmma): the lowerer's addresses and the time model's
                                         bank count, one definition

Construction checks what does not depend on the arch; ``geometry`` the rest. What both conv
specs share (field checks, canonical form, ConvGeometry) is the conv spec toolkit's
(variants/conv.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Any, ClassVar

from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.errors import SpecError
from rocke_aot.launch import ArgDef, LaunchFormulas, Split, ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.conv import (
    MAX_ACC_PER_THREAD,
    ConvGeometry,
    ConvSpecBase,
    fma_split,
    mma_instr,
    path_allowed,
)

PATCH_SIZES = (4, 14, 16)
COL_TILE = 16  # GEMM columns are padded to whole 16-column tiles
# The AMD matrix paths (mfma, wmma) store B transposed in LDS, [cols_padded][k_chunk + B_T_PAD]
# (lds_b_transposed), every spec. Until issue 37's third conv step only up to 12288 staged B
# elements were (r_blk 14 / 16 at k_chunk 32 spilled with the transposed layout then); with the
# AMD main loop of _conv_ir.amd_chunks the same specs build transposed at 84-228 VGPRs with no
# spill on llvm22/23/24, where [k_chunk][cols] read every B element with ds_read_u16 and the
# t4x8 r14 kc32 specs spilled on every lane (bench/conv_dgrad_sweep.py, raw
# bench/results/bench-raw/conv-dgrad-b-layout-c-{before,after}.jsonl); gfx1250's wmma too (its
# p14c4 r14 loop 324 -> 158 instructions, 391 -> 256 VGPRs, llvm22). 4 elements (8 bytes) of
# padding keep a fragment's reads 8-byte aligned (ds_read_b64 / read2_b64; gfx1250
# ds_load_2addr_b64 -- 8 would make them b128 at the same count and 11% more LDS) and put the
# 16 columns an instruction reads on distinct bank pairs (a column row is 18 dwords).
B_T_PAD = 4
BORDER_ELEMS_PER_BLOCK = 1024  # border elements one zeroing block covers per pass
MAX_BORDER_BLOCKS = 65535


@dataclass(frozen=True)
class ConvDgradPatchSpec(ConvSpecBase):
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
        return ceil_div(self.cols, COL_TILE) * COL_TILE

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
        """B stored [cols_padded][k_chunk + B_T_PAD] on the AMD matrix paths (mfma, wmma; issue
        37): a lane's B fragment is consecutive K of one column, so each fragment read is one 8-
        or 16-byte LDS read (ds_read_b64 / read2_b64, gfx1250 ds_load_b128 / 2addr_b64) instead
        of element reads (ds_read_u16), as gemm's b_lds "nk". NVPTX mma and fma keep
        [k_chunk][cols_padded + pad] (they read B by K rows)."""
        return self.path in ("mfma", "wmma")

    @property
    def lds_b_stride(self) -> int:
        """Elements between two LDS rows of B (a K row; a column when transposed)."""
        return self.k_chunk + B_T_PAD if self.lds_b_transposed else self.cols_padded + self.lds_row_pad

    @property
    def w_vector(self) -> tuple[int, int]:
        """(vw, slack): the weight vectors of the AMD matrix paths' staging (lower.py _operands),
        vw elements at offsets that are multiples of vw from W's base, and
        ``slack`` spare B columns before column 0 in LDS (lds_b_index).

        A K row of W is P*P*C elements and a block's columns start at r0*P*C (r0 = rb * r_blk,
        rb a runtime value). vw must divide the row (so every K row and chunk base keeps the
        vectors' alignment). Where it also divides the block's column count (r_blk*P*C), each
        block's columns start on a vector (rb * cols) and its vectors end at its last column:
        slack 0. Where it does not (ViT-L/14's p14c3 r7: 294 columns, 2 mod 4), the block
        loads the vectors of the aligned grid covering its columns: its first one starts
        s = (r0*P*C) % vw elements before its column 0 (s < vw - gcd(cols, vw) + 1), whose
        elements before column 0 land in the ``slack`` columns (never read); admitted only
        where every block's vectors stay inside its K row (no read past W's end) and inside
        the padded columns. gcd(P*C, 8) (a patch row's contiguous run) where that is 4 or 8
        already, or where vw = 4 (8 bytes, issue 37's goal) is not admitted. lds_b_transposed
        only (the units' LDS stores are element stores there)."""
        fallback = gcd(self.p * self.c, 8)
        if not self.lds_b_transposed or fallback >= 4:
            return fallback, 0
        row, cols = self.p * self.p * self.c, self.cols
        for vw in (4,):  # 8 bytes, the goal's width: 16 cost p4c3 r4's gfx942 loop 6 instructions
            if row % vw:
                continue
            slack = vw - gcd(cols, vw) if cols % vw else 0
            nvec = ceil_div(cols + slack, vw)
            if nvec * vw > self.cols_padded:  # s = 0: the last vector's columns
                continue
            if all(rb * cols - (rb * cols) % vw + nvec * vw <= row for rb in range(self.p // self.r_blk)):
                return vw, slack
        return fallback, 0

    def lds_a_index(self, row: Any, kk: Any) -> Any:
        """Element index of A[row][kk]: dY rows [rows][k_chunk + pad]."""
        return row * self.lds_a_stride + kk

    def lds_b_index(self, kk: Any, col: Any) -> Any:
        """Element index of B[kk][col]: weights [k_chunk][cols_padded + pad] after A, or
        [cols_padded][k_chunk + B_T_PAD] (lds_b_transposed)."""
        if self.lds_b_transposed:
            return self.rows * self.lds_a_stride + (col + self.w_vector[1]) * self.lds_b_stride + kk
        return self.rows * self.lds_a_stride + kk * self.lds_b_stride + col

    # The staging copy (lower.py) walks A and B element by element in
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
        b_rows = self.cols_padded + self.w_vector[1] if self.lds_b_transposed else self.k_chunk
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

    def geometry(self, target: Target) -> ConvGeometry:
        info = target.info
        what = self.family
        path_allowed(target, self.path, self.dtype, what)
        lds = self.lds_bytes() + 16
        if lds > info.static_lds_limit:
            raise SpecError(f"{what}: needs about {lds} bytes of LDS, {target.processor} allows "
                            f"{info.static_lds_limit} static")
        if self.path == "fma":
            threads, per = fma_split(self.rows, self.cols_padded, what, info.max_block)
            return ConvGeometry(threads, info.wave_size, per, None, lds)
        instr = mma_instr(target, self.path, self.dtype, self.rows, self.cols_padded, self.k_chunk, what)
        tiles = (self.rows // instr.m) * (self.cols_padded // instr.n)
        # Up to 8 waves share the tiles: as few tiles per wave as 8 waves allow, then as few
        # waves as that needs (the last round may leave some waves a spare tile to skip).
        per_wave = ceil_div(tiles, min(8, 1024 // info.wave_size))
        waves = ceil_div(tiles, per_wave)
        if per_wave * instr.acc_per_lane > MAX_ACC_PER_THREAD:
            raise SpecError(f"{what}: {per_wave} {instr.mnemonic} tiles per wave hold more than "
                            f"{MAX_ACC_PER_THREAD} accumulators per lane")
        return ConvGeometry(waves * info.wave_size, info.wave_size, 0, instr.key, lds)
