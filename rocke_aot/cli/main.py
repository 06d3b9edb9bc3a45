"""The ``rocke-aot`` command line: thin click commands over the library.

Commands parse, call the library and format. Library errors are translated in
one place, :class:`RockeGroup`'s ``invoke`` (so ``CliRunner`` sees what the real
binary does):

    command raises LaneError / SpecError (bad input) -> "Error: <message>", exit 2
                                                        (like click's own usage errors)
                   any other RockeError              -> "Error: <Type>: <message>", exit 1
                   anything else                     -> propagates (a bug: traceback)
    command returns an int                           -> that exit code (build: 1 when a
                                                        compile failed; variants: 1 on holes;
                                                        families: 1 on a broken plugin)

Command groups live beside the code they drive (``cli/build.py``, ``cli/cache.py``,
...) and are registered in ``COMMANDS`` by module name: a command's module is imported when
that command is invoked, never for another command or for ``rocke-aot --help``.
"""

from __future__ import annotations

import importlib

import click

from rocke_aot.errors import LaneError, RockeError, RuntimeUnavailable, SpecError

# name -> (module, attribute holding the click command or group, its help summary line).
# Commands load on first use (RockeGroup.get_command), so `rocke-aot --help` and a `fetch` on a
# GPU host import no compiler (llvmlite), no server (FastAPI) and no database layer they do not
# run. The summary is kept here for the same reason; tests/test_cli_lazy.py checks that it
# equals the command's own (click's get_short_help_str).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "toolchains": ("rocke_aot.cli.toolchains", "toolchains",
        "List the compilers on this host: kind, location, LLVM version, lane or refusal."),
    "toolchain": ("rocke_aot.cli.toolchains", "toolchain",
        "Install, register or remove lane toolchains."),
    "build": ("rocke_aot.cli.build", "build",
        "Build (or top up) the kernel cache for ARCH on every lane with a toolchain here."),
    "variants": ("rocke_aot.cli.variants", "variants",
        "Count the specs each (family, arch, lane) serves, and list every refusal with its reason."),
    "families": ("rocke_aot.cli.families", "families_cmd",
        "List the kernel families: built in or from a plugin (entry point, distribution), and every broken plugin."),
    "cache": ("rocke_aot.cli.cache", "cache",
        "Inspect and maintain the content-addressed kernel cache."),
    "lower": ("rocke_aot.cli.compile", "lower_cmd",
        "Print the LLVM IR of one spec, lowered for ARCH on LANE (deterministic text)."),
    "compile": ("rocke_aot.cli.compile", "compile_cmd",
        "Lower one spec, compile it in an isolated worker, validate and write the code object."),
    "characterize": ("rocke_aot.cli.characterize", "characterize_cmd",
        "Probe every intrinsic and target feature the families use, on every wired arch, with every "
        "toolchain on this host; each probe in an isolated worker with a timeout."),
    "select": ("rocke_aot.cli.select", "select_cmd",
        "Rank the cached kernels of FAMILY that ARCH can run on PROBLEM."),
    "bench": ("rocke_aot.cli.bench", "bench_cmd",
        "Run problems with cached kernels: verify each candidate, time it, rank the results."),
    "measurements": ("rocke_aot.cli.measurements", "measurements",
        "Record, list and prune measured kernel times (they outrank the time model)."),
    "golden": ("rocke_aot.cli.golden", "golden_cmd",
        "Check the IR goldens: sha256, size and kernel of every case on every lane."),
    "serve": ("rocke_aot.cli.serve", "serve",
        "Serve the kernel cache over HTTP (FastAPI + uvicorn)."),
    "fetch": ("rocke_aot.cli.fetch", "fetch",
        "Fetch the code object of KEY (verified; cached locally; ROCKE_AOT_OFFLINE=1: local only)."),
    "client": ("rocke_aot.cli.client", "client",
        "Verify and purge the client's local store of fetched kernels."),
    "mirror": ("rocke_aot.cli.mirror", "mirror",
        "Static mirrors of signed generations for any HTTP server, object store or CDN."),
    "trust": ("rocke_aot.cli.trust", "trust",
        "Keys and signed metadata of generations (TUF, through python-tuf: root -> release keys -> bins)."),
    "publish": ("rocke_aot.cli.publish", "publish",
        "Publish a code object FILE to a service under the key of its inputs."),
    "settings": ("rocke_aot.cli.settings", "settings_cmd",
        "List the ROCKE_AOT_* environment variables: meaning, default, value here."),
}



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
    """The top-level group: loads a command's module only when that command runs (or its own
    --help is asked), and translates library errors and int return codes for every command
    and subgroup below it (they all run inside this ``invoke``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            module, attr, _ = COMMANDS[name]
            self.add_command(getattr(importlib.import_module(module), attr), name)
        return self.commands.get(name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own layout, from the table's summaries: listing the commands imports none.
        names = self.list_commands(ctx)
        if names:
            limit = formatter.width - 6 - max(map(len, names))
            rows = [(name, click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit) if name not in self.commands
                     else self.commands[name].get_short_help_str(limit)) for name in names]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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


def main(argv: list[str] | None = None) -> None:
    """Entry point (the ``rocke-aot`` script): click's standalone mode; errors are
    translated by :class:`RockeGroup`, so this adds nothing of its own."""
    cli.main(args=argv, prog_name="rocke-aot")
