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
    # block_n: K/V tiles of 16 / 64 keys staged in LDS, more work-items than staging vectors (16 x 64 / 8
    # = 128 < 256) and several rounds of them; key counts no multiple of the tile
    ("gfx942", {"warps": 4, "block_n": 16}, dict(batch=1, seqlen_q=70, seqlen_k=83, heads_q=2, heads_kv=1,
                                                  head_dim=64, causal=True)),
    ("gfx950", {"warps": 2, "block_n": 64}, dict(batch=1, seqlen_q=21, seqlen_k=150, heads_q=2, heads_kv=1,
                                                  head_dim=128, dtype="bf16")),
    # gfx950: block_n 32 / 64 run MFMA 16x16x32 (the paired key order of P^T and V^T), block_n 16 keeps
    # 16x16x16; causal and not, both dtypes, the unmasked loop and the masked one
    ("gfx950", {"warps": 4, "block_n": 32}, dict(batch=2, seqlen_q=70, seqlen_k=101, heads_q=2, heads_kv=1,
                                                  head_dim=64, causal=True, dtype="bf16")),
    ("gfx950", {"warps": 1, "block_n": 64}, dict(batch=1, seqlen_q=30, seqlen_k=200, heads_q=1, heads_kv=1,
                                                  head_dim=256)),
    ("gfx950", {"warps": 2, "block_n": 16}, dict(batch=1, seqlen_q=33, seqlen_k=47, heads_q=2, heads_kv=2,
                                                  head_dim=64, causal=True)),
    ("gfx1250", {"warps": 2, "block_n": 64}, dict(batch=1, seqlen_q=33, seqlen_k=70, heads_q=1, heads_kv=1,
                                                   head_dim=64, causal=True)),
    ("sm_90", {"warps": 4, "block_n": 64}, dict(batch=1, seqlen_q=65, seqlen_k=99, heads_q=4, heads_kv=2,
                                                 head_dim=64, causal=True)),
    ("sm_90", {"warps": 1, "block_n": 16}, dict(batch=2, seqlen_q=5, seqlen_k=41, heads_q=2, heads_kv=1,
                                                 head_dim=128, dtype="bf16")),
    # AMDGPU's unmasked loop takes the blocks below the first row's diagonal: Sk - Sq = 14 puts the
    # diagonal of query block 0 one key short of a 16-key block (a block too many unmasked shows here)
    ("gfx942", {"warps": 1, "block_n": 16}, dict(batch=1, seqlen_q=18, seqlen_k=32, heads_q=1, heads_kv=1,
                                                  head_dim=64, causal=True)),
]


@pytest.mark.parametrize("arch, knobs, shape", CASES, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(CASES)])
def test_the_emulated_kernel_is_sdpa(arch, knobs, shape):
    p = AttentionProblem(**shape)
    got, ref, lim = _run(arch, knobs, p)
    assert np.isfinite(got).all(), "unwritten or non-finite outputs"
    bad = np.abs(got - ref) > lim
    assert not bad.any(), f"{int(bad.sum())} of {got.size} outside the bound, max err {np.abs(got - ref).max():.3g}"


def test_the_table_refuses_tiles_by_name():
    """block_n is a knob with admission reasons: a tile the instruction cannot step (wmma's 32 keys) and
    one whose LDS is over the target's limit (gfx942's 64 KiB) are refused; sm_90 takes its tiles in dynamic
    shared memory (past the 48 KiB a kernel may declare statically), which the launch contract asks for."""
    from rocke_aot.errors import CapabilityError
    from rocke_aot.families.attention.native import TABLE, AttentionSpec
    from rocke_aot.targets import Target

    with pytest.raises(CapabilityError, match="not a multiple of the 32 keys"):
        TABLE.check(AttentionSpec(path="wmma", block_n=16), Target.parse("gfx1250"))
    big = AttentionSpec(path="mma", head_dim=256, warps=4, block_n=64)
    # K 64 x 264, V^T 256 x 72 (i16); the softmax in registers: no S, P or alpha
    assert big.lds_bytes() == 64 * 264 * 2 + 256 * 72 * 2
    # split-KV keeps its softmax in shared memory: S 64 x 64 (f32), P 64 x 64 (i16), alpha 64 (f32) beside them
    split = AttentionSpec(path="mma", head_dim=256, warps=4, block_n=64, split_kv=1)
    assert split.lds_bytes() == 64 * 264 * 2 + 256 * 72 * 2 + 64 * 64 * 4 + 64 * 64 * 2 + 64 * 4
    with pytest.raises(CapabilityError, match="exceed the 65536"):
        TABLE.check(AttentionSpec(path="mfma", head_dim=256, warps=4, block_n=64), Target.parse("gfx942"))
    TABLE.check(AttentionSpec(path="mfma", head_dim=256, warps=4, block_n=64), Target.parse("gfx950"))  # 160 KiB
    TABLE.check(AttentionSpec(path="mma", head_dim=128, warps=4, block_n=64), Target.parse("sm_90"))  # 60 KiB:
    # dynamic shared memory, past the 48 KiB static limit
    with pytest.raises(CapabilityError, match="spills on sm_90"):
        TABLE.check(big, Target.parse("sm_90"))
    assert big.geometry(Target.parse("sm_90")).block_n == 64  # its LDS fits; the registers do not
    spec = {"path": "mfma", "head_dim": 128, "warps": 2, "block_n": 64}
    k = lower("attention", spec, "gfx942", "llvm22")
    assert (k.lds_bytes, k.dynamic_lds_bytes) == (aot_family("attention").spec_from(spec).lds_bytes(), 0)
    k = lower("attention", {**spec, "path": "mma"}, "sm_90", "llvm22")
    assert (k.lds_bytes, k.dynamic_lds_bytes) == (0, k.launch.dynamic_shared_bytes)
    assert k.launch.dynamic_shared_bytes == aot_family("attention").spec_from({**spec, "path": "mma"}).lds_bytes()


def test_register_plan_from_the_instructions_layouts():
    """The register softmax composes for MFMA 16x16x16 (S^T = K Q^T, 64 lanes: a row's lanes l, l^16, l^32,
    l^48; P^T's fragment kc, element j = S^T tile kc's accumulator j), gfx1250's WMMA 16x16x32 (32 lanes,
    keys 8h + j of tile 2kc and 16 + 8h + j of tile 2kc + 1) and sm_90's mma.sync m16n8k16 (S = Q K^T; by
    the PTX ISA's fragment tables, g = lane / 4, t = lane % 4: c_r is S[g + 8 (r / 2)][2t + r % 2] of an
    n8 tile, a_j is P[g + 8 ((j / 2) % 2)][2t + j % 2 + 8 (j / 4)] of a k16 slice: a_0..a_3 are tile 2kc's
    c_0..c_3, a_4..a_7 tile 2kc + 1's; a lane holds rows g (c_0, c_1) and g + 8 (c_2, c_3), each shared by
    the quad's lanes l ^ 1, l ^ 2; O's columns 2t, 2t + 1 one 4-byte store)."""
    from rocke_aot import mma
    from rocke_aot.families.attention.plan import register_plan

    p = register_plan(mma.select("gfx942", "mfma", "f16", "16x16x16"), 64)
    assert p.transposed and p.masks == (16, 32) and p.store_run == 4 and p.rows == ((0, 1, 2, 3),)
    assert p.gather == tuple(tuple((kc, j) for j in range(4)) for kc in range(4)) and not p.paired
    # gfx950's 16x16x32: P^T's B lane group g takes contraction indices 8g .. 8g + 7 where S^T's holds keys
    # 4g .. 4g + 3 of each 16-key tile, so the natural order does not compose; the paired order does: element
    # j is tile 2kc + j // 4's accumulator j % 4 (key 16 (j // 4) + 4g + j % 4 of the slice), V^T's A the same
    x = register_plan(mma.select("gfx950", "mfma", "bf16", "16x16x32"), 64)
    assert x.transposed and x.paired and x.masks == (16, 32) and x.store_run == 4 and x.rows == ((0, 1, 2, 3),)
    assert x.gather == tuple(tuple((2 * kc + j // 4, j % 4) for j in range(8)) for kc in range(2))
    assert register_plan(mma.select("gfx950", "mfma", "f16", "16x16x32"), 16) is None  # half a k32 slice
    w = register_plan(mma.select("gfx1250", "wmma", "bf16", "16x16x32"), 32)
    assert w.transposed and w.masks == (16,) and w.store_run == 8 and w.rows == (tuple(range(8)),)
    assert w.gather == (tuple((0, j) for j in range(8)) + tuple((1, j) for j in range(8)),)
    assert register_plan(mma.select("gfx1250", "wmma", "bf16", "16x16x32"), 16) is None  # half a k32 slice
    for dt in ("f16", "bf16"):
        for bn in (16, 32, 64):
            n = register_plan(mma.select("sm_90", "mma", dt), bn)
            assert not n.transposed and n.masks == (1, 2) and n.rows == ((0, 1), (2, 3)) and n.store_run == 2
            assert n.gather == tuple(tuple((2 * kc + j // 4, j % 4) for j in range(8)) for kc in range(bn // 16))


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
    spec = {"path": path, "dtype": dtype, "head_dim": 128, "causal": 1, "warps": 4, "block_n": 32}
    out = tmp_path / ("k.cubin" if arch == "sm_90" else "k.hsaco")
    proc = subprocess.run(RA + ["compile", "--family", "attention", "--arch", arch, "--lane", lane, "--spec",
                                json.dumps(spec), "-o", str(out), "--json"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["code_object"]["kernel"] == f"attention_{dtype}_d128_causal_{path}_w4_n32"
    if arch == "sm_90":
        ptx = (tmp_path / "k.ptx").read_text()
        assert len(re.findall(r"mma\.sync\.aligned\.m16n8k16", ptx)) >= 2 and "ex2.approx" in ptx
        # K/V staged by 16-byte global loads (32 keys x 16 vectors / 128 threads = 4 rounds of K and V) in
        # each of the two loops (unmasked, masked) and the fragments read from shared memory, a pair of
        # elements (32 bits) at a time or more; the softmax in registers: no S / P / alpha in shared memory
        # (no f32 shared stores, only the staging's), the row max and sum over a quad by shfl.sync.bfly
        assert len(re.findall(r"ld\.global(\.nc)?\.v4\.(b32|u32)", ptx)) == 16, ptx[:2000]
        assert re.search(r"ld\.shared\.(v\d\.)?(b32|u32)", ptx) and not re.search(r"ld\.shared\.(b16|u16)", ptx)
        assert not re.search(r"st\.shared\.f32", ptx) and re.search(r"shfl\.sync\.bfly\.b32", ptx)
    else:
        asm = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", str(out)], capture_output=True, text=True,
                             check=True).stdout
        # gfx950 at block_n 32: MFMA 16x16x32 (twice 16x16x16's K); gfx942: 16x16x16
        want = {"wmma": r"v_wmma_f32_16x16x32_", "gfx950": r"v_mfma_f32_16x16x32_(f16|bf16)"}.get(
            path if path == "wmma" else arch, r"v_mfma_f32_16x16x16_?(f16|bf16)")
        assert len(re.findall(want, asm)) >= 2 and "v_exp_f32" in asm, asm[:2000]
        # K/V staged by 16-byte global loads, fragments read from LDS 8 or 16 bytes at a time (MFMA runs of 4
        # elements, WMMA 8), never one element
        assert re.search(r"global_load_(dwordx4|b128)", asm) and re.search(r"ds_(read|load)2?_b(64|128)", asm)
        assert not re.search(r"ds_(read|load)_u16", asm)
        assert doc["code_object"]["vgpr_spill_count"] == 0


# -- packed variable lengths (cu_seqlens), paged KV (shuffled block tables), the LSE output --------------
LAYOUT_CASES = [  # (arch, problem): the layout specs (varlen / paged), run with the arguments their launch binds
    ("gfx942", dict(batch=3, seqlen_q=37, seqlen_k=53, heads_q=4, heads_kv=2, head_dim=64, causal=True, lse=True,
                    seqlens_q=[37, 0, 5], seqlens_k=[53, 3, 2])),  # empty sequence; causal rows with no key
    ("gfx950", dict(batch=2, seqlen_q=1, seqlen_k=150, heads_q=4, heads_kv=1, head_dim=128, dtype="bf16",
                    kv_layout="paged", block_size=16, num_blocks=23, lse=True)),  # decode, MQA, spare blocks
    ("gfx942", dict(batch=3, seqlen_q=20, seqlen_k=70, heads_q=2, heads_kv=2, head_dim=64, causal=True, window=7,
                    kv_layout="paged", block_size=32, seqlens_q=[9, 0, 20], seqlens_k=[70, 3, 20], lse=True)),
    ("gfx1250", dict(batch=2, seqlen_q=17, seqlen_k=130, heads_q=2, heads_kv=1, head_dim=64, kv_layout="paged",
                     block_size=64, seqlens_q=[3, 17], seqlens_k=[130, 17])),
    ("sm_90", dict(batch=2, seqlen_q=2, seqlen_k=70, heads_q=4, heads_kv=2, head_dim=128, causal=True, lse=True,
                   kv_layout="paged", block_size=16, seqlens_q=[1, 2], seqlens_k=[45, 70])),
    ("sm_90", dict(batch=2, seqlen_q=20, seqlen_k=40, heads_q=2, heads_kv=1, head_dim=256, dtype="bf16",
                   seqlens_q=[20, 3], seqlens_k=[20, 40])),
]


def _layout_spec(arch: str, p: AttentionProblem):
    from rocke_aot.variants import table

    fam = aot_family("attention")
    lane = "llvm24" if arch == "gfx1250" else "llvm22"
    for spec in table.enumerate_specs("attention", arch, lane):
        if spec.layout and fam.model.accepts(spec, p) is None:
            return spec
    raise AssertionError(f"no native attention spec accepts {p} on {arch}")


@pytest.mark.parametrize("i", range(len(LAYOUT_CASES)))
def test_the_emulated_layout_kernels_are_sdpa(i):
    from rocke_aot.families.attention.reference import REFERENCE, compute, compute_lse
    from rocke_aot.runner import reference as runner_ref
    from rocke_aot.variants.families import get_family

    arch, shape = LAYOUT_CASES[i]
    p = AttentionProblem(**shape)
    spec = _layout_spec(arch, p)
    assert (spec.varlen, spec.paged) == (int(p.varlen), int(p.paged))
    k = lower("attention", spec, arch, "llvm22")
    plan = get_family("attention").launch(spec, p, arch)
    rng = np.random.default_rng(50 + i)
    vals, args, bufs = {}, [], {}
    for a in plan.args:
        if a.kind == "scalar":
            args.append(a.value)
            continue
        got = REFERENCE.inputs(p, a.name, a.dtype, a.value, rng)
        if a.name in ("O", "LSE"):  # outputs poisoned (NaN): an unwritten element fails
            bits = np.full(max(1, a.value), 0xFFFF if a.name == "O" else np.nan, dtype=runner_ref.storage_dtype(a.dtype))
        elif got is None:
            bits, vals[a.name] = runner_ref.inputs(a.dtype, a.value, rng)
        else:
            bits, vals[a.name] = got
        bits = np.ascontiguousarray(bits) if bits.size else np.zeros(1, dtype=bits.dtype)
        bufs[a.name] = bits
        args.append(bits)
    CpuGrid(k, wave_size=PATHS[arch][1]).launch(plan.grid[0], *args)
    got = runner_ref.decode(bufs["O"][:p.total_q * p.heads_q * p.head_dim], p.dtype)
    want = compute(p, vals)
    lim = error_bound(p, vals, want, p.dtype)
    assert np.isfinite(got).all(), "unwritten or non-finite outputs"
    bad = np.abs(got - want) > lim
    assert not bad.any(), f"{int(bad.sum())} of {got.size} outside the bound, max err {np.abs(got - want).max():.3g}"
    if not p.lse:
        return
    lse_got, lse_want = bufs["LSE"][:p.lse_rows].astype(np.float64), compute_lse(p, vals)
    assert lse_want.size == p.lse_rows
    assert np.array_equal(np.isneginf(lse_got), np.isneginf(lse_want)), "rows with no key differ (-inf)"
    fin = np.isfinite(lse_want)
    assert fin.any() and np.isfinite(lse_got[fin]).all()
    err = np.abs(lse_got[fin] - lse_want[fin])
    assert (err <= 1e-4 * (1 + np.abs(lse_want[fin]))).all(), f"LSE max err {err.max():.3g}"


def test_the_layout_cases_reach_their_edges():
    """The cases above hold what they name: an empty sequence, causal rows that see no key (LSE -inf), shuffled
    block tables over a pool with spare blocks, lengths no multiple of a block or a tile."""
    from rocke_aot.families.attention.reference import block_table

    ps = [AttentionProblem(**s) for _, s in LAYOUT_CASES]
    assert 0 in ps[0].lengths()[0] and ps[0].lengths()[0][0] > ps[0].lengths()[1][1]  # 5 queries, 2 keys
    assert ps[1].num_blocks > sum(-(-n // 16) for n in ps[1].lengths()[1])
    t = block_table(ps[2], np.random.default_rng(0))
    assert not (np.diff(t[0, :3]) == 1).all()  # not the identity order
    assert {"gfx942", "gfx950", "gfx1250", "sm_90"} == {a for a, _ in LAYOUT_CASES}
