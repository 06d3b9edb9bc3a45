"""The arch-domain characterization: what every toolchain on this host can really build.

    domain(lanes?, arches?) -> {lane: document}        `rocke-aot characterize`
        for each lane with a usable toolchain here (llvm20: llvmlite 0.46 venv, llvm22: the
        project's llvmlite 0.50, llvm24: the LLVM 24 code generator library; a refused one
        such as Debian's COMGR 2.4 / LLVM 15 has no column, and neither has a lane with no
        toolchain: both are named skips, "unvalidated", never measured)
          x every wired arch (rocke_aot/arch.py ARCHES)
          x probes:  target         a minimal kernel for the processor
                     intrinsic:<n>  one kernel calling one intrinsic, for every intrinsic any
                                    emission profile declares (rocke_aot/lanes.py; the matrix
                                    instructions of rocke_aot/mma.py are among them, checked)
                     feature:<f>-   the target-ID settings the arch accepts (xnack, sramecc),
                                    set the way the lane sets them; ptx80 on NVPTX
        each probe is one request to an isolated worker of the compile pool (aot/compiler/
        pool.py) with a timeout, since LLVM aborts the process on an intrinsic the arch lacks:
            ok | arch_absent (LLVM's message as evidence) | name_absent | toolchain_crash | timeout
    -> one JSON document per lane: schema, lane, profile, toolchain identity, probe options,
       results, summary; recorded in variants/characterization/<lane>.json (beside the
       variant data, which it backs: `rocke-aot variants` shows backed / unvalidated).
    load_recorded() / differences(recorded, fresh)    `rocke-aot characterize --check`

The product only reads the records (package data); recording them is maintainer tooling:
``python -m devtools.characterize --out variants/characterization`` (devtools/characterize.py
runs domain() and writes the directory it is given). The probe IR builders (probe_ir,
minimal_kernel_ir) are shared with the LLVM 24 delta report (devtools/llvm24_report.py).
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from rocke_aot import lanes, mma, settings
from rocke_aot.aot.characterize_emission import emission
from rocke_aot.aot.characterize_ir import (
    NVPTX_TRIPLE,
    PLAIN_TRIPLE,
    PROBE_TIMEOUT,
    classify_error,
    evidence,
    minimal_kernel_ir,
    minimal_nvptx_ir,
    probe_ir,
)
from rocke_aot.arch import ARCHES as ARCH_TABLE
from rocke_aot.variants.families import get_family
from rocke_aot.variants.triton import is_triton

SCHEMA = 1
STATUSES = ("ok", "arch_absent", "name_absent", "toolchain_crash", "timeout")
RECORD_DIR = Path(__file__).resolve().parent.parent / "variants" / "characterization"  # package data, read only
WRITE_COMMAND = "python -m devtools.characterize --out variants/characterization"  # a source checkout's
PROBE_OPTIONS = {
    "compile": "codegen only (llvmlite: opt 3 target machine, no module pipeline; LLVM 24: the "
               "library's codegen; AMD LLVM 23: LLVM-C codegen at opt 3, no LLVMRunPasses), "
               "AMDGPU -> relocatable, NVPTX -> PTX",
    "operands": "vector and float operands loaded from the kernel's pointer; immarg modifiers 0",
    "triple": "the lane profile's triple (LLVM 24: the subarch triple it asks for)",
    "feature_probe": "minimal kernel with <feature> off; ok when the object's e_flags say off",
    "timeout_s": PROBE_TIMEOUT,
}

# ------------------------------------------------------------------ what is probed


def probed_intrinsics() -> dict[str, lanes.IntrinsicDecl]:
    """Every intrinsic any emission profile declares, by LLVM name (one shape per name, checked),
    with every matrix instruction of mma.py among them."""
    out: dict[str, lanes.IntrinsicDecl] = {}
    for profile in lanes.PROFILES.values():
        for decl in profile.intrinsics.values():
            old = out.setdefault(decl.name, decl)
            if old != decl:
                raise ValueError(f"two declaration shapes for {decl.name}: {old} / {decl}")
    for key, instr in mma.INSTRS.items():
        if not any(key in p.intrinsics for p in lanes.PROFILES.values()):
            raise ValueError(f"matrix instruction {key} ({instr.mnemonic}) has no profile declaration")
    return dict(sorted(out.items()))


def _applies(name: str, family: str) -> bool:
    if name.startswith("llvm.amdgcn."):
        return family == "amdgcn"
    if name.startswith("llvm.nvvm."):
        return family == "nvptx64"
    return True  # target-independent (llvm.fmuladd.f32)


def feature_probes(processor: str) -> tuple[str, ...]:
    """The target features the lowering uses on ``processor``, as probes: the wave size it
    states ("+wavefrontsize64" on gfx9, "+wavefrontsize32" on gfx1250: aot/lower/amdgpu.py),
    each target-ID setting the arch accepts, turned off (xnack-, sramecc-), and PTX 8.0 on
    NVPTX (aot/compiler: "+ptx80")."""
    info = ARCH_TABLE[processor]
    if info.family == "nvptx64":
        return ("ptx80+",)
    return (f"wavefrontsize{info.wave_size}+",) + tuple(f"{f}-" for f in info.target_features)


def _undefined_symbols(obj: bytes) -> set[str]:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    symtab = ELFFile(io.BytesIO(obj)).get_section_by_name(".symtab")
    return {s.name for s in (symtab.iter_symbols() if isinstance(symtab, SymbolTableSection) else ()) if s["st_shndx"] == "SHN_UNDEF" and s.name}


def classify_output(name: str, out: bytes, fmt: str) -> dict[str, str]:
    """A compiled intrinsic probe: ok, or name_absent when LLVM did not know the name and
    compiled a call to an external function of that name instead."""
    if fmt == "obj" and name in _undefined_symbols(out):
        return {"status": "name_absent", "evidence": f"compiled to a call of an undefined external {name}"}
    if fmt == "asm" and re.search(rf"\.extern\s+\.func\b.*\b{re.escape(name)}\b", out.decode("utf-8", "replace")):
        return {"status": "name_absent", "evidence": f"compiled to a call of an external function {name}"}
    return {"status": "ok"}


_SETTING = {0: "unsupported", 1: "any", 2: "off", 3: "on"}
_FEATURE_SHIFT = {"xnack": 8, "sramecc": 10}


def wave32_kernels(obj: bytes) -> dict[str, bool]:
    """Kernel name -> the descriptor's ENABLE_WAVEFRONT_SIZE32 bit (kernel_code_properties bit 10,
    AMDGPUUsage "Kernel Descriptor"), read from a relocatable's or a linked object's .kd symbols."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(io.BytesIO(obj))
    symtab = elf.get_section_by_name(".symtab")
    out = {}
    for sym in symtab.iter_symbols() if isinstance(symtab, SymbolTableSection) else ():
        if not sym.name.endswith(".kd") or sym["st_size"] != 64 or not isinstance(sym["st_shndx"], int):
            continue
        sec = elf.get_section(sym["st_shndx"])
        off = sym["st_value"] - sec["sh_addr"] if elf["e_type"] == "ET_DYN" else sym["st_value"]
        props = int.from_bytes(sec.data()[off + 56:off + 58], "little")
        out[sym.name[:-3]] = bool(props & (1 << 10))
    return out


def feature_setting(obj: bytes, feature: str) -> str:
    from elftools.elf.elffile import ELFFile

    flags = ELFFile(io.BytesIO(obj)).header["e_flags"]
    return _SETTING[(flags >> _FEATURE_SHIFT[feature]) & 3]


# ------------------------------------------------------------------ the lanes' toolchains


class LaneProber:
    """How one lane's toolchain compiles a probe: the worker to ask, and the request."""

    def __init__(self, lane: lanes.Lane, toolchain: Any):
        from rocke_aot.aot.compiler import WorkerSpec
        from rocke_aot.aot.toolchains import triton24, vendor23

        self.lane, self.toolchain, self.info = lane, toolchain, toolchain.detect()
        self.library = isinstance(toolchain, triton24.Triton24Toolchain)
        self.vendor = isinstance(toolchain, vendor23.Vendor23Toolchain)
        if self.vendor:
            self.spec = vendor23.worker_spec()
        elif self.library:
            self.spec = WorkerSpec.of(sys.executable, plugins=[triton24.WORKER],
                                      env={settings.TRITON24_ROLE: "codegen"})
        else:
            self.spec = WorkerSpec.of(toolchain.python)

    def identity(self) -> dict[str, str]:
        """What about the toolchain decides the probes: the code generator only. Probes neither
        link nor assemble PTX, so the linker, ptxas and the llvm24 lane's middle end (and their
        file hashes, which differ between a CUDA install and NVIDIA's pip wheel) stay out."""
        ident = self.toolchain.core_identity()
        return {k: v for k, v in sorted(ident.items())
                if not k.startswith(("linker", "ptxas", "middle_end", "shim"))}

    def targets_family(self, processor: str) -> bool:
        return not (self.library or self.vendor) or ARCH_TABLE[processor].family == "amdgcn"

    def triple(self, processor: str) -> str:
        if ARCH_TABLE[processor].family == "nvptx64":
            return NVPTX_TRIPLE
        if self.library:
            return self.info.extra.get("suggested_triples", {}).get(processor) or PLAIN_TRIPLE
        return PLAIN_TRIPLE

    def request(self, ir: str, processor: str, features: str = "") -> tuple[str, dict, str]:
        """(worker kind, payload, output format)."""
        nvptx = ARCH_TABLE[processor].family == "nvptx64"
        if self.vendor:
            from rocke_aot.aot.compiler.options import VENDOR23

            return "llvm23.compile", self.toolchain.payload(
                ir=ir, triple=self.triple(processor), processor=processor, features=features,
                options={**VENDOR23.worker_options(), "pipeline": ""}), "obj"
        if self.library:
            from rocke_aot.aot.compiler.options import TRITON24
            from rocke_aot.aot.toolchains.triton24 import INTERFACE_VERSION

            return "triton24.compile", {"library": self.toolchain.library, "interface_version": INTERFACE_VERSION,
                                        "ir": ir, "triple": self.triple(processor), "processor": processor,
                                        "features": features, "options": TRITON24.library_options()}, "obj"
        return "llvm.compile", {"ir": ir, "triple": self.triple(processor), "cpu": processor,
                                "features": features, "opt": 3, "pipeline": False,
                                "emit": "asm" if nvptx else "obj"}, "asm" if nvptx else "obj"


def lane_toolchains(only: Sequence[lanes.Lane] | None = None) -> tuple[dict[str, LaneProber], dict[str, str]]:
    """(lane -> prober for the lanes with a usable toolchain here, lane or toolchain -> why skipped).

    ``only``: the lanes to probe (Lanes, parsed by the caller); default every registered lane.
    A lane with no toolchain is a named skip ("unvalidated"); a refused toolchain (an LLVM
    major with no lane, a drift refusal) is listed with its refusal and gets no column.
    """
    from rocke_aot.aot.toolchains import detect_all

    wanted = list(only) if only else list(lanes.LANES)
    names = [lane.name for lane in wanted]
    present: dict[str, LaneProber] = {}
    skips: dict[str, str] = {}
    for tc in detect_all():
        info = tc.detect()
        if not info.usable:
            skips[f"{info.kind} at {info.location}"] = f"refused: {info.refusal}"
        elif info.lane in names and info.lane not in present:
            present[info.lane] = LaneProber(tc.lane, tc)  # the detection record's lane (Toolchain.lane)
    for lane in wanted:
        if lane.name not in present:
            skips[lane.name] = f"unvalidated: no LLVM {lane.major} toolchain on this host"
    return present, skips


# ------------------------------------------------------------------ running the probes


def _probe_task(call: Callable, prober: LaneProber, processor: str, probe: str) -> dict[str, Any]:
    """One probe on one pool thread (its own worker process for prober.spec)."""
    from rocke_aot.errors import CompileError, RockeError

    fam = ARCH_TABLE[processor].family
    kind_, _, what = probe.partition(":")
    features, module_flags, feature = "", None, None
    if kind_ == "intrinsic":
        ir = probe_ir(probed_intrinsics()[what], None, prober.triple(processor))
    elif kind_ == "feature":
        feature = what.rstrip("+-")
        if feature.startswith("wavefrontsize"):
            ir, features = minimal_kernel_ir(None, prober.triple(processor), no_inputs=True), f"+{feature}"
        elif fam == "nvptx64":
            ir, features = minimal_nvptx_ir(), f"+{feature}"
        elif prober.lane.profile.has("target-id:module-flags"):
            module_flags = {f"amdgpu.{feature}": 0}
            ir = minimal_kernel_ir(None, prober.triple(processor), no_inputs=True, lds_barrier=False,
                                   module_flags=module_flags)
        else:
            ir = minimal_kernel_ir(None, prober.triple(processor), no_inputs=True, lds_barrier=False)
            features = f"-{feature}"
    else:
        ir = (minimal_nvptx_ir() if fam == "nvptx64"
              else minimal_kernel_ir(None, prober.triple(processor), no_inputs=True))
    kind, payload, fmt = prober.request(ir, processor, features)
    try:
        reply = call(prober.spec, kind, payload, None, PROBE_TIMEOUT)
    except CompileError as e:
        return classify_error(e)
    except RockeError as e:
        return {"status": "toolchain_crash", "evidence": evidence(str(e))}
    out = reply.blob or b""
    if kind_ == "intrinsic":
        return classify_output(what, out, fmt)
    if kind_ == "feature":
        assert feature is not None, "a feature probe names its feature (set above)"
        if fam == "nvptx64":
            m = re.search(r"^\.version\s+(\S+)", out.decode("utf-8", "replace"), re.M)
            got = m.group(1) if m else "?"
            return {"status": "ok", "evidence": f".version {got}"} if got == "8.0" else \
                {"status": "arch_absent", "evidence": f"PTX .version {got} with +{feature}"}
        if feature.startswith("wavefrontsize"):
            want32 = feature == "wavefrontsize32"
            got = wave32_kernels(out).get("k")
            if got is None:
                return {"status": "toolchain_crash", "evidence": "no kernel descriptor k.kd in the object"}
            return {"status": "ok"} if got == want32 else {"status": "arch_absent", "evidence": (
                f"+{feature} gave a wave{'32' if got else '64'} kernel descriptor on {processor}")}
        setting = feature_setting(out, feature)
        if setting == "off":
            return {"status": "ok"}
        return {"status": "arch_absent", "evidence": f"e_flags {feature} {setting} for {processor} "
                f"({'module flag' if module_flags else 'subtarget feature'} {feature} off)"}
    return {"status": "ok"}


def _arch_probes(processor: str) -> list[str]:
    fam = ARCH_TABLE[processor].family
    return (["target"] + [f"intrinsic:{n}" for n in probed_intrinsics() if _applies(n, fam)]
            + [f"feature:{f}" for f in feature_probes(processor)])


def probe_lanes(probers: Mapping[str, LaneProber], arches: Sequence[str] | None = None, *,
                jobs: int = 4) -> dict[str, dict[str, Any]]:
    """Run every probe of every lane in parallel through a worker pool; one document per lane."""
    from rocke_aot.aot.compiler import WorkerPool

    arches = list(arches or ARCH_TABLE)
    futures: dict[tuple[str, str, str], Future] = {}
    fixed: dict[tuple[str, str, str], dict] = {}
    with WorkerPool(size=jobs) as pool:
        for lane, prober in probers.items():
            for processor in arches:
                for probe in _arch_probes(processor):
                    key = (lane, processor, probe)
                    if not prober.targets_family(processor):
                        fixed[key] = {"status": "arch_absent", "evidence": (
                            f"{prober.info.kind} targets only {', '.join(prober.info.arches)} "
                            f"(no {ARCH_TABLE[processor].family} back end)")}
                    else:
                        futures[key] = pool.submit_task(_probe_task, prober, processor, probe)
        results = {**fixed, **{k: f.result() for k, f in futures.items()}}
    emitted = emission(probers, arches, jobs=jobs)
    docs = {lane: document(prober, {k[1:]: v for k, v in results.items() if k[0] == lane}, arches)
            for lane, prober in probers.items()}
    for lane, doc in docs.items():
        doc["emission"] = emitted[lane]
    return docs


def document(prober: LaneProber, results: Mapping[tuple[str, str], dict], arches: Sequence[str]) -> dict[str, Any]:
    declared = {d.name for d in prober.lane.profile.intrinsics.values()}
    doc_arches: dict[str, Any] = {}
    counts = {s: 0 for s in STATUSES}
    for processor in arches:
        entry: dict[str, Any] = {"target": None, "intrinsics": {}, "features": {}}
        for probe in _arch_probes(processor):
            res = dict(results[(processor, probe)])
            counts[res["status"]] += 1
            kind, _, what = probe.partition(":")
            if kind == "target":
                entry["target"] = res
            elif kind == "intrinsic":
                entry["intrinsics"][what] = {**res, "profile_declares": what in declared}
            else:
                entry["features"][what] = res
        # the target itself is absent: every probe of it is, and says so
        doc_arches[processor] = entry
    return {
        "schema": SCHEMA,
        "lane": prober.lane.name,
        "profile": prober.lane.profile_name,
        "toolchain": prober.identity(),
        "probe_options": PROBE_OPTIONS,
        "arches": doc_arches,
        "summary": counts,
        # how this document was made (and is checked): the domain and emission probes alike
        "commands": {"write": f"{WRITE_COMMAND} --lane {prober.lane.name}",
                     "check": f"rocke-aot characterize --check --lane {prober.lane.name}"},
    }


def domain(only: Sequence[lanes.Lane] | None = None, arches: Sequence[str] | None = None, *,
           jobs: int = 4) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(lane name -> fresh document, skipped lane or toolchain -> reason) for this host;
    ``only``: the lanes to probe (default every registered lane)."""
    probers, skips = lane_toolchains(only)
    return probe_lanes(probers, arches, jobs=jobs), skips


# ------------------------------------------------------------------ recorded documents


def record_path(lane: lanes.Lane, root: Path = RECORD_DIR) -> Path:
    return Path(root) / f"{lane.name}.json"


def load_recorded(root: Path = RECORD_DIR) -> dict[str, dict[str, Any]]:
    """lane name -> the recorded document (only lanes some host has measured)."""
    out = {}
    for lane in lanes.LANES:
        path = record_path(lane, root)
        if path.exists():
            doc = json.loads(path.read_text())
            if doc.get("schema") != SCHEMA or doc.get("lane") != lane.name:
                raise ValueError(f"{path}: schema {doc.get('schema')} lane {doc.get('lane')} is not "
                                 f"schema {SCHEMA} lane {lane.name}")
            out[lane.name] = doc
    return out


def differences(recorded: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    """What a fresh run on this host measured differently from the recorded document."""
    if recorded["toolchain"] != fresh["toolchain"]:
        return [f"toolchain identity differs: recorded {recorded['toolchain']}, here {fresh['toolchain']} "
                f"(re-record: `{WRITE_COMMAND} --lane {fresh['lane']}`)"]
    out = []
    for processor, entry in fresh["arches"].items():
        old = recorded["arches"].get(processor)
        if old is None:
            out.append(f"{processor}: not recorded")
            continue
        pairs = [("target", old["target"], entry["target"])]
        pairs += [(f"intrinsic {n}", old["intrinsics"].get(n), r) for n, r in entry["intrinsics"].items()]
        pairs += [(f"feature {n}", old["features"].get(n), r) for n, r in entry["features"].items()]
        for what, a, b in pairs:
            if a != b:
                out.append(f"{processor} {what}: recorded {a}, measured {b}")
    for processor, entry in fresh.get("emission", {}).items():
        old = recorded.get("emission", {}).get(processor, {})
        for what, value in entry.items():
            if old.get(what) != value:
                out.append(f"{processor} emission {what}: recorded {old.get(what)}, measured {value}")
    return out


def used_intrinsics(golden_doc: Mapping[str, Any], family: str, arch: str, lane: lanes.Lane) -> set[str] | None:
    """The intrinsics the golden cases of (family, arch) declare on ``lane`` (resolving aliases);
    None when the goldens hold no case of the family on that lane at all (a plugin's family)."""
    from rocke_aot.aot.golden import lane_entries

    entries, _ = lane_entries(golden_doc, lane)
    if not any(cid.startswith(f"{family}/") for cid in entries):
        return None
    return {i for cid, o in entries.items() if cid.startswith(f"{family}/{arch}/") for i in o.get("intrinsics", ())}


def backing(family: str, arch: str, lane: lanes.Lane, recorded: Mapping[str, Any],
            golden_doc: Mapping[str, Any]) -> tuple[str, str]:
    """(state, detail) of a served (family, arch, lane): "characterized" (every intrinsic its golden
    cases use is ok on the recorded toolchain), "contradicted" (one is not), or "unvalidated"."""
    if is_triton(get_family(family)):  # compiled by Triton's own LLVM and back ends (its sm_90: its ptxas)
        return "unvalidated", (f"{family} is a Triton family: Triton's compiler, which this characterization "
                               f"of the lane toolchains does not probe (docs/triton.md)")
    doc = recorded.get(lane.name)
    if doc is None:
        return "unvalidated", f"no characterization of {lane} recorded (no LLVM {lane.major} toolchain measured)"
    entry = doc["arches"].get(arch)
    if entry is None:
        return "unvalidated", f"the {lane} characterization does not cover {arch}"
    if entry["target"]["status"] != "ok":
        return "contradicted", f"{arch}: {entry['target']['status']}: {entry['target'].get('evidence', '')}"
    used = used_intrinsics(golden_doc, family, arch, lane)
    if used is None:
        return "unvalidated", (f"no IR goldens of family {family} on {lane} (the goldens cover the built-in "
                               f"families; a plugin's intrinsics are not recorded)")
    bad = sorted(n for n in used if entry["intrinsics"].get(n, {}).get("status") != "ok")
    if bad:
        n = bad[0]
        r = entry["intrinsics"].get(n, {"status": "not probed"})
        return "contradicted", f"{n}: {r['status']} {r.get('evidence', '')}".strip()
    return "characterized", f"{len(used)} intrinsics ok on {doc['toolchain'].get('llvm_version')}"
