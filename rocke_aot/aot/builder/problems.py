"""`build --problems FILE`: build the specs a workload's problems need, the layers the default
lists lack included.

    FILE (JSON)  {"gemm": [{"m": 4096, "n": 4096, "k": 4096}, ...], "conv_direct_fwd": [...]}
                 (the bench/problems/ format; bench/problems/models/: ResNet-50, ViT-B/16,
                 written by bench/model_problems.py from a PyTorch model's layers)
        │ load_problems: families checked against the variant tables, each problem parsed
        │                (problem_from_dict: unknown or missing fields are a SpecError)
        ▼
    Workload(problems, min_efficiency).specs(family, target, lane)   for make_plan
        variants.table.workload_specs: the default grid, then each problem's baked set the
            default list lacks (a conv layer's dtype, C, K, filter, stride, padding, dilation;
            a patch layer's dtype, C, P) crossed with the family's knob grid, every point
            admitted or refused by the table's own rules  ──> one LayerGrid per baked set
        keeps the specs that accept at least one of the family's problems with efficiency
            >= min_efficiency on the target: the same acceptance and floor rules as selection
            (variants/selection.py specs_serving); a problem that no spec serves at the floor
            keeps its best specs (serving's second value counts those); a family without problems builds nothing
        ──> (specs, [LayerPlan(grid, serving)])   the plan's layers: the summary's "layers"

A layer already in the default list plans the default grid's own specs, so the same keys:
built by the main job, it builds nothing new. Keys stay the IR the compiler consumed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocke_aot.errors import SpecError
from rocke_aot.variants import table
from rocke_aot.variants.efficiency import problem_from_dict
from rocke_aot.variants.selection import serving, specs_serving


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


@dataclass(frozen=True)
class LayerPlan:
    """One baked set a workload needs on one (arch, lane): its grid and how much of it serves."""

    grid: table.LayerGrid
    problems: int  # the workload's problems that need this baked set
    serving: int  # admitted specs that serve one of them (at or above the floor, else its best)
    below_floor: int = 0  # of those problems, how many no spec serves at the floor (their best specs built)

    def as_dict(self) -> dict[str, Any]:
        return {**self.grid.as_dict(), "problems": self.problems, "serving": self.serving,
                "below_floor": self.below_floor}


class Workload:
    """The problems of a ``--problems`` file and the floor; ``specs`` is make_plan's spec source."""

    def __init__(self, problems: Mapping[str, list[Any]] | str | Path, min_efficiency: float = 0.0):
        if isinstance(min_efficiency, bool) or not isinstance(min_efficiency, (int, float)) \
                or not 0.0 <= min_efficiency <= 1.0:
            raise SpecError(f"min_efficiency must be a number within 0..1, got {min_efficiency!r}")
        self.by_family = load_problems(problems)
        self.min_efficiency = float(min_efficiency)

    def specs(self, family: str, target: Any, lane: Any) -> tuple[list, list[LayerPlan]]:
        """The specs to plan for (family, target, lane), and one LayerPlan per baked set needed."""
        probs = self.by_family.get(family)
        if not probs:
            return [], []
        candidates, grids = table.workload_specs(family, target, lane, probs)
        wanted = specs_serving(family, candidates, probs, target, min_efficiency=self.min_efficiency)
        layers = []
        for grid in grids:
            mine = [p for p in probs if table.problem_baked(family, p) == dict(grid.baked)]
            kept, below = serving(family, grid.specs, mine, target, min_efficiency=self.min_efficiency)
            layers.append(LayerPlan(grid, len(mine), len(kept), below))
        return wanted, layers
