"""A test-only reference of every matrix instruction the variant tables use, written from the
vendor documentation and keyed by LLVM intrinsic name. It imports nothing from rocke_aot.

    REFS["llvm.amdgcn.mfma.f32.32x32x8f16"] -> IsaRef(wave, m, n, k, dtype, operand params,
                                                       a_owner, b_owner, d_owner)
        a_owner(row, k)   -> (lane, element j)   which lane register holds A[row][k]
        b_owner(k, col)   -> (lane, element j)   ... B[k][col]
        d_owner(row, col) -> (lane, register r)  ... D[row][col]
    ref.execute(fa, fb, fc) -> fd     lane registers in, lane registers out: D = A x B + C

The maps are stated in the direction the documents draw them -- "matrix element -> the lane
and register that hold it" -- the inverse of the lane -> element functions rocke_aot/mma.py
gives the lowering. tests/_host_sim.py executes every matrix call of a lowered kernel through
this module, so a layout error in rocke_aot/mma.py (or in how the lowering packs registers
for the intrinsic) gives wrong numbers instead of agreeing with itself.

Sources, per instruction:
- MFMA, wave64, one block (AMD CDNA3 ISA guide, "Matrix fused multiply-add"; CDNA4 for
  gfx950; the 16x16x16 and 32x32x8 layouts as DESIGN.md states them, checked by execution on
  AMD hardware): the K dimension is cut into G = 64 / M groups of KL = K / G consecutive
  values; group g of A lives in lanes g*M .. g*M + M - 1, row i in lane g*M + i, as register
  elements 0..KL-1 in K order. B is the same with the column for the row. The f32 result
  of a 16x16 tile: rows in groups of 4, group q in lanes 16q..16q+15 (column = lane % 16),
  row i%4 of the group in register i%4. Of a 32x32 tile: rows in groups of 4 alternate
  between the two lane halves (row i in lanes 32*((i//4)%2) + col), register 4*(i//8) + i%4.
  The bf16 "_1k" forms and gfx950's 32x32x16 and 16x16x32 f16/bf16 use the same rule (KL = 4
  and 8; CDNA4 ISA guide, "Dense matrix layouts": K_L = K / (64 / M) consecutive K values per lane).
- gfx1250 WMMA 16x16x32 f16/bf16, wave32 (AMD GFX12.5 ISA, "16-bit A-matrix 16x32" and
  "32-bit C/D matrix 16x16"): row i of A in lanes i and i + 16; lanes 0-15 hold K 0-7 (VGPRs
  0-3, elements 0-7) and K 16-23 (elements 8-15), lanes 16-31 hold K 8-15 and K 24-31. B the
  same with the column for the row. D: VGPR r of lanes 0-15 holds row r, of lanes 16-31
  row r + 8; the column is lane % 16.
- NVPTX mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16} (PTX ISA, "Matrix Fragments for
  mma.m16n8k16 with floating point type"): groupID = laneid >> 2, threadID_in_group =
  laneid % 4. A (a0..a7, in four .b32 registers, a0 in the low half of the first):
  row = groupID for a0, a1, a4, a5 and groupID + 8 for a2, a3, a6, a7; col =
  threadID_in_group * 2 + (i & 1), + 8 for i >= 4. B (b0..b3, two .b32 registers): row =
  threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col = groupID. C/D (c0..c3, f32): row =
  groupID for c0, c1 and groupID + 8 for c2, c3; col = threadID_in_group * 2 + (i & 1).
  Inverted here: A[row][k] is in lane 4*(row % 8) + (k % 8) // 2, element
  (k % 2) + 2*(row // 8) + 4*(k // 8).

- NVPTX ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16 (PTX ISA, "ldmatrix"): the
  instruction loads 1, 2 or 4 matrices of 8x8 16-bit elements; threads 8i..8i+7 give the
  addresses of rows 0..7 of matrix i (.x1: threads 0-7, .x2: 0-15, .x4: 0-31; the others'
  addresses are ignored). Each thread receives one .b32 register per matrix: without .trans
  "each thread holds a fragment of a row": thread t gets row t // 4, elements 2*(t % 4) and
  2*(t % 4) + 1 (the lower column in the low half); with .trans the matrix is read column-
  major, so thread t gets elements (row 2*(t % 4), col t // 4) and (row 2*(t % 4) + 1, same
  col). ``ldmatrix_registers`` states exactly that over the 32 threads' addresses.

Operands: ``params`` say which intrinsic parameters carry A, B and C (MFMA: A, B, C, cbsz,
abid, blgp; gfx1250 WMMA: neg_a, A, neg_b, B, c_mod, C, reuse_a, reuse_b; NVPTX mma:
a0..a3, b0..b1, c0..c3 as scalars and a {float x 4} result). Register elements are 16-bit
values in memory order, which for a packed .b32 register is the low half first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Owner = Callable[[int, int], "tuple[int, int]"]


@dataclass(frozen=True)
class IsaRef:
    intrinsic: str
    wave: int
    m: int
    n: int
    k: int
    dtype: str  # "f16" | "bf16": how the 16-bit operand elements decode
    a_params: tuple[int, ...]  # intrinsic parameter positions of A, B, C
    b_params: tuple[int, ...]
    c_params: tuple[int, ...]
    a_owner: Owner
    b_owner: Owner
    d_owner: Owner

    @property
    def a_regs(self) -> int:  # 16-bit A elements per lane
        return self.m * self.k // self.wave

    @property
    def b_regs(self) -> int:
        return self.k * self.n // self.wave

    @property
    def d_regs(self) -> int:  # f32 result registers per lane
        return self.m * self.n // self.wave

    # -- the inverse tables: [lane, element] -> (row, col) of the matrix ------------------
    def _table(self, owner: Owner, rows: int, cols: int, per_lane: int) -> np.ndarray:
        out = np.full((self.wave, per_lane, 2), -1, dtype=np.int64)
        for r in range(rows):
            for c in range(cols):
                lane, e = owner(r, c)
                if not (0 <= lane < self.wave and 0 <= e < per_lane) or out[lane, e, 0] != -1:
                    raise AssertionError(f"{self.intrinsic}: ({r}, {c}) -> ({lane}, {e}) is not a bijection")
                out[lane, e] = (r, c)
        return out

    def a_table(self) -> np.ndarray:
        return self._table(self.a_owner, self.m, self.k, self.a_regs)

    def b_table(self) -> np.ndarray:
        return self._table(self.b_owner, self.k, self.n, self.b_regs)

    def d_table(self) -> np.ndarray:
        return self._table(self.d_owner, self.m, self.n, self.d_regs)

    def execute(self, fa: np.ndarray, fb: np.ndarray, fc: np.ndarray) -> np.ndarray:
        """Lane registers (float values) [lane, element] -> result registers [lane, r]."""
        a = np.zeros((self.m, self.k))
        b = np.zeros((self.k, self.n))
        c = np.zeros((self.m, self.n))
        for i in range(self.m):
            for kk in range(self.k):
                a[i, kk] = fa[self.a_owner(i, kk)]
        for kk in range(self.k):
            for j in range(self.n):
                b[kk, j] = fb[self.b_owner(kk, j)]
        for i in range(self.m):
            for j in range(self.n):
                c[i, j] = fc[self.d_owner(i, j)]
        d = a @ b + c
        fd = np.zeros((self.wave, self.d_regs))
        for i in range(self.m):
            for j in range(self.n):
                fd[self.d_owner(i, j)] = d[i, j]
        return fd


# -- MFMA (wave64, one block) ----------------------------------------------------------------
def _mfma_operand(m: int, k: int) -> Owner:
    kl = k // (64 // m)  # consecutive K values per lane

    def owner(i: int, kk: int) -> tuple[int, int]:
        return (kk // kl) * m + i, kk % kl

    return owner


def _mfma_b(n: int, k: int) -> Owner:
    a = _mfma_operand(n, k)
    return lambda kk, j: a(j, kk)


def _mfma_d16(i: int, j: int) -> tuple[int, int]:
    return 16 * (i // 4) + j, i % 4


def _mfma_d32(i: int, j: int) -> tuple[int, int]:
    return 32 * ((i // 4) % 2) + j, 4 * (i // 8) + i % 4


def _mfma(name: str, m: int, k: int, dtype: str) -> IsaRef:
    return IsaRef(name, 64, m, m, k, dtype, (0,), (1,), (2,), _mfma_operand(m, k), _mfma_b(m, k),
                  _mfma_d16 if m == 16 else _mfma_d32)


# -- gfx1250 WMMA 16x16x32 (wave32) ------------------------------------------------------------
def _wmma_operand(i: int, kk: int) -> tuple[int, int]:
    return i + 16 * ((kk // 8) % 2), 8 * (kk // 16) + kk % 8


def _wmma_d(i: int, j: int) -> tuple[int, int]:
    return j + 16 * (i // 8), i % 8


def _wmma(name: str, dtype: str) -> IsaRef:
    return IsaRef(name, 32, 16, 16, 32, dtype, (1,), (3,), (5,), _wmma_operand,
                  lambda kk, j: _wmma_operand(j, kk), _wmma_d)


# -- NVPTX mma.sync m16n8k16 (warp of 32) -------------------------------------------------------
def _ptx_a(row: int, col: int) -> tuple[int, int]:
    return 4 * (row % 8) + (col % 8) // 2, (col % 2) + 2 * (row // 8) + 4 * (col // 8)


def _ptx_b(row: int, col: int) -> tuple[int, int]:
    return 4 * col + (row % 8) // 2, (row % 2) + 2 * (row // 8)


def _ptx_d(row: int, col: int) -> tuple[int, int]:
    return 4 * (row % 8) + col // 2, (col % 2) + 2 * (row // 8)


def _ptx(name: str, dtype: str) -> IsaRef:
    return IsaRef(name, 32, 16, 8, 16, dtype, (0, 1, 2, 3), (4, 5), (6, 7, 8, 9), _ptx_a, _ptx_b, _ptx_d)


REFS: dict[str, IsaRef] = {r.intrinsic: r for r in (
    _mfma("llvm.amdgcn.mfma.f32.16x16x16f16", 16, 16, "f16"),
    _mfma("llvm.amdgcn.mfma.f32.32x32x8f16", 32, 8, "f16"),
    _mfma("llvm.amdgcn.mfma.f32.16x16x16bf16.1k", 16, 16, "bf16"),
    _mfma("llvm.amdgcn.mfma.f32.32x32x8bf16.1k", 32, 8, "bf16"),
    _mfma("llvm.amdgcn.mfma.f32.32x32x16.f16", 32, 16, "f16"),
    _mfma("llvm.amdgcn.mfma.f32.32x32x16.bf16", 32, 16, "bf16"),
    _mfma("llvm.amdgcn.mfma.f32.16x16x32.f16", 16, 32, "f16"),
    _mfma("llvm.amdgcn.mfma.f32.16x16x32.bf16", 16, 32, "bf16"),
    _wmma("llvm.amdgcn.wmma.f32.16x16x32.f16.v8f32.v16f16", "f16"),
    _wmma("llvm.amdgcn.wmma.f32.16x16x32.bf16.v8f32.v16bf16", "bf16"),
    _ptx("llvm.nvvm.mma.m16n8k16.row.col.f32.f32", "f16"),
    _ptx("llvm.nvvm.mma.m16n8k16.row.col.bf16", "bf16"),
)}


LDMATRIX = {  # intrinsic -> (matrices, transposed)
    "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x1.b16": (1, False),
    "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.b16": (2, False),
    "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16": (4, False),
    "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x1.trans.b16": (1, True),
    "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.trans.b16": (2, True),
    "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16": (4, True),
}


def ldmatrix_registers(row_address: list[int], count: int, trans: bool,
                       read16: Callable[[int], int]) -> list[list[int]]:
    """registers[t][i]: the .b32 that thread t receives for matrix i, from the 32 threads'
    row addresses (bytes) and a reader of one 16-bit element at a byte address (module doc)."""
    out = []
    for t in range(32):
        regs = []
        for i in range(count):
            if trans:
                lo = read16(row_address[8 * i + 2 * (t % 4)] + 2 * (t // 4))
                hi = read16(row_address[8 * i + 2 * (t % 4) + 1] + 2 * (t // 4))
            else:
                row = row_address[8 * i + t // 4]
                lo, hi = read16(row + 4 * (t % 4)), read16(row + 4 * (t % 4) + 2)
            regs.append(lo | hi << 16)
        out.append(regs)
    return out


def decode16(bits: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values of 16-bit f16 / bf16 storage."""
    bits = np.asarray(bits, dtype=np.uint16)
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
