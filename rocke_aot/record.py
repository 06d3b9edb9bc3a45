"""The one schema of an artifact record: what every writer checks before anything is stored.

    check_metadata(md)      the builder's metadata: a JSON object of bounded size and depth;
        "code_object"        resources (CodeObjectInfo.as_dict()): every count an int in range;
                             its "schedule" (sm_90 cubins: ptxas's schedule read off the SASS,
                             aot/sass.py) checked by check_schedule: a known version, a known
                             source, every figure a finite number in range, no other field
        "launch"             the launch contract (rocke_aot.launch.LaunchContract.from_dict)
        "kernel"             the lowering's record (any JSON value: nothing selects or
                             launches from it)
        "format"             "hsaco" | "cubin"
        "code_object" and "launch" must agree: kernel name, kernarg size
    check_provenance(p)     an object of bounded size and depth
    check_json(value, what) any record field: JSON types only, bounded size and depth

Enforced on Store.put (cache), on publish (service: resources replaced by the server's
own reading of the code object first), on bundle import (cache/bundle.py) and by the HTTP
client on a server's record. A violation is a RecordError (a SpecError: HTTP 422, CLI exit
2) naming the field, so a malformed record is refused before it is written, instead of
being stored and then failing every select of its (arch, family).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rocke_aot.boundedjson import is_int
from rocke_aot.errors import SpecError

MAX_RECORD_BYTES = 1 << 20  # canonical JSON of one metadata or provenance object
MAX_DEPTH = 32  # nesting of objects and arrays (a launch contract needs 4)
FORMATS = ("hsaco", "cubin")
# Resource fields of metadata["code_object"] and their largest accepted value: above any
# arch's limit (rocke_aot/arch.py) with room, so a wrong number is refused, not ranked.
RESOURCE_MAX: Mapping[str, int] = {
    "vgpr_count": 1 << 12, "sgpr_count": 1 << 12, "agpr_count": 1 << 12,
    "vgpr_spill_count": 1 << 20, "sgpr_spill_count": 1 << 20,
    "lds_bytes": 1 << 20, "private_segment_bytes": 1 << 24,
    "wavefront_size": 64, "max_flat_workgroup_size": 1 << 12, "barrier_count": 64,
    "kernarg_size": 1 << 16, "kernarg_align": 1 << 12, "code_object_version": 1 << 8, "e_flags": (1 << 32) - 1,
}


# metadata["code_object"]["schedule"] (aot/sass.py writes it, rocke_aot/candidates.py Schedule
# reads it). A reader refuses a version it does not know: the figures' meaning is the version's.
SCHEDULE_VERSION = 1
SCHEDULE_SOURCES = ("sass", "unavailable")
# field -> (lowest, highest) accepted; None allowed where the walk found no such loop
_SCHEDULE_FIGURES: Mapping[str, tuple[float, float, bool]] = {
    "exposed_latencies": (0.0, 1e4, False),  # global latencies a step's staging exposes
    "chain_ratio": (1.0, 1e4, True),  # the compute loop's chain cycles / its instructions (>= 1 by the walk)
    "global_latency": (1.0, 1e5, False),  # the walk's cycles until a global load's result is ready
    "lds_latency": (1.0, 1e5, False),  # ... and an LDS load's
}
_SCHEDULE_TEXT = {"tool": 200, "reason": 2000}


class RecordError(SpecError):
    """A malformed artifact record (metadata, launch contract, resources, provenance)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


def check_json(value: Any, what: str, *, max_bytes: int = MAX_RECORD_BYTES, max_depth: int = MAX_DEPTH) -> None:
    """``value`` is made of JSON types only (str keys), at most ``max_depth`` deep and about
    ``max_bytes`` of JSON text (counted while walking, so a huge value is refused early)."""
    budget = [max_bytes]
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > max_depth:
            raise RecordError(what, f"nested deeper than {max_depth}")
        if isinstance(v, Mapping):
            budget[0] -= 2
            for k, x in v.items():
                if not isinstance(k, str):
                    raise RecordError(what, f"object key {k!r} is not a string")
                budget[0] -= len(k) + 4
                stack.append((x, depth + 1))
        elif isinstance(v, (list, tuple)):
            budget[0] -= 2
            stack.extend((x, depth + 1) for x in v)
        elif isinstance(v, str):
            budget[0] -= len(v) + 3
        elif isinstance(v, bool) or v is None:
            budget[0] -= 5
        elif isinstance(v, int):
            if v.bit_length() > 64:
                raise RecordError(what, f"integer of {v.bit_length()} bits")
            budget[0] -= 21
        elif isinstance(v, float):
            if not math.isfinite(v):
                raise RecordError(what, f"non-finite number {v!r}")
            budget[0] -= 24
        else:
            raise RecordError(what, f"{type(v).__name__} is not a JSON value")
        if budget[0] < 0:
            raise RecordError(what, f"over {max_bytes} bytes")


def _object(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise RecordError(what, f"must be an object, got {type(value).__name__}")
    return value


def check_resources(co: Any, what: str = "metadata.code_object") -> Mapping[str, Any]:
    co = _object(co, what)
    for name, hi in RESOURCE_MAX.items():
        v = co.get(name)
        if v is None:
            continue
        if not is_int(v) or not 0 <= v <= hi:
            raise RecordError(f"{what}.{name}", f"must be an int within 0..{hi}, got {v!r}")
    for name in ("kernel", "format", "target"):
        if co.get(name) is not None and not isinstance(co[name], str):
            raise RecordError(f"{what}.{name}", f"must be a string, got {co[name]!r}")
    if co.get("schedule") is not None:
        check_schedule(co["schedule"], f"{what}.schedule")
    return co


def check_schedule(sched: Any, what: str = "metadata.code_object.schedule") -> Mapping[str, Any]:
    """A recorded schedule (module doc): {"version": 1, "source": "sass", "tool", and every
    figure of _SCHEDULE_FIGURES} or {"version": 1, "source": "unavailable", "reason"}; anything
    else is a RecordError naming the field (a wrong figure would misrank silently)."""
    sched = _object(sched, what)
    if sched.get("version") != SCHEDULE_VERSION or isinstance(sched.get("version"), bool):
        raise RecordError(f"{what}.version", f"must be {SCHEDULE_VERSION}, got {sched.get('version')!r}")
    source = sched.get("source")
    if source not in SCHEDULE_SOURCES:
        raise RecordError(f"{what}.source", f"must be one of {SCHEDULE_SOURCES}, got {source!r}")
    fields = {"version", "source", *(("tool", *_SCHEDULE_FIGURES) if source == "sass" else ("reason",))}
    extra = sorted(set(sched) - fields)
    if extra:
        raise RecordError(f"{what}.{extra[0]}", f"is not a field of a {source!r} schedule")
    for name in fields & set(_SCHEDULE_TEXT):
        v = sched.get(name)
        if not isinstance(v, str) or not v.strip() or len(v) > _SCHEDULE_TEXT[name]:
            raise RecordError(f"{what}.{name}", f"must be a non-empty string of at most {_SCHEDULE_TEXT[name]} "
                                                f"characters, got {v!r}")
    if source == "sass":
        for name, (lo, hi, nullable) in _SCHEDULE_FIGURES.items():
            v = sched.get(name)
            if v is None and nullable and name in sched:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise RecordError(f"{what}.{name}", f"must be a number within {lo:g}..{hi:g}"
                                                    f"{' or null' if nullable else ''}, got {v!r}")
    return sched


def check_metadata(md: Any) -> Mapping[str, Any]:
    """The metadata of an artifact (module doc); returns it unchanged or raises RecordError."""
    md = _object(md, "metadata")
    check_json(md, "metadata")
    co = check_resources(md["code_object"]) if md.get("code_object") is not None else None
    fmt = md.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise RecordError("metadata.format", f"must be one of {FORMATS}, got {fmt!r}")
    launch = md.get("launch")
    if launch is not None:
        from rocke_aot.launch import LaunchContract  # (here: a signed fetch reads no record schema)

        try:
            contract = LaunchContract.from_dict(_object(launch, "metadata.launch"))
        except RecordError:
            raise
        except SpecError as e:
            raise RecordError("metadata.launch", str(e)) from None
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as e:
            raise RecordError("metadata.launch", f"malformed launch contract ({type(e).__name__}: {e})") from None
        if co is not None:
            if co.get("kernel") is not None and co["kernel"] != contract.kernel:
                raise RecordError("metadata.launch.kernel",
                                  f"{contract.kernel!r}, but the code object's kernel is {co['kernel']!r}")
            if co.get("kernarg_size") is not None and co["kernarg_size"] != contract.kernarg_size:
                raise RecordError("metadata.launch.kernarg_size",
                                  f"{contract.kernarg_size}, but the code object declares {co['kernarg_size']}")
    return md


def check_provenance(p: Any) -> Mapping[str, Any]:
    p = _object(p, "provenance")
    check_json(p, "provenance")
    return p


__all__ = ["FORMATS", "MAX_DEPTH", "MAX_RECORD_BYTES", "RESOURCE_MAX", "SCHEDULE_SOURCES", "SCHEDULE_VERSION",
           "RecordError", "check_json", "check_metadata", "check_provenance", "check_resources", "check_schedule"]
