"""The LLVM 24 delta report: `python -m devtools.llvm24_report --out bench/results/llvm24-characterization.json`
(docs/llvm24-lane.md cites it).

(The per-lane arch-domain probe is aot/characterize.py; this module measures what LLVM 24
does differently from LLVM 22 beyond intrinsic availability: datalayout, triple, target-ID
settings, kernel descriptors, and whether the llvm23 profile's IR gives the same code.)

    for each wired AMDGPU arch (gfx90a, gfx942, gfx950, gfx1250):
      datalayout   what each toolchain's target machine uses (LLVM 24: read from its IR dump)
      triple       the triple LLVM 24 asks for; does the reference LLVM accept it?
      target ID    sramecc/xnack via subtarget features vs module flags -> e_flags of each
      intrinsics   every intrinsic the families use, compiled alone in an isolated worker on each
                   LLVM -> "ok" | "fails: <LLVM's message>"
      descriptor   user-SGPR / system-SGPR enables of a minimal kernel: reference (O3, attributor)
                   vs LLVM 24 codegen without and with explicit amdgpu-no-* attributes
      profile IR   the same kernel emitted with the llvm23 profile (LLVM 22 datalayout, plain
                   triple) vs the candidate llvm24 form: warnings, and whether the code is identical
    -> one JSON report (and a summary of deltas) that docs/llvm24-lane.md cites.

Every compile runs in a worker process (LLVM aborts on an intrinsic the arch lacks); a crash
is a measured "fails", never a crash of this tool.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile

from rocke_aot import lanes
from rocke_aot.aot.characterize_emission import elf_facts
from rocke_aot.aot.characterize_ir import PLAIN_TRIPLE, amdgpu_intrinsics, minimal_kernel_ir, probe_ir
from rocke_aot.aot.toolchains.triton24 import Triton24Toolchain, discover, find_llvm24, link_hsaco
from rocke_aot.errors import CompileError, RockeError, ToolchainError

ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1250")

# ------------------------------------------------------------------ LLVM 22 (llvmlite) side


def llvm22_compile(ir: str, cpu: str, triple: str = PLAIN_TRIPLE, features: str = "",
                   python: str | None = None) -> dict:
    """IR -> O3 pipeline + codegen -> relocatable, in the compile pool's llvmlite worker."""
    from rocke_aot.aot.compiler import WorkerSpec, default_pool

    payload = {"ir": ir, "triple": triple, "cpu": cpu, "features": features, "opt": 3, "emit": "obj"}
    try:
        reply = default_pool().call(WorkerSpec.of(python or sys.executable), "llvm.compile", payload)
    except CompileError as e:
        return {"ok": False, "error": str(e), "log": e.log}
    return {"ok": True, "obj": reply.blob, "log": reply.log}


# ------------------------------------------------------------------ code-object facts (elf_facts: aot/characterize_emission.py)

def _text(data: bytes) -> bytes:
    return ELFFile(io.BytesIO(data)).get_section_by_name(".text").data()


def _asm_delta(a: str, b: str) -> list[str]:
    """Lines of two assembly listings that differ (comments dropped), as "-old" / "+new"."""
    import difflib

    def clean(text: str) -> list[str]:
        return [ln.split(";")[0].rstrip() for ln in text.splitlines() if ln.split(";")[0].strip()]

    return [d for d in difflib.unified_diff(clean(a), clean(b), lineterm="", n=0)
            if d[:1] in "+-" and not d.startswith(("+++", "---"))]


# ------------------------------------------------------------------ the report


def _llvm24(tc: Triton24Toolchain, ir: str, processor: str, triple: str) -> dict[str, Any]:
    try:
        obj, asm, log = tc.compile_object(ir, processor, triple)
        return {"ok": True, "obj": obj, "asm": asm, "log": log}
    except CompileError as e:
        return {"ok": False, "error": str(e).splitlines()[0] if str(e) else repr(e), "log": e.log}


def _status(res: dict) -> str:
    return "ok" if res["ok"] else f"fails: {res['error'].splitlines()[0][:300]}"


def _warnings(log: str) -> list[str]:
    return sorted({ln.strip() for ln in log.splitlines() if "warning:" in ln or ln.lstrip().startswith("error:")})


def characterize_arch(tc: Triton24Toolchain, processor: str, ref_python: str | None = None,
                      intrinsics: tuple[str, ...] | None = None) -> dict[str, Any]:
    info = tc.detect()
    dl24 = info.datalayouts.get(processor)
    sub = info.extra.get("suggested_triples", {}).get(processor)
    dl23 = lanes.PROFILES["llvm23"].datalayout("amdgcn")
    out: dict[str, Any] = {"processor": processor}

    # datalayout and triple
    ref = llvm22_compile(minimal_kernel_ir(None, PLAIN_TRIPLE, no_inputs=False), processor, python=ref_python)
    sub_on_22 = llvm22_compile(minimal_kernel_ir(None, sub or PLAIN_TRIPLE, no_inputs=False), processor,
                               triple=sub or PLAIN_TRIPLE, python=ref_python)
    from rocke_aot.aot.toolchains.llvmlite_toolchain import LlvmliteToolchain

    dl22 = LlvmliteToolchain(ref_python or sys.executable).detect().datalayouts.get(processor)
    out["datalayout"] = {"llvm22": dl22, "llvm24": dl24, "llvm23_profile": dl23,
                         "llvm24_profile": lanes.PROFILES["llvm24"].datalayouts.get("amdgcn"),
                         "llvm24_equals_llvm22": dl22 == dl24,
                         "llvm24_with_subarch_triple": tc_datalayout(tc, processor, sub) if sub else None}
    plain = _llvm24(tc, minimal_kernel_ir(None, PLAIN_TRIPLE, no_inputs=False), processor, PLAIN_TRIPLE)
    subr = _llvm24(tc, minimal_kernel_ir(None, sub, no_inputs=False), processor, sub) if sub else None
    out["triple"] = {
        "llvm24_asks_for": sub,
        "derived_rule": lanes_amdgpu_triple(processor),
        "llvm24_warnings_with_plain_triple": _warnings(plain.get("log", "")),
        "llvm24_warnings_with_subarch_triple": _warnings(subr.get("log", "")) if subr else None,
        "llvm22_accepts_subarch_triple": bool(sub_on_22.get("ok")),
        "llvm22_error_for_subarch_triple": None if sub_on_22.get("ok") else sub_on_22.get("error"),
    }
    # code objects and descriptors (the minimal kernel: kernarg pointer, workitem id x, LDS, barrier)
    objs: dict[str, Any] = {}
    if ref.get("ok"):
        objs["llvm22_O3"] = elf_facts(link_hsaco(ref["obj"]))
    if plain["ok"]:
        objs["llvm24_codegen"] = elf_facts(link_hsaco(plain["obj"]))
    noin = _llvm24(tc, minimal_kernel_ir(None, sub or PLAIN_TRIPLE, no_inputs=True), processor, sub or PLAIN_TRIPLE)
    if noin["ok"]:
        objs["llvm24_codegen_amdgpu_no"] = elf_facts(link_hsaco(noin["obj"]))
    out["code_objects"] = objs
    # target-ID settings: subtarget features (the LLVM 22 way) vs module flags (LLVM 24)
    tid: dict[str, Any] = {}
    for feat in ("xnack", "sramecc"):
        if feat not in _target_features(processor):
            continue
        res_feat = _llvm24_features(tc, minimal_kernel_ir(None, sub, no_inputs=True), processor, sub, f"-{feat}")
        res_flag = _llvm24(tc, minimal_kernel_ir(None, sub, no_inputs=True, module_flags={f"amdgpu.{feat}": 0}),
                           processor, sub)
        ref_feat = llvm22_compile(minimal_kernel_ir(None, PLAIN_TRIPLE, no_inputs=True), processor,
                                  features=f"-{feat}", python=ref_python)
        tid[f"{feat}-"] = {
            "llvm22_subtarget_feature": elf_facts(link_hsaco(ref_feat["obj"]))[feat] if ref_feat.get("ok") else _status(ref_feat),
            "llvm24_subtarget_feature": (elf_facts(link_hsaco(res_feat["obj"]))[feat] if res_feat["ok"] else _status(res_feat)),
            "llvm24_subtarget_feature_diagnostics": _warnings(res_feat.get("log", "")),
            "llvm24_module_flag": elf_facts(link_hsaco(res_flag["obj"]))[feat] if res_flag["ok"] else _status(res_flag),
        }
    out["target_id"] = tid
    # llvm23-profile IR on LLVM 24 vs the llvm24 form: identical machine code?
    p23 = _llvm24(tc, minimal_kernel_ir(dl23, PLAIN_TRIPLE, no_inputs=True), processor, PLAIN_TRIPLE)
    p24 = _llvm24(tc, minimal_kernel_ir(dl24, sub or PLAIN_TRIPLE, no_inputs=True), processor, sub or PLAIN_TRIPLE)
    if p23["ok"] and p24["ok"]:
        out["llvm23_profile_ir"] = {
            "compiles": True,
            "diagnostics": _warnings(p23["log"]),
            "text_identical_to_llvm24_form": _text(p23["obj"]) == _text(p24["obj"]),
            "asm_lines_that_differ": _asm_delta(p23["asm"], p24["asm"]),
            "note_target_llvm23_ir": re.search(r'\.amdgcn_target "([^"]+)"', p23["asm"]).group(1),
            "note_target_llvm24_ir": re.search(r'\.amdgcn_target "([^"]+)"', p24["asm"]).group(1),
        }
    else:
        out["llvm23_profile_ir"] = {"compiles": False, "llvm23": _status(p23), "llvm24": _status(p24)}
    # intrinsic availability, each alone in a worker
    decls24 = amdgpu_intrinsics(lanes.PROFILES["llvm24"])
    decls22 = amdgpu_intrinsics(lanes.PROFILES["llvm22"])
    names = intrinsics or tuple(decls24)

    def one(key: str) -> tuple[str, dict]:
        r22 = llvm22_compile(probe_ir(decls22[key]), processor, python=ref_python) if key in decls22 else None
        r24 = _llvm24(tc, probe_ir(decls24[key], None, sub or PLAIN_TRIPLE), processor, sub or PLAIN_TRIPLE)
        return decls24[key].name, {"llvm22": _status(r22) if r22 else "not declared by the llvm22 profile",
                                   "llvm24": _status(r24),
                                   "declaration_same_as_llvm22_profile": decls22.get(key) == decls24[key]}

    with ThreadPoolExecutor(max_workers=2) as pool:
        out["intrinsics"] = dict(pool.map(one, names))
    return out


def tc_datalayout(tc: Triton24Toolchain, processor: str, triple: str) -> str | None:
    from rocke_aot.aot.toolchains.triton24 import run_worker

    res, _ = run_worker("triton24.target", {"library": tc.library, "processor": processor, "triple": triple})
    return res.get("datalayout")


def _target_features(processor: str) -> tuple[str, ...]:
    from rocke_aot.arch import ARCHES as TABLE

    return TABLE[processor].target_features


def _llvm24_features(tc: Triton24Toolchain, ir: str, processor: str, triple: str, features: str) -> dict:
    try:
        obj, asm, log = tc.compile_object(ir, processor, triple, features)
        return {"ok": True, "obj": obj, "asm": asm, "log": log}
    except CompileError as e:
        return {"ok": False, "error": str(e), "log": e.log}


def lanes_amdgpu_triple(processor: str) -> str | None:
    fn = getattr(lanes, "amdgpu_subarch_triple", None)
    return fn(processor) if fn else None


def characterize(lane: str = "llvm24", arches: tuple[str, ...] = ARCHES, ref_python: str | None = None,
                 intrinsics: tuple[str, ...] | None = None) -> dict[str, Any]:
    lane_obj = lanes.get_lane(lane)
    if lane_obj.name != "llvm24":
        raise ToolchainError(f"characterization is wired for the llvm24 lane only, not {lane_obj.name}")
    # A drift refusal is exactly what characterization must look at, so take the library even then.
    tc = None
    for cand in discover():
        info = cand.detect()
        if info.llvm_major == 24 and info.arches:
            tc = cand
            break
    if tc is None:
        find_llvm24()  # raises with the setup hint
    info = tc.detect()
    report = {
        "lane": lane_obj.name,
        "reference": "llvm22 (llvmlite under " + (ref_python or sys.executable) + ", O3 pipeline + codegen)",
        "toolchain": {**info.as_dict(), "datalayouts": dict(info.datalayouts)},
        "profiles": {name: {"amdgcn_datalayout": p.datalayouts.get("amdgcn"),
                            "capabilities": sorted(p.capabilities)} for name, p in lanes.PROFILES.items()},
        "lane_profile": lane_obj.profile_name,
        "arches": {p: characterize_arch(tc, p, ref_python, intrinsics) for p in arches},
    }
    report["summary"] = summarize(report)
    return report


def summarize(report: dict) -> dict[str, Any]:
    arches = report["arches"]
    s: dict[str, Any] = {}
    s["datalayout_differs_from_llvm22"] = sorted(p for p, a in arches.items() if not a["datalayout"]["llvm24_equals_llvm22"])
    s["subarch_triple_rejected_by_llvm22"] = sorted(
        p for p, a in arches.items() if not a["triple"]["llvm22_accepts_subarch_triple"])
    s["intrinsic_availability_differs"] = {
        p: sorted(n for n, r in a["intrinsics"].items() if (r["llvm22"] == "ok") != (r["llvm24"] == "ok"))
        for p, a in arches.items()}
    s["xnack_flag"] = {p: {k: v.get("xnack") for k, v in a["code_objects"].items()} for p, a in arches.items()}
    s["descriptor_enables_beyond_kernarg"] = {
        p: {k: sorted(n for n, v in next(iter(v["descriptors"].values())).items()
                      if v is True and n != "kernarg_segment_ptr")
            for k, v in a["code_objects"].items()} for p, a in arches.items()}
    s["llvm23_ir_machine_code_identical"] = {p: a["llvm23_profile_ir"].get("text_identical_to_llvm24_form")
                                             for p, a in arches.items()}
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.llvm24_report", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="write the JSON report here (the docs cite bench/results/llvm24-characterization.json); "
                                             "without it the report goes to stdout")
    ap.add_argument("--arch", action="append", default=[], choices=list(ARCHES), help="only this arch (repeatable)")
    a = ap.parse_args(argv)
    try:
        report = characterize("llvm24", tuple(a.arch) or ARCHES)
    except RockeError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=2, sort_keys=True, default=str)
    if a.out:
        a.out.write_text(text + "\n")
        print(json.dumps(report["summary"], indent=2, sort_keys=True))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
