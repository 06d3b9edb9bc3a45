"""Toolchain discovery, registration and lane-environment installation.

    detect_all()
      ├── LlvmliteToolchain(sys.executable)                the project's own llvmlite (LLVM 22)
      ├── registered entries in $ROCKE_AOT_HOME/toolchains.json
      │     {"kind": "llvmlite", "python": ...}            lane envs, offline interpreters
      │     {"kind": <other>, ...}  -> <kind module>.from_registry(entry)
      └── <kind module>.discover()                         auto-discovered ones (e.g. a COMGR library)

    toolchain_for(lane, target)  -> the ONE choice of compiler for (lane, target), used by both
                                    `rocke-aot compile` and the builder's plan: the first usable
                                    toolchain of the lane (discovery order) whose detected arches
                                    include the target's processor; else ToolchainError naming the
                                    lane and what was found

    install_lane(llvm20)    -> venv $ROCKE_AOT_HOME/lanes/llvm20 + pip install llvmlite==0.46.0
                               -> detect -> must resolve to the lane asked for -> register

Kind modules (one small file each) may define ``discover() -> list[Toolchain]`` and
``from_registry(entry: dict) -> Toolchain``; they are listed in ``KIND_MODULES``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import venv
from collections.abc import Callable, Sequence
from pathlib import Path

from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.toolchains import triton_jit
from rocke_aot.aot.toolchains.base import Toolchain, ToolchainInfo
from rocke_aot.aot.toolchains.llvmlite_toolchain import LlvmliteToolchain
from rocke_aot.errors import LaneError, ToolchainError
from rocke_aot.lanes import LANE_NAMES, Lane
from rocke_aot.paths import atomic_write, exclusive, home
from rocke_aot.targets import Target

__all__ = [
    "CompileResult", "Toolchain", "ToolchainInfo", "LlvmliteToolchain",
    "detect_all", "toolchains_for_lane", "toolchain_for", "install_lane", "install_triton", "register", "unregister", "registry_path",
]

# kind -> module implementing discover()/from_registry(); llvmlite is built in.
KIND_MODULES: dict[str, str] = {
    "comgr": "rocke_aot.aot.toolchains.comgr",
    "triton-codegen": "rocke_aot.aot.toolchains.triton24",
    "rocm-llvm": "rocke_aot.aot.toolchains.vendor23",
    "triton": "rocke_aot.aot.toolchains.triton_jit",
}

# How `rocke-aot toolchain install <lane>` makes a lane environment: pip requirements
# and the toolchain kind that the environment provides. Keyed by lane name and
# checked against the lane registry (a recipe for an unknown lane fails at import).
INSTALL_RECIPES: dict[str, dict] = {
    "llvm20": {"requirements": ["llvmlite==0.46.0"], "kind": "llvmlite"},
    "llvm24": {"requirements": ["triton==3.9.0"], "kind": "triton-codegen"},
    # AMD's LLVM 23 comes with the project (hip-python[compiler] -> rocm-bindings-compiler);
    # installing the lane builds the two ROCm sysdeps shims it needs (toolchains/rocm_sysdeps.py).
    "llvm23": {"kind": "rocm-llvm", "self_install": True},
}
_unknown = sorted(set(INSTALL_RECIPES) - set(LANE_NAMES))  # a declaration's names, compared with the registry's
if _unknown:
    raise LaneError(f"INSTALL_RECIPES: unknown compiler lane {_unknown[0]!r}; qualified lanes: {', '.join(LANE_NAMES)}")


def registry_path() -> Path:
    return home() / "toolchains.json"


def _load_registry() -> list[dict]:
    path = registry_path()
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ToolchainError(f"{path} is not valid JSON ({e}); fix or delete it") from e
    entries = data.get("toolchains") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) and "kind" in e for e in entries):
        raise ToolchainError(f"{path}: expected {{'toolchains': [{{'kind': ...}}, ...]}}")
    return entries


def _save_registry(entries: list[dict]) -> None:
    # write-then-rename so a concurrent reader never sees a half-written file; mode 0644, not
    # mkstemp's 0600: an image's non-root user must read a registry its build (root) wrote
    atomic_write(registry_path(), json.dumps({"toolchains": entries}, indent=2, sort_keys=True).encode())


def _kind_module(kind: str):
    name = KIND_MODULES.get(kind)
    if name is None:
        return None
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name == name:
            return None
        raise


class UnknownKind(Toolchain):
    """A registry entry of a kind this rocke-aot does not know (another version wrote it, or
    its kind module is not installed). Listed by ``rocke-aot toolchains`` with its refusal and
    never used: the lanes of the other entries keep working, and a request for its lane is
    refused by name like any lane with no usable toolchain."""

    kind = "unknown"

    def __init__(self, entry: dict):
        self.entry = dict(entry)

    def __repr__(self) -> str:
        return f"UnknownKind({self.entry.get('kind')!r})"

    def detect(self) -> ToolchainInfo:
        where = self.entry.get("python") or self.entry.get("venv") or self.entry.get("library") or "?"
        label = f" (label {self.entry['label']!r})" if self.entry.get("label") else ""
        return ToolchainInfo(str(self.entry.get("kind")), str(where), None, None, None,
                             f"registered in {registry_path()} with kind {self.entry.get('kind')!r}{label}, "
                             f"which this rocke-aot does not know (written by another version?); "
                             f"`rocke-aot toolchain remove {where}` drops it")

    def core_identity(self) -> dict[str, str]:
        raise ToolchainError(self.detect().refusal)

    def compile_options(self, target: Target):
        raise ToolchainError(self.detect().refusal)

    def compile(self, ir: str, target: Target, *, timeout: float = 120.0) -> CompileResult:
        raise ToolchainError(self.detect().refusal)


def _from_entry(entry: dict) -> Toolchain:
    kind = entry["kind"]
    if kind == "llvmlite":
        return LlvmliteToolchain(entry["python"], label=entry.get("label"))
    module = _kind_module(kind)
    if module is None or not hasattr(module, "from_registry"):
        return UnknownKind(entry)
    return module.from_registry(entry)


def detect_all() -> list[Toolchain]:
    """Every toolchain on this host, qualified or not (see ``.detect().refusal``)."""
    found: list[Toolchain] = [LlvmliteToolchain(sys.executable, label="project")]
    seen = {("llvmlite", os.path.realpath(sys.executable))}
    for entry in _load_registry():
        tc = _from_entry(entry)
        ident = (tc.kind, os.path.realpath(tc.detect().location))
        if ident not in seen:
            seen.add(ident)
            found.append(tc)
    for kind in KIND_MODULES:
        module = _kind_module(kind)
        discover: Callable[[], list[Toolchain]] | None = getattr(module, "discover", None)
        for tc in discover() if discover else []:
            ident = (tc.kind, os.path.realpath(tc.detect().location))
            if ident not in seen:
                seen.add(ident)
                found.append(tc)
    return found


def toolchains_for_lane(lane: Lane, toolchains: Sequence[Toolchain] | None = None,
                        consumes: str | None = "llvm-ir") -> list[Toolchain]:
    """Usable toolchains qualified for ``lane`` (validated), in discovery order, that compile
    ``consumes`` input ("llvm-ir", or "triton" for Triton families; None: any)."""
    pool = detect_all() if toolchains is None else toolchains
    return [tc for tc in pool if tc.detect().usable and tc.detect().lane == lane.name
            and (consumes is None or getattr(tc, "consumes", "llvm-ir") == consumes)]


def toolchain_for(lane: Lane, target: Target | None = None,
                  toolchains: Sequence[Toolchain] | None = None, consumes: str | None = "llvm-ir") -> Toolchain:
    """The toolchain that compiles ``lane`` for ``target``: the first usable toolchain
    qualified for the lane (discovery order) whose detected arches include the target's
    processor. ``target=None`` asks only whether the lane has any usable toolchain here;
    ``consumes=None``: a toolchain of any input.

    Both `rocke-aot compile` and the build plan choose through this function, so a
    combination one of them refuses the other refuses too, with the same message.
    Raises ToolchainError naming the lane and what was found. The lane and the target come
    parsed (the CLI's options, the build plan).
    """
    pool = detect_all() if toolchains is None else toolchains
    found = toolchains_for_lane(lane, pool, consumes)
    if not found:
        if consumes == "triton":
            raise ToolchainError(f"{lane.name}: no Triton built on LLVM {lane.major} on this host (see "
                                 "`rocke-aot toolchain install triton==X.Y.Z --python python3.N`)")
        hint = f"`rocke-aot toolchain install {lane.name}`" if lane.name in INSTALL_RECIPES else "`rocke-aot toolchains`"
        raise ToolchainError(f"{lane.name}: no LLVM {lane.major} toolchain on this host (see {hint})")
    if target is None:
        return found[0]
    processor = target.processor
    for tc in found:
        if processor in tc.detect().arches:
            return tc
    seen = "; ".join(f"{i.kind} LLVM {i.llvm_version} at {i.location} targets {' '.join(i.arches) or 'nothing'}"
                     for i in (tc.detect() for tc in found))
    raise ToolchainError(f"{lane.name}: no toolchain here can target {processor} (found: {seen})")


def register(entry: dict) -> Toolchain:
    """Register a toolchain (e.g. an offline interpreter); it must detect as qualified."""
    tc = _from_entry(entry)
    info = tc.detect()
    if not info.usable:
        raise ToolchainError(f"not registering {info.kind} at {info.location}: {info.refusal}")
    with _registry_lock():
        entries = [e for e in _load_registry() if e != entry]
        entries.append(entry)
        _save_registry(entries)
    return tc


def _registry_lock():
    # read-modify-write of toolchains.json: two installs at once must both stay registered
    return exclusive(home() / ".toolchains.lock")


def install_triton(requirement: str, python: str = "python3", *, quiet: bool = True) -> Toolchain:
    """`rocke-aot toolchain install triton==X.Y.Z --python PY`: a lane environment of that interpreter
    with that Triton, registered; it must detect as a qualified lane (its LLVM major)."""
    m = triton_jit.REQUIREMENT_RE.match(requirement.strip())
    if not m:
        raise ToolchainError(f"give an exact Triton version such as triton==3.6.0, got {requirement!r}")
    interpreter = triton_jit.resolve_python(python)
    ver = subprocess.run([interpreter, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    env_dir = home() / "lanes" / f"triton-{m.group(1)}-py{ver}"

    def make(where: Path) -> None:
        proc = subprocess.run([interpreter, "-m", "venv", "--clear", str(where)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ToolchainError(f"{interpreter} -m venv {where} failed: {proc.stderr.strip()[-1000:]}")

    with lane_lock(env_dir):
        env_python = lane_environment(env_dir, make)
        cmd = [str(env_python), "-m", "pip", "install", "--disable-pip-version-check", *(["-q"] if quiet else []),
               f"triton=={m.group(1)}"]
        proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"pip install into {env_dir} failed:\n{(proc.stderr or '')[-2000:]}")
    entry = {"kind": triton_jit.KIND, "python": str(env_python), "label": env_dir.name}
    tc = register(entry)
    info = tc.detect()
    if info.extra.get("triton_version") != m.group(1):
        unregister(str(env_python))
        raise ToolchainError(f"{env_dir} runs Triton {info.extra.get('triton_version')}, not {m.group(1)}")
    return tc


def unregister(location: str) -> int:
    with _registry_lock():
        entries = _load_registry()
        keep = [e for e in entries if location not in (e.get("python"), e.get("library"), e.get("venv"))]
        _save_registry(keep)
    return len(entries) - len(keep)


def lane_environment(env_dir: Path, make: Callable[[Path], None]) -> Path:
    """The lane environment at ``env_dir``, made by ``make(env_dir)`` where there is none or where
    the one there has no working pip (an install killed between the venv's interpreter and its
    pip). Call it holding ``exclusive`` on the environment's lock: another process making the same
    environment at once would see its interpreter before its pip exists."""
    python = env_dir / "bin" / "python"
    if python.exists() and subprocess.run([str(python), "-m", "pip", "--version"],
                                          capture_output=True).returncode == 0:
        return python
    make(env_dir)
    return python


def lane_lock(env_dir: Path):
    """The lock one process holds while it makes or fills the lane environment ``env_dir``."""
    return exclusive(env_dir.parent / f".{env_dir.name}.lock")


def install_lane(lane: Lane, *, quiet: bool = True) -> Toolchain:
    """Make (or reuse) the lane's virtual environment, install its compiler, register it.

    Idempotent: an existing environment that already detects as this lane is kept. The lane
    is the CLI's (its --lane type parses the name: cli/toolchains.py).
    """
    recipe = INSTALL_RECIPES.get(lane.name)
    if recipe is None:
        raise ToolchainError(
            f"no installer for lane {lane.name}; installable: {', '.join(INSTALL_RECIPES)}"
            + (" (llvm22 is the project's own llvmlite)" if lane.name == "llvm22" else "")
        )
    if recipe.get("self_install"):  # the kind module installs it (no lane environment)
        # Found by discovery from the installed package: nothing to register (a registry entry
        # would pin one checkout's site-packages path for every checkout sharing the home).
        return _kind_module(recipe["kind"]).install(quiet=quiet)
    env_dir = home() / "lanes" / lane.name
    with lane_lock(env_dir):
        python = lane_environment(env_dir, venv.EnvBuilder(with_pip=True, clear=True).create)
        cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *recipe["requirements"]]
        if quiet:
            cmd.insert(4, "-q")
        proc = subprocess.run(cmd, capture_output=quiet, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"pip install into {env_dir} failed:\n{(proc.stderr or '')[-2000:]}")
    location = str(env_dir if recipe["kind"] != "llvmlite" else python)
    entry = {"kind": recipe["kind"], "label": lane.name, "python" if recipe["kind"] == "llvmlite" else "venv": location}
    tc = register(entry)
    got = tc.detect().lane
    if got != lane.name:
        unregister(location)
        raise ToolchainError(f"installed environment {env_dir} detects as {got}, not {lane.name}")
    return tc
