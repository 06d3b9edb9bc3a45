"""Measurement: one recorded kernel time (a vocabulary value the cache stores and selection reads).

    Measurement(key, generation, arch, device, family, problem, median_ms, repeats, recorded_at, source)

Which measurements apply to a problem is variants/measured.py's rule; where they are kept is
cache/measurements.py. Construction validates every field (a malformed record is a SpecError,
never a silent zero).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocke_aot.boundedjson import is_int
from rocke_aot.errors import SpecError


def canonical(problem: Mapping[str, Any]) -> str:
    """The canonical text of a problem's fields (sorted keys, no spaces): its identity."""
    return json.dumps(dict(problem), sort_keys=True, separators=(",", ":"))


def shape_class_of(problem: Mapping[str, Any]) -> str:
    """The shape class (variants/measured.py rule 4): integer extents by power-of-two octave, the rest as they are."""
    out = {k: (["octave", v.bit_length()] if isinstance(v, int) and not isinstance(v, bool) else v)
           for k, v in problem.items()}
    return canonical(out)


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
                or not math.isfinite(self.median_ms) or self.median_ms <= 0:
            raise SpecError(f"measurement median_ms must be a positive finite number, got {self.median_ms!r}")
        if not is_int(self.repeats) or self.repeats < 1:
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
