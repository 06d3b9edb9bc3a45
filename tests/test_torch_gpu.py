"""rocke_aot.torch on a real NVIDIA GPU (marked ``gpu``): the ops launch real cubins on torch's stream.

    lower(gemm / conv_direct_fwd spec, "sm_90", "llvm22") -> cubin (tests/_cuda.py module_image)
    a Source holding them (ranked / load, as runner/bench.py's) -> rocke_aot.torch.configure
    prebuilt("strict"): F.linear (with bias) and F.conv2d on CUDA tensors, on a side stream
        -> compared with torch's float64 result of the same inputs (error bound: f32
           accumulation of exact 16-bit products, one rounding to f16)
    0 Triton compiles while the ops run (triton.compile wrapped); the served counts; one select
    per shape over repeated calls.

Run on the GPU machine:  python -m pytest -m gpu tests/test_torch_gpu.py -q
(the whole models, time to first inference and overhead: bench/torch_device.sh).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


class _Source:
    def __init__(self, kernels):
        self.kernels = kernels  # family -> (key, spec, image, contract)
        self.ranked_calls = 0

    def ranked(self, arch, family, problem, lanes, triton_version=None, limit=None):
        self.ranked_calls += 1
        if family not in self.kernels:
            return []
        key, spec, _, _ = self.kernels[family]
        return [{"key": key, "lane": "llvm22", "spec": spec.to_dict(), "efficiency": 1.0}]

    def load(self, key):
        for k, _, image, contract in self.kernels.values():
            if k == key:
                return image, {"launch": contract.as_dict()}
        raise KeyError(key)


@pytest.fixture(scope="module")
def kernels():
    from _cuda import module_image

    from rocke_aot.aot.lower import lower
    from rocke_aot.families.gemm.spec import GemmSpec
    from rocke_aot.variants import table

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gemm = GemmSpec(path="fma", in_dtype="f16", out_dtype="f16", block_m=128, block_n=64, block_k=16, waves=8,
                    vector_width=2)
    conv = next(s for s in table.enumerate_specs("conv_direct_fwd", "sm_90", "llvm22")
                if s.dtype == "f16" and s.dil_h == 1 and s.c >= 8)
    out = {}
    for family, spec in (("gemm", gemm), ("conv_direct_fwd", conv)):
        k = lower(family, spec, "sm_90", "llvm22")
        image, _ = module_image(k.ir)
        out[family] = (f"key-{family}", spec, image, k.launch)
    return out


def _bound(ref64, terms):
    return terms * 2.0**-24 * ref64.abs() * 2 + 2.0**-11 * ref64.abs() + 1e-3


def test_ops_launch_prebuilt_kernels_on_torchs_stream(kernels):
    import torch.nn.functional as F

    import rocke_aot.torch as rt

    src = _Source(kernels)
    d = rt.configure(src, policy="strict", lanes=["llvm22"], summary_at_exit=False)
    compiles = []
    try:
        import triton

        orig = triton.compile
        triton.compile = lambda *a, **k: compiles.append(a) or orig(*a, **k)
    except ImportError:
        triton = None
    try:
        dev = "cuda"
        x = (torch.rand(3, 77, 96, device=dev) - 0.5).half()
        w = (torch.rand(200, 96, device=dev) - 0.5).half()
        b = (torch.rand(200, device=dev) - 0.5).half()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side), rt.prebuilt("strict"):
            y = F.linear(x, w, b)
            y2 = F.linear(x, w, b)
        side.synchronize()
        ref = F.linear(x.double(), w.double(), b.double())
        assert y.dtype == torch.float16 and y.shape == (3, 77, 200)
        assert ((y.double() - ref).abs() <= _bound(ref, 96)).all()
        assert torch.equal(y, y2) and src.ranked_calls == 1 and d.served["linear"] == 2

        spec = kernels["conv_direct_fwd"][1]
        xc = (torch.rand(2, spec.c, 17, 19, device=dev) - 0.5).half()
        wc = (torch.rand(spec.k, spec.c, spec.r, spec.s, device=dev) - 0.5).half()
        args = dict(stride=(spec.stride_h, spec.stride_w), padding=(spec.pad_h, spec.pad_w))
        with rt.prebuilt("strict"):
            yc = F.conv2d(xc, wc, None, **args)
        torch.cuda.synchronize()
        refc = F.conv2d(xc.double(), wc.double(), None, **args)
        assert ((yc.double() - refc).abs() <= _bound(refc, spec.c * spec.r * spec.s)).all()
        assert d.served["conv2d"] == 1 and not d.fallbacks
    finally:
        if triton is not None:
            triton.compile = orig
        d.close()
    assert compiles == [], "a kernel was compiled on the host"
