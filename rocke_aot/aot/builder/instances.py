"""rocKE instance lists (`aot_list.json`) as build input: `rocke-aot build --instances FILE`.

rocKE (rocm-libraries, rocKE-client/aot) checks instances in as a JSON array of objects of
schema ``rocke.aot.instance/v1`` with exactly these fields (its parser refuses any other):

    {"schema": "rocke.aot.instance/v1",   required, this exact string
     "name": "...",                        required, unique in the list: how the report names it
     "op": "sdpa_fwd",                     optional, kept in the report
     "family": "fmha_fwd_mfma",            required: a family of THIS project (rocke-aot families)
     "arch": "gfx942",                     required: a target ID
     "compile_spec": {...},                required: the family's spec fields and their values
     "selection": {...},                   required (may be {}): kept in the report
     "test_profiles": [...]}               optional, ignored here

The mapping accepted here: ``compile_spec`` is a filter over the family's variant table, the
same as ``--where`` with typed JSON values (aot/builder/plan.py where_for): every field must
be a field of the family's spec with a value of its type, and the instance builds every spec
of the table (on every lane with a toolchain here) whose fields equal those values. An
instance whose family this project lacks, whose compile_spec names a field the family does
not have (or a value of another type), or that no spec of the table matches, is reported by
name with the reason and not built; the others build. A file that is not such a list (bad
JSON, a wrong schema string, an unknown or missing field, a name twice) is a SpecError
(exit 2) before anything builds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocke_aot.errors import RockeError, SpecError
from rocke_aot.targets import Target

INSTANCE_SCHEMA = "rocke.aot.instance/v1"
FIELDS = frozenset({"schema", "name", "op", "family", "arch", "compile_spec", "selection", "test_profiles"})
REQUIRED = ("schema", "name", "family", "arch", "compile_spec", "selection")
MAX_FILE = 16 << 20


@dataclass(frozen=True)
class Instance:
    name: str
    family: str
    arch: Target
    compile_spec: Mapping[str, Any]
    selection: Mapping[str, Any]
    op: str | None = None


def parse(path: str | os.PathLike) -> list[Instance]:
    """The instances of an aot_list.json (a JSON array, or one instance object); SpecError naming
    the instance and field on anything malformed."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE:
            raise SpecError(f"{path}: over {MAX_FILE} bytes")
        doc = json.loads(path.read_text())
    except OSError as e:
        raise SpecError(f"cannot read {path} ({e.strerror})") from None
    except ValueError as e:
        raise SpecError(f"{path} is not JSON ({e})") from None
    items = doc if isinstance(doc, list) else [doc]
    if not items:
        raise SpecError(f"{path}: an empty instance list")
    out, names = [], set()
    for i, item in enumerate(items):
        where = f"{path}: instance {i}"
        if not isinstance(item, dict):
            raise SpecError(f"{where} is a {type(item).__name__}, not an object")
        if isinstance(item.get("name"), str):
            where = f"{path}: instance {item['name']!r}"
        extra = sorted(set(item) - FIELDS)
        if extra:
            raise SpecError(f"{where}: unknown field {extra[0]!r} (an instance has {', '.join(sorted(FIELDS))})")
        missing = [f for f in REQUIRED if f not in item]
        if missing:
            raise SpecError(f"{where}: missing {', '.join(missing)}")
        if item["schema"] != INSTANCE_SCHEMA:
            raise SpecError(f"{where}: schema {item['schema']!r}, expected {INSTANCE_SCHEMA!r}")
        for f in ("name", "family", "arch"):
            if not isinstance(item[f], str) or not item[f]:
                raise SpecError(f"{where}: {f} must be a non-empty string")
        for f in ("compile_spec", "selection"):
            if not isinstance(item[f], dict):
                raise SpecError(f"{where}: {f} must be an object")
        if item.get("op") is not None and not isinstance(item["op"], str):
            raise SpecError(f"{where}: op must be a string")
        if item["name"] in names:
            raise SpecError(f"{where}: the name appears twice")
        names.add(item["name"])
        out.append(Instance(item["name"], item["family"], Target.parse(item["arch"]), dict(item["compile_spec"]),
                            dict(item["selection"]), item.get("op")))
    return out


def resolve(instances: list[Instance]) -> tuple[list[tuple[Instance, dict[str, Any]]], list[dict[str, Any]]]:
    """(buildable [(instance, typed where)], refused [{name, family, arch, reason}])."""
    from rocke_aot.aot.builder.plan import where_for
    from rocke_aot.variants import families as registry

    known = set(registry.family_names())
    ok, refused = [], []
    for inst in instances:
        if inst.family not in known:
            refused.append({"name": inst.name, "family": inst.family, "arch": inst.arch.id,
                            "reason": f"this project has no family {inst.family!r} (it has "
                                      f"{', '.join(sorted(known))})"})
            continue
        try:
            ok.append((inst, where_for(inst.family, inst.compile_spec)))
        except RockeError as e:
            refused.append({"name": inst.name, "family": inst.family, "arch": inst.arch.id,
                            "reason": f"compile_spec: {e}"})
    return ok, refused


def build_instances(path: str | os.PathLike, *, store, lanes=(), toolchains=None, **build_kw) -> dict[str, Any]:
    """Build every instance of ``path`` this project can; -> {"instances": [...], "refused": [...], "ok"}."""
    from rocke_aot.aot.builder import build

    ok, refused = resolve(parse(path))
    built = []
    for inst, where in ok:
        summary = build(arches=[inst.arch], families=[inst.family], lanes=lanes, store=store, toolchains=toolchains,
                        where=where, **build_kw)
        d = summary.data
        row = {"name": inst.name, "family": inst.family, "arch": inst.arch.id, "op": inst.op,
               "compile_spec": dict(inst.compile_spec), "selection": dict(inst.selection),
               "planned": d["planned"], "built": d["built"], "cached": d["cached"], "failed": d["failed"],
               "skipped": d["skipped"], "refused": d["refused"], "ok": summary.ok}
        if d["planned"] == 0:
            refused.append({"name": inst.name, "family": inst.family, "arch": inst.arch.id,
                            "reason": "no spec of the family's variant table matches its compile_spec on any "
                                      "lane with a toolchain here"
                                      + (f" ({'; '.join(r['reason'] for r in d['refused'])})" if d["refused"] else "")})
        else:
            built.append(row)
    return {"instances": built, "refused": refused,
            "ok": not refused and all(r["ok"] for r in built)}


__all__ = ["FIELDS", "INSTANCE_SCHEMA", "Instance", "build_instances", "parse", "resolve"]
