"""triton_matmul: the in-repo Triton matmul kernel (rocke_aot/kernels/triton_matmul.py, after Triton's
matmul tutorial) declared as a family, exactly as a user declares their own @triton.jit kernel from
their package (docs/triton-plugins.md).

    KERNEL = TritonKernel(module, function, params (each with the formula of its value or buffer
             size over GemmProblem's fields), the launch grid, configs per target (the kernel's
             autotune list per backend: rocke_aot/kernels/configs.py), M / N / K each divisible
             by 16 or not, lanes, accepts / work / counts / arch_rule, reference "gemm")
    FAMILY = triton_family(KERNEL)     what the ``rocke_aot.families`` entry point
                                       ``triton_matmul`` names (rocke-aot's pyproject.toml)

Operation "matmul" on GemmProblem: a select ranks it beside gemm, and it computes what gemm computes
(its reference is gemm's, rocke_aot/families/gemm/reference.py). Its counts for the hardware model
are variants/triton_counts.py matmul_counts (the Triton counts toolkit triton_attention reads too).

The @triton.jit source and its configs stay in rocke_aot/kernels/: the compile request a Triton
kernel lowers to names its module and its files (aot/families/triton.py request), so the request's
sha256, the code-object key, would move with them; kept there, every stored Triton code object keeps
its key. Like every Triton family, it has no lowerer entry point: its lowerer is the Triton kind's.
"""

from __future__ import annotations

from rocke_aot.kernels.configs import matmul_configs
from rocke_aot.variants.perf import TileWork
from rocke_aot.variants.problems import GemmProblem
from rocke_aot.variants.table import Refuse, Serve
from rocke_aot.variants.triton import TritonKernel, TritonParam, triton_family
from rocke_aot.variants.triton_counts import matmul_counts

# Lanes: a Triton family is served on the lane of the LLVM its Triton is built on (Triton 3.6:
# llvm22, 3.9: llvm24); which targets a lane builds is what its Triton compiled in its probes.
LANES: dict[str, Serve | Refuse] = {
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


KERNEL = TritonKernel(
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

FAMILY = triton_family(KERNEL)

__all__ = ["FAMILY", "KERNEL", "LANES"]
