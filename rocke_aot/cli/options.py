"""Shared click options: one per concept, so every command parses lanes, arches and caches the
same way, once, at the edge.

    arch_option()   --arch TARGET-ID  -> Target (targets.py Target.parse; a bad ID is a usage error)
    lanes_option()  --lane NAME       -> Lane (lanes.py get_lane; unknown -> usage error, exit 2)
    cache_option()  --cache URL       -> cache_url (None: $ROCKE_AOT_CACHE, else the user cache dir)
    json_option     --json            -> as_json (one JSON document: emit_json)

A command receives typed values (Target, Lane) and passes them down; nothing below the CLI
parses a string the user typed again."""

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


def lanes_option(multiple: bool = True, help: str | None = None, *, required: bool = False):
    """``--lane`` -> Lane (repeatable: ``lanes``, a tuple; else ``lane``); lanes_or_env reads
    ROCKE_AOT_LANE, validated the same way, where a command defaults to it."""
    return click.option(
        "--lane", "lanes" if multiple else "lane", type=LANE, multiple=multiple, required=required,
        help=help or f"Compiler lane ({', '.join(LANE_NAMES)}); default: ${settings.LANE}, else every lane with a toolchain.",
    )


def arch_option(help: str, *, multiple: bool = False, required: bool = False):
    """``--arch`` -> Target, parsed here once (repeatable: ``arches``, a tuple; else ``arch``)."""
    return click.option("--arch", "arches" if multiple else "arch", type=ARCH, multiple=multiple,
                        required=required, help=help)


CACHE_HELP = (f"Cache location: a path, sqlite:///FILE or postgresql+psycopg://... (default: ${settings.CACHE}, "
              "else cache.sqlite in the user cache dir).")


def cache_option(help: str = CACHE_HELP):
    """``--cache URL`` -> ``cache_url`` (None when absent: Store.open resolves $ROCKE_AOT_CACHE,
    else the user cache dir, cache/db.py resolve_url)."""
    return click.option("--cache", "cache_url", metavar="URL", default=None, help=help)


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
