"""Measured beats modeled: which recorded kernel times apply to a problem (pure rules).

    Measurement(key, generation, arch, device, family, problem, median_ms, repeats, ...)
        (rocke_aot/measurement.py, a vocabulary value: the cache stores it, this ranks by it)
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

from collections.abc import Iterable, Mapping
from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.measurement import Measurement, canonical, shape_class_of
from rocke_aot.targets import Target
from rocke_aot.variants.families import problem_from_dict

__all__ = ["Measurement", "applicable", "canonical", "problem_fields", "shape_class_of"]


def problem_fields(problem: Any) -> dict[str, Any]:
    """A problem value's fields (dataclass) or a mapping as it is."""
    if isinstance(problem, Mapping):
        return dict(problem)
    return {k: getattr(problem, k) for k in problem.__dataclass_fields__}


def _normal(family: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The problem's fields with the family's defaults filled in (a report may omit
    ``out_dtype: null``), so equal problems compare equal."""
    return problem_fields(problem_from_dict(family, dict(fields)))


def _better(a: Measurement, b: Measurement) -> bool:
    return (-a.repeats, -a.recorded_at, a.median_ms) < (-b.repeats, -b.recorded_at, b.median_ms)


def applicable(measurements: Iterable[Measurement], family: str, problem: Any, device: Target,
               candidates: Iterable[Any], *, shape_class: bool = False) -> dict[str, Measurement]:
    """{candidate key: the measurement selection ranks it by} (module doc, rules 1-5).
    ``candidates``: objects with ``key`` and ``generation`` (rocke_aot.candidates.Candidate)."""
    processor = device.processor
    gen = {c.key: c.generation for c in candidates}
    want = _normal(family, problem_fields(problem))
    exact_text, cls = canonical(want), shape_class_of(want)
    by_problem: dict[str, dict[str, Measurement]] = {}
    for m in measurements:
        if m.family != family or gen.get(m.key) != m.generation or Target.parse(m.arch).processor != processor:  # a record's arch
            continue  # rules 1-2 (and a key of another family is never a candidate here)
        try:
            fields = _normal(family, m.problem)
        except SpecError:
            continue  # a recorded problem this family no longer accepts applies to nothing
        text = canonical(fields)
        if text != exact_text and (not shape_class or shape_class_of(fields) != cls):
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
