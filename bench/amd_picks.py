"""The top pick per AMD arch for realistic shapes, with the model's estimate and its bound.

    shapes  LLM projections at decode (m = 1, 16) and prefill (m = 2048, 4096) sizes (Llama-style
            4096 x 4096, 4096 x 11008, 11008 x 4096, 4096 x 14336), squares (the issue's 4096^3),
            ResNet-50 layers (conv_direct_fwd) and ViT / patch-embedding dgrad (conv_dgrad_patch)
    candidates  every spec the family's variant table serves for the arch (lane llvm22), or with
            --cache the artifacts a built cache holds (their code-object resources give the
            residency); without a cache the residency is the spec's threads and LDS alone
            (registers unknown: an upper bound on work-groups per CU, stated in the output)
        │ variants/selection.rank(model="auto"): the hardware-fact model where the arch has its
        ▼ facts (gfx90a, gfx942, gfx950), the efficiency order where not (gfx1250, with the reason)
    per (arch, problem): the first choice's kernel, estimate (ms), bound, TFLOP/s the estimate
    implies, and the runner-up

    .venv/bin/python bench/amd_picks.py                          # docs/selection.md's table
    .venv/bin/python bench/amd_picks.py --arch gfx942 --cache sqlite:///... --json
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family
from rocke_aot.variants.selection import rank

ARCHES = ("gfx90a", "gfx942", "gfx950", "gfx1250")
GEMM = [("decode q/k/v/o 4096x4096", 1, 4096, 4096), ("decode x16 4096x4096", 16, 4096, 4096),
        ("decode up 4096->11008", 16, 11008, 4096), ("decode down 11008->4096", 16, 4096, 11008),
        ("prefill q/k/v/o", 2048, 4096, 4096), ("prefill up 4096->14336", 4096, 14336, 4096),
        ("prefill down 11008->4096", 4096, 4096, 11008), ("square 4096^3 (issue 26)", 4096, 4096, 4096),
        ("square 1024^3", 1024, 1024, 1024)]
FWD = [("ResNet-50 conv2_x 3x3 c64 n32", dict(n=32, h=56, w=56, c=64, k=64, r=3, s=3, pad_h=1, pad_w=1)),
       ("ResNet-50 conv2_x 1x1 c256->64 n32", dict(n=32, h=56, w=56, c=256, k=64, r=1, s=1, pad_h=0, pad_w=0)),
       ("ResNet-50 conv3_x 3x3 s2 c64->128 n8", dict(n=8, h=56, w=56, c=64, k=128, r=3, s=3, stride_h=2, stride_w=2,
                                                   pad_h=1, pad_w=1))]
PATCH = [("ViT-B/16 patch dgrad n8 224 K768", dict(n=8, h=224, w=224, c=3, k=768, p=16)),
         ("ViT-L/14 patch dgrad n4 224 K1024", dict(n=4, h=224, w=224, c=3, k=1024, p=14))]


def problems() -> list[tuple[str, str, dict]]:
    out = [("gemm", name, dict(m=m, n=n, k=k, dtype="f16")) for name, m, n, k in GEMM]
    out += [("conv_direct_fwd", name, dict(dtype="f16", **p)) for name, p in FWD]
    out += [("conv_dgrad_patch", name, dict(dtype="f16", **p)) for name, p in PATCH]
    return out


def table_candidates(family: str, arch: str) -> list[Candidate]:
    at = datetime(2026, 12, 3, tzinfo=timezone.utc)
    out = []
    for s in table.enumerate_specs(family, arch, "llvm22"):
        d = s.to_dict()
        out.append(Candidate(f"{family}:{s.kernel_name}", "-", family, d, arch, "llvm22", "default", "g", True,
                             Resources(*([None] * 9)), at))
    return out


def flops(family: str, p) -> float:
    if family == "gemm":
        return 2.0 * p.m * p.n * p.k
    if family == "conv_direct_fwd":
        oh, ow = p.out_hw
        return 2.0 * p.n * oh * ow * p.k * p.c * p.r * p.s
    return 2.0 * p.n * p.hp * p.wp * p.k * p.p * p.p * p.c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", nargs="*", default=list(ARCHES))
    ap.add_argument("--cache", help="rank a built cache's artifacts (their resources) instead of the tables' specs")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    store = None
    if a.cache:
        from rocke_aot.cache.store import Store
        store = Store.open(a.cache, readonly=True)
    rows = []
    for arch in a.arch:
        target = Target.parse(arch)
        pools: dict[str, list] = {}
        for family, name, raw in problems():
            if family not in pools:
                pools[family] = list(store.candidates(family, target)) if store else table_candidates(family, arch)
            entry = get_family(family)
            prob = entry.problem_from(raw)
            r = rank(pools[family], prob, target)
            row = {"arch": arch, "family": family, "shape": name, "problem": raw, "model": r.model, "note": r.note,
                   "candidates": len(r.accepted)}
            for tag, ch in (("pick", r.best), ("next", r.accepted[1] if len(r.accepted) > 1 else None)):
                if ch is None:
                    continue
                kname = entry.spec_from(dict(ch.candidate.spec)).kernel_name
                row[tag] = {"kernel": kname, "estimate_ms": ch.estimate_ms, "bound": ch.bound,
                            "tflops": flops(family, prob) / (ch.estimate_ms * 1e9) if ch.estimate_ms else None,
                            "efficiency": round(ch.efficiency.total, 4)}
            rows.append(row)
    if a.json:
        print(json.dumps(rows, indent=2))
        return
    residency = "from the cache's code objects" if store else "spec threads + LDS only (registers unknown)"
    print(f"residency: {residency}")
    last = None
    for row in rows:
        if row["arch"] != last:
            last = row["arch"]
            print(f"\n{last}: ranked by {row['model']}" + (f" ({row['note']})" if row["note"] else ""))
        p = row.get("pick")
        if p is None:
            print(f"  {row['shape']:<38} no candidate")
            continue
        est = "-" if p["estimate_ms"] is None else f"{p['estimate_ms']:.4f} ms"
        tf = "" if p["tflops"] is None else f"{p['tflops']:7.1f} TF/s"
        print(f"  {row['shape']:<38} {p['kernel']:<58} {est:>11} {p['bound'] or '-':<8} {tf}")


if __name__ == "__main__":
    main()
