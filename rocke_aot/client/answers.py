"""The select answer on the wire (POST /v1/select), as pydantic models: what the service builds its
answer through and what a GPU host's client parses it with (client/service.py), strictly.

    SelectResponse(accepted: [RankedKernel], rejected: [Rejection], rejected_count, model, note,
                   no_candidate: NoCandidateAnswer | None, triton_version, triton_versions)

Closed (unknown fields refused) and checked for consistency (the basis of each rank, a
no_candidate only beside an empty answer, one Triton version per answer). They live here, below
the service, so the host's client needs only pydantic (a base dependency), not FastAPI; the
service's other models are in service/schemas.py, which re-exports these.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

TRITON_VERSION_PATTERN = r"^[0-9][0-9A-Za-z.+_-]{0,63}$"  # rocke_aot/candidates.py TRITON_VERSION_RE
MAX_REJECTED = 1000  # an answer lists at most this many rejections (explain)


# The basis of a rank (variants/selection.py Choice.basis) and what bounds an estimate
# (variants/hw_model.py Estimate.bound): the closed vocabularies of the select answer.
Basis = Literal["measured", "fitted", "hardware", "efficiency"]
Bound = Literal["compute", "issue", "lds", "memory", "latency"]
RankModel = Literal["fitted", "hardware", "efficiency"]


class MeasurementRef(BaseModel):
    """The recorded time a candidate is ranked by (cache/measurements.py, variants/measured.py)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    generation: str
    arch: str = Field(description="The device's target ID it was measured on")
    device: str = Field(description="The device's name")
    family: str
    problem: dict[str, Any] = Field(description="The problem measured (the asked one, or a shape-class mate)")
    median_ms: float
    repeats: int
    recorded_at: float = Field(description="Unix time of the record")
    source: str = Field(description="Where it came from (a report file, a host)")


class RankedKernel(BaseModel):
    """One accepted row of a select answer, on the wire: a ranked candidate
    (rocke_aot.candidates.Candidate) with its efficiency, the basis of its rank and fetch URLs.
    Closed (unknown fields refused) and checked for consistency: the server builds it through
    this model and the host client (client/service.py) parses the answer through it."""

    model_config = ConfigDict(extra="forbid")

    key: str
    sha256: str
    family: str = Field(max_length=64, description="The family of this candidate (a select across families "
                                                   "ranks several)")
    arch: str
    lane: str
    spec: dict[str, Any]
    efficiency: dict[str, Any] = Field(description="Tile-efficiency breakdown; 'total' is the product")
    basis: Basis = Field(description="What ranks it: 'measured' (a recorded time), else the model that placed it: "
                                     "'fitted' (constants fitted on the device), 'hardware' (published hardware "
                                     "facts), 'efficiency' (tile efficiency, reuse, occupancy)")
    estimate_ms: float | None = Field(description="The time model's estimate in milliseconds (also under 'measured'); "
                                                  "null where the model gave none ('fallback' says why)")
    bound: Bound | None = Field(description="The hardware-fact model's bound for the estimate; null otherwise")
    fallback: str | None = Field(description="Why the time model asked for gave no estimate (e.g. 'gfx1250: hardware "
                                             "facts not public: clock_mhz, cus, ...'); null where it did or the "
                                             "efficiency order was asked for")
    schedule: Literal["sass", "counts"] | None = Field(
        None, description="Hardware model: where a step's exposed global latencies and dependency chain came from: "
                          "'sass' (ptxas's schedule, read off the artifact's SASS when it was built) or 'counts' "
                          "(the family's counts); null for the other models")
    schedule_note: str | None = Field(None, description="Why 'counts' for a family that reads the schedule (none "
                                                        "recorded, unavailable at build and why); null otherwise")
    measured_ms: float | None = Field(description="The recorded median it is ranked by; null unless basis is measured")
    measurement: MeasurementRef | None = Field(description="That recorded time; null unless basis is measured")
    resources: dict[str, Any] = Field(description="Code-object resources (and occupancy where selection derives it)")
    generation: str | None = Field(None, description="The build generation the artifact belongs to")
    triton_version: str | None = Field(
        max_length=64, pattern=TRITON_VERSION_PATTERN,
        description="The Triton version that built it (its key's toolchain identity); null for every other toolchain")
    url: str = Field(description="Fetch URL of the code object (by content)")
    kernel_url: str

    @model_validator(mode="after")
    def _basis_consistent(self) -> RankedKernel:
        measured = self.basis == "measured"
        if measured != (self.measured_ms is not None) or measured != (self.measurement is not None):
            raise ValueError(f"basis {self.basis!r} with measured_ms {self.measured_ms!r}: a measured rank carries "
                             f"its measured time and measurement, a modeled one neither")
        if self.measurement is not None and (self.measurement.median_ms != self.measured_ms
                                             or self.measurement.key != self.key):
            raise ValueError("measured_ms and the measurement's key and median must be the ranked kernel's")
        if self.fallback is not None and self.estimate_ms is not None:
            raise ValueError("a fallback reason explains a missing estimate: it comes with estimate_ms null")
        if self.basis in ("fitted", "hardware") and self.estimate_ms is None:
            raise ValueError(f"basis {self.basis!r} ranks by an estimate, and estimate_ms is null")
        if self.bound is not None and self.estimate_ms is None:
            raise ValueError("a bound names what bounds an estimate: it comes with estimate_ms")
        if self.schedule is not None and self.estimate_ms is None:
            raise ValueError("a schedule names where the hardware estimate's latencies came from: it comes with "
                             "estimate_ms")
        if self.schedule_note is not None and self.schedule != "counts":
            raise ValueError("a schedule note says why the counts stand: it comes with schedule 'counts'")
        return self


# variants/selection.py NO_CANDIDATE_KINDS (tests/test_workload.py checks they are the same)
NoCandidateKind = Literal["build", "unservable"]


class NoCandidateAnswer(BaseModel):
    """Nothing accepted because no cached kernel is baked for the problem (variants/selection.py
    no_candidate): "build" gives the command that builds its specs and the problems file it reads,
    "unservable" why no spec of the family's grid runs it on the arch. Closed and consistent."""

    model_config = ConfigDict(extra="forbid")

    kind: NoCandidateKind
    message: str = Field(description="One line, e.g. \"no candidate: the cache holds no conv_direct_fwd kernel baked "
                                     "for this problem (...); build with --problems: `rocke-aot build ...`\"")
    command: str | None = Field(description="kind build: the command (it reads problems.json); null otherwise")
    problems: dict[str, list[dict[str, Any]]] | None = Field(
        description="kind build: the content of problems.json, {family: [the problem]}; null otherwise")
    baked: dict[str, Any] | None = Field(description="The baked parameters the problem needs (null: none named)")
    reasons: list[str] = Field(description="kind unservable: per lane, why no spec runs the problem")

    @model_validator(mode="after")
    def _kind_consistent(self) -> NoCandidateAnswer:
        if self.kind == "build":
            if self.command is None or not self.problems or self.reasons:
                raise ValueError("a 'build' answer carries its command and problems file, and no reasons")
            if "--problems" not in self.command:
                raise ValueError("a 'build' command builds with --problems")
        elif self.command is not None or self.problems is not None or not self.reasons:
            raise ValueError("an 'unservable' answer carries its reasons, and no command or problems file")
        return self


class Rejection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    arch: str
    lane: str
    spec: dict[str, Any]
    reason: str


class SelectResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accepted: list[RankedKernel]
    rejected: list[Rejection] = Field(description=f"Only with explain: at most {MAX_REJECTED}, in key order")
    rejected_count: int = Field(description="All rejected candidates, also those beyond the list")
    model: RankModel = Field(description="The model that ordered the answer (measured rows come first regardless)")
    note: str | None = Field(description="Why no time model was used, in full (every missing fact and why)")
    no_candidate: NoCandidateAnswer | None = Field(
        description="Only when nothing is accepted and no cached kernel is baked for the problem: what to build "
                    "(rocke-aot build --problems), or why nothing can run it; null otherwise")
    triton_version: str | None = Field(max_length=64, pattern=TRITON_VERSION_PATTERN,
                                       description="The Triton version the request named (null: none named)")
    triton_versions: list[str] = Field(
        max_length=64, description="The Triton versions whose artifacts this device could be served (compatible "
                                   "target, current generation, a lane asked for), whichever was named: what a "
                                   "request can name; empty for a family no Triton builds")

    @model_validator(mode="after")
    def _no_candidate_only_when_empty(self) -> SelectResponse:
        if self.no_candidate is not None and self.accepted:
            raise ValueError("no_candidate explains an empty answer: it comes with no accepted kernel")
        for i, c in enumerate(self.accepted):  # every row one Triton version (or none): never mixed
            if self.triton_version is not None and c.triton_version != self.triton_version:
                raise ValueError(f"accepted.{i} is Triton {c.triton_version}'s, the request named "
                                 f"{self.triton_version}")
            if c.triton_version is not None and c.triton_version not in self.triton_versions:
                raise ValueError(f"accepted.{i} is Triton {c.triton_version}'s, which triton_versions does not list")
        return self
