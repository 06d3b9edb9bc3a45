"""torch.library ops (namespace ``rocke_aot``, defined with Library: _define) that run prebuilt kernels, with fakes.

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
from typing import Any, Optional

import torch
from torch import Tensor

from rocke_aot.torch import dispatch as D
from rocke_aot.torch.runtime import STATE, current, dtype_name, stream_getter, stream_of

_WEIGHTS: dict[str, dict[int, tuple[weakref.ref, int, Tensor]]] = {"t": {}, "cl": {}}
MAX_WEIGHTS = 1024  # per layout; past it the copy made first goes (made again if used again)


def _prepared(w: Tensor, how: str) -> Tensor:
    """``w`` in the kernel's layout (how: "t" = transposed contiguous, "cl" = channels_last), made
    once per weight and version: found by its data pointer, used only when it is the same tensor
    object (a weak reference) at the same version (an in-place update makes it again)."""
    cache = _WEIGHTS[how]
    got = cache.get(w.data_ptr())
    if got is not None and got[0]() is w and got[1] == w._version:
        return got[2]
    out = w.t().contiguous() if how == "t" else w.contiguous(memory_format=torch.channels_last)
    ptr = w.data_ptr()
    cache.pop(ptr, None)  # re-inserted last
    cache[ptr] = (weakref.ref(w), w._version, out)
    while len(cache) > MAX_WEIGHTS:
        del cache[next(iter(cache))]
    return out


def _lookup(family: str, key: tuple, make_problem, device) -> tuple[D.Dispatcher, Any, Any]:
    """(dispatcher, problem or Unserved, LaunchPath or Unserved) for a call whose shapes, dtypes
    and arguments are ``key``: a dict hit after the first call (Dispatcher.fast), so a call makes
    no problem value and runs no validation; the first call of a key asks Dispatcher.path."""
    d = current()
    hit = d.fast.get(key)
    if hit is None:
        problem = make_problem()
        path = problem if isinstance(problem, D.Unserved) else d.path(family, problem, device)
        hit = d.fast[key] = (problem, path)
    return d, hit[0], hit[1]


def _bind(path: D.LaunchPath, family: str, device) -> None:
    """Once per path: its workspace allocated zero-filled (the contract's rule) and written into
    its buffers for good, the operands bound in the family's order (LaunchPath.bind)."""
    fixed = {}
    for name, nbytes in path.workspace.items():
        ws = path.buffers.get(name)
        if ws is None:
            ws = path.buffers[name] = torch.zeros(nbytes, dtype=torch.uint8, device=device)
        fixed[name] = ws.data_ptr()
    path.bind(D.OPERANDS[family], fixed)


def _launch(family: str, path: D.LaunchPath, device, ptrs: tuple[int, ...]) -> None:
    """``ptrs``: the family's OPERANDS in order; counted on the path (Dispatcher.served)."""
    if path.order is None:
        _bind(path, family, device)
    path.run(ptrs, stream_of(device))


def _miss(d: D.Dispatcher, op: str, family: str, problem, path, device) -> None:
    """The policy (Dispatcher.miss): strict raises, report counts."""
    d.miss(op, family, None if isinstance(problem, D.Unserved) else problem, path, device)


_LIB = torch.library.Library("rocke_aot", "DEF")


class _NoFormula(torch.autograd.Function):
    """An op's result when autograd would record it: the op's value, a backward that raises."""

    @staticmethod
    def forward(ctx, name, run, *args):
        ctx.name = name
        return run(*args)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(f"rocke_aot::{ctx.name} has no autograd formula (the prebuilt kernels serve inference): "
                           f"run the backward through torch's own op")


def _define(schema: str, impl) -> Any:
    """The op in torch's dispatcher: ``impl`` as its CPU and CUDA kernel (CUDA also on ROCm
    builds), and an Autograd kernel that goes straight below autograd (no per-call Python
    bookkeeping: torch.library.custom_op's wrappers cost ~20 us a call,
    bench/torch_host_overhead.py) or, when an input wants a gradient, gives the result a
    backward that raises (_NoFormula: an error, never a wrong gradient). The fake (Meta) kernel
    is registered beside each op."""
    name = schema[: schema.index("(")]
    _LIB.define(schema)
    for key in ("CPU", "CUDA"):
        _LIB.impl(name, impl, key)
    op = getattr(torch.ops.rocke_aot, name).default
    after = torch._C._after_autograd_keyset
    below = torch._C._AutoDispatchBelowAutograd

    def autograd(keyset, *args, **kwargs):
        ks = keyset & after
        if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args):
            return _NoFormula.apply(name, lambda *a: op.redispatch(ks, *a, **kwargs), *args)
        with below():
            return op.redispatch(ks, *args, **kwargs)

    _LIB.impl(name, autograd, "Autograd", with_keyset=True)
    return op


class _Linear:
    """A linear call's shape-table entry (Dispatcher.fast, keyed by x.shape, weight.shape, the
    dtypes and the device): the bound launch, the output's size and the stream getter; or, for
    a shape nothing serves, the problem (or None) and why (Unserved)."""

    __slots__ = ("launch", "size", "stream", "problem", "unserved")

    def __init__(self, launch, size, stream, problem, unserved):
        self.launch, self.size, self.stream, self.problem, self.unserved = launch, size, stream, problem, unserved


def _linear_entry(d: D.Dispatcher, key: tuple, x: Tensor, weight: Tensor, dev) -> _Linear:
    if weight.dtype != x.dtype:
        problem: Any = D.Unserved(f"weight dtype {weight.dtype} != input dtype {x.dtype}")
    else:
        problem = D.linear_problem(tuple(x.shape), tuple(weight.shape), dtype_name(x.dtype))
    path = problem if isinstance(problem, D.Unserved) else d.path("gemm", problem, dev)
    if isinstance(path, D.LaunchPath):
        _bind(path, "gemm", dev)
        entry = _Linear(path.run, (*x.shape[:-1], weight.shape[0]), stream_getter(dev), problem, None)
    else:
        entry = _Linear(None, None, None, None if isinstance(problem, D.Unserved) else problem, path)
    d.fast[key] = entry
    return entry


def linear_impl(x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:  # noqa: UP045 (torch.library reads the annotation)
    d = STATE["dispatcher"] or current()
    dev = x.device
    key = (x.shape, weight.shape, x.dtype, weight.dtype, dev)  # its first item a Size: no other op's key
    hit = d.fast.get(key)
    if hit is None:
        hit = _linear_entry(d, key, x, weight, dev)
    launch = hit.launch
    if launch is None:
        d.miss("linear", "gemm", hit.problem, hit.unserved, dev)
        return torch.nn.functional.linear(x, weight, bias)
    out = x.new_empty(hit.size)  # x's dtype and device
    a = x if x.is_contiguous() else x.contiguous()  # A: (prod(lead), in) row-major
    launch((a.data_ptr(), _prepared(weight, "t").data_ptr(), out.data_ptr()), hit.stream())
    return out.add_(bias) if bias is not None else out


linear = _define("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", linear_impl)


@torch.library.register_fake("rocke_aot::linear")
def _(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _conv_out(x: Tensor, weight: Tensor, stride, padding, dilation) -> tuple[int, int, int, int]:
    from rocke_aot.variants.problems import out_extent

    oh = out_extent(x.shape[2], weight.shape[2], stride[0], padding[0], dilation[0])
    ow = out_extent(x.shape[3], weight.shape[3], stride[1], padding[1], dilation[1])
    return (x.shape[0], weight.shape[0], oh, ow)


def conv2d_impl(x: Tensor, weight: Tensor, bias: Optional[Tensor], stride: list[int], padding: list[int],  # noqa: UP045
                dilation: list[int]) -> Tensor:
    dev = x.device

    def problem():
        if weight.dtype != x.dtype:
            return D.Unserved(f"weight dtype {weight.dtype} != input dtype {x.dtype}")
        return D.conv2d_problem(tuple(x.shape), tuple(weight.shape), stride, padding, dilation, 1, dtype_name(x.dtype))

    key = ("conv2d", x.shape, weight.shape, x.dtype, weight.dtype, dev, tuple(stride), tuple(padding), tuple(dilation))
    d, prob, path = _lookup("conv_direct_fwd", key, problem, dev)
    out = torch.empty(_conv_out(x, weight, stride, padding, dilation), dtype=x.dtype, device=dev,
                      memory_format=torch.channels_last)
    if not isinstance(path, D.LaunchPath):
        _miss(d, "conv2d", "conv_direct_fwd", prob, path, dev)
        return out.copy_(torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation))
    xc = x.contiguous(memory_format=torch.channels_last)  # NHWC (no copy when it already is)
    _launch("conv_direct_fwd", path, dev, (xc.data_ptr(), _prepared(weight, "cl").data_ptr(), out.data_ptr()))
    return out.add_(bias.view(1, -1, 1, 1)) if bias is not None else out


conv2d = _define("conv2d(Tensor x, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, "
                 "SymInt[] dilation) -> Tensor", conv2d_impl)


@torch.library.register_fake("rocke_aot::conv2d")
def _(x, weight, bias, stride, padding, dilation):
    return torch.empty(_conv_out(x, weight, stride, padding, dilation), dtype=x.dtype, device=x.device,
                       memory_format=torch.channels_last)


def conv_dgrad_patch_impl(grad_output: Tensor, weight: Tensor, input_size: list[int]) -> Tensor:
    dev = grad_output.device

    def problem():
        return D.dgrad_patch_problem(tuple(input_size), tuple(weight.shape), tuple(grad_output.shape),
                                     dtype_name(grad_output.dtype))

    key = ("conv_dgrad_patch", grad_output.shape, weight.shape, grad_output.dtype, weight.dtype, dev,
           tuple(input_size))
    d, prob, path = _lookup("conv_dgrad_patch", key, problem, dev)
    out = torch.empty(tuple(input_size), dtype=grad_output.dtype, device=dev, memory_format=torch.channels_last)
    if not isinstance(path, D.LaunchPath):
        _miss(d, "conv_dgrad_patch", "conv_dgrad_patch", prob, path, dev)
        from torch.nn.grad import conv2d_input

        return out.copy_(conv2d_input(tuple(input_size), weight, grad_output, stride=weight.shape[-1]))
    dy = grad_output.contiguous(memory_format=torch.channels_last)
    _launch("conv_dgrad_patch", path, dev, (dy.data_ptr(), _prepared(weight, "cl").data_ptr(), out.data_ptr()))
    return out


conv_dgrad_patch = _define("conv_dgrad_patch(Tensor grad_output, Tensor weight, SymInt[] input_size) -> Tensor",
                           conv_dgrad_patch_impl)


@torch.library.register_fake("rocke_aot::conv_dgrad_patch")
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
    return all(type(t) is Tensor and not t.is_meta for t in tensors)


def _bshd(q: Tensor) -> Tensor:
    b, h, s, d = q.shape
    return torch.empty_strided((b, h, s, d), (s * h * d, d, h * d, 1), dtype=q.dtype, device=q.device)


def sdpa_impl(q: Tensor, k: Tensor, v: Tensor, is_causal: bool, scale: Optional[float]) -> Tensor:  # noqa: UP045
    dev = q.device

    def problem():
        return D.sdpa_problem(tuple(q.shape), tuple(k.shape), tuple(v.shape), has_mask=False, dropout_p=0.0,
                              is_causal=is_causal, scale=scale, dtype=dtype_name(q.dtype), families=D.families)

    key = ("sdpa", q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, dev, is_causal, scale)
    d, prob, path = _lookup("attention", key, problem, dev)
    out = _bshd(q)
    if not isinstance(path, D.LaunchPath):
        _miss(d, "sdpa", "attention", prob, path, dev)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale,
                                                             enable_gqa=k.shape[1] != q.shape[1])
        return out.copy_(y)
    qs, ks, vs = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # BSHD
    _launch("attention", path, dev, (qs.data_ptr(), ks.data_ptr(), vs.data_ptr(), out.data_ptr()))
    return out


sdpa = _define("sdpa(Tensor q, Tensor k, Tensor v, bool is_causal, float? scale) -> Tensor", sdpa_impl)


@torch.library.register_fake("rocke_aot::sdpa")
def _(q, k, v, is_causal, scale):
    return _bshd(q)
