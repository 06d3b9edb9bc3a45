"""select(): the one way the CLI, the service and the runner pick a cached kernel for a problem.

    select(store, target, family, problem, lanes=, min_efficiency=, limit=, triton_version=)
        │ validate: family (variant tables), target ID, lanes (lane registry), problem
        │           (JSON text, mapping or problem value), triton_version (a Triton family's
        │           only: the Triton the GPU host runs) -> SpecError / LaneError naming the
        │           field and the accepted values
        ▼
    store.candidates(family, target, lanes)         cache: ONE query, rows -> Candidates
        │  (SQLite: the same tuple again while the database is unchanged, no query)
        ▼
    variants.selection.rank(candidates, problem, target, min_efficiency, lanes, triton_version)   pure
        │  (reused for the very same candidate tuple and arguments: _RANKINGS)
        ▼
    Selection(accepted best first [:limit], rejected with reasons, triton_versions (the Triton
              versions the device could be served: with triton_version=, only that version's
              artifacts are accepted; without, each version's, every row labelled),
              no_candidate: none accepted and no kernel baked for the problem -> "build with
              --problems" (the command and its file), or why no spec can run it
              (variants/selection.py no_candidate))

No key is recomputed and nothing is compiled: a service host has no compilers. The
service package sits above cache and variants, the only floor allowed to join them.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from rocke_aot.boundedjson import is_int
from rocke_aot.candidates import TRITON_VERSION_RE
from rocke_aot.errors import SpecError
from rocke_aot.lanes import Lane, get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import FAMILIES, failed_plugins, families_for_select, get_family, problem_from_dict
from rocke_aot.variants.selection import Choice, NoCandidate, Ranking, Rejection, no_candidate, rank, value_bytes
from rocke_aot.variants.triton import is_triton

MEASURED = ("exact", "class", "off")
DEFAULT_MIN_EFFICIENCY = 0.0  # no floor unless asked: a small problem still gets its best kernel


@dataclass(frozen=True)
class Selection:
    target: str
    family: str
    problem: Any
    lanes: tuple[str, ...] | None
    min_efficiency: float
    accepted: tuple[Choice, ...]  # best first, at most ``limit``
    rejected: tuple[Rejection, ...]
    beyond_limit: int  # accepted candidates left out by ``limit``
    model: str = "efficiency"  # the order used (variants/selection.py MODELS)
    note: str | None = None  # why no time model was used, when none was
    no_candidate: NoCandidate | None = None  # nothing accepted for want of a baked kernel: what to build
    triton_version: str | None = None  # the Triton version asked for (a Triton family's select)
    triton_versions: tuple[str, ...] = ()  # the Triton versions there are for the device (Ranking.triton_versions)

    @property
    def best(self) -> Choice | None:
        return self.accepted[0] if self.accepted else None

    def as_dict(self, *, explain: bool = True) -> dict[str, Any]:
        d = {"target": self.target, "family": self.family, "problem": _problem_dict(self.problem),
             "lanes": None if self.lanes is None else list(self.lanes), "min_efficiency": self.min_efficiency,
             "accepted": [c.as_dict() for c in self.accepted], "beyond_limit": self.beyond_limit,
             "rejected_count": len(self.rejected), "model": self.model, "note": self.note,
             "no_candidate": None if self.no_candidate is None else self.no_candidate.as_dict(),
             "triton_version": self.triton_version, "triton_versions": list(self.triton_versions)}
        if explain:
            d["rejected"] = [r.as_dict() for r in self.rejected]
        return d


def rejection_row(r) -> dict[str, Any]:
    """A rejection as the service answers it (schemas.Rejection); `select --json` prints the same rows
    (service/access.py answers with it; here, where a host without the [serve] install reaches it)."""
    cand = r.candidate  # issue 11: Rejection(candidate, reason, detail)
    return {"key": cand.key, "lane": cand.lane.name, "arch": cand.arch, "spec": dict(cand.spec),
            "reason": f"{r.reason}: {r.detail}" if r.detail else r.reason}



def _problem_dict(problem: Any) -> dict[str, Any]:
    return {k: getattr(problem, k) for k in problem.__dataclass_fields__}


def parse_problem(family: str, problem: Any) -> Any:
    """A problem value of ``family`` from JSON text, a mapping, or the value itself."""
    entry = FAMILIES.get(family)  # the family registry: one problem type per family
    if entry is not None and isinstance(problem, entry.problem_type):
        return problem
    if isinstance(problem, (str, bytes)):
        try:
            problem = json.loads(problem)
        except json.JSONDecodeError as e:
            raise SpecError(f"problem: not JSON ({e.msg} at position {e.pos})") from None
    if not isinstance(problem, Mapping):
        raise SpecError(f"problem must be a JSON object of {family} problem fields, got {type(problem).__name__}")
    return problem_from_dict(family, dict(problem))


def _family(family: object) -> str:
    names = table.family_names()
    if not isinstance(family, str) or family not in names:
        failed = failed_plugins().get(family) if isinstance(family, str) else None
        if failed is not None:  # a plugin declared it and failed to load: say why (PluginError)
            raise failed[1]
        raise SpecError(f"family: unknown {family!r}; accepted: {', '.join(names)}")
    return family


def select_families(family: object) -> tuple[str, ...]:
    """The families a select ranks together (variants/families.py families_for_select: "gemm",
    "gemm,triton_matmul" or a list; FamilyMixError for different operations or problem types),
    each checked like a single family (unknown, or a plugin that failed to load)."""
    names = families_for_select(_family(family) if isinstance(family, str) and "," not in family else family)
    return tuple(_family(f) for f in names)


def check_triton_version(family: str | tuple[str, ...], version: object) -> str | None:
    """``version`` as a select asks it: None, or a Triton version string for a Triton family
    (SpecError naming the field otherwise: a version for a family that no Triton builds would
    be ignored, and nothing a request says is ignored)."""
    if version is None:
        return None
    if not isinstance(version, str) or not TRITON_VERSION_RE.match(version):
        raise SpecError(f"triton_version: a Triton version such as '3.6.0', got {version!r}")
    names = (family,) if isinstance(family, str) else tuple(family)
    if not any(is_triton(get_family(f)) for f in names):  # across families: one of them a Triton family
        raise SpecError(f"triton_version: {','.join(names)} is not a Triton family (no Triton builds its kernels)")
    return version


def _lanes(lanes: Iterable[object] | None) -> tuple[Lane, ...] | None:
    """The lanes asked for (names or Lanes), each validated once, sorted by name, no repeats."""
    if lanes is None:
        return None
    if isinstance(lanes, str):
        lanes = (lanes,)
    return tuple(sorted({get_lane(x, source="lane") for x in lanes}, key=attrgetter("name")))


# store -> a byte-bounded LRU of {(family, target, lanes, problem, floor, explain): (candidates,
# Ranking)}. rank() is a pure function of its arguments, so a ranking is reused exactly when the
# store hands back the very same candidate tuple (Store.candidates returns one object per query
# shape until the database changes: a moved ref, a put, a gc all give a new tuple, so the
# identity test fails and the ranking is recomputed). Holding the tuple keeps its id from being
# reused. Every distinct problem adds an entry (unauthenticated selects choose them), so the
# memo is bounded in bytes and evicts its least recently used entries one at a time: never a
# clear-all (which once took 12 s on the request that hit it, and let 3,500 problems grow a
# server to 3.3 GB). An entry's cost is an upper estimate from its entry counts and detail
# strings (an Efficiency's by variants/selection.py value_bytes), checked against tracemalloc
# by tests/test_hostile_service.py. A candidate tuple is charged once while an entry pins it
# (after a write, older entries pin the tuples of before it, which the store no longer holds).
RANKING_CACHE_BYTES = 32 << 20  # per store, per process
_ENTRY_BYTES = 1024  # the memo slot, the key tuple, the problem value, the Ranking
_CHOICE_BYTES = 256  # a Choice (a NamedTuple of 7), its Efficiency counted apart
_REJECTION_BYTES = 160  # a Rejection, its detail string counted apart
_CANDIDATE_BYTES, _SPEC_FIELD_BYTES = 1024, 128  # a Candidate (~1.9 KiB with 10 spec fields)


def ranking_cost(ranking: Ranking) -> int:
    """Upper estimate of the bytes one memo entry holds (constants above)."""
    return (_ENTRY_BYTES + sum(_CHOICE_BYTES + value_bytes(c.efficiency) for c in ranking.accepted)
            + sum(_REJECTION_BYTES + len(r.detail) + len(r.reason) for r in ranking.rejected))


def candidates_cost(cands) -> int:
    """Upper estimate of the bytes a candidate tuple holds (constants above)."""
    return sum(_CANDIDATE_BYTES + _SPEC_FIELD_BYTES * len(c.spec) for c in cands)


class RankingMemo:
    """LRU of rankings bounded by ``max_bytes`` (ranking_cost, candidates_cost); thread-safe."""

    def __init__(self, max_bytes: int = RANKING_CACHE_BYTES):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._lru: OrderedDict[tuple, tuple[Any, Ranking, int]] = OrderedDict()
        self._pins: dict[int, list] = {}  # id(candidate tuple) -> [entries pinning it, its cost]
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._lru)

    def get(self, args: tuple, cands) -> Ranking | None:
        with self._lock:
            hit = self._lru.get(args)
            if hit is None or hit[0] is not cands:
                return None
            self._lru.move_to_end(args)
            return hit[1]

    def put(self, args: tuple, cands, ranking: Ranking) -> None:
        cost = ranking_cost(ranking)
        pin = None if id(cands) in self._pins else candidates_cost(cands)
        if cost + (pin or 0) > self.max_bytes:
            return
        with self._lock:
            old = self._lru.pop(args, None)
            if old is not None:
                self._drop(old)
            self._lru[args] = (cands, ranking, cost)
            self.bytes += cost
            held = self._pins.get(id(cands))
            if held is None:
                held = self._pins[id(cands)] = [0, candidates_cost(cands) if pin is None else pin]
                self.bytes += held[1]
            held[0] += 1
            while self.bytes > self.max_bytes:
                _, entry = self._lru.popitem(last=False)
                self._drop(entry)

    def _drop(self, entry: tuple) -> None:
        cands, _, cost = entry
        self.bytes -= cost
        held = self._pins[id(cands)]
        held[0] -= 1
        if held[0] == 0:
            del self._pins[id(cands)]
            self.bytes -= held[1]


_RANKINGS: weakref.WeakKeyDictionary[Any, RankingMemo] = weakref.WeakKeyDictionary()
_RANKINGS_LOCK = threading.Lock()


def _ranked(store, cands, args: tuple, compute) -> Ranking:
    try:
        memo = _RANKINGS.get(store)
        if memo is None:
            with _RANKINGS_LOCK:
                memo = _RANKINGS.setdefault(store, RankingMemo())
    except TypeError:  # a store that cannot be weakly referenced: no memo
        return compute()
    try:
        hit = memo.get(args, cands)
    except TypeError:  # an unhashable problem value: rank it straight
        return compute()
    if hit is not None:
        return hit
    ranking = compute()
    memo.put(args, cands, ranking)
    return ranking


def ranking_memo(store) -> RankingMemo | None:
    """The store's memo in this process (tests, the bench)."""
    return _RANKINGS.get(store)


def _measurements(store, family: str, processor: str) -> list | None:
    if getattr(store, "engine", None) is None:  # not a database store (the client's signed index, a test double)
        return None
    # a database store's recorded times (SQLAlchemy: the [serve] install); a host that ranks
    # the signed index (client/index.py) has no database, and needs neither
    from rocke_aot.cache import measurements

    return measurements.for_family(store, family, processor) or None


def select(store, target: object, family: str, problem: Any, *, lanes: Iterable[str] | None = None,
           min_efficiency: float | None = None, limit: int | None = None, explain: bool = True,
           model: str = "auto", measured: str = "exact", triton_version: str | None = None) -> Selection:
    """Rank the cached artifacts of ``family`` that ``target`` can run on ``problem``.

    ``model``: the order (variants/selection.py MODELS): "auto" uses fitted constants where the
    arch ships them, else its published hardware facts, else tile efficiency (with a note why).
    ``measured``: recorded times (cache/measurements.py) rank the candidates they apply to
    first: "exact" (the same problem), "class" (or, failing that, a problem of its shape
    class), "off" (the model alone). variants/measured.py has the rules.

    ``explain`` False skips the rows selection would only reject as stale or incompatible
    (they are left out in SQL, so the rejected list then lacks those two reasons).

    ``triton_version`` (a Triton family's only): the Triton the GPU host runs; only what that
    version built is accepted (a host's Triton must equal the builder's). Without it, every
    version's candidates are accepted side by side, each labelled with its triton_version, and
    ``triton_versions`` says which there are: the client picks (docs/triton.md).
    """
    fams = select_families(family)
    fam = ",".join(fams)  # the answer's family: the names asked, in order ("gemm,triton_matmul")
    version = check_triton_version(fams, triton_version)
    tgt = Target.parse(target)  # select() is the Python API's door (docs/selection.md): parsed once here
    lane_list = _lanes(lanes)
    lane_names = None if lane_list is None else tuple(x.name for x in lane_list)
    prob = parse_problem(fams[0], problem)  # one problem type across them (families_for_select)
    floor = DEFAULT_MIN_EFFICIENCY if min_efficiency is None else min_efficiency
    if limit is not None and (not is_int(limit) or limit < 1):
        raise SpecError(f"limit must be a positive int, got {limit!r}")
    parts = [store.candidates(f, tgt, lane_names, compatible_only=not explain, current_only=not explain)
             for f in fams]
    # One family: the store's own tuple (the memo's identity test). Several: their concatenation,
    # a new tuple per call, so the memo never matches it and the ranking is computed afresh.
    cands = parts[0] if len(parts) == 1 else tuple(c for part in parts for c in part)
    if measured not in MEASURED:
        raise SpecError(f"measured must be one of {', '.join(MEASURED)}, got {measured!r}")

    def compute() -> Ranking:
        # Only on a memo miss: the same candidate tuple means an unchanged database, so the
        # measurements it holds are unchanged too (a record is a write like any other).
        ms = [m for f in fams for m in (_measurements(store, f, tgt.processor) or ())] \
            if measured != "off" else None
        return rank(cands, prob, tgt, min_efficiency=floor, lanes=lane_list, model=model, measurements=ms,
                    shape_class=measured == "class", triton_version=version)

    ranking = _ranked(store, cands, (fam, tgt.id, lane_names, prob, floor, explain, model, measured, version),
                      compute) if len(fams) == 1 else compute()
    accepted = ranking.accepted if limit is None else ranking.accepted[:limit]
    hint = None if ranking.accepted else no_candidate(ranking, fams[0], prob, tgt, lane_list)
    return Selection(tgt.id, fam, prob, lane_names, float(floor), accepted, ranking.rejected,
                     len(ranking.accepted) - len(accepted), ranking.model, ranking.note, hint, version,
                     ranking.triton_versions)
