"""Writing the IR goldens: `python -m devtools.goldens --out aot/goldens` (docs/goldens.md).

    git_dirty(root)            refuse unless the code being lowered is committed (the hashes
                               would describe uncommitted code); OUT itself does not count
    select_cases + evaluate    the product's own rule and lowering (rocke_aot.aot.golden), so
                               what is written is exactly what `rocke-aot golden --check` compares
    build(cases, results, previous)  the golden document: a lane whose profile an earlier lane
                               has and whose outcomes equal that lane's is written as an alias;
                               a --lane/--family write keeps the rest of OUT's previous file
    write(out, ...)            OUT/ir-goldens.json + OUT/ir-goldens.ir.zst (zstd JSON {sha256: IR}
                               of every recorded hash) -> changes(previous, new): one line per
                               changed lane and case, for the reviewer

The product never writes these files: it reads them as package data (aot/goldens/).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import zstandard

import rocke_aot
from rocke_aot import lanes as lane_registry
from rocke_aot.aot import golden
from rocke_aot.aot.golden import GOLDEN_NAME, IR_STORE_NAME, Case, GoldenError, Outcome
from rocke_aot.errors import LaneError, RockeError, SpecError
from rocke_aot.variants import table
from rocke_aot.variants.families import get_family

# The checkout whose code is lowered: rocke_aot/aot links to ../aot, so the resolved package
# directory's parent is the repository root.
SOURCE_ROOT = Path(rocke_aot.__file__).resolve().parent.parent


def git_dirty(root: Path | None = None, exclude: Path | None = None) -> list[str]:
    """Paths git reports as changed or untracked under ``root``, outside ``exclude`` (the
    output directory: rewriting the goldens is the point)."""
    root = Path(root or SOURCE_ROOT)
    try:
        proc = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GoldenError(f"cannot run git status in {root}: {e}") from None
    if proc.returncode != 0:
        raise GoldenError(f"git status failed in {root}: {proc.stderr.strip()}")
    mine = None
    if exclude is not None:
        try:
            mine = Path(exclude).resolve().relative_to(root.resolve()).as_posix().rstrip("/") + "/"
        except ValueError:
            mine = None  # written outside the checkout: every change counts
    return [ln[3:] for ln in proc.stdout.splitlines()
            if ln[3:] and not (mine and (ln[3:] + "/").startswith(mine))]


def _full(entry: Mapping[str, Any]) -> dict[str, Any]:
    return dict(entry.get("results", {})) | dict(entry.get("expected_failures", {}))


def _resolved(doc: Mapping[str, Any], lane: str) -> dict[str, Any]:
    entry = doc["lanes"][lane]
    if "alias_of" not in entry:
        return _full(entry)
    return golden.for_lane(_full(doc["lanes"][entry["alias_of"]]), lane_registry.get_lane(entry["alias_of"]),
                           lane_registry.get_lane(lane))


def build(cases: Sequence[Case], results: Mapping[str, Mapping[str, Outcome]],
          previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The golden document for ``results`` (lane -> case -> Outcome).

    A lane whose profile an earlier lane already has, and whose outcomes equal that lane's,
    is written as an alias of it; any other lane gets its own entries. Lanes and cases not in
    ``results`` are kept from ``previous`` (a partial write), minus stale lanes.
    """
    registered = {lane.name: lane for lane in table.registered_lanes()}
    prev_lanes = dict((previous or {}).get("lanes", {}))
    doc_cases = {cid: c for cid, c in (previous or {}).get("cases", {}).items()}
    doc_cases.update({c.id: c.as_dict() for c in cases})
    out_lanes: dict[str, Any] = {}
    canonical: dict[str, str] = {}  # profile -> the first lane written in full
    for name, lane in registered.items():
        if name in results:
            merged = {}
            if name in prev_lanes:
                merged = golden.lane_entries({"lanes": prev_lanes}, lane)[0]
                merged = {cid: o for cid, o in merged.items() if cid.split("/", 1)[0]
                          not in {c.family for c in cases}}
            merged.update({cid: o.as_dict() for cid, o in results[name].items()})
            target = canonical.get(lane.profile_name)
            if target is not None and golden.for_lane(_full(out_lanes[target]), registered[target], lane) == merged:
                out_lanes[name] = {"profile": lane.profile_name, "alias_of": target}
                continue
            out_lanes[name] = {
                "profile": lane.profile_name,
                "results": {cid: o for cid, o in sorted(merged.items()) if "sha256" in o},
                "expected_failures": {cid: o for cid, o in sorted(merged.items()) if "sha256" not in o},
            }
            canonical.setdefault(lane.profile_name, name)
        elif name in prev_lanes:
            out_lanes[name] = prev_lanes[name]
            if "alias_of" not in prev_lanes[name]:
                canonical.setdefault(lane.profile_name, name)
    for name, entry in out_lanes.items():
        full = _resolved({"lanes": out_lanes}, name)
        entry["summary"] = golden.summarize({cid: Outcome.from_dict(o) for cid, o in full.items()})
    live = {cid for e in out_lanes.values() for cid in _full(e)} | {
        cid for e in out_lanes.values() if "alias_of" in e for cid in _full(out_lanes[e["alias_of"]])}
    return {
        "schema": golden.SCHEMA,
        "rule": golden.RULE,
        "ir_store": IR_STORE_NAME,
        "cases": {cid: c for cid, c in sorted(doc_cases.items()) if cid in live},
        "lanes": out_lanes,
        "summary": {"lanes": len(out_lanes), "cases": len(live),
                    "aliases": {n: e["alias_of"] for n, e in out_lanes.items() if "alias_of" in e},
                    "ok_cases": {n: e["summary"]["ok_cases"] for n, e in out_lanes.items()},
                    "expected_failures": {n: e["summary"]["expected_failures"] for n, e in out_lanes.items()}},
    }


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """What a write changed, one line per lane and case (for the reviewer)."""
    if not old:
        return [f"new golden file: {new['summary']}"]
    lines = []
    for lane in sorted(set(old.get("lanes", {})) | set(new["lanes"])):
        if lane not in new["lanes"]:
            lines.append(f"lane {lane}: removed (stale)")
            continue
        if lane not in old.get("lanes", {}):
            lines.append(f"lane {lane}: added")
            continue
        a = _resolved(old, lane)
        b = _resolved(new, lane)
        for cid in sorted(set(a) | set(b)):
            if a.get(cid) == b.get(cid):
                continue
            if cid not in b:
                lines.append(f"lane {lane} {cid}: removed")
            elif cid not in a:
                lines.append(f"lane {lane} {cid}: added {golden.describe(b[cid])}")
            else:
                lines.append(f"lane {lane} {cid}: {golden.describe(a[cid])} -> {golden.describe(b[cid])}")
        ea, eb = old["lanes"][lane].get("alias_of"), new["lanes"][lane].get("alias_of")
        if ea != eb:
            lines.append(f"lane {lane}: alias {ea or 'none'} -> {eb or 'none'}")
    return lines


def dump_ir_store(store: Mapping[str, str], path: Path) -> None:
    raw = json.dumps(dict(sorted(store.items())), indent=0, sort_keys=True).encode()
    params = zstandard.ZstdCompressionParameters.from_level(19, enable_ldm=True, window_log=27)
    Path(path).write_bytes(zstandard.ZstdCompressor(compression_params=params).compress(raw))


def write(out: Path, *, lanes: Sequence[str] | None = None, families: Sequence[str] | None = None,
          allow_dirty: bool = False, root: Path | None = None, jobs: int = 1) -> list[str]:
    """Lower, then write OUT/ir-goldens.json and OUT/ir-goldens.ir.zst; returns the change lines.
    ``lanes`` / ``families`` rewrite only those (the rest of OUT's previous file is kept)."""
    out = Path(out)
    path, store_path = out / GOLDEN_NAME, out / IR_STORE_NAME
    if not allow_dirty:
        dirty = git_dirty(root, exclude=out)
        if dirty:
            raise GoldenError("refusing to write goldens on a dirty tree (the hashes would describe "
                              "uncommitted code): " + ", ".join(dirty[:8])
                              + (" ..." if len(dirty) > 8 else "") + "; commit first or pass --allow-dirty")
    previous = golden.load(path) if path.exists() else None
    lane_objs = [lane_registry.get_lane(x) for x in lanes] if lanes else list(table.registered_lanes())
    cases = golden.select_cases(families)
    results = golden.evaluate(cases, lane_objs, jobs=jobs)
    doc = build(cases, results, previous if (lanes or families) else None)
    store = golden.load_ir_store(store_path) if (lanes or families) else {}
    store.update({o.sha256: o.ir for r in results.values() for o in r.values() if o.ok and o.ir is not None})
    live = {o["sha256"] for e in doc["lanes"].values() for o in e.get("results", {}).values()}
    store = {sha: ir for sha, ir in store.items() if sha in live}
    missing = live - set(store)
    if missing:
        raise GoldenError(f"{len(missing)} recorded hashes have no IR in the store; rewrite without filters")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    dump_ir_store(store, store_path)
    return changes(previous, doc)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m devtools.goldens", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path,
                    help="the directory to write ir-goldens.json and ir-goldens.ir.zst into (the product's: aot/goldens)")
    ap.add_argument("--lane", action="append", default=[], help="only this lane (repeatable)")
    ap.add_argument("--family", action="append", default=[], help="only this family (repeatable)")
    ap.add_argument("--allow-dirty", action="store_true", help="write even when the git tree has uncommitted changes")
    ap.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="processes that lower in parallel")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    try:
        names = [lane_registry.get_lane(x, source="--lane").name for x in a.lane] or None
        for f in a.family:
            get_family(f)  # an unknown family is a SpecError
        lines = write(a.out, lanes=names, families=a.family or None, allow_dirty=a.allow_dirty, jobs=max(1, a.jobs))
    except (LaneError, SpecError) as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    except RockeError as e:
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps({"written": [str(a.out / GOLDEN_NAME), str(a.out / IR_STORE_NAME)], "changes": lines},
                         indent=2))
    else:
        print("\n".join(lines) if lines else "no change")
        print(f"wrote {a.out / GOLDEN_NAME} and {a.out / IR_STORE_NAME}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
