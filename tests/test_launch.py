"""The family registry and the launch contract.

    formulas          the safe evaluator against Python arithmetic; unknown names, functions,
                      syntax and division by zero are named errors; no eval()
    registry          one entry per family; every lowerer named as data resolves; the old
                      registrations (TABLES, MODELS, PROBLEM_TYPES, FAMILY) are gone
    grid              for every family (parametrized over the registry), on many problems
                      including ragged ones: the contract's grid == entry.launch(spec, problem)
                      == a hand formula written here (output extents counted by brute force)
    kernargs          a really compiled gfx942 and gfx1250 object per family (built by the
                      builder's build_one): metadata["launch"] offsets/sizes == what
                      llvm-readelf-22 --notes prints, field by field; sm_90: PTX .param list
    refusals          GemmProblem.batch > 1, a problem a spec cannot run, a layout that
                      disagrees with the code object or the PTX
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocke_aot import launch as L
from rocke_aot.aot.builder.run import build_one
from rocke_aot.aot.codeobject import launch_layout, ptx_params, validate
from rocke_aot.aot.families import get_family
from rocke_aot.aot.lower import lower
from rocke_aot.errors import CodeObjectError, SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import efficiency, table
from rocke_aot.variants import families as registry
from rocke_aot.variants.families import FAMILIES, problem_from_dict
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem

READELF = shutil.which("llvm-readelf-22") or "/usr/lib/llvm-22/bin/llvm-readelf"

# The families rocke-aot ships with an LLVM IR lowerer: the hand formulas below are theirs (a
# plugin family installed in the environment, such as examples/plugin-rowsoftmax, is checked by
# tests/test_plugins.py; the Triton families by tests/test_triton_family.py).
BUILTIN = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")  # family folders (rocke_aot/families/<name>, entry points)


# -- the evaluator ---------------------------------------------------------------------------

@pytest.mark.parametrize("text,env,want", [
    ("1 + 2 * 3", {}, 7),
    ("(1 + 2) * 3", {}, 9),
    ("10 - 4 - 3", {}, 3),                       # left associative
    ("-7 // 2", {}, -4),                         # floor division, as Python
    ("h + -3", {"h": 5}, 2),
    ("17 % 5 * 2", {}, 4),
    ("ceil_div(m, 64)", {"m": 129}, 3),
    ("ceil_div(m, 64)", {"m": 128}, 2),
    ("ceil_div(0, 1024)", {}, 0),
    ("min(a, b, 3)", {"a": 9, "b": 4}, 3),
    ("max((h + -3) // 2 + 1, 0)", {"h": 1}, 0),
    ("n * ceil_div(oh, 8) * 2", {"n": 3, "oh": 17}, 18),
])
def test_formulas_evaluate_like_integer_arithmetic(text, env, want):
    assert L.evaluate(text, env) == want


def test_formulas_agree_with_python_on_random_expressions():
    rng = random.Random(3)
    for _ in range(300):
        a, b, c = rng.randint(-50, 50), rng.randint(1, 40), rng.randint(-9, 9)
        env = {"a": a, "b": b, "c": c}
        assert L.evaluate("a * c + b // 3 - (a % b)", env) == a * c + b // 3 - (a % b)
        assert L.evaluate("ceil_div(a, b) * max(c, 1)", env) == math.ceil(a / b) * max(c, 1)


def test_an_unknown_name_is_a_named_error():
    with pytest.raises(L.FormulaError, match="unknown name 'q'"):
        L.evaluate("m * q", {"m": 2})
    # found when the formulas are built, before anything is launched
    with pytest.raises(L.FormulaError, match=r"grid.x: formula 'tiles \* z' reads unknown name\(s\) z"):
        L.LaunchFormulas(problem=("m",), lets=(("tiles", "m"),), grid=("tiles * z", "1", "1"), args=())
    with pytest.raises(L.FormulaError, match="argument A.*unknown name.*nope"):
        L.LaunchFormulas(problem=("m",), lets=(("tiles", "m"),), grid=("tiles", "1", "1"),
                         args=(L.ArgDef("A", "global_pointer", "f16", "nope"),))


@pytest.mark.parametrize("text,match", [
    ("__import__('os')", "unexpected character"),
    ("m.real", "unexpected character"),
    ("pow(m, 2)", "unknown function 'pow'"),
    ("ceil_div(m)", "ceil_div takes 2 arguments"),
    ("m +", "expected a value"),
    ("(m", r"expected \)"),
    ("m m", "unexpected 'm'"),
    ("", "non-empty"),
])
def test_malformed_formulas_are_refused(text, match):
    with pytest.raises(L.FormulaError, match=match):
        L.evaluate(text, {"m": 1})


def test_division_by_zero_is_named():
    with pytest.raises(L.FormulaError, match="division by zero"):
        L.evaluate("ceil_div(m, z)", {"m": 4, "z": 0})
    with pytest.raises(L.FormulaError, match="modulo by zero"):
        L.evaluate("m % z", {"m": 4, "z": 0})


# -- the registry ------------------------------------------------------------------------------

@pytest.mark.parametrize("fam", BUILTIN)
def test_every_family_is_one_object_found_by_its_name(fam):
    e = get_family(fam)
    assert e is registry.get_family(fam) is FAMILIES[fam]  # one registry, one object
    raw = e.lowerer.raw  # the family folder's own function, its ``rocke_aot.lowerers`` entry point
    assert raw.__module__ == f"rocke_aot.families.{fam}.lower"
    assert e.table.family == fam and registry.family_for_spec(e.spec_type()) is e
    assert dataclasses.is_dataclass(e.problem_type) and dataclasses.is_dataclass(e.spec_type)
    assert set(table.family_names()) == set(FAMILIES) >= set(registry.builtin_family_names()) >= set(BUILTIN)


def test_the_registry_refuses_what_would_make_a_name_ambiguous():
    g = get_family("gemm")
    with pytest.raises(SpecError, match="already registered"):
        registry.register(dataclasses.replace(g))  # an equal but other object under the same name
    with pytest.raises(SpecError, match="belongs to another family"):
        registry.register(dataclasses.replace(g, name="gemm2", table=dataclasses.replace(g.table, family="gemm2")))
    with pytest.raises(SpecError, match="its variant table says gemm"):
        registry.register(dataclasses.replace(g, name="gemm3"))
    with pytest.raises(SpecError, match="already has a lowerer"):
        registry.register_lowerer("gemm", lambda spec, target, lane: None)
    with pytest.raises(SpecError, match="unknown family 'nope'"):
        registry.register_lowerer("nope", lambda spec, target, lane: None)
    assert registry.register(g) is g and "gemm2" not in FAMILIES and "gemm3" not in FAMILIES


def test_a_family_without_its_aot_half_says_so():
    # the variants layer alone (a service host, no compiler): the lowerer is a named error
    code = ("import rocke_aot.variants.families as r, sys\n"
            "assert 'rocke_aot.aot.families' not in sys.modules\n"
            "try:\n    r.get_family('gemm').lowerer\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("SpecError family gemm has no lowerer in this process"), out


def test_the_other_registrations_are_gone():
    import rocke_aot.families.gemm.lower as gemm_mod
    import rocke_aot.variants.problems as problems
    import rocke_aot.variants.tables as tables

    assert not hasattr(tables, "TABLES")
    assert not hasattr(efficiency, "MODELS")
    assert not hasattr(problems, "PROBLEM_TYPES")
    assert not hasattr(gemm_mod, "FAMILY") and not hasattr(gemm_mod, "grid")


# -- grids: contract == launch() == hand formula ----------------------------------------------

def _cdiv(a: int, b: int) -> int:
    return math.ceil(a / b) if a > 0 else 0


def _positions(size: int, filt: int, stride: int, pad: int, dil: int) -> int:
    # output positions counted one by one: o is valid while the dilated filter fits the padded input
    return sum(1 for o in range(size + 2 * pad + 1) if o * stride + dil * (filt - 1) <= size + 2 * pad - 1)


def _hand_grid(fam: str, s, p) -> tuple[int, int]:
    """(grid.x, tile work-groups) written from the kernels' docstrings, not from the code under test."""
    if fam == "gemm":
        t = _cdiv(p.m, s.block_m) * _cdiv(p.n, s.block_n)
        return t, t
    if fam == "conv_direct_fwd":
        oh = _positions(p.h, s.r, s.stride_h, s.pad_h, s.dil_h)
        ow = _positions(p.w, s.s, s.stride_w, s.pad_w, s.dil_w)
        t = p.n * _cdiv(oh, s.tile_h) * _cdiv(ow, s.tile_w) * _cdiv(s.k, s.tile_k)
        return t, t
    hp, wp = p.h // s.p, p.w // s.p
    main = p.n * _cdiv(hp, s.tile_h) * _cdiv(wp, s.tile_w) * (s.p // s.r_blk)
    covered = sum(1 for y in range(p.h) for x in range(p.w) if y < hp * s.p and x < wp * s.p)
    border = p.n * (p.h * p.w - covered) * s.c
    return main + min(_cdiv(border, 1024), 65535), main


def _problems(fam: str, spec, rng: random.Random, count: int = 25) -> list:
    out = []
    for i in range(count):
        small = i < count // 2  # half tiny and ragged, half larger
        hi = 70 if small else 3000
        if fam == "gemm":
            # the cp.async pipeline runs only rows that start 16-byte aligned (K, N multiples
            # of 8); the launch refuses the others (asserted below), so draw those aligned
            step = 8 if spec.stages else 1
            out.append(GemmProblem(rng.randint(1, hi), step * rng.randint(1, hi // step), step * rng.randint(1, hi // step),
                                   dtype=spec.in_dtype, out_dtype=spec.out_dtype))
        elif fam == "conv_direct_fwd":
            b = spec.baked()
            h = rng.randint(b["dil_h"] * (b["r"] - 1) + 1 - 2 * b["pad_h"], 40 if small else 300)
            w = rng.randint(b["dil_w"] * (b["s"] - 1) + 1 - 2 * b["pad_w"], 40 if small else 300)
            out.append(ConvProblem(n=rng.randint(1, 4), h=max(h, 1), w=max(w, 1), **b))
        else:
            p = spec.p
            out.append(PatchDgradProblem(n=rng.randint(1, 3), h=rng.randint(p, 5 * p + p - 1 if small else 40 * p),
                                         w=rng.randint(p, 5 * p + p - 1 if small else 40 * p), c=spec.c,
                                         k=rng.randint(1, 800), p=p, dtype=spec.dtype))
    return out


def _sample_specs(fam: str, arch: str, n: int = 6) -> list:
    specs = list(table.enumerate_specs(fam, arch, "llvm22"))
    return specs[:: max(1, len(specs) // n)]


@pytest.mark.parametrize("arch", ["gfx942", "gfx1250", "sm_90"])
@pytest.mark.parametrize("fam", BUILTIN)
def test_contract_grid_equals_launch_and_the_hand_formula(fam, arch):
    entry = get_family(fam)
    rng = random.Random(hash((fam, arch)) & 0xFFFF)
    for spec in _sample_specs(fam, arch):
        kernel = lower(fam, spec, arch, "llvm22")
        # what a runner gets: the stored form, read back
        contract = L.LaunchContract.from_dict(kernel.as_dict()["launch"])
        for prob in _problems(fam, spec, rng):
            want_grid, want_tiles = _hand_grid(fam, spec, prob)
            plan = contract.plan(prob)
            via_launch = entry.launch(spec, prob, arch)
            assert plan.grid == via_launch.grid == (want_grid, 1, 1), (spec.kernel_name, prob)
            assert plan.block == via_launch.block == (kernel.block_size, 1, 1)
            assert plan.args == via_launch.args
            # the efficiency model counts the same tiles, from the same definition
            assert efficiency.efficiency(spec, prob, arch).tiles == want_tiles
        if fam == "gemm" and spec.stages:
            with pytest.raises(SpecError, match="K and N multiples of 8"):
                entry.launch(spec, GemmProblem(64, 59, 65, dtype=spec.in_dtype), arch)


def test_launch_arguments_are_in_kernarg_order_with_their_values():
    spec = get_family("gemm").spec_type(in_dtype="bf16", out_dtype="f16")
    plan = get_family("gemm").launch(spec, GemmProblem(100, 33, 7, dtype="bf16"), "gfx942")
    assert [(a.name, a.kind, a.dtype, a.offset, a.size) for a in plan.args] == [
        ("A", "global_pointer", "bf16", 0, 8), ("B", "global_pointer", "bf16", 8, 8),
        ("C", "global_pointer", "f16", 16, 8), ("M", "scalar", "i32", 24, 4),
        ("N", "scalar", "i32", 28, 4), ("K", "scalar", "i32", 32, 4)]
    assert [a.value for a in plan.args] == [700, 231, 3300, 100, 33, 7]
    assert [a.nbytes for a in plan.args[:3]] == [1400, 462, 6600]
    assert plan.kernarg_size == 36 and plan.max_tensor_bytes == 2**31 - 1


def test_the_kernel_parameters_are_the_contracts_arguments():
    for fam in BUILTIN:
        spec = _sample_specs(fam, "gfx942", 1)[0]
        k = lower(fam, spec, "gfx942", "llvm22")
        defs = spec.launch_formulas().args
        assert [(a.name, a.kind, a.dtype) for a in k.kernargs] == [(d.name, d.kind, d.dtype) for d in defs]
        # one argument model: the lowering's kernargs ARE the contract's arguments
        assert k.launch.args == k.kernargs
        # and the IR's parameter list is those arguments, in order, typed by kind/dtype
        m = re.search(r'define \S+ void @"?' + re.escape(k.kernel_name) + r'"?\(((?:[^()]|\([^()]*\))*)\)', k.ir)
        params = [p.strip() for p in m.group(1).split(",")]
        assert len(params) == len(defs)
        for p, d in zip(params, defs):
            want = "ptr addrspace(1)" if d.kind == "global_pointer" else {"i32": "i32", "u32": "i32", "i64": "i64"}[d.dtype]
            assert p.startswith(want) and p.split()[-1] in (f"%{d.name}", f'%"{d.name}"'), (p, d)


def test_the_border_clamp_and_the_size_limit_are_in_the_contract():
    spec = next(s for s in table.enumerate_specs("conv_dgrad_patch", "gfx942", "llvm22") if s.p == 16)
    c = lower("conv_dgrad_patch", spec, "gfx942", "llvm22").launch
    p = spec.p  # 512 * 3 * (1615^2 - 1600^2) = 74 M border elements: 72,338 blocks unclamped
    huge = {"n": 512, "h": 100 * p + p - 1, "w": 100 * p + p - 1, "k": 64}
    plan = c.plan(huge)
    main = 512 * _cdiv(100, spec.tile_h) * _cdiv(100, spec.tile_w) * (p // spec.r_blk)
    assert plan.grid[0] == main + 65535  # the border blocks are clamped (they grid-stride)
    assert "dX" in plan.over_limit  # 512 * h * w * C * 2 bytes > 2^31 - 1: the runner must chunk
    with pytest.raises(SpecError, match="over the 2147483647-byte limit"):
        get_family("conv_dgrad_patch").launch(spec, PatchDgradProblem(c=spec.c, p=p, dtype=spec.dtype, **huge),
                                             "gfx942")


def test_a_scalar_that_does_not_fit_its_type_is_refused():
    c = lower("gemm", get_family("gemm").spec_type(), "gfx942", "llvm22").launch
    with pytest.raises(SpecError, match="argument M = 2147483648 does not fit i32"):
        c.plan({"m": 2**31, "n": 1, "k": 1})
    with pytest.raises(SpecError, match="lacks integer field"):
        c.plan({"m": 3, "n": 4})


def test_batched_gemm_is_refused_naming_the_field():
    with pytest.raises(SpecError, match=r"GemmProblem.batch=4"):
        GemmProblem(8, 8, 8, batch=4)
    with pytest.raises(SpecError, match="batch"):
        problem_from_dict("gemm", {"m": 8, "n": 8, "k": 8, "batch": 2})
    assert GemmProblem(8, 8, 8, batch=1).batch == 1


def test_launch_refuses_a_problem_the_spec_cannot_run():
    spec = _sample_specs("conv_direct_fwd", "gfx942", 1)[0]
    b = dict(spec.baked(), c=spec.c + 1)
    with pytest.raises(SpecError, match="input channels C"):
        get_family("conv_direct_fwd").launch(spec, ConvProblem(n=1, h=9, w=9, **b), "gfx942")
    with pytest.raises(SpecError, match="takes a ConvProblem"):
        get_family("conv_direct_fwd").launch(spec, GemmProblem(1, 1, 1), "gfx942")


# -- kernargs: the compiled object, read by llvm-readelf ---------------------------------------

def _readelf_args(path: Path) -> tuple[list[dict], int]:
    """(.args of the one kernel, .kernarg_segment_size) from llvm-readelf --notes' YAML text."""
    text = subprocess.run([READELF, "--notes", str(path)], capture_output=True, text=True, check=True).stdout
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip() in (".args:", "- .args:"))
    args, indent = [], None
    for ln in lines[start + 1:]:
        m = re.match(r"^(\s*)(- )?\.(\w+):\s*(\S*)$", ln)
        if not m:
            break
        lead = len(m.group(1)) + (2 if m.group(2) else 0)
        if indent is None:
            indent = lead
        if lead < indent:
            break  # back at the kernel's own keys
        if m.group(2):
            args.append({})
        args[-1][m.group(3)] = m.group(4)
    size = int(re.search(r"\.kernarg_segment_size:\s*(\d+)", text).group(1))
    return args, size


@pytest.fixture(scope="module")
def built(llvm22):
    """One spec per family, built for gfx942, gfx1250 and sm_90 by the builder's build_one."""
    out = {}
    for fam in BUILTIN:
        for arch in ("gfx942", "gfx1250", "sm_90"):
            spec = _sample_specs(fam, arch, 1)[-1]
            res = build_one(fam, spec.to_dict(), Target.parse(arch), get_lane("llvm22"), llvm22)
            out[fam, arch] = (spec, res)
    return out


@pytest.mark.parametrize("arch", ["gfx942", "gfx1250"])
@pytest.mark.parametrize("fam", BUILTIN)
def test_stored_kernargs_match_llvm_readelf(built, tmp_path, fam, arch):
    spec, res = built[fam, arch]
    f = tmp_path / "k.hsaco"
    f.write_bytes(res.code_object)
    want, size = _readelf_args(f)
    contract = L.LaunchContract.from_dict(res.metadata["launch"])
    assert len(contract.args) == len(want) == len(res.metadata["kernel"]["kernargs"])
    for a, w in zip(contract.args, want):
        assert a.name == w["name"]
        assert a.offset == int(w["offset"])
        assert a.size == int(w["size"])
        assert {"global_pointer": "global_buffer", "scalar": "by_value"}[a.kind] == w["value_kind"]
        if a.kind == "global_pointer":
            assert w["address_space"] == "global"
    assert contract.kernarg_size == size
    assert contract.max_tensor_bytes == 2**31 - 1
    # the stored contract launches like the registry's launch()
    rng = random.Random(11)
    for prob in _problems(fam, spec, rng, 8):
        assert contract.plan(prob).grid == get_family(fam).launch(spec, prob, arch).grid == (_hand_grid(fam, spec, prob)[0], 1, 1)


def test_sm90_contract_matches_the_ptx_params(built):
    for fam in BUILTIN:
        spec, res = built[fam, "sm_90"]
        contract = L.LaunchContract.from_dict(res.metadata["launch"])
        k = lower(fam, spec, "sm_90", "llvm22")
        assert contract == k.launch  # a cubin keeps the lowering's layout, checked against the PTX
        assert contract.block == (str(k.block_size), "1", "1")


def test_a_layout_disagreeing_with_the_code_object_is_refused(llvm22):
    from rocke_aot.aot.compiler import compile_llvmlite

    spec = get_family("gemm").spec_type()
    k = lower("gemm", spec, "gfx942", "llvm22")
    info = validate(compile_llvmlite(llvm22.python, k.ir, "gfx942").code_object, Target.parse("gfx942"))
    assert launch_layout(k.launch, info) == k.launch
    moved = dataclasses.replace(k.launch, args=k.launch.args[:3] + (
        dataclasses.replace(k.launch.args[3], offset=28), dataclasses.replace(k.launch.args[4], offset=32),
        dataclasses.replace(k.launch.args[5], offset=36)), kernarg_size=40)
    with pytest.raises(CodeObjectError, match="argument M is at 24"):
        launch_layout(moved, info)
    renamed = dataclasses.replace(k.launch, args=(k.launch.args[0], dataclasses.replace(k.launch.args[1], name="X"))
                                  + k.launch.args[2:])
    with pytest.raises(CodeObjectError, match="not the lowering's X"):
        launch_layout(renamed, info)

    ks = lower("gemm", spec, "sm_90", "llvm22")
    res = compile_llvmlite(llvm22.python, ks.ir, "sm_90")
    cinfo = validate(res.code_object, Target.parse("sm_90"))
    assert [t for t, _ in ptx_params(res.ptx, ks.kernel_name)] == ["u64"] * 3 + ["u32"] * 3
    assert launch_layout(ks.launch, cinfo, res.ptx) == ks.launch
    bad = res.ptx.replace(f".param .u32 {ks.kernel_name}_param_5", f".param .u64 {ks.kernel_name}_param_5")
    with pytest.raises(CodeObjectError, match="PTX parameter 5 is .u64"):
        launch_layout(ks.launch, cinfo, bad)
    with pytest.raises(CodeObjectError, match="none given"):
        launch_layout(ks.launch, cinfo, None)


# -- chunking: the split axis is data too ------------------------------------------------------

@pytest.mark.parametrize("fam", BUILTIN)
def test_split_strides_account_for_the_split_tensors(fam):
    """Each split pointer holds extent x (elements per unit); the others do not grow with the axis."""
    rng = random.Random(5)
    for spec in _sample_specs(fam, "gfx942", 3):
        c = lower(fam, spec, "gfx942", "llvm22").launch
        for prob in _problems(fam, spec, rng, 10):
            field, extent, units = c.split_units(prob)
            plan = {a.name: a for a in c.plan(prob).args}
            for name, per_unit in units.items():
                assert plan[name].nbytes == extent * per_unit, (name, prob)
            bigger = dataclasses.replace(prob, **{field: extent + 3})
            for a in c.plan(bigger).args:
                if a.kind == "global_pointer" and a.name not in units:
                    assert a.nbytes == plan[a.name].nbytes  # shared by every chunk (weights, B)


def test_a_problem_past_the_limit_chunks_into_launches_that_fit():
    from rocke_aot.runner.chunk import plan_chunks

    spec = _sample_specs("conv_direct_fwd", "gfx942", 1)[0]
    c = lower("conv_direct_fwd", spec, "gfx942", "llvm22").launch
    prob = {"h": 224, "w": 224, "n": 2 * (2**31 // (224 * 224 * spec.c * 2))}  # X: about twice the limit
    assert c.plan(prob).over_limit
    field, extent, units = c.split_units(prob)
    chunks = plan_chunks(extent, units, c.max_tensor_bytes)
    assert len(chunks) >= 2 and sum(ch.count for ch in chunks) == extent
    for ch in chunks:
        assert not c.plan(dict(prob, **{field: ch.count})).over_limit


def test_a_split_naming_an_unknown_field_or_a_scalar_is_refused():
    args = (L.ArgDef("A", "global_pointer", "f16", "m"), L.ArgDef("M", "scalar", "i32", "m"))
    with pytest.raises(L.FormulaError, match="split field 'q' is not a problem field"):
        L.LaunchFormulas(("m",), (("tiles", "m"),), ("tiles", "1", "1"), args, L.Split("q", (("A", "1"),)))
    with pytest.raises(SpecError, match="'M', which is not a pointer argument"):
        L.LaunchFormulas(("m",), (("tiles", "m"),), ("tiles", "1", "1"), args, L.Split("m", (("M", "1"),)))
    with pytest.raises(L.FormulaError, match="split stride of A.*unknown name.*z"):
        L.LaunchFormulas(("m",), (("tiles", "m"),), ("tiles", "1", "1"), args, L.Split("m", (("A", "z"),)))
