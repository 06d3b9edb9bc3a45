"""Attention on an NVIDIA GPU (sm_90). triton_attention: every spec of its sm_90 table, built ahead of time by the
host's own Triton (the GPU machine's triton 3.6.0 is the llvm22 lane's Triton), launched from the stored
code object and launch contract (no Triton JIT), outputs NaN-poisoned, against torch in float64. The
native attention family: every sm_90 spec (mma.sync), lowered and ptxas'd on the host, the same checks.

The reference is torch's float64 softmax(Q K^T * scale + mask) V with the mask written out here (causal
aligned at the bottom right, a sliding window), not the family's numpy reference; the tolerance is the
family's error bound (rocke_aot/families/attention/reference.py error_bound). Run on the GPU machine:
    bash scripts/gpu-tests.sh -q -k attention
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from _cuda import cuda_ctx, decode, inputs, launch  # noqa: F401  (shared CUDA helpers)

from rocke_aot.families.attention.problem import AttentionProblem
from rocke_aot.families.attention.reference import error_bound

pytestmark = pytest.mark.gpu

# ragged (odd) lengths, GQA / MQA / MHA, a decode step, more queries than keys (rows that see no key
# under the causal mask write 0), a sliding window
SHAPES = [dict(batch=2, seqlen_q=77, seqlen_k=131, heads_q=4, heads_kv=2),
          dict(batch=3, seqlen_q=1, seqlen_k=300, heads_q=8, heads_kv=1),
          dict(batch=1, seqlen_q=200, seqlen_k=64, heads_q=2, heads_kv=2),
          dict(batch=1, seqlen_q=130, seqlen_k=130, heads_q=6, heads_kv=3, window=37)]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every sm_90 spec of triton_attention, built by this interpreter's Triton into a fresh store."""
    import os

    from rocke_aot.aot.builder import build
    from rocke_aot.aot.toolchains.triton_jit import TritonToolchain
    from rocke_aot.cache.store import Store
    from rocke_aot.targets import Target

    os.environ.setdefault("ROCKE_AOT_HOME", str(tmp_path_factory.mktemp("home")))
    tc = TritonToolchain(sys.executable)
    assert tc.detect().usable, tc.detect().refusal
    assert tc.detect().lane == "llvm22", tc.detect()
    url = str(tmp_path_factory.mktemp("attn") / "cache.sqlite")
    with Store.open(url) as store:
        summary = build(arches=[Target.parse("sm_90")], families=["triton_attention"], lanes=["llvm22"], store=store,
                        toolchains=[tc], jobs=4)
        arts = list(store.find(family="triton_attention"))
        blobs = {a.key: store.get(a.key).code_object for a in arts}
    return summary, arts, blobs


def _torch_ref(p: AttentionProblem, q, k, v):
    import torch

    d = "cuda"
    qt = torch.from_numpy(q).to(d).permute(0, 2, 1, 3)  # B, H, S, D
    kt = torch.from_numpy(k).to(d).permute(0, 2, 1, 3).repeat_interleave(p.group, dim=1)
    vt = torch.from_numpy(v).to(d).permute(0, 2, 1, 3).repeat_interleave(p.group, dim=1)
    s = (qt @ kt.transpose(-1, -2)) * p.softmax_scale
    i = torch.arange(p.seqlen_q, device=d)[:, None] + (p.seqlen_k - p.seqlen_q)
    j = torch.arange(p.seqlen_k, device=d)[None, :]
    keep = torch.ones(p.seqlen_q, p.seqlen_k, dtype=torch.bool, device=d)
    if p.causal:
        keep &= j <= i
    if p.window:
        keep &= (i - j) < p.window
    s = s.masked_fill(~keep, float("-inf"))
    w = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row that sees no key: 0
    return (w @ vt).permute(0, 2, 1, 3).contiguous().cpu().numpy()


def test_every_sm90_spec_matches_torch_float64(cuda_ctx, built):  # noqa: F811
    summary, arts, blobs = built
    assert len(arts) == 24 and not summary["failed"], summary
    checked = 0
    for art in arts:
        spec = art.spec
        for shape in SHAPES:
            p = AttentionProblem(**shape, head_dim=spec["HEAD_DIM"], dtype=spec["dtype"],
                                 causal=bool(spec["CAUSAL"]))
            rng = np.random.default_rng(checked)
            qb, q = inputs(p.dtype, (p.batch, p.seqlen_q, p.heads_q, p.head_dim), rng)
            kb, k = inputs(p.dtype, (p.batch, p.seqlen_k, p.heads_kv, p.head_dim), rng)
            vb, v = inputs(p.dtype, (p.batch, p.seqlen_k, p.heads_kv, p.head_dim), rng)
            out = np.full(q.size, 0xFFFF, dtype=np.uint16)  # NaN in f16 and bf16: unwritten outputs fail
            scratch = np.zeros(16, dtype=np.uint8)
            launch(blobs[art.key], art.metadata["launch"], p, {"Q": qb, "K": kb, "V": vb, "O": out,
                                                              "global_scratch": scratch, "profile_scratch": scratch})
            got = decode(out, p.dtype)
            want = _torch_ref(p, q, k, v).ravel()
            lim = error_bound(p, {"Q": q.ravel(), "K": k.ravel(), "V": v.ravel()}, want, p.dtype)
            assert np.isfinite(got).all(), f"{art.spec} {shape}: unwritten or non-finite outputs"
            bad = np.abs(got - want) > lim
            assert not bad.any(), (f"{art.spec} {shape}: {int(bad.sum())} of {got.size} outside the bound, max err "
                                   f"{np.abs(got - want).max():.3g}")
            checked += 1
    assert checked == 24 * len(SHAPES)


def test_every_sm90_native_spec_matches_torch_float64(cuda_ctx):  # noqa: F811
    """The native kernel (rocke_aot/families/attention/lower.py, mma.sync) lowered here for sm_90, ptxas'd,
    launched from its contract on the same problems, against the same torch float64 reference."""
    from _cuda import module_image

    from rocke_aot.aot.lower import lower
    from rocke_aot.variants import table

    specs = list(table.enumerate_specs("attention", "sm_90", "llvm22"))
    assert len(specs) == 36
    checked = 0
    for spec in specs:
        k = lower("attention", spec, "sm_90", "llvm22")
        image, _ = module_image(k.ir)
        for shape in SHAPES:
            p = AttentionProblem(**shape, head_dim=spec.head_dim, dtype=spec.dtype, causal=bool(spec.causal))
            rng = np.random.default_rng(checked)
            qb, q = inputs(p.dtype, (p.batch, p.seqlen_q, p.heads_q, p.head_dim), rng)
            kb, k_ = inputs(p.dtype, (p.batch, p.seqlen_k, p.heads_kv, p.head_dim), rng)
            vb, v = inputs(p.dtype, (p.batch, p.seqlen_k, p.heads_kv, p.head_dim), rng)
            out = np.full(q.size, 0xFFFF, dtype=np.uint16)
            launch(image, k.launch, p, {"Q": qb, "K": kb, "V": vb, "O": out})
            got = decode(out, p.dtype)
            want = _torch_ref(p, q, k_, v).ravel()
            lim = error_bound(p, {"Q": q.ravel(), "K": k_.ravel(), "V": v.ravel()}, want, p.dtype)
            assert np.isfinite(got).all(), f"{spec.kernel_name} {shape}: unwritten or non-finite outputs"
            bad = np.abs(got - want) > lim
            assert not bad.any(), f"{spec.kernel_name} {shape}: {int(bad.sum())} of {got.size} outside the bound"
            checked += 1
    assert checked == 36 * len(SHAPES)
