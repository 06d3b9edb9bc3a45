"""Measured beats modeled: which recorded kernel times apply to a problem (pure rules).

    Measurement(key, generation, arch, device, family, problem, median_ms, repeats, ...)
        one `rocke-aot bench --run-from-cache` result: the artifact (its key and the generation
        it belonged to when measured), the device (its target ID and name), the problem, the
        median time and how many repeats it is the median of
    applicable(measurements, family, problem, device, candidates, shape_class=False)
        -> {key: Measurement}: the measurements selection ranks by (variants/selection.py)

The rules, in order:

1. A measurement applies only to its own artifact as it was measured: the candidate's key and
   generation must both equal the measurement's (a rebuild under a new recipe or toolchain is
   a new generation, so its kernels are unmeasured until measured again; an artifact that is
   gone has no candidate). It never outlives either.
2. Only on the processor it was measured on (gfx942 timings never rank gfx950 kernels; target
   ID features such as xnack do not matter, the silicon is the same).
3. Exactly its problem: the family and every field of the problem equal (canonical form).
4. Only when asked (``shape_class=True``) and only when no measurement of the exact problem
   applies: a problem of the same **shape class**, i.e. every integer extent in the same
   power-of-two octave (``int.bit_length``: 2048..4095 are one class) and every other field
   (dtype, baked filter, stride, ...) equal. Times of different problems are not comparable
   with each other, so one class-mate problem is used, never a mix: the one with the most
   applicable measurements, ties broken by its canonical JSON text.
5. Several measurements of one key for the chosen problem: the one with the most repeats,
   then the most recent, then the lower median (deterministic).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from rocke_aot.errors import SpecError
from rocke_aot.targets import Target


@dataclass(frozen=True)
class Measurement:
    key: str  # the artifact measured
    generation: str  # its generation when measured
    arch: str  # the device's target ID
    device: str  # the device's name as the runtime reported it
    family: str
    problem: Mapping[str, Any]  # the problem's fields (problem_to_dict)
    median_ms: float
    repeats: int
    recorded_at: float = 0.0
    source: str = ""  # where it came from (a report file, a host)

    def __post_init__(self) -> None:
        for name in ("key", "generation", "arch", "family"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise SpecError(f"measurement {name} must be a non-empty string, got {getattr(self, name)!r}")
        if isinstance(self.median_ms, bool) or not isinstance(self.median_ms, (int, float)) \
                or not 0 < self.median_ms < float("inf"):
            raise SpecError(f"measurement median_ms must be a positive finite number, got {self.median_ms!r}")
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise SpecError(f"measurement repeats must be a positive int, got {self.repeats!r}")
        if not isinstance(self.problem, Mapping):
            raise SpecError("measurement problem must be a mapping of problem fields")

    @property
    def problem_text(self) -> str:
        return canonical(self.problem)

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "generation": self.generation, "arch": self.arch, "device": self.device,
                "family": self.family, "problem": dict(self.problem), "median_ms": self.median_ms,
                "repeats": self.repeats, "recorded_at": self.recorded_at, "source": self.source}


def canonical(problem: Mapping[str, Any]) -> str:
    return json.dumps(dict(problem), sort_keys=True, separators=(",", ":"))


def problem_fields(problem: Any) -> dict[str, Any]:
    """A problem value's fields (dataclass) or a mapping as it is."""
    if isinstance(problem, Mapping):
        return dict(problem)
    return {k: getattr(problem, k) for k in problem.__dataclass_fields__}


def shape_class_of(problem: Mapping[str, Any]) -> str:
    """The shape class (rule 4): integer extents by power-of-two octave, the rest as they are."""
    out = {k: (["octave", v.bit_length()] if isinstance(v, int) and not isinstance(v, bool) else v)
           for k, v in problem.items()}
    return canonical(out)


def _better(a: Measurement, b: Measurement) -> bool:
    return (-a.repeats, -a.recorded_at, a.median_ms) < (-b.repeats, -b.recorded_at, b.median_ms)


def applicable(measurements: Iterable[Measurement], family: str, problem: Any, device: object,
               candidates: Iterable[Any], *, shape_class: bool = False) -> dict[str, Measurement]:
    """{candidate key: the measurement selection ranks it by} (module doc, rules 1-5).
    ``candidates``: objects with ``key`` and ``generation`` (rocke_aot.candidates.Candidate)."""
    dev = Target.parse(device).processor
    gen = {c.key: c.generation for c in candidates}
    want = problem_fields(problem)
    exact_text, cls = canonical(want), shape_class_of(want)
    by_problem: dict[str, dict[str, Measurement]] = {}
    for m in measurements:
        if m.family != family or gen.get(m.key) != m.generation or Target.parse(m.arch).processor != dev:
            continue  # rules 1-2 (and a key of another family is never a candidate here)
        text = m.problem_text
        if text != exact_text and (not shape_class or shape_class_of(dict(m.problem)) != cls):
            continue  # rules 3-4
        got = by_problem.setdefault(text, {})
        cur = got.get(m.key)
        if cur is None or _better(m, cur):
            got[m.key] = m
    if exact_text in by_problem:
        return by_problem[exact_text]
    if not by_problem:
        return {}
    best = min(by_problem, key=lambda t: (-len(by_problem[t]), t))
    return by_problem[best]
