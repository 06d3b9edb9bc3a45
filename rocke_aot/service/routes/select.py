"""POST /v1/select: the stored candidates for a problem, best first with the basis of each
rank, and the rejected ones with reasons (the shared select(), service/selection.py)."""

from __future__ import annotations

import functools

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from rocke_aot.service import access, errors, fields
from rocke_aot.service.schemas import (
    MAX_REJECTED,
    NoCandidateAnswer,
    RankedKernel,
    Rejection,
    SelectRequest,
    SelectResponse,
)
from rocke_aot.service.state import StoreDep, service
from rocke_aot.service.views import prefix

router = APIRouter(tags=["select"])


@router.post("/v1/select", response_model=SelectResponse, responses=errors.responses(413, 422, 500),
             summary="Stored candidates for a problem, best first with the basis of each rank (measured, fitted, "
                     "hardware or efficiency), and the rejected ones with reasons")
async def select(request: Request, store: StoreDep, req: SelectRequest) -> Response:
    target = fields.target(req.arch)
    fams = fields.families(req.family)  # "gemm" or, across families, "gemm,triton_matmul"
    family = ",".join(fams)
    lanes = [fields.lane(l, f"lanes.{i}") for i, l in enumerate(req.lanes)] if req.lanes else None
    problem = fields.problem(fams[0], req.problem)
    version = fields.triton_version(fams, req.triton_version)
    # The rejected entries are listed only when asked to explain (rejected_count always counts
    # them): they were ~90% of a default answer's bytes and of its serialization.
    ranked = functools.partial(
        access.select, store, target, family, problem, lanes=lanes, min_efficiency=req.min_efficiency,
        limit=req.limit, explain=req.explain, max_rejected=MAX_REJECTED if req.explain else 0, model=req.model,
        measured=req.measured, triton_version=version)
    # Off the event loop, through a few threads: a cold select (after a store change) ranks
    # every row of the family, and on the loop it stalled every other request of the worker.
    async with service(request).slots:
        got = await run_in_threadpool(ranked)
    p = prefix(request)
    doc = SelectResponse(
        accepted=[RankedKernel(**c, url=f"{p}/v1/blobs/{c['sha256']}", kernel_url=f"{p}/v1/kernels/{c['key']}")
                  for c in got["accepted"]],
        rejected=[Rejection(**r) for r in got["rejected"]], rejected_count=got["rejected_count"],
        model=got["model"], note=got["note"],
        no_candidate=None if got["no_candidate"] is None else NoCandidateAnswer(**got["no_candidate"]),
        triton_version=got["triton_version"], triton_versions=got["triton_versions"],
    )
    # Validated above against the documented models, serialized here by pydantic-core: a
    # returned Response skips FastAPI's second validation of the model (run in the threadpool
    # for a sync route) and its serialization (docs/service.md, "Selection").
    return Response(doc.model_dump_json().encode(), media_type="application/json")
