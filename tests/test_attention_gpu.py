"""Attention on an NVIDIA GPU (sm_90). triton_attention: every spec of its sm_90 table (136: dense, packed
varlen, paged; each unpacked or GQA-packed), built ahead of time by the host's own Triton (the GPU machine's triton 3.6.0 is the llvm22
lane's Triton), launched from the stored code object and launch contract (no Triton JIT) on problems of
its layout (empty sequences, shuffled block tables), outputs NaN-poisoned, against torch in float64 (and
the LSE output against torch.logsumexp). The
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
# per triton_attention layout (spec VARLEN, PAGED): the same kinds of problems packed (empty sequences
# too) and over a paged cache (shuffled block table, block sizes 16/32/64, spare pool blocks), LSE out
LAYOUTS = {
    # and, dense, several tiles long: key blocks every row sees whole (triton_attention's unmasked loop)
    # beside the diagonal band, causal tiles heaviest first
    (0, 0): [dict(s, lse=True) for s in SHAPES] + [dict(batch=1, seqlen_q=600, seqlen_k=600, heads_q=4, heads_kv=1,
                                                        lse=True)],
    (1, 0): [dict(batch=4, seqlen_q=150, seqlen_k=200, heads_q=4, heads_kv=2, seqlens_q=[150, 0, 1, 77],
                  seqlens_k=[200, 9, 130, 77], lse=True),
             dict(batch=2, seqlen_q=90, seqlen_k=40, heads_q=6, heads_kv=3, window=37, seqlens_q=[90, 5],
                  seqlens_k=[40, 0])],
    (0, 1): [dict(batch=3, seqlen_q=1, seqlen_k=300, heads_q=8, heads_kv=1, kv_layout="paged", block_size=16,
                  lse=True),
             dict(batch=2, seqlen_q=77, seqlen_k=131, heads_q=4, heads_kv=2, kv_layout="paged", block_size=64,
                  num_blocks=9)],
    (1, 1): [dict(batch=4, seqlen_q=64, seqlen_k=500, heads_q=8, heads_kv=2, kv_layout="paged", block_size=32,
                  seqlens_q=[1, 64, 0, 17], seqlens_k=[500, 64, 33, 17], lse=True),
             dict(batch=2, seqlen_q=1, seqlen_k=257, heads_q=4, heads_kv=4, window=100, kv_layout="paged",
                  block_size=16, seqlens_k=[257, 1])],
}

# the GQA-packed specs (PACK_GQA 1) per layout: GQA decode and a few speculative tokens whose group x
# seqlen_q rows fit the 16-row tile (group 4 and 8, MQA 8/1), ragged, sequences with no key, LSE out
PACKED_LAYOUTS = {
    (0, 0): [dict(batch=3, seqlen_q=1, seqlen_k=300, heads_q=8, heads_kv=1, lse=True),
             dict(batch=2, seqlen_q=3, seqlen_k=131, heads_q=12, heads_kv=3, window=37, lse=True)],
    (1, 0): [dict(batch=4, seqlen_q=4, seqlen_k=200, heads_q=8, heads_kv=2, seqlens_q=[4, 0, 1, 3],
                  seqlens_k=[200, 9, 0, 2], lse=True)],
    (0, 1): [dict(batch=3, seqlen_q=1, seqlen_k=300, heads_q=8, heads_kv=2, kv_layout="paged", block_size=16,
                  lse=True)],
    (1, 1): [dict(batch=4, seqlen_q=2, seqlen_k=500, heads_q=16, heads_kv=2, kv_layout="paged", block_size=32,
                  seqlens_q=[1, 2, 0, 2], seqlens_k=[500, 64, 33, 1], lse=True)],
}


def _triton_shapes(spec) -> list[dict]:
    return (PACKED_LAYOUTS if spec["PACK_GQA"] else LAYOUTS)[(spec["VARLEN"], spec["PAGED"])]


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
                        toolchains=[tc], jobs=min(16, os.cpu_count() or 4))
        arts = list(store.find(family="triton_attention"))
        blobs = {a.key: store.get(a.key).code_object for a in arts}
    return summary, arts, blobs


def _torch_ref(p: AttentionProblem, q, k, v):
    """(O, LSE) in float64 on the GPU, padded [batch, seqlen, heads, dim] in, per sequence's lengths."""
    import torch

    d = "cuda"
    o = np.zeros(q.shape)
    lse = np.full((p.batch, p.heads_q, p.seqlen_q), -np.inf)
    lens_q, lens_k = p.lengths()
    for b in range(p.batch):
        lq, lk = lens_q[b], lens_k[b]
        if lq == 0:
            continue
        qt = torch.from_numpy(q[b, :lq]).to(d).permute(1, 0, 2)  # H, S, D
        kt = torch.from_numpy(k[b, :lk]).to(d).permute(1, 0, 2).repeat_interleave(p.group, dim=0)
        vt = torch.from_numpy(v[b, :lk]).to(d).permute(1, 0, 2).repeat_interleave(p.group, dim=0)
        s = (qt @ kt.transpose(-1, -2)) * p.softmax_scale
        i = torch.arange(lq, device=d)[:, None] + (lk - lq)
        j = torch.arange(lk, device=d)[None, :]
        keep = torch.ones(lq, lk, dtype=torch.bool, device=d)
        if p.causal:
            keep &= j <= i
        if p.window:
            keep &= (i - j) < p.window
        s = s.masked_fill(~keep, float("-inf"))
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a row that sees no key: 0
        o[b, :lq] = (w @ vt).permute(1, 0, 2).cpu().numpy()
        lse[b, :, :lq] = torch.logsumexp(s, dim=-1).cpu().numpy()
    return o, lse


def _buffers(p: AttentionProblem, plan, rng):
    """The launch's buffers by name (index arrays from the family's Reference.inputs, data uniform, the
    outputs NaN-poisoned) and the float64 values of the inputs."""
    from rocke_aot.families.attention.reference import REFERENCE

    tensors, vals = {}, {}
    for a in plan.args:
        if a.kind != "global_pointer":
            continue
        if a.name in ("global_scratch", "profile_scratch"):
            tensors[a.name] = np.zeros(16, dtype=np.uint8)
        elif a.name == "W":  # the split-KV workspace (access "workspace"): zeros, read back (tests/_cuda.py)
            tensors[a.name] = np.zeros(a.value, dtype=np.float32)
        elif a.name == "O":
            tensors[a.name] = np.full(a.value, 0xFFFF, dtype=np.uint16)  # NaN in f16 and bf16
        elif a.name == "LSE":
            tensors[a.name] = np.full(max(a.value, 1), np.nan, dtype=np.float32)
        elif a.dtype == "i32":
            tensors[a.name], vals[a.name] = REFERENCE.inputs(p, a.name, a.dtype, a.value, rng)
            tensors[a.name] = np.ascontiguousarray(tensors[a.name]) if a.value else np.zeros(1, np.int32)
        else:
            tensors[a.name], vals[a.name] = inputs(p.dtype, (a.value,), rng)
    return tensors, vals


def test_every_sm90_spec_matches_torch_float64(cuda_ctx, built):  # noqa: F811
    from rocke_aot.families.attention.reference import packed, packed_lse, padded
    from rocke_aot.launch import LaunchContract

    summary, arts, blobs = built
    assert len(arts) == 136 and not summary["failed"], summary
    checked = 0
    for art in arts:
        spec = art.spec
        for shape in _triton_shapes(spec):
            p = AttentionProblem(**shape, head_dim=spec["HEAD_DIM"], dtype=spec["dtype"],
                                 causal=bool(spec["CAUSAL"]))
            rng = np.random.default_rng(checked)
            plan = LaunchContract.from_dict(art.metadata["launch"]).plan(p)
            tensors, vals = _buffers(p, plan, rng)
            launch(blobs[art.key], art.metadata["launch"], p, tensors)
            got = decode(tensors["O"], p.dtype)
            o, lse = _torch_ref(p, *padded(p, vals))
            want = packed(p, o).ravel()
            lim = error_bound(p, vals, want, p.dtype)
            assert np.isfinite(got).all(), f"{art.spec} {shape}: unwritten or non-finite outputs"
            bad = np.abs(got - want) > lim
            assert not bad.any(), (f"{art.spec} {shape}: {int(bad.sum())} of {got.size} outside the bound, max err "
                                   f"{np.abs(got - want).max():.3g}")
            if p.lse:
                lse_want = packed_lse(p, lse).ravel()
                lse_got = tensors["LSE"][:lse_want.size].astype(np.float64)
                assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_want)), f"{art.spec} {shape}: LSE -inf"
                fin = np.isfinite(lse_want)
                err = np.abs(lse_got[fin] - lse_want[fin])
                assert (err <= 1e-4 * (1 + np.abs(lse_want[fin]))).all(), f"{art.spec} {shape}: LSE {err.max():.3g}"
            checked += 1
    assert checked == sum(len(_triton_shapes(a.spec)) for a in arts)


def test_every_sm90_native_spec_matches_torch_float64(cuda_ctx):  # noqa: F811
    """The native kernel (rocke_aot/families/attention/lower.py, mma.sync) lowered here for sm_90, ptxas'd,
    launched from its contract against the same torch float64 reference: the dense specs on SHAPES, the
    varlen / paged ones on their layout's problems (triton_attention's LAYOUTS: empty sequences, shuffled
    block tables, the LSE output against torch.logsumexp)."""
    from _cuda import module_image

    from rocke_aot.aot.lower import lower
    from rocke_aot.families.attention.reference import packed, packed_lse, padded
    from rocke_aot.variants import table

    specs = [s for s in table.enumerate_specs("attention", "sm_90", "llvm22") if not s.split_kv]  # split: below
    # dense: 108 points less head_dim 256 with block_n 32 / 64 (they spill); 3 layouts x 12 (one tile each)
    assert len(specs) == 84 + 36
    checked = expected = 0
    for spec in specs:
        k = lower("attention", spec, "sm_90", "llvm22")
        image, _ = module_image(k.ir)
        shapes = LAYOUTS[(spec.varlen, spec.paged)] if spec.layout else SHAPES
        expected += len(shapes)
        for shape in shapes:
            p = AttentionProblem(**shape, head_dim=spec.head_dim, dtype=spec.dtype, causal=bool(spec.causal))
            rng = np.random.default_rng(checked)
            plan = k.launch.plan(p)
            tensors, vals = _buffers(p, plan, rng)
            launch(image, k.launch, p, tensors)
            got = decode(tensors["O"], p.dtype)
            o, lse = _torch_ref(p, *padded(p, vals))
            want = packed(p, o).ravel()
            lim = error_bound(p, vals, want, p.dtype)
            assert got.size == want.size
            assert np.isfinite(got).all(), f"{spec.kernel_name} {shape}: unwritten or non-finite outputs"
            bad = np.abs(got - want) > lim
            assert not bad.any(), f"{spec.kernel_name} {shape}: {int(bad.sum())} of {got.size} outside the bound"
            if p.lse:
                lse_want = packed_lse(p, lse).ravel()
                lse_got = tensors["LSE"][:lse_want.size].astype(np.float64)
                assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_want)), f"{spec.kernel_name}: LSE -inf"
                fin = np.isfinite(lse_want)
                err = np.abs(lse_got[fin] - lse_want[fin])
                assert (err <= 1e-4 * (1 + np.abs(lse_want[fin]))).all(), f"{spec.kernel_name}: LSE {err.max():.3g}"
            checked += 1
    assert checked == expected == 84 * len(SHAPES) + 12 * sum(len(LAYOUTS[lay]) for lay in ((1, 0), (0, 1), (1, 1)))


# split-KV decode (AttentionSpec.split_kv) per layout (varlen, paged): a few queries a sequence over keys
# long enough to split (kv_splits >= 2), ragged, a sequence with no key, GQA / MQA, the LSE out
SPLIT_LAYOUTS = {
    (0, 0): [dict(batch=2, seqlen_q=1, seqlen_k=1500, heads_q=8, heads_kv=2),
             dict(batch=1, seqlen_q=4, seqlen_k=777, heads_q=4, heads_kv=1, window=300)],
    (1, 0): [dict(batch=3, seqlen_q=2, seqlen_k=900, heads_q=4, heads_kv=2, seqlens_q=[1, 2, 1],
                  seqlens_k=[900, 0, 300], lse=True)],
    (0, 1): [dict(batch=3, seqlen_q=1, seqlen_k=1030, heads_q=8, heads_kv=1, kv_layout="paged", block_size=16,
                  lse=True)],
    (1, 1): [dict(batch=4, seqlen_q=1, seqlen_k=2000, heads_q=8, heads_kv=2, kv_layout="paged", block_size=32,
                  seqlens_k=[2000, 17, 600, 1], lse=True)],
}


@pytest.mark.parametrize("pack", [0, 1], ids=["unpacked", "pack_gqa"])
def test_every_sm90_split_kv_spec_matches_torch_float64(cuda_ctx, pack):  # noqa: F811
    """The split-KV decode kernels (every sm_90 spec with split_kv 1: 4 layouts x f16/bf16 x head dim x causal,
    unpacked and GQA-packed, pack_gqa 1: a tile's rows a KV head's group x seqlen_q),
    lowered and ptxas'd here, launched from their contract (kv_splits chosen at launch, the workspace
    zero-filled) on decode problems of their layout against torch float64 (the LSE against torch.logsumexp);
    each launched twice on the same workspace: the same bits, the arrival counters back at 0."""
    from _cuda import module_image

    from rocke_aot.aot.lower import lower
    from rocke_aot.families.attention.reference import packed, packed_lse, padded
    from rocke_aot.variants import table

    specs = [s for s in table.enumerate_specs("attention", "sm_90", "llvm22") if s.split_kv and s.pack_gqa == pack]
    assert len(specs) == 48
    checked = 0
    for spec in specs:
        k = lower("attention", spec, "sm_90", "llvm22")
        image, _ = module_image(k.ir)
        for shape in SPLIT_LAYOUTS[(spec.varlen, spec.paged)]:
            p = AttentionProblem(**shape, head_dim=spec.head_dim, dtype=spec.dtype, causal=bool(spec.causal))
            env = spec.launch_formulas().env(p)
            assert env["kv_splits"] >= 2 and env["qtiles"] == p.batch * (p.heads_kv if pack else p.heads_q)
            plan = k.launch.plan(p)
            tensors, vals = _buffers(p, plan, np.random.default_rng(checked))
            launch(image, k.launch, p, tensors)
            got = decode(tensors["O"], p.dtype)
            o, lse = _torch_ref(p, *padded(p, vals))
            want = packed(p, o).ravel()
            lim = error_bound(p, vals, want, p.dtype)
            name = f"{spec.kernel_name} {shape}"
            assert np.isfinite(got).all(), f"{name}: unwritten or non-finite outputs"
            bad = np.abs(got - want) > lim
            assert not bad.any(), f"{name}: {int(bad.sum())} of {got.size} outside the bound"
            w = spec.workspace_words_per_group
            assert not tensors["W"].view(np.int32)[w - 4::w].any(), f"{name}: arrival counters not back at 0"
            if p.lse:
                lse_want = packed_lse(p, lse).ravel()
                lse_got = tensors["LSE"][:lse_want.size].astype(np.float64)
                assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_want)), f"{name}: LSE -inf"
                fin = np.isfinite(lse_want)
                err = np.abs(lse_got[fin] - lse_want[fin])
                assert (err <= 1e-4 * (1 + np.abs(lse_want[fin]))).all(), f"{name}: LSE {err.max():.3g}"
            first = tensors["O"].copy()
            tensors["O"][:] = 0xFFFF
            launch(image, k.launch, p, tensors)  # the workspace as the first launch left it
            assert np.array_equal(tensors["O"], first), f"{name}: a second launch gave other bits"
            checked += 1
    assert checked == 12 * sum(len(v) for v in SPLIT_LAYOUTS.values())
