"""`rocke-aot bench --run-from-cache`: problems -> select() -> cached kernels -> run_problem.

    Source (one interface, two places the kernels come from)
        StoreSource(store)    a host's own cache: select() over it, blobs and contracts from
                              Store.get
        ServerSource(client, fetcher)
                              a GPU host: the ranking from the service (POST /v1/select through
                              service/client.py), the kernels through the verifying client
                              (client/ Fetcher: its mirrors, then the service; the signed
                              manifest's record and bytes when a root key is pinned, the
                              unsigned path only when told insecure), kept in its LocalStore;
                              every answer checked against the question before anything is
                              launched: ranked rows for an arch the device runs (Client.select),
                              kernels only of those rows, of the family and a target asked (and
                              the Triton version asked: their key's toolchain), their code object
                              valid for it and their launch contract the one the object declares
                              (AnswerMismatchError otherwise)
    host_triton_version(family, given)  a Triton family's select names the Triton the host runs:
                              --triton-version, else the installed triton's version, else a
                              SpecError (a host's Triton must equal the builder's: docs/triton.md)
    bench(source, runtime, target, family, problems, candidates="all"|"top:N", triton_version=)
        (``target``: the device's Target, parsed by the caller: the CLI's --arch)
        for each problem: the accepted candidates in ranked order (rank 0 = the selection's
        first choice), loaded together (source.load_many: the Fetcher's pool) ->
        run.run_problem -> ProblemReport (times, verification, vendor)
    summary(reports) -> selection quality (best measured / top-ranked time per problem:
        median and minimum) and the best kernel's ratio to the vendor library

Nothing is compiled here: a candidate without a stored launch contract is an error.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from rocke_aot.aot.agreement import checked_metadata
from rocke_aot.cache.keys import thaw
from rocke_aot.candidates import triton_version_of
from rocke_aot.client.fetch import check_asked
from rocke_aot.errors import AnswerMismatchError, SpecError
from rocke_aot.lanes import LANES
from rocke_aot.launch import LaunchContract
from rocke_aot.runner.run import LoadedKernel, ProblemReport, run_problem, timed_ms
from rocke_aot.runner.runtime import Runtime
from rocke_aot.service.selection import parse_problem, select
from rocke_aot.targets import Target, compatible
from rocke_aot.variants import table


class Source(Protocol):
    def ranked(self, target: Target, family: str, problem: Any, lanes: Sequence[str] | None,
               triton_version: str | None = None, limit: int | None = None) -> list[dict[str, Any]]: ...

    def load(self, key: str) -> tuple[bytes, dict[str, Any]]: ...

    def load_many(self, keys: Sequence[str]) -> dict[str, tuple[bytes, dict[str, Any]]]: ...


def loaded_candidate(entry: dict[str, Any], rank: int, image: bytes, metadata: dict[str, Any]) -> LoadedKernel:
    launch = metadata.get("launch")
    if not launch:
        raise SpecError(f"artifact {entry['key']} has no launch contract in its metadata (built before the "
                        f"contract existed?); rebuild it")
    contract = LaunchContract.from_dict(launch)
    return LoadedKernel(entry["key"], contract.kernel, image, contract, rank,
                     entry.get("efficiency"), entry.get("spec") or {}, entry.get("lane", ""),
                     entry.get("estimate_ms"), entry.get("resources"))


class StoreSource:
    def __init__(self, store):
        self.store = store

    def ranked(self, target: Target, family, problem, lanes, triton_version=None, limit=None):
        sel = select(self.store, target, family, problem, lanes=lanes, explain=False, triton_version=triton_version,
                     limit=limit)
        return [{"key": c.key, "lane": c.lane, "spec": dict(c.candidate.spec), "efficiency": c.efficiency.total,
                 "estimate_ms": c.estimate_ms, "resources": c.candidate.resources.as_dict()} for c in sel.accepted]

    def load(self, key):
        art = self.store.get(key)
        return art.code_object, thaw(art.metadata)

    def load_many(self, keys):
        return {k: self.load(k) for k in keys}


class ServerSource:
    """Ranked candidates from ``client`` (service/client.py: POST /v1/select); every kernel
    through ``fetcher`` (a client/ Fetcher), never a database of this host's. Each answer is
    checked against the question: a ranked row for an arch the device cannot run (or a lane not
    asked for) is refused by Client.select and again here; a key loaded must be one a select of
    this source ranked, its record of the family and a target that select asked for, its code
    object valid for that target and its launch contract the one the object declares (kernel
    name, kernarg size and layout, block within the object's maximum work-group size), also when
    the local store answers. Anything else is AnswerMismatchError: nothing is launched from it."""

    def __init__(self, client, fetcher):
        self.client = client
        self.fetcher = fetcher
        # key -> (device target, family, Triton version) of the select that ranked it
        self._asked: dict[str, tuple[Target, str, str | None]] = {}

    def ranked(self, target: Target, family, problem, lanes, triton_version=None, limit=None):
        doc = self.client.select(target.id, family, dataclasses.asdict(problem), lanes=lanes, triton_version=triton_version,
                                 limit=limit)
        out = []
        for c in doc["accepted"]:
            if not compatible(c["arch"], target):  # Client.select checked it; the runner does not rely on that
                raise AnswerMismatchError(f"select answered {c['key']} built for {c['arch']}; {target} cannot run it")
            if c.get("triton_version") != triton_version:  # likewise
                raise AnswerMismatchError(f"select answered {c['key']} built by Triton {c.get('triton_version')}; "
                                          f"Triton {triton_version} was asked for")
            self._asked[c["key"]] = (target, family, triton_version)
            out.append({"key": c["key"], "lane": c["lane"], "spec": c["spec"], "efficiency": c["efficiency"]["total"],
                        "estimate_ms": c.get("estimate_ms"), "resources": c["resources"]})
        return out

    def load(self, key):
        return self.load_many([key])[key]

    def load_many(self, keys):
        """The kernels of ``keys``, verified by the Fetcher (signed: the manifest's sha256, size
        and record), fetched together on its pool, kept in its local store, then checked
        against the question (class doc)."""
        by_question: dict[tuple[Target, str], list[str]] = {}
        for k in keys:
            if k not in self._asked:
                raise AnswerMismatchError(f"kernel {k} was not ranked by a select of this source; it is not loaded")
            by_question.setdefault(self._asked[k][:2], []).append(k)
        got: dict[str, Any] = {}
        launchable: dict[str, tuple[bytes, dict[str, Any]]] = {}

        def check(kern) -> None:  # on the Fetcher's threads, before it keeps or returns a kernel
            launchable[kern.key] = self._checked(kern.key, kern)

        for (target, family), ks in by_question.items():  # the Fetcher keeps nothing that fails these checks
            got.update(self.fetcher.get_many(ks, arch=target.id, family=family, check=check))
        return {k: launchable[k] for k in keys}

    def _checked(self, key, kern) -> tuple[bytes, dict[str, Any]]:
        target, family, version = self._asked[key]
        check_asked(kern.inputs.arch, kern.inputs.family, target, family, f"kernel {key}")
        built_by = triton_version_of(kern.inputs.toolchain)  # the key's toolchain identity: the bytes' own
        if built_by != version:
            raise AnswerMismatchError(f"kernel {key} was built by Triton {built_by}, not the {version} asked for; "
                                      f"not launched")
        metadata = checked_metadata(kern.code_object, kern.inputs.arch, kern.metadata,
                                    f"kernel {key}: its code object and its record disagree; not launched")
        return kern.code_object, metadata


def parse_candidates(text: str) -> int | None:
    """"all" -> None (every accepted candidate), "top:N" -> N."""
    if text == "all":
        return None
    head, _, n = text.partition(":")
    if head == "top" and n.isdigit() and int(n) >= 1:
        return int(n)
    raise SpecError(f"--candidates takes 'all' or 'top:N' with N >= 1, got {text!r}")


def _split_field(family: str) -> str | None:
    """The problem field a family's launches split along (the same for every spec)."""
    for lane in LANES:
        for spec in table.enumerate_specs(family, "gfx942", lane.name):
            split = spec.launch_formulas().split
            return split.field if split is not None else None
    return None


def host_triton_version(family: str, given: str | None) -> str | None:
    """The Triton version a select of ``family`` names on this host: None for a family no Triton
    builds (``given`` there is refused by select), ``given``, else the version of the triton
    installed here (importlib.metadata: nothing is imported), else SpecError: a Triton family's
    artifacts are served to a host of that Triton only (a host's Triton must equal the builder's)."""
    from rocke_aot.variants.families import get_family
    from rocke_aot.variants.triton import is_triton

    if given is not None or not is_triton(get_family(family)):
        return given
    import importlib.metadata

    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        raise SpecError(f"{family} is a Triton family and this host has no triton installed: give the Triton "
                        f"version the kernels are for (--triton-version 3.6.0); a select answers each version "
                        f"apart") from None


def _ranked_for_chunks(source: Source, target: Target, family: str, problem: Any, lanes,
                       triton_version: str | None = None) -> list[dict[str, Any]]:
    """Candidates for a problem no kernel can address whole (a tensor over 2 GiB): rank them on
    the largest sub-problem along the split axis that selection accepts; the runner then
    launches the whole problem in chunks of at most that size (runner/run.py launches)."""
    name = _split_field(family)
    if name is None:
        return []
    extent = getattr(problem, name)
    while extent > 1:
        extent //= 2
        ranked = source.ranked(target, family, dataclasses.replace(problem, **{name: extent}), lanes, triton_version)
        if ranked:
            return ranked
    return []


@dataclass
class BenchReport:
    arch: str
    family: str
    device: str
    runtime: str
    problems: list[ProblemReport]
    reps: int | None = None  # repeats each median is of (cache/measurements.py records it)
    triton_version: str | None = None  # a Triton family's: the Triton whose builds ran

    def summary(self) -> dict[str, Any]:
        q = [p.selection_quality for p in self.problems if p.selection_quality is not None]
        v = [p.vendor_ms / timed_ms(p.best) for p in self.problems if p.vendor_ms and p.best]
        failed = sum(1 for p in self.problems for r in p.results if r.verified is False or r.error)
        return {"problems": len(self.problems), "runs": sum(len(p.results) for p in self.problems),
                "failed_runs": failed,
                "selection_quality_median": statistics.median(q) if q else None,
                "selection_quality_min": min(q) if q else None,
                "best_over_vendor_median": statistics.median(v) if v else None}

    def as_dict(self) -> dict[str, Any]:
        return {"arch": self.arch, "family": self.family, "device": self.device, "runtime": self.runtime,
                "reps": self.reps, "triton_version": self.triton_version, "summary": self.summary(),
                "problems": [p.as_dict() for p in self.problems]}


def bench(source: Source, rt: Runtime, target: Target, family: str, problems: Iterable[Any], *,
          candidates: int | None = None, lanes: Sequence[str] | None = None, verify: bool = True,
          warmup: int = 2, reps: int = 10, vendor: bool = True,
          on_problem: Callable[[int], None] | None = None, progress: Callable[[], None] | None = None,
          triton_version: str | None = None,
          on_report: Callable[[BenchReport], None] | None = None) -> BenchReport:
    """Every problem's candidates run; ``on_report`` gets the report so far after each problem
    (the CLI rewrites --out with it: a run cut short keeps the problems it finished)."""
    reports: list[ProblemReport] = []
    for i, raw in enumerate(problems):
        problem = parse_problem(family, raw)
        ranked = (source.ranked(target, family, problem, lanes, triton_version)
                  or _ranked_for_chunks(source, target, family, problem, lanes, triton_version))
        if candidates is not None:
            ranked = ranked[:candidates]
        if on_problem:
            on_problem(len(ranked))
        loaded = source.load_many([entry["key"] for entry in ranked])
        cands = [loaded_candidate(entry, rank, *loaded[entry["key"]]) for rank, entry in enumerate(ranked)]
        reports.append(run_problem(rt, family, problem, cands, verify=verify, warmup=warmup, reps=reps,
                                   seed=i, vendor=vendor, progress=progress))
        if on_report:
            on_report(BenchReport(target.id, family, rt.device_name(), rt.name, list(reports), reps, triton_version))
    return BenchReport(target.id, family, rt.device_name(), rt.name, reports, reps, triton_version)
