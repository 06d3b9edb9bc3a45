"""The in-repo Triton kernels' launch configurations: plain data, shared by the kernels' autotune
lists (rocke_aot/kernels/triton_*.py, on a GPU host) and the families' variant grids
(variants/triton_families.py, on the builder). One list per Triton backend ("cuda", "hip"), as
Triton's own matmul tutorial keeps one per backend.
"""

MATMUL_CONFIGS = {
    # (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages): the tutorial's CUDA list, cut to 6
    "cuda": (
        dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3),
        dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
        dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=4),
        dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, GROUP_M=8, num_warps=2, num_stages=5),
    ),
    # the tutorial's HIP list (num_stages=2: AMD's software pipelining)
    "hip": (
        dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=16, GROUP_M=1, num_warps=4, num_stages=2),
        dict(BLOCK_M=256, BLOCK_N=256, BLOCK_K=16, GROUP_M=4, num_warps=8, num_stages=2),
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=1, num_warps=8, num_stages=2),
        dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=4, num_stages=2),
        dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=2),
    ),
}

# Row-wise softmax: BLOCK covers a whole row (the smallest power of two >= the row length)
SOFTMAX_BLOCKS = (256, 512, 1024, 2048, 4096, 8192)


def softmax_warps(block: int) -> int:
    """Warps per row program, as Triton's softmax tutorial chooses them by row size."""
    return 16 if block >= 8192 else 8 if block >= 2048 else 4


def matmul_configs(backend: str) -> tuple:
    return MATMUL_CONFIGS["hip" if backend == "hip" else "cuda"]
