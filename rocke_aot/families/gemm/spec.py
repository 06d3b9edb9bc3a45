"""GemmSpec: the gemm family's baked parameters and tuning knobs, validated.

    GemmSpec(in_dtype, out_dtype, block_m, block_n, block_k, waves, path, double_buffer,
             vector_width, mma, stages, group_m, b_lds, split_k, wgmma)
        .to_dict() / GemmSpec.from_dict(d)      canonical, JSON-able, round-trips exactly
                                                (stages / group_m / split_k appear only when set: the
                                                fields added later leave older specs' dicts,
                                                plan keys and goldens as they were)
        .kernel_name                            deterministic symbol name
        .geometry(target)  -> GemmGeometry      the arch-dependent layout the lowerer uses;
                                                raises SpecError/CapabilityError when the
                                                spec cannot run on that arch
        .launch_formulas() -> LaunchFormulas    grid, tile count and kernel arguments as data
                                                (rocke_aot/launch.py): the one grid formula
                                                the launch contract and the efficiency model read

C = A x B, row-major, A: M x K, B: K x N, C: M x N; M, N, K are kernel arguments.
Construction checks what does not depend on the arch (types, ranges, powers of two -- or 192,
WAVE_FILL_BLOCKS, on the asynchronous pipeline);
``geometry`` checks the rest (threads per block, instruction tiling, LDS capacity).
The variants helper builds knob grids from these same checks.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from rocke_aot import mma
from rocke_aot.dtypes import DTYPE_BYTES, DTYPES, MATRIX_IN_DTYPES
from rocke_aot.errors import CapabilityError, SpecError
from rocke_aot.launch import ArgDef, LaunchFormulas, Split
from rocke_aot.mma import WARPGROUP
from rocke_aot.targets import Target
from rocke_aot.variants._fields import check_known, check_types

IN_DTYPES = MATRIX_IN_DTYPES
OUT_DTYPES = DTYPES
PATHS = ("mfma", "wmma", "mma", "fma")  # mma: NVPTX mma.sync (sm_90)
VECTOR_WIDTHS = (1, 2, 4, 8)
ASYNC_STAGES = (2, 3, 4)
ASYNC_VECTOR = 8  # elements of one cp.async (16 bytes of f16 / bf16)
GROUP_MS = (1, 2, 4, 8, 16)
# K slices of the asynchronous pipeline (split_k): 1 = one CTA per output tile. 2 and 3 spread a
# wave-quantized grid (3072^3 at 128x128: 576 tiles on 264 resident slots = 2.2 waves; split 2:
# 4.4, split 3: 6.5), 4 and 8 fill the SMs where M*N has few tiles and K is long
# (128x4096x14336 at 128x128: 32 tiles; split 4: 128 CTAs on 132 SMs, split 8: 256 on 264 slots).
SPLIT_KS = (1, 2, 3, 4, 8)
# Fields added after the first keys were issued, and their defaults: to_dict leaves them out
# at the default, so a spec written before them keeps its canonical dict (and plan key).
_LATER_FIELDS = {"stages": 0, "group_m": 1, "b_lds": "kn", "split_k": 1, "wgmma": False}
B_LAYOUTS = ("kn", "nk")
NK_PAD = 8  # elements after each row of a transposed B tile: 16 bytes, four banks, vectors stay aligned

# The warpgroup pipeline (GemmSpec.wgmma, sm_90a wgmma.mma_async): operands read by the tensor cores
# straight from shared memory in the 128-byte swizzled layout (PTX ISA "Shared Memory Matrix
# Layout"): a row of 64 16-bit elements is one 128-byte swizzle row, 8 rows one 1024-byte atom whose
# 16-byte chunk c of row r sits at chunk c ^ (r % 8). A: block_m rows of K (K-major); B: per 64
# columns of N, block_k rows of those columns (N-major, "transposed" B), each a column of atoms.
SWIZZLE_ELEMS = 64  # 16-bit elements of one 128-byte swizzle row
WGMMA_M = 64  # rows of one wgmma.m64nNk16; a warpgroup's tile is whole multiples of it
WGMMA_ALIGN = 1024  # bytes: a swizzle atom's alignment; the dynamic array has this much more to round up in
WGMMA_MAX_ACC = 128  # f32 accumulators a thread may hold (m64n256: 128; more spills, as fma's rule)


# block_m / block_n that are not powers of two: multiples of 64 below 256, the asynchronous
# pipeline's only (stages >= 2). A 192 x 128 tile fills the waves where the power-of-two tiles
# quantize badly: 3072^3 is 16 x 24 = 384 tiles = 2.9 waves of 132 SMs (97 %), where 256 x 128
# (1 CTA/SM) or 128 x 128 (2 CTAs/SM) make 2.18 waves, 3 rounds (73 %). docs/lowering.md.
WAVE_FILL_BLOCKS = (192,)


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@dataclass(frozen=True)
class GemmGeometry:
    """How one spec maps onto one arch (all counts per work-group)."""

    threads: int
    wave_size: int
    waves_m: int  # mfma/wmma: wave grid over the block tile
    waves_n: int
    instr: str | None  # matrix instruction key (aot.lower.mma), None for fma
    tiles_m: int  # matrix-instruction tiles per wave along M (mfma/wmma)
    tiles_n: int
    thread_m: int  # fma: each thread's micro tile
    thread_n: int
    lds_bytes: int


@dataclass(frozen=True)
class GemmSpec:
    in_dtype: str = "f16"
    out_dtype: str = "f32"
    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    waves: int = 4
    path: str = "fma"
    double_buffer: bool = False
    vector_width: int = 4
    mma: str = "auto"  # matrix instruction shape ("32x32x8", ...) or "auto" = the arch default
    # The asynchronous pipeline (sm_90 mma): 0 = tiles move through registers (single or
    # double buffer, ``double_buffer``); 2..4 = that many LDS stages filled by cp.async
    # (16-byte copies, global -> shared without registers), fragments read by ldmatrix,
    # one barrier per K-tile, stages - 1 tiles in flight while one is computed.
    stages: int = 0
    # L2 tile order: work-group g takes tile rows in groups of group_m (1 = row-major tiles):
    # consecutive groups then share B columns and A rows while they are in L2.
    group_m: int = 1
    # B's layout in LDS: "kn" = as in memory (K rows of block_n), "nk" = transposed while it is
    # staged (block_n rows of K, padded by NK_PAD), so a lane's B fragment -- consecutive K of one
    # column on MFMA / WMMA / mma.sync -- is one vector read (ds_read_b64 / b128) like A's,
    # for vector_width 16-bit stores per staged vector instead of one.
    b_lds: str = "kn"
    # K slices (the asynchronous pipeline only): split_k CTAs per output tile, CTA z of a tile
    # summing K-tiles [z * per, min(ktiles, (z + 1) * per)), per = ceil(ktiles / split_k); each
    # writes its f32 partial tile to the workspace and the last to arrive (a per-tile counter)
    # adds the split_k partials in the fixed order z = 0, 1, .. and writes C: deterministic bits
    # (families/gemm/lower_async.py reduce_split, docs/lowering.md "Split-K").
    split_k: int = 1
    # The warpgroup pipeline (sm_90 mma path with stages, wgmma=True): the stages' tiles are laid
    # out 128-byte swizzled (SWIZZLE_ELEMS) and each warpgroup of 4 warps issues wgmma.mma_async
    # m64nNk16 (N = block_n) from shared memory descriptors, asynchronously, instead of ldmatrix +
    # mma.sync per warp; the accumulators stay in registers (a warp's rows of each n8 slice in
    # mma.sync m16n8's result layout). Code objects are sm_90a (arch-specific: wgmma exists on
    # compute capability 9.0 only). families/gemm/lower_warpgroup.py build_wgmma, docs/lowering.md.
    wgmma: bool = False

    def __post_init__(self) -> None:
        check_types(self, "gemm")
        if self.in_dtype not in IN_DTYPES:
            raise SpecError(f"gemm in_dtype {self.in_dtype!r} not in {IN_DTYPES}")
        if self.out_dtype not in OUT_DTYPES:
            raise SpecError(f"gemm out_dtype {self.out_dtype!r} not in {OUT_DTYPES}")
        if self.path not in PATHS:
            raise SpecError(f"gemm path {self.path!r} not in {PATHS}")
        for name in ("block_m", "block_n", "block_k"):
            v = getattr(self, name)
            if name != "block_k" and v in WAVE_FILL_BLOCKS:
                if not self.stages:
                    raise SpecError(f"gemm {name}={v}: a block of {v} is the asynchronous pipeline's "
                                    f"(stages >= 2); the register-staged paths keep power-of-two blocks")
                continue
            if not (_pow2(v) and 1 <= v <= 256):
                raise SpecError(f"gemm {name}={v} must be a power of two in 1..256"
                                + (f" (or one of {WAVE_FILL_BLOCKS} with stages >= 2)" if name != "block_k" else ""))
        if not (_pow2(self.waves) and self.waves <= 16):
            raise SpecError(f"gemm waves={self.waves} must be a power of two in 1..16")
        if self.vector_width not in VECTOR_WIDTHS:
            raise SpecError(f"gemm vector_width={self.vector_width} not in {VECTOR_WIDTHS}")
        if self.block_k % self.vector_width or self.block_n % self.vector_width:
            raise SpecError(
                f"gemm vector_width={self.vector_width} must divide block_k={self.block_k} "
                f"and block_n={self.block_n} (loads are vectors along K for A, N for B)"
            )
        if self.path == "fma" and self.mma != "auto":
            raise SpecError("gemm mma shape only applies to the matrix paths (mfma, wmma, mma)")
        if self.b_lds not in B_LAYOUTS:
            raise SpecError(f"gemm b_lds={self.b_lds!r} not in {B_LAYOUTS}")
        if self.b_lds == "nk" and (self.path == "fma" or self.stages):
            raise SpecError("gemm b_lds='nk' is for the register-staged matrix paths (fma reads B by rows; "
                            "the cp.async pipeline transposes with ldmatrix.trans)")
        if self.group_m not in GROUP_MS:
            raise SpecError(f"gemm group_m={self.group_m} not in {GROUP_MS}")
        if self.stages:
            if self.stages not in ASYNC_STAGES:
                raise SpecError(f"gemm stages={self.stages} not in {(0,) + ASYNC_STAGES} (0: copies through registers)")
            if self.path != "mma":
                raise SpecError(f"gemm stages={self.stages}: the asynchronous pipeline (cp.async + ldmatrix) "
                                f"is the sm_90 mma path's; path {self.path!r} copies through registers (stages=0)")
            if self.double_buffer:
                raise SpecError("gemm stages replaces double_buffer: a pipeline of stages >= 2 is "
                                "already multi-buffered (double_buffer=False)")
            if self.vector_width != ASYNC_VECTOR:
                raise SpecError(f"gemm stages={self.stages} needs vector_width={ASYNC_VECTOR}: each cp.async "
                                f"moves 16 bytes ({ASYNC_VECTOR} elements)")
        if self.split_k not in SPLIT_KS:
            raise SpecError(f"gemm split_k={self.split_k} not in {SPLIT_KS}")
        if self.split_k > 1 and not self.stages:
            raise SpecError(f"gemm split_k={self.split_k} is the asynchronous pipeline's (stages >= 2); "
                            f"the register-staged paths compute each tile in one work-group (split_k=1)")
        if self.wgmma:
            self._check_wgmma()

    def _check_wgmma(self) -> None:
        """The warpgroup pipeline's shape rules (module constants): whole warpgroups splitting M,
        each an integral number of m64 tiles, 64-column B chunks, one 128-byte swizzle row of K."""
        if not self.stages:
            raise SpecError("gemm wgmma=True is the asynchronous pipeline's (stages >= 2: cp.async into "
                            "swizzled shared memory, which wgmma reads)")
        if self.mma != "auto":
            raise SpecError("gemm wgmma=True takes mma='auto' (the instruction is m64nNk16, N = block_n)")
        if self.block_k != SWIZZLE_ELEMS:
            raise SpecError(f"gemm wgmma=True needs block_k={SWIZZLE_ELEMS}: one 128-byte swizzle row of "
                            f"16-bit elements per tile row")
        if self.waves % WARPGROUP:
            raise SpecError(f"gemm wgmma=True needs whole warpgroups: waves a multiple of {WARPGROUP}")
        groups = self.waves // WARPGROUP
        if self.block_m % (groups * WGMMA_M):
            raise SpecError(f"gemm wgmma=True: block_m={self.block_m} does not split into {groups} "
                            f"warpgroups of whole {WGMMA_M}-row wgmma tiles")
        if self.block_n % SWIZZLE_ELEMS or self.block_n > 256:
            raise SpecError(f"gemm wgmma=True: block_n={self.block_n} must be a multiple of "
                            f"{SWIZZLE_ELEMS} up to 256 (wgmma's N; B is staged in 64-column chunks)")
        acc = self.wgmma_tiles_m * self.block_n // 2
        if acc > WGMMA_MAX_ACC:
            raise SpecError(f"gemm wgmma=True: {acc} f32 accumulators a thread (at most {WGMMA_MAX_ACC}); "
                            f"use more warpgroups or a narrower block")

    @property
    def wgmma_tiles_m(self) -> int:
        """m64 wgmma tiles each warpgroup issues per k-step (its rows / 64)."""
        return self.block_m // (self.waves // WARPGROUP) // WGMMA_M

    @property
    def wgmma_in_flight(self) -> int:
        """wgmma groups a warpgroup leaves running at the end of a K-tile: 1 with 4 stages (the
        tensor cores work across the next tile's wait and barrier, and copies run stages - 2
        tiles ahead), 0 otherwise (copies run stages - 1 tiles ahead)."""
        return 1 if self.stages >= 4 else 0

    @property
    def copy_ahead(self) -> int:
        """K-tiles the copies run ahead of the tile being computed."""
        return self.stages - 1 - (self.wgmma_in_flight if self.wgmma else 0)

    # -- canonical form ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for name, default in _LATER_FIELDS.items():
            if d[name] == default:
                del d[name]
        return dict(sorted(d.items()))

    @classmethod
    def from_dict(cls, d: object) -> GemmSpec:
        return cls(**check_known(cls, d, "gemm spec"))

    @property
    def kernel_name(self) -> str:
        db = "db" if self.double_buffer else "sb"
        if self.stages:
            db = f"s{self.stages}"
        mma = "" if self.mma == "auto" else "_" + self.mma
        group = "" if self.group_m == 1 else f"_g{self.group_m}"
        group += "" if self.b_lds == "kn" else f"_b{self.b_lds}"
        group += "" if self.split_k == 1 else f"_k{self.split_k}"
        group += "_wg" if self.wgmma else ""
        return (f"gemm_{self.in_dtype}_{self.out_dtype}_{self.path}{mma}_{self.block_m}x"
                f"{self.block_n}x{self.block_k}_w{self.waves}_v{self.vector_width}_{db}{group}")

    # -- launch ------------------------------------------------------------------------
    def launch_formulas(self) -> LaunchFormulas:
        """kernel(A, B, C, M, N, K) over a 1-D grid of ceil(M/block_m) * ceil(N/block_n)
        work-groups (tile (tm, tn) = (gid // tiles_n, gid % tiles_n), as the lowering reads it).

        split_k > 1: kernel(A, B, C, W, M, N, K) over tiles * split_k work-groups, work-group g
        taking K slice g % split_k of tile g // split_k (the slices of a tile are neighbours in
        launch order, so they run at the same time and the partials meet in L2). W is the
        workspace (access "workspace", rocke_aot/launch.py): the partial tiles, split_k * bm * bn
        f32 per tile, then one 32-bit arrival counter per tile. A chunk of M rows (the Split) is
        a whole gemm that reuses W from its start: every launch leaves the counters zero."""
        tiles = f"ceil_div(m, {self.block_m}) * ceil_div(n, {self.block_n})"
        args = [ArgDef("A", "global_pointer", self.in_dtype, "m * k", "read_only"),
                ArgDef("B", "global_pointer", self.in_dtype, "k * n", "read_only"),
                ArgDef("C", "global_pointer", self.out_dtype, "m * n", "write_only")]
        lets = [("tiles", tiles)]
        grid = "tiles"
        if self.split_k > 1:
            lets.append(("units", f"tiles * {self.split_k}"))
            grid = "units"
            args.append(ArgDef("W", "global_pointer", "f32", f"tiles * {self.workspace_words_per_tile}",
                               "workspace"))
        args += [ArgDef("M", "scalar", "i32", "m"), ArgDef("N", "scalar", "i32", "n"),
                 ArgDef("K", "scalar", "i32", "k")]
        return LaunchFormulas(
            problem=("m", "n", "k"),
            lets=tuple(lets),
            grid=(grid, "1", "1"),
            args=tuple(args),
            # rows of A and C: a chunk of M rows is the same gemm on A + start*K, C + start*N
            split=Split("m", (("A", "k"), ("C", "n"))),
        )

    @property
    def workspace_words_per_tile(self) -> int:
        """32-bit words of the split-K workspace per output tile: split_k partial tiles of f32
        and one arrival counter (0 without split-K)."""
        return self.split_k * self.block_m * self.block_n + 1 if self.split_k > 1 else 0

    # -- arch-dependent layout ----------------------------------------------------------
    @property
    def lds_row_pad(self) -> int:
        """Elements of padding after each LDS row of the A and B tiles (0, or 8 for mma).

        The mma.sync fragment reads (a .b32 per lane at rows g / g+8, columns 2t..; B at
        K rows 2t.. of column g) hit the same bank from 8 (A) or 4 (B) lanes when a row is a
        power-of-two number of bytes long; 8 elements (16 bytes) more per row shifts each row
        by four banks, which makes both conflict free and keeps every 16-byte vector aligned.
        The AMD matrix paths (mfma, wmma) pad the same way since issue 37: an MFMA 32x32x8 A
        fragment read (8 bytes a lane, rows l % 32) hit one bank from 16 lanes with 64-byte rows.
        fma keeps unpadded rows (its IR and tables are unchanged).
        """
        return 8 if self.path in ("mma", "mfma", "wmma") and not self.wgmma else 0

    @property
    def ldb(self) -> int:
        """Elements between B's LDS rows: K rows of block_n (kn), or block_n rows of K (nk)."""
        return self.block_k + NK_PAD if self.b_lds == "nk" else self.block_n + self.lds_row_pad

    @property
    def b_tile_elems(self) -> int:
        rows = self.block_n if self.b_lds == "nk" else self.block_k
        return rows * self.ldb

    def lds_bytes(self) -> int:
        pad = self.lds_row_pad
        per_stage = DTYPE_BYTES[self.in_dtype] * (self.block_m * (self.block_k + pad) + self.b_tile_elems)
        return per_stage * (self.stages or (2 if self.double_buffer else 1)) + (WGMMA_ALIGN if self.wgmma else 0)

    @property
    def dynamic_lds(self) -> bool:
        """The asynchronous pipeline keeps its stages in dynamic shared memory (up to the SM's
        227 KiB per block, opted into at launch; static shared memory stops at 48 KiB)."""
        return self.stages > 0

    def lds_a_index(self, row: Any, k: Any) -> Any:
        """Element index of A[row][k] in LDS: rows of block_k + pad (families/gemm/lower_common.py lda);
        wgmma: 128-byte swizzled rows (SWIZZLE_ELEMS: chunk k // 8 at k // 8 ^ row % 8)."""
        if self.wgmma:
            return row * SWIZZLE_ELEMS + ((k // 8) ^ (row % 8)) * 8 + k % 8
        return row * (self.block_k + self.lds_row_pad) + k

    def lds_b_index(self, k: Any, col: Any) -> Any:
        """Element index of B[k][col] in LDS, after A: K rows of ldb (kn), or column rows (nk);
        wgmma: per 64 columns a column of atoms, block_k swizzled rows of those 64 columns."""
        a = self.block_m * (self.block_k + self.lds_row_pad)
        if self.wgmma:
            c = col % SWIZZLE_ELEMS
            return (a + (col // SWIZZLE_ELEMS) * (SWIZZLE_ELEMS * self.block_k) + k * SWIZZLE_ELEMS
                    + ((c // 8) ^ (k % 8)) * 8 + c % 8)
        if self.b_lds == "nk":
            return a + col * self.ldb + k
        return a + k * self.ldb + col

    def geometry(self, target: Target) -> GemmGeometry:
        """Lay the spec onto ``target`` (a Target); refuse what cannot work there."""
        info = target.info
        threads = self.waves * info.wave_size
        if threads > info.max_block:
            raise SpecError(f"gemm: {self.waves} waves x {info.wave_size} = {threads} threads > {info.max_block}")
        lds = self.lds_bytes()
        # static shared memory stops at 48 KiB on NVPTX; the async pipeline's is dynamic
        limit = info.lds_bytes if self.dynamic_lds else info.static_lds_limit
        if lds > limit:
            raise SpecError(f"gemm: needs {lds} bytes of LDS, {target.processor} allows {limit} per kernel")
        if self.path == "fma":
            tm, tn = _fma_micro_tile(self.block_m, self.block_n, threads)
            return GemmGeometry(threads, info.wave_size, 1, 1, None, 0, 0, tm, tn, lds)
        if self.path == "wmma" and info.family != "amdgcn":
            raise CapabilityError(f"gemm path wmma is not available on {target.processor}")
        instr = mma.select(target.processor, self.path, self.in_dtype, self.mma)
        if self.wgmma:
            if info.family != "nvptx64":
                raise CapabilityError(f"gemm wgmma is an sm_90a instruction; {target.processor} has none")
            # per warp: its 16 rows of each m64 tile, n8 slices in mma.sync m16n8's result layout
            groups = self.waves // WARPGROUP
            return GemmGeometry(threads, info.wave_size, WARPGROUP * groups, 1, instr.key,
                                self.wgmma_tiles_m, self.block_n // instr.n, 0, 0, lds)
        if self.block_k % instr.k:
            raise SpecError(f"gemm: block_k={self.block_k} is not a multiple of {instr.mnemonic}'s K={instr.k}")
        wm, wn = _wave_grid(self.block_m, self.block_n, self.waves, instr.m, instr.n)
        return GemmGeometry(threads, info.wave_size, wm, wn, instr.key,
                            self.block_m // (wm * instr.m), self.block_n // (wn * instr.n), 0, 0, lds)


# Most f32 accumulators one fma work-item may hold: 128 compiled without spills everywhere
# (sm_90: 160 registers; gfx942: within 256 VGPRs); 256 made ptxas spill (255 registers +
# 352 bytes of spill stores for a 128x128 tile over 64 threads), which is slow, not wrong.
MAX_FMA_ACCUMULATORS = 128


def _fma_micro_tile(bm: int, bn: int, threads: int) -> tuple[int, int]:
    elems = bm * bn
    if elems % threads:
        raise SpecError(f"gemm fma: a {bm}x{bn} tile does not split over {threads} threads")
    per = elems // threads
    if per > MAX_FMA_ACCUMULATORS:
        raise SpecError(f"gemm fma: a {bm}x{bn} tile over {threads} threads needs {per} accumulators "
                        f"per work-item (at most {MAX_FMA_ACCUMULATORS}: more spills registers)")
    tn = 1
    while tn * 2 <= math.isqrt(per) and bn % (tn * 2) == 0:
        tn *= 2
    tm = per // tn
    if bm % tm or (bm // tm) * (bn // tn) != threads:
        raise SpecError(f"gemm fma: cannot lay {threads} threads over a {bm}x{bn} tile")
    return tm, tn


def _wave_grid(bm: int, bn: int, waves: int, im: int, inn: int) -> tuple[int, int]:
    best = None
    wn = 1
    while wn <= waves:
        wm = waves // wn
        if bm % (wm * im) == 0 and bn % (wn * inn) == 0:
            score = (abs(bm // wm - bn // wn), wn)
            if best is None or score < best[0]:
                best = (score, (wm, wn))
        wn *= 2
    if best is None:
        raise SpecError(f"gemm: a {bm}x{bn} tile does not split over {waves} waves of {im}x{inn} tiles")
    return best[1]


def quad_stores(spec: GemmSpec, geo: GemmGeometry) -> bool:
    """Whether the sm_90 asynchronous epilogue writes 2-byte outputs four columns a lane (the
    lowering's ``epilogue_quads``: two lanes swap a pair so that a quad fills whole 32-byte
    sectors): mma.sync m16n8 tiles, a warp tile of an even number of them along N. The
    lowering and the hardware model's counts (variants/counts.py) both ask this."""
    if not spec.stages or geo.instr is None:
        return False
    ins = mma.INSTRS[geo.instr]
    return ins.kind == "mma" and ins.n == 8 and DTYPE_BYTES[spec.out_dtype] == 2 and geo.tiles_n % 2 == 0


def amd_b_pair_width(spec: GemmSpec, threads: int) -> int:
    """Elements a lane loads of each of its two K rows in the AMD main loop's B pair unit (b_lds
    "nk", families/gemm/lower_registers.py amd_units): vector_width, halved while the tile's pair
    units are fewer than the work-items and the vector stays 8 bytes or wider. A 64 x 64 tile's
    B (32 x 64) is 128 pairs of 8-element vectors for 256 work-items: half of them would load and
    store a duplicate; as 256 pairs of 4-element (8-byte) vectors every work-item moves its own,
    with half the v_perm and LDS stores a step. The lowering and the counts (counts.py) both ask."""
    vw = spec.vector_width
    while vw > 4 and spec.block_k // 2 * (spec.block_n // vw) < threads:
        vw //= 2
    return vw


def copy_panel(threads: int, cols: int, swizzled: bool = False) -> int:
    """16-byte vectors a row of one cp.async copy panel of an operand tile ``cols`` elements wide
    (families/gemm/lower_async.py copy_plan): the work-items walk a panel in rounds of whole rows, each
    in one column of vectors, so the panel is the widest run of vectors a row that ``threads``
    steps evenly -- the whole row for power-of-two tiles (one panel), 8 vectors (64 columns) of a
    192-column B row (24 vectors: 256 or 128 threads would change column from round to round).
    Swizzled (wgmma) tiles: always 8 vectors, one 128-byte swizzle row, so that a work-item's rows
    are a multiple of 8 apart and its chunk's swizzle stays the same from round to round."""
    if swizzled:
        return SWIZZLE_ELEMS // ASYNC_VECTOR
    return math.gcd(cols // ASYNC_VECTOR, threads)


def async_copy_chunk(spec: GemmSpec, threads: int, which: str, c: int) -> tuple[int, int]:
    """(row, first column) in the tile of the c-th 16-byte copy of operand ``which`` ("A": block_m
    x block_k, "B": block_k x block_n) in the order the asynchronous pipeline issues them: panel
    after panel (copy_panel), in each row after row, work-item t of round j taking copy t + j x
    threads. The hardware model's counts (variants/counts.py) walk the same order."""
    rows, cols = (spec.block_m, spec.block_k) if which == "A" else (spec.block_k, spec.block_n)
    pv = copy_panel(threads, cols, spec.wgmma)
    p, rest = divmod(c, rows * pv)
    return rest // pv, (p * pv + rest % pv) * ASYNC_VECTOR
