"""`build --problems FILE`: build only the specs that serve the user's problems.

    FILE (JSON)  {"gemm": [{"m": 4096, "n": 4096, "k": 4096}, ...], "conv_direct_fwd": [...]}
        │ load_problems: families checked against the variant tables, each problem parsed
        │                (problem_from_dict: unknown or missing fields are a SpecError)
        ▼
    problem_filter(problems, min_efficiency) -> spec_filter(family, target, specs) for make_plan
        keeps a spec of the table's grid when it accepts at least one of the family's problems
        with efficiency >= min_efficiency on the target: the same acceptance and floor rules as
        selection (variants/selection.py specs_serving); a family without problems builds nothing
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from rocke_aot.errors import SpecError
from rocke_aot.variants import table
from rocke_aot.variants.efficiency import problem_from_dict
from rocke_aot.variants.selection import specs_serving

SpecFilter = Callable[[str, Any, Iterable[Any]], list]


def load_problems(source: str | Path | Mapping[str, Any]) -> dict[str, list[Any]]:
    """Problems per family from a JSON file (or an already-loaded mapping)."""
    if isinstance(source, Mapping):
        data: Any = source
    else:
        try:
            data = json.loads(Path(source).read_text())
        except OSError as e:
            raise SpecError(f"--problems: cannot read {source}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise SpecError(f"--problems: {source} is not JSON ({e.msg}, line {e.lineno})") from None
    families = table.family_names()
    if not isinstance(data, Mapping) or not data:
        raise SpecError(f"--problems: expected an object {{family: [problem, ...]}} with families from "
                        f"{', '.join(families)}")
    out: dict[str, list[Any]] = {}
    for fam, items in data.items():
        if fam not in families:
            raise SpecError(f"--problems: unknown family {fam!r}; accepted: {', '.join(families)}")
        if not isinstance(items, list) or not items:
            raise SpecError(f"--problems: {fam} must map to a non-empty list of problems")
        out[fam] = [problem_from_dict(fam, p) for p in items]
    return out


def problem_filter(problems: Mapping[str, list[Any]] | str | Path, min_efficiency: float = 0.0) -> SpecFilter:
    if isinstance(min_efficiency, bool) or not isinstance(min_efficiency, (int, float)) \
            or not 0.0 <= min_efficiency <= 1.0:
        raise SpecError(f"min_efficiency must be a number within 0..1, got {min_efficiency!r}")
    by_family = load_problems(problems)

    def spec_filter(family: str, target: Any, specs: Iterable[Any]) -> list:
        probs = by_family.get(family)
        if not probs:
            return []
        return specs_serving(family, specs, probs, target, min_efficiency=min_efficiency)

    return spec_filter
