"""The CLI's edges: error translation in the group, typed --where, one toolchain chooser for
compile and build, tracebacks of unexpected build failures, plain progress lines, --help
examples. CliRunner for speed, and a few runs of the real binary."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from _kernels import ADD1
from click.testing import CliRunner

from rocke_aot.aot import builder
from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.builder.plan import make_plan, parse_where, spec_field_types, where_for
from rocke_aot.aot.families import families
from rocke_aot.cache.store import Store
from rocke_aot.cli.main import RockeGroup, cli
from rocke_aot.errors import CompileError, IntegrityError, LaneError, SpecError, ToolchainError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table

EXE = str(Path(sys.executable).with_name("rocke-aot"))
# One gemm tile shape on one dtype pair: 4 specs on gfx942 (2 paths x 2 wave counts).
WHERE = ["--where", "block_m=64", "--where", "block_n=64", "--where", "block_k=32", "--where", "in_dtype=f16",
         "--where", "out_dtype=f32", "--where", "double_buffer=false"]
PROGRESS = re.compile(r"built (\d+)/(\d+), cached (\d+), failed (\d+), elapsed \d+s")


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def cache_url(tmp_path):
    return f"sqlite:///{tmp_path / 'cache.sqlite'}"


# -- 1. error translation inside the group -------------------------------------------------

def _group_with(fn):
    """A RockeGroup holding one command whose body is ``fn`` (and a subgroup holding it too)."""
    grp = RockeGroup("g")
    sub = click.Group("sub")
    grp.add_command(click.command("c")(fn))
    sub.add_command(click.command("c")(fn))
    grp.add_command(sub)
    return grp


@pytest.mark.parametrize("exc,code,stderr", [
    (SpecError("block_m=48 must be a power of two"), 2, "Error: block_m=48 must be a power of two\n"),
    (LaneError("unknown compiler lane 'llvm99'"), 2, "Error: unknown compiler lane 'llvm99'\n"),
    (IntegrityError("blob abc does not hash to abc"), 1, "Error: IntegrityError: blob abc does not hash to abc\n"),
    (CompileError("LLVM ERROR: Cannot select", log="..."), 1, "Error: CompileError: LLVM ERROR: Cannot select\n"),
])
@pytest.mark.parametrize("path", [["c"], ["sub", "c"]])
def test_group_translates_library_errors_for_commands_and_subgroups(exc, code, stderr, path):
    def body():
        raise exc

    r = CliRunner().invoke(_group_with(body), path)
    assert (r.exit_code, r.stderr, r.stdout) == (code, stderr, "")
    assert r.exception.__class__ is SystemExit  # handled, not crashed


@pytest.mark.parametrize("rv,code", [(None, 0), (0, 0), (1, 1), (3, 3)])
def test_int_return_is_the_exit_code(rv, code):
    assert CliRunner().invoke(_group_with(lambda: rv), ["c"]).exit_code == code
    assert CliRunner().invoke(_group_with(lambda: rv), ["sub", "c"]).exit_code == code


def test_a_bug_is_not_translated():
    def body():
        raise KeyError("a bug")

    r = CliRunner().invoke(_group_with(body), ["c"])
    assert isinstance(r.exception, KeyError) and r.exit_code == 1


def test_real_commands_exit_codes_through_clirunner(tmp_path, cache_url):
    r = invoke("lower", "--arch", "gfx942", "--lane", "llvm22", "--spec", "{")
    assert r.exit_code == 2 and r.stderr.startswith("Error: --spec is not valid JSON")
    r = invoke("cache", "show", "0" * 64, "--cache", cache_url)
    assert r.exit_code == 1 and r.stderr.startswith("Error: NotFoundError: ")
    r = invoke("build", "--arch", "gfx942", "--family", "nope", "--cache", cache_url)
    assert r.exit_code == 2 and "unknown family 'nope'" in r.stderr


def test_real_binary_exit_codes(tmp_path, cache_url):
    env = {**os.environ, "ROCKE_AOT_HOME": str(tmp_path / "home")}
    p = subprocess.run([EXE, "build", "--arch", "gfx942", "--family", "gemm", "--where", "double_buffer=yes",
                        "--cache", cache_url], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == ("Error: --where double_buffer='yes': family gemm field 'double_buffer' is bool; "
                        "give true or false\n")
    p = subprocess.run([EXE, "cache", "show", "0" * 64, "--cache", cache_url], capture_output=True, text=True, env=env)
    assert p.returncode == 1 and p.stderr.startswith("Error: NotFoundError: ")
    p = subprocess.run([EXE, "--version"], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and "0.1.0" in p.stdout


# -- 2. --where is typed from the spec dataclass -------------------------------------------

@pytest.mark.parametrize("family", families())
def test_field_types_come_from_the_spec_dataclass(family):
    # reference: the type of each field's value in a spec the family's grid makes (a Triton
    # spec has no defaults; the grid's first served spec stands for every family alike)
    spec = next(sp for arch in ("gfx942", "sm_90", "gfx1250") for lane in ("llvm22", "llvm24")
                if table.admission(family, arch, lane).served for sp in table.enumerate_specs(family, arch, lane))
    want = {f.name: type(getattr(spec, f.name)) for f in dataclasses.fields(spec)}
    # to_dict leaves out fields added later while they hold their defaults (old keys stay put)
    omitted = {f.name for f in dataclasses.fields(spec)} - set(spec.to_dict())
    assert spec_field_types(family) == want and set(spec.to_dict()) <= set(want)
    assert all(getattr(spec, f.name) == f.default for f in dataclasses.fields(spec) if f.name in omitted)


def test_where_values_are_typed_or_refused():
    assert where_for("gemm", parse_where(["block_m=64", "double_buffer=true", "path=fma", "mma=\"auto\""])) == {
        "block_m": 64, "double_buffer": True, "path": "fma", "mma": "auto"}
    # Python-style bools are accepted too (documented in where_for and build --help)
    assert where_for("gemm", {"double_buffer": "True"}) == where_for("gemm", {"double_buffer": "true"}) == {
        "double_buffer": True}
    assert where_for("conv_direct_fwd", {"stride_h": "2", "dtype": "f16"}) == {"stride_h": 2, "dtype": "f16"}
    assert where_for("gemm", {"block_m": 64, "double_buffer": False}) == {"block_m": 64, "double_buffer": False}
    for bad, names in [({"block_m": "abc"}, ("block_m", "int")), ({"block_m": "1.5"}, ("block_m", "int")),
                       ({"block_m": "true"}, ("block_m", "int")), ({"double_buffer": "yes"}, ("double_buffer", "true or false")),
                       ({"double_buffer": "1"}, ("double_buffer", "bool")), ({"colour": "red"}, ("colour", "block_m")),
                       ({"block_m": True}, ("block_m", "int")), ({"block_m": 64.0}, ("block_m", "int")),
                       ({"double_buffer": 1}, ("double_buffer", "bool")), ({"path": 5}, ("path", "str"))]:
        with pytest.raises(SpecError) as e:
            where_for("gemm", bad)
        assert all(n in str(e.value) for n in names), (bad, str(e.value))
    with pytest.raises(SpecError, match="given twice"):
        parse_where(["block_m=64", "block_m=128"])


def _count(family, arch, lane, **want):
    # reference: the variant table's own grid, filtered in Python on the spec objects
    return sum(all(getattr(s, k) == v for k, v in want.items()) for s in table.enumerate_specs(family, arch, lane))


def test_build_where_counts_match_the_table_and_bad_values_exit_2(cache_url, llvm22):
    args = ["build", "--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", "--cache", cache_url, "--dry-run",
            "--json"]
    for spelling in ("True", "true"):
        r = invoke(*args, "--where", f"double_buffer={spelling}", "--where", "block_m=64")
        assert r.exit_code == 0, r.output
        n = _count("gemm", "gfx942", "llvm22", double_buffer=True, block_m=64)
        assert json.loads(r.stdout)["planned"] == n > 0
    for where, text in [("block_m=abc", "field 'block_m' is int"), ("double_buffer=yes", "field 'double_buffer' is bool"),
                        ("colour=red", "no field 'colour'")]:
        r = invoke(*args, "--where", where)
        assert r.exit_code == 2 and r.stderr.startswith("Error: --where ") and text in r.stderr, r.output
    # refused even when no lane would plan anything (checked before any lane)
    r = invoke("build", "--arch", "gfx942", "--family", "gemm", "--lane", "llvm23", "--cache", cache_url,
               "--where", "block_m=abc")
    assert r.exit_code == 2 and "field 'block_m' is int" in r.stderr
    # a field some selected family lacks is named with the way out
    r = invoke("build", "--arch", "gfx942", "--cache", cache_url, "--dry-run", "--where", "block_m=64")
    assert r.exit_code == 2 and "--family" in r.stderr


# -- 5. one toolchain chooser for compile and build ----------------------------------------

class _NoGfx1250:
    """The real llvm22 toolchain, but detecting as if its LLVM lacked gfx1250 (as a second,
    older install of the same lane might)."""

    def __init__(self, tc):
        self.tc, self.kind = tc, tc.kind

    def detect(self):
        info = self.tc.detect()
        return dataclasses.replace(info, location=info.location + "#no-gfx1250",
                                   arches=tuple(a for a in info.arches if a != "gfx1250"))

    def core_identity(self):
        return {**self.tc.core_identity(), "variant": "no-gfx1250"}

    def identity(self, target):
        return {**self.tc.identity(target), "variant": "no-gfx1250"}

    def compile_options(self, target):
        return self.tc.compile_options(target)

    def compile(self, *a, **kw):
        return self.tc.compile(*a, **kw)


def _plan(pool, arch, lane, store):
    return make_plan(arches=[Target.parse(arch)], families=["gemm"], lanes=[get_lane(lane)], toolchains=pool, store=store)


def test_compile_and_build_choose_the_same_toolchain(tmp_path, monkeypatch, llvm22):
    """Two llvm22 toolchains, the first lacking gfx1250: both commands must pick the second
    (before the one chooser, build took the lane's first toolchain and refused gfx1250)."""
    restricted = _NoGfx1250(llvm22)
    monkeypatch.setattr(tcs, "detect_all", lambda: [restricted, llvm22])
    with Store.open(tmp_path / "c.sqlite") as store:
        plan = _plan([restricted, llvm22], "gfx1250", "llvm22", store)
        assert plan.to_build and not plan.refused
        assert {j.toolchain for j in plan.to_build} == {llvm22}
        assert {j.toolchain for j in _plan([restricted, llvm22], "gfx942", "llvm22", store).to_build} == {restricted}
    src = tmp_path / "k.ll"
    src.write_text(ADD1)
    r = invoke("compile", "--ir", str(src), "--arch", "gfx1250", "--lane", "llvm22", "-o", str(tmp_path / "k.hsaco"),
               "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["toolchain_location"] == llvm22.detect().location
    # only the restricted one: both refuse gfx1250, with the same message
    monkeypatch.setattr(tcs, "detect_all", lambda: [restricted])
    r = invoke("compile", "--ir", str(src), "--arch", "gfx1250", "--lane", "llvm22", "-o", str(tmp_path / "x"))
    prefix = "Error: ToolchainError: "
    assert r.exit_code == 1 and r.stderr.startswith(prefix) and not (tmp_path / "x").exists()
    message = r.stderr[len(prefix):].strip()
    assert message.startswith("llvm22: no toolchain here can target gfx1250") and "#no-gfx1250" in message
    with Store.open(tmp_path / "c.sqlite") as store:
        plan = _plan([restricted], "gfx1250", "llvm22", store)
    assert not plan.to_build and {r.reason for r in plan.refused} == {message}


@pytest.mark.parametrize("lane,arch", [("llvm20", "gfx1250"), ("llvm24", "sm_90"), ("llvm23", "sm_90")])
def test_compile_and_build_refuse_the_same_real_cases(tmp_path, cache_url, lane, arch, all_toolchains):
    """With this host's real toolchains: what build refuses or skips, compile refuses."""
    src = tmp_path / "k.ll"
    src.write_text(ADD1)
    r = invoke("compile", "--ir", str(src), "--arch", arch, "--lane", lane, "-o", str(tmp_path / "x"))
    assert r.exit_code == 1 and r.stderr.startswith("Error: ToolchainError: ") and not (tmp_path / "x").exists()
    compile_msg = r.stderr[len("Error: ToolchainError: "):].strip()
    # the families this project lowers and compiles itself (Triton's compile through Triton,
    # whose llvm24 build does target sm_90: tests/test_triton*.py)
    native = [a for name in ("gemm", "conv_direct_fwd", "conv_dgrad_patch") for a in ("--family", name)]  # family folders
    r = invoke("build", "--arch", arch, "--lane", lane, *native, "--cache", cache_url, "--dry-run", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["planned"] == 0
    reasons = {x["reason"] for x in s["refused"]} | {x["reason"] for x in s["skipped"]}
    assert reasons
    # the chooser's own answer, asked directly, is compile's message; build shows it where the
    # variant table has not already refused the combination on purpose (its reason names the arch)
    with pytest.raises(ToolchainError) as e:
        tcs.toolchain_for(get_lane(lane), Target.parse(arch), all_toolchains)
    assert str(e.value) == compile_msg
    assert all(reason == compile_msg or arch in reason for reason in reasons)


# -- 3. an unexpected exception in a build job keeps its traceback -------------------------

def test_unexpected_exception_is_recorded_with_its_traceback(cache_url, llvm22, monkeypatch, caplog):
    from rocke_aot.aot import lower as lower_mod

    real_lower = lower_mod.lower
    seen = []

    def lower(family, spec, target, lane):
        seen.append(spec)
        if len(seen) == 1:
            return _injected_bug(spec)
        if len(seen) == 2:
            raise CompileError("LLVM ERROR: injected expected failure", log="the tool's log")
        return real_lower(family, spec, target, lane)

    monkeypatch.setattr(lower_mod, "lower", lower)
    where = parse_where(WHERE[1::2])
    with caplog.at_level(logging.ERROR, logger="rocke_aot.aot.builder.run"), Store.open(cache_url) as store:
        s = builder.build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=["llvm22"], store=store,
                          toolchains=[llvm22], jobs=1, where=where)
        assert s["planned"] == 4 and s["built"] == 2 and len(s["failed"]) == 2 and s.exit_code == 1
        by_kind = {("ZeroDivisionError" in f["error"]): f for f in s["failed"]}
        bug, expected = by_kind[True], by_kind[False]
        assert bug["error"].startswith("ZeroDivisionError: division by zero")
        record = store.get_failure(bug["key"])
        assert record.error.startswith("ZeroDivisionError: division by zero\nTraceback (most recent call last):")
        assert "in _injected_bug" in record.error and "in lower_one" in record.error
        assert "in _injected_bug" in record.log
        # an expected RockeError keeps its message; no traceback
        assert expected["error"] == "CompileError: LLVM ERROR: injected expected failure"
        record = store.get_failure(expected["key"])
        assert record.error == expected["error"] and record.log == "the tool's log"
        assert "Traceback" not in record.error
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and bug["key"] in logged[0] and "in _injected_bug" in logged[0]


def _injected_bug(spec):
    return 1 / 0


# -- 4. plain progress lines when stderr is not a terminal ---------------------------------

def _progress_lines(stderr: str):
    return [tuple(map(int, m.groups())) for m in map(PROGRESS.fullmatch, stderr.splitlines()) if m]


def test_progress_lines_at_the_interval_off_a_terminal(cache_url, llvm22, monkeypatch):
    import time

    from rocke_aot.aot.toolchains.llvmlite_toolchain import LlvmliteToolchain

    real = LlvmliteToolchain.compile

    def slow(self, *a, **kw):  # each compile takes at least 0.3 s: several intervals of 0.05 s
        time.sleep(0.3)
        return real(self, *a, **kw)

    monkeypatch.setattr(LlvmliteToolchain, "compile", slow)
    args = ["build", "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22", "--cache", cache_url, "--jobs", "1",
            *WHERE, "--json", "--progress-interval", "0.05"]
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    lines = _progress_lines(r.stderr)
    assert len(lines) >= 4 * 0.3 / 0.05 / 2  # timer lines, not one per result
    assert lines[-1] == (s["built"], s["to_build"], s["cached"], 0) == (4, 4, 0, 0)
    assert any(b < t for b, t, _, _ in lines)  # lines came while compiles were running
    assert [b for b, *_ in lines] == sorted(b for b, *_ in lines)
    r = invoke(*args)  # all cached: the closing line still comes
    assert _progress_lines(r.stderr)[-1] == (0, 0, 4, 0)


def test_real_binary_writes_progress_lines_to_a_pipe(cache_url, llvm22):
    p = subprocess.run([EXE, "build", "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22", "--cache", cache_url,
                        *WHERE, "--progress-interval", "0.1"], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    lines = _progress_lines(p.stderr)
    assert lines and lines[-1] == (4, 4, 0, 0)


# -- 6. every command's --help has an Example block ----------------------------------------

def _commands(group: click.Group, path=()):
    ctx = click.Context(group)  # through list/get_command: the top group loads commands lazily
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        yield (*path, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*path, name))


def test_every_help_has_an_example():
    paths = list(_commands(cli))
    assert len(paths) >= 15 and ("toolchain", "remove") in paths and ("cache", "verify") in paths
    for path in [(), *paths]:
        r = invoke(*path, "--help")
        assert r.exit_code == 0 and "Example:" in r.stdout, path
        body = r.stdout.split("Example:", 1)[1]
        assert "rocke-aot " + " ".join(path) in body, path  # the example runs this very command
