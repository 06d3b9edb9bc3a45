"""Measured kernel times in the store (table ``measurements``, migration 0007_measurements).

    from_report(doc, source=)  -> [(key, arch, device, family, problem, median_ms, repeats)]
        a `rocke-aot bench --run-from-cache --json` report: every result with a median time that
        did not fail (verified False or an error never becomes a measurement)
    record(store, rows)        -> RecordReport(recorded, already, unknown_keys)
        each row is stamped with its artifact's generation as the store holds it now; a key the
        store does not hold is not recorded (named in unknown_keys); the same (key, generation,
        device, problem, source) twice is recorded once
    for_family(store, family, processor) -> [Measurement]
        only rows whose (key, generation) an artifact still holds: a measurement never outlives
        the artifact or the generation it timed (variants/measured.py says which apply)
    prune(store)               -> rows deleted whose artifact or generation is gone

Pure SQL over its own table and ``artifacts`` (read); the Store is used for its engine, its
transactions and its read-only guard only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, exists, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from rocke_aot.cache import db, models
from rocke_aot.errors import ReadOnlyError, SpecError
from rocke_aot.measurement import Measurement, canonical, shape_class_of
from rocke_aot.targets import Target

measurements = models.measurements
_art = models.artifacts


@dataclass(frozen=True)
class ReportRow:
    """A measurement before the store stamps it with its artifact's generation."""

    key: str
    arch: str
    device: str
    family: str
    problem: Mapping[str, Any]
    median_ms: float
    repeats: int


@dataclass(frozen=True)
class RecordReport:
    recorded: int
    already: int  # the same row was recorded before
    unknown_keys: tuple[str, ...]  # keys this store does not hold (not recorded)

    def as_dict(self) -> dict[str, Any]:
        return {"recorded": self.recorded, "already": self.already, "unknown_keys": list(self.unknown_keys)}


def from_report(doc: Mapping[str, Any], *, repeats: int | None = None) -> list[ReportRow]:
    """The measurements of a bench report (runner/bench.py BenchReport.as_dict). ``repeats``: the
    repeat count when the report does not carry one (reports before issue 26 do not)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("problems"), list):
        raise SpecError("a bench report needs 'arch', 'device', 'family' and a 'problems' list")
    reps = doc.get("reps", repeats)
    if reps is None:
        raise SpecError("the report does not say how many repeats each median is of: pass repeats")
    arch, device, family = doc.get("arch"), doc.get("device"), doc.get("family")
    Target.parse(arch)  # a malformed target ID fails here
    if not isinstance(family, str) or not isinstance(arch, str):  # Measurement checks each row's too
        raise SpecError(f"measurement family must be a non-empty string, got {family!r}")
    out = []
    for pr in doc["problems"]:
        if not isinstance(pr, Mapping) or not isinstance(pr.get("problem"), Mapping):
            raise SpecError("every report problem needs a 'problem' mapping and 'results'")
        for r in pr.get("results") or []:
            if r.get("median_ms") is None or r.get("error") or r.get("verified") is False:
                continue
            m = Measurement(r["key"], "-", arch, str(device or ""), family, dict(pr["problem"]), r["median_ms"], reps)
            out.append(ReportRow(m.key, m.arch, m.device, m.family, m.problem, m.median_ms, m.repeats))
    return out


def _insert_ignore(conn):
    ins = (pg_insert if conn.dialect.name == "postgresql" else sqlite_insert)(measurements)
    return ins.on_conflict_do_nothing(index_elements=["key", "generation", "arch", "problem_json", "source"])


def record(store: Any, rows: Iterable[ReportRow], *, source: str, recorded_at: float | None = None) -> RecordReport:
    """Store ``rows`` (module doc). ``source``: where they came from (a report path, a host)."""
    if getattr(store, "readonly", False):
        raise ReadOnlyError("measurements cannot be recorded into a store opened read-only")
    if not isinstance(source, str):
        raise SpecError(f"source must be a string, got {source!r}")
    rows = list(rows)
    at = time.time() if recorded_at is None else float(recorded_at)
    keys = sorted({r.key for r in rows})
    recorded = already = 0
    with db.write_tx(store.engine) as conn:
        gen: dict[str, str | None] = {}
        for i in range(0, len(keys), 500):
            part = keys[i:i + 500]
            gen.update(conn.execute(select(_art.c.key, _art.c.generation).where(
                _art.c.key.in_(part), _art.c.status == "ok")).all())
        unknown = tuple(k for k in keys if not gen.get(k))
        ins = _insert_ignore(conn)
        seen = set()
        for r in rows:
            g = gen.get(r.key)
            if not g:
                continue
            ident = (r.key, g, r.arch, canonical(r.problem), source)
            # the unique row: asked first (INSERT .. ON CONFLICT's row count differs by driver)
            if ident in seen or conn.execute(select(measurements.c.id).where(
                    measurements.c.key == r.key, measurements.c.generation == g, measurements.c.arch == r.arch,
                    measurements.c.problem_json == ident[3], measurements.c.source == source)).first():
                already += 1
                continue
            seen.add(ident)
            conn.execute(ins, {
                "key": r.key, "generation": g, "arch": r.arch, "processor": Target.parse(r.arch).processor,
                "device": r.device, "family": r.family, "problem_json": ident[3],
                "shape_class": shape_class_of(r.problem), "median_ms": float(r.median_ms),
                "repeats": int(r.repeats), "recorded_at": at, "source": source})
            recorded += 1
    return RecordReport(recorded, already, unknown)


def _live():
    return exists().where(and_(_art.c.key == measurements.c.key, _art.c.generation == measurements.c.generation))


def for_family(store: Any, family: str, processor: str) -> list[Measurement]:
    """Every measurement of ``family`` on ``processor`` whose artifact and generation still exist,
    in a fixed order (id)."""
    import json

    with db.read_tx(store.engine) as conn:
        rows = conn.execute(select(measurements).where(
            measurements.c.family == family, measurements.c.processor == processor, _live())
            .order_by(measurements.c.id)).mappings().all()
    return [Measurement(r["key"], r["generation"], r["arch"], r["device"], r["family"], json.loads(r["problem_json"]),
                        r["median_ms"], r["repeats"], r["recorded_at"], r["source"]) for r in rows]


def count(store: Any) -> tuple[int, int]:
    """(rows, rows that still apply)."""
    from sqlalchemy import func

    with db.read_tx(store.engine) as conn:
        total = conn.execute(select(func.count()).select_from(measurements)).scalar_one()
        live = conn.execute(select(func.count()).select_from(measurements).where(_live())).scalar_one()
    return int(total), int(live)


def prune(store: Any) -> int:
    """Delete the rows whose artifact or generation is gone; -> how many."""
    if getattr(store, "readonly", False):
        raise ReadOnlyError("measurements cannot be pruned in a store opened read-only")
    with db.write_tx(store.engine) as conn:
        return conn.execute(delete(measurements).where(~_live())).rowcount or 0
