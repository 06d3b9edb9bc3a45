"""A wheel that works: built with `python -m build`, installed into a clean venv, every read-only command.

The tree is copied as git sees it (tests/_tree.py: symlinks kept as symlinks), so the wheel is built from what a fresh clone would hold, not from stray build output.
The clean venv has no pip and no site-packages of its own beyond the wheel: a .pth line adds the
project venv's site-packages for the dependencies (plain path lines do not run that directory's
own .pth files, so the editable install of the repository is not visible), and every command
asserts it runs the wheel's copy of rocke_aot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest
import tomllib

from rocke_aot.variants.families import builtin_family_names

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rocke_aot"  # every layer is a folder inside it (tests/_product.py)


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                           "--no-index", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONPATH"}
    env.update(ROCKE_AOT_HOME=str(home), HOME=str(home), PATH=f"{env_dir / 'bin'}:{env['PATH']}")
    return {"py": py, "site": site, "bin": env_dir / "bin" / "rocke-aot", "env": env, "cwd": home}


def _run(inst: dict, *args: str, ok: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(inst["bin"]), *args], cwd=inst["cwd"], env=inst["env"], capture_output=True,
                          text=True, timeout=timeout)
    if ok:
        assert proc.returncode == 0, f"rocke-aot {' '.join(args)}: rc {proc.returncode}\n{proc.stdout[-2000:]}" \
                                     f"\n{proc.stderr[-3000:]}"
    return proc


def test_the_wheel_carries_every_package_and_its_run_time_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for init in PACKAGE.rglob("__init__.py"):
        if "__pycache__" not in init.parts:
            assert init.relative_to(ROOT).as_posix() in names
    # every data file of a layer folder is read at run time (goldens, characterization records,
    # perf constants, hardware facts, Alembic's template): each must be package data
    data = [p for p in PACKAGE.rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
    assert len(data) >= 7, data
    for p in data:
        assert p.relative_to(ROOT).as_posix() in names, f"{p} is not package data"
    # the families shipped as plugins (rocke_aot/families/<name>/): every module, and the entry points
    # through which the registry finds them, as it finds a third-party plugin's
    for mod in (PACKAGE / "families").rglob("*.py"):
        assert mod.relative_to(ROOT).as_posix() in names
    (eps,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(eps).decode()
    families = text.split("[rocke_aot.families]\n")[1].split("\n\n")[0].splitlines()
    lowerers = text.split("[rocke_aot.lowerers]\n")[1].split("\n\n")[0].splitlines()
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    for got, group in ((families, "rocke_aot.families"), (lowerers, "rocke_aot.lowerers")):
        assert sorted(got) == sorted(f"{k} = {v}" for k, v in declared[group].items())
    assert "gemm = rocke_aot.families.gemm.family:FAMILY" in families
    assert "attention = rocke_aot.families.attention.native:FAMILY" in families
    assert "triton_attention = rocke_aot.families.attention.triton:FAMILY" in families
    assert "gemm = rocke_aot.families.gemm.lower:lower_gemm" in lowerers
    # every family rocke-aot ships is one folder found the same way (nothing is installed on import)
    for name in ("conv_direct_fwd", "conv_dgrad_patch", "triton_matmul", "triton_softmax"):
        assert f"{name} = rocke_aot.families.{name}.family:FAMILY" in families
    for name in ("conv_direct_fwd", "conv_dgrad_patch"):
        assert f"{name} = rocke_aot.families.{name}.lower:lower_{name}" in lowerers
    # the maintainer tooling (devtools/: golden and characterization writers) is not shipped
    assert not any(n.startswith(("tests/", "bench/", "aot/", "tools/", "devtools/", "scripts/")) for n in names)


def test_the_installed_wheel_is_the_one_imported(installed):
    proc = subprocess.run([str(installed["py"]), "-c", "import rocke_aot.aot.golden as g, rocke_aot.cli.main as m;"
                           "print(g.__file__); print(m.__file__)"], cwd=installed["cwd"], env=installed["env"],
                          capture_output=True, text=True, check=True)
    for line in proc.stdout.split():
        assert Path(line).resolve().is_relative_to(installed["site"].resolve()), line


# One process walks the installed command tree and asks every command for --help through click's
# test runner (the same invoke path as the script; ~30 interpreter starts would cost half a minute).
_HELP_WALK = """
import json, click
from click.testing import CliRunner
from rocke_aot.cli.main import cli
def walk(cmd, path, ctx):
    yield path
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            yield from walk(sub, path + [name], click.Context(sub, parent=ctx, info_name=name))
out = {}
for path in walk(cli, [], click.Context(cli, info_name="rocke-aot")):
    r = CliRunner().invoke(cli, [*path, "--help"], prog_name="rocke-aot")
    out[" ".join(path)] = [r.exit_code, r.output]
print(json.dumps(out))
"""


def _helps(inst: dict) -> dict[str, list]:
    out = subprocess.run([str(inst["py"]), "-c", _HELP_WALK], cwd=inst["cwd"], env=inst["env"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


# Every read-only command from the wheel, in four tests (one was the suite's longest, ~4 minutes on
# 2 loaded cores, and held a worker alone at the end of a run): the help and the toolchains; the
# variants listing; the golden and characterization checks; a cache the wheel builds and reads.
def test_every_help_and_the_toolchains_from_the_wheel(installed):
    inst = installed
    helps = _helps(inst)
    assert {"variants", "cache stats", "golden", "toolchain install"} <= set(helps) and len(helps) > 20
    for path, (rc, text) in helps.items():
        assert rc == 0 and "Example:" in text, f"rocke-aot {path} --help: rc {rc}\n{text[-800:]}"
    assert "Commands:" in _run(inst, "--help").stdout
    assert _run(inst, "--version").stdout.strip().endswith("0.1.0")

    tcs = json.loads(_run(inst, "toolchains", "--json").stdout)
    assert any(t.get("lane") == "llvm22" and t["drift"].get("gfx942") == "ok" for t in tcs)


def test_the_variants_listing_from_the_wheel_is_the_source_trees(installed):
    inst = installed
    # The variants listing reads the goldens and characterization records: the wheel's answer equals
    # the source tree's (the editable install this test runs in), for the families both have (this
    # environment may also hold a family plugin, examples/plugin-rowsoftmax; the wheel's venv does not).
    fams = [a for f in builtin_family_names() for a in ("--family", f)]
    got = json.loads(_run(inst, "variants", "--arch", "gfx942", *fams, "--json").stdout)
    ref = json.loads(subprocess.run([str(Path(sys.executable).parent / "rocke-aot"), "variants", "--arch", "gfx942",
                                     *fams, "--json"], capture_output=True, text=True, check=True, cwd=ROOT).stdout)
    # The clean venv reads the project venv's site-packages for its dependencies, and with them the
    # example plugin's metadata (its entry point) but not its editable module: a broken plugin,
    # named, and every other answer the same.
    assert all("rocke-aot-rowsoftmax" in e and "ModuleNotFoundError" in e for e in got.pop("plugin_errors"))
    assert ref.pop("plugin_errors") == []
    assert got == ref

    # a family that ships as a plugin of rocke-aot itself: found through the wheel's own entry point
    args = ("variants", "--family", "triton_attention", "--arch", "sm_90", "--lane", "llvm22", "--json")
    fam = json.loads(_run(inst, *args).stdout)
    src = json.loads(subprocess.run([str(Path(sys.executable).parent / "rocke-aot"), *args], capture_output=True,
                                    text=True, check=True, cwd=ROOT).stdout)
    assert [r["count"] for r in fam["rows"]] == [r["count"] for r in src["rows"]] == [136], fam["rows"]  # 60 a lane + 128x128 w8 (2 and 3 stages), the 16-row tile and the tutorial's 64x128, 64x64 s2, 64x32 at d 128 on sm_90; GQA-packed 48 + a second d 128 tile


def test_the_golden_and_characterization_checks_from_the_wheel(installed):
    inst = installed
    assert "golden check: OK" in _run(inst, "golden", "--check", "--lane", "llvm22", "--family", "gemm").stdout
    assert "characterization check: OK" in _run(inst, "characterize", "--check", "--lane", "llvm22",
                                                "--arch", "gfx942").stdout
    # the product only reads its data: writing is the maintainer tool's, which the wheel does not carry
    moved = _run(inst, "golden", "--write", ok=False)
    assert moved.returncode == 2 and "python -m devtools.goldens" in moved.stderr, moved.stderr
    assert subprocess.run([str(inst["py"]), "-c", "import devtools"], cwd=inst["cwd"], env=inst["env"],
                          capture_output=True).returncode != 0


def test_a_cache_the_wheel_builds_and_reads(installed, tmp_path):
    inst = installed
    cache = tmp_path / "c.sqlite"
    missing = _run(inst, "select", "--arch", "gfx942", "--family", "gemm", "--problem", '{"m":64,"n":64,"k":64}',
                   "--cache", str(cache), ok=False)
    assert missing.returncode == 1 and "NotFoundError" in missing.stderr and not cache.exists()
    # A small cache built by the wheel's own compile workers, then read.
    _run(inst, "build", "--arch", "gfx942", "--family", "gemm", "--lane", "llvm22", "--where", "path=mfma",
         "--where", "block_m=64", "--where", "block_n=64", "--where", "out_dtype=f32", "--cache", str(cache),
         "-j", "2", "--json")
    stats = json.loads(_run(inst, "cache", "stats", "--cache", str(cache), "--json").stdout)
    assert stats["artifacts"] > 0 and stats["failures"] == 0
    sel = json.loads(_run(inst, "select", "--arch", "gfx942", "--family", "gemm", "--problem",
                          '{"m":4096,"n":4096,"k":4096}', "--cache", str(cache), "--json").stdout)
    assert sel["accepted"], sel
    n = stats["artifacts"]
    assert f"checked {n} blobs, {n} entries: ok" in _run(inst, "cache", "verify", "--cache", str(cache)).stdout
    rows = json.loads(_run(inst, "cache", "ls", "--cache", str(cache), "--json").stdout)
    assert len(rows) == n and {r["family"] for r in rows} == {"gemm"}
