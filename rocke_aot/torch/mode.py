"""Routing a whole model: F.linear, F.conv2d and F.scaled_dot_product_attention -> rocke_aot ops.

    with rocke_aot.torch.prebuilt(policy="report"):   # a TorchFunctionMode
        y = model(x)
    model = rocke_aot.torch.route(model, policy="strict")   # the same mode around model.forward
    model = rocke_aot.torch.swap(model)    # the module pass: nn.Linear / nn.Conv2d call the ops

Every call of the three goes to its op (ops.py) when its arguments are expressible there; the op
then runs the prebuilt kernel for its shape or applies the policy (strict: NotServedError naming
the problem and the `rocke-aot build` command that serves it; report: torch's own op, the
fallback counted with its reason). Arguments no op takes (conv groups, padding="same", an
attention mask, dropout) follow the same policy here, counted under the op's name. Never silent:
Dispatcher.summary() / render() (and a summary on stderr at exit under "report").
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from rocke_aot.torch import dispatch as D
from rocke_aot.torch import ops  # registers torch.ops.rocke_aot.*
from rocke_aot.torch.runtime import current


def _arg(args, kwargs, i, name, default):
    return args[i] if len(args) > i else kwargs.get(name, default)


class PrebuiltMode(TorchFunctionMode):
    """The mode itself (module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, w, b = args[0], _arg(args, kwargs, 1, "weight", None), _arg(args, kwargs, 2, "bias", None)
            return (ops.linear_impl if ops.eager(x, w) else torch.ops.rocke_aot.linear)(x, w, b)
        if func is F.conv2d:
            x, w = args[0], _arg(args, kwargs, 1, "weight", None)
            b = _arg(args, kwargs, 2, "bias", None)
            stride, padding = _arg(args, kwargs, 3, "stride", 1), _arg(args, kwargs, 4, "padding", 0)
            dilation, groups = _arg(args, kwargs, 5, "dilation", 1), _arg(args, kwargs, 6, "groups", 1)
            if groups != 1 or isinstance(padding, str):
                why = D.conv2d_problem(tuple(x.shape), tuple(w.shape), stride, padding, dilation, groups, "f16")
                current().miss("conv2d", "conv_direct_fwd", None, why, x.device)
                return func(*args, **kwargs)
            conv = ops.conv2d_impl if ops.eager(x, w) else torch.ops.rocke_aot.conv2d
            return conv(x, w, b, list(D.pair2(stride)), list(D.pair2(padding)), list(D.pair2(dilation)))
        if func is F.scaled_dot_product_attention:
            q, k, v = args[0], _arg(args, kwargs, 1, "key", None), _arg(args, kwargs, 2, "value", None)
            mask = _arg(args, kwargs, 3, "attn_mask", None)
            dropout = _arg(args, kwargs, 4, "dropout_p", 0.0)
            causal = _arg(args, kwargs, 5, "is_causal", False)
            scale = kwargs.get("scale")
            if mask is not None or dropout:
                why = D.Unserved("attn_mask given (the kernels serve causal and no mask)" if mask is not None
                                 else f"dropout_p={dropout} (inference kernels)")
                current().miss("sdpa", "attention", None, why, q.device)
                return func(*args, **kwargs)
            if k.shape[1] != q.shape[1] and not kwargs.get("enable_gqa", False):
                return func(*args, **kwargs)  # torch itself refuses mismatched heads without enable_gqa
            return (ops.sdpa_impl if ops.eager(q, k, v) else torch.ops.rocke_aot.sdpa)(q, k, v, bool(causal), scale)
        return func(*args, **kwargs)


@contextlib.contextmanager
def prebuilt(policy: str | None = None):
    """Route the three functions to the ops inside the block (module doc); ``policy`` overrides
    the configured Dispatcher's for the block."""
    d = current()
    old = d.policy
    if policy is not None:
        if policy not in D.POLICIES:
            raise D.SpecError(f"policy {policy!r}: one of {', '.join(D.POLICIES)}")
        d.policy = policy
    try:
        with PrebuiltMode():
            yield d
    finally:
        d.policy = old


def route(model: torch.nn.Module, policy: str | None = None) -> torch.nn.Module:
    """``model`` with its forward run under prebuilt(policy) (the module is changed in place)."""
    forward = model.forward

    @functools.wraps(forward)
    def routed(*args: Any, **kwargs: Any):
        with prebuilt(policy):
            return forward(*args, **kwargs)

    setattr(model, "forward", routed)  # noqa: B010 (the instance's own forward)
    return model


def _linear_forward(self, x):
    return (ops.linear_impl if ops.eager(x) else torch.ops.rocke_aot.linear)(x, self.weight, self.bias)


def _conv_forward(self, x):
    if self.groups != 1 or isinstance(self.padding, str) or self.padding_mode != "zeros":
        why = (D.Unserved(f"padding_mode={self.padding_mode!r}") if self.padding_mode != "zeros" else
               D.conv2d_problem(tuple(x.shape), tuple(self.weight.shape), self.stride, self.padding, self.dilation,
                                self.groups, "f16"))
        current().miss("conv2d", "conv_direct_fwd", None, why, x.device)
        return type(self).forward(self, x)
    conv = ops.conv2d_impl if ops.eager(x) else torch.ops.rocke_aot.conv2d
    return conv(x, self.weight, self.bias, list(self.stride), list(self.padding), list(self.dilation))


def swap(model: torch.nn.Module) -> torch.nn.Module:
    """The module pass: every nn.Linear and nn.Conv2d of ``model`` calls the ops from its forward
    (in place), with no TorchFunctionMode around the rest of the model's calls (so no per-call
    Python hook on every other torch function); the Dispatcher's policy applies as in the mode.
    Attention is a function, not a module: run the model under prebuilt() for SDPA."""
    import types

    for m in model.modules():
        if type(m) is torch.nn.Linear:
            setattr(m, "forward", types.MethodType(_linear_forward, m))  # noqa: B010 (the instance's own)
        elif type(m) is torch.nn.Conv2d:
            setattr(m, "forward", types.MethodType(_conv_forward, m))  # noqa: B010
    return model
