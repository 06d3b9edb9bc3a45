"""IR goldens: the sha256 of the IR every lane emits for a representative set of specs.

    select_cases(families)                     the cases, chosen BY RULE from the variant tables:
        per (family, arch, lane the table serves): the admitted grid, grouped by
        (baked parameter set, path); the groups a greedy 3-way cover chooses (every value, pair
        and triple of values of the groups' parameters that some group holds is held by a chosen
        one: so every dtype, every baked layer and every path, and every combination of three of
        them that the table serves; ties to the earlier group) -- then, per chosen group, a
        greedy cover of every knob's extremes (min and max of each
        numeric or boolean knob over the admitted points: block sizes, waves, tiles,
        double_buffer both ways; every value of a non-numeric knob); ties go to the earlier
        point of the table's enumeration order. The union over lanes is the case list.
    evaluate(cases, lane)                      per case: lower(family, spec, arch, lane) -> sha256,
        size, kernel name, the intrinsics it declares; or an expected failure with its reason
        (the table refuses the (arch, lane), the lane's grid lacks the point, lowering refuses)
    check(golden, fresh)  -> Report            drift (hash, size, kernel, failure reason), added or
        missing cases, lane-registry problems (stale lane, missing lane, undecided lane, alias
        across profiles), each drift with the first differing IR lines (old IR from the store)

This module only reads the golden files (package data: ``aot/goldens/``, in the wheel too);
writing them is maintainer tooling outside the product layers: ``python -m devtools.goldens
--out aot/goldens`` (devtools/goldens.py builds the document from this module's cases and
outcomes, refuses on a dirty git tree, and writes only the directory it is given).

Lowering takes the lane as an argument, so every lane of the registry is checked on any host,
whatever compilers it has. A lane may alias another lane's cases (``"alias_of"``) only when
both map to the same emission profile in the registry (rocke_aot/lanes.py); an aliased lane
is still lowered, and compared with its target's entries.

The cases are the built-in families' (families or builtin_family_names()): a plugin's family is
its distribution's to pin; ``--family NAME`` still lowers it on demand.

Files (reviewed like code): ``aot/goldens/ir-goldens.json`` (hashes, failures, counters) and
``aot/goldens/ir-goldens.ir.zst`` (zstd JSON {sha256: IR text}: the IR of every recorded hash,
so a drift report can show the old lines without checking out old code). docs/goldens.md.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from rocke_aot import lanes as lane_registry
from rocke_aot.aot.lower import lower
from rocke_aot.arch import ARCHES
from rocke_aot.errors import CapabilityError, LaneError, RockeError, SpecError
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import builtin_family_names, get_family
from rocke_aot.variants.triton import is_triton


def _golden_families() -> tuple[str, ...]:
    """The built-in families lowered to LLVM IR by rocke-aot (a plugin's families are not
    rocke-aot's goldens; a Triton family's "IR" is a compile request: Triton's own key covers
    it, tests/test_triton*.py)."""
    # rocke-aot's own families: the built-ins and those of rocke_aot/families/ (entry points of
    # rocke-aot itself, builtin_family_names() lists them too)
    return tuple(n for n in builtin_family_names() if not is_triton(get_family(n)))

SCHEMA = 1
RULE = ("per (family, arch, served lane): the admitted grid grouped by (baked parameters, path); "
        "per group a greedy cover of each knob's min and max (every value of a non-numeric knob), "
        "ties to the earlier point in table order; cases = the union over lanes")
GOLDEN_NAME = "ir-goldens.json"
IR_STORE_NAME = "ir-goldens.ir.zst"
GOLDEN_DIR = Path(__file__).resolve().parent / "goldens"  # package data, read only
GOLDEN_PATH = GOLDEN_DIR / GOLDEN_NAME
IR_STORE_PATH = GOLDEN_DIR / IR_STORE_NAME
WRITE_COMMAND = "python -m devtools.goldens --out aot/goldens"  # from a source checkout (docs/goldens.md)
# llvmlite quotes global names: declare i32 @"llvm.amdgcn.workitem.id.x"()
_INTRINSIC_RE = re.compile(r'^declare\b[^@]*@"?(llvm\.[A-Za-z0-9_.]+)"?\(', re.M)
_DIFF_LINES = 6  # lines of a drift report's diff excerpt


class GoldenError(RockeError):
    """The golden file cannot be used or written (corrupt store, bad format; devtools: a dirty tree)."""


# ------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Case:
    family: str
    arch: str
    spec: Mapping[str, Any]  # canonical spec dict
    kernel: str  # the spec's kernel name (unique per family and arch)

    @property
    def id(self) -> str:
        return f"{self.family}/{self.arch}/{self.kernel}"

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "arch": self.arch, "spec": dict(self.spec)}


def _group_key(spec_dict: Mapping[str, Any], baked: Mapping[str, Any]) -> str:
    return json.dumps([sorted(baked.items()), spec_dict.get("path")], default=str)


def _ordered(v: Any) -> bool:
    return isinstance(v, (bool, int, float))


def representative(specs: Sequence[Any], knob_names: Iterable[str]) -> list[Any]:
    """The greedy cover of every knob's extremes over ``specs`` (one group: same baked, path)."""
    dicts = [s.to_dict() for s in specs]
    targets: set[tuple[str, Any]] = set()
    for name in knob_names:
        values = {d[name] for d in dicts if name in d}
        if len(values) < 2:
            continue
        if all(_ordered(v) for v in values):
            targets |= {(name, min(values)), (name, max(values))}
        else:
            targets |= {(name, v) for v in values}
    chosen: list[int] = [0] if not targets and dicts else []
    while targets:
        best, gain = None, 0
        for i, d in enumerate(dicts):
            g = sum(1 for n, v in targets if d.get(n) == v and type(d.get(n)) is type(v))
            if g > gain:
                best, gain = i, g
        if best is None:  # cannot happen: every target value comes from some point
            raise GoldenError(f"no point covers {sorted(targets, key=str)}")
        chosen.append(best)
        targets = {(n, v) for n, v in targets
                   if not (dicts[best].get(n) == v and type(dicts[best].get(n)) is type(v))}
    return [specs[i] for i in sorted(chosen)]


COVER_STRENGTH = 3  # the groups' cover: every t-tuple of parameter values that some group holds


def value_tuples(params: Mapping[str, Any], strength: int = COVER_STRENGTH) -> set[tuple[tuple[str, str], ...]]:
    """Every combination of 1 to ``strength`` of a group's (parameter, value) pairs."""
    items = sorted((k, json.dumps(v, sort_keys=True, default=str)) for k, v in params.items())
    return {c for r in range(1, strength + 1) for c in itertools.combinations(items, r)}


def group_cover(groups: Sequence[Mapping[str, Any]], strength: int = COVER_STRENGTH) -> list[int]:
    """Indices (ascending) of a greedy cover of the groups' value tuples (``value_tuples``):
    repeatedly the group holding the most uncovered tuples, ties to the earlier group."""
    held = [value_tuples(g, strength) for g in groups]
    need = set().union(*held) if held else set()
    chosen: list[int] = []
    while need:
        best = max(range(len(groups)), key=lambda i: (len(held[i] & need), -i))
        chosen.append(best)
        need -= held[best]
    return sorted(chosen)


def _lane_selection(family: str, target: Target, lane: lane_registry.Lane) -> list[Any]:
    tab = get_family(family).table
    specs = list(table.enumerate_specs(family, target, lane))
    groups: dict[str, tuple[dict[str, Any], list[Any], list[str]]] = {}
    bakeds = list(tab.baked(target, lane))
    for s in specs:
        d = s.to_dict()
        # a point's group: the baked set it matches with the most parameters (a split-KV point also
        # matches its unsplit twin's smaller set), the first of equals
        matching = [b for b in bakeds if all(d.get(k) == v for k, v in b.items())]
        if not matching:
            continue
        baked = max(matching, key=len)
        key = _group_key(d, baked)
        if key not in groups:
            groups[key] = ({**baked, "path": d.get("path")}, [], [k for k in tab.knobs(baked, target, lane) if k != "path"])
        groups[key][1].append(s)
    ordered = list(groups.values())
    out: list[Any] = []
    for i in group_cover([params for params, _, _ in ordered]):
        _, group, knobs = ordered[i]
        out += representative(group, knobs)
    return out


def select_cases(families: Sequence[str] | None = None) -> list[Case]:
    """Every case of the rule, in (family, arch, table order); ids are unique."""
    cases: dict[str, Case] = {}
    for family in families or _golden_families():
        for processor in ARCHES:
            target = Target(processor)  # the registry's bare processors
            for lane in table.registered_lanes():
                if not table.admission(family, target, lane).served:
                    continue
                for spec in _lane_selection(family, target, lane):
                    case = Case(family, target.id, spec.to_dict(), spec.kernel_name)
                    old = cases.setdefault(case.id, case)
                    if old.spec != case.spec:
                        raise GoldenError(f"two specs share the case id {case.id}: {old.spec} / {case.spec}")
    return list(cases.values())


# ------------------------------------------------------------------ one lane's results


@dataclass(frozen=True)
class Outcome:
    """One case on one lane: lowered (sha256, size, kernel, intrinsics) or refused (reason)."""

    sha256: str | None = None
    size: int = 0
    kernel: str = ""
    intrinsics: tuple[str, ...] = ()
    stage: str | None = None  # None (lowered) | "admission" | "grid" | "lowering"
    reason: str = ""
    ir: str | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.stage is None

    def as_dict(self) -> dict[str, Any]:
        if self.ok:
            return {"sha256": self.sha256, "size": self.size, "kernel": self.kernel,
                    "intrinsics": list(self.intrinsics)}
        return {"stage": self.stage, "reason": self.reason}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Outcome:
        if "sha256" in d:
            return cls(d["sha256"], int(d["size"]), d["kernel"], tuple(d.get("intrinsics", ())))
        return cls(stage=d["stage"], reason=d["reason"])


def declared_intrinsics(ir: str) -> tuple[str, ...]:
    """The ``llvm.*`` intrinsics an IR module declares, sorted."""
    return tuple(sorted(set(_INTRINSIC_RE.findall(ir))))


def evaluate_case(case: Case, lane: lane_registry.Lane) -> Outcome:
    adm = table.admission(case.family, case.arch, lane)
    if not adm.served:
        return Outcome(stage="admission", reason=adm.reason)
    spec = table.spec_from_dict(case.family, case.spec)
    if spec not in table.enumerate_specs(case.family, case.arch, lane):
        paths = table.path_admissions(case.family, case.arch, lane)
        path = case.spec.get("path")
        why = paths.get(path) if isinstance(path, str) else None
        reason = why.reason if why is not None and not why.served else "not a point of the lane's grid"
        return Outcome(stage="grid", reason=reason)
    try:
        k = lower(case.family, spec, case.arch, lane)
    except (CapabilityError, SpecError) as e:
        return Outcome(stage="lowering", reason=f"{type(e).__name__}: {e}")
    ir = k.ir
    return Outcome(hashlib.sha256(ir.encode()).hexdigest(), len(ir.encode()), k.kernel_name,
                   declared_intrinsics(ir), ir=ir)


def _evaluate_chunk(cases: Sequence[Case], lane: lane_registry.Lane) -> list[Outcome]:
    return [evaluate_case(c, lane) for c in cases]


def evaluate(cases: Sequence[Case], lanes: Sequence[lane_registry.Lane], *,
             jobs: int = 1) -> dict[str, dict[str, Outcome]]:
    """lane name -> case id -> Outcome (every lane lowered, aliased or not).

    ``jobs`` > 1 lowers in that many spawned processes (lowering is pure Python, so threads
    would not help); 1 lowers here, which is what a test that monkeypatches the lowering needs.
    """
    if jobs <= 1:
        return {lane.name: dict(zip((c.id for c in cases), _evaluate_chunk(cases, lane)))
                for lane in lanes}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    size = max(1, -(-len(cases) // (4 * jobs)))
    chunks = [list(cases[i:i + size]) for i in range(0, len(cases), size)]
    with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as ex:
        futures = {lane.name: [ex.submit(_evaluate_chunk, ch, lane) for ch in chunks] for lane in lanes}
        out = {}
        for name, futs in futures.items():
            outcomes = [o for f in futs for o in f.result()]
            out[name] = dict(zip((c.id for c in cases), outcomes))
    return out


def summarize(outcomes: Mapping[str, Outcome]) -> dict[str, Any]:
    ok = [o for o in outcomes.values() if o.ok]
    failed = [o for o in outcomes.values() if not o.ok]
    stages: dict[str, int] = {}
    for o in failed:
        stage = o.stage
        assert stage is not None, "an outcome that is not ok names its stage (Outcome.ok)"
        stages[stage] = stages.get(stage, 0) + 1
    return {"cases": len(outcomes), "ok_cases": len(ok), "expected_failures": len(failed),
            "failures_by_stage": dict(sorted(stages.items())), "ir_bytes": sum(o.size for o in ok),
            "distinct_ir": len({o.sha256 for o in ok})}


# ------------------------------------------------------------------ the files


def load(path: Path = GOLDEN_PATH) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise GoldenError(f"no golden file at {path}: run `{WRITE_COMMAND}` in a source checkout") from None
    except json.JSONDecodeError as e:
        raise GoldenError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise GoldenError(f"{path}: schema {doc.get('schema') if isinstance(doc, dict) else '?'} "
                          f"is not {SCHEMA}")
    return doc


def load_ir_store(path: Path = IR_STORE_PATH) -> dict[str, str]:
    """sha256 -> IR text; every entry is verified against its key."""
    if not Path(path).exists():
        return {}
    try:
        store = json.loads(zstandard.ZstdDecompressor().decompress(Path(path).read_bytes()))
    except (zstandard.ZstdError, json.JSONDecodeError) as e:
        raise GoldenError(f"{path} is not a zstd JSON IR store: {e}") from None
    for sha, ir in store.items():
        if hashlib.sha256(ir.encode()).hexdigest() != sha:
            raise GoldenError(f"{path}: the IR stored under {sha[:12]} does not hash to it")
    return store


def for_lane(entries: Mapping[str, Any], source: lane_registry.Lane, lane: lane_registry.Lane) -> dict[str, Any]:
    """``source``'s entries as ``lane`` would record them: a refusal reason names its lane
    ("LLVM 24 (llvm24) has no sm_90 target"), so an alias target's reasons are re-spelled
    for the aliased lane before they are compared; hashes are compared as they are."""
    if source.name == lane.name:
        return dict(entries)
    a, b = source, lane

    def respell(o: Mapping[str, Any]) -> dict[str, Any]:
        if "reason" not in o:
            return dict(o)
        reason = o["reason"].replace(f"LLVM {a.major}", f"LLVM {b.major}")
        return dict(o, reason=re.sub(rf"\b{re.escape(a.name)}\b", b.name, reason))

    return {cid: respell(o) for cid, o in entries.items()}


def lane_entries(doc: Mapping[str, Any], lane: lane_registry.Lane) -> tuple[dict[str, Any], lane_registry.Lane]:
    """(case id -> outcome dict, the lane whose entries these are) after resolving an alias.

    The golden document's one lane string is read here: the lane an entry aliases
    (``"alias_of"``), parsed where it is deserialized (its keys are compared with the
    registry's names by registry_findings, never parsed)."""
    entry = doc["lanes"][lane.name]
    alias = entry.get("alias_of")
    if alias is None:
        return dict(entry.get("results", {})) | dict(entry.get("expected_failures", {})), lane
    target = lane_registry.get_lane(alias, source=f"alias target of golden lane {lane.name}")
    validate_alias(lane, target, doc)
    return for_lane(lane_entries(doc, target)[0], target, lane), target


def validate_alias(lane: lane_registry.Lane, target: lane_registry.Lane, doc: Mapping[str, Any] | None = None) -> None:
    """An alias is legal only between two registered lanes that map to the same profile."""
    a, b = lane, target
    if a.profile_name != b.profile_name:
        raise LaneError(f"golden lane {a.name} aliases {b.name}, but {a.name} maps to profile "
                        f"{a.profile_name!r} and {b.name} to {b.profile_name!r}: an alias must not "
                        f"cross emission profiles")
    if doc is not None:
        if b.name not in doc["lanes"]:
            raise LaneError(f"golden lane {a.name} aliases {b.name}, which the golden does not hold")
        if doc["lanes"][b.name].get("alias_of"):
            raise LaneError(f"golden lane {a.name} aliases {b.name}, itself an alias: alias the target directly")


# ------------------------------------------------------------------ check


@dataclass(frozen=True)
class Finding:
    kind: str  # "drift" | "added" | "missing" | "stale-lane" | "missing-lane" | "undecided" | "profile"
    lane: str
    case: str = ""
    old: str = ""  # old hash or reason
    new: str = ""
    detail: tuple[str, ...] = ()  # the first differing IR lines, or an explanation

    def render(self) -> str:
        head = {"drift": "DRIFT", "added": "NEW CASE", "missing": "MISSING CASE", "stale-lane": "STALE LANE",
                "missing-lane": "MISSING LANE", "undecided": "UNDECIDED LANE", "profile": "PROFILE",
                }.get(self.kind, self.kind.upper())
        lines = [f"{head} lane {self.lane}" + (f" case {self.case}" if self.case else "")]
        if self.old or self.new:
            lines.append(f"  old: {self.old or '-'}")
            lines.append(f"  new: {self.new or '-'}")
        lines += [f"  {d}" for d in self.detail]
        return "\n".join(lines)


@dataclass(frozen=True)
class Report:
    findings: tuple[Finding, ...]
    checked: Mapping[str, Mapping[str, int]]  # lane -> summary counters of the fresh run
    aliases: Mapping[str, str]  # lane -> alias target, as validated

    @property
    def ok(self) -> bool:
        return not self.findings

    def render(self) -> str:
        out = [f.render() for f in self.findings]
        for lane, s in self.checked.items():
            alias = f" (alias of {self.aliases[lane]})" if lane in self.aliases else ""
            out.append(f"lane {lane}{alias}: {s['ok_cases']} lowered, {s['expected_failures']} expected "
                       f"failures, {s['cases']} cases")
        out.append("golden check: OK" if self.ok else f"golden check: {len(self.findings)} finding(s)")
        return "\n".join(out)


def first_difference(old: str | None, new: str | None) -> tuple[str, ...]:
    """The first differing lines of two IR texts, as a small unified diff with line numbers."""
    if old is None:
        return ("(the old IR is not in the IR store; rewrite the goldens to keep it)",)
    a, b = old.splitlines(), new.splitlines() if new is not None else []
    for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        tag, i1, i2, j1, j2 = op
        if tag == "equal":
            continue
        lines = [f"first difference at line {i1 + 1}:"]
        lines += [f"- {ln}" for ln in a[i1:min(i2, i1 + _DIFF_LINES)]]
        lines += [f"+ {ln}" for ln in b[j1:min(j2, j1 + _DIFF_LINES)]]
        return tuple(lines)
    return ("(same lines; the texts differ in line endings)",)


def describe(o: Mapping[str, Any] | Outcome) -> str:
    d = o.as_dict() if isinstance(o, Outcome) else o
    if "sha256" in d:
        return f"{d['sha256']} ({d['size']} bytes, kernel {d['kernel']})"
    return f"refused at {d['stage']}: {d['reason']}"


def registry_findings(doc: Mapping[str, Any], lanes: Sequence[str] | None = None) -> list[Finding]:
    """Stale lanes, missing lanes, undecided lanes and recorded profiles vs the registry."""
    out: list[Finding] = []
    registered = {lane.name: lane for lane in table.registered_lanes()}
    for name in sorted(set(doc.get("lanes", {})) - set(registered)):
        out.append(Finding("stale-lane", name, detail=(
            f"the golden holds lane {name}, which the lane registry does not: remove it "
            f"(`{WRITE_COMMAND}`)",)))
    for name, lane in registered.items():
        if lanes and name not in lanes:
            continue
        entry = doc.get("lanes", {}).get(name)
        if entry is None:
            out.append(Finding("missing-lane", name, detail=(
                f"registry lane {name} has no golden: every lane must be lowered and recorded "
                f"(`{WRITE_COMMAND} --lane {name}`)",)))
        elif entry.get("profile") != lane.profile_name:
            out.append(Finding("profile", name, old=str(entry.get("profile")), new=lane.profile_name,
                               detail=(f"lane {name} now maps to profile {lane.profile_name}",)))
    builtin = set(_golden_families())
    for hole in table.check_complete():
        if hole.family in builtin and hole.lane in registered and (not lanes or hole.lane in lanes):
            out.append(Finding("undecided", hole.lane, detail=(str(hole),)))
    return out


def check(doc: Mapping[str, Any] | None = None, *, lanes: Sequence[lane_registry.Lane] | None = None,
          families: Sequence[str] | None = None, ir_store: Mapping[str, str] | None = None,
          jobs: int = 1) -> Report:
    """Lower every case on every lane (or those given: Lanes, parsed by the caller) and compare
    with the golden."""
    doc = load() if doc is None else doc
    lane_names = [lane.name for lane in lanes] if lanes else None
    findings = registry_findings(doc, lane_names)
    store = load_ir_store() if ir_store is None else ir_store
    cases = select_cases(families)
    fams = set(families or _golden_families())
    checked: dict[str, dict[str, int]] = {}
    aliases: dict[str, str] = {}
    todo = [lane for lane in table.registered_lanes()
            if (not lane_names or lane.name in lane_names) and lane.name in doc.get("lanes", {})]
    # (a registry lane the golden lacks is a missing-lane finding above)
    for lane in todo:
        lane_entries(doc, lane)  # validate every alias before the slow part
    results = evaluate(cases, todo, jobs=jobs)
    for lane in todo:
        recorded, source_lane = lane_entries(doc, lane)
        source = source_lane.name
        if source != lane.name:
            aliases[lane.name] = source
        recorded = {cid: o for cid, o in recorded.items() if cid.split("/", 1)[0] in fams}
        fresh = results[lane.name]
        checked[lane.name] = summarize(fresh)
        via = f" (via alias {source})" if source != lane.name else ""
        for cid, new in fresh.items():
            old = recorded.get(cid)
            if old is None:
                findings.append(Finding("added", lane.name, cid, new=describe(new), detail=(
                    f"a case of the rule that the golden{via} does not hold",)))
                continue
            if Outcome.from_dict(old) == new:
                continue
            detail: tuple[str, ...] = ()
            if "sha256" in old and new.ok:
                detail = first_difference(store.get(old["sha256"]), new.ir)
            findings.append(Finding("drift", lane.name, cid, describe(old) + via, describe(new), detail))
        for cid in sorted(set(recorded) - set(fresh)):
            findings.append(Finding("missing", lane.name, cid, old=describe(recorded[cid]), detail=(
                "the golden holds a case the rule no longer selects",)))
    return Report(tuple(findings), checked, aliases)
