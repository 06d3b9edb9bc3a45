"""Family plugins for the tests: the example package installed for real, and small distributions
written the way an installer lays them out (a package beside its ``*.dist-info``).

    example_site()        a directory holding examples/plugin-rowsoftmax installed by pip
                          (``pip install --no-deps --no-build-isolation --target``, from a copy of
                          the folder so the checkout stays clean), or None when the environment
                          has it already (scripts/setup.sh installs it into .venv)
    write_dist(site, dist, modules, entry_points)
                          <site>/<module files> + <site>/<dist>-<version>.dist-info/{METADATA,
                          entry_points.txt, RECORD}: what importlib.metadata reads
    plugin_env(*sites)    os.environ with the sites first on PYTHONPATH, an empty ROCKE_AOT_HOME
                          left to the caller
    run_cli(env, *args)   `rocke-aot ARGS` in a subprocess (the real entry point script)
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "plugin-rowsoftmax"
EXAMPLE_DIST = "rocke-aot-rowsoftmax"
EXE = str(Path(sys.executable).with_name("rocke-aot"))


def example_installed() -> bool:
    try:
        importlib.metadata.distribution(EXAMPLE_DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def install_example(into: Path, src: Path = EXAMPLE) -> Path:
    """pip-install the plugin folder ``src`` into the directory ``into`` (a copy is built)."""
    work = into.parent / f"{into.name}-src"
    shutil.copytree(src, work, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-build-isolation", "--no-cache-dir", "--target", str(into), str(work)],
                   check=True, capture_output=True, text=True, timeout=300)
    return into


def write_dist(site: Path, dist: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]],
               version: str = "0.1.0") -> Path:
    site.mkdir(parents=True, exist_ok=True)
    for rel, text in modules.items():
        f = site / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in items.items()) + "\n"
                  for group, items in entry_points.items())
    (info / "entry_points.txt").write_text(eps)
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in modules) + f"{info.name}/METADATA,,\n")
    return site


def plugin_env(*sites: Path | None, home: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(s) for s in sites if s is not None] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    if home is not None:
        env["ROCKE_AOT_HOME"] = str(home)
    return env


def run_cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], env=env, capture_output=True, text=True, timeout=timeout)


def run_py(env: dict[str, str], code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=str(ROOT / "tests"))
