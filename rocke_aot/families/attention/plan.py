"""How the attention kernel's online softmax stays in registers: ``register_plan(ins, bn)`` decides, from a
matrix instruction's own coordinate maps (rocke_aot/mma.py), whether the accumulators of S (S^T = K Q^T on
MFMA / WMMA, S = Q K^T on mma.sync) are, in the same lane, the fragments of P for the P V product; lower.py
emits the kernel from the plan, counts.py prices it. numpy only, imported when called (a server never does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ROWS = 16  # query rows per warp (every target's instruction has m = 16 in the shape used; native.py)


@dataclass(frozen=True)
class RegisterPlan:
    """How S's accumulators become P's fragments in the same lane (register_plan)."""
    transposed: bool  # S^T = K Q^T, O^T = V^T P^T (a D column is a query row) or S = Q K^T, O = P V (a D row)
    gather: tuple[tuple[tuple[int, int], ...], ...]  # [kc][j] -> (S tile, accumulator element) of P's fragment kc
    masks: tuple[int, ...]  # lane xor masks spanning the lanes that hold one query row
    rows: tuple[tuple[int, ...], ...]  # a lane's accumulator elements by query row (the same row in every tile)
    store_run: int  # consecutive head-dim elements of one row in a lane's O accumulators (one vector store)
    # P V's contraction index is the key in a permuted order (``paired``): the fragment's element j is the
    # lane's j-th accumulator of its row in the k-slice's tiles, gather[kc][j], and V^T's A element j in lane l
    # is the key gather[0][j] holds there (tile * tile size + the accumulator's D row): gfx950's MFMA 16x16x32,
    # whose B lane group g takes contraction indices 8g .. 8g + 7 where S^T's lane group g holds keys
    # 4g .. 4g + 3 of each 16-key tile. The sum over keys is the same in any order V^T and P^T agree on.
    paired: bool = False

    def tile(self, ins) -> int:
        """Keys of one S tile (head-dim elements of one O tile): D's rows (S^T) or its columns (S)."""
        return ins.m if self.transposed else ins.n


def b_nk(ins):
    """A B operand stored (n, k) in shared memory / LDS, k contiguous (K for S = Q K^T, V^T for P V):
    element j of a lane at (n, k)."""
    def coord(lane, j):
        kk, nn = ins.b_coord(lane, j)
        return nn, kk
    return coord


def lds_operand(ins, transposed: bool):
    """(elements a lane, (row, contiguous index) of element j) of the K and V^T fragments read from LDS:
    A (S^T = K Q^T, O^T = V^T P^T) or B stored (n, k) (S = Q K^T, O = P V)."""
    return (ins.a_per_lane, ins.a_coord) if transposed else (ins.b_per_lane, b_nk(ins))


def dmap(ins, transposed: bool):
    """(key or head-dim, query row) of accumulator r: S^T's D is (key, row), S's (row, key)."""
    if transposed:
        return ins.d_coord
    return lambda lane, r: ins.d_coord(lane, r)[::-1]


def register_plan(ins, bn: int) -> RegisterPlan | None:
    """The register softmax's plan for ``ins`` and a block of ``bn`` keys, None where the layouts do
    not compose; decided from the instruction's own coordinate maps over all lanes (numpy). Tried as
    S^T = K Q^T first (a D column is a query row: MFMA, WMMA), then S = Q K^T (a D row is one: mma.sync
    m16n8k16, whose D has 8 columns). It composes where: a lane's accumulators fall in the same query rows
    in every lane's terms (``rows``: the elements of each row); every element of P's fragment kc (B of
    P^T: keys kc * k + b_k, row b_n; A of P: row a_row, keys kc * k + a_k) is, in every lane, one (tile,
    element) of S's accumulators at the same (key, row); the lanes holding one row are a lane ^ span(masks)
    group of one row element."""
    for transposed in (True, False):
        plan = _register_plan(ins, bn, transposed)
        if plan is not None:
            return plan
    return None


def _register_plan(ins, bn: int, transposed: bool) -> RegisterPlan | None:
    if (ins.n if transposed else ins.m) != ROWS:
        return None
    tile = ins.m if transposed else ins.n
    if bn % tile or bn % ins.k:
        return None
    import numpy as np  # the planner runs where a kernel is lowered or counted; a server imports none

    lanes = np.arange(ins.wave_size)

    def arr(x) -> Any:
        return np.broadcast_to(x, lanes.shape)

    dm = dmap(ins, transposed)
    dx = [arr(dm(lanes, r)[0]) for r in range(ins.acc_per_lane)]
    drow = [arr(dm(lanes, r)[1]) for r in range(ins.acc_per_lane)]
    rows: list[list[int]] = []
    for r in range(ins.acc_per_lane):
        for grp in rows:
            if (drow[grp[0]] == drow[r]).all():
                grp.append(r)
                break
        else:
            rows.append([r])
    if transposed:  # P^T as B: (key b_k, row b_n)
        per, pmap = ins.b_per_lane, ins.b_coord
    else:  # P as A: (row, key) -> (key, row)
        per, pmap = ins.a_per_lane, lambda lane, j: ins.a_coord(lane, j)[::-1]
    gather: list[tuple[tuple[int, int], ...]] | None = []
    paired = False
    for kc in range(bn // ins.k):
        row = []
        for j in range(per):
            px, prow = (arr(x) for x in pmap(lanes, j))
            hit = [(t, r) for t in range(bn // tile) for r in range(ins.acc_per_lane)
                   if (drow[r] == prow).all() and (t * tile + dx[r] == kc * ins.k + px).all()]
            if not hit:
                gather = None
                break
            row.append(hit[0])
        if gather is None:
            break
        gather.append(tuple(row))
    if gather is None and transposed:  # the keys of a k-slice in the lane's own accumulator order
        gather, paired = _paired(ins, bn, tile, dx, drow, lanes, arr), True
    if gather is None:
        return None
    first = [drow[g[0]] for g in rows]
    masks = tuple(1 << i for i in range(ins.wave_size.bit_length() - 1)
                  if all((f[lanes ^ (1 << i)] == f).all() for f in first))
    held = np.concatenate(first)  # the row of each (lane, row element): each row 2^len(masks) times
    if sorted(set(held.tolist())) != list(range(ROWS)) or (np.bincount(held, minlength=ROWS) != 2 ** len(masks)).any():
        return None
    run = min(len(g) for g in rows)
    while run > 1 and not (tile % run == 0 and all(
            len(g) % run == 0 and (dx[g[i0]] % run == 0).all()
            and all((dx[g[i]] == dx[g[i0]] + (i - i0)).all() for i in range(i0, i0 + run))
            for g in rows for i0 in range(0, len(g), run))):
        run //= 2
    return RegisterPlan(transposed, tuple(gather), masks, tuple(tuple(g) for g in rows), run, paired)


def _paired(ins, bn: int, tile: int, dx: list, drow: list, lanes: Any, arr) -> list | None:
    """P^T's B fragments with the contraction index permuted (RegisterPlan.paired), or None: element j of a
    lane is its j-th unused accumulator (tiles of the k-slice in order, then registers) in the element's
    query row; composes where that key is one function of the contraction index b_k over every lane (a
    bijection of the slice) and V^T's A fragment takes the same index as P^T's in every lane (a_k = b_k),
    so both sides of the product see one order of the keys."""
    import numpy as np

    if ins.k % tile:
        return None
    per = ins.b_per_lane
    if ins.a_per_lane != per or any((arr(ins.a_coord(lanes, j)[1]) != arr(ins.b_coord(lanes, j)[0])).any()
                                    for j in range(per)):
        return None
    seq: list[tuple[int, int]] = []
    perm = np.full(ins.k, -1)
    for j in range(per):
        pk, prow = (arr(x) for x in ins.b_coord(lanes, j))
        free = [(t, r) for t in range(ins.k // tile) for r in range(ins.acc_per_lane)
                if (t, r) not in seq and (drow[r] == prow).all()]
        if not free:
            return None
        t, r = free[0]
        seq.append((t, r))
        key = t * tile + dx[r]
        if ((perm[pk] != -1) & (perm[pk] != key)).any():
            return None
        perm[pk] = key
    if sorted(perm.tolist()) != list(range(ins.k)):
        return None
    per_slice = ins.k // tile
    return [tuple((kc * per_slice + t, r) for t, r in seq) for kc in range(bn // ins.k)]


__all__ = ["ROWS", "RegisterPlan", "b_nk", "dmap", "lds_operand", "register_plan"]
