"""Scale-out: run the compiles on a Dask cluster; the driver still writes the cache.

    driver: make_plan ──> client.submit(remote_build, family, spec, target ID, lane, identity)
    worker: detect its toolchains once ──> the one for that lane whose identity equals the
            planned one (else a named failure: a different compiler would make different
            bytes under the planned key) ──> build_one ──> BuildOutput back to the driver
    driver: store.put / put_failure (single writer)

Workers need only the project installed (and the lane toolchains for the lanes they build).
"""

from __future__ import annotations

import functools
import platform
from concurrent.futures import Future
from typing import Any, Mapping

from rocke_aot.errors import ToolchainError


def connect(address: str):
    from distributed import Client

    try:
        return Client(address, timeout="20s")
    except OSError as e:
        raise ToolchainError(f"cannot reach Dask scheduler {address}: {e}") from e


@functools.lru_cache(maxsize=None)
def _worker_toolchains():
    from rocke_aot.aot.toolchains import detect_all

    return detect_all()


def _toolchain_for(lane: str, identity: Mapping[str, str]):
    from rocke_aot.aot.toolchains import toolchains_for_lane

    for tc in toolchains_for_lane(lane, _worker_toolchains()):
        if tc.identity() == dict(identity):
            return tc
    raise ToolchainError(
        f"Dask worker {platform.node()} has no {lane} toolchain with the planned identity {dict(identity)}"
    )


def remote_build(family: str, spec: Mapping[str, Any], target_id: str, lane: str,
                 identity: Mapping[str, str], timeout: float):
    """Runs on a Dask worker."""
    from rocke_aot.aot.builder.run import build_one
    from rocke_aot.lanes import get_lane
    from rocke_aot.targets import Target

    return build_one(family, spec, Target.parse(target_id), get_lane(lane), _toolchain_for(lane, identity),
                     timeout=timeout)


def dask_submitter(client, *, timeout: float):
    def submit(job) -> Future:
        out: Future = Future()
        dfut = client.submit(remote_build, job.family, dict(job.spec), job.target.id, job.lane.name,
                             dict(job.template.proto.toolchain), timeout, pure=False, key=f"rocke-build-{job.key}")

        def done(f) -> None:
            try:
                out.set_result(f.result())
            except BaseException as e:  # noqa: BLE001 - re-raised in the driver by fut.result()
                out.set_exception(e)

        dfut.add_done_callback(done)
        return out

    return submit
