"""triton_softmax: the in-repo Triton row-wise softmax (rocke_aot/kernels/triton_softmax.py, after
Triton's fused-softmax tutorial) declared as a family, exactly as a user declares their own
@triton.jit kernel from their package (docs/triton-plugins.md).

    SoftmaxProblem(rows, cols, dtype)  what a caller asks to run
    KERNEL = TritonKernel(module, function, params, the grid (one program per row), configs
             (BLOCK = each power of two of kernels/configs.py SOFTMAX_BLOCKS, the tutorial's warps),
             cols divisible by 16 or not, lanes, accepts / work, its REFERENCE)
    FAMILY = triton_family(KERNEL)     what the ``rocke_aot.families`` entry point
                                       ``triton_softmax`` names (rocke-aot's pyproject.toml)

What it computes is its own Reference (reference.py beside this file: exp(x - max) / sum in
float64 and the error bound of the kernel's f32 arithmetic), as a plugin declares its own.

The @triton.jit source and its configs stay in rocke_aot/kernels/: the compile request names its
module and files (aot/families/triton.py request), so moving them would move the code-object key of
every stored Triton kernel. Its lowerer is the Triton kind's (no lowerer entry point).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocke_aot.errors import SpecError
from rocke_aot.families.triton_softmax.reference import REFERENCE
from rocke_aot.kernels.configs import SOFTMAX_BLOCKS, softmax_warps
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.table import Refuse, Serve
from rocke_aot.variants.triton import TritonKernel, TritonParam, triton_family

# Lanes: a Triton family is served on the lane of the LLVM its Triton is built on (Triton 3.6:
# llvm22, 3.9: llvm24); which targets a lane builds is what its Triton compiled in its probes.
LANES: dict[str, Serve | Refuse] = {
    "llvm20": Refuse("no Triton on LLVM 20 is qualified here (Triton 3.6 is built on LLVM 22, 3.9 on LLVM 24)"),
    "llvm22": Serve("Triton built on LLVM 22 (Triton 3.6)"),
    "llvm23": Refuse("Triton is not built on AMD's LLVM 23"),
    "llvm24": Serve("Triton built on LLVM 24 (Triton 3.9)"),
}


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


KERNEL = TritonKernel(
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
    lanes=LANES, reference=REFERENCE, operation="softmax", accepts=_softmax_accepts, work=_softmax_work,
    description="row-wise softmax (Triton, after its fused-softmax tutorial): one program per row",
)

FAMILY = triton_family(KERNEL)

__all__ = ["FAMILY", "KERNEL", "LANES", "SoftmaxProblem"]
