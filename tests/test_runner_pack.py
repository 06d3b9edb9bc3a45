"""Kernel-argument packing from real code objects, chunked launches, and the bench CLI's edges.

    build_one(fam, spec, gfx942 | gfx1250 | sm_90)  (real llvmlite 0.50 + ld.lld / ptxas)
        -> metadata["launch"] -> runner.run.pack(plan, pointers)
        -> every argument read back at the offset and size llvm-readelf-22 --notes reports
           (AMDGPU), or the PTX .param list (sm_90), equals the pointer / the problem's value
"""

from __future__ import annotations

import re
import struct

import pytest
from click.testing import CliRunner
from test_launch import _readelf_args

from rocke_aot.aot.builder.run import build_one
from rocke_aot.cli.main import cli
from rocke_aot.lanes import get_lane
from rocke_aot.launch import LaunchContract
from rocke_aot.runner.run import launches, pack
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem


def _problem(fam, spec):
    if fam == "gemm":
        return GemmProblem(m=1000, n=77, k=129, dtype=spec.in_dtype)
    if fam == "conv_direct_fwd":
        return ConvProblem(n=3, h=17, w=23, c=spec.c, k=spec.k, r=spec.r, s=spec.s, stride_h=spec.stride_h,
                           stride_w=spec.stride_w, pad_h=spec.pad_h, pad_w=spec.pad_w, dil_h=spec.dil_h,
                           dil_w=spec.dil_w, dtype=spec.dtype)
    return PatchDgradProblem(n=2, h=5 * spec.p + 3, w=4 * spec.p, c=spec.c, k=96, p=spec.p, dtype=spec.dtype)


@pytest.fixture(scope="module")
def built(llvm22):
    out = {}
    for fam in ("gemm", "conv_direct_fwd", "conv_dgrad_patch"):
        for arch in ("gfx942", "gfx1250", "sm_90"):
            spec = next(iter(table.enumerate_specs(fam, arch, "llvm22")))
            out[fam, arch] = (spec, build_one(fam, spec.to_dict(), Target.parse(arch), get_lane("llvm22"), llvm22))
    return out


def _hand_values(fam, p):
    # the kernels' scalar arguments, written out from each family's documented signature
    if fam == "gemm":
        return {"M": p.m, "N": p.n, "K": p.k}
    if fam == "conv_direct_fwd":
        return {"N": p.n, "H": p.h, "W": p.w}
    return {"N": p.n, "H": p.h, "W": p.w, "K": p.k}


@pytest.mark.parametrize("arch", ["gfx942", "gfx1250"])
@pytest.mark.parametrize("fam", ["gemm", "conv_direct_fwd", "conv_dgrad_patch"])
def test_packed_arguments_sit_where_llvm_readelf_says(built, tmp_path, fam, arch):
    spec, res = built[fam, arch]
    f = tmp_path / "k.hsaco"
    f.write_bytes(res.code_object)
    elf_args, size = _readelf_args(f)
    contract = LaunchContract.from_dict(res.metadata["launch"])
    prob = _problem(fam, spec)
    pointers = {a.name: 0x7F00_0000_0000 + 0x1000 * i for i, a in enumerate(contract.args) if a.kind == "global_pointer"}
    ka = pack(contract.plan(prob), pointers)
    assert len(ka.buffer) == size
    scalars = _hand_values(fam, prob)
    assert [int(w["offset"]) for w in elf_args] == list(ka.offsets)
    for w in elf_args:
        off, sz = int(w["offset"]), int(w["size"])
        raw = ka.buffer[off:off + sz]
        if w["value_kind"] == "global_buffer":
            assert sz == 8 and struct.unpack("<Q", raw)[0] == pointers[w["name"]]
        else:
            assert w["value_kind"] == "by_value" and sz == 4
            assert struct.unpack("<i", raw)[0] == scalars[w["name"]]


@pytest.mark.parametrize("fam", ["gemm", "conv_direct_fwd", "conv_dgrad_patch"])
def test_sm90_packing_follows_the_ptx_params(built, fam):
    spec, res = built[fam, "sm_90"]
    contract = LaunchContract.from_dict(res.metadata["launch"])
    from rocke_aot.aot.lower import lower

    k = lower(fam, spec, "sm_90", "llvm22")
    # .param lines of the entry, in order, as ptxas reads them (the PTX the lowering compiles)
    import sys

    from rocke_aot.aot.compiler import compile_llvmlite

    ptx = compile_llvmlite(sys.executable, k.ir, "sm_90").ptx
    params = re.findall(r"^\s*\.param \.(u64|u32|s32|b32|b64) (?:\.ptr \.global \.align \d+ )?[\w$]+_param_(\d+)", ptx, re.M)
    assert [int(i) for _, i in params] == list(range(len(contract.args)))
    sizes = [8 if t.endswith("64") else 4 for t, _ in params]
    assert sizes == [a.size for a in contract.args]
    prob = _problem(fam, spec)
    ka = pack(contract.plan(prob), {a.name: 0x1000 * (i + 1) for i, a in enumerate(contract.args)})
    # natural layout: each parameter at the next offset aligned to its size
    off = 0
    for a, sz in zip(contract.args, sizes):
        off = -(-off // sz) * sz
        assert a.offset == off
        off += sz
    values = {"M": prob.m, "N": prob.n, "K": prob.k} if fam == "gemm" else {
        "N": prob.n, "H": prob.h, "W": prob.w, **({"K": prob.k} if fam == "conv_dgrad_patch" else {})}
    for i, (a, sz) in enumerate(zip(contract.args, sizes)):
        raw = ka.buffer[a.offset:a.offset + sz]
        assert struct.unpack("<Q" if sz == 8 else "<i", raw)[0] == (0x1000 * (i + 1) if sz == 8 else values[a.name])


def test_chunked_gemm_launches_advance_the_row_pointers(built):
    spec, res = built["gemm", "gfx942"]
    contract = LaunchContract.from_dict(res.metadata["launch"])
    m, n, k = 2**20 + 3, 1024, 1024  # A is 2 GiB + 6 KiB of f16: over the 32-bit offset limit
    prob = GemmProblem(m=m, n=n, k=k, dtype=spec.in_dtype)
    assert contract.plan(prob).over_limit
    base = {"A": 1 << 40, "B": 2 << 40, "C": 3 << 40}
    todo = launches(contract, prob, base)
    e_in = 2
    e_out = {"f32": 4, "f16": 2, "bf16": 2}[spec.out_dtype]
    limit = 2**31 - 1
    rows = [struct.unpack_from("<i", ln.args.buffer, contract.args[3].offset)[0] for ln in todo]
    assert sum(rows) == m and all(r > 0 for r in rows) and len(todo) >= 2
    start = 0
    for ln, r in zip(todo, rows):
        a_ptr, b_ptr, c_ptr = struct.unpack_from("<QQQ", ln.args.buffer, 0)
        # written from the row-major layout: A row i starts at i*K elements, C row i at i*N
        assert a_ptr == base["A"] + start * k * e_in
        assert b_ptr == base["B"]  # B is shared by every chunk
        assert c_ptr == base["C"] + start * n * e_out
        assert r * k * e_in <= limit and r * n * e_out <= limit
        assert ln.grid[0] == -(-r // spec.block_m) * -(-n // spec.block_n)
        start += r


def test_chunked_conv_splits_the_batch(built):
    spec, res = built["conv_direct_fwd", "gfx942"]
    contract = LaunchContract.from_dict(res.metadata["launch"])
    h = w = 512
    per_image = h * w * spec.c * 2
    n = (2**31) // per_image + 5
    prob = ConvProblem(n=n, h=h, w=w, c=spec.c, k=spec.k, r=spec.r, s=spec.s, stride_h=spec.stride_h,
                       stride_w=spec.stride_w, pad_h=spec.pad_h, pad_w=spec.pad_w, dil_h=spec.dil_h,
                       dil_w=spec.dil_w, dtype=spec.dtype)
    oh, ow = prob.out_hw
    todo = launches(contract, prob, {"X": 0, "Wt": 1 << 44, "Y": 1 << 45})
    counts = [struct.unpack_from("<i", ln.args.buffer, contract.args[3].offset)[0] for ln in todo]
    assert sum(counts) == n and len(todo) >= 2 and len(set(counts[:-1])) == 1 and counts[-1] <= counts[0]
    start = 0
    for ln, c in zip(todo, counts):
        x, wt, y = struct.unpack_from("<QQQ", ln.args.buffer, 0)
        assert x == start * per_image and wt == 1 << 44 and y == (1 << 45) + start * oh * ow * spec.k * 2
        start += c


def test_bench_refuses_bad_input_before_looking_for_a_gpu(tmp_path):
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "sm_90", "--family", "gemm",
                                 "--problem", '{"m": 64}'])
    assert r.exit_code == 2 and "n" in r.output
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "sm_90", "--family", "nope",
                                 "--problem", '{"m": 64, "n": 1, "k": 1}'])
    assert r.exit_code == 2 and "family 'nope'" in r.output
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "sm_90", "--family", "gemm",
                                 "--problem", '{"m": 64, "n": 1, "k": 1}', "--candidates", "top:0"])
    assert r.exit_code == 2 and "top:N" in r.output


def test_bench_is_a_named_skip_without_a_gpu(tmp_path):
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "gfx942", "--family", "gemm",
                                 "--problem", '{"m": 64, "n": 64, "k": 64}', "--cache", str(tmp_path / "c.sqlite")])
    assert r.exit_code == 77 and "Skipped: HIP runtime unavailable" in r.output
