"""C = A x B, row-major, written after Triton's matmul tutorial: grouped tile order, fp32 accumulation.

    matmul_kernel        the @triton.jit function the triton_matmul family builds (one variant per
                         config of rocke_aot/kernels/configs.py and specialization of M, N, K)
    autotuned(backend)   the same function under @triton.autotune over that backend's configs,
                         key=["M", "N", "K"]: what a program on a GPU host launches
    matmul(a, b)         torch tensors in, C out (allocates C, launches the autotuned kernel)
"""

import triton
import triton.language as tl

from rocke_aot.kernels.configs import matmul_configs


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def autotuned(backend: str, **autotune_kwargs):
    """matmul_kernel under @triton.autotune over ``backend``'s configs (key M, N, K)."""
    configs = [triton.Config({k: v for k, v in c.items() if k.isupper()}, num_warps=c["num_warps"],
                             num_stages=c["num_stages"]) for c in matmul_configs(backend)]
    return triton.autotune(configs=configs, key=["M", "N", "K"], **autotune_kwargs)(matmul_kernel)


def matmul(a, b, kernel=None, out_dtype=None):
    """C = A x B with torch tensors (row-major, contiguous): the launch a GPU host program makes."""
    import torch

    M, K = a.shape
    K2, N = b.shape
    assert K == K2, "inner dimensions differ"
    c = torch.empty((M, N), device=a.device, dtype=out_dtype or a.dtype)
    if kernel is None:
        kernel = autotuned(triton.runtime.driver.active.get_current_target().backend)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    return c
