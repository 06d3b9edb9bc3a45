"""Matrix instructions: which one each arch has, and numpy models of their lane layouts.

    MmaInstr.a_coord(lane, j) -> (row, k)    lane holds A[row][k] in operand element j
    MmaInstr.b_coord(lane, j) -> (k, col)    lane holds B[k][col] in operand element j
    MmaInstr.d_coord(lane, r) -> (row, col)  result register r of lane holds D[row][col]
         |                         |
         |  lane = np.arange(W)    |  lane = Sym (an i32 IR value, module.Sym)
         v                         v
    numpy model (fragments/execute)    the gemm lowering's LDS fragment addresses

The coordinate functions use only ``+ * // %`` with Python-int constants, so the SAME
function gives numpy index arrays for the model and IR for the kernel: the test of the
model is a test of the index maps the lowering emits.

Layout sources (wave64 MFMA, one block: G = W // M lane groups, kpl = K // G):
- 16x16x16 f16 and 32x32x8 f16: AMD's documents as DESIGN.md states them (checked by
  execution): lane l holds A[l%M][kpl*(l//M)+j], B[kpl*(l//N)+j][l%N]; result register r
  holds D[4*G*(r//4) + 4*(l//N) + r%4][l%N] (rows in groups of four, 4*G rows apart).
- gfx950 32x32x16 f16/bf16: the same rule with kpl = 8 (AMD's CDNA4 ISA and the MFMA
  layout rule "K/G consecutive K elements per lane": K_L = K / (64 / M)); result as 32x32x8.
- gfx950 16x16x32 f16/bf16: the same rule with G = 4, kpl = 8: lane l holds A[l%16][8*(l//16)+j]
  and B[8*(l//16)+j][l%16] (j < 8, one 128-bit register quad); result as 16x16x16 (register r of
  lane l holds D[4*(l//16) + r][l%16]). LLVM 22's llc selects llvm.amdgcn.mfma.f32.16x16x32.{f16,bf16}
  (<8 x half> / <8 x bfloat> operands, <4 x float> accumulator) for gfx950 only ("Cannot select" on gfx942).
- gfx1250 WMMA 16x16x32 f16/bf16 (wave32, 16 elements per lane): lanes 0-15 hold row
  l%16 with K = 0..7 in VGPRs 0-3 and K = 16..23 in VGPRs 4-7; lanes 16-31 hold K = 8..15
  and 24..31 (AMD's GFX12.5 "16-bit A-matrix 16x32" table): element j is
  K = 16*(j//8) + 8*(l//16) + j%8. B mirrors it with the column l%16. The 16x16 f32
  result: register r of lane l holds D[8*(l//16) + r][l%16].
- NVPTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.f32 (sm_80+, warp of 32; PTX ISA
  "Matrix Fragments for mma.m16n8k16 with floating point type"): with g = l // 4 (groupID)
  and t = l % 4 (threadID_in_group), A element j (a0..a7, two per .b32 register, the lower
  index in the low half) is A[g + 8*((j//2)%2)][2t + j%2 + 8*(j//4)]; B element j (b0..b3)
  is B[2t + j%2 + 8*(j//2)][g]; result register r (c0..c3) is D[g + 8*(r//2)][2t + r%2].
  Unlike MFMA/WMMA, M != N here: B holds k*n/32 = 4 elements per lane, A 8.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np  # the model functions import it when called: a server never does

from rocke_aot.errors import CapabilityError

# sm_90a's wgmma.mma_async (PTX ISA "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
# issued by a warpgroup of four warps; one f16 / bf16 wgmma is 16 deep in K (256 bits). The gemm
# family's warpgroup pipeline and the counts of every family that issues it read these.
WARPGROUP = 4  # warps of one warpgroup (128 threads): wgmma's unit of issue
WGMMA_K = 16  # K of one f16 / bf16 wgmma (256 bits of K)


@dataclass(frozen=True)
class MmaInstr:
    key: str  # the profile's intrinsic key
    mnemonic: str  # what llvm-objdump prints for gfx940 and newer; NVPTX: the PTX instruction
    kind: str  # "mfma" | "wmma" (AMDGPU) | "mma" (NVPTX mma.sync)
    m: int
    n: int
    k: int
    wave_size: int
    in_dtype: str  # "f16" | "bf16"
    capability: str  # lanes capability the op needs
    mnemonic_gfx90a: str | None = None  # gfx90a's (pre-gfx940) spelling, where it differs

    def mnemonic_for(self, processor: str) -> str:
        """The ISA mnemonic as the disassembler prints it for ``processor``."""
        if processor == "gfx90a" and self.mnemonic_gfx90a:
            return self.mnemonic_gfx90a
        return self.mnemonic

    @property
    def a_per_lane(self) -> int:
        return self.m * self.k // self.wave_size

    @property
    def b_per_lane(self) -> int:
        return self.k * self.n // self.wave_size

    @property
    def acc_per_lane(self) -> int:
        return self.m * self.n // self.wave_size

    # -- the index maps (lane: int, numpy array or module.Sym; j / r: Python int) --------
    def a_coord(self, lane: Any, j: int) -> tuple[Any, Any]:
        if self.kind == "mma":
            return lane // 4 + 8 * ((j // 2) % 2), (lane % 4) * 2 + (j % 2 + 8 * (j // 4))
        if self.kind == "wmma":
            return lane % 16, (lane // 16) * 8 + (16 * (j // 8) + j % 8)
        groups = self.wave_size // self.m
        kpl = self.k // groups
        return lane % self.m, (lane // self.m) * kpl + j

    def b_coord(self, lane: Any, j: int) -> tuple[Any, Any]:
        if self.kind == "mma":
            return (lane % 4) * 2 + (j % 2 + 8 * (j // 2)), lane // 4
        if self.kind == "wmma":
            return (lane // 16) * 8 + (16 * (j // 8) + j % 8), lane % 16
        groups = self.wave_size // self.n
        kpl = self.k // groups
        return (lane // self.n) * kpl + j, lane % self.n

    def d_coord(self, lane: Any, r: int) -> tuple[Any, Any]:
        if self.kind == "mma":
            return lane // 4 + 8 * (r // 2), (lane % 4) * 2 + r % 2
        if self.kind == "wmma":
            return (lane // 16) * 8 + r, lane % 16
        groups = self.wave_size // self.n
        return (lane // self.n) * 4 + (4 * groups * (r // 4) + r % 4), lane % self.n


def _mfma(key: str, mnem: str, m: int, n: int, k: int, dt: str, cap: str, old: str | None = None) -> MmaInstr:
    return MmaInstr(key, mnem, "mfma", m, n, k, 64, dt, cap, old)


INSTRS: Mapping[str, MmaInstr] = MappingProxyType({
    i.key: i for i in (
        _mfma("mfma_f32_32x32x8f16", "v_mfma_f32_32x32x8_f16", 32, 32, 8, "f16", "mfma:f16",
              "v_mfma_f32_32x32x8f16"),
        _mfma("mfma_f32_16x16x16f16", "v_mfma_f32_16x16x16_f16", 16, 16, 16, "f16", "mfma:f16",
              "v_mfma_f32_16x16x16f16"),
        _mfma("mfma_f32_32x32x8bf16_1k", "v_mfma_f32_32x32x8_bf16", 32, 32, 8, "bf16", "mfma:f16",
              "v_mfma_f32_32x32x8bf16_1k"),
        _mfma("mfma_f32_16x16x16bf16_1k", "v_mfma_f32_16x16x16_bf16", 16, 16, 16, "bf16", "mfma:f16",
              "v_mfma_f32_16x16x16bf16_1k"),
        _mfma("mfma_f32_32x32x16_f16", "v_mfma_f32_32x32x16_f16", 32, 32, 16, "f16", "mfma:gfx950"),
        _mfma("mfma_f32_32x32x16_bf16", "v_mfma_f32_32x32x16_bf16", 32, 32, 16, "bf16", "mfma:gfx950"),
        _mfma("mfma_f32_16x16x32_f16", "v_mfma_f32_16x16x32_f16", 16, 16, 32, "f16", "mfma:gfx950"),
        _mfma("mfma_f32_16x16x32_bf16", "v_mfma_f32_16x16x32_bf16", 16, 16, 32, "bf16", "mfma:gfx950"),
        MmaInstr("wmma_f32_16x16x32_f16", "v_wmma_f32_16x16x32_f16", "wmma", 16, 16, 32, 32,
                 "f16", "wmma:gfx1250"),
        MmaInstr("wmma_f32_16x16x32_bf16", "v_wmma_f32_16x16x32_bf16", "wmma", 16, 16, 32, 32,
                 "bf16", "wmma:gfx1250"),
        # sm_90 tensor cores through mma.sync (what ptxas/cuobjdump print as HMMA.16816.F32[.BF16])
        MmaInstr("mma_f32_16x8x16_f16", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "mma",
                 16, 8, 16, 32, "f16", "mma:sm_90"),
        MmaInstr("mma_f32_16x8x16_bf16", "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "mma",
                 16, 8, 16, 32, "bf16", "mma:sm_90"),
    )
})

# (processor, path, in dtype) -> {shape name: instruction key}; the first is the default.
_BY_ARCH: Mapping[tuple[str, str, str], Mapping[str, str]] = MappingProxyType({
    **{(p, "mfma", "f16"): {"32x32x8": "mfma_f32_32x32x8f16", "16x16x16": "mfma_f32_16x16x16f16"}
       for p in ("gfx90a", "gfx942")},
    **{(p, "mfma", "bf16"): {"32x32x8": "mfma_f32_32x32x8bf16_1k",
                             "16x16x16": "mfma_f32_16x16x16bf16_1k"} for p in ("gfx90a", "gfx942")},
    ("gfx950", "mfma", "f16"): {"32x32x16": "mfma_f32_32x32x16_f16", "32x32x8": "mfma_f32_32x32x8f16",
                                "16x16x16": "mfma_f32_16x16x16f16", "16x16x32": "mfma_f32_16x16x32_f16"},
    ("gfx950", "mfma", "bf16"): {"32x32x16": "mfma_f32_32x32x16_bf16",
                                 "32x32x8": "mfma_f32_32x32x8bf16_1k",
                                 "16x16x16": "mfma_f32_16x16x16bf16_1k",
                                 "16x16x32": "mfma_f32_16x16x32_bf16"},
    ("gfx1250", "wmma", "f16"): {"16x16x32": "wmma_f32_16x16x32_f16"},
    ("gfx1250", "wmma", "bf16"): {"16x16x32": "wmma_f32_16x16x32_bf16"},
    ("sm_90", "mma", "f16"): {"16x8x16": "mma_f32_16x8x16_f16"},
    ("sm_90", "mma", "bf16"): {"16x8x16": "mma_f32_16x8x16_bf16"},
})


def shapes_for(processor: str, path: str, in_dtype: str) -> tuple[str, ...]:
    """The instruction shapes ("32x32x8", ...) an arch offers for a path; default first."""
    return tuple(_BY_ARCH.get((processor, path, in_dtype), {}))


def select(processor: str, path: str, in_dtype: str, shape: str = "auto") -> MmaInstr:
    """The matrix instruction for (arch, path, dtype, shape); refused when the arch has none."""
    table = _BY_ARCH.get((processor, path, in_dtype))
    if not table:
        raise CapabilityError(f"{path} with {in_dtype} inputs is not available on {processor}")
    if shape == "auto":
        return INSTRS[next(iter(table.values()))]
    if shape not in table:
        raise CapabilityError(
            f"{path} shape {shape} is not available on {processor} for {in_dtype} "
            f"(available: {', '.join(table)})"
        )
    return INSTRS[table[shape]]


# -- numpy model -------------------------------------------------------------------------
def fragments(instr: MmaInstr, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-lane operand registers [lane, j] for A (m x k) and B (k x n), by the layout."""
    import numpy as np
    lane = np.arange(instr.wave_size)
    fa = np.stack([a[instr.a_coord(lane, j)] for j in range(instr.a_per_lane)], axis=1)
    fb = np.stack([b[instr.b_coord(lane, j)] for j in range(instr.b_per_lane)], axis=1)
    return fa, fb


def accumulator(instr: MmaInstr, c: np.ndarray) -> np.ndarray:
    import numpy as np
    lane = np.arange(instr.wave_size)
    return np.stack([c[instr.d_coord(lane, r)] for r in range(instr.acc_per_lane)], axis=1)


def _gather(instr: MmaInstr, frag: np.ndarray, coord, shape: tuple[int, int], count: int) -> np.ndarray:
    import numpy as np
    # Scatter lane registers back into a matrix, insisting every element lands exactly once:
    # a layout that drops or duplicates an element is not a model of an instruction.
    out = np.zeros(shape, dtype=np.float64)
    hits = np.zeros(shape, dtype=np.int64)
    lane = np.arange(instr.wave_size)
    for j in range(count):
        idx = coord(lane, j)
        np.add.at(hits, idx, 1)
        out[idx] = frag[:, j]
    if not (hits == 1).all():
        raise AssertionError(f"{instr.mnemonic}: layout does not cover the matrix exactly once")
    return out


def execute(instr: MmaInstr, fa: np.ndarray, fb: np.ndarray, fc: np.ndarray) -> np.ndarray:
    """What the instruction does to lane registers: D = A x B + C, in register form."""
    a = _gather(instr, fa, instr.a_coord, (instr.m, instr.k), instr.a_per_lane)
    b = _gather(instr, fb, instr.b_coord, (instr.k, instr.n), instr.b_per_lane)
    c = _gather(instr, fc, instr.d_coord, (instr.m, instr.n), instr.acc_per_lane)
    return accumulator(instr, a @ b + c)
