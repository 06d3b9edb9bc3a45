"""torch.library custom ops (namespace ``rocke_aot``) that run prebuilt kernels, with fakes.

    torch.ops.rocke_aot.linear(x, weight, bias)                  -> (*x.shape[:-1], out)
    torch.ops.rocke_aot.conv2d(x, weight, bias, stride, padding, dilation)
                                                                 -> (n, k, oh, ow), channels_last
    torch.ops.rocke_aot.conv_dgrad_patch(grad_output, weight, input_size)
                                                                 -> (n, c, h, w), channels_last
    torch.ops.rocke_aot.sdpa(q, k, v, is_causal, scale)          -> (B, H, Sq, D), strides of BSHD
    linear_impl / conv2d_impl / conv_dgrad_patch_impl / sdpa_impl  the same, called directly in eager
                                                                 mode (eager(): no dispatcher trip)

Each has a fake (meta) implementation with the real one's shape, dtype and strides, so
torch.compile and torch.export trace through them. The real one: the problem from the shapes
(dispatch.py), the launch path from the process's Dispatcher (select once per new shape, the
kernel from the host's verified local store), operands in the kernel's layout (gemm B = the
weight transposed, made once per weight version; conv NHWC / KRSC = channels_last; attention BSHD),
then one launch (or one per chunk) on torch's current stream. A call the cache does not serve
follows the policy: strict raises NotServedError, report runs torch's own op and counts it.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Optional

import torch
from torch import Tensor

from rocke_aot.torch import dispatch as D
from rocke_aot.torch.runtime import current, dtype_name, stream_of

_WEIGHTS: OrderedDict[tuple[int, str], tuple[weakref.ref, int, Tensor]] = OrderedDict()
MAX_WEIGHTS = 1024


def _prepared(w: Tensor, how: str) -> Tensor:
    """``w`` in the kernel's layout (how: "t" = transposed contiguous, "cl" = channels_last), made
    once per weight and version (an in-place update of the weight makes it again)."""
    key = (w.data_ptr(), how)
    got = _WEIGHTS.get(key)
    if got is not None and got[0]() is w and got[1] == w._version:
        _WEIGHTS.move_to_end(key)
        return got[2]
    out = w.t().contiguous() if how == "t" else w.contiguous(memory_format=torch.channels_last)
    _WEIGHTS[key] = (weakref.ref(w), w._version, out)
    while len(_WEIGHTS) > MAX_WEIGHTS:
        _WEIGHTS.popitem(last=False)
    return out


def _run(op: str, family: str, problem, device, pointers: dict[str, int]) -> bool:
    """Launch ``problem``'s kernel; False when nothing serves it (the policy was applied)."""
    d = current()
    if isinstance(problem, D.Unserved):
        d.miss(op, family, None, problem, device)
        return False
    path = d.path(family, problem, device)
    if isinstance(path, D.Unserved):
        d.miss(op, family, problem, path, device)
        return False
    for name, nbytes in path.workspace.items():  # zero-filled once per path (the contract's rule)
        ws = path.buffers.get(name)
        if ws is None:
            ws = path.buffers[name] = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        pointers[name] = ws.data_ptr()
    path(pointers, stream_of(device))
    d.hit(op)
    return True


def linear_impl(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:  # noqa: UP045 (torch.library reads the annotation)
    problem = D.linear_problem(tuple(x.shape), tuple(weight.shape), dtype_name(x.dtype))
    if not isinstance(problem, D.Unserved) and weight.dtype != x.dtype:
        problem = D.Unserved(f"weight dtype {weight.dtype} != input dtype {x.dtype}")
    out = torch.empty((*x.shape[:-1], weight.shape[0]), dtype=x.dtype, device=x.device)
    ptrs: dict[str, int] = {}
    if not isinstance(problem, D.Unserved) and not isinstance(current().path("gemm", problem, x.device),
                                                               D.Unserved):
        a = x.reshape(-1, x.shape[-1]).contiguous()
        ptrs = {"A": a.data_ptr(), "B": _prepared(weight, "t").data_ptr(), "C": out.data_ptr()}
    if _run("linear", "gemm", problem, x.device, ptrs):
        return out.add_(bias) if bias is not None else out
    return torch.nn.functional.linear(x, weight, bias)


linear = torch.library.custom_op("rocke_aot::linear", linear_impl, mutates_args=())


@linear.register_fake
def _(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _conv_out(x: Tensor, weight: Tensor, stride, padding, dilation) -> tuple[int, int, int, int]:
    from rocke_aot.variants.problems import out_extent

    oh = out_extent(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0])
    ow = out_extent(x.shape[3], weight.shape[3], stride[1], padding[1], dilation[1])
    return (x.shape[0], weight.shape[0], oh, ow)


def conv2d_impl(x: Tensor, weight: Tensor, bias: Optional[Tensor], stride: list[int], padding: list[int],  # noqa: UP045
           dilation: list[int]) -> Tensor:
    problem = D.conv2d_problem(tuple(x.shape), tuple(weight.shape), stride, padding, dilation, 1,
                               dtype_name(x.dtype))
    out = torch.empty(_conv_out(x, weight, stride, padding, dilation), dtype=x.dtype, device=x.device,
                      memory_format=torch.channels_last)
    ptrs: dict[str, int] = {}
    if not isinstance(problem, D.Unserved) and not isinstance(current().path("conv_direct_fwd", problem, x.device),
                                                               D.Unserved):
        xc = x.contiguous(memory_format=torch.channels_last)
        ptrs = {"X": xc.data_ptr(), "Wt": _prepared(weight, "cl").data_ptr(), "Y": out.data_ptr()}
    if _run("conv2d", "conv_direct_fwd", problem, x.device, ptrs):
        return out.add_(bias.view(1, -1, 1, 1)) if bias is not None else out
    y = torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation)
    return out.copy_(y)


conv2d = torch.library.custom_op("rocke_aot::conv2d", conv2d_impl, mutates_args=())


@conv2d.register_fake
def _(x, weight, bias, stride, padding, dilation):
    return torch.empty(_conv_out(x, weight, stride, padding, dilation), dtype=x.dtype, device=x.device,
                       memory_format=torch.channels_last)


def conv_dgrad_patch_impl(grad_output: Tensor, weight: Tensor, input_size: list[int]) -> Tensor:
    problem = D.dgrad_patch_problem(tuple(input_size), tuple(weight.shape), tuple(grad_output.shape),
                                    dtype_name(grad_output.dtype))
    out = torch.empty(tuple(input_size), dtype=grad_output.dtype, device=grad_output.device,
                      memory_format=torch.channels_last)
    ptrs: dict[str, int] = {}
    dev = grad_output.device
    if not isinstance(problem, D.Unserved) and not isinstance(current().path("conv_dgrad_patch", problem, dev),
                                                               D.Unserved):
        dy = grad_output.contiguous(memory_format=torch.channels_last)
        ptrs = {"dY": dy.data_ptr(), "Wt": _prepared(weight, "cl").data_ptr(), "dX": out.data_ptr()}
    if _run("conv_dgrad_patch", "conv_dgrad_patch", problem, dev, ptrs):
        return out
    p = weight.shape[-1]
    from torch.nn.grad import conv2d_input

    return out.copy_(conv2d_input(tuple(input_size), weight, grad_output, stride=p))


conv_dgrad_patch = torch.library.custom_op("rocke_aot::conv_dgrad_patch", conv_dgrad_patch_impl, mutates_args=())


@conv_dgrad_patch.register_fake
def _(grad_output, weight, input_size):
    return torch.empty(tuple(input_size), dtype=grad_output.dtype, device=grad_output.device,
                       memory_format=torch.channels_last)


def eager(*tensors: Tensor) -> bool:
    """Plain tensors outside any tracing: the mode and the pass call the *_impl functions
    directly (no trip through torch's dispatcher: bench/torch_models.py overhead measures
    both); fake, functional or meta tensors and torch.compile / export go through the op."""
    if torch.compiler.is_compiling():
        return False
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return False  # the op: no autograd formula, so a backward through it is an error, not a wrong gradient
    return all(type(t) is Tensor and t.device.type != "meta" for t in tensors)


def _bshd(q: Tensor) -> Tensor:
    b, h, s, d = q.shape
    return torch.empty_strided((b, h, s, d), (s * h * d, d, h * d, 1), dtype=q.dtype, device=q.device)


def sdpa_impl(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: Optional[float]) -> Tensor:  # noqa: UP045
    problem = D.sdpa_problem(tuple(q.shape), tuple(k.shape), tuple(v.shape), has_mask=False, dropout_p=0.0,
                             is_causal=is_causal, scale=scale, dtype=dtype_name(q.dtype), families=D.families)
    out = _bshd(q)
    ptrs: dict[str, int] = {}
    if not isinstance(problem, D.Unserved) and not isinstance(current().path("attention", problem, q.device),
                                                               D.Unserved):
        qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # BSHD
        ptrs = {"Q": qs.data_ptr(), "K": ks.data_ptr(), "V": vs.data_ptr(), "O": out.data_ptr()}
    if _run("sdpa", "attention", problem, q.device, ptrs):
        return out
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
                                                         enable_gqa=k.shape[1] != q.shape[1])
    return out.copy_(y)


sdpa = torch.library.custom_op("rocke_aot::sdpa", sdpa_impl, mutates_args=())


@sdpa.register_fake
def _(q, k, v, is_causal, scale):
    return _bshd(q)
