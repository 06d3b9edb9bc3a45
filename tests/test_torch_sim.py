"""rocke_aot.torch's ops computing real results on this CPU: the kernels' own IR, no GPU.

    lower(gemm / conv_direct_fwd / conv_dgrad_patch fma spec, "sm_90", "llvm22")
    -> tests/_sim_runtime.py SimRuntime (the IR run on the host, its kernelParams read back as a
       driver reads them; a "device pointer" is a host address, so a CPU tensor's data_ptr is one)
    -> rocke_aot.torch: the problem from torch's shapes, the operands in the kernel's layout
       (the linear's weight transposed to the gemm's K x N B; channels_last NHWC / KRSC for conv),
       the cached launch path, prebuilt("strict") over F.linear / F.conv2d and the dgrad op
    compared with torch's float64 result of the same inputs within the f16 error bound (f32
    accumulation of exact products: K * 2^-24 relative to sum |a b|, plus one f16 rounding)

A wrong layout (B untransposed, NCHW read as NHWC) gives wrong numbers here, not only on a GPU.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from _sim_runtime import SimRuntime  # noqa: E402

import rocke_aot.torch as rtorch  # noqa: E402
from rocke_aot.aot.lower import lower  # noqa: E402
from rocke_aot.families.conv_dgrad_patch.spec import ConvDgradPatchSpec  # noqa: E402
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec  # noqa: E402
from rocke_aot.families.gemm.spec import GemmSpec  # noqa: E402
from rocke_aot.targets import Target  # noqa: E402

ARCH = "sm_90"
SPECS = {"gemm": GemmSpec(path="fma", in_dtype="f16", out_dtype="f16", block_m=32, block_n=32, waves=1,
                          vector_width=1, double_buffer=True),
         "conv_direct_fwd": ConvDirectFwdSpec(c=8, k=16, tile_h=2, tile_w=4, tile_k=16, c_chunk=8),
         "conv_dgrad_patch": ConvDgradPatchSpec(c=3, p=4, tile_h=2, tile_w=2, r_blk=4, k_chunk=16)}


class _Source:
    def __init__(self):
        self.low = {f: lower(f, s, ARCH, "llvm22") for f, s in SPECS.items()}

    def ranked(self, arch, family, problem, lanes, triton_version=None, limit=None):
        return [{"key": family, "lane": "llvm22", "spec": SPECS[family].to_dict(), "efficiency": 1.0}]

    def load(self, key):
        return self.low[key].ir.encode(), {"launch": self.low[key].launch.as_dict()}


@pytest.fixture(scope="module")
def sim():
    src = _Source()
    rt = SimRuntime({k.ir.encode(): k for k in src.low.values()}, Target.parse(ARCH).wave_size)
    d = rtorch.configure(src, runtime=rt, arch=ARCH, policy="strict", summary_at_exit=False)
    yield d, rt
    d.close()


def _f16(gen, *shape):
    return (torch.rand(*shape, generator=gen) * 2 - 1).half()


def _check(got, ref, absref, terms):
    bound = terms * 2.0**-24 * absref * 1.01 + 2.0**-11 * ref.abs() + 2.0**-25
    err = (got.double() - ref).abs()
    assert torch.isfinite(got).all() and (err <= bound).all(), f"max error {err.max():.3g}, bound {bound.min():.3g}"


def test_linear_with_bias_computes_x_wT_plus_b(sim):
    d, rt = sim
    g = torch.Generator().manual_seed(0)
    x, w, b = _f16(g, 2, 5, 24), _f16(g, 37, 24), _f16(g, 37)
    before = rt.launches
    with rtorch.prebuilt():
        y = F.linear(x, w, None)
        yb = F.linear(x, w, b)
    ref = F.linear(x.double(), w.double())
    _check(y, ref, F.linear(x.double().abs(), w.double().abs()), 24)
    # the bias is added by torch after the kernel: one more f16 rounding of y + b
    torch.testing.assert_close(yb, (y.double() + b.double()).half(), rtol=2.0**-10, atol=2.0**-14)
    assert rt.launches - before == 2 and d.served["linear"] >= 2


def test_conv2d_computes_torchs_convolution(sim):
    d, _ = sim
    s = SPECS["conv_direct_fwd"]
    g = torch.Generator().manual_seed(1)
    x, w = _f16(g, 1, s.c, 5, 7), _f16(g, s.k, s.c, s.r, s.s)
    args = dict(stride=(s.stride_h, s.stride_w), padding=(s.pad_h, s.pad_w))
    with rtorch.prebuilt():
        y = F.conv2d(x, w, None, **args)
    ref = F.conv2d(x.double(), w.double(), None, **args)
    _check(y, ref, F.conv2d(x.double().abs(), w.double().abs(), None, **args), s.c * s.r * s.s)
    assert d.served["conv2d"] >= 1


def test_conv_dgrad_patch_computes_torchs_input_gradient(sim):
    s = SPECS["conv_dgrad_patch"]
    g = torch.Generator().manual_seed(2)
    n, h, w, k = 1, 8, 8, 20
    dy, wt = _f16(g, n, k, h // s.p, w // s.p), _f16(g, k, s.c, s.p, s.p)
    dx = torch.ops.rocke_aot.conv_dgrad_patch(dy, wt, [n, s.c, h, w])
    ref = torch.nn.grad.conv2d_input((n, s.c, h, w), wt.double(), dy.double(), stride=s.p)
    absref = torch.nn.grad.conv2d_input((n, s.c, h, w), wt.double().abs(), dy.double().abs(), stride=s.p)
    _check(dx, ref, absref, k)


def test_linear_cached_path_follows_strides_and_in_place_weight_updates(sim):
    """The shape table's entry is keyed by shapes, dtypes and device, not strides: a strided input
    of a served shape is copied to row-major before its pointer is written (the cached entry is
    reused, the operand is not), and a weight updated in place gets a fresh transposed copy."""
    d, rt = sim
    g = torch.Generator().manual_seed(3)
    big, w = _f16(g, 6, 48), _f16(g, 29, 24)
    x = big[:, ::2]  # (6, 24), row stride 48, column stride 2
    assert not x.is_contiguous()
    before = rt.launches
    with rtorch.prebuilt():
        y_contig = F.linear(x.contiguous(), w)
        y_strided = F.linear(x, w)
        xt = big.view(6, 2, 24).transpose(0, 1)  # (2, 6, 24): the same values in another order
        y_transposed = F.linear(xt, w)
        w.mul_(-0.5)  # in place: same tensor, same data pointer, a new version
        y_updated = F.linear(x, w)
    for y, xi, wi in ((y_contig, x, w * -2), (y_strided, x, w * -2), (y_transposed, xt, w * -2), (y_updated, x, w)):
        ref = F.linear(xi.double(), wi.double())
        _check(y, ref, F.linear(xi.double().abs(), wi.double().abs()), 24)
    assert rt.launches - before == 4
