"""The emission probes: what each lane's real compiler accepts and asks for, beyond intrinsics.

(aot/characterize.py probes intrinsic and feature availability; this module probes the facts
an emission profile is made of, the same way on every lane, so that profile sharing is a
measured decision: docs/llvm23-lane.md.)

    for each lane with a toolchain here x each wired AMDGPU arch:
      datalayout   what the toolchain's target machine reports; equal to the lane profile's?
      triples      the minimal kernel under the plain triple (amdgcn-amd-amdhsa) and the subarch
                   triple (amdgpu9.42-amd-amdhsa), codegen only: accepted?, diagnostics
      target_id    each target-ID setting the arch has (xnack, sramecc) turned off as a
                   subtarget feature and as a module flag -> the e_flags setting of the object
      amdgpu_no    the minimal kernel (kernarg pointer, workitem id x, LDS, barrier) WITHOUT
                   amdgpu-no-* attributes, codegen only and through the lane's own compile
                   (its O3 pipeline where it has one) -> implicit inputs the descriptor enables
                   beyond the kernarg pointer: [] means the pipeline inferred them all
      lowered_to   each matrix intrinsic the arch has (mma.py), alone in a kernel -> the
                   matrix instruction mnemonics in the object (llvm-objdump-22)
    -> doc["emission"][arch], recorded in variants/characterization/<lane>.json beside the
       domain probes, by `python -m devtools.characterize` (doc["commands"] says so).
    elf_facts(code object)  e_flags (mach, xnack, sramecc), ABI version, each kernel descriptor's
       enables: what these probes and the LLVM 24 delta report (devtools/llvm24_report.py) read

Every compile is a request to an isolated worker (an abort is a recorded failure).
"""

from __future__ import annotations

import io
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from rocke_aot import lanes, mma
from rocke_aot.aot.characterize_ir import PROBE_TIMEOUT, classify_error, minimal_kernel_ir, probe_ir
from rocke_aot.arch import ARCHES as ARCH_TABLE
from rocke_aot.errors import CompileError, RockeError
from rocke_aot.targets import Target

PLAIN = "amdgcn-amd-amdhsa"
OBJDUMP = "/usr/lib/llvm-22/bin/llvm-objdump"
_MATRIX = re.compile(r"\b(v_(?:mfma|wmma|smfmac|swmmac)\w*)")


_MACH_MASK, _XNACK_MASK, _SRAMECC_MASK = 0xFF, 0x300, 0xC00
_SETTING = {0: "unsupported", 1: "any", 2: "off", 3: "on"}


def elf_facts(data: bytes) -> dict[str, Any]:
    """e_flags decoded (code object v4+ layout), ABI version, and each kernel descriptor's enables."""
    elf = ELFFile(io.BytesIO(data))
    flags = elf.header["e_flags"]
    facts: dict[str, Any] = {
        "e_flags": hex(flags),
        "mach": hex(flags & _MACH_MASK),
        "xnack": _SETTING[(flags & _XNACK_MASK) >> 8],
        "sramecc": _SETTING[(flags & _SRAMECC_MASK) >> 10],
        "abi_version": elf.header["e_ident"]["EI_ABIVERSION"],
        "descriptors": {},
    }
    symtab = elf.get_section_by_name(".symtab")
    for sym in symtab.iter_symbols() if isinstance(symtab, SymbolTableSection) else []:
        if not sym.name.endswith(".kd") or sym["st_size"] != 64:
            continue
        sec = elf.get_section(sym["st_shndx"])
        off = sym["st_value"] - sec["sh_addr"] if elf["e_type"] == "ET_DYN" else sym["st_value"]
        kd = sec.data()[off:off + 64]
        rsrc2 = int.from_bytes(kd[52:56], "little")
        props = int.from_bytes(kd[56:58], "little")
        facts["descriptors"][sym.name[:-3]] = {
            "private_segment_buffer": bool(props & 1), "dispatch_ptr": bool(props & 2),
            "queue_ptr": bool(props & 4), "kernarg_segment_ptr": bool(props & 8),
            "dispatch_id": bool(props & 16), "flat_scratch_init": bool(props & 32),
            "user_sgpr_count": (rsrc2 >> 1) & 0x1F,
            "workgroup_id_x": bool(rsrc2 & (1 << 7)), "workgroup_id_y": bool(rsrc2 & (1 << 8)),
            "workgroup_id_z": bool(rsrc2 & (1 << 9)), "workitem_id_max_dim": (rsrc2 >> 11) & 3,
        }
    return facts


def _facts(obj: bytes) -> dict[str, Any]:
    return elf_facts(obj)


def _enabled_inputs(obj: bytes) -> list[str]:
    """Implicit inputs a kernel descriptor enables beyond the kernarg pointer (and the private
    segment buffer, which gfx90a always has)."""
    d = next(iter(_facts(obj)["descriptors"].values()))
    names = ("dispatch_ptr", "queue_ptr", "dispatch_id", "flat_scratch_init", "workgroup_id_y", "workgroup_id_z")
    out = [n for n in names if d.get(n)]
    if d.get("workitem_id_max_dim", 0) > 0:
        out.append("workitem_id_y/z")
    return out


def _matrix_mnemonics(obj: bytes) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="rocke-char-") as tmp:
        path = Path(tmp) / "k.o"
        path.write_bytes(obj)
        proc = subprocess.run([OBJDUMP, "-d", str(path)], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return [f"objdump failed: {proc.stderr.strip()[:200]}"]
    return sorted(set(_MATRIX.findall(proc.stdout)))


def _codegen(call, prober, ir: str, processor: str, features: str = "", triple: str | None = None):
    """(object | None, outcome dict) of one codegen-only compile on the lane's worker."""
    kind, payload, _ = prober.request(ir, processor, features)
    if triple is not None:
        payload = {**payload, "triple": triple}
    try:
        reply = call(prober.spec, kind, payload, None, PROBE_TIMEOUT)
    except CompileError as e:
        return None, classify_error(e)
    except RockeError as e:
        return None, {"status": "toolchain_crash", "evidence": str(e)[:300]}
    diags = sorted({ln.strip() for ln in (reply.log or "").splitlines() if "warning:" in ln or "error:" in ln})
    return reply.blob, {"status": "ok", **({"diagnostics": diags} if diags else {})}


def _lane_compile(prober, ir: str, processor: str):
    """The lane's own compile (its pipeline, its linker): (HSACO | None, outcome)."""
    try:
        return prober.toolchain.compile(ir, Target(processor)).code_object, {"status": "ok"}  # a registry processor
    except CompileError as e:
        return None, classify_error(e)


def emission_arch(call, prober, processor: str) -> dict[str, Any]:
    profile = prober.lane.profile
    info = prober.info
    out: dict[str, Any] = {}
    reported = info.datalayouts.get(processor)
    out["datalayout"] = {"reported": reported, "equals_profile": reported == profile.datalayouts.get("amdgcn")}
    # triples: both forms, codegen only, no attributes beyond the kernel's own
    subarch = lanes.amdgpu_subarch_triple(processor)
    triples = {}
    for triple in (PLAIN, subarch):
        _, res = _codegen(call, prober, minimal_kernel_ir(None, triple, no_inputs=True), processor, triple=triple)
        # LLVM's own words only (each worker frames a refusal its own way)
        m = re.search(r"No available targets are compatible with triple[^\n]*", res.get("evidence", ""))
        triples[triple] = {"accepted": res["status"] == "ok",
                           **({"diagnostics": res["diagnostics"]} if res.get("diagnostics") else {}),
                           **({"evidence": m.group(0) if m else res.get("evidence", "")} if res["status"] != "ok" else {})}
    out["triples"] = triples
    out["profile_triple"] = prober.triple(processor)
    # target-ID settings: as a subtarget feature and as a module flag
    tid: dict[str, Any] = {}
    triple = prober.triple(processor)
    for feat in ARCH_TABLE[processor].target_features:
        ways = {}
        obj, res = _codegen(call, prober, minimal_kernel_ir(None, triple, no_inputs=True, lds_barrier=False),
                            processor, features=f"-{feat}")
        ways["subtarget_feature"] = _facts(obj)[feat] if obj else res["status"]
        flagged = minimal_kernel_ir(None, triple, no_inputs=True, lds_barrier=False,
                                    module_flags={f"amdgpu.{feat}": 0})
        obj, res = _codegen(call, prober, flagged, processor)
        ways["module_flag"] = _facts(obj)[feat] if obj else res["status"]
        if res.get("diagnostics"):
            ways["module_flag_diagnostics"] = res["diagnostics"]
        tid[f"{feat}-"] = ways
    out["target_id"] = tid
    # amdgpu-no-* inference: codegen only vs the lane's own compile, no attributes given
    bare = minimal_kernel_ir(None, triple, no_inputs=False)
    obj, res = _codegen(call, prober, bare, processor)
    inference = {"codegen_only": _enabled_inputs(obj) if obj else res["status"]}
    obj, res = _lane_compile(prober, bare, processor)
    inference["lane_compile"] = _enabled_inputs(obj) if obj else f"{res['status']}: {res.get('evidence', '')}"
    obj, res = _lane_compile(prober, minimal_kernel_ir(None, triple, no_inputs=True), processor)
    inference["lane_compile_with_profile_attributes"] = _enabled_inputs(obj) if obj else res["status"]
    out["amdgpu_no"] = inference
    # lowered to: each matrix instruction's intrinsic, alone
    lowered = {}
    for key in sorted(mma.INSTRS):
        decl = profile.intrinsics.get(key)
        if decl is None or not decl.name.startswith("llvm.amdgcn."):
            continue
        obj, res = _codegen(call, prober, probe_ir(decl, None, triple), processor)
        lowered[decl.name] = _matrix_mnemonics(obj) if obj else res["status"]
    out["lowered_to"] = lowered
    return out


def emission(probers, arches, *, jobs: int = 4) -> dict[str, dict[str, Any]]:
    """lane -> doc["emission"]: every wired AMDGPU arch each lane's toolchain targets, the
    (lane, arch) pairs in parallel (each pool thread has its own worker processes)."""
    from concurrent.futures import ThreadPoolExecutor

    from rocke_aot.aot.compiler import default_pool

    pairs = [(lane, p) for lane, prober in probers.items() for p in arches
             if ARCH_TABLE[p].family == "amdgcn" and p in prober.info.arches]

    def one(pair):
        lane, p = pair
        return emission_arch(default_pool().call_fn(), probers[lane], p)

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, pairs))
    out: dict[str, dict[str, Any]] = {lane: {} for lane in probers}
    for (lane, p), res in zip(pairs, results):
        out[lane][p] = res
    return out
