"""Shared click options, so every command validates lanes, arches and caches the same way."""

from __future__ import annotations

import json

import click

from rocke_aot import settings
from rocke_aot.errors import LaneError, SpecError
from rocke_aot.lanes import LANE_NAMES, Lane, get_lane, lane_from_env
from rocke_aot.targets import Target


class LaneType(click.ParamType):
    """A compiler lane, validated through the one registry (unknown -> usage error, exit 2)."""

    name = "lane"

    def convert(self, value, param, ctx) -> Lane:
        if isinstance(value, Lane):
            return value
        try:
            return get_lane(value, source=(param.opts[0] if param and param.opts else "lane"))
        except LaneError as e:
            self.fail(str(e), param, ctx)

    def get_metavar(self, param, ctx=None) -> str:  # click 8.2+ passes ctx
        return "[" + "|".join(LANE_NAMES) + "]"


class ArchType(click.ParamType):
    """A full arch target ID such as gfx942 or gfx942:sramecc+:xnack-."""

    name = "arch"

    def convert(self, value, param, ctx) -> Target:
        if isinstance(value, Target):
            return value
        try:
            return Target.parse(value)
        except SpecError as e:
            self.fail(str(e), param, ctx)


LANE = LaneType()
ARCH = ArchType()


def lanes_option(multiple: bool = True, help: str | None = None):
    """``--lane`` (repeatable); when absent, ROCKE_AOT_LANE is read and validated the same way."""
    return click.option(
        "--lane", "lanes" if multiple else "lane", type=LANE, multiple=multiple,
        help=help or f"Compiler lane ({', '.join(LANE_NAMES)}); default: ${settings.LANE}, else every lane with a toolchain.",
    )


def lanes_or_env(lanes) -> tuple[Lane, ...]:
    """The lanes given on the command line, else the one in ROCKE_AOT_LANE, else ()."""
    if lanes:
        return tuple(lanes) if isinstance(lanes, (tuple, list)) else (lanes,)
    try:
        env = lane_from_env()
    except LaneError as e:
        raise click.UsageError(str(e)) from e
    return (env,) if env else ()


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON document for machines.")


def emit_json(obj: object) -> None:
    """One JSON document on stdout (every --json output goes through here)."""
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


def json_object_arg(value: str, what: str) -> dict:
    """A JSON object given inline or as @FILE (--spec, --toolchain, ...); SpecError otherwise."""
    from pathlib import Path

    from rocke_aot.errors import SpecError

    try:
        text = Path(value[1:]).read_text() if value.startswith("@") else value
    except OSError as e:
        raise SpecError(f"{what}: cannot read {value[1:]!r} ({e.strerror})") from None
    try:
        out = json.loads(text)
    except json.JSONDecodeError as e:
        raise SpecError(f"{what} is not valid JSON ({e})") from None
    if not isinstance(out, dict):
        raise SpecError(f"{what} must be a JSON object, got {type(out).__name__}")
    return out
