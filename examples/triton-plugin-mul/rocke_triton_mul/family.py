"""triton_mul: rocke_triton_mul/kernels.py:mul_kernel declared as a family (docs/triton-plugins.md)."""

from __future__ import annotations

from dataclasses import dataclass

from rocke_aot.errors import SpecError
from rocke_aot.variants.families import Reference
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.table import Refuse, Serve
from rocke_aot.variants.triton import TritonKernel, TritonParam, triton_family


@dataclass(frozen=True)
class MulProblem:
    """What a caller has: n elements of one dtype."""

    n: int
    dtype: str = "f16"

    def __post_init__(self) -> None:
        if type(self.n) is not int or not 1 <= self.n <= 2**31 - 1:
            raise SpecError(f"MulProblem.n must be an int in 1..2**31-1, got {self.n!r}")


def _product(problem, inputs):  # numpy arrays in, numpy array out (float64, flat)
    return inputs["X"] * inputs["Y"]


def _work(spec, problem, target) -> TileWork:  # one program: BLOCK elements, 3 x 2 bytes each
    return TileWork(threads=spec.geometry(target).threads, steps=1, macs_per_step=spec.BLOCK,
                    load_bytes_per_step=4 * spec.BLOCK, lds_wavefronts_per_step=0.0, store_bytes=2 * spec.BLOCK,
                    matrix=False, double_buffer=False, lds_bytes=0)


KERNEL = TritonKernel(
    family="triton_mul",                                  # == the entry point's name
    module="rocke_triton_mul.kernels", function="mul_kernel",
    params=(                                              # every parameter of mul_kernel, in order
        TritonParam("x_ptr", "pointer", "$dtype", "n", "read_only", label="X"),   # elements it holds
        TritonParam("y_ptr", "pointer", "$dtype", "n", "read_only", label="Y"),
        TritonParam("out_ptr", "pointer", "$dtype", "n", "write_only", label="OUT"),
        TritonParam("n", "int", expr="n"),                # its value, over the problem's int fields
        TritonParam("BLOCK", "constexpr"),                # from each config
    ),
    problem_type=MulProblem, problem=("n",),
    lets=(("tiles", "ceil_div(n, BLOCK)"),), grid=("tiles", "1", "1"),
    configs=lambda target: ({"BLOCK": 1024, "num_warps": 4, "num_stages": 1},
                            {"BLOCK": 4096, "num_warps": 8, "num_stages": 1}),
    baked=({"dtype": "f16"},),
    classes={"n": ("div16", "plain")},                    # n % 16 == 0 or not: Triton specializes on it
    lanes={"llvm20": Refuse("no Triton on LLVM 20"), "llvm22": Serve("Triton 3.6 (LLVM 22)"),
           "llvm23": Refuse("no Triton on AMD's LLVM 23"), "llvm24": Serve("Triton 3.9 (LLVM 24)")},
    reference=Reference(output="OUT", compute=_product, flops=lambda p: p.n, terms=lambda p: 1),
    operation="elementwise_mul", work=_work,
    description="OUT = X * Y elementwise (a user's Triton kernel)",
)

FAMILY = triton_family(KERNEL)
