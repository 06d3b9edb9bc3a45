"""What one block of a kernel issues per reduction step, counted from how the lowering builds it.

The rule and its shared pieces (KernelCounts, the bank, line and staging costs) live here; each
family's count function lives with its family (rocke_aot/families/<name>/counts.py: gemm's, and
conv_direct_fwd's and conv_dgrad_patch's over the conv engine's shared counts here, engine_static).

    spec, problem, Target ──> KernelCounts (per block; "warp" = a wave on AMD)
        threads, warps, steps                         the launch geometry and the K loop
        per step, per warp   mma, lds_reads, lds_read_wavefronts (bank conflicts counted)
        per step, per thread fma, cvt, global_loads, lds_writes
        per step, per warp   lds_write_wavefronts, global_wavefronts (the 128-byte lines the
                             staging loads touch: L1 data-stage cycles, see below)
        per step             staged_bytes (global -> LDS), barriers
        per block            store_bytes, stores (per thread)
        per problem          unique_bytes (every tensor read once and written once: the HBM floor)

The counts follow the lowerers instruction by instruction (rocke_aot/families/gemm/, aot/families/_conv_ir.py,
families/conv_direct_fwd/lower.py, families/conv_dgrad_patch/lower.py), not a fit:

- gemm staging: each thread moves ``rounds`` vectors of vector_width elements of A and of B
  (one global load and one LDS store each); conv staging moves single elements. The AMD matrix
  paths' main loop (families/gemm/lower_registers.py build_amd, amd_main_loop here) issues a step's loads
  together, a step before they are stored (waited for after the next step's LDS reads): one
  step's matrix work covers them, one exposed latency a step (pipelined_latencies(steps, 2)); its
  transposed B (nk) goes to LDS as 4-byte pairs of K rows.
- gemm's asynchronous pipeline (spec.stages >= 2, sm_90): a thread issues ``rounds`` 16-byte
  cp.async copies per step (in the lowering's order, families/gemm/spec.py async_copy_chunk: a B row
  of 192 columns in three panels of 64) and no LDS store (the copy writes shared memory itself: its LDS
  write cycles stay counted); a warp reads each 16x16 A tile with one ldmatrix.x4 and each
  pair of 16x8 B tiles with one ldmatrix.x4.trans (.x2 for an odd one), each 8x8 matrix one
  access of 8 lanes x 16 bytes through the bank rule; one barrier a step. Its loads are waited
  for stages - 1 steps after they are issued: tile j lands one global latency after the wait for
  tile j - (stages - 1) (the prologue issues tiles 0 .. stages-2 at once), so a block of ``steps``
  K-tiles waits ceil(steps / (stages - 1)) latencies in all, the pipeline's fill included:
  serial_loads = ceil(steps / (stages - 1)) / steps per step (1 for one K-tile, 1 / (stages - 1)
  in a long loop).
- matrix paths: per k-step a wave reads tiles_m A fragments (a_run elements per LDS load,
  families/gemm/lower_common.py a_fragment_run) and tiles_n B fragments (one element per load; with
  b_lds "nk", B transposed in LDS, runs like A's, for vector_width 16-bit stores per staged
  B vector) once
  and issues tiles_m x tiles_n instructions (gemm); the conv engine's lowerer loads both
  fragments of every tile it computes one element at a time, and the compiler loads a fragment
  two tiles of a wave share once (distinct_fragments) and merges a lane's consecutive, aligned
  elements into one wider load (merged_run: an mma.sync fragment pair of consecutive K is one
  LDS.32 where K is the contiguous index), as the sm_90 SASS shows.
- fma paths: per reduction index a thread reads its A and B elements (one LDS load and one
  conversion to f32 each) and issues one fused multiply-add per accumulator.
- LDS wavefronts come from the lanes' real addresses through the spec's LDS layout
  (lds_a_index / lds_b_index, the functions the lowerers call): per access, the most
  distinct 4-byte words one bank must serve, over the arch's banks (perf.bank_degree's rule;
  32 banks of 4 bytes on every arch wired here, each with its source in the facts file).

- global wavefronts: per staging load of a warp, the distinct 128-byte lines its lanes' bytes
  fall in (the global element offsets the lowerers compute, from a 128-byte aligned tile
  origin, with the problem's own leading dimensions). Where the L1 cache and shared memory are
  one array with one data path (NVIDIA since Volta: the facts file's l1_shares_lds_datapath),
  the data of every global load returns through that path one line (at most 128 bytes) per
  cycle, like an LDS wavefront: a 256-byte warp load of 64-byte row pieces costs 4 cycles of
  it, of 128-byte pieces 2.

- split-K (spec.split_k > 1): split_k blocks per output tile (``splits``), each running one
  slice of ceil(ceil(K / block_k) / split_k) K-tiles (``steps``); the epilogue's bytes and
  instructions averaged over a tile's blocks (_split_k_epilogue) and SPLIT_K_LATENCIES more
  global latencies in its chain (fence, atomic, partial reads).

- the asynchronous epilogue's store_bytes are L2 sectors (32 bytes, NVIDIA's granule): a
  quad's 2-element stores of one row fill a whole sector for f32 and half of one for a 2-byte
  output, unless it writes quads (families/gemm/spec.py quad_stores: 4 columns a lane, whole
  sectors, half as many stores).

Where the compiler may do better than the IR (LLVM's load/store vectorizer merging the fma
path's adjacent B loads), the count is the IR's: an upper bound, stated, never tuned.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from rocke_aot import mma
from rocke_aot.dtypes import DTYPE_BYTES
from rocke_aot.launch import ceil_div
from rocke_aot.targets import Target

BANK_BYTES = 4



@dataclass(frozen=True)
class KernelCounts:
    threads: int
    wave_size: int
    steps: int  # reduction steps per block (LDS refills)
    instr: str | None  # matrix instruction key (rocke_aot/mma.py), None on the fma path
    mma: float  # matrix instructions per warp per step
    lds_reads: float  # LDS read instructions per warp per step
    lds_read_wavefronts: float  # LDS cycles those reads cost per warp per step (conflicts counted)
    fma: float  # vector fused multiply-adds per thread per step (fma path)
    cvt: float  # conversions to f32 per thread per step (fma path)
    global_loads: float  # global load instructions per thread per step
    lds_writes: float  # LDS store instructions per thread per step
    lds_write_wavefronts: float  # LDS cycles of those stores per warp per step
    global_wavefronts: float  # 128-byte lines the staging loads of a warp touch per step (module doc)
    serial_loads: float  # global latencies per step in a thread's chain (below; a fraction when pipelined)
    int_ops: float  # integer / address / select instructions per thread per step of the staging
    staged_bytes: int  # bytes one step copies from global memory into LDS (the block)
    barriers: int  # barriers per step
    double_buffer: bool
    store_bytes: int  # bytes the block writes at the end
    stores: int  # store instructions per thread at the end
    unique_bytes: int  # bytes of every tensor of the problem, read or written once
    macs: int  # multiply-accumulates per block per step (padding included)
    # Matrix instructions a warp issues per step, where one issued instruction does several of
    # the ``mma`` units (sm_90 wgmma: one m64nNk16 is N / 8 units of a warp's 16x8x16 quarter,
    # variants/triton_counts.py). None: one instruction per unit, as every native lowering issues.
    matrix_issued: float | None = None
    # Split-K (gemm split_k, families/gemm/lower_async.py reduce_split): work-groups per output tile
    # (``steps`` is then one slice's K-tiles), and what a block's epilogue adds to the chain:
    # global latencies in it (1: the stores' own; split-K: + the fence before the atomic, the
    # atomic's round trip and the partial reads after the acquire) and instructions a warp
    # issues in it beyond the plain epilogue's (the reduction's stores, loads, adds, fences).
    splits: int = 1
    epilogue_latencies: float = 1.0
    epilogue_instructions: float = 0.0
    # How much longer a warp's dependency chain through its compute loop is than its instruction
    # count: 1.0 from the counts (one instruction a clock); ptxas's, read off the SASS, where the
    # hardware model takes the artifact's schedule (variants/hw_model.py with_schedule)
    chain_ratio: float = 1.0
    # Bytes one block moves alone once the rest of its tile's blocks are done, so that no other
    # work of the kernel overlaps them in the last round (split-K: the last arriver reads all
    # split_k partials and writes C; store_bytes already holds a 1 / split_k share of them, so
    # this is the other (split_k - 1) / split_k: variants/hw_model.py adds it once, after the
    # rounds, at one SM's L2 rate)
    tail_bytes: int = 0
    # The step's matrix and vector work are one chain (variants/hw_model.py step_terms): the vector
    # work consumes the matrix results and produces the next matrix operands (attention: S = Q K^T,
    # the softmax of S, P V), and the step's barriers hold a block's warps at one phase, so a block
    # runs its matrix time, then its vector time; only other resident blocks fill the idle unit.
    # False: they overlap within a block (a gemm's matrix work has no vector work between steps).
    phased: bool = False

    @property
    def warps(self) -> int:
        return -(-self.threads // self.wave_size)

    @property
    def mma_issued(self) -> float:
        """Matrix instructions a warp issues per step (the issue and latency terms' count)."""
        return self.mma if self.matrix_issued is None else self.matrix_issued

    @property
    def instructions(self) -> float:
        """Every counted instruction a warp issues per step (the issue term and a block's chain)."""
        return (self.mma_issued + self.lds_reads + self.fma + self.cvt + self.global_loads + self.lds_writes
                + self.barriers + self.int_ops)


def lds_cycles(lane_bytes: Iterable[tuple[int, int]], banks: int = 32) -> int:
    """LDS cycles one access of a warp costs: lanes give (first byte, byte count); the most
    distinct 4-byte words any one bank must serve (the CUDA guide's rule; a word read by many
    lanes is a broadcast). 32 banks of 4 bytes serve 128 bytes a cycle, so a conflict-free
    access of more than 128 bytes still takes bytes / 128 cycles. Lanes back to back (each
    starting where the one before ended, a staging copy's) cover one range of words, which
    falls on the banks in turn: its length over the banks, rounded up (the same count)."""
    spans = list(lane_bytes)
    if not spans:
        return 0
    if all(spans[i][0] == spans[i - 1][0] + spans[i - 1][1] for i in range(1, len(spans))):
        first, end = spans[0][0] // BANK_BYTES, -(-(spans[-1][0] + spans[-1][1]) // BANK_BYTES)
        return -(-(end - first) // banks)
    words: set[int] = set()
    for start, size in spans:
        first, end = start // BANK_BYTES, -(-(start + size) // BANK_BYTES)
        if end - first == 1:
            words.add(first)
        else:
            words.update(range(first, end))
    per_bank = [0] * banks  # the distinct words fall to banks word % banks: count per bank
    for w in words:
        per_bank[w % banks] += 1
    return max(per_bank)


def frag_cost(ins: Any, coord: Callable, per_lane: int, index: Callable, eb: int, run: int,
              banks: int) -> tuple[int, int]:
    """(LDS loads, LDS cycles) of one operand fragment of ``ins``: element j of lane l at
    ``index(*coord(l, j))``, ``run`` consecutive elements per load."""
    loads = cycles = 0
    for j in range(0, per_lane, run):
        loads += 1
        cycles += lds_cycles(((index(*coord(ln, j)) * eb, run * eb) for ln in range(ins.wave_size)), banks)
    return loads, cycles


LINE_BYTES = 128  # the L1 line and the unified L1/shared data path's width per cycle (module doc)


def global_lines(threads: int, wave: int, total: int, vec: int, eb: int, offset: Callable[[int], int],
                 run: int = 1) -> int:
    """128-byte lines the staging loads of one warp touch over a step: vector c (``vec``
    elements) of thread c % threads is at global element ``offset(c)``; the first warp of each
    round stands for every warp, as in stage_cost. ``run``: the caller's promise that the vectors
    of each aligned run of ``run`` (c // run equal) lie back to back in memory (offset(c + 1) =
    offset(c) + vec inside a run, as a channel chunk of NHWC does): a run is then counted as one
    span, not vector by vector (the same lines; tests/test_hw_model.py checks it against run 1)."""
    lines = 0
    for it in range(ceil_div(total, threads)):
        touched: set[int] = set()
        c = it * threads
        end = min(c + min(wave, threads), total)
        while c < end:
            n = min(run - c % run, end - c)  # the vectors of this run inside the warp
            b = offset(c) * eb
            first, last = b // LINE_BYTES, (b + n * vec * eb - 1) // LINE_BYTES
            if first == last:
                touched.add(first)
            else:
                touched.update(range(first, last + 1))
            c += n
        lines += len(touched)
    return lines


def line_stride(stride: int, span: int, eb: int) -> int:
    """A row stride (elements) that global_lines counts the same as ``stride`` for rows of at most
    ``span`` elements at ``stride`` apart: once rows are a whole line apart (stride >= span + a
    line), no two share a line and each row's lines depend only on where it starts in its line,
    stride mod a line; so every such stride maps to the least one with the same residue (the counts
    memoized per stride then serve every problem whose stride has that residue).
    tests/test_hw_model.py checks the counts through it against the stride's own."""
    line = max(1, LINE_BYTES // eb)
    floor = span + line
    if stride < floor:
        return stride
    r = stride % line
    return r + (floor - r + line - 1) // line * line


def straight_line_serial(threads: int, total: int) -> int:
    """Global-load latencies a thread waits for in a conv staging copy (_conv_ir.copy_to_lds):
    the whole rounds are straight-line code, so their loads can all be in flight before the
    first store needs one (one latency); the last, partial round sits behind a branch (one
    more)."""
    full, part = divmod(total, threads)
    return (1 if full else 0) + (1 if part else 0)


def stage_cost(threads: int, wave: int, total: int, vec: int, eb: int, at: Callable[[int], int],
               banks: int) -> tuple[int, float]:
    """(stores per thread, LDS cycles per warp) of staging ``total`` vectors of ``vec``
    elements, vector c by thread c % threads into LDS element ``at(c)`` (the first warp of
    each round stands for every warp)."""
    rounds = ceil_div(total, threads)
    cycles = 0.0
    for it in range(rounds):
        lanes = [it * threads + t for t in range(min(wave, threads)) if it * threads + t < total]
        cycles += lds_cycles(((at(c) * eb, vec * eb) for c in lanes), banks)
    return rounds, cycles


def wgmma_key(in_dtype: str) -> str:
    """The facts' key of a warp's 16x8x16 quarter of a wgmma (variants/hw_facts/sm_90.json)."""
    return f"wgmma_f32_m64n8k16_{in_dtype}"


def pipelined_latencies(steps: int, stages: int) -> float:
    """Global latencies per step in the chain of an S-stage pipeline over ``steps`` K-tiles
    (module doc): the fill's first latency is exposed whatever the depth."""
    return ceil_div(max(steps, 1), stages - 1) / max(steps, 1)


def a_run(ins: Any, row_stride: int, coord: Callable | None = None, per_lane: int | None = None) -> int:
    """Consecutive A fragment elements one LDS load fetches: the rule of the gemm lowerer
    (families/gemm/lower_common.py a_fragment_run, which tests/test_hw_model.py checks this against): the
    widest w whose elements j..j+w-1 are, for every lane, one row at K, K+1, .., K+w-1 with K a
    multiple of w, w dividing the row stride and the instruction's K. ``coord`` / ``per_lane``:
    another operand's (row, contiguous index) map (B of a transposed tile: _b_cn)."""
    coord = coord or ins.a_coord
    per = per_lane or ins.a_per_lane
    w = per
    while w > 1:
        ok = per % w == 0 and row_stride % w == 0 and ins.k % w == 0
        for j in range(0, per, w) if ok else ():
            for ln in range(ins.wave_size):
                r0, c0 = coord(ln, j)
                ok = ok and c0 % w == 0 and all(coord(ln, j + e) == (r0, c0 + e) for e in range(1, w))
        if ok:
            return w
        w //= 2
    return 1


MAX_MERGED_BYTES = 16  # the widest shared-memory load (ld.shared.v4.b32, ds_read_b128)


def merged_run(coord: Callable, per_lane: int, wave: int, index: Callable, eb: int) -> int:
    """Fragment elements one LDS load fetches where the lowerer loads them one by one (the conv
    engine, aot/families/_conv_ir.py TileGemm.step): the compiler merges adjacent scalar loads
    of one lane into one wider load when they are consecutive in LDS and the first is aligned to
    the wider width (LLVM's load/store vectorizer, ptxas after it: the sm_90 SASS of the conv
    engine reads an mma.sync A fragment with 4 LDS.32 and a B fragment with 2, not 8 and 4
    LDS.U16; tests/test_hw_model.py). The widest power-of-two w (at most 16 bytes) such that,
    for every lane, elements j .. j+w-1 (j a multiple of w) sit at consecutive indices starting
    at a multiple of w; 1 where any lane's are not (B of the conv_dgrad_patch layout, rows of K)."""
    w = per_lane
    while w > 1:
        ok = per_lane % w == 0 and w * eb <= MAX_MERGED_BYTES
        for j in range(0, per_lane, w) if ok else ():
            for ln in range(wave):
                first = index(*coord(ln, j))
                ok = ok and first % w == 0 and all(index(*coord(ln, j + e)) == first + e for e in range(1, w))
                if not ok:
                    break
            if not ok:
                break
        if ok:
            return w
        w //= 2
    return 1


@functools.lru_cache(maxsize=8192)
def engine_static(spec: Any, target: Target, rows: int, cols: int, kdim: int, taps: int, banks: int,
                   a_index: Callable, b_index: Callable) -> tuple:
    """The conv engine (aot/families/_conv_ir.py TileGemm.step) over ``taps`` filter taps of a
    ``kdim``-deep chunk: (geometry, instr, mma, lds reads, their cycles, fma, cvt) per warp or
    thread per step."""
    g = spec.geometry(target)
    eb = DTYPE_BYTES[spec.dtype]
    if g.instr is None:
        per = g.per_thread
        lanes = range(min(g.wave_size, g.threads))
        a_cyc = lds_cycles(((a_index(t % rows, 0) * eb, eb) for t in lanes), banks)
        b_cyc = sum(lds_cycles(((b_index(0, (t // rows) * per + j) * eb, eb) for t in lanes), banks)
                    for j in range(per))
        return (g, None, 0.0, (1 + per) * kdim * taps, (a_cyc + b_cyc) * kdim * taps,
                per * kdim * taps, (1 + per) * kdim * taps, per)
    ins = mma.INSTRS[g.instr]
    waves = g.threads // g.wave_size
    ntiles = (rows // ins.m) * (cols // ins.n)
    per_wave = ceil_div(ntiles, waves)
    a_loads, a_cyc = frag_cost(ins, ins.a_coord, ins.a_per_lane, a_index, eb,
                               merged_run(ins.a_coord, ins.a_per_lane, ins.wave_size, a_index, eb), banks)
    b_loads, b_cyc = frag_cost(ins, ins.b_coord, ins.b_per_lane, b_index, eb,
                               merged_run(ins.b_coord, ins.b_per_lane, ins.wave_size, b_index, eb), banks)
    a_frags, b_frags = distinct_fragments(ntiles, cols // ins.n, waves, per_wave)
    ksub = kdim // ins.k
    return (g, ins, per_wave * ksub * taps, ksub * taps * (a_frags * a_loads + b_frags * b_loads),
            ksub * taps * (a_frags * a_cyc + b_frags * b_cyc), 0, 0, per_wave * ins.acc_per_lane)


def distinct_fragments(ntiles: int, ntn: int, waves: int, per_wave: int) -> tuple[float, float]:
    """(A, B) fragments a wave loads per k-step, the mean over the block's waves: wave w computes
    tiles w, w + waves, ... (mod ntiles in the spare round: _conv_ir.py mma_tile), tile t at row
    tile t // ntn and column tile t % ntn; the lowerer loads both fragments for every tile, and
    the compiler loads a fragment once where two tiles of a wave share it (the same LDS
    addresses, no store between: LLVM's GVN; the sm_90 SASS of a conv_dgrad_patch kernel whose
    wave computes 10 tiles of one row tile reads A with 4 LDS.32, once)."""
    a = b = 0
    for w in range(waves):
        tiles = {(w + i * waves) % ntiles for i in range(per_wave)}
        a += len({t // ntn for t in tiles})
        b += len({t % ntn for t in tiles})
    return a / waves, b / waves
