"""Install roles without an index: a clean venv per role (base, serve, build) that sees only the
distributions its pyproject extras pull in.

    closure(extras)   the distribution names rocke-aot's requirements reach (markers evaluated
                      with those extras; rocke-aot[serve,runtime] inside build recurses), read
                      from the installed metadata of this interpreter's environment
    role_site(dir, extras)   a folder of symlinks to exactly those distributions' top-level files
                      in this environment's site-packages (their RECORD lists them), which a
                      role venv adds through a .pth line: a package no extra names is absent, as
                      on a machine that ran `pip install 'rocke-aot[serve]'`
    wheel (session fixture, conftest.py)   the wheel `python -m build --wheel --no-isolation` makes
                      of the tree as git sees it (tests/_tree.py), once per run for every xdist
                      worker (tests/_once.py): tests/test_packaging.py and tests/test_install_roles.py
                      install the same file
    role_venv(dir, wheel, extras)   a venv with no pip, the wheel installed (--no-deps), and the
                      role's site: {"py", "bin", "env", "cwd"}

Symlinks, not installs: a role costs a few hundred links and the wheel's install, not a
download (CI has no index for it), and the versions are the ones the test environment pins.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
from importlib import metadata
from pathlib import Path

import pytest
from _once import once
from _tree import git_tree
from packaging.requirements import Requirement

SELF = "rocke-aot"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


ROOT = Path(__file__).resolve().parent.parent


def _requires(name: str) -> list[str]:
    """The requirement strings of ``name``: rocke-aot's from pyproject.toml (what the wheel
    says, whatever an older editable install recorded), any other from this environment's
    site-packages (not a stray *.egg-info in the working directory)."""
    if name == SELF:
        import tomllib

        proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        out = list(proj["dependencies"])
        for extra, reqs in proj["optional-dependencies"].items():
            out += [f"{r}; extra == '{extra}'" if ";" not in r else f"{r.split(';', 1)[0]}; ({r.split(';', 1)[1]}) "
                    f"and extra == '{extra}'" for r in reqs]
        return out
    (dist,) = [d for d in metadata.distributions(name=name, path=[sysconfig.get_paths()["purelib"]])][:1]
    return list(dist.requires or ())


def closure(extras: tuple[str, ...]) -> set[str]:
    seen: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(SELF, tuple(extras))]
    done_self: set[str] = set()
    while todo:
        name, ex = todo.pop()
        for text in _requires(name):
            req = Requirement(text)
            envs = [{"extra": e} for e in ex] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            if _norm(req.name) == SELF:  # rocke-aot[serve,runtime] inside [build]
                for e in req.extras:
                    if e not in done_self:
                        done_self.add(e)
                        todo.append((SELF, (e,)))
                continue
            n = _norm(req.name)
            if n not in seen:
                seen.add(n)
                todo.append((n, tuple(req.extras)))
    return seen


def role_site(where: Path, extras: tuple[str, ...]) -> Path:
    site = Path(sysconfig.get_paths()["purelib"])
    where.mkdir(parents=True, exist_ok=True)
    for name in sorted(closure(extras)):
        (dist,) = list(metadata.distributions(name=name, path=[str(site)]))[:1]
        for f in dist.files or ():
            top = f.parts[0]
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            src, dst = site / top, where / top
            if src.exists() and not dst.exists():
                dst.symlink_to(src)
    return where


def _build_wheel(dist: Path, tmp: Path) -> None:
    src = git_tree(tmp)
    # --no-isolation: the build backend (setuptools, from the test extra) is already installed;
    # an isolated build would download it on every run.
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("tree")
    (whl,) = once(tmp_path_factory, "wheel", lambda d: _build_wheel(d, tree)).glob("rocke_aot-*.whl")
    return whl


def role_venv(where: Path, wheel: Path, extras: tuple[str, ...]) -> dict:
    env_dir = where / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-role.pth").write_text(str(role_site(where / "site", extras)) + "\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps",
                           "--no-index", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    home = where / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONPATH"}
    env.update(ROCKE_AOT_HOME=str(home), HOME=str(home), PATH=f"{env_dir / 'bin'}:{env['PATH']}")
    return {"py": py, "site": site, "bin": env_dir / "bin" / "rocke-aot", "env": env, "cwd": home}
