"""The builder: plan from the variant tables, compile the misses in parallel, store them.

    build(arches, families, lanes, store) = make_plan (plan.py) -> execute (run.py) -> summarize
        then complete_generations (refs.py): each (arch, lane, family) generation the build ran
        to the end for serves its specs ahead of older ones
    problems=FILE|{family: [...]}: the specs serving one of them above min_efficiency, each
        problem's own baked set (a model's layer) crossed with the knob grid (problems.py)
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rocke_aot.aot.builder.plan import Job, Plan, Refusal, Skip, choose_lanes, make_plan
from rocke_aot.aot.builder.problems import LayerPlan, Workload
from rocke_aot.aot.builder.refs import Completion, complete_generations
from rocke_aot.aot.builder.run import BuildOutput, Outcome, build_one, compile_count, execute
from rocke_aot.aot.builder.summary import BuildSummary, summarize
from rocke_aot.lanes import get_lane

__all__ = [
    "Job", "Plan", "Refusal", "Skip", "choose_lanes", "make_plan",
    "BuildOutput", "Outcome", "build_one", "compile_count", "execute",
    "BuildSummary", "summarize", "build", "Completion", "complete_generations", "LayerPlan",
    "Workload",
]


def build(*, arches, families=None, lanes=(), store, toolchains=None, jobs=None, force=False,
          dry_run=False, timeout=300.0, submit=None, where=None, on_plan: Callable[[Plan], None] | None = None,
          on_result=None, problems=None, min_efficiency: float = 0.0,
          on_refs: Callable[[list], None] | None = None) -> BuildSummary:
    from rocke_aot.aot.toolchains import detect_all

    start = time.perf_counter()
    tcs = detect_all() if toolchains is None else toolchains
    lanes = [get_lane(lane) for lane in lanes]  # the builder's Python API takes names or Lanes: parsed once, here
    workload = None if problems is None else Workload(problems, min_efficiency)
    plan = make_plan(arches=arches, families=families, lanes=lanes, toolchains=tcs, store=store, force=force,
                     where=where, workload=workload)
    if on_plan:
        on_plan(plan)
    before = compile_count()
    outcome = Outcome() if dry_run else execute(plan, store, jobs=jobs, timeout=timeout, submit=submit,
                                               on_result=on_result)
    if not dry_run:
        moves = complete_generations(plan, store)
        if on_refs:
            on_refs(moves)
    return summarize(plan, outcome, store=store, arches=arches, dry_run=dry_run,
                     compiles=compile_count() - before, seconds=time.perf_counter() - start)
