"""Row-wise softmax, written after Triton's fused-softmax tutorial: one program per row, fp32 math.

    softmax_kernel   the @triton.jit function the triton_softmax family builds (one variant per
                     BLOCK of rocke_aot/kernels/configs.py, num_warps by block size)
    softmax(x)       a torch tensor (rows x cols, rows contiguous) in, the softmax of each row out
"""

import triton
import triton.language as tl

from rocke_aot.kernels.configs import softmax_warps


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(in_ptr + row * in_row_stride + offs, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    y = e / tl.sum(e, axis=0)
    tl.store(out_ptr + row * out_row_stride + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x):
    import torch

    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    y = torch.empty_like(x)
    softmax_kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols, BLOCK=block, num_warps=softmax_warps(block),
                            num_stages=1)
    return y
