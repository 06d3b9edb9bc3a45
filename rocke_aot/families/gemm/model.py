"""The gemm family's model: can a spec run a problem, how well, and what one block does.

    GEMM = Model(accepts, efficiency, work, counts)      variants/models.py's Model, this family's
        accepts(spec, GemmProblem)   dtype and out_dtype baked in the spec, cp.async's 16-byte rows
                                     (stages: K and N multiples of 8), 32-bit offsets of A, B, C
                                     and the split-K workspace
        efficiency                   tile granularity of M and N times CU granularity
                                     (variants/models.py combine)
        work                         TileWork for the fitted time model (variants/perf.py)
        counts                       counts.py gemm_counts, for the hardware-fact model
"""

from __future__ import annotations

from typing import Any

from rocke_aot.arch import ArchInfo
from rocke_aot.dtypes import DTYPE_BYTES, MAX_TENSOR_BYTES
from rocke_aot.families.gemm.counts import gemm_counts
from rocke_aot.targets import Target
from rocke_aot.variants.models import (
    Efficiency,
    Model,
    combine,
    dim,
    first_reason,
    formulas,
    geometry_of,
    matrix_wavefronts,
    too_big,
)
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.problems import GemmProblem


def _gemm_accepts(spec: Any, p: GemmProblem) -> str | None:
    if p.dtype != spec.in_dtype:
        return f"dtype: problem is {p.dtype}, spec is baked for {spec.in_dtype}"
    if p.out_dtype is not None and p.out_dtype != spec.out_dtype:
        return f"out_dtype: problem wants {p.out_dtype}, spec writes {spec.out_dtype}"
    if spec.stages and (p.k % 8 or p.n % 8):
        # cp.async copies 16 aligned bytes: every row of A (K elements) and B (N) must start
        # on a 16-byte boundary (the kernel traps on such a problem rather than misread it)
        return (f"alignment: the cp.async pipeline needs K and N multiples of 8, problem has "
                f"K={p.k}, N={p.n}")
    return first_reason(too_big("A", p.m * p.k, p.dtype), too_big("B", p.k * p.n, p.dtype),
                  too_big("C", p.m * p.n, spec.out_dtype), _split_k_workspace(spec, p))


def _split_k_workspace(spec: Any, p: GemmProblem) -> str | None:
    """The split-K workspace is indexed with 32-bit offsets too, and no chunk of M rows makes it
    smaller than a chunk's C (split_k f32 words per output element): past the limit, refused."""
    words = getattr(spec, "workspace_words_per_tile", 0) * formulas(spec).tiles(p)
    size = words * 4
    if size > MAX_TENSOR_BYTES:
        return (f"workspace: split_k={spec.split_k} needs {size} bytes of partial tiles, over the "
                f"{MAX_TENSOR_BYTES}-byte limit of 32-bit offsets")
    return None


def _gemm_eff(spec: Any, p: GemmProblem, info: ArchInfo) -> Efficiency:
    tiles = formulas(spec).tiles(p)
    return combine((dim("M", p.m, spec.block_m), dim("N", p.n, spec.block_n)), tiles, info)



def _gemm_work(spec: Any, p: GemmProblem, target: Target) -> TileWork:
    # The fitted model (variants/perf.py) counts output tiles, so a split-K spec is the work of its
    # split_k = 1 twin here (all of K per tile); only the hardware-fact model knows split_k blocks
    # per tile (counts.py here, KernelCounts.splits).
    e = DTYPE_BYTES[spec.in_dtype]
    macs = spec.block_m * spec.block_n * spec.block_k
    return TileWork(threads=geometry_of(spec, target).threads, steps=-(-p.k // spec.block_k), macs_per_step=macs,
                    load_bytes_per_step=(spec.block_m + spec.block_n) * spec.block_k * e,
                    lds_wavefronts_per_step=matrix_wavefronts(spec, target, macs),
                    store_bytes=spec.block_m * spec.block_n * DTYPE_BYTES[spec.out_dtype],
                    matrix=spec.path != "fma", double_buffer=spec.double_buffer, lds_bytes=spec.lds_bytes())


GEMM = Model(_gemm_accepts, _gemm_eff, _gemm_work, gemm_counts)
