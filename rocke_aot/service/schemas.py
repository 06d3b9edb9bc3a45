"""Typed request and response bodies of the service (pydantic), and their bounds.

    SelectRequest ──POST /v1/select──> SelectResponse(accepted: [RankedKernel], rejected: [Rejection],
                                       model, note, no_candidate, triton_version, triton_versions);
                                       a Triton family's request names the host's triton_version
                                       (only that version's artifacts answer it), and every
                                       RankedKernel is labelled with its own; each RankedKernel says the basis of
                                       its rank (basis, estimate_ms, bound, fallback, measured_ms,
                                       measurement); no_candidate (NoCandidateAnswer: variants/selection.py's NoCandidate on the wire), when nothing is baked
                                       for the problem: the build command and its problems file, or why
                                       no spec can run it
    PublishRequest ──PUT /v1/kernels/{key}──> KernelMeta
    GET /v1/kernels/{key}/meta ──> KernelMeta      GET /v1/kernels ──> KernelPage(items: [KernelSummary])
    every refusal ──> ErrorBody(error, message, field?, accepted?)

Request models are strict (no coercion: a lane given as 7 is refused, not turned into "7")
and forbid unknown fields; every string and list has a bound, so a request can never make
the server hold more than the body limit.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The select answer's models live with the host's client, which parses the answer through them
# (client/answers.py); the service builds its answer through the same classes.
from rocke_aot.client.answers import (  # noqa: F401 - re-exported: the service's models
    MAX_REJECTED,
    TRITON_VERSION_PATTERN,
    Basis,
    Bound,
    MeasurementRef,
    NoCandidateAnswer,
    NoCandidateKind,
    RankedKernel,
    RankModel,
    Rejection,
    SelectResponse,
)

SHA_PATTERN = r"^[0-9a-f]{64}$"
MAX_PAGE = 1000
MAX_SELECT = 1000


class ErrorBody(BaseModel):
    """Every error answer: the error class (a rocke_aot.errors name or an HTTP one) and why."""

    error: str = Field(description="Error class, e.g. SpecError, LaneError, IntegrityError, Unauthorized")
    message: str
    field: str | None = Field(None, description="The request field at fault, when one is")
    accepted: list[str] | None = Field(None, description="Accepted values of that field, when finite")


class Resources(BaseModel):
    """Code-object resources from its metadata note (aot/codeobject.py)."""

    vgpr_count: int | None = None
    sgpr_count: int | None = None
    agpr_count: int | None = None
    vgpr_spill_count: int | None = None
    sgpr_spill_count: int | None = None
    lds_bytes: int | None = None
    private_segment_bytes: int | None = None
    wavefront_size: int | None = None
    max_flat_workgroup_size: int | None = None


class KernelSummary(BaseModel):
    key: str
    arch: str
    lane: str
    profile: str
    family: str
    spec: dict[str, Any]
    sha256: str = Field(description="sha256 of the raw code object (the blob id)")
    size: int
    url: str = Field(description="Where to fetch the code object by content")


class KernelMeta(KernelSummary):
    """The artifact record."""

    recipe_digest: str
    toolchain: dict[str, str] = Field(description="Toolchain identity (LLVM, linker, ...)")
    options: dict[str, Any] = Field(description="Compile options (part of the key)")
    ir_sha256: str | None
    stored_size: int
    built_at: str | None
    launch: dict[str, Any] | None = Field(None, description="Launch contract: kernel name, kernargs, block size, grid")
    resources: Resources
    provenance: dict[str, Any]
    metadata: dict[str, Any] = Field(description="Everything the builder recorded (kernel, code_object, format)")


class KernelPage(BaseModel):
    items: list[KernelSummary]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null at the end")


class SelectRequest(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    arch: str = Field(max_length=128, description="Full target ID, e.g. gfx942 or gfx942:sramecc+:xnack-")
    family: str = Field(max_length=256, description="Kernel family, e.g. gemm; or families of one operation and "
                                                     "problem type, comma-separated, ranked together "
                                                     "(gemm,triton_matmul: docs/selection.md)")
    problem: dict[str, Any] = Field(description="The family's problem, e.g. {\"m\": 4096, \"n\": 4096, \"k\": 4096}",
                                    max_length=64)
    lanes: list[str] | None = Field(None, max_length=16, description="Restrict to these compiler lanes")
    min_efficiency: float | None = Field(None, ge=0.0, le=1.0)
    limit: int | None = Field(None, ge=1, le=MAX_SELECT)
    explain: bool = Field(False, description="List the rejected candidates with their reasons, and also consider "
                                             "(and reject) artifacts of stale generations and incompatible targets; "
                                             "off, those are left out in SQL and 'rejected' is empty "
                                             "('rejected_count' still counts the rejections)")
    model: Literal["auto", "fitted", "hardware", "efficiency"] = Field(
        "auto", description="The order (docs/selection.md): constants fitted on the device, published hardware "
                            "facts, or tile efficiency; auto: the first the arch has")
    measured: Literal["exact", "class", "off"] = Field(
        "exact", description="Rank by recorded times first: of this problem, also of its shape class, or off")
    triton_version: str | None = Field(
        None, max_length=64, pattern=TRITON_VERSION_PATTERN,
        description="A Triton family's only: the Triton version the GPU host runs (e.g. 3.6.0); only artifacts that "
                    "version built are accepted (a host's Triton must equal the builder's). Left out, every version's "
                    "artifacts are accepted side by side, each labelled, and triton_versions lists them")


class PublishRequest(BaseModel):
    """One artifact: its key inputs, its code object (base64) and what the builder recorded."""

    model_config = ConfigDict(strict=True, extra="forbid")

    arch: str = Field(max_length=128)
    lane: str = Field(max_length=32)
    profile: str | None = Field(None, max_length=32, description="Default: the lane's emission profile")
    family: str = Field(max_length=64)
    spec: dict[str, Any] = Field(max_length=256)
    recipe_digest: str = Field(max_length=128)
    toolchain: dict[str, str] = Field(max_length=64)
    options: dict[str, Any] = Field(default_factory=dict, max_length=64, description="Compile options (keyed)")
    ir_sha256: str = Field(pattern=SHA_PATTERN)
    sha256: str = Field(pattern=SHA_PATTERN, description="sha256 of the decoded code object")
    code_object: str = Field(description="The code object, base64 (RFC 4648, no line breaks)")
    metadata: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)


class PublishResponse(BaseModel):
    created: bool = Field(description="False when the same bytes were already stored under the key")
    kernel: KernelMeta


class Health(BaseModel):
    status: str = Field(description="'ok' when the store answered a query")
    backend: str = Field(description="sqlite | postgresql")
