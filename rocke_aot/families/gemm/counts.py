"""The gemm family's counts: what one block of each gemm pipeline issues per K-tile (KernelCounts).

    gemm_counts(spec, problem, Target, banks) -> KernelCounts      the family's Model.counts
        _gemm_static          per K-tile: the register-staged paths (fma; mfma / wmma / mma),
                              and the dispatch to the two sm_90 pipelines' own tuples:
        _gemm_async_static    the asynchronous pipeline (cp.async + ldmatrix + mma.sync)
        _gemm_wgmma_static    the warpgroup pipeline (cp.async + wgmma.mma_async)
        _gemm_lines           the global lines of a step's A and B loads
        split-K               _split_k_epilogue / _split_k_tail (the async pipelines only)

The rule (what each field counts, how LDS and global wavefronts are counted) and the helpers it
shares with the other families are variants/counts.py's; this module follows the gemm lowerers
(lower_registers.py, lower_async.py, lower_warpgroup.py here) instruction by instruction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from rocke_aot import mma
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.families.gemm.spec import amd_b_pair_width, async_copy_chunk, copy_panel, quad_stores
from rocke_aot.launch import ceil_div
from rocke_aot.mma import WARPGROUP, WGMMA_K
from rocke_aot.targets import Target
from rocke_aot.variants.counts import (
    LINE_BYTES,
    KernelCounts,
    a_run,
    frag_cost,
    global_lines,
    lds_cycles,
    line_stride,
    pipelined_latencies,
    stage_cost,
    wgmma_key,
)

# Integer, compare, select and address instructions the lowerers emit per staged unit, counted
# in their IR (before the compiler folds anything; a count, not a fit; variants/counts.py):
# gemm, one vector (families/gemm/lower_registers.py stage_tile + load_vec): the chunk index (1), its row and
#   vector (2), the global row and column (3), the row test (1), the whole-vector test (3), the
#   global address (2 + 3 for the 64-bit pointer), the LDS address (3), the loop step (2)
GEMM_OPS_PER_VECTOR = 20
# gemm's asynchronous pipeline, one 16-byte cp.async (issue_copies, the loop-invariant copy plan
#   computed before the loop): the round's offset product (1), the source index (1), the residue
#   test and its AND with the tile's K test (2), the 64-bit index and address (2), the LDS offset
#   and address (3), the ignore-src predicate (1: the test's negation, cp.async's zero-fill operand,
#   NvptxKernel.async_copy16_unless); the cp.async itself is the global load
GEMM_ASYNC_OPS_PER_COPY = 10


@functools.lru_cache(maxsize=8192)
def _gemm_static(spec: Any, target: Target, banks: int) -> tuple:
    g = spec.geometry(target)
    eb = DTYPE_BYTES[spec.in_dtype]
    vw = spec.vector_width
    lda = spec.block_k + spec.lds_row_pad
    ldb = spec.ldb
    a_vpr, b_vpr = spec.block_k // vw, spec.block_n // vw
    if spec.wgmma:  # cp.async's order into the swizzled layout (families/gemm/spec.py lds_a_index)
        ra, wa = stage_cost(g.threads, g.wave_size, spec.block_m * a_vpr, vw, eb,
                            lambda c: spec.lds_a_index(*async_copy_chunk(spec, g.threads, "A", c)), banks)
    else:
        ra, wa = stage_cost(g.threads, g.wave_size, spec.block_m * a_vpr, vw, eb,
                            lambda c: (c // a_vpr) * lda + (c % a_vpr) * vw, banks)
    if spec.b_lds == "nk" and amd_main_loop(spec, target):
        # families/gemm/lower_registers.py amd_units / amd_store: a unit is two vectors of K rows 2r, 2r + 1
        # (two global loads) of bw = amd_b_pair_width elements, stored as bw 4-byte pairs, column e of
        # the unit at column row v*bw+e; unit c is K pair c % (block_k / 2) of vector c // (block_k / 2)
        bw = amd_b_pair_width(spec, g.threads)
        rb, wb, kp, bvpr = 0, 0.0, spec.block_k // 2, spec.block_n // bw
        for e in range(bw):
            def unit_at(c: int, e: int = e) -> int:
                return spec.lds_b_index(2 * (c % kp), (c // kp) * bw + e)

            rb, w_e = stage_cost(g.threads, g.wave_size, kp * bvpr, 2, eb, unit_at, banks)
            wb += w_e
        b_stores, rb = rb * bw, rb * 2
    elif spec.b_lds == "nk":  # each staged B vector is vw 16-bit stores, element e to column row v*vw+e
        rb, wb = 0, 0.0
        for e in range(vw):
            def element_at(c: int, e: int = e) -> int:
                return spec.lds_b_index(c // b_vpr, (c % b_vpr) * vw + e)

            rb, w_e = stage_cost(g.threads, g.wave_size, spec.block_k * b_vpr, 1, eb, element_at, banks)
            wb += w_e
        b_stores = rb * vw
    elif spec.stages:  # cp.async's order: a 192-column B row in panels (families/gemm/spec.py copy_panel)
        rb, wb = stage_cost(g.threads, g.wave_size, spec.block_k * b_vpr, vw, eb,
                            lambda c: spec.lds_b_index(*async_copy_chunk(spec, g.threads, "B", c)), banks)
        b_stores = rb
    else:
        rb, wb = stage_cost(g.threads, g.wave_size, spec.block_k * b_vpr, vw, eb,
                            lambda c: spec.block_m * lda + (c // b_vpr) * ldb + (c % b_vpr) * vw, banks)
        b_stores = rb
    if g.instr is None:
        # thread (tx, ty): A rows ty*tm + i, B columns tx*tn + j, one element per load
        tn_threads = spec.block_n // g.thread_n
        lanes = range(min(g.wave_size, g.threads))
        a_cyc = sum(lds_cycles([(((t // tn_threads) * g.thread_m + i) * lda * eb, eb) for t in lanes], banks)
                    for i in range(g.thread_m))
        b_cyc = sum(lds_cycles([((spec.block_m * lda + (t % tn_threads) * g.thread_n + j) * eb, eb)
                                for t in lanes], banks) for j in range(g.thread_n))
        per_k = g.thread_m + g.thread_n
        return (g, None, 0.0, per_k * spec.block_k, (a_cyc + b_cyc) * spec.block_k,
                g.thread_m * g.thread_n * spec.block_k, per_k * spec.block_k, ra + rb, wa + wb,
                g.thread_m * g.thread_n, ra + b_stores)
    ins = mma.INSTRS[g.instr]
    if spec.wgmma:
        return _gemm_wgmma_static(spec, g, ins, eb, wa + wb)
    if spec.stages:
        return _gemm_async_static(spec, g, ins, eb, lda, ldb, wa + wb, banks)
    run = a_run(ins, lda)
    a_loads, a_cyc = frag_cost(ins, ins.a_coord, ins.a_per_lane, spec.lds_a_index, eb, run, banks)
    b_run = a_run(ins, ldb, _b_cn(ins), ins.b_per_lane) if spec.b_lds == "nk" else 1
    b_loads, b_cyc = frag_cost(ins, ins.b_coord, ins.b_per_lane, spec.lds_b_index, eb, b_run, banks)
    ksub = spec.block_k // ins.k
    return (g, ins, g.tiles_m * g.tiles_n * ksub, ksub * (g.tiles_m * a_loads + g.tiles_n * b_loads),
            ksub * (g.tiles_m * a_cyc + g.tiles_n * b_cyc), 0, 0, ra + rb, wa + wb,
            g.tiles_m * g.tiles_n * ins.acc_per_lane, ra + b_stores)


def amd_main_loop(spec: Any, target: Target) -> bool:
    """Whether the gemm runs families/gemm/lower_registers.py build_amd (the AMD matrix paths, stages 0): every
    global load of a step issued together, one step's matrix work before they are waited for (one
    exposed latency a step, a two-stage pipeline's), B (nk) staged as 4-byte pairs of K rows."""
    return bool(target.is_amdgpu and spec.path in ("mfma", "wmma") and not spec.stages)


def _b_cn(ins: Any) -> Callable:
    """B's element map as (column, K): the (row, contiguous index) of a transposed B tile."""
    return lambda lane, j: tuple(reversed(ins.b_coord(lane, j)))


def _ldmatrix_cycles(row_bytes: Iterable[int], banks: int) -> int:
    """LDS cycles of one ldmatrix: each 8x8 matrix is 8 row reads of 16 bytes (one access)."""
    rows = list(row_bytes)
    return sum(lds_cycles(((r, 16) for r in rows[i:i + 8]), banks) for i in range(0, len(rows), 8))


def _gemm_async_static(spec: Any, g: Any, ins: Any, eb: int, lda: int, ldb: int, write_cyc: float,
                       banks: int) -> tuple:
    """_gemm_static's tuple for the asynchronous pipeline (module doc), from the lane address
    maps of families/gemm/lower_async.py compute_ldmatrix, for warp 0 (every warp's tile is a shift of
    it by whole 16-byte rows)."""
    lane = range(32)
    row8 = [ln % 8 + (ln // 8) % 2 * 8 for ln in lane]
    half = [(ln // 16) * 8 for ln in lane]
    a_cyc = sum(_ldmatrix_cycles([spec.lds_a_index(row8[ln] + i * ins.m, half[ln]) * eb for ln in lane], banks)
                for i in range(g.tiles_m))
    b_cyc = 0
    b_loads = 0
    for t in range(0, g.tiles_n, 2):
        two = t + 1 < g.tiles_n
        rows = [spec.lds_b_index(row8[ln], t * ins.n + (half[ln] if two else 0)) * eb for ln in lane]
        b_cyc += _ldmatrix_cycles(rows if two else rows[:16], banks)
        b_loads += 1
    ksub = spec.block_k // ins.k
    # per panel of each operand (copy_plan: one panel a row unless the row's vectors do not step
    # evenly over the threads, B of 192 columns: three of 8 vectors)
    copies = sum((cols // ASYNC_ELEMS // pv) * ceil_div(rows * pv, g.threads)
                 for rows, cols in ((spec.block_m, spec.block_k), (spec.block_k, spec.block_n))
                 for pv in (copy_panel(g.threads, cols),))
    pairs = g.tiles_m * g.tiles_n * ins.acc_per_lane // 2  # 2-element stores a lane; quads: one per two
    return (g, ins, g.tiles_m * g.tiles_n * ksub, ksub * (g.tiles_m + b_loads), ksub * (a_cyc + b_cyc), 0, 0,
            copies, write_cyc, pairs // 2 if quad_stores(spec, g) else pairs, 0)


ASYNC_ELEMS = 8  # elements per cp.async (16 bytes of f16 / bf16)


def _gemm_wgmma_static(spec: Any, g: Any, ins: Any, eb: int, write_cyc: float) -> tuple:
    """_gemm_static's tuple for the warpgroup pipeline (families/gemm/lower_warpgroup.py build_wgmma), per warp
    and K-tile: its quarter of each of the tiles_m x (block_k / 16) wgmma m64nNk16 its warpgroup
    issues, in units of 16x8x16 (N / 8 a wgmma, the facts' wgmma rate: gemm_counts puts the
    issued count beside); no LDS read instruction (the tensor cores read the descriptors), the
    bytes they read in the read term: per m64 tile the warp's 16 rows of A and a quarter of the
    B tile, which every wgmma reads again, in 128-byte wavefronts (the swizzled layout has no
    conflicts); cp.async copies in panels of one swizzle row (copy_panel)."""
    ksub = spec.block_k // WGMMA_K
    units = g.tiles_m * g.tiles_n * ksub  # tiles_n = block_n / 8: the n8 slices
    # each wgmma reads its own operands: its m64 tile's A (the warp's 16 rows) and the whole B
    # (16 x N a k-step, a quarter a warp), so B is read once per m64 tile a warpgroup holds
    read_bytes = g.tiles_m * (ins.m + spec.block_n / WARPGROUP) * spec.block_k * eb
    copies = sum((cols // ASYNC_ELEMS // pv) * ceil_div(rows * pv, g.threads)
                 for rows, cols in ((spec.block_m, spec.block_k), (spec.block_k, spec.block_n))
                 for pv in (copy_panel(g.threads, cols, True),))
    pairs = g.tiles_m * g.tiles_n * ins.acc_per_lane // 2
    return (g, ins, units, 0, read_bytes / LINE_BYTES, 0, 0, copies, write_cyc,
            pairs // 2 if quad_stores(spec, g) else pairs, 0)


def gemm_lines(spec: Any, target: Target, k: int, n: int) -> int:
    """_gemm_lines at the strides' line-equivalent values (variants/counts.py line_stride): the
    rows a step's copies touch are at most block_m / block_n / block_k elements wide."""
    span, eb = max(spec.block_m, spec.block_n, spec.block_k), DTYPE_BYTES[spec.in_dtype]
    return _gemm_lines(spec, target, line_stride(k, span, eb), line_stride(n, span, eb))


@functools.lru_cache(maxsize=8192)
def _gemm_lines(spec: Any, target: Target, k: int, n: int) -> int:
    """Global lines of a step's A (rows of block_k at stride K) and B (rows of block_n at stride N)."""
    g = spec.geometry(target)
    eb, vw = DTYPE_BYTES[spec.in_dtype], spec.vector_width
    a_vpr, b_vpr = spec.block_k // vw, spec.block_n // vw
    if spec.stages:  # cp.async's order (a 192-column B row in panels; one panel otherwise: the same)
        def copy_at(w: str, ld: int) -> Callable[[int], int]:
            def at(c: int) -> int:  # the c-th copy's offset in the operand (row stride ld)
                r, col = async_copy_chunk(spec, g.threads, w, c)
                return r * ld + col
            return at

        at = {w: copy_at(w, k if w == "A" else n) for w in ("A", "B")}
        return (global_lines(g.threads, g.wave_size, spec.block_m * a_vpr, vw, eb, at["A"])
                + global_lines(g.threads, g.wave_size, spec.block_k * b_vpr, vw, eb, at["B"]))
    return (global_lines(g.threads, g.wave_size, spec.block_m * a_vpr, vw, eb,
                         lambda c: (c // a_vpr) * k + (c % a_vpr) * vw, a_vpr)
            + global_lines(g.threads, g.wave_size, spec.block_k * b_vpr, vw, eb,
                           lambda c: (c // b_vpr) * n + (c % b_vpr) * vw, b_vpr))


# NVIDIA's L2 works in 32-byte sectors (CUDA C++ Best Practices Guide, "Coalesced Access to
# Global Memory"): a warp's store costs every sector it touches, however little of each it writes.
SECTOR_BYTES = 32


def _async_store_bytes(spec: Any, g: Any) -> int:
    """The L2 traffic of the asynchronous epilogue, in whole 32-byte sectors: a quad's 2-element
    stores of one row cover 4 x 2 x out bytes, a whole sector for f32 and half of one for 2-byte
    outputs (each half a separate write), unless the epilogue writes quads (quad_stores: 4
    columns a lane, whole sectors)."""
    ob = DTYPE_BYTES[spec.out_dtype]
    per_sector = 1 if ob * 8 >= SECTOR_BYTES or quad_stores(spec, g) else SECTOR_BYTES // (ob * 8)
    return spec.block_m * spec.block_n * ob * per_sector


# Global latencies split-K adds to a block's epilogue chain (reduce_split): the release fence
# waits for the partial stores to be performed, the atomic is a round trip to L2, and the last
# arriver's partial reads (after the acquire fence) one more.
SPLIT_K_LATENCIES = 3


def _split_k_tail(spec: Any, c_bytes: int) -> int:
    """The last arriver's reads of the split_k partials and its C sectors, less the 1 / split_k
    share _split_k_epilogue averages into every block's store_bytes (KernelCounts.tail_bytes)."""
    sk = spec.split_k
    whole = sk * spec.block_m * spec.block_n * 4 + c_bytes
    return whole - whole // sk


def _split_k_epilogue(spec: Any, g: Any, ins: Any, c_bytes: int) -> tuple[int, float]:
    """(L2 bytes per block, extra instructions per warp) of split-K's epilogue, averaged over the
    split_k blocks of a tile (one of them, the last to arrive, reduces and writes C): every block
    stores its bm x bn f32 partial; the last reads split_k of them and writes C's sectors. Per
    warp, as reduce_split emits them: nt 16-byte partial stores (nt = the warp's mma tiles),
    2 barriers, thread 0's fence + atomic + fence (one warp's, spread over the block's warps)
    and, averaged, nt x split_k 16-byte loads and nt x (split_k - 1) x 4 adds in the last."""
    sk, part = spec.split_k, spec.block_m * spec.block_n * 4
    nt = g.tiles_m * g.tiles_n
    warps = ceil_div(g.threads, g.wave_size)
    per_warp = nt + 2 + 3 / warps + (nt * sk + nt * (sk - 1) * ins.acc_per_lane) / sk
    return part + (sk * part + c_bytes) // sk, per_warp


def gemm_counts(spec: Any, p: Any, target: Target, banks: int = 32) -> KernelCounts:
    g, ins, mmas, reads, read_cyc, fma, cvt, rounds, write_cyc, outs, lds_stores = _gemm_static(spec, target, banks)
    eb, ob = DTYPE_BYTES[spec.in_dtype], DTYPE_BYTES[spec.out_dtype]
    if spec.stages:
        steps = ceil_div(ceil_div(p.k, spec.block_k), spec.split_k)  # the longest slice (all of K at split 1)
        store_bytes, extra, tail = _async_store_bytes(spec, g), 0.0, 0
        if spec.split_k > 1:
            store_bytes, extra, tail = (*_split_k_epilogue(spec, g, ins, store_bytes),
                                        _split_k_tail(spec, store_bytes))
        wg = spec.wgmma  # the warpgroup pipeline: copies run copy_ahead tiles ahead, not stages - 1
        return KernelCounts(
            threads=g.threads, wave_size=g.wave_size, steps=steps, instr=wgmma_key(spec.in_dtype) if wg else ins.key,
            mma=mmas, matrix_issued=mmas / g.tiles_n if wg else None,
            lds_reads=reads, lds_read_wavefronts=read_cyc, fma=0, cvt=0, global_loads=rounds, lds_writes=0,
            lds_write_wavefronts=write_cyc, global_wavefronts=gemm_lines(spec, target, p.k, p.n),
            serial_loads=pipelined_latencies(steps, spec.copy_ahead + 1 if wg else spec.stages),
            int_ops=rounds * GEMM_ASYNC_OPS_PER_COPY,
            staged_bytes=(spec.block_m + spec.block_n) * spec.block_k * eb, barriers=1, double_buffer=True,
            store_bytes=store_bytes, stores=outs,
            # split-K's f32 partials are bytes of their own: each written once and read once by
            # the last arriver, through the HBM where they outgrow the L2 (6000^2 at split 4:
            # 1.15 GB, the whole time of the kernel on the H200, run 18)
            unique_bytes=(p.m * p.k + p.k * p.n) * eb + p.m * p.n * ob
            + (2 * spec.split_k * p.m * p.n * 4 if spec.split_k > 1 else 0),
            macs=spec.block_m * spec.block_n * spec.block_k, splits=spec.split_k, epilogue_latencies=1.0 + SPLIT_K_LATENCIES * (spec.split_k > 1),
            epilogue_instructions=extra, tail_bytes=tail)
    return KernelCounts(
        threads=g.threads, wave_size=g.wave_size, steps=ceil_div(p.k, spec.block_k),
        instr=None if ins is None else ins.key, mma=mmas, lds_reads=reads, lds_read_wavefronts=read_cyc,
        fma=fma, cvt=cvt, global_loads=rounds, lds_writes=lds_stores, lds_write_wavefronts=write_cyc,
        global_wavefronts=gemm_lines(spec, target, p.k, p.n),
        serial_loads=pipelined_latencies(ceil_div(p.k, spec.block_k), 2) if amd_main_loop(spec, target) else rounds,
        int_ops=rounds * GEMM_OPS_PER_VECTOR, staged_bytes=(spec.block_m + spec.block_n) * spec.block_k * eb, barriers=1 if spec.double_buffer else 2,
        double_buffer=spec.double_buffer, store_bytes=spec.block_m * spec.block_n * ob, stores=outs,
        unique_bytes=(p.m * p.k + p.k * p.n) * eb + p.m * p.n * ob,
        macs=spec.block_m * spec.block_n * spec.block_k)

