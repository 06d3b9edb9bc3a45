"""The ``rocke-aot`` command line: thin click commands over the library.

Commands parse, call the library and format. Library errors are translated in
one place, :class:`RockeGroup`'s ``invoke`` (so ``CliRunner`` sees what the real
binary does):

    command (or its module) needs a module of an extra that is not installed
                                                     -> "Error: `rocke-aot CMD` needs the [serve] install
                                                        (...): pip install 'rocke-aot[serve]'", exit 2;
                                                        its --help still answers (NeedsExtra)
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
    "export": ("rocke_aot.cli.export", "export",
        "Export ARCH's kernels as a kpack archive (TheRock RFC0008) with a signed rocKE bundle manifest, and/or "
        "as a pip-installable device wheel that hosts read before the network."),
    "fetch": ("rocke_aot.cli.fetch", "fetch",
        "Fetch kernels by KEY (or unique prefix), from a file, or the ones a select accepts; verified, cached locally."),
    "client": ("rocke_aot.cli.client", "client",
        "List, size, trim, verify and purge the client's local store of fetched kernels."),
    "mirror": ("rocke_aot.cli.mirror", "mirror",
        "Static mirrors of signed generations for any HTTP server, object store or CDN."),
    "trust": ("rocke_aot.cli.trust", "trust",
        "Keys and signed metadata of generations (TUF, through python-tuf: root -> release keys -> bins)."),
    "publish": ("rocke_aot.cli.publish", "publish",
        "Publish a code object FILE to a service under the key of its inputs."),
    "settings": ("rocke_aot.cli.settings", "settings_cmd",
        "List the ROCKE_AOT_* environment variables: meaning, default, value here."),
}



# The extra that brings a module a command imports (pyproject.toml's optional dependencies): a
# command whose module, or whose run, needs one that is not installed says so in one line and
# exits 2, and its --help still answers (NeedsExtra). Any other missing module is a bug: it
# propagates. tests/test_install_roles.py runs every command on the base, [serve] and [build]
# installs, and docs/client.md has the table.
EXTRA_OF: dict[str, str] = {
    **dict.fromkeys(("sqlalchemy", "alembic", "psycopg", "fastapi", "starlette", "uvicorn", "httptools", "uvloop",
                     "prometheus_client", "elftools", "msgpack", "mako"), "serve"),
    **dict.fromkeys(("llvmlite", "rich", "numpy", "hip", "rocm", "cuda"), "build"),
    "triton": "llvm24",
    **dict.fromkeys(("distributed", "dask"), "dask"),
}


# What a command (or subcommand) needs as a whole, checked before it runs by one module of that
# extra (SENTINEL): a command that would otherwise start and report on nothing (characterize
# with no compiler) or trip first over a module of a smaller extra (lower: msgpack of [serve])
# names the install that makes it work. The order of the roles: base < serve < build.
NEEDS: dict[str, str] = {
    **dict.fromkeys(("toolchains", "toolchain", "build", "variants", "families", "lower", "compile", "characterize",
                     "golden", "bench", "cache audit"), "build"),
    **dict.fromkeys(("cache", "measurements", "serve", "mirror"), "serve"),
}
SENTINEL = {"serve": "sqlalchemy", "build": "llvmlite"}
_RANK = {"serve": 1, "build": 2}


def needs(path: str, found: str | None = None) -> str | None:
    """The extra to name for command ``path`` ("cache audit"), given a missing module's ``found``:
    the larger of the two (base < serve < build); another extra (llvm24, dask) as found."""
    declared = NEEDS.get(path) or NEEDS.get(path.split(" ")[0])
    if found is None or declared is None or found not in _RANK:
        return found or declared
    return max(found, declared, key=_RANK.__getitem__)


def _lacks(extra: str | None) -> str | None:
    """The sentinel module of ``extra`` when it is not installed here, else None."""
    import importlib.util

    mod = SENTINEL.get(extra or "")
    return mod if mod is not None and importlib.util.find_spec(mod) is None else None


def missing_extra(e: ImportError) -> str | None:
    """The extra to install for ``e`` (a ModuleNotFoundError of a module an extra brings), else None."""
    name = getattr(e, "name", None)
    if not isinstance(e, ModuleNotFoundError) or not isinstance(name, str):
        return None
    return EXTRA_OF.get(name.split(".")[0])


class MissingExtra(click.ClickException):
    """A command needs an extra that is not installed: one line naming it, exit 2."""

    exit_code = 2

    def __init__(self, command: str, module: str, extra: str):
        super().__init__(f"`rocke-aot {command}` needs the [{extra}] install ({module} is not installed here): "
                         f"pip install 'rocke-aot[{extra}]'")


class NeedsExtra(click.Command):
    """What the command table offers for a command whose module cannot import here: its summary
    and the extra in --help (exit 0), the one-line MissingExtra when run (exit 2)."""

    def __init__(self, name: str, summary: str, module: str, extra: str):
        super().__init__(name, help=f"{summary}\n\nNeeds the [{extra}] install ({module} is not installed here):\n\n"
                                    f"\b\n    pip install 'rocke-aot[{extra}]'",
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                           "help_option_names": ["-h", "--help"]})
        self.module, self.extra = module, extra

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if any(a in ("-h", "--help") for a in args):  # `cache stats --help`: this command's help
            click.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        sub = f"{self.name} {ctx.args[0]}" if ctx.args else (self.name or "")
        raise MissingExtra(sub, self.module, needs(sub, self.extra) or self.extra)


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
            module, attr, summary = COMMANDS[name]
            try:
                cmd = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as e:
                extra = missing_extra(e)
                if extra is None:
                    raise
                cmd = NeedsExtra(name, summary, e.name or module, needs(name, extra) or extra)
            self.add_command(cmd, name)
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

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """click's, then the install check of NEEDS: a command that needs an extra whose sentinel
        module is absent stops here with the one line, before it starts (its --help still answers)."""
        name, cmd, rest = super().resolve_command(ctx, args)
        if name is not None and not isinstance(cmd, NeedsExtra) and not {"-h", "--help"} & set(rest):
            words = [a for a in rest if not a.startswith("-")][:1]
            path = f"{name} {words[0]}" if words and f"{name} {words[0]}" in NEEDS else name
            extra = needs(path)
            lacking = _lacks(extra)
            if lacking is not None and extra is not None:
                raise MissingExtra(path, lacking, extra)
        return name, cmd, rest

    def _path(self, ctx: click.Context) -> str:
        """The command being run, with its subcommand where NEEDS names one ("cache audit")."""
        name = ctx.invoked_subcommand or ""
        args = [a for a in ctx.args if not a.startswith("-")][:1]
        return f"{name} {args[0]}" if args and f"{name} {args[0]}" in NEEDS else name

    def invoke(self, ctx: click.Context):
        try:
            rv = super().invoke(ctx)
        except ModuleNotFoundError as e:  # a module of an extra, imported as the command ran
            extra = missing_extra(e)
            if extra is None:
                raise
            raise MissingExtra(ctx.invoked_subcommand or "", e.name or extra, needs(self._path(ctx), extra) or extra) from None
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
