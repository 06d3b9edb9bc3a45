"""The ``rocke-aot`` command line: thin click commands over the library.

Commands parse, call the library and format. Library errors are translated in
one place, :class:`RockeGroup`'s ``invoke`` (so ``CliRunner`` sees what the real
binary does):

    command raises LaneError / SpecError (bad input) -> "Error: <message>", exit 2
                                                        (like click's own usage errors)
                   any other RockeError              -> "Error: <Type>: <message>", exit 1
                   anything else                     -> propagates (a bug: traceback)
    command returns an int                           -> that exit code (build: 1 when a
                                                        compile failed; variants: 1 on holes)

Command groups live beside the code they drive (``cli/build.py``, ``cli/cache.py``,
...) and are registered in ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import importlib

import click

from rocke_aot.errors import LaneError, RockeError, RuntimeUnavailable, SpecError

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
    ("rocke_aot.cli.select", "select_cmd"),
    ("rocke_aot.cli.bench", "bench_cmd"),
    ("rocke_aot.cli.golden", "golden_cmd"),
    ("rocke_aot.cli.serve", "serve"),
    ("rocke_aot.cli.fetch", "fetch"),
    ("rocke_aot.cli.publish", "publish"),
)


class BadInput(click.ClickException):
    """A LaneError/SpecError from the library: the user's input was wrong (exit 2)."""

    exit_code = 2


class LibraryError(click.ClickException):
    """Any other RockeError: named by its type, exit 1."""

    exit_code = 1


class Skipped(click.ClickException):
    """RuntimeUnavailable: no GPU runtime or device here. A named skip, exit 77 (automake's SKIP)."""

    exit_code = 77

    def show(self, file=None) -> None:
        click.echo(f"Skipped: {self.message}", err=True)


class RockeGroup(click.Group):
    """The top-level group: translates library errors and int return codes for every
    command and subgroup below it (they all run inside this ``invoke``)."""

    def invoke(self, ctx: click.Context):
        try:
            rv = super().invoke(ctx)
        except (LaneError, SpecError) as e:
            raise BadInput(str(e)) from e
        except RuntimeUnavailable as e:
            raise Skipped(str(e)) from e
        except RockeError as e:
            raise LibraryError(f"{type(e).__name__}: {e}") from e
        # Commands return an int exit code when they have one (e.g. build: 1 when a compile failed).
        if isinstance(rv, int) and not isinstance(rv, bool) and rv != 0:
            ctx.exit(rv)
        return rv


@click.group(cls=RockeGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    """Entry point (the ``rocke-aot`` script): click's standalone mode; errors are
    translated by :class:`RockeGroup`, so this adds nothing of its own."""
    cli.main(args=argv, prog_name="rocke-aot")
