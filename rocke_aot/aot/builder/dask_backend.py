"""Scale-out: run the compiles on a Dask cluster; the driver still writes the cache.

    driver: make_plan ──> client.submit(remote_build, family, spec, target ID, lane, identity,
                                        recipe digest, compile options)
    worker: its own recipe digest (aot/recipe.py) must equal the planned one (else WorkerRefused:
            another checkout of rocke-aot would lower or compile differently under the planned key)
        ──> detect its toolchains once ──> the one for that lane whose identity equals the
            planned one and whose compile options for the target equal the planned ones (else
            a named failure: a different compiler would make different bytes under the planned
            key) ──> build_one ──> BuildOutput back to the driver
    driver: store.put / put_failure (single writer)

Workers need only the project installed (and the lane toolchains for the lanes they build).
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from rocke_aot.aot.recipe import family_digest
from rocke_aot.cache.keys import canonical_json, thaw
from rocke_aot.errors import ToolchainError, ToolchainRefused
from rocke_aot.lanes import Lane, get_lane
from rocke_aot.targets import Target


class WorkerRefused(ToolchainRefused):
    """A Dask worker cannot build a job as planned (other code, toolchain or options). A host
    problem, not a property of the key: the driver does not cache it as a build failure."""


def connect(address: str):
    from distributed import Client

    try:
        return Client(address, timeout="20s")
    except OSError as e:
        raise ToolchainError(f"cannot reach Dask scheduler {address}: {e}") from e


@functools.cache
def _worker_toolchains():
    from rocke_aot.aot.toolchains import detect_all

    return detect_all()


def _toolchain_for(lane: Lane, identity: Mapping[str, str], target: Target):
    from rocke_aot.aot.toolchains import toolchains_for_lane

    for tc in toolchains_for_lane(lane, _worker_toolchains(), consumes=None):
        if tc.identity(target) == dict(identity):
            return tc
    raise WorkerRefused(
        f"Dask worker {platform.node()} has no {lane} toolchain with the planned identity {dict(identity)}"
    )


def check_recipe(planned: str, family: str) -> None:
    """Refuse a job planned under another recipe digest than this worker's code has (the
    family's: a plugin family's covers the plugin's code too, aot/recipe.py family_digest)."""
    mine = family_digest(family)
    if planned != mine:
        raise WorkerRefused(
            f"Dask worker {platform.node()} runs rocke-aot code with recipe digest {mine[:16]}..., but the job "
            f"was planned under {str(planned)[:16]}...: its lowering/compile code differs from the driver's, "
            f"so it would store other bytes under the planned key; install the driver's rocke-aot on the worker")


def remote_build(family: str, spec: Mapping[str, Any], target_id: str, lane: str,
                 identity: Mapping[str, str], recipe: str, options: Mapping[str, Any], timeout: float):
    """Runs on a Dask worker: its arguments arrive as strings, parsed here once."""
    from rocke_aot.aot.builder.run import build_one

    check_recipe(recipe, family)
    target, lane_obj = Target.parse(target_id), get_lane(lane)
    tc = _toolchain_for(lane_obj, identity, target)
    if canonical_json(tc.compile_options(target)) != canonical_json(thaw(options)):
        raise WorkerRefused(f"Dask worker {platform.node()}: the {lane} toolchain compiles {target.id} with "
                             f"options {tc.compile_options(target)}, the job was planned with {dict(options)}")
    return build_one(family, spec, target, lane_obj, tc, timeout=timeout)


def dask_submitter(client, *, timeout: float):
    def submit(job, kernel=None) -> Future:  # the worker lowers again (a kernel is not shipped)
        out: Future = Future()
        proto = job.template.proto
        dfut = client.submit(remote_build, job.family, dict(job.spec), job.target.id, job.lane.name,
                             thaw(proto.toolchain), proto.recipe_digest, thaw(proto.options), timeout,
                             pure=False, key=f"rocke-build-{job.key}")

        def done(f) -> None:
            try:
                out.set_result(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised in the driver by fut.result()
                out.set_exception(e)

        dfut.add_done_callback(done)
        return out

    return submit
