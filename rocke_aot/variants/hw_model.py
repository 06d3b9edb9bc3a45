"""A time model whose constants are published hardware facts, per arch (no fitting).

    spec, problem, Target ─> KernelCounts (variants/counts.py: instructions, bytes, LDS cycles
                             per warp or thread per reduction step, counted from the lowering)
    resources             ─> work-groups per CU (rocke_aot/candidates.py groups_per_cu)
    HardwareFacts         ─> variants/hw_facts/<processor>.json: every number with its source,
                             or null with the reason it is not public
        │
        ▼
    estimate(counts, tiles, groups, facts) -> Estimate(ms, bound, cycles per term)

Per reduction step, on the busiest CU (ceil(tiles / CUs) blocks, ``groups`` resident at once),
in clock cycles:

    issue    groups x warps x (instructions per warp) / issue_per_clk
             (every counted instruction: matrix, LDS reads and writes, global loads, fma, cvt,
             barriers: the per-warp issue cost the fitted sm_90 model learned, as counts; matrix
             instructions as issued: one sm_90 wgmma is N / 8 units of the matrix term)
    lds      groups x warps x (read + write LDS cycles per warp)    32 banks x 4 bytes a clock
             (bank conflicts are in the counts); where L1 and LDS are one array with one data
             path (l1_shares_lds_datapath: NVIDIA), plus the 128-byte lines the staging loads
             return through it (global_wavefronts)
    matrix   groups x warps x matrix instructions x cycles per instruction / matrix_units
             (wgmma in units of a warp's 16x8x16 quarter: its rate per n = 8 columns)
    vector   groups x threads x (fma + cvt) / fma_lanes
    l2       groups x staged bytes / (L2 bytes per clock per CU: the L2's limit; on sm_90 a
             lower bound of it, the highest rate bench/l2_probe.py reached without the latency
             rising)
    latency  one block's chain: its warp's own instructions at one a clock, or the block's own
             throughput terms (those of one resident block: its warps share the CU's issue
             slots, data path and units even when no other block is there) where longer, plus
             the global load latency (single-buffered: every step; double-buffered: hidden
             behind the step's issue where it is longer), barriers, and the LDS latency between
             staging and use. Where the counts are ``phased`` (attention: S = Q K^T, its softmax,
             P V, one chain a step, and the step's barriers keep a block's warps at one phase), a
             block's own matrix and vector terms add up in its chain instead of overlapping: one
             block alone leaves the tensor cores idle while it computes the softmax and the FMA
             units while it multiplies; a second resident block fills them (the throughput terms).
             FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608, "pingpong scheduling") describes
             the same serialisation within one warpgroup and overlaps two warpgroups' phases by
             hand; a kernel with one block of two warpgroups (Triton's 128-row tiles on 8 warps)
             has neither
             (global_latency: the loaded latency of a staging load the L2 serves, as every byte
             but its first touch is; on sm_90 measured by bench/l2_probe.py on the H200; the
             first touches' bandwidth is the HBM floor below)

             Where the family's model reads_schedule (the conv families) and the artifact records
             ptxas's schedule (aot/sass.py, at build time; rocke_aot/candidates.py Schedule),
             with_schedule() takes the serial global latencies from it, and the chain's
             instructions times its chain ratio (counts: 1); Estimate.schedule says "sass" or
             "counts" (schedule_note why)

    step = smooth max(latency, issue, lds, matrix, vector, l2)          (p = 4: the 4-norm)
           every term, one rule: a unit hides the others' time fully only while it alone is near
           its limit; where the L2, the LDS data path and the tensor cores are all near theirs
           (a 128 x 128 x 64 tile, two blocks a CU: 1956 / 2048 / 1718 cycles) the H200 took
           1.1-1.4x the largest (run 20: docs/selection.md "The step's one rule"). Until
           then only the latency was combined so, the throughput terms by their plain max.
    time = launch + sum over rounds of steps x step + epilogue, at least the HBM floor
           (unique bytes / HBM bandwidth)
    split-K (counts.splits > 1): splits x tiles work-groups, steps = one K slice; the epilogue
           adds the reduction's L2 bytes and instructions and its latencies (variants/counts.py),
           averaged over the tile's blocks; and once, after the last round, the last arriver's
           reduction beyond that share (counts.tail_bytes at one SM's L2 rate): it runs when the
           rest of its tile is done, and nothing of the kernel is left to overlap it

``bound`` names the largest term of the first full round (compute = matrix or vector, issue,
lds, l2 -> "memory", latency) or "memory" where the HBM floor decides. Where a fact the
estimate needs is not public for the arch, :func:`facts_for` says which and why, and the
selection falls back to its efficiency order, saying so (variants/selection.py).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from importlib import resources as _res
from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.variants.counts import KernelCounts

# Facts the estimate needs (per arch, each a number with a source, or null with a reason).
REQUIRED = ("cus", "clock_mhz", "issue_per_clk", "fma_lanes", "matrix_units", "lds_banks",
            "lds_latency", "l2_bytes_per_clk", "hbm_gbps", "global_latency", "barrier_latency",
            "launch_us")


@dataclass(frozen=True)
class HardwareFacts:
    processor: str
    product: str
    values: Mapping[str, float]  # fact -> number (REQUIRED, all present)
    matrix_cycles: Mapping[str, float]  # instruction key -> cycles on one matrix unit
    sources: Mapping[str, str]  # fact (or "matrix:<key>") -> where the number comes from
    l1_shares_lds_datapath: bool = False  # global loads return through the LDS's data path (NVIDIA)

    def __getattr__(self, name: str) -> float:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


class NoEstimate(SpecError):
    """One candidate has no estimate although its arch has facts: its family has no kernel
    counts, or its matrix instruction no published cycles (selection ranks it by efficiency and
    says this reason)."""


@dataclass(frozen=True)
class Refusal:
    """The arch has no estimate: which facts are missing and why (shown by select)."""

    processor: str
    missing: Mapping[str, str]  # fact -> why it is not public

    @property
    def reason(self) -> str:
        return (f"no hardware-fact time model for {self.processor}: not public: "
                + "; ".join(f"{k} ({v})" for k, v in sorted(self.missing.items())))

    @property
    def summary(self) -> str:
        """One line for every candidate's fallback: the arch and the facts, without the whys."""
        if set(self.missing) == {"facts file"}:
            return f"{self.processor}: no hardware facts ({self.missing['facts file']})"
        return f"{self.processor}: hardware facts not public: {', '.join(sorted(self.missing))}"


@dataclass(frozen=True)
class Estimate:
    ms: float
    bound: str  # "compute" | "issue" | "lds" | "memory" | "latency"
    terms: Mapping[str, float]  # cycles per step of the first full round, per term
    schedule: str = "counts"  # where serial_loads and the chain came from: "sass" or "counts" (with_schedule)
    schedule_note: str | None = None  # why "counts" where the family reads the SASS schedule

    def as_dict(self) -> dict[str, Any]:
        return {"ms": self.ms, "bound": self.bound, "terms": dict(self.terms), "schedule": self.schedule,
                "schedule_note": self.schedule_note}


def parse_facts(doc: Mapping[str, Any], where: str) -> HardwareFacts | Refusal:
    """A facts document -> HardwareFacts, or a Refusal naming the facts that are not public.
    Malformed documents raise SpecError (fail closed)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("facts"), Mapping):
        raise SpecError(f"{where}: a facts file needs a 'facts' mapping")
    proc = doc.get("processor")
    if not isinstance(proc, str) or not proc:
        raise SpecError(f"{where}: a facts file names its processor, got {proc!r}")
    facts = doc["facts"]
    unknown = sorted(set(facts) - set(REQUIRED))
    if unknown:
        raise SpecError(f"{where}: unknown facts {unknown}")
    values, sources, missing = {}, {}, {}
    for name in REQUIRED:
        f = facts.get(name)
        if not isinstance(f, Mapping) or not isinstance(f.get("source"), str) or not f["source"]:
            raise SpecError(f"{where}: fact {name} needs a value (or null) and a source")
        v = f.get("value")
        if v is None:
            missing[name] = f["source"]
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SpecError(f"{where}: fact {name} must be a positive number or null, got {v!r}")
        values[name], sources[name] = float(v), f["source"]
    cycles = {}
    for key, f in (doc.get("matrix") or {}).items():
        if not isinstance(f, Mapping) or not isinstance(f.get("source"), str):
            raise SpecError(f"{where}: matrix {key} needs cycles (or null) and a source")
        v = f.get("cycles")
        if v is None:
            missing[f"matrix:{key}"] = f["source"]
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise SpecError(f"{where}: matrix {key} cycles must be a positive number or null")
        cycles[key], sources[f"matrix:{key}"] = float(v), f["source"]
    shared = doc.get("l1_shares_lds_datapath", {"value": False, "source": "not stated: separate paths"})
    if not isinstance(shared, Mapping) or not isinstance(shared.get("value"), bool) \
            or not isinstance(shared.get("source"), str) or not shared["source"]:
        raise SpecError(f"{where}: l1_shares_lds_datapath needs a true/false value and a source")
    sources["l1_shares_lds_datapath"] = shared["source"]
    if missing:
        return Refusal(proc, missing)
    return HardwareFacts(proc, str(doc.get("product", proc)), values, cycles, sources, shared["value"])


@functools.cache
def facts_for(processor: str) -> HardwareFacts | Refusal:
    """The arch's facts (variants/hw_facts/<processor>.json), or a Refusal saying why not."""
    try:
        text = _res.files("rocke_aot.variants").joinpath("hw_facts", f"{processor}.json").read_text()
    except FileNotFoundError:
        return Refusal(processor, {"facts file": f"variants/hw_facts/{processor}.json does not exist"})
    return parse_facts(json.loads(text), f"hw_facts/{processor}.json")


TERMS = ("latency", "issue", "lds", "matrix", "vector", "l2")


def _smax(values: Any) -> float:
    # p = 4: a term overlaps the others fully only when it alone is near its limit; where several
    # are near theirs the step takes longer than the largest (module doc)
    return sum(v ** 4 for v in values) ** 0.25


def step_terms(c: KernelCounts, groups: int, f: HardwareFacts, resident: int | None = None) -> dict[str, float]:
    """Cycles of one reduction step on a CU holding ``resident`` blocks (default ``groups``)."""
    g = groups if resident is None else resident
    w = c.warps
    instrs = c.instructions
    if c.instr is not None and c.mma:
        cyc = f.matrix_cycles.get(c.instr)
        if cyc is None:
            raise NoEstimate(f"no published cycles for matrix instruction {c.instr} "
                             f"(variants/hw_facts/{f.processor}.json)")
        matrix = g * w * c.mma * cyc / f.matrix_units
    else:
        matrix = 0.0
    terms = {
        "issue": g * w * instrs / f.issue_per_clk,
        "lds": g * w * (c.lds_read_wavefronts + c.lds_write_wavefronts
                        + (c.global_wavefronts if f.l1_shares_lds_datapath else 0.0)),
        "matrix": matrix,
        "vector": g * c.threads * (c.fma + c.cvt) / f.fma_lanes,
        "l2": g * c.staged_bytes / f.l2_bytes_per_clk,
    }
    # One block's chain: a warp issues in order, so an LDS store waits for the global load it
    # stores, and the next instruction (the next staging round, or compute) waits behind it:
    # serial_loads global latencies per step whether or not the kernel double-buffers.
    own = instrs  # one warp issues at most one instruction a clock
    # ... and a block alone on the CU still shares it among its own warps: its step takes at least
    # its own throughput terms (those of one resident block), whatever the other blocks do.
    alone = max(own, *(terms[k] / g for k in ("issue", "lds", "matrix", "vector", "l2")))
    if c.phased:  # ... and where its matrix and vector work are one chain (counts.phased), their sum
        alone = max(alone, (terms["matrix"] + terms["vector"]) / g)
    # chain_ratio > 1 (ptxas's schedule, with_schedule): the chain through the warp's instructions
    # is that much longer than one a clock, on top of the block's own throughput
    terms["latency"] = (alone + instrs * (c.chain_ratio - 1) + c.serial_loads * f.global_latency
                        + c.barriers * f.barrier_latency + f.lds_latency)
    return terms


def _bound(terms: Mapping[str, float]) -> str:
    name = max(TERMS, key=lambda k: terms[k])
    return {"matrix": "compute", "vector": "compute", "l2": "memory"}.get(name, name)


def estimate(c: KernelCounts, tiles: int, groups: int, f: HardwareFacts, spill_bytes: int = 0) -> Estimate:
    """Estimated time of the kernel on the problem (module doc)."""
    hz = f.clock_mhz * 1e6
    launch_ms = f.launch_us * 1e-3
    if tiles <= 0 or c.steps <= 0:
        return Estimate(launch_ms, "latency", {})
    g = max(1, groups)
    per_cu = -(-(tiles * c.splits) // int(f.cus))  # work-groups: split-K runs c.splits per tile
    full, rem = divmod(per_cu, g)

    def step(resident: int) -> tuple[float, dict]:
        t = step_terms(c, g, f, resident)
        return _smax(t[k] for k in TERMS), t

    cycles = 0.0
    first = None
    if full:
        s, first = step(g)
        cycles += full * c.steps * s
    if rem:
        s, t = step(rem)
        cycles += c.steps * s
        first = first or t
    rounds = full + (rem > 0)
    # the epilogue: every resident block's stores leave through the L2, plus one load latency
    # (split-K: the reduction's traffic and instructions, and its fence / atomic / reads in the chain)
    cycles += rounds * (min(g, per_cu) * (c.store_bytes / f.l2_bytes_per_clk
                                          + c.warps * c.epilogue_instructions / f.issue_per_clk)
                        + c.epilogue_latencies * f.global_latency)
    cycles += c.tail_bytes / f.l2_bytes_per_clk  # the last round's lone reduction (split-K)
    # tiles > 0 makes per_cu >= 1, so full or rem is positive and one step above set first
    assert first is not None, "a round with work computes its step terms"
    ms = launch_ms + cycles / hz * 1e3
    floor_ms = launch_ms + c.unique_bytes / (f.hbm_gbps * 1e9) * 1e3
    if floor_ms > ms:
        return Estimate(floor_ms, "memory", first)
    return Estimate(ms, _bound(first), first)


def with_schedule(c: KernelCounts, schedule: Any, f: HardwareFacts) -> tuple[KernelCounts, str | None]:
    """The counts with ptxas's schedule (rocke_aot/candidates.py Schedule, read off the artifact's
    SASS at build time, aot/sass.py) in place of two of their own: serial_loads from the global
    latencies a step's staging exposes, and the chain ratio of the compute loop (step_terms). The
    second value is None when the schedule was used, else why the counts stand (no schedule
    recorded, the build could not read one, or it was walked with latencies these facts do not
    have: its figures would mean something else)."""
    if schedule is None:
        return c, "no schedule recorded with the artifact"
    if not schedule.available:
        return c, f"schedule unavailable at build: {schedule.reason}"
    if (schedule.global_latency, schedule.lds_latency) != (f.global_latency, f.lds_latency):
        return c, (f"schedule walked with global/LDS latency {schedule.global_latency:g}/{schedule.lds_latency:g}, "
                   f"the facts say {f.global_latency:g}/{f.lds_latency:g}")
    return replace(c, serial_loads=schedule.exposed_latencies,
                   chain_ratio=schedule.chain_ratio if schedule.chain_ratio is not None else c.chain_ratio), None
