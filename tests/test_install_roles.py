"""Every command on every install either runs or says in one line which extra to install (issue 39).

    the wheel (python -m build, as tests/test_packaging.py) ──> one clean venv per role
        (tests/_roles.py: base, [serve], [build]: only the distributions that role's extras pull
        in, so a module no extra names is absent, as after `pip install 'rocke-aot[serve]'`)
    one process per role ──CliRunner──> every case of CASES (a cheap real invocation of each
        command against a real store and a real `rocke-aot serve` on loopback), then `--help`
        of every command and subcommand
        role below the command's need ──> exit 2, one line: "needs the [EXTRA] install ... pip
            install 'rocke-aot[EXTRA]'" (EXTRA the smallest extra that brings what it needs)
        otherwise ──> it runs: an exit code the command documents, no traceback, any error one
            line naming its type
    docs/client.md's table of every command x role == NEEDS
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from _once import once
from _roles import role_venv
from _service import built_store, live_server  # noqa: F401

from rocke_aot.cache.keys import thaw

ROOT = Path(__file__).resolve().parent.parent
ROLES = {"base": (), "serve": ("serve",), "build": ("build",)}
ORDER = ("base", "serve", "build")

# case -> (the install it needs, the exit codes that mean it ran, argv with {store}, {server}, ...)
CASES: dict[str, tuple[str, tuple[int, ...], list[str]]] = {
    "settings": ("base", (0,), ["settings", "--json"]),
    "fetch": ("base", (0,), ["fetch", "--server", "{server}", "--insecure", "--local", "{local}", "{key16}", "--json"]),
    "fetch --problem": ("base", (0,), ["fetch", "--server", "{server}", "--insecure", "--local", "{local}", "--arch",
                                       "gfx942", "--family", "gemm", "--problem", '{{"m": 512, "n": 512, "k": 512}}',
                                       "--limit", "2"]),
    "client ls": ("base", (0,), ["client", "ls", "--local", "{local}"]),
    "client du": ("base", (0,), ["client", "du", "--local", "{local}", "--json"]),
    "client gc": ("base", (0,), ["client", "gc", "--local", "{local}", "--max-bytes", "100000000"]),
    "client verify": ("base", (0,), ["client", "verify", "--local", "{local}"]),
    "select --server": ("base", (0,), ["select", "--server", "{server}", "--arch", "gfx942", "--family", "gemm",
                                       "--problem", '{{"m": 512, "n": 512, "k": 512}}', "--json"]),
    "publish": ("base", (1,), ["publish", "--server", "{server}", "--token", "t", "--arch", "gfx942", "--lane",
                               "llvm22", "--family", "gemm", "--spec", "{spec}", "--recipe-digest", "x",
                               "--toolchain", "{toolchain}", "--ir-sha256", "0" * 64, "{file}"]),  # a read-only server: 403, one line
    "trust keygen": ("base", (0,), ["trust", "keygen", "{dir}/release.key"]),
    "select --cache": ("serve", (0,), ["select", "--cache", "{store}", "--arch", "gfx942", "--family", "gemm",
                                       "--problem", '{{"m": 512, "n": 512, "k": 512}}']),
    "cache stats": ("serve", (0,), ["cache", "stats", "--cache", "{store}"]),
    "cache verify": ("serve", (0,), ["cache", "verify", "--cache", "{store}"]),
    "cache ls": ("serve", (0,), ["cache", "ls", "--cache", "{store}", "--limit", "2"]),
    "cache stats (typo)": ("serve", (1,), ["cache", "stats", "--cache", "{dir}/typo.sqlite"]),
    "measurements": ("serve", (0,), ["measurements", "ls", "--arch", "gfx942", "--family", "gemm", "--cache",
                                     "{store}"]),
    "serve": ("serve", (1,), ["serve", "--cache", "{dir}/missing.sqlite"]),  # refused before binding
    "mirror": ("serve", (1,), ["mirror", "export", "--cache", "{store}", "--signed", "{dir}", "-o", "{dir}/tree"]),
    "families": ("build", (0,), ["families", "--family", "gemm", "--json"]),
    "toolchains": ("build", (0,), ["toolchains", "--json"]),
    "toolchain": ("build", (1,), ["toolchain", "remove", "{dir}/no-such-python"]),
    "variants": ("build", (0, 1), ["variants", "--arch", "gfx942", "--family", "gemm", "--json"]),
    "lower": ("build", (0,), ["lower", "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22", "--spec",
                              '{{"path": "mfma"}}']),
    "build": ("build", (1,), ["build", "--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", "--where",
                              "block_m=7", "--dry-run", "--cache", "{store}"]),  # plans nothing: says so, exit 1
    "cache audit": ("build", (0,), ["cache", "audit", "--cache", "{store}", "--sample", "1"]),
    "golden": ("build", (0,), ["golden", "--check", "--family", "conv_direct_fwd", "--lane", "llvm22", "--jobs", "1"]),
    "bench": ("build", (77,), ["bench", "--run-from-cache", "--arch", "sm_90", "--family", "gemm", "--problem",
                               '{{"m": 64, "n": 64, "k": 64}}', "--cache", "{store}"]),  # no GPU here: a named skip
    "compile": ("build", (0,), ["compile", "--family", "gemm", "--arch", "gfx942", "--lane", "llvm22", "--spec",
                                '{{"path": "mfma"}}', "-o", "{dir}/k.hsaco"]),
    "characterize": ("build", (0, 1), ["characterize", "--arch", "gfx90a", "--lane", "llvm22", "--jobs", "2"]),
}

# One process per role: every case, then --help of every command and subcommand.
_RUN = r"""
import json, sys, click
from click.testing import CliRunner
from rocke_aot.cli.main import cli
cases = json.loads(sys.stdin.read())
out = {"cases": {}, "help": {}}
for name, argv in cases.items():
    r = CliRunner().invoke(cli, argv, prog_name="rocke-aot")
    exc = r.exception if r.exception is not None and not isinstance(r.exception, SystemExit) else None
    out["cases"][name] = [r.exit_code, r.output[-3000:], None if exc is None else f"{type(exc).__name__}: {exc}",
                          r.stdout[-100000:]]
def walk(cmd, path, ctx):
    yield path
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            yield from walk(sub, path + [name], click.Context(sub, parent=ctx, info_name=name))
for path in walk(cli, [], click.Context(cli, info_name="rocke-aot")):
    r = CliRunner().invoke(cli, [*path, "--help"], prog_name="rocke-aot")
    out["help"][" ".join(path)] = [r.exit_code, r.output[:2000]]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("world")
    url = f"sqlite:///{d / 'store.sqlite'}"
    store = built_store(url, kernel_bundle)  # built here: `cache audit` finds every row verified
    art = store.find()[0]
    key = art.key
    (d / "k.hsaco").write_bytes(store.get(key).code_object)
    spec, toolchain = (json.dumps(thaw(x)) for x in (art.spec, art.toolchain))
    store.close()
    with live_server(url) as base:
        yield {"store": str(d / "store.sqlite"), "server": base, "key16": key[:16], "file": str(d / "k.hsaco"),
               "spec": spec, "toolchain": toolchain}


def _run_role(name: str, wheel: Path, world: dict, where: Path) -> dict:
    inst = role_venv(where, wheel, ROLES[name])
    values = {**world, "local": str(where / "local"), "dir": str(where / "scratch")}
    Path(values["dir"]).mkdir()
    cases = {case: [a.format(**values) for a in argv] for case, (_, _, argv) in CASES.items()}
    proc = subprocess.run([str(inst["py"]), "-c", _RUN], input=json.dumps(cases), cwd=inst["cwd"], env=inst["env"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=ORDER)
def role(request, wheel, tmp_path_factory):
    """(role, every case's and every --help's answer), run once per run: the two tests of a role may
    go to two xdist workers, which share the one answer (tests/_once.py; the world, a store and a
    live server, is started only by the worker that runs the role)."""

    def make(d: Path) -> None:
        got = _run_role(request.param, wheel, request.getfixturevalue("world"), d)
        (d / "answers.json").write_text(json.dumps(got))

    done = once(tmp_path_factory, f"role-{request.param}", make)
    return request.param, json.loads((done / "answers.json").read_text())


def _error_lines(output: str) -> list[str]:
    return [ln for ln in output.splitlines() if ln.startswith(("Error:", "Skipped:"))]


def test_every_command_runs_or_names_its_extra(role):
    name, got = role
    rank = ORDER.index(name)
    for case, (need, codes, _) in CASES.items():
        code, output, exc, _ = got["cases"][case]
        assert exc is None, f"{name}: {case}: {exc}\n{output}"
        assert "Traceback" not in output, f"{name}: {case}\n{output}"
        if rank < ORDER.index(need):
            # the smallest extra that brings what it needs, in one line, exit 2
            assert code == 2, f"{name}: {case}: exit {code}\n{output}"
            (line,) = _error_lines(output)
            assert f"needs the [{need}] install" in line and f"pip install 'rocke-aot[{need}]'" in line, line
            assert output.strip() == line, output
        else:
            assert code in codes, f"{name}: {case}: exit {code}, expected {codes}\n{output}"
            if code not in (0,):
                assert len(_error_lines(output)) <= 1, output
    if name == "base":  # the base install asks the service and keeps kernels locally
        doc = json.loads(got["cases"]["select --server"][3])
        assert doc["accepted"] and doc["accepted"][0]["family"] == "gemm"
    if name != "base":
        assert "no cache at" in got["cases"]["cache stats (typo)"][1]


def test_every_help_answers_on_every_install(role):
    name, got = role
    assert len(got["help"]) >= 20
    for path, (code, output) in got["help"].items():
        assert code == 0 and "Usage:" in output and "Traceback" not in output, f"{name}: {path} --help\n{output}"
    if name == "base":  # a command that needs more names the install in its help
        assert "Needs the [serve] install" in got["help"]["cache"][1]
        assert "Needs the [build] install" in got["help"]["build"][1]


def test_the_docs_table_is_the_tests():
    """docs/client.md: one row per command case, each role "runs" or names the extra."""
    text = (ROOT / "docs" / "client.md").read_text().split("## Every command on every install", 1)[1]
    text = text.split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `rocke-aot ([^`]+)` \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", text, re.M):
        rows[m.group(1).strip()] = tuple(c.strip() for c in m.groups()[1:])
    want = {}
    for case, (need, _, _) in CASES.items():
        want[case] = tuple("runs" if ORDER.index(r) >= ORDER.index(need) else f"names [{need}]" for r in ORDER)
    assert rows == want
