"""Request fields parsed once, at the service's edge: strings become a ``Target``, a lane name,
a family, a problem; a refusal is FieldError (422) naming the field and its accepted values.
The routes call these; nothing below them parses a string again."""

from __future__ import annotations

from dataclasses import fields as dc_fields
from typing import Any

from rocke_aot.arch import ARCHES
from rocke_aot.errors import LaneError, PluginError, SpecError
from rocke_aot.lanes import LANE_NAMES, get_lane
from rocke_aot.service.errors import FieldError
from rocke_aot.service.selection import check_triton_version, select_families
from rocke_aot.targets import Target
from rocke_aot.variants import table
from rocke_aot.variants.families import FAMILIES, get_family, problem_from_dict


def target(value: str, field: str = "arch") -> Target:
    try:
        return Target.parse(value)
    except SpecError as e:
        raise FieldError(field, str(e), list(ARCHES)) from None


def lane(value: object, field: str = "lane") -> str:
    try:
        return get_lane(value, source=field).name
    except LaneError as e:
        raise FieldError(field, str(e), list(LANE_NAMES)) from None


def family(value: str, field: str = "family") -> str:
    try:
        get_family(value)
    except (SpecError, PluginError) as e:  # unknown, or a plugin of that name failed to load (its error)
        raise FieldError(field, str(e), list(table.family_names())) from None
    return value


def families(value: str) -> tuple[str, ...]:
    """The families of a select (service/selection.py select_families): each known, and one
    operation on one problem type (FamilyMixError, a 422 on the family field, naming each)."""
    for name in value.split(","):
        family(name.strip())
    try:
        return select_families(value)
    except SpecError as e:
        raise FieldError("family", str(e), list(table.family_names())) from None


def triton_version(names, value: str | None) -> str | None:
    try:
        return check_triton_version(names, value)
    except SpecError as e:
        raise FieldError("triton_version", str(e)) from None


def problem(name: str, value: dict) -> Any:
    try:
        return problem_from_dict(name, value)
    except SpecError as e:
        names = [f.name for f in dc_fields(FAMILIES[name].problem_type)]
        raise FieldError("problem", str(e), names) from None
