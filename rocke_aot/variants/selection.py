"""Ranking what the cache holds: a pure function over Candidate records.

    candidates (rocke_aot.candidates.Candidate, from cache Store.candidates)
        │  sorted by key first, so the result never depends on the input order
        ▼  per candidate, the first rule that fails names the rejection:
    1 incompatible target       built for a target ID the device cannot run (LLVM target-ID rules)
    2 stale generation          its generation is not the current one of its (arch, lane)
    3 lane not requested        ``lanes=`` given and its lane is not among them
      other Triton version      ``triton_version=`` given and another Triton built it (a GPU host's
                                Triton must equal the builder's: a request naming 3.6.0 never
                                gets a 3.9.0 artifact, whatever the lanes)
    4 spec does not accept the problem   the family's efficiency model: accepts(spec, problem)
    5 efficiency below the floor         efficiency(spec, problem, arch).total < min_efficiency
        ▼  the qualified ones, grouped by equal spec (and, for Triton builds, equal Triton
           version: without ``triton_version=`` every version's best is accepted, each labelled
           Candidate.triton_version, and Ranking.triton_versions lists the versions there are):
    6 other lane preferred      the newest lane (highest LLVM major) wins for an equal spec;
      other target preferred    then the most specific target ID (device's exact features)
        ▼
    accepted, best first, by the model ``model=`` names ("auto": the first that applies, in the
    order hardware, fitted, efficiency):
      fitted    constants fitted on the device (variants/perf.py, perf_constants/<processor>.json:
                sm_90 today): estimated time asc, efficiency.total desc, key asc
      hardware  published hardware facts (variants/hw_model.py, hw_facts/<processor>.json:
                sm_90, gfx90a, gfx942, gfx950): estimated time asc, efficiency.total desc, key asc
      efficiency  where neither applies (a fact not public, e.g. gfx1250; Ranking.note says which):
                efficiency.total desc, matrix-unit path first, bytes staged per MAC asc (the
                tile's data reuse, a count), occupancy desc (unknown last), key asc
      measured  before any of them: the candidates a recorded time applies to (variants/measured.py:
                its artifact and generation, its processor, its problem or, when asked, its shape
                class), by measured median asc, key asc
    the basis of each rank (Choice.basis): "measured", or the model that placed it ("fitted",
    "hardware", "efficiency"); Choice.fallback says why a time model asked for gave no estimate
    (an arch whose facts are not public, a family without kernel counts, a matrix instruction
    without published cycles); such candidates follow the estimated ones, in the efficiency order

Deterministic; every rejection carries its reason and a detail. The rule and a worked
example: docs/selection.md (tests/test_selection.py asserts the example's numbers).

    no_candidate(ranking, family, problem, device, lanes) -> NoCandidate | None
        nothing accepted and no candidate that runs the problem was rejected (by the floor, a
        lane, another lane or target of the same spec): the layer has no baked spec in the
        cache. The family's grid for the problem's own baked set (variants/table.py
        layer_grid) then says which answer it is:
          "build"        the grid has specs that run it: the command that builds them,
                         `rocke-aot build --arch A --family F --problems problems.json`, and
                         that file's content ({family: [the problem]})
          "unservable"   no spec of the grid runs it on the arch, per lane why (a patch size
                         without a kernel, every point over LDS, the 32-bit offset limit)
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple

from rocke_aot.candidates import Candidate, Resources
from rocke_aot.errors import SpecError
from rocke_aot.lanes import Lane
from rocke_aot.targets import Target, compatible
from rocke_aot.variants import efficiency as eff_models
from rocke_aot.variants import hw_model, measured, perf, table
from rocke_aot.variants.efficiency import Efficiency
from rocke_aot.variants.families import family_for_spec, get_family

INCOMPATIBLE = "incompatible target"
STALE = "stale generation"
LANE_NOT_REQUESTED = "lane not requested"
NOT_ACCEPTED = "spec does not accept the problem"
BELOW_FLOOR = "efficiency below the floor"
OTHER_LANE = "other lane preferred"
OTHER_TARGET = "other target preferred"
BAD_SPEC = "stored spec does not parse"
OTHER_TRITON = "other Triton version"


class Choice(NamedTuple):
    """An accepted candidate with its parsed spec and efficiency breakdown. A NamedTuple, not
    a frozen dataclass: select builds one per row of a hot query, and a tuple is ~5x cheaper."""

    candidate: Candidate
    spec: Any  # the parsed spec value (candidate.spec is the stored mapping)
    efficiency: Efficiency
    estimate_ms: float | None = None  # the time model's estimate (None: no constants for the arch)
    bound: str | None = None  # hardware model: what bounds the estimate (compute, issue, lds, memory, latency)
    reuse: float | None = None  # efficiency order: bytes staged per MAC (lower: more reuse)
    measured: Any = None  # the Measurement it is ranked by (variants/measured.py), None: the model
    model: str = "efficiency"  # the model that placed it: "fitted", "hardware" or "efficiency"
    fallback: str | None = None  # why the time model asked for gave no estimate (None: it did, or none was asked)
    # hardware model: where a step's serial global latencies and chain came from: "sass" (ptxas's
    # schedule recorded with the artifact) or "counts"; None for the other models
    schedule: str | None = None
    schedule_note: str | None = None  # why "counts" where the family reads the schedule (hw_model.with_schedule)

    @property
    def basis(self) -> str:
        """What ranks it: "measured" where a recorded time does, else the model that placed it."""
        return "measured" if self.measured is not None else self.model

    # The candidate's identity, for callers that render rows (service, CLI).
    @property
    def key(self) -> str:
        return self.candidate.key

    @property
    def sha256(self) -> str:
        return self.candidate.blob_sha256

    @property
    def arch(self) -> str:
        return self.candidate.arch

    @property
    def lane(self) -> str:
        """The lane's name, as rows render it."""
        return self.candidate.lane.name

    @property
    def resources(self) -> Resources:
        return self.candidate.resources

    def as_dict(self) -> dict[str, Any]:
        return {**self.candidate.as_dict(), "efficiency": self.efficiency.as_dict(), **self.basis_dict()}

    def basis_dict(self) -> dict[str, Any]:
        """The basis of its rank, as every surface shows it (CLI JSON, the service's RankedKernel):
        basis, the model's estimate and bound, the fallback reason, the measured time."""
        return {"basis": self.basis, "estimate_ms": self.estimate_ms, "bound": self.bound, "fallback": self.fallback,
                "schedule": self.schedule, "schedule_note": self.schedule_note,
                "measured_ms": None if self.measured is None else self.measured.median_ms,
                "measurement": None if self.measured is None else self.measured.as_dict()}


class Rejection(NamedTuple):
    """A rejected candidate, the rule that rejected it (one of the reason constants above) and the numbers why."""

    candidate: Candidate
    reason: str  # one of the reason constants above
    detail: str

    @property
    def key(self) -> str:
        return self.candidate.key

    @property
    def arch(self) -> str:
        return self.candidate.arch

    @property
    def lane(self) -> str:
        """The lane's name, as rows render it."""
        return self.candidate.lane.name

    @property
    def spec(self) -> Mapping[str, Any]:
        """The stored mapping."""
        return self.candidate.spec

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.candidate.key, "arch": self.candidate.arch, "lane": self.candidate.lane.name,
                "generation": self.candidate.generation, "spec": dict(self.candidate.spec),
                "reason": self.reason, "detail": self.detail}


MODELS = ("auto", "fitted", "hardware", "efficiency")


@dataclass(frozen=True)
class Ranking:
    accepted: tuple[Choice, ...]  # best first
    rejected: tuple[Rejection, ...]  # in key order
    model: str = "efficiency"  # the order used: "fitted", "hardware" or "efficiency"
    note: str | None = None  # why a (better) time model was not used: a fact not public, no constants, a family not fitted
    # the Triton versions of the candidates the device could run (compatible, current, a lane asked
    # for), whichever version was asked: what a request can name (empty: no Triton build)
    triton_versions: tuple[str, ...] = ()

    @property
    def best(self) -> Choice | None:
        return self.accepted[0] if self.accepted else None


# key -> (parsed spec, its canonical text). A key hashes the spec (and everything else), so it
# names one spec forever; the text is the cheap identity of "an equal spec" (a str caches its
# hash, a frozen dataclass recomputes it on every lookup).
_SPECS: dict[str, tuple[Any, str]] = {}


def _spec(c: Candidate) -> tuple[Any, str]:
    got = _SPECS.get(c.key)
    if got is None:
        if len(_SPECS) > 200_000:
            _SPECS.clear()
        spec = table.spec_from_dict(c.family, dict(c.spec))
        got = _SPECS[c.key] = (spec, c.family + json.dumps(dict(c.spec), sort_keys=True))
    return got


# (problem, processor) -> {spec text: reason or Efficiency, ("hw"|"estimate"|"reuse", key): the
# model's answer}. All are pure functions of the problem, the processor and the spec (the
# estimates also of the artifact's resources, which its key names forever), so a service asked
# the same shape again skips the models. Every distinct problem adds a dict (an unauthenticated
# select chooses the problem), about 160 KiB on a 768-artifact store with the hardware model:
# bounded in bytes (verdict_bytes, an upper estimate checked against tracemalloc by
# tests/test_hostile_service.py), least recently used problems evicted one at a time. Without
# the bound, 600 distinct problems grew a server by 228 MiB past its ranking memo's 32 MiB.
VERDICT_CACHE_BYTES = 16 << 20  # per process
_VERDICTS: OrderedDict[tuple[Any, str], list] = OrderedDict()  # k -> [verdicts, their bytes]
_VERDICT_TOTAL = [0]
_VERDICTS_LOCK = threading.Lock()
# Upper estimates of CPython 3.11 sizes (measured with tracemalloc: an Efficiency of 2 dims
# ~1.07 KiB, an Estimate of 6 terms ~0.63 KiB), per dict item.
_SLOT_BYTES = 160  # the dict slot and a ("hw", key) tuple
_EFF_BYTES, _EFF_DIM_BYTES = 480, 360
_EST_BYTES, _EST_TERM_BYTES = 240, 96
_VALUE_BYTES = 32  # a float or None


def value_bytes(v: Any) -> int:
    """Upper estimate of the bytes one verdict or estimate value holds (constants above)."""
    if isinstance(v, Efficiency):
        return _EFF_BYTES + _EFF_DIM_BYTES * len(v.dims)
    if isinstance(v, hw_model.Estimate):
        return _EST_BYTES + _EST_TERM_BYTES * len(v.terms)
    if isinstance(v, str):
        return 64 + len(v)
    return _VALUE_BYTES


def verdict_bytes(verdicts: Mapping[Any, Any]) -> int:
    return sum(_SLOT_BYTES + value_bytes(v) for v in list(verdicts.values()))


def _verdicts(problem: Any, processor: str) -> dict[Any, Any]:
    k = (problem, processor)
    with _VERDICTS_LOCK:
        got = _VERDICTS.get(k)
        if got is None:
            got = _VERDICTS[k] = [{}, 0]
        else:
            _VERDICTS.move_to_end(k)
        return got[0]


def _account(problem: Any, processor: str, verdicts: dict[Any, Any]) -> None:
    """Charge ``verdicts`` at its current size; evict the oldest problems past the bound."""
    cost = verdict_bytes(verdicts)
    with _VERDICTS_LOCK:
        slot = _VERDICTS.get((problem, processor))
        if slot is None or slot[0] is not verdicts:  # evicted meanwhile by another thread
            return
        _VERDICT_TOTAL[0] += cost - slot[1]
        slot[1] = cost
        while _VERDICT_TOTAL[0] > VERDICT_CACHE_BYTES and len(_VERDICTS) > 1:
            _, (_, c) = _VERDICTS.popitem(last=False)
            _VERDICT_TOTAL[0] -= c
        if _VERDICT_TOTAL[0] > VERDICT_CACHE_BYTES:  # one problem over the whole bound: not kept
            _VERDICTS.clear()
            _VERDICT_TOTAL[0] = 0


def verdict_cache_bytes() -> int:
    """The bytes charged to the verdict cache now (tests, the bench)."""
    return _VERDICT_TOTAL[0]


def clear_verdicts() -> None:
    with _VERDICTS_LOCK:
        _VERDICTS.clear()
        _VERDICT_TOTAL[0] = 0


def _floor_detail(e: Efficiency, floor: float) -> str:
    worst = min([(d.granularity, d.name) for d in e.dims] + [(e.cu_granularity, "CU")])
    return f"efficiency {e.total:.4f} < {floor:.4f} (worst: {worst[1]} {worst[0]:.4f})"


# Paths whose inner product runs on the arch's matrix unit (MFMA, WMMA, mma.sync): their peak is
# several times the FMA path's on every wired arch, so at equal tile efficiency they come first.
# Measured on an H100 (docs/bench.md): without this rule the occupancy tie-break put fma kernels
# first and the top-ranked conv_direct_fwd kernel ran at a median 0.61 of the best measured one;
# with it, 0.90.
MATRIX_PATHS = frozenset({"mfma", "wmma", "mma"})


def measured_first(choice: Choice) -> tuple:
    """Measured candidates first, by measured median (then the key); the rest in the model's
    order after them. Ties between equal measured times are broken by the key, like the model's."""
    if choice.measured is not None:
        return (0, choice.measured.median_ms, choice.candidate.key)
    return (1, *order_key(choice))


def order_key(choice: Choice) -> tuple:
    """Best first. With a time estimate: the estimate, then efficiency, then the key. Without
    (no constants or facts for the arch, or none for this candidate): after every estimated one,
    by efficiency, then matrix-unit paths before fma, then bytes staged per MAC, then occupancy
    (unknown last), then the key (stable, unique)."""
    if choice.estimate_ms is not None:
        return (0, choice.estimate_ms, -choice.efficiency.total, choice.candidate.key)
    occ = choice.candidate.occupancy
    matrix = choice.candidate.spec.get("path") in MATRIX_PATHS
    reuse = choice.reuse if choice.reuse is not None else float("inf")
    return (1, -choice.efficiency.total, -matrix, reuse, -(occ if occ is not None else -1), choice.candidate.key)


def estimate(spec: Any, problem: Any, device: Target, efficiency: Efficiency, resources: Any,
             constants: perf.PerfConstants) -> float:
    """The time model's estimate for one accepted candidate (variants/perf.py): the family's
    tile work, the efficiency's tile count, the artifact's residency (its registers and LDS;
    the spec's threads and LDS where the artifact records none) and its spills."""
    entry = family_for_spec(spec)
    work = entry.model.work(spec, problem, device)
    groups = perf.resident_groups(device.info, work, resources)
    spill = (resources.private_segment_bytes or 0) if resources is not None else 0
    return perf.estimate_ms(work, entry.name, efficiency.tiles, groups, spill, device.info.cu_count, constants)


def estimate_hw(spec: Any, problem: Any, device: Target, efficiency: Efficiency, resources: Any,
                facts: hw_model.HardwareFacts) -> hw_model.Estimate:
    """The hardware-fact model's estimate for one accepted candidate (variants/hw_model.py).
    A family without kernel counts, or a matrix instruction without published cycles, raises
    hw_model.NoEstimate (the candidate is then ranked by efficiency, saying why). A family whose
    model reads_schedule takes ptxas's schedule recorded in the artifact's resources where there
    is one (hw_model.with_schedule); Estimate.schedule says "sass" or "counts" and, for counts,
    schedule_note why."""
    entry = family_for_spec(spec)
    if entry.model.counts is None:
        raise hw_model.NoEstimate(f"family {entry.name} has no kernel counts (variants/counts.py)")
    c = entry.model.counts(spec, problem, device, int(facts.lds_banks))
    reads = getattr(entry.model, "reads_schedule", False)  # a plugin's Model may predate the field
    why = None
    if reads:
        c, why = hw_model.with_schedule(c, getattr(resources, "schedule", None), facts)
    work = entry.model.work(spec, problem, device)
    groups = perf.resident_groups(device.info, work, resources)
    e = hw_model.estimate(c, efficiency.tiles, groups, facts)
    if not reads:
        return e  # schedule "counts": the family's counts are the model's
    return dataclasses.replace(e, schedule="counts" if why else "sass", schedule_note=why)


def _reuse(spec: Any, problem: Any, device: Target) -> float | None:
    entry = family_for_spec(spec)
    if entry.model.counts is None:
        return None
    c = entry.model.counts(spec, problem, device)
    return c.staged_bytes / c.macs if c.macs else None


def choose_model(processor: str, model: str = "auto", family: str | None = None
                 ) -> tuple[str, Any, str | None, str | None]:
    """(model used, its constants or facts, why a time model was not used, the same in one line
    for every candidate's ``fallback``) for ``model=``.

    "auto" tries the hardware model first (published facts: the method that carries to every
    arch, and on the H200 as good as the fitted one, docs/selection.md), then the fitted
    constants, then the efficiency order. With ``family``: the fitted constants apply to the
    families they were fitted on (their load_factor names them), the hardware model to a family
    whose Model has ``counts`` (a plugin's family may have neither: the next model applies, and
    the note says why)."""
    if model not in MODELS:
        raise SpecError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    notes: list[tuple[str, str]] = []  # (why, its one-line form) of a model skipped under "auto"
    if model in ("auto", "hardware"):
        f = hw_model.facts_for(processor)
        if isinstance(f, hw_model.Refusal):
            why, line = f.reason, f.summary
        elif family is not None and get_family(family).model.counts is None:
            why = line = f"family {family} has no counts model (Model.counts) for the hardware model"
        else:
            return "hardware", f, None, None
        if model == "hardware":
            return "efficiency", None, why, line
        notes.append((why, line))
    if model in ("auto", "fitted"):
        k = perf.constants_for(processor)
        if k is not None and (family is None or family in k.load_factor):
            return "fitted", k, (notes[0][0] if notes else None), None
        why = (f"{processor}: no fitted constants (variants/perf_constants/{processor}.json)" if k is None else
               f"{processor}: the fitted constants were not fitted on family {family}")
        if model == "fitted":
            return "efficiency", None, why, why
        why, line = notes[0] if notes else (why, why)
        return "efficiency", None, why, line
    return "efficiency", None, None, None


def rank(candidates: Iterable[Candidate], problem: Any, device: Target, *,
         min_efficiency: float = 0.0, lanes: Iterable[Lane] | None = None, model: str = "auto",
         measurements: Iterable[Any] | None = None, shape_class: bool = False,
         triton_version: str | None = None) -> Ranking:
    """Accepted candidates best first and every rejected one with its reason (module doc).
    ``measurements`` (variants/measured.py Measurement): recorded times that rank the accepted
    candidates they apply to ahead of the model (measured.applicable's rules; ``shape_class``
    lets a problem of the same shape class stand in when the exact problem has none).
    ``triton_version``: only what that Triton built (a candidate of no Triton is another version too)."""
    if isinstance(min_efficiency, bool) or not isinstance(min_efficiency, (int, float)) \
            or not 0.0 <= min_efficiency <= 1.0:
        raise SpecError(f"min_efficiency must be a number within 0..1, got {min_efficiency!r}")
    wanted = None if lanes is None else frozenset(lanes)
    if triton_version is not None and not isinstance(triton_version, str):
        raise SpecError(f"triton_version must be a version string such as '3.6.0', got {triton_version!r}")
    rejected: list[Rejection] = []
    qualified: list[tuple[str, Choice]] = []
    versions: set[str] = set()
    # Equal specs (other lanes, target IDs, generations) share one verdict: reason or Efficiency.
    effs = _verdicts(problem, device.processor)
    compat: dict[Target, bool] = {}
    for c in sorted(candidates, key=attrgetter("key")):
        ok = compat.get(c.target)
        if ok is None:
            ok = compat[c.target] = compatible(c.target, device)
        if not ok:
            rejected.append(Rejection(c, INCOMPATIBLE, f"built for {c.arch}; the device is {device.id}"))
            continue
        if not c.current:
            rejected.append(Rejection(c, STALE, f"generation {c.generation} of {c.arch}/{c.lane} is shadowed "
                                                f"for this spec by a newer complete build"))
            continue
        if wanted is not None and c.lane not in wanted:
            rejected.append(Rejection(c, LANE_NOT_REQUESTED, f"lane {c.lane} not in {sorted(x.name for x in wanted)}"))
            continue
        if c.triton_version is not None:
            versions.add(c.triton_version)
        # A native candidate beside a Triton family's (a select across families) is no Triton's build:
        # the version asked for concerns the Triton rows only. A Triton family's row of no version is refused.
        if triton_version is not None and c.triton_version != triton_version and (
                c.triton_version is not None or _triton_family(c.family)):
            rejected.append(Rejection(c, OTHER_TRITON, f"built by Triton {c.triton_version}; the request runs "
                                                       f"Triton {triton_version}" if c.triton_version else
                                      f"not a Triton build; the request runs Triton {triton_version}"))
            continue
        try:
            spec, sid = _spec(c)
        except SpecError as err:
            rejected.append(Rejection(c, BAD_SPEC, str(err)))
            continue
        e = effs.get(sid)
        if e is None:
            why = eff_models.accepts(spec, problem)
            e = effs[sid] = why if why else eff_models.efficiency(spec, problem, device)
        if isinstance(e, str):
            rejected.append(Rejection(c, NOT_ACCEPTED, e))
            continue
        if e.total < min_efficiency:
            rejected.append(Rejection(c, BELOW_FLOOR, _floor_detail(e, min_efficiency)))
            continue
        # equal spec and equal Triton version: two Tritons' builds of one spec are two answers
        qualified.append((sid if c.triton_version is None else f"{sid}\0triton {c.triton_version}", Choice(c, spec, e)))
    # Lane policy: one artifact per equal spec, the newest lane's (then the most specific target).
    best: dict[str, Choice] = {}
    for sid, ch in qualified:
        cur = best.get(sid)
        if cur is None or _preference(ch) < _preference(cur):
            best[sid] = ch
    accepted = []
    for sid, ch in qualified:
        win = best[sid]
        if win is ch:
            accepted.append(ch)
        elif win.candidate.lane != ch.candidate.lane:
            rejected.append(Rejection(ch.candidate, OTHER_LANE,
                                      f"the same spec is served by the newer lane {win.candidate.lane} "
                                      f"({win.candidate.key[:12]})"))
        else:
            rejected.append(Rejection(ch.candidate, OTHER_TARGET,
                                      f"the same spec is built for the more specific {win.candidate.arch} "
                                      f"({win.candidate.key[:12]})"))
    # Across families (a select of gemm,triton_matmul): the model is chosen for the device alone,
    # and a family it cannot estimate falls back per candidate, saying why (Choice.fallback).
    fams = sorted({ch.candidate.family for ch in accepted})
    used, consts, note, fallback = choose_model(device.processor, model, fams[0] if len(fams) == 1 else None)
    # Estimates are pure in (problem, processor, spec, resources): cached with the verdicts.
    if used == "fitted":
        accepted = [ch._replace(estimate_ms=_estimate_cached(effs, ch, problem, device, consts), model="fitted")
                    for ch in accepted]
    elif used == "hardware":
        timed = []
        for ch in accepted:
            try:
                timed.append(_with_hw(effs, ch, problem, device, consts))
            except hw_model.NoEstimate as e:  # a fact or a count missing for this one: efficiency, saying so
                timed.append(_with_reuse(effs, ch, problem, device)._replace(fallback=f"{device.processor}: {e}"))
            except SpecError as e:  # a stored spec the device's geometry refuses: never served
                rejected.append(Rejection(ch.candidate, BAD_SPEC, f"does not lay out on {device.id}: {e}"))
        accepted = timed
    else:
        accepted = [_with_reuse(effs, ch, problem, device)._replace(fallback=fallback) for ch in accepted]
    if measurements:
        got = {}
        for fam in fams:  # each family's records apply to its own candidates (measured.applicable's rule 1)
            got.update(measured.applicable(measurements, fam, problem, device,
                                           [ch.candidate for ch in accepted if ch.candidate.family == fam],
                                           shape_class=shape_class))
        accepted = [ch._replace(measured=got.get(ch.candidate.key)) for ch in accepted]
        accepted.sort(key=measured_first)
    else:
        accepted.sort(key=order_key)
    rejected.sort(key=_rejection_key)
    _account(problem, device.processor, effs)
    return Ranking(tuple(accepted), tuple(rejected), used, note, tuple(sorted(versions)))


def _triton_family(name: str) -> bool:
    from rocke_aot.variants.triton import is_triton  # variants/triton.py imports this layer's table

    try:
        return is_triton(get_family(name))
    except SpecError:
        return True  # an unknown family's row: refused, not served past the version asked


def _cached(effs: dict[Any, Any], k: Any, compute: Any) -> Any:
    got = effs.get(k, effs)
    if got is effs:
        got = effs[k] = compute()
    return got


def _with_hw(effs: dict[Any, Any], ch: Choice, problem: Any, device: Target, facts: hw_model.HardwareFacts) -> Choice:
    e = _cached(effs, ("hw", ch.candidate.key), lambda: _hw_or_reason(
        ch.spec, problem, device, ch.efficiency, ch.candidate.resources, facts))
    if isinstance(e, str):  # remembered like an estimate: the same inputs give the same reason
        raise hw_model.NoEstimate(e)
    return ch._replace(estimate_ms=e.ms, bound=e.bound, model="hardware", schedule=e.schedule,
                       schedule_note=e.schedule_note)


def _hw_or_reason(*args: Any) -> hw_model.Estimate | str:
    try:
        return estimate_hw(*args)
    except hw_model.NoEstimate as e:
        return str(e)


def _with_reuse(effs: dict[Any, Any], ch: Choice, problem: Any, device: Target) -> Choice:
    return ch._replace(reuse=_cached(effs, ("reuse", ch.candidate.key), lambda: _reuse(ch.spec, problem, device)),
                       model="efficiency")


def _estimate_cached(effs: dict[Any, Any], ch: Choice, problem: Any, device: Target,
                     constants: perf.PerfConstants) -> float:
    k = ("estimate", ch.candidate.key)  # a key names one spec and one code object forever
    got = effs.get(k)
    if got is None:
        got = effs[k] = estimate(ch.spec, problem, device, ch.efficiency, ch.candidate.resources, constants)
    return got


def _preference(ch: Choice) -> tuple:
    """Lower wins among equal specs: newer lane, then the more specific target, then the key."""
    c = ch.candidate
    return (-c.lane.major, -len(c.target.features), c.key)


def _rejection_key(r: Rejection) -> str:
    return r.candidate.key


# -- no candidate: build with --problems ---------------------------------------------------------

BUILD = "build"  # NoCandidate.kind: the family's grid has specs for the problem, the cache none
UNSERVABLE = "unservable"  # no spec of the family's grid runs the problem on the arch
NO_CANDIDATE_KINDS = (BUILD, UNSERVABLE)
PROBLEMS_FILE = "problems.json"  # the file the suggested command reads


@dataclass(frozen=True)
class NoCandidate:
    """Why a selection accepted nothing when no cached kernel is baked for the problem, and what to do."""

    kind: str  # BUILD or UNSERVABLE
    message: str  # one line: "no candidate: ... build with --problems: `rocke-aot build ...`"
    command: str | None  # BUILD: the build command (reads PROBLEMS_FILE); None when UNSERVABLE
    problems: Mapping[str, Any] | None  # BUILD: PROBLEMS_FILE's content, {family: [the problem]}
    baked: Mapping[str, Any] | None  # the baked parameters the problem needs (None: the family has none)
    reasons: tuple[str, ...] = ()  # UNSERVABLE: per lane, why no spec of the grid runs it

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "command": self.command,
                "problems": None if self.problems is None else json.loads(json.dumps(self.problems)),
                "baked": None if self.baked is None else dict(self.baked), "reasons": list(self.reasons)}


# Rejections of candidates that do run the problem (accepts() said yes): the answer is theirs.
_RAN_IT = frozenset({BELOW_FLOOR, OTHER_LANE, OTHER_TARGET})
# Rejected before accepts() was asked: the answer is theirs when their spec runs the problem.
_FILTERED = frozenset({LANE_NOT_REQUESTED, OTHER_TRITON})


def no_candidate(ranking: Ranking, family: str, problem: Any, device: Target,
                 lanes: Iterable[Lane] | None = None) -> NoCandidate | None:
    """None unless nothing was accepted for want of a kernel baked for ``problem`` (module doc).

    A rejected candidate that runs the problem (below the floor, another lane or target of the
    same spec, a lane not requested, another Triton version) leaves the answer to its rejection. Stale rows never decide:
    every spec has a served row, which is ranked on its own."""
    if ranking.accepted:
        return None
    for r in ranking.rejected:
        if r.reason in _RAN_IT:
            return None
        if r.reason in _FILTERED:
            try:
                spec, _ = _spec(r.candidate)
            except SpecError:
                continue
            if eff_models.accepts(spec, problem) is None:
                return None
    lane_list = list(dict.fromkeys(lanes)) if lanes else list(table.registered_lanes())
    wanted = tuple(x.name for x in lane_list) if lanes else ()
    baked = table.problem_baked(family, problem)
    reasons = []
    for lane in lane_list:
        why = _why_no_spec(family, problem, device, lane, baked)
        if why is None:
            return _build_hint(family, problem, device, wanted, baked)
        reasons.append(f"{lane.name}: {why}")
    grouped: dict[str, list[str]] = {}  # the same reason on several lanes is said once
    for lane, why in zip(lane_list, reasons):
        grouped.setdefault(why.split(": ", 1)[1], []).append(lane.name)
    msg = (f"no candidate: no {family} spec can run this problem on {device.id} "
           f"(`rocke-aot build --problems` would build none): "
           + "; ".join(f"{', '.join(names)}: {why}" for why, names in grouped.items()))
    return NoCandidate(UNSERVABLE, msg, None, None, baked, tuple(reasons))


def _why_no_spec(family: str, problem: Any, device: Target, lane: Any, baked: Mapping[str, Any] | None) -> str | None:
    """None when the family's grid on (device, lane) has a spec that runs ``problem``, else why not.
    Walks the grid point by point and stops at the first spec that runs it; caches nothing (on a
    server every distinct problem would add an entry)."""
    adm = table.admission(family, device, lane)
    if not adm.served:
        return adm.reason
    if baked is not None:
        points = table.layer_points(family, device, lane, baked)
    else:
        points = ((spec, "admitted") for spec in table.enumerate_specs(family, device, lane))
    first, admitted = None, []
    refused: dict[str, int] = {}
    for spec, reason in points:
        if spec is None:
            refused[reason] = refused.get(reason, 0) + 1
            continue
        why = eff_models.accepts(spec, problem)
        if why is None:
            return None
        admitted.append(spec)
        first = first or why
    if first is not None:
        return first
    if not refused:
        return "its grid is empty"
    ranked = sorted(refused.items(), key=lambda kv: (-kv[1], kv[0]))
    return table.layer_reason(admitted, ranked) or "every point of its grid is refused: " + "; ".join(
        f"{r} ({n})" for r, n in ranked[:2])


def _build_hint(family: str, problem: Any, device: Target, lanes: tuple[str, ...],
                baked: Mapping[str, Any] | None) -> NoCandidate:
    doc = {family: [dataclasses.asdict(problem)]}
    command = (f"rocke-aot build --arch {device.id} --family {family}" + "".join(f" --lane {x}" for x in lanes)
               + f" --problems {PROBLEMS_FILE}")
    what = (f"baked for this problem ({' '.join(f'{k}={v}' for k, v in baked.items())})" if baked is not None
            else "that runs this problem")
    msg = (f"no candidate: the cache holds no {family} kernel {what}; build with --problems: `{command}` "
           f"with {PROBLEMS_FILE} = {json.dumps(doc)}")
    return NoCandidate(BUILD, msg, command, doc, baked)


def specs_serving(family: str, specs: Iterable[Any], problems: Iterable[Any], arch: Target | str, *,
                  min_efficiency: float) -> list[Any]:
    """The specs (a table's grid) that serve at least one problem at or above the floor, by the
    same acceptance and floor rules as :func:`rank` (``rocke-aot build --problems``); a problem
    that some spec runs but none at the floor keeps the specs at its own best efficiency (the
    floor trims a workload's build; it never leaves a problem the grid can run without kernels:
    :func:`below_floor` names those problems)."""
    return serving(family, specs, problems, arch, min_efficiency=min_efficiency)[0]


def below_floor(family: str, specs: Iterable[Any], problems: Iterable[Any], arch: Target | str, *,
                min_efficiency: float) -> int:
    """How many problems some spec runs but none at the floor (served by their best specs)."""
    return serving(family, specs, problems, arch, min_efficiency=min_efficiency)[1]


def serving(family: str, specs: Iterable[Any], problems: Iterable[Any], arch: Target | str, *,
            min_efficiency: float) -> tuple[list[Any], int]:
    """:func:`specs_serving` and :func:`below_floor` in one pass over the (spec, problem) pairs."""
    specs = list(specs)
    keep: set[int] = set()
    below = 0
    for p in _problems(family, problems):
        effs = [(i, eff_models.efficiency(s, p, arch).total) for i, s in enumerate(specs)
                if eff_models.accepts(s, p) is None]
        at_floor = {i for i, e in effs if e >= min_efficiency}
        if not at_floor and effs:
            best = max(e for _, e in effs)
            at_floor = {i for i, e in effs if e >= best - 1e-12}
            below += 1
        keep |= at_floor
    return [s for i, s in enumerate(specs) if i in keep], below


def _problems(family: str, problems: Iterable[Any]) -> list[Any]:
    return [p if not isinstance(p, Mapping) else eff_models.problem_from_dict(family, p) for p in problems]
