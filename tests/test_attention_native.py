"""The native attention kernel (rocke_aot/families/attention/lower.py), without a GPU: its lowered IR run
on the CPU emulation (tests/_host_sim.py: one thread per work-item, barriers and LDS modelled, every
matrix instruction by tests/_isa_ref.py from the vendors' documents) for gfx942 / gfx950 (MFMA), gfx1250
(WMMA) and sm_90 (mma.sync), against the float64 reference of the family within its error bound; and
compiled by the lanes' real compilers, the matrix instructions read back with llvm-objdump-22 / the PTX.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from _host_sim import CpuGrid

from rocke_aot.aot.families import get_family as aot_family
from rocke_aot.aot.lower import lower
from rocke_aot.families.attention.problem import AttentionProblem
from rocke_aot.families.attention.reference import error_bound, sdpa
from rocke_aot.variants.families import family_source

OBJDUMP = shutil.which("llvm-objdump-22") or "/usr/lib/llvm-22/bin/llvm-objdump"
RA = [sys.executable, "-m", "rocke_aot.cli"]
PATHS = {"gfx942": ("mfma", 64), "gfx950": ("mfma", 64), "gfx1250": ("wmma", 32), "sm_90": ("mma", 32)}


def _inputs(dtype: str, shape: tuple, rng) -> tuple[np.ndarray, np.ndarray]:
    x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    if dtype == "f16":
        h = x.astype(np.float16)
        return h.view(np.uint16).copy(), h.astype(np.float64)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _decode(bits: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _run(arch: str, spec: dict, p: AttentionProblem, scale_bits: int | None = None):
    path, wave = PATHS[arch]
    spec = {"path": path, "dtype": p.dtype, "head_dim": p.head_dim, "causal": int(p.causal), **spec}
    k = lower("attention", spec, arch, "llvm22")
    rng = np.random.default_rng(7)
    qb, q = _inputs(p.dtype, (p.batch, p.seqlen_q, p.heads_q, p.head_dim), rng)
    kb, kk = _inputs(p.dtype, (p.batch, p.seqlen_k, p.heads_kv, p.head_dim), rng)
    vb, v = _inputs(p.dtype, (p.batch, p.seqlen_k, p.heads_kv, p.head_dim), rng)
    out = np.full(q.size, 0xFFFF, dtype=np.uint16)  # NaN: an unwritten output fails
    grid = aot_family("attention").spec_from(spec).launch_formulas().grid_of(p)[0]
    CpuGrid(k, wave_size=wave).launch(grid, qb, kb, vb, out, p.seqlen_q, p.seqlen_k, p.heads_q, p.heads_kv,
                                      p.window, p.scale_bits if scale_bits is None else scale_bits)
    got = _decode(out, p.dtype)
    ref = sdpa(p, q, kk, v)[0].ravel()
    lim = error_bound(p, {"Q": q.ravel(), "K": kk.ravel(), "V": v.ravel()}, ref, p.dtype)
    return got, ref, lim


CASES = [  # (arch, spec knobs, problem)
    ("gfx942", {"warps": 2}, dict(batch=2, seqlen_q=37, seqlen_k=53, heads_q=2, heads_kv=1, head_dim=64)),
    ("gfx942", {"warps": 1}, dict(batch=1, seqlen_q=19, seqlen_k=37, heads_q=4, heads_kv=2, head_dim=128,
                                  causal=True, dtype="bf16")),
    ("gfx950", {"warps": 1}, dict(batch=1, seqlen_q=40, seqlen_k=21, heads_q=2, heads_kv=2, head_dim=64,
                                  causal=True)),  # more queries than keys: rows that see no key write 0
    ("gfx1250", {"warps": 1}, dict(batch=1, seqlen_q=17, seqlen_k=45, heads_q=3, heads_kv=1, head_dim=64,
                                   causal=True, window=9)),
    ("sm_90", {"warps": 2}, dict(batch=2, seqlen_q=1, seqlen_k=77, heads_q=4, heads_kv=1, head_dim=128,
                                 causal=True)),  # a decode step, MQA
    ("sm_90", {"warps": 1}, dict(batch=1, seqlen_q=33, seqlen_k=33, heads_q=2, heads_kv=2, head_dim=256,
                                 dtype="bf16", window=5)),
]


@pytest.mark.parametrize("arch, knobs, shape", CASES, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(CASES)])
def test_the_emulated_kernel_is_sdpa(arch, knobs, shape):
    p = AttentionProblem(**shape)
    got, ref, lim = _run(arch, knobs, p)
    assert np.isfinite(got).all(), "unwritten or non-finite outputs"
    bad = np.abs(got - ref) > lim
    assert not bad.any(), f"{int(bad.sum())} of {got.size} outside the bound, max err {np.abs(got - ref).max():.3g}"


def test_a_wrong_scale_is_caught():
    """The check can fail: the same kernel given a scale 2% off is outside the bound."""
    import struct

    p = AttentionProblem(batch=1, seqlen_q=19, seqlen_k=37, heads_q=2, heads_kv=1, head_dim=64)
    wrong = struct.unpack("<i", struct.pack("<f", p.softmax_scale * 1.02))[0]
    got, ref, lim = _run("gfx942", {"warps": 1}, p, scale_bits=wrong)
    assert (np.abs(got - ref) > lim).any()


def test_the_native_family_comes_from_rocke_aots_own_entry_points():
    src = family_source("attention")
    assert (src.kind, src.distribution, src.value) == ("plugin", "rocke-aot", "rocke_aot.families.attention.native:FAMILY")
    fam = aot_family("attention")
    assert fam.lowerer.raw.__module__ == "rocke_aot.families.attention.lower"
    assert fam.op == aot_family("triton_attention").op == "attention"


@pytest.mark.parametrize("arch, lane, dtype", [("gfx942", "llvm22", "f16"), ("gfx950", "llvm23", "bf16"),
                                               ("gfx1250", "llvm24", "f16"), ("sm_90", "llvm22", "bf16")])
def test_it_compiles_with_the_targets_matrix_instructions(tmp_path, arch, lane, dtype):
    path = PATHS[arch][0]
    spec = {"path": path, "dtype": dtype, "head_dim": 128, "causal": 1, "warps": 4}
    out = tmp_path / ("k.cubin" if arch == "sm_90" else "k.hsaco")
    proc = subprocess.run(RA + ["compile", "--family", "attention", "--arch", arch, "--lane", lane, "--spec",
                                json.dumps(spec), "-o", str(out), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["code_object"]["kernel"] == f"attention_{dtype}_d128_causal_{path}_w4"
    if arch == "sm_90":
        ptx = (tmp_path / "k.ptx").read_text()
        assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16", ptx)) >= 2 and "ex2.approx" in ptx
    else:
        asm = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", str(out)], capture_output=True, text=True,
                             check=True).stdout
        want = r"v_wmma_f32_16x16x32_" if path == "wmma" else r"v_mfma_f32_16x16x16_?(f16|bf16)"
        assert len(re.findall(want, asm)) >= 2 and "v_exp_f32" in asm, asm[:2000]
        assert doc["code_object"]["vgpr_spill_count"] == 0
