"""The ``rocke-aot`` command line: thin click commands over the library.

Commands parse, call the library and format. Library errors are translated in
one place, :func:`main`: a ``LaneError``/``SpecError`` (bad input) exits 2 like
click's own usage errors, any other ``RockeError`` exits 1 with its message.

Command groups live beside the code they drive (``aot/cli_*.py``,
``cli/cache.py``, ...) and are registered in ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import importlib
import sys

import click

from rocke_aot.errors import LaneError, RockeError, SpecError

# module path -> attribute holding a click command or group
_COMMAND_MODULES: tuple[tuple[str, str], ...] = (
    ("rocke_aot.cli.toolchains", "toolchains"),
    ("rocke_aot.cli.toolchains", "toolchain"),
    ("rocke_aot.cli.build", "build"),
    ("rocke_aot.cli.variants", "variants"),
    ("rocke_aot.cli.cache", "cache"),
    ("rocke_aot.cli.compile", "lower_cmd"),
    ("rocke_aot.cli.compile", "compile_cmd"),
    ("rocke_aot.cli.characterize", "characterize_cmd"),
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="rocke-aot")
def cli() -> None:
    """rocke-aot: build, store and serve precompiled AMD GPU kernels.

    \b
    Example:
        rocke-aot toolchains            # which compilers this host has, and their lanes
        rocke-aot build --arch gfx1250  # fill the kernel cache for gfx1250
    """


for _mod, _attr in _COMMAND_MODULES:
    try:
        cli.add_command(getattr(importlib.import_module(_mod), _attr))
    except ModuleNotFoundError as e:  # pragma: no cover - only while a module is being written
        if e.name != _mod:
            raise


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the group and translate library errors in one place."""
    try:
        rv = cli.main(args=argv, prog_name="rocke-aot", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        sys.exit(1)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except (LaneError, SpecError) as e:
        click.echo(f"Error: {e}", err=True)
        sys.exit(2)
    except RockeError as e:
        click.echo(f"Error: {type(e).__name__}: {e}", err=True)
        sys.exit(1)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    # Commands return an int exit code when they have one (e.g. build: 1 when a compile failed).
    sys.exit(rv if isinstance(rv, int) else 0)
