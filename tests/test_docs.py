"""Every module, command, file and name the docs cite exists (README.md and docs/*.md).

Read from the backticked spans of each document:
- a path (``rocke_aot/cache/store.py``, ``aot/recipe.py``, ``bench/gemm_amd_isa.py``, ``docs/trust.md``):
  a file or folder of the repository, or of the package (the design's names are relative to it);
- a module (``rocke_aot.cache.store``): importable by spec, without running it;
- a command (``rocke-aot cache verify``): a command of the CLI's tree;
- a snake_case name (``recipe_digest``, ``family_digest(name)``, ``Store.open``): defined somewhere in
  the product, the tools or the tests (a function, class, attribute, argument or field);
- a variable (``ROCKE_AOT_HOME``): registered in rocke_aot/settings.py.
A doc that names what is gone (``resolve_lowerer``) fails here, with the file and line.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import subprocess
from functools import cache
from pathlib import Path

import click
import pytest

from rocke_aot import settings
from rocke_aot.cli.main import cli

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^(?:\.\./)?((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.*-]+|[A-Za-z0-9_-]+\.(?:py|md|sh|toml|json))/?$")
MODULE = re.compile(r"^rocke_aot(?:\.[a-z_][a-z0-9_]*)+$")
COMMAND = re.compile(r"^(?:\.venv/bin/)?rocke-aot ((?:[a-z][a-z0-9-]* ?)+)")
NAME = re.compile(r"^(?:[A-Z][A-Za-z0-9]*\.)?([a-z][a-z0-9]*_[a-z0-9_]+|[A-Z][A-Za-z0-9]+\.[a-z_][a-z0-9_]*)(?:\(.*\))?$")
VAR = re.compile(r"^(ROCKE_AOT_[A-Z0-9_]+)(?:=.*)?$")
# Where a doc names things of other programs (LLVM intrinsics, Triton, PyTorch, TUF, the OS),
# or values rather than names, say so here with the reason.
FOREIGN_PREFIXES = ("llvm.", "amdgpu-", "triton", "torch", "cuda", "hip", "tuf", "TRITON_", "nvidia", "/",
                    "~", "$", "http", "sqlite:", "postgresql", "python", "pip", "apt", "docker")


FILE_ENDINGS = (".py", ".md", ".sh", ".toml", ".json", ".json.gz", ".txt", ".log", ".cfg", ".ini", "/")
ISA = re.compile(r"^(v|s|ds|global|buffer|flat|scratch)_[a-z0-9_]+")  # AMDGPU mnemonics (AMD's ISA docs)
KERNEL_NAME = re.compile(r"\d+x\d+|_t\d+$")  # a kernel's generated name (a value, not a definition)
# Names of other programs the docs cite (SQLite, PostgreSQL, FastAPI, Triton), and example values.
NOT_OURS = {
    "busy_timeout", "search_path", "default_transaction_read_only", "data_version", "total_changes()",
    "jsonable_encoder", "cache_results", "Config.all_kwargs()", "RemoteCacheManager.put_group",
    "my_attention", "rocke_aot.families", "rocke_aot.lowerers",  # an example name; entry-point groups
    "rocke-aot version probe",  # a producer string in hand-written bitcode (docs/llvm24-lane.md)
    "read2_b64", "b64_tr_b16", "load_ushort",  # fragments of AMDGPU mnemonics
}


@cache
def _defined_names() -> frozenset[str]:
    names: set[str] = set()
    for folder in ("rocke_aot", "bench", "devtools", "tests", "examples", "scripts"):
        for p in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in p.parts or "build" in p.parts:
                continue
            tree = ast.parse(p.read_text(), str(p))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
                elif isinstance(node, ast.Name):
                    names.add(node.id)
                elif isinstance(node, ast.Attribute):
                    names.add(node.attr)
                elif isinstance(node, ast.keyword) and node.arg:
                    names.add(node.arg)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) < 80:
                    names.add(node.value)  # spec fields and JSON keys are named by strings
    return frozenset(names)


@cache
def _commands() -> dict[tuple[str, ...], bool]:
    """Every command path of the CLI -> whether it is a group (whose next word must be a command)."""
    out: dict[tuple[str, ...], bool] = {}

    ctx = click.Context(cli)

    def walk(group: click.Command, prefix: tuple[str, ...]):
        out[prefix] = isinstance(group, click.Group)
        if isinstance(group, click.Group):  # the CLI loads its groups lazily: ask, don't read .commands
            for name in group.list_commands(ctx):
                sub = group.get_command(ctx, name)
                if sub is not None:
                    walk(sub, (*prefix, name))
    walk(cli, ())
    return out


def _module_exists(dotted: str) -> bool:
    """A module, or an attribute of one (``rocke_aot.cli.cache.cache_option``)."""
    try:
        if importlib.util.find_spec(dotted) is not None:
            return True
    except ModuleNotFoundError:
        pass
    parent, _, attr = dotted.rpartition(".")
    try:
        return hasattr(importlib.import_module(parent), attr)
    except ImportError:
        return False


@cache
def _tracked() -> tuple[str, ...]:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    return tuple(filter(None, out.split("\0")))


def _path_exists(rel: str) -> bool:
    """A file or folder at the root, in the package or in docs/; else any tracked path ending in it
    (docs name modules by their folder-relative names: ``toolchains/comgr.py``, ``store.py``)."""
    rel = rel.rstrip("/")
    for mark in ("*", "<", "{"):
        if mark in rel:  # a pattern: its fixed folder must exist
            rel = rel.split(mark)[0].rsplit("/", 1)[0]
    if not rel:
        return True
    if any((base / rel).exists() for base in (ROOT, ROOT / "rocke_aot", ROOT / "docs")):
        return True
    return any(t == rel or t.endswith("/" + rel) or t.startswith(rel + "/") or ("/" + rel + "/") in t
               for t in _tracked())


def _findings(doc: Path) -> list[str]:
    out = []
    in_code = False
    for lineno, line in enumerate(doc.read_text().splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
            continue
        # a span after a possessive ("TheRock's `docs/rfcs/...`") names another project's file
        spans = [line.strip()] if in_code else [m.group(1) for m in SPAN.finditer(line)
                                                if not line[:m.start()].endswith("'s ")]
        for span in spans:
            span = span.strip()
            where = f"{doc.relative_to(ROOT)}:{lineno}"
            if span in NOT_OURS:
                continue
            if m := COMMAND.match(span):
                words = tuple(w for w in m.group(1).split() if not w.startswith("-"))
                # the longest prefix that is a command; the rest are its arguments (a group takes none)
                known = next((words[:i] for i in range(len(words), 0, -1) if words[:i] in _commands()), None)
                if words and (known is None or (_commands()[known] and len(known) < len(words))):
                    out.append(f"{where}: command `rocke-aot {' '.join(words)}` does not exist")
                continue
            if in_code or span.startswith(FOREIGN_PREFIXES) or " " in span:
                continue
            if span in NOT_OURS:
                continue
            if MODULE.match(span):
                if not _module_exists(span):
                    out.append(f"{where}: module `{span}` does not exist")
            elif m := VAR.match(span):
                if m.group(1) not in {s.name for s in settings.SETTINGS} and m.group(1) not in _defined_names():
                    out.append(f"{where}: variable `{m.group(1)}` is registered nowhere (rocke_aot/settings.py; "
                               "a test's own variable is named in its test)")
            elif (PATH.match(span) and not span.startswith(("-", "../..")) and span.endswith(FILE_ENDINGS)
                  and ("/" in span or span.endswith((".py", ".md", ".sh")))):  # a bare x.json is an output
                if not _path_exists(span.removeprefix("../")):
                    out.append(f"{where}: path `{span}` does not exist")
            elif (m := NAME.match(span)) and span not in NOT_OURS and not ISA.match(span) \
                    and not KERNEL_NAME.search(span):
                name = m.group(1).split(".")[-1]
                if name not in _defined_names():
                    out.append(f"{where}: name `{span}` is defined nowhere in the tree")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_name_a_doc_cites_exists(doc):
    assert _findings(doc) == []


def test_the_check_catches_what_is_gone(tmp_path, monkeypatch):
    """Not vacuous: a doc naming a removed function, a missing file, module, command and variable fails."""
    bad = ROOT / "docs" / "_probe_gone.md"
    bad.write_text("See `resolve_lowerer` in `aot/families/nothing.py`, `rocke_aot.cache.gone`,\n"
                   "`rocke-aot cache frobnicate` and `ROCKE_AOT_NO_SUCH_THING`.\n")
    try:
        found = _findings(bad)
    finally:
        bad.unlink()
    assert len(found) == 5, found
