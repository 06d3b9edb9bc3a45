"""Codegen deltas on the same IR: AMD's LLVM 23 against upstream LLVM 22 and LLVM 24.

    for (family, arch, path) in CASES:                 gemm, conv_direct_fwd, conv_dgrad_patch
                                                       x gfx942, gfx950, gfx1250
                                                       x (the arch's matrix path, fma)
        ir22 = lower(family, spec, arch, "llvm22")     llvm23's lowering must have ir22's sha256
        ir24 = lower(family, spec, arch, "llvm24")     (its own profile: datalayout/triple/target-ID)
        llvm22: toolchain_for("llvm22", arch).compile(ir22)   llvmlite 0.50 (LLVM 22.1)
        llvm23: toolchain_for("llvm23", arch).compile(ir22)   AMD's LLVM 23 (rocm-llvm)
        llvm24: toolchain_for("llvm24", arch).compile(ir24)   triton 3.9's LLVM 24 code generator
                                                              (after llvmlite 22's O3 middle end)
        each in the compile pool's isolated workers (the toolchains' own compile), then
        llvm-readelf-22 --notes  -> .vgpr_count .sgpr_count .agpr_count .group_segment_fixed_size
                                    .private_segment_fixed_size .vgpr/.sgpr_spill_count
        llvm-readelf-22 -s       -> code size (st_size of the kernel's FUNC symbol)
        llvm-objdump-22 -d       -> instruction counts of the main loop (below), whole kernel too

The main loop: every branch (s_branch, s_cbranch_*) whose target lies at or before its own
address closes a loop [target, branch]; the main loop is the one holding the most matrix
instructions, then the most LDS operations, then the widest (main_loop()). A kernel with no backward branch reports whole-kernel counts and says so
(`scope` = "kernel").

    .venv/bin/python bench/codegen_deltas.py --json docs/bench-raw/codegen-deltas.json > docs/bench-raw/codegen-deltas.md
    .venv/bin/python bench/codegen_deltas.py --family gemm --arch gfx942      # one slice
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

FAMILIES = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")
ARCHES = ("gfx942", "gfx950", "gfx1250")
MATRIX_PATH = {"gfx942": "mfma", "gfx950": "mfma", "gfx1250": "wmma"}
LANES = ("llvm22", "llvm23", "llvm24")
READELF, OBJDUMP = "llvm-readelf-22", "llvm-objdump-22"

# Instruction classes counted (prefix match on the mnemonic). gfx12 splits s_waitcnt into
# s_wait_loadcnt / s_wait_dscnt / ... and s_barrier into s_barrier_signal / _wait: "wait" and
# "barrier" count every s_wait* / s_barrier* so the arches compare.
CLASSES: dict[str, tuple[str, ...]] = {
    "matrix": ("v_mfma", "v_smfmac", "v_wmma", "v_swmmac"),
    "lds": ("ds_read", "ds_write", "ds_load", "ds_store"),
    "global": ("global_load", "global_store", "buffer_"),
    "wait": ("s_wait",),
    "barrier": ("s_barrier",),
}
METADATA = {  # AMDGPU metadata key -> our name
    "vgpr_count": "vgpr", "sgpr_count": "sgpr", "agpr_count": "agpr",
    "group_segment_fixed_size": "lds_bytes", "private_segment_fixed_size": "scratch_bytes",
    "vgpr_spill_count": "vgpr_spills", "sgpr_spill_count": "sgpr_spills",
}
_META_RE = re.compile(r"^\s*(?:-\s+)?\.([a-z0-9_]+):\s+(\S+)\s*$")
# "	v_mfma_f32_32x32x8_f16 a[0:15], ...   // 000000001A54: D3EA8000 ... <sym+0x850>"
_INSN_RE = re.compile(r"^\s+([a-z_][a-z0-9_.]*)\b(.*?)//\s*([0-9A-Fa-f]+):")
_TARGET_RE = re.compile(r"<([^>+]+)(?:\+0x([0-9a-f]+))?>\s*$")


@dataclass(frozen=True)
class Insn:
    addr: int
    mnemonic: str
    target: int | None  # branch target address, None for anything else


@dataclass(frozen=True)
class Stats:
    kernel: str
    code_bytes: int
    vgpr: int
    sgpr: int
    agpr: int
    lds_bytes: int
    scratch_bytes: int
    vgpr_spills: int
    sgpr_spills: int
    scope: str  # "loop" (the main loop) or "kernel" (no backward branch)
    loops: int  # backward branches seen
    loop_start: int | None  # address of the main loop's first instruction
    loop_end: int | None  # address of its backward branch
    counts: dict  # class -> count within scope, plus "insts"
    kernel_counts: dict  # the same over the whole kernel
    metadata_keys: tuple[str, ...]  # every key of the kernel's metadata entry


def _run(*cmd: str) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def read_metadata(notes: str) -> dict[str, str]:
    """The first kernel's `.key: value` scalars from `llvm-readelf --notes` (one kernel per object)."""
    out: dict[str, str] = {}
    in_kernels = in_args = False
    for line in notes.splitlines():
        if line.startswith("amdhsa.kernels:"):
            in_kernels = True
            continue
        if in_kernels and line and not line.startswith(" "):
            break  # amdhsa.target etc.: the kernel list ended
        if not in_kernels:
            continue
        indent = len(line) - len(line.lstrip(" -"))
        if re.match(r"^\s*-\s+\.", line) and indent <= 6 and out:
            break  # a second kernel entry
        if line.strip().startswith(".args:"):
            in_args = True
            continue
        if in_args and indent > 6:
            continue
        in_args = False
        m = _META_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def kernel_symbol(symbols: str, kernel: str) -> tuple[int, int]:
    """(address, size) of ``kernel``'s FUNC symbol in `llvm-readelf -s` output."""
    for line in symbols.splitlines():
        f = line.split()
        if len(f) >= 8 and f[3] == "FUNC" and f[7] == kernel:
            return int(f[1], 16), int(f[2])
    raise LookupError(f"no FUNC symbol {kernel!r}")


def parse_disassembly(text: str, kernel: str) -> list[Insn]:
    """The instructions of ``kernel`` in `llvm-objdump -d` output (address from the comment)."""
    insns: list[Insn] = []
    inside = False
    for line in text.splitlines():
        if line.endswith(">:"):
            inside = line.split("<", 1)[1][:-2] == kernel
            continue
        if not inside:
            continue
        m = _INSN_RE.match(line)
        if not m:
            continue
        mnemonic, addr = m.group(1), int(m.group(3), 16)
        target = None
        if mnemonic == "s_branch" or mnemonic.startswith("s_cbranch"):
            t = _TARGET_RE.search(line)
            if t and t.group(1) == kernel:
                target = int(t.group(2) or "0", 16)  # an offset from the symbol; made absolute below
        insns.append(Insn(addr, mnemonic, target))
    if not insns:
        raise LookupError(f"no instructions of {kernel!r} in the disassembly")
    return insns


def count(insns: list[Insn]) -> dict[str, int]:
    out = {name: sum(1 for i in insns if i.mnemonic.startswith(prefixes)) for name, prefixes in CLASSES.items()}
    out["insts"] = len(insns)
    return out


def main_loop(insns: list[Insn], base: int) -> tuple[int, int, int] | None:
    """(start, end, backward branches) of the main loop, None if there is no backward branch.

    Of the regions [target, branch] the backward branches close, the one with the most matrix
    instructions, then the most LDS operations (an fma kernel's hot loop), then the widest
    (so of nested loops around the same work, the outermost). Not simply the widest: a
    dgrad kernel's widest loop is its scatter of dX, which holds no matrix instruction.
    """
    back = [(base + i.target, i.addr) for i in insns if i.target is not None and base + i.target <= i.addr]
    if not back:
        return None

    def rank(region: tuple[int, int]) -> tuple[int, int, int, int]:
        c = count([i for i in insns if region[0] <= i.addr <= region[1]])
        return c["matrix"], c["lds"], region[1] - region[0], -region[0]

    start, end = max(back, key=rank)
    return start, end, len(back)


def analyze(hsaco: Path, kernel: str) -> Stats:
    """Everything in the table for one code object, read by the LLVM 22 binutils."""
    meta = read_metadata(_run(READELF, "--notes", str(hsaco)))
    base, size = kernel_symbol(_run(READELF, "-s", "-W", str(hsaco)), kernel)
    # objdump runs on past the symbol's end into the section's padding (s_code_end ...)
    insns = [i for i in parse_disassembly(_run(OBJDUMP, "-d", str(hsaco)), kernel) if base <= i.addr < base + size]
    loop = main_loop(insns, base)
    kernel_counts = count(insns)
    if loop:
        start, end, n = loop
        counts = count([i for i in insns if start <= i.addr <= end])
    else:
        start = end = None
        n, counts = 0, kernel_counts
    regs = {ours: int(meta.get(key, 0)) for key, ours in METADATA.items()}
    return Stats(kernel=kernel, code_bytes=size, **regs, scope="loop" if loop else "kernel", loops=n,
                 loop_start=start, loop_end=end, counts=counts, kernel_counts=kernel_counts,
                 metadata_keys=tuple(sorted(meta)))


def cases(families=FAMILIES, arches=ARCHES) -> list[tuple[str, str, dict]]:
    """One representative spec per (family, arch, path): of the specs the variant table serves
    on llvm22 with that path, the one nearest the family's defaults (most fields equal; the
    table's order breaks ties), so every column compiles a spec the cache really builds."""
    from rocke_aot.aot.families import get_family
    from rocke_aot.variants.table import enumerate_specs

    out = []
    for f in families:
        for a in arches:
            for p in (MATRIX_PATH[a], "fma"):
                default = asdict(get_family(f).spec_type(path=p))
                served = [asdict(s) for s in enumerate_specs(f, a, "llvm22") if s.path == p]
                if not served:
                    raise LookupError(f"the {f} table serves no {p} spec on {a}")
                out.append((f, a, max(served, key=lambda d: sum(d[k] == v for k, v in default.items()))))
    return out


def _compile_case(family: str, arch: str, spec: dict, workdir: Path) -> dict:
    from rocke_aot.aot import toolchains as tcs
    from rocke_aot.aot.lower import lower

    k22, k23, k24 = (lower(family, spec, arch, lane) for lane in LANES)
    if k23.ir_sha256 != k22.ir_sha256:  # the premise of the llvm23 column: the same IR as llvm22
        raise RuntimeError(f"{family} {arch} {spec}: llvm23's IR differs from llvm22's")
    row: dict = {"family": family, "arch": arch, "spec": spec, "kernel": k22.kernel_name,
                 "ir_sha256": {"llvm22": k22.ir_sha256, "llvm23": k22.ir_sha256, "llvm24": k24.ir_sha256},
                 "lanes": {}}
    for lane, kernel in (("llvm22", k22), ("llvm23", k22), ("llvm24", k24)):
        tc = tcs.toolchain_for(lane, arch)
        result = tc.compile(kernel.ir, arch, timeout=300)
        path = workdir / f"{family}-{arch}-{spec['path']}-{lane}.hsaco"
        path.write_bytes(result.code_object)
        st = asdict(analyze(path, kernel.kernel_name))
        st["toolchain"] = f"{tc.kind} {tc.detect().llvm_version}"
        st["hsaco_sha256"] = hashlib.sha256(result.code_object).hexdigest()
        row["lanes"][lane] = st
    # metadata keys not every lane writes (the rest are the same for all three): kept per row
    keys = {lane: set(st.pop("metadata_keys")) for lane, st in row["lanes"].items()}
    common = set.intersection(*keys.values())
    row["metadata_keys_not_in_every_lane"] = {lane: sorted(k - common) for lane, k in keys.items() if k - common}
    for st in row["lanes"].values():
        del st["kernel"]  # the row's
    return row


def run(families=FAMILIES, arches=ARCHES, jobs: int = 2) -> dict:
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(max(1, jobs)) as ex:
        rows = list(ex.map(lambda c: _compile_case(*c, Path(tmp)), cases(families, arches)))
    return {"command": "python bench/codegen_deltas.py " + " ".join(sys.argv[1:]),
            "readers": [_run(READELF, "--version").splitlines()[1].strip()],
            "wall_s": round(time.time() - t0, 1), "rows": rows}


COLUMNS = [("code B", "code_bytes"), ("VGPR", "vgpr"), ("SGPR", "sgpr"), ("AGPR", "agpr"),
           ("LDS B", "lds_bytes"), ("scratch B", "scratch_bytes")]
LOOP_COLUMNS = [("matrix", "matrix"), ("LDS ops", "lds"), ("global", "global"), ("wait", "wait"),
                ("barrier", "barrier"), ("insts", "insts")]


def _cell(values: list) -> str:
    """'22 / 23 / 24'; bold when llvm23 differs from either neighbour."""
    text = " / ".join(str(v) for v in values)
    return f"**{text}**" if len(set(values)) > 1 else text


def markdown(doc: dict) -> str:
    head = ["family", "arch", "path", *(c for c, _ in COLUMNS), "spills", "scope",
            *(c for c, _ in LOOP_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in doc["rows"]:
        ls = [row["lanes"][lane] for lane in LANES]
        spills = [f"{s['vgpr_spills']}+{s['sgpr_spills']}" for s in ls]
        scope = "/".join(s["scope"] for s in ls) if len({s["scope"] for s in ls}) > 1 else ls[0]["scope"]
        cells = [row["family"], row["arch"], row["spec"]["path"],
                 *(_cell([s[key] for s in ls]) for _, key in COLUMNS), _cell(spills), scope,
                 *(_cell([s["counts"][key] for s in ls]) for _, key in LOOP_COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", action="append", choices=FAMILIES, help="repeatable; default: all")
    ap.add_argument("--arch", action="append", choices=ARCHES, help="repeatable; default: all")
    ap.add_argument("--jobs", type=int, default=2, help="cases compiled at once (each lane's compile in a worker)")
    ap.add_argument("--json", type=Path, default=None, help="write the raw figures here")
    args = ap.parse_args(argv)
    doc = run(tuple(args.family or FAMILIES), tuple(args.arch or ARCHES), args.jobs)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        head = json.dumps({k: v for k, v in doc.items() if k != "rows"}, sort_keys=True)[:-1]
        rows = ",\n".join(json.dumps(r, sort_keys=True) for r in doc["rows"])
        args.json.write_text(f'{head}, "rows": [\n{rows}\n]}}\n')  # one row a line: small, diffable
    sys.stdout.write(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
