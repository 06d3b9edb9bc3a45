"""Matrix-instruction lane layouts: the numpy model (rocke_aot/mma.py) against the documented
formulas and against the independent ISA reference (tests/_isa_ref.py, found through the
intrinsic each lane profile declares), and the index maps the lowering emits (Sym -> IR, run
on the host) against the model.
"""

from __future__ import annotations

import ctypes

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest
from _isa_ref import REFS

from rocke_aot import lanes, mma
from rocke_aot.aot.lower.module import I32, Sym
from rocke_aot.errors import CapabilityError

LANES64 = np.arange(64)


def _layout(instr, coord, count):
    lane = np.arange(instr.wave_size)
    return [tuple(np.broadcast_to(x, lane.shape) for x in coord(lane, j)) for j in range(count)]


# -- the documented layouts, written out independently of mma.py (DESIGN.md, AMD docs) ----
def _assert_wave64_ab(ins, m: int, kpl: int) -> None:
    """The wave64 MFMA rule for A and B: lane l holds A[l % m][kpl (l // m) + j], B[kpl (l // m) + j][l % m]."""
    l = LANES64
    for j in range(kpl):
        r, c = ins.a_coord(l, j)
        assert (r == l % m).all() and (c == kpl * (l // m) + j).all()
        k, n = ins.b_coord(l, j)
        assert (k == kpl * (l // m) + j).all() and (n == l % m).all()


def _assert_16x16_d(ins) -> None:
    """The 16x16 f32 result: register r of lane l holds D[4 (l // 16) + r][l % 16]."""
    l = LANES64
    for reg in range(4):
        r, c = ins.d_coord(l, reg)
        assert (r == 4 * (l // 16) + reg).all() and (c == l % 16).all()


def test_16x16x16_f16_matches_documented_layout():
    ins = mma.INSTRS["mfma_f32_16x16x16f16"]
    _assert_wave64_ab(ins, 16, 4)
    _assert_16x16_d(ins)


def test_32x32x8_f16_matches_documented_layout():
    ins = mma.INSTRS["mfma_f32_32x32x8f16"]
    l = LANES64
    _assert_wave64_ab(ins, 32, 4)
    for reg in range(16):
        r, c = ins.d_coord(l, reg)
        assert (r == 8 * (reg // 4) + 4 * (l // 32) + reg % 4).all() and (c == l % 32).all()


def test_gfx950_32x32x16_eight_consecutive_k_per_lane():
    for key in ("mfma_f32_32x32x16_f16", "mfma_f32_32x32x16_bf16"):
        ins = mma.INSTRS[key]
        assert ins.a_per_lane == 8 and ins.acc_per_lane == 16
        l = LANES64
        for j in range(8):
            r, c = ins.a_coord(l, j)
            assert (r == l % 32).all() and (c == 8 * (l // 32) + j).all()
        # the result layout is the 32x32 one of 32x32x8
        ref = mma.INSTRS["mfma_f32_32x32x8f16"]
        for reg in range(16):
            assert all((a == b).all() for a, b in zip(ins.d_coord(l, reg), ref.d_coord(l, reg)))


def test_gfx950_16x16x32_eight_consecutive_k_per_lane_and_its_matmul():
    # CDNA4 (composable_kernel's gfx950 16x16x32 traits: kABKPerLane = 8, the C layout of 16x16x16):
    # lane l holds A[l % 16][8 (l // 16) + j], B[8 (l // 16) + j][l % 16], D[4 (l // 16) + r][l % 16]
    rng = np.random.default_rng(3)
    for key in ("mfma_f32_16x16x32_f16", "mfma_f32_16x16x32_bf16"):
        ins = mma.INSTRS[key]
        assert (ins.m, ins.n, ins.k, ins.a_per_lane, ins.b_per_lane, ins.acc_per_lane) == (16, 16, 32, 8, 8, 4)
        assert mma.select("gfx950", "mfma", ins.in_dtype, "16x16x32") is ins
        with pytest.raises(CapabilityError, match="16x16x32 is not available on gfx942"):
            mma.select("gfx942", "mfma", ins.in_dtype, "16x16x32")
        _assert_wave64_ab(ins, 16, 8)
        _assert_16x16_d(ins)
        # the ISA reference, fed registers packed by the formula above, computes numpy's a @ b + c
        a, b, c = rng.standard_normal((16, 32)), rng.standard_normal((32, 16)), rng.standard_normal((16, 16))
        fa = np.array([[a[i % 16, 8 * (i // 16) + j] for j in range(8)] for i in range(64)])
        fb = np.array([[b[8 * (i // 16) + j, i % 16] for j in range(8)] for i in range(64)])
        fc = np.array([[c[4 * (i // 16) + r, i % 16] for r in range(4)] for i in range(64)])
        fd = REFS[_declared(key)].execute(fa, fb, fc)
        d = a @ b + c
        want = np.array([[d[4 * (i // 16) + r, i % 16] for r in range(4)] for i in range(64)])
        np.testing.assert_allclose(fd, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(mma.execute(ins, fa, fb, fc), want, rtol=1e-12, atol=1e-12)


def test_gfx1250_wmma_16x16x32_layout():
    ins = mma.INSTRS["wmma_f32_16x16x32_f16"]
    assert (ins.wave_size, ins.a_per_lane, ins.acc_per_lane) == (32, 16, 8)
    l = np.arange(32)
    # lanes 0-15: K 0..7 then 16..23; lanes 16-31: K 8..15 then 24..31 (row = lane % 16)
    expect_k = {j: np.where(l < 16, (0 if j < 8 else 16) + j % 8, (8 if j < 8 else 24) + j % 8)
                for j in range(16)}
    for j in range(16):
        r, c = ins.a_coord(l, j)
        assert (r == l % 16).all() and (c == expect_k[j]).all()
        k, n = ins.b_coord(l, j)
        assert (k == expect_k[j]).all() and (n == l % 16).all()
    for reg in range(8):
        r, c = ins.d_coord(l, reg)
        assert (r == reg + 8 * (l // 16)).all() and (c == l % 16).all()


def test_nvptx_mma_m16n8k16_matches_the_ptx_fragment_table():
    # PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type", written forward:
    # groupID = laneid >> 2, threadID_in_group = laneid % 4
    for key in ("mma_f32_16x8x16_f16", "mma_f32_16x8x16_bf16"):
        ins = mma.INSTRS[key]
        assert (ins.wave_size, ins.a_per_lane, ins.b_per_lane, ins.acc_per_lane) == (32, 8, 4, 4)
        l = np.arange(32)
        g, t = l >> 2, l % 4
        for i in range(8):
            r, c = ins.a_coord(l, i)
            assert (r == (g if i < 2 or 4 <= i < 6 else g + 8)).all()
            assert (c == t * 2 + (i & 1) + (8 if i >= 4 else 0)).all()
        for i in range(4):
            k, n = ins.b_coord(l, i)
            assert (k == t * 2 + (i & 1) + (8 if i >= 2 else 0)).all() and (n == g).all()
            r, c = ins.d_coord(l, i)
            assert (r == (g if i < 2 else g + 8)).all() and (c == t * 2 + (i & 1)).all()


# -- against the independent ISA reference (tests/_isa_ref.py) ---------------------------
def _declared(key: str) -> str:
    """The one LLVM intrinsic every lane profile that has instruction ``key`` declares for it."""
    names = {lane.profile.intrinsics[key].name for lane in lanes.LANES if key in lane.profile.intrinsics}
    assert len(names) == 1, f"{key}: profiles disagree on the intrinsic: {sorted(names)}"
    return names.pop()


def _elements(type_text: str) -> int:
    """16-bit (or f32) elements one intrinsic parameter carries: <4 x half> 4, i32 2, float 1."""
    t = type_text.strip()
    if t.startswith("<"):
        return int(t[1:].split(" x ")[0])
    return {"i32": 2, "float": 1}[t]


def test_every_instruction_the_tables_can_select_has_a_reference():
    used = {key for table in mma._BY_ARCH.values() for key in table.values()}
    assert used == set(mma.INSTRS)
    assert {_declared(k) for k in used} == set(REFS), "a reference without an instruction, or vice versa"


@pytest.mark.parametrize("key", sorted(mma.INSTRS))
def test_instruction_maps_equal_the_isa_reference(key):
    ins = mma.INSTRS[key]
    ref = REFS[_declared(key)]
    assert (ins.m, ins.n, ins.k, ins.wave_size, ins.in_dtype) == (ref.m, ref.n, ref.k, ref.wave, ref.dtype)
    assert (ins.a_per_lane, ins.b_per_lane, ins.acc_per_lane) == (ref.a_regs, ref.b_regs, ref.d_regs)
    lane = np.arange(ins.wave_size)
    for what, coord, tab, count in (("A", ins.a_coord, ref.a_table(), ins.a_per_lane),
                                    ("B", ins.b_coord, ref.b_table(), ins.b_per_lane),
                                    ("D", ins.d_coord, ref.d_table(), ins.acc_per_lane)):
        for j in range(count):
            r, c = (np.broadcast_to(x, lane.shape) for x in coord(lane, j))
            assert (r == tab[:, j, 0]).all() and (c == tab[:, j, 1]).all(), f"{key}: {what} element {j}"


@pytest.mark.parametrize("key", sorted(mma.INSTRS))
def test_profile_declarations_carry_the_reference_operands(key):
    # The operands the profile declares at the reference's A / B / C positions hold exactly the
    # fragment sizes the reference reads, for every lane profile with the instruction.
    ref = REFS[_declared(key)]
    for lane in lanes.LANES:
        decl = lane.profile.intrinsics.get(key)
        if decl is None:
            continue
        sizes = [sum(_elements(decl.params[i]) for i in idx) for idx in (ref.a_params, ref.b_params, ref.c_params)]
        assert sizes == [ref.a_regs, ref.b_regs, ref.d_regs], (lane.name, decl)
        assert sum(_elements(t) for t in decl.ret.strip("{}").split(",")) == ref.d_regs


@pytest.mark.parametrize("key", sorted(mma.INSTRS))
def test_model_and_reference_compute_the_same_registers(key):
    ins = mma.INSTRS[key]
    ref = REFS[_declared(key)]
    rng = np.random.default_rng(1)
    fa = rng.standard_normal((ins.wave_size, ins.a_per_lane))
    fb = rng.standard_normal((ins.wave_size, ins.b_per_lane))
    fc = rng.standard_normal((ins.wave_size, ins.acc_per_lane))
    np.testing.assert_allclose(mma.execute(ins, fa, fb, fc), ref.execute(fa, fb, fc), rtol=1e-12, atol=1e-12)


def test_reference_rejects_a_layout_that_is_not_a_bijection():
    ref = REFS["llvm.nvvm.mma.m16n8k16.row.col.bf16"]
    import dataclasses

    broken = dataclasses.replace(ref, a_owner=lambda r, c: (4 * (r % 8) + (c % 8) // 2, c % 2))  # rows 8-15 lost
    with pytest.raises(AssertionError, match="bijection"):
        broken.a_table()


# -- the model ----------------------------------------------------------------------
@pytest.mark.parametrize("key", sorted(mma.INSTRS))
def test_layout_covers_each_element_once_and_executes_a_matmul(key):
    ins = mma.INSTRS[key]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((ins.m, ins.k))
    b = rng.standard_normal((ins.k, ins.n))
    c = rng.standard_normal((ins.m, ins.n))
    fa, fb = mma.fragments(ins, a, b)
    assert fa.shape == (ins.wave_size, ins.a_per_lane)
    fd = mma.execute(ins, fa, fb, mma.accumulator(ins, c))
    lane = np.arange(ins.wave_size)
    d = a @ b + c
    for r in range(ins.acc_per_lane):
        np.testing.assert_allclose(fd[:, r], d[ins.d_coord(lane, r)], rtol=1e-12)


def test_model_rejects_a_layout_that_drops_elements():
    ins = mma.INSTRS["mfma_f32_32x32x8f16"]
    fa = np.zeros((64, 4))
    broken = mma.MmaInstr(ins.key, ins.mnemonic, ins.kind, ins.m, ins.n, ins.k, ins.wave_size,
                          ins.in_dtype, ins.capability)
    object.__setattr__(broken, "a_coord", lambda lane, j: (lane % 32, 0 * lane + j))  # K 4..7 lost
    with pytest.raises(AssertionError, match="exactly once"):
        mma.execute(broken, fa, fa, np.zeros((64, 16)))


def test_arch_instruction_table():
    assert mma.select("gfx942", "mfma", "f16").key == "mfma_f32_32x32x8f16"
    assert mma.select("gfx90a", "mfma", "bf16").key == "mfma_f32_32x32x8bf16_1k"
    assert mma.select("gfx950", "mfma", "f16").key == "mfma_f32_32x32x16_f16"
    assert mma.select("gfx950", "mfma", "bf16", "32x32x8").key == "mfma_f32_32x32x8bf16_1k"
    assert mma.select("gfx1250", "wmma", "bf16").key == "wmma_f32_16x16x32_bf16"
    with pytest.raises(CapabilityError, match="32x32x16 is not available on gfx942"):
        mma.select("gfx942", "mfma", "f16", "32x32x16")
    with pytest.raises(CapabilityError, match="not available on sm_90"):
        mma.select("sm_90", "mfma", "f16")
    assert mma.select("sm_90", "mma", "bf16").key == "mma_f32_16x8x16_bf16"
    assert mma.shapes_for("sm_90", "mma", "f16") == ("16x8x16",)
    with pytest.raises(CapabilityError, match="mma with f16 inputs is not available on gfx942"):
        mma.select("gfx942", "mma", "f16")
    with pytest.raises(CapabilityError):
        mma.select("gfx1250", "mfma", "f16")


# -- the maps the lowering emits: Sym builds IR with the same functions; run it on the host ---
@pytest.fixture(scope="module")
def host_jit():
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    engines = []

    def build(funcs):
        """funcs: name -> python fn(Sym) -> Sym; returns name -> ctypes fn(lane) -> int."""
        mod = ir.Module(name="coords")
        for name, fn in funcs.items():
            f = ir.Function(mod, ir.FunctionType(I32, [I32]), name)
            b = ir.IRBuilder(f.append_basic_block())
            out = fn(Sym(b, f.args[0]))
            b.ret(out.v if isinstance(out, Sym) else ir.Constant(I32, int(out)))
        tm = llvm.Target.from_default_triple().create_target_machine()
        m = llvm.parse_assembly(str(mod))
        ee = llvm.create_mcjit_compiler(m, tm)
        ee.finalize_object()
        engines.append(ee)
        proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)
        return {n: proto(ee.get_function_address(n)) for n in funcs}

    return build


@pytest.mark.parametrize("key", sorted(mma.INSTRS))
def test_emitted_index_maps_equal_the_model(host_jit, key):
    ins = mma.INSTRS[key]
    funcs = {}
    for what, coord, count in (("a", ins.a_coord, ins.a_per_lane), ("b", ins.b_coord, ins.b_per_lane),
                               ("d", ins.d_coord, ins.acc_per_lane)):
        for j in range(count):
            for axis in (0, 1):
                funcs[f"{what}_{j}_{axis}"] = (lambda c, j, axis: lambda lane: c(lane, j)[axis])(coord, j, axis)
    fns = host_jit(funcs)
    lane = np.arange(ins.wave_size)
    for name, fn in fns.items():
        what, j, axis = name.split("_")
        coord = {"a": ins.a_coord, "b": ins.b_coord, "d": ins.d_coord}[what]
        expect = np.broadcast_to(coord(lane, int(j))[int(axis)], lane.shape)
        got = np.array([fn(int(x)) for x in lane])
        assert (got == expect).all(), name
