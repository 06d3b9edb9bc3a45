"""conv_direct_fwd's spec: baked parameters apart from tuning knobs, validated.

    ConvDirectFwdSpec   NHWC forward conv, KRSC weights, NHWK output
        baked  dtype, c, k, r, s, stride_h/w, pad_h/w, dil_h/w     (fixed in the binary)
        knobs  tile_h, tile_w, tile_k, c_chunk, path              (tuning)
        runtime kernel args: batch N, height H, width W

    spec.to_dict() / Spec.from_dict(d)   canonical, JSON-able, round-trips exactly
    spec.baked() / spec.knobs()          the two halves, for tables, keys and the CLI
    spec.kernel_name                     deterministic symbol name
    spec.geometry(target)                the arch layout the lowerer uses (threads, LDS);
                                         SpecError/CapabilityError where it cannot run
    spec.launch_formulas()               grid, tile count and kernel arguments as data
                                         (rocke_aot/launch.py): the one definition the launch
                                         contract and the efficiency model both evaluate
    spec.lds_a_index / lds_b_index       the LDS layout the lowerer addresses and the time
                                         model counts bank conflicts with

Construction checks what does not depend on the arch; ``geometry`` the rest. The variant
table (table.py) filters its knob grid through these same checks, so a served spec always
lowers. What both conv specs share (field checks, canonical form, ConvGeometry) is the conv
spec toolkit's (variants/conv.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.errors import SpecError
from rocke_aot.launch import ArgDef, LaunchFormulas, Split, ceil_div
from rocke_aot.targets import Target
from rocke_aot.variants.conv import ConvGeometry, ConvSpecBase, fma_split, mma_instr, path_allowed
from rocke_aot.variants.problems import out_extent


@dataclass(frozen=True)
class ConvDirectFwdSpec(ConvSpecBase):
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
        if self.path in ("mfma", "wmma"):
            # The AMD matrix paths add the tap's offset last (issue 37, the fifth conv step): once
            # the taps are unrolled it is a constant the backend folds into the LDS read's
            # immediate, one base address for every tap and their reads paired into ds_read2_b64
            # (gfx942 cc8: 14 -> 10 LDS reads, 47 -> 41 instructions a chunk), where the form below
            # kept a register and a read a tap. NVPTX keeps it: there LLVM pairs the 16-bit
            # halves of a fragment at one base and +2 only in that form (tests/test_hw_model.py).
            return (py * self.stride_h * self.halo_w + px * self.stride_w) * self.c_chunk + kk \
                + (r * self.dil_h * self.halo_w + q * self.dil_w) * self.c_chunk
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
                            f"{ceil_div(self.k, self.tile_k)}")),
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

    def geometry(self, target: Target) -> ConvGeometry:
        info = target.info
        what = self.family
        path_allowed(target, self.path, self.dtype, what)
        lds = self.lds_bytes() + 4  # + 4: lowering rounds LDS arrays up to 16-byte alignment
        if lds > info.static_lds_limit:
            raise SpecError(f"{what}: needs about {lds} bytes of LDS, {target.processor} allows "
                            f"{info.static_lds_limit} static")
        if self.path == "fma":
            threads, per = fma_split(self.tile_h * self.tile_w, self.tile_k, what, info.max_block)
            return ConvGeometry(threads, info.wave_size, per, None, lds)
        rows = self.tile_h * self.tile_w
        instr = mma_instr(target, self.path, self.dtype, rows, self.tile_k, self.c_chunk, what)
        waves = (rows // instr.m) * (self.tile_k // instr.n)
        threads = waves * info.wave_size
        if threads > info.max_block:
            raise SpecError(f"{what}: {waves} waves x {info.wave_size} = {threads} threads > {info.max_block}")
        return ConvGeometry(threads, info.wave_size, 0, instr.key, lds)
