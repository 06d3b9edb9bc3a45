"""The in-repo Triton families (the Triton family kind: variants/triton.py), registered by name.

    triton_matmul    rocke_aot/kernels/triton_matmul.py:matmul_kernel   C = A x B (GemmProblem)
                     configs: the kernel's autotune list per backend (rocke_aot/kernels/configs.py)
                     specializations: M, N, K each divisible by 16 or not; unit strides (== 1)
    triton_softmax   rocke_aot/kernels/triton_softmax.py:softmax_kernel  row-wise softmax
                     (SoftmaxProblem: rows, cols); BLOCK = the smallest power of two >= cols

Lanes: a Triton family is served on the lane of the LLVM its Triton is built on (Triton 3.6:
llvm22, 3.9: llvm24); which targets a lane builds is what its Triton compiled in its probes.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke_aot.errors import SpecError
from rocke_aot.kernels.configs import SOFTMAX_BLOCKS, matmul_configs, softmax_warps
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.problems import GemmProblem
from rocke_aot.variants.table import Refuse, Serve
from rocke_aot.variants.triton import TritonKernel, TritonParam, register_triton
from rocke_aot.variants.triton_counts import matmul_counts

LANES = {
    "llvm20": Refuse("no Triton on LLVM 20 is qualified here (Triton 3.6 is built on LLVM 22, 3.9 on LLVM 24)"),
    "llvm22": Serve("Triton built on LLVM 22 (Triton 3.6)"),
    "llvm23": Refuse("Triton is not built on AMD's LLVM 23"),
    "llvm24": Serve("Triton built on LLVM 24 (Triton 3.9)"),
}


def _backend(target) -> str:
    return "hip" if target.is_amdgpu else "cuda"


def _matmul_accepts(spec, p: GemmProblem) -> str | None:
    if p.out_dtype is not None and p.out_dtype != spec.dtype:
        return f"triton_matmul writes {spec.dtype}, the problem asks for {p.out_dtype}"
    return None


def _matmul_work(spec, p: GemmProblem, target) -> TileWork:
    bm, bn, bk = spec.BLOCK_M, spec.BLOCK_N, spec.BLOCK_K
    return TileWork(threads=spec.geometry(target).threads, steps=-(-p.k // bk), macs_per_step=bm * bn * bk,
                    load_bytes_per_step=(bm + bn) * bk * 2, lds_wavefronts_per_step=0.0, store_bytes=bm * bn * 2,
                    matrix=True, double_buffer=spec.num_stages > 1, lds_bytes=(bm + bn) * bk * 2 * spec.num_stages)


def _matmul_arch(target, lane) -> str | None:
    if target.processor == "gfx1250" and lane.name == "llvm22":
        return ("Triton 3.6 (LLVM 22) lowers tl.dot to FMA on gfx1250: no v_wmma, 512-1024 VGPRs "
                "(bench/triton_amd_isa.py on its build, docs/triton.md); Triton 3.9 (llvm24) uses WMMA")
    return None


MATMUL = TritonKernel(
    family="triton_matmul", module="rocke_aot.kernels.triton_matmul", function="matmul_kernel",
    sources=("rocke_aot.kernels.configs",),
    params=(
        TritonParam("a_ptr", "pointer", "$dtype", "m * k", "read_only", label="A"),
        TritonParam("b_ptr", "pointer", "$dtype", "k * n", "read_only", label="B"),
        TritonParam("c_ptr", "pointer", "$dtype", "m * n", "write_only", label="C"),
        TritonParam("M", "int", expr="m"), TritonParam("N", "int", expr="n"), TritonParam("K", "int", expr="k"),
        TritonParam("stride_am", "int", expr="k"), TritonParam("stride_ak", "int", expr="1"),
        TritonParam("stride_bk", "int", expr="n"), TritonParam("stride_bn", "int", expr="1"),
        TritonParam("stride_cm", "int", expr="n"), TritonParam("stride_cn", "int", expr="1"),
        TritonParam("BLOCK_M", "constexpr"), TritonParam("BLOCK_N", "constexpr"),
        TritonParam("BLOCK_K", "constexpr"), TritonParam("GROUP_M", "constexpr"),
    ),
    problem_type=GemmProblem, problem=("m", "n", "k"),
    lets=(("tiles", "ceil_div(m, BLOCK_M) * ceil_div(n, BLOCK_N)"),), grid=("tiles", "1", "1"),
    configs=lambda target: matmul_configs(_backend(target)),
    baked=({"dtype": "f16"},),
    classes={"m": ("div16", "plain"), "n": ("div16", "plain"), "k": ("div16", "plain")},
    lanes=LANES, reference="gemm", operation="matmul", tiled=(("m", "BLOCK_M"), ("n", "BLOCK_N")),
    accepts=_matmul_accepts, work=_matmul_work, counts=matmul_counts, arch_rule=_matmul_arch,
    description="C = A x B, row-major (Triton, after its matmul tutorial): autotune configs x M/N/K specializations",
)


@dataclass(frozen=True)
class SoftmaxProblem:
    rows: int
    cols: int
    dtype: str = "f16"

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if type(v) is not int or not 1 <= v <= 2**31 - 1:
                raise SpecError(f"SoftmaxProblem.{name} must be an int in 1..2**31-1, got {v!r}")
        if not isinstance(self.dtype, str):
            raise SpecError(f"SoftmaxProblem.dtype must be a dtype name, got {self.dtype!r}")


def _softmax_accepts(spec, p: SoftmaxProblem) -> str | None:
    block = 1 << max(0, (p.cols - 1).bit_length())
    if block != spec.BLOCK:
        return f"a row of {p.cols} takes BLOCK={block} (the smallest power of two >= cols); the spec has {spec.BLOCK}"
    return None


def _softmax_work(spec, p: SoftmaxProblem, target) -> TileWork:
    return TileWork(threads=spec.geometry(target).threads, steps=1, macs_per_step=spec.BLOCK,
                    load_bytes_per_step=spec.BLOCK * 2, lds_wavefronts_per_step=0.0, store_bytes=spec.BLOCK * 2,
                    matrix=False, double_buffer=False, lds_bytes=0)


SOFTMAX = TritonKernel(
    family="triton_softmax", module="rocke_aot.kernels.triton_softmax", function="softmax_kernel",
    sources=("rocke_aot.kernels.configs",),
    params=(
        TritonParam("out_ptr", "pointer", "$dtype", "rows * cols", "write_only", label="Y"),
        TritonParam("in_ptr", "pointer", "$dtype", "rows * cols", "read_only", label="X"),
        TritonParam("in_row_stride", "int", expr="cols"), TritonParam("out_row_stride", "int", expr="cols"),
        TritonParam("n_cols", "int", expr="cols"), TritonParam("BLOCK", "constexpr"),
    ),
    problem_type=SoftmaxProblem, problem=("rows", "cols"),
    lets=(("tiles", "rows"),), grid=("rows", "1", "1"),
    configs=lambda target: tuple(dict(BLOCK=b, num_warps=softmax_warps(b), num_stages=1) for b in SOFTMAX_BLOCKS),
    baked=({"dtype": "f16"},),
    classes={"cols": ("div16", "plain")},
    lanes=LANES, reference="softmax", operation="softmax", accepts=_softmax_accepts, work=_softmax_work,
    description="row-wise softmax (Triton, after its fused-softmax tutorial): one program per row",
)

TRITON_MATMUL_FAMILY = register_triton(MATMUL)
TRITON_SOFTMAX_FAMILY = register_triton(SOFTMAX)
