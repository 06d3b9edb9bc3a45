"""Triton's own compiler as a toolchain (kind "triton"): one Python interpreter with one Triton.

    where it comes from (discover / from_registry)
      registered entries {"kind": "triton", "python": ...}   made by
          `rocke-aot toolchain install triton==3.6.0 --python python3.12` (toolchains/__init__.py install_triton:
          a venv of that interpreter in $ROCKE_AOT_HOME/lanes/triton-3.6.0-py3.12, pip install)
      $ROCKE_AOT_HOME/lanes/*/bin/python whose site-packages hold triton/_C/libtriton*.so
          (the llvm24 lane's environment has triton 3.9.0: a Triton toolchain too)

    detect()   _triton_worker.py "triton.describe" under that interpreter (cached on disk per
               interpreter, libtriton size/mtime and worker source; a home it cannot write keeps
               no cache: as aot/recipe.py's memo)
               -> Triton version, Python version, sha256 of triton_key(), per wired target a
                  probe kernel compiled (arches = those that compiled) and the backend's hash
               -> LLVM version: what a probe HSACO's linker records (.comment "Linker: LLD 22.0.0")
               -> lane_for_major -> llvm22 (Triton 3.6) / llvm24 (Triton 3.9); any other major refused
               refused too: a cache-invalidating TRITON_* variable set in the probe's environment
    identity() kind, triton version, python, sha256 of triton_key(), LLVM version: with the
               compile options (the target and the backend's own hash, which for CUDA carries
               ptxas's version) every input of Triton's cache key that is not the kernel's own
               (source, signature, constexprs, attributes, options: the family's spec)
    compile(request, target)  request = the canonical JSON the Triton family's lowering writes
               (aot/families/triton.py) -> worker "triton.compile" -> CompileResult(code object,
               format, ptx/asm, extra={"triton": the cache entry: key, name, files})

A Triton family consumes ``consumes = "triton"`` requests: the plan (aot/builder/plan.py) gives
its jobs a toolchain of this kind only, and LLVM-IR families never get one.
"""

from __future__ import annotations

import base64
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocke_aot.aot.compiler import WorkerSpec, default_pool
from rocke_aot.aot.compiler.files import file_sha256
from rocke_aot.aot.compiler.result import CompileResult
from rocke_aot.aot.compiler.worker import answer_blob
from rocke_aot.aot.toolchains.base import Toolchain, ToolchainInfo, info_for_major
from rocke_aot.arch import ARCHES
from rocke_aot.errors import CompileError, ToolchainError, ToolchainRefused
from rocke_aot.paths import atomic_write, home
from rocke_aot.targets import Target

KIND = "triton"
WORKER = Path(__file__).with_name("_triton_worker.py")
_LLD_RE = re.compile(r"\bLLD (\d+)\.(\d+)\.(\d+)")
REQUIREMENT_RE = re.compile(r"^triton==(\d+\.\d+\.\d+)$")
_PY_RE = re.compile(r"^python(\d+)\.(\d+)$")


def triton_target(target: Target) -> list:
    """[backend, arch, warp size]: the GPUTarget Triton compiles ``target`` for."""
    info = target.info
    if target.is_amdgpu:
        return ["hip", target.processor, info.wave_size]
    return ["cuda", int(target.processor.split("_", 1)[1]), 32]


def wired_targets() -> dict[str, list]:
    return {name: triton_target(Target(name)) for name in ARCHES}  # the registry's bare processors


# ------------------------------------------------------------------ discovery


def _site_libtriton(python: str | Path) -> Path | None:
    prefix = Path(python).parent.parent  # a venv's bin/python: its prefix, not the base interpreter's
    hits = sorted(glob.glob(str(prefix / "lib" / "python3*" / "site-packages" / "triton" / "_C" / "libtriton*.so")))
    return Path(hits[-1]) if hits else None


def discover() -> list[TritonToolchain]:
    out = []
    for python in sorted(glob.glob(str(home() / "lanes" / "*" / "bin" / "python"))):
        if _site_libtriton(python):
            out.append(TritonToolchain(python, label=Path(python).parent.parent.name))
    return out


def from_registry(entry: dict) -> TritonToolchain:
    if not entry.get("python"):
        raise ToolchainError(f"a {KIND} registry entry needs 'python': {entry!r}")
    return TritonToolchain(entry["python"], label=entry.get("label"))


def resolve_python(name: str) -> str:
    """The interpreter ``name`` names: a path, or a command such as python3.12 found on PATH or
    among pyenv's versions (~/.pyenv/versions/*/bin), that really runs and (for pythonX.Y) is X.Y."""
    if os.sep in name:
        candidates = [name]
    else:
        candidates = [c for c in (shutil.which(name),) if c]
        candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/*/bin/{name}")))
        candidates += [p for p in (f"/usr/bin/{name}", f"/usr/local/bin/{name}") if os.path.isfile(p)]
    want = _PY_RE.match(os.path.basename(name))
    tried = []
    for cand in dict.fromkeys(candidates):
        try:
            proc = subprocess.run([cand, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=60)
        except OSError as e:
            tried.append(f"{cand}: {e}")
            continue
        got = proc.stdout.strip()
        if proc.returncode != 0:
            tried.append(f"{cand}: exit {proc.returncode} ({(proc.stderr.strip().splitlines() or [''])[0]})")
        elif want and got != f"{want.group(1)}.{want.group(2)}":
            tried.append(f"{cand}: Python {got}")
        else:
            return cand
    raise ToolchainError(f"no working interpreter {name!r} ({'; '.join(tried) or 'not on PATH nor in ~/.pyenv'})")


# ------------------------------------------------------------------ the worker


def run_worker(python: str, kind: str, payload: dict, *, timeout: float = 300.0) -> tuple[dict, bytes | None]:
    spec = WorkerSpec.of(python, plugins=[WORKER])
    reply = default_pool().call(spec, kind, payload, None, timeout=timeout)
    result = dict(reply.result)
    result.setdefault("log", reply.log)
    return result, reply.blob


def _probe_path(python: str, lib: Path) -> Path:
    st = lib.stat()
    ident = json.dumps([os.path.abspath(python), str(lib.resolve()), st.st_size, st.st_mtime_ns,
                        file_sha256(WORKER), sorted(wired_targets().items())])
    return home() / "probes" / f"triton-{hashlib.sha256(ident.encode()).hexdigest()[:24]}.json"


# ------------------------------------------------------------------ the toolchain


class TritonToolchain(Toolchain):
    kind = KIND
    consumes = "triton"

    def __init__(self, python: str | Path, *, label: str | None = None):
        self.python = str(python)
        self.label = label

    def __repr__(self) -> str:
        return f"TritonToolchain({self.python!r})"

    @property
    def location(self) -> str:
        # The environment's folder, not bin/python: a venv's python is a symlink to its base
        # interpreter, which several environments share (discovery dedupes by real path).
        return str(Path(self.python).parent.parent)

    def _refused(self, reason: str, **extra: Any) -> ToolchainInfo:
        return ToolchainInfo(self.kind, self.location, None, None, None, reason, extra=extra)

    def describe(self) -> dict:
        """The worker's description, from the on-disk probe cache when this install is unchanged."""
        lib = _site_libtriton(self.python)
        if lib is None:
            raise ToolchainError(f"no triton (triton/_C/libtriton*.so) in the site-packages of {self.python}")
        path = _probe_path(self.python, lib)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        d, _ = run_worker(self.python, "triton.describe", {"targets": wired_targets()}, timeout=600.0)
        d.pop("log", None)
        try:
            atomic_write(path, json.dumps(d, indent=1, sort_keys=True).encode())
        except OSError:
            pass  # a home this user cannot write (an image's, root-owned): every process probes itself
        return d

    @functools.cached_property
    def _info(self) -> ToolchainInfo:
        try:
            d = self.describe()
        except (CompileError, ToolchainError) as e:
            return self._refused(f"probing Triton under {self.python} failed: {e}")
        targets = d["targets"]
        arches = tuple(p for p in ARCHES if targets.get(p, {}).get("ok"))
        majors = {}
        for p in arches:
            for line in targets[p].get("comment") or ():
                m = _LLD_RE.search(line)
                if m:
                    majors[p] = m.groups()
        extra = {"triton_version": d["triton_version"], "python_version": d["python"],
                 "triton_key_sha256": d["triton_key_sha256"], "libtriton": d["libtriton"], "torch": d["torch"],
                 "label": self.label or "", "refused_arches": {p: targets[p].get("error", "") for p in ARCHES
                                                               if p not in arches}}
        where = f"Triton {d['triton_version']} under {self.python}"
        if d.get("env"):
            return self._refused(f"{where}: cache-invalidating variables are set ({', '.join(sorted(d['env']))}); "
                                 "a builder compiles with none", **extra)
        if not majors:
            return self._refused(f"{where}: no HIP probe compiled, so no HSACO says which LLVM Triton is built on "
                                 f"({'; '.join(f'{p}: {e}' for p, e in extra['refused_arches'].items())})", **extra)
        versions = set(majors.values())
        if len(versions) != 1:
            return self._refused(f"{where}: probes name several LLVM versions {sorted(versions)}", **extra)
        version = ".".join(versions.pop())
        return info_for_major(self.kind, self.location, version, int(version.split(".")[0]), toolchain=where,
                              arches=arches, extra=extra)

    def detect(self) -> ToolchainInfo:
        return self._info

    def core_identity(self) -> dict[str, str]:
        # Triton runs its own bundled linker and ptxas: no tools of ours. ptxas's version is in
        # the CUDA backend's hash, which compile_options holds per target.
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{self.kind} under {self.python}: {info.refusal}")
        return {"kind": self.kind, "triton_version": str(info.extra["triton_version"]),
                "python_version": str(info.extra["python_version"]),
                "triton_key_sha256": str(info.extra["triton_key_sha256"]), "llvm_version": str(info.llvm_version)}

    def compile_options(self, target: Target) -> dict:
        d = self.describe()
        return {"triton_target": triton_target(target),
                "backend_hash": d["targets"].get(target.processor, {}).get("backend_hash", "")}

    def compile(self, ir: str, target: Target, *, timeout: float = 300.0) -> CompileResult:
        info = self.detect()
        if not info.usable:
            raise ToolchainRefused(f"{self.kind} under {self.python}: {info.refusal}")
        if target.processor not in info.arches:
            raise CompileError(f"Triton {info.extra['triton_version']} under {self.python} cannot target "
                               f"{target.processor}: {info.extra['refused_arches'].get(target.processor, '')}")
        try:
            request = json.loads(ir)
        except ValueError as e:
            raise CompileError(f"a Triton toolchain compiles a Triton request (JSON), not this text: {e}") from None
        if not isinstance(request, dict) or request.get("request") != "rocke-aot/triton-compile/v1":
            raise CompileError("not a rocke-aot Triton compile request (aot/families/triton.py writes them)")
        if request["target"] != triton_target(target):
            raise CompileError(f"the request is for {request['target']}, the job for {triton_target(target)}")
        try:
            result, binary = run_worker(self.python, "triton.compile", request, timeout=timeout)
        except CompileError as e:
            if "request refused: " in str(e):  # not Triton's verdict on the kernel: not cached
                raise ToolchainRefused(f"Triton under {self.python}: {e}") from None
            raise
        if result.get("triton_version") != info.extra["triton_version"]:
            raise CompileError(f"the worker ran Triton {result.get('triton_version')}, detected "
                               f"{info.extra['triton_version']}")
        fmt = "hsaco" if target.is_amdgpu else "cubin"
        files = {name: base64.b64decode(data) for name, data in result["files"].items()}
        code = answer_blob(binary, "triton.compile")
        entry = triton_entry(result, files, code)
        return CompileResult(code_object=code, format=fmt, log=result.get("log", ""),
                             ptx=result["asm"] if fmt == "cubin" else None, asm=result["asm"],
                             extra={"triton": entry, "triton_files": files})


def triton_entry(result: Mapping[str, Any], files: Mapping[str, bytes], binary: bytes) -> dict:
    """The artifact's record of its Triton cache entry (metadata["triton"]): what a host's Triton
    looks up (``key``, the group file), and the sha256 of every file the group lists."""
    name = result["name"]
    meta = json.loads(files[f"{name}.json"])
    served = {f"{name}.json": hashlib.sha256(files[f"{name}.json"]).hexdigest(),
              result["binary"]: hashlib.sha256(binary).hexdigest()}
    return {"key": result["key"], "hash": result["hash"], "name": name, "triton_version": result["triton_version"],
            "target": meta["target"], "binary": result["binary"], "files": served,
            "num_warps": meta["num_warps"], "shared": meta["shared"], "global_scratch_size":
                meta.get("global_scratch_size", 0), "profile_scratch_size": meta.get("profile_scratch_size", 0),
            "signature": dict(result["signature"]),
            # Triton's cache-invalidating variables as the builder set them ({}: none): Triton hashes
            # them into the key, so a host that sets others misses, and its backend says so
            "env_vars": dict(result.get("env_vars") or {})}
