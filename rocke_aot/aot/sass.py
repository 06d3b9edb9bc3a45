"""ptxas's schedule of an sm_90 kernel, read off its SASS when the artifact is built.

    cubin bytes --cuobjdump -sass--> text --instructions()--> (address, text) of the kernel's Function
        │
        ├── staging: the step loop (the backward branch whose body holds the first BAR.*), walked
        │   from its start to that barrier (walk()):
        │       exposed_latencies = (cycles - instructions) / global_latency
        │   the global latencies a step waits for, one warp issuing alone: ptxas decides how many
        │   of a staging copy's loads are in flight before the first store that needs one, to fit
        │   its register target (0.9 to 11 per step over the conv_direct_fwd grid)
        └── compute: the shortest loop holding an HMMA or FFMA, without its LDG and BAR:
                chain_ratio = cycles / instructions   (>= 1)
            how much longer the loop's dependency chain is than its instruction count (a tap
            loop that consumes each LDS right after issuing it: up to ~7x)

    walk(body): one warp, one instruction a cycle, each waiting for every register it reads; a
    result is ready LDG: the facts' global_latency, LDS: the facts' lds_latency (both
    variants/hw_facts/sm_90.json), HMMA: 33, anything else: 4 cycles after its issue.
    HMMA_LATENCY and OTHER_LATENCY are not facts: with 20 / 2 or 50 / 6 the replay's figures
    barely move (docs/selection.md "conv_direct_fwd: what the counts and the chain missed");
    the staging waits and the LDS chain decide.

    read_schedule(cubin, target, kernel) -> Schedule (rocke_aot/candidates.py) | None
        None          not an sm_90 cubin (the walk's latencies are sm_90's)
        "sass"        the figures above, the latencies walked with, the tool's version line
        "unavailable" the reason: no cuobjdump (ROCKE_AOT_CUOBJDUMP, this venv's bin, PATH),
                      cuobjdump failed, or the SASS has no step loop this walk knows; the
                      hardware model then uses its counts and says so (never a guessed figure)

The figures are derived from the artifact's bytes, so they are not part of the cache key (the
key covers what shapes the bytes) and this module is not on the recipe digest's roots
(aot/recipe.py): aot/builder records them next to the code-object resources.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from rocke_aot import settings
from rocke_aot.candidates import Schedule
from rocke_aot.errors import RockeError, ToolchainError
from rocke_aot.targets import Target

HMMA_LATENCY = 33  # cycles until an HMMA's result is ready (module doc: not a fact)
OTHER_LATENCY = 4  # ... any instruction but LDG, LDS and HMMA
SCHEDULE_PROCESSORS = ("sm_90",)

_LINE = re.compile(r"^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", re.M)
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$", re.M)
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")
_REGISTER = re.compile(r"\bR\d+\b")
_BACK_BRANCH = re.compile(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)")


class SassError(RockeError):
    """The SASS has no shape this walk reads (no kernel function, no barrier)."""


def find_cuobjdump() -> str:
    """ROCKE_AOT_CUOBJDUMP when set (it must name an executable: a typo fails, it never falls
    through), else this interpreter's venv bin (scripts/setup.sh links the pinned wheel's there),
    else cuobjdump on PATH; ToolchainError when there is none."""
    env = settings.raw(settings.CUOBJDUMP)
    if env is not None:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise ToolchainError(f"{settings.CUOBJDUMP}={env!r} is not an executable file")
        return env
    import shutil

    from rocke_aot.aot.compiler.ptx import beside_interpreter

    for path in (beside_interpreter("cuobjdump"), shutil.which("cuobjdump")):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ToolchainError(f"cuobjdump not found ({settings.CUOBJDUMP} unset, not in {Path(sys.executable).parent}, "
                         "not on PATH: bash scripts/setup.sh --only ptxas installs it)")


@functools.cache
def tool_version(path: str) -> str:
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    lines = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    line = next((ln for ln in lines if "release" in ln), lines[-1] if lines else "(no version line)")
    return f"cuobjdump: {line}"  # "cuobjdump: Cuda compilation tools, release 13.5, V13.5.37"


def disassemble(cubin: bytes, tool: str, *, timeout: float = 60.0) -> str:
    """cuobjdump -sass of the cubin; ToolchainError with its first message line on failure."""
    with tempfile.TemporaryDirectory(prefix="rocke-sass-") as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        try:
            proc = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise ToolchainError(f"cuobjdump -sass: {type(e).__name__}: {e}") from None
    if proc.returncode != 0:
        first = next((ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()), "no output")
        raise ToolchainError(f"cuobjdump -sass exited {proc.returncode}: {first}")
    return proc.stdout


def instructions(sass: str, kernel: str) -> list[tuple[int, str]]:
    """(address, instruction text without the ';') of ``kernel``'s Function in cuobjdump's text."""
    heads = list(_FUNCTION.finditer(sass))
    for i, h in enumerate(heads):
        if h.group(1) == kernel:
            end = heads[i + 1].start() if i + 1 < len(heads) else len(sass)
            body = [(int(m.group(1), 16), m.group(2)) for m in _LINE.finditer(sass, h.end(), end)]
            if not body:
                raise SassError(f"SASS of {kernel} has no instructions")
            return body
    raise SassError(f"SASS has no Function {kernel} (functions: {[h.group(1) for h in heads]})")


def _opcode(text: str) -> tuple[str, str]:
    op, _, rest = _PREDICATE.sub("", text).partition(" ")
    return op, rest


def walk(body: list[tuple[int, str]], latency: dict[str, float], *, stop_at_barrier: bool) -> tuple[float, int]:
    """(cycles, instructions) of one warp through ``body`` (module doc). ``latency``: opcode prefix
    -> cycles until its result is ready (others: OTHER_LATENCY). A store's fields are all read; any
    other instruction writes its first field (an address in brackets is read)."""
    t, n = 0.0, 0
    ready: dict[str, float] = {}
    for _, text in body:
        op, rest = _opcode(text)
        if stop_at_barrier and op.startswith("BAR"):
            break
        n += 1
        fields = [f.strip() for f in rest.split(",")] if rest else []
        dst, srcs = ([], fields) if op.startswith("ST") else (fields[:1], fields[1:])
        srcs = srcs + [f for f in dst if "[" in f]
        t = max([t + 1] + [ready.get(r, 0.0) for f in srcs for r in _REGISTER.findall(f)])
        lat = next((v for k, v in latency.items() if op.startswith(k)), OTHER_LATENCY)
        for f in dst:
            if "[" not in f:
                for r in _REGISTER.findall(f):
                    ready[r] = t + lat
    return t, n


def schedule_figures(ins: list[tuple[int, str]], global_latency: float, lds_latency: float
                     ) -> tuple[float, float | None]:
    """(exposed_latencies, chain_ratio) of one kernel's instructions (module doc)."""
    latency = {"LDG": global_latency, "LDS": lds_latency, "HMMA": HMMA_LATENCY}
    back = [(int(m.group(1), 16), a) for a, text in ins
            if (m := _BACK_BRANCH.search(text)) and int(m.group(1), 16) < a]
    bar = next((a for a, text in ins if _opcode(text)[0].startswith("BAR")), None)
    if bar is None:
        raise SassError("SASS has no barrier (no staging step to walk)")
    start = min((lo for lo, hi in back if lo <= bar <= hi), default=ins[0][0])
    t, n = walk([x for x in ins if start <= x[0] <= bar], latency, stop_at_barrier=True)
    loops = [[x for x in ins if lo <= x[0] <= hi] for lo, hi in back]
    compute = [b for b in loops if any(op.startswith(("FFMA", "HMMA")) for op in (_opcode(x[1])[0] for x in b))]
    ratio = None
    if compute:
        body = [x for x in min(compute, key=len) if not _opcode(x[1])[0].startswith(("LDG", "BAR"))]
        ct, cn = walk(body, latency, stop_at_barrier=False)
        ratio = ct / cn if cn else None
    return max(0.0, (t - n) / global_latency), ratio


def read_schedule(cubin: bytes, target: Target, kernel: str) -> Schedule | None:
    """The schedule to record for a built code object (module doc)."""
    if target.is_amdgpu or target.processor not in SCHEDULE_PROCESSORS:
        return None
    from rocke_aot.variants import hw_model

    facts = hw_model.facts_for(target.processor)
    if not isinstance(facts, hw_model.HardwareFacts):
        return Schedule("unavailable", reason=f"no hardware facts to walk with: {facts.reason}")
    try:
        tool = find_cuobjdump()
        ins = instructions(disassemble(cubin, tool), kernel)
        exposed, ratio = schedule_figures(ins, facts.global_latency, facts.lds_latency)
    except (ToolchainError, SassError) as e:
        return Schedule("unavailable", reason=str(e))
    return Schedule("sass", round(exposed, 4), None if ratio is None else round(ratio, 4),
                    facts.global_latency, facts.lds_latency, tool_version(tool))


__all__ = ["HMMA_LATENCY", "OTHER_LATENCY", "SCHEDULE_PROCESSORS", "SassError", "disassemble",
           "find_cuobjdump", "instructions", "read_schedule", "schedule_figures", "tool_version", "walk"]
