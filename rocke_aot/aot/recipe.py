"""The recipe digest: every rocke_aot module that can shape the IR or the code object, chosen by rule.

    ROOTS: every module of rocke_aot.aot.lower, .families, .compiler, .toolchains
           (worker scripts such as _llvm_worker.py run as separate processes: being a module
           of a root package is what covers them) + rocke_aot.aot.codeobject
           + what rocke-aot's family folders (rocke_aot/families/<name>/) import from the layers
           (the folders themselves are keyed per family: family_digest below)
        │
        ▼ closure over the import graph, read statically (AST, never by importing):
        │   import a.b.c / from a.b import c / from .x import y   at any depth (inside
        │       functions too); importing a.b.c runs a/__init__ and a/b/__init__, so those count
        │   importlib.import_module("lit") / __import__("lit")
        │   importlib.import_module(f"{__name__}.{m}") with m a loop variable over, or
        │       import_module(name) with name read from, a module-level tuple/list/dict literal
        │       of strings (families' _FAMILY_MODULES, toolchains' KIND_MODULES)
        │   any other dynamic import: a module that declares
        │       __recipe_imports__ = ("pkg", ...) (and enforces it) brings in every module of
        │       those packages; without the declaration it is a RecipeError naming file and
        │       line: nothing can slip past the digest by being clever
        ▼
    recipe_modules() -> ("rocke_aot", "rocke_aot.aot", "rocke_aot.aot.codeobject", ...)  sorted
    recipe_digest()  -> sha256( RULE_VERSION, then per module: name \\0 source bytes \\0 )

Only modules of the import package count; third-party code (llvmlite, the LLVM libraries,
ld.lld, ptxas) is covered by the toolchain identity, which hashes those files.
The default call (the live packages) is memoized per process: a no-op rebuild plans once per
process and must stay pure hashing. Across processes the closure (the module list, the only
costly part: an AST read of every module on it) is memoized on disk by the tree it was read
from:

    fingerprint = sha256(RULE_VERSION, every .py file of the package folders: name \0 bytes)
    $ROCKE_AOT_HOME/recipe/<fingerprint>.json   {"modules": [...]}   (newest MEMO_KEEP kept)

Any byte of any module moves the fingerprint, so a memo is only ever read for the very tree
it was computed from; one that is unreadable or names a module the tree lacks is ignored and
the closure is read again. The digest itself is always hashed from the files. Within a process,
what one module imports is memoized by (the tree's file listing, the module, its source's sha256)
(``_imports``): a tree that differs from one already read by a few files reads only those again
(what a module imports depends on its source and on which files exist, nothing else).

A family plugin's code lives outside rocke_aot, so the plan key's digest is per family:

    family_digest(name)
        built-in family (every piece defined inside rocke_aot) -> recipe_digest()
        otherwise -> sha256(FAMILY_RULE, recipe_digest(), the declaring distribution and its
                     version, then per top-level package outside rocke_aot that defines a
                     piece of the family: every .py file under it (path \0 bytes \0))
        a family of rocke_aot's own family folders (rocke_aot/families/<name>/, declared through
                     the entry points like a plugin) is the second case with its folder as the
                     package: an edit there moves its keys and no other family's
        the pieces: spec and problem types, the table's and the model's functions, the entry
        point's module and the lowerer (family_packages names them)

Coarse on purpose, like recipe_digest (a comment moves it; the code-object key, the IR's
sha256, then finds the compiled object again: nothing is compiled). Not covered: code the
plugin imports from another distribution that defines no piece of the family (a shared
helper library); such a plugin bumps its own version when that library changes what it
emits. ``cache audit`` re-lowers stored kernels and reports such a hole.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import itertools
import json
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rocke_aot import paths
from rocke_aot.aot.families import get_family
from rocke_aot.errors import RockeError

RULE_VERSION = "rocke-aot/recipe/v1"

# The packages whose folders the rule reads (one import package over several folders).
PACKAGES: tuple[str, ...] = ("rocke_aot", "rocke_aot.aot", "rocke_aot.cache", "rocke_aot.variants",
                             "rocke_aot.service", "rocke_aot.runner", "rocke_aot.cli", "rocke_aot.families")
# The folder of the families that ship as plugins (rocke_aot/families/<name>/): no recipe module
# imports it (families are found through the registry), so recipe_digest() does not move when one
# of them is edited; each such family's plan key covers its own folder (family_digest).
FAMILY_FOLDERS = "rocke_aot.families"
# Every module of these packages is a root (the lowering and the compile path) ...
ROOT_PACKAGES: tuple[str, ...] = ("rocke_aot.aot.lower", "rocke_aot.aot.families", "rocke_aot.aot.compiler",
                                  "rocke_aot.aot.toolchains")
# ... and these single modules (validation of the code object shapes what is stored).
ROOT_MODULES: tuple[str, ...] = ("rocke_aot.aot.codeobject",)

_IMPORT_FUNCS = {"import_module", "__import__"}


class RecipeError(RockeError):
    """The recipe rule cannot decide what a module imports (or a module it names is missing)."""


def _default_dirs() -> dict[str, Path]:
    # find_spec reads where a package lives without running it (no upward import from aot).
    out = {}
    for pkg in PACKAGES:
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            raise RecipeError(f"package {pkg} is not importable; cannot compute the recipe digest")
        out[pkg] = Path(list(spec.submodule_search_locations)[0]).resolve()
    return out


class _Tree:
    """Module name <-> file, for one mapping of packages to folders."""

    def __init__(self, package_dirs: Mapping[str, str | Path]):
        self.dirs = {k: Path(v) for k, v in package_dirs.items()}
        # longest package prefix first: rocke_aot.aot.x lives in aot/, not rocke_aot/aot/
        self._order = sorted(self.dirs, key=lambda p: -p.count("."))
        self._listing: str | None = None

    def listing(self) -> str:
        """sha256 over the folders and the names of every file in them (not their bytes): what
        ``file``, ``is_package`` and ``package_modules`` answer depends on nothing else."""
        if self._listing is None:
            h = hashlib.sha256()
            for pkg, d in sorted(self.dirs.items()):
                h.update(f"{pkg}\0{d.resolve()}\0".encode())
                for root, dirs, files in os.walk(d):
                    dirs[:] = sorted(x for x in dirs if x != "__pycache__")
                    h.update("\0".join([str(Path(root).relative_to(d)), *sorted(files)]).encode() + b"\n")
            self._listing = h.hexdigest()
        return self._listing

    def file(self, module: str) -> Path | None:
        for pkg in self._order:
            if module == pkg or module.startswith(pkg + "."):
                rest = module[len(pkg) + 1:].split(".") if module != pkg else []
                base = self.dirs[pkg].joinpath(*rest)
                if base.joinpath("__init__.py").is_file():
                    return base / "__init__.py"
                if rest and base.with_suffix(".py").is_file():
                    return base.with_suffix(".py")
                return None
        return None

    def is_package(self, module: str) -> bool:
        f = self.file(module)
        return f is not None and f.name == "__init__.py"

    def package_modules(self, package: str) -> list[str]:
        f = self.file(package)
        if f is None or f.name != "__init__.py":
            raise RecipeError(f"root package {package} has no folder in the given package directories")
        return [package] + [f"{package}.{p.stem}" for p in sorted(f.parent.glob("*.py")) if p.stem != "__init__"]


def _in_scope(name: str) -> bool:
    return name == "rocke_aot" or name.startswith("rocke_aot.")


def _with_parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _string_tables(tree: ast.Module) -> dict[str, list[str]]:
    """Module-level NAME = tuple/list/set/dict literal -> its string items (dict: values)."""
    out: dict[str, list[str]] = {}
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        items = (value.values if isinstance(value, ast.Dict)
                 else value.elts if isinstance(value, (ast.Tuple, ast.List, ast.Set)) else None)
        if items is None:
            continue
        strings = [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]
        for t in targets:
            if isinstance(t, ast.Name) and strings:
                out[t.id] = strings
    return out


class _Scanner:
    """What one module imports (rocke_aot modules only), by the rule in the module docstring."""

    def __init__(self, tree_map: _Tree, module: str, path: Path, src: bytes):
        self.t, self.module, self.path = tree_map, module, path
        self.src = src
        try:
            self.ast = ast.parse(self.src, filename=str(path))
        except SyntaxError as e:
            raise RecipeError(f"{path}: cannot parse ({e})") from e
        self.tables = _string_tables(self.ast)
        self.package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        # name -> the table it iterates over (for loops, comprehensions) or is read from (T.get / T[...])
        self.bound: dict[str, list[str]] = {}
        for node in ast.walk(self.ast):
            if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                table = self._table_of(node.iter)
                if table is not None:
                    self.bound.setdefault(node.target.id, []).extend(table)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                table = self._table_read(node.value)
                if table is not None:
                    self.bound.setdefault(node.targets[0].id, []).extend(table)

    def _table_of(self, node: ast.AST) -> list[str] | None:
        if isinstance(node, ast.Name):
            return self.tables.get(node.id)
        if isinstance(node, (ast.Tuple, ast.List)):
            vals = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            return vals if len(vals) == len(node.elts) else None
        return None

    def _table_read(self, node: ast.AST) -> list[str] | None:
        # T.get(...) or T[...] with T a module-level literal table
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            return self._table_of(node.func.value)
        if isinstance(node, ast.Subscript):
            return self._table_of(node.value)
        return None

    def _fail(self, node: ast.AST, what: str) -> RecipeError:
        return RecipeError(f"{self.path}:{getattr(node, 'lineno', '?')}: {what}; the recipe rule cannot "
                           f"tell which module it imports (use a literal, or a module-level table of literals)")

    def _values(self, node: ast.AST) -> list[str]:
        """Every string an import_module argument can take, or RecipeError."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Name):
            if node.id == "__name__":
                return [self.module]
            if node.id in self.bound:
                return self.bound[node.id]
            if node.id in self.tables:
                return self.tables[node.id]
            raise self._fail(node, f"dynamic import of variable {node.id!r}")
        if isinstance(node, ast.JoinedStr):
            parts: list[list[str]] = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append([str(v.value)])
                elif isinstance(v, ast.FormattedValue) and v.conversion == -1 and v.format_spec is None:
                    parts.append(self._values(v.value))
                else:
                    raise self._fail(node, "f-string import with a conversion or format spec")
            return ["".join(p) for p in itertools.product(*parts)]
        raise self._fail(node, f"dynamic import of a {type(node).__name__} expression")

    def _resolve_from(self, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        base = self.package.split(".")
        if node.level > 1:
            base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _declared(self) -> list[str] | None:
        """``__recipe_imports__ = ("pkg", ...)`` at module level: this module's dynamic imports
        load only modules of those packages (the module itself must enforce it)."""
        return self.tables.get("__recipe_imports__")

    def imports(self) -> set[str]:
        found: set[str] = set()
        for node in ast.walk(self.ast):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _in_scope(alias.name):
                        found.update(_with_parents(alias.name))
            elif isinstance(node, ast.ImportFrom):
                base = self._resolve_from(node)
                if not _in_scope(base):
                    continue
                found.update(_with_parents(base))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if alias.name != "*" and self.t.file(sub) is not None:
                        found.add(sub)  # "from pkg import module": the submodule runs too
            elif isinstance(node, ast.Call):
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if name in _IMPORT_FUNCS and node.args:
                    try:
                        mods = self._values(node.args[0])
                    except RecipeError:
                        declared = self._declared()
                        if not declared:
                            raise
                        # declared: every module of the packages it may import from is covered
                        mods = [m for pkg in declared for m in self.t.package_modules(pkg)]
                    for mod in mods:
                        if _in_scope(mod):
                            found.update(_with_parents(mod))
        return found


def _folder_imports(tree_map: _Tree) -> list[str]:
    """What rocke-aot's family folders import from the layers (rocke_aot/families/<name>/ ->
    rocke_aot.variants.problems, the conv engine, ...): roots too. Each folder is keyed by its own
    family_digest; what it imports from outside it is shared code, so the recipe covers it."""
    init = tree_map.file(FAMILY_FOLDERS)
    if init is None or init.name != "__init__.py":
        return []
    out: set[str] = set()
    for path in sorted(init.parent.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(init.parent).with_suffix("").parts
        mod = ".".join((FAMILY_FOLDERS, *(rel[:-1] if rel[-1] == "__init__" else rel)))
        out.update(m for m in _imports(tree_map, mod, path)
                   if m != FAMILY_FOLDERS and not m.startswith(FAMILY_FOLDERS + "."))
    return sorted(out)


def _closure(tree_map: _Tree) -> dict[str, Path]:
    roots = ([m for pkg in ROOT_PACKAGES for m in tree_map.package_modules(pkg)] + list(ROOT_MODULES)
             + _folder_imports(tree_map))
    todo = [m for r in roots for m in _with_parents(r)]
    seen: dict[str, Path] = {}
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        path = tree_map.file(mod)
        if path is None:
            raise RecipeError(f"module {mod} is imported on the lowering/compile path but has no source file "
                              f"under the package directories {sorted(map(str, tree_map.dirs.values()))}")
        seen[mod] = path
        todo.extend(_imports(tree_map, mod, path) - seen.keys())
    return seen


IMPORTS_MEMO_MAX = 4096  # (listing, module, source) entries kept in a process (a tree holds ~300 modules)
_IMPORTS_MEMO: dict[tuple[str, str, str], frozenset[str]] = {}


def _imports(tree_map: _Tree, mod: str, path: Path) -> frozenset[str]:
    """What ``mod`` (the file ``path`` of ``tree_map``) imports, memoized in the process by the tree's
    listing, the module and its source's sha256 (a RecipeError is raised again, never memoized)."""
    src = path.read_bytes()
    k = (tree_map.listing(), mod, hashlib.sha256(src).hexdigest())
    got = _IMPORTS_MEMO.get(k)
    if got is None:
        got = frozenset(_Scanner(tree_map, mod, path, src).imports())
        if len(_IMPORTS_MEMO) >= IMPORTS_MEMO_MAX:
            _IMPORTS_MEMO.clear()
        _IMPORTS_MEMO[k] = got
    return got


# One computation at a time: builder and Dask worker threads ask at once, and CPython 3.11's
# ast.parse is not safe to run in two threads together ("AST constructor recursion depth
# mismatch", seen on a Dask worker with two threads).
_LOCK = threading.Lock()


def _compute(package_dirs: Mapping[str, str | Path]) -> tuple[tuple[str, ...], str]:
    with _LOCK:
        return _compute_locked(package_dirs)


MEMO_KEEP = 16  # closure memos kept on disk (one per tree a developer or a checkout had)


def _fingerprint(tree_map: _Tree) -> str:
    """sha256 over every module file of the package folders (symlinked folders are other
    packages' folders: each is read once, as its own package)."""
    h = hashlib.sha256(RULE_VERSION.encode() + b"\n")
    for pkg, d in sorted(tree_map.dirs.items()):
        for root, dirs, files in os.walk(d):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for name in sorted(f for f in files if f.endswith(".py")):
                f = Path(root, name)
                h.update(f"{pkg}/{f.relative_to(d)}".encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _memo_dir() -> Path:
    return paths.home() / "recipe"


def _closure_memoized(tree_map: _Tree) -> dict[str, Path]:
    fp = _fingerprint(tree_map)
    memo = _memo_dir() / f"{fp}.json"
    try:
        names = json.loads(memo.read_text())["modules"]
        found = {m: tree_map.file(m) for m in names}
        if names and all(found.values()):
            return found  # type: ignore[return-value]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no memo for this tree (or an unreadable one): read the closure
    mods = _closure(tree_map)
    try:
        paths.atomic_write(memo, json.dumps({"modules": sorted(mods)}).encode(), durable=False)
        old = sorted(memo.parent.glob("*.json"), key=lambda p: p.stat().st_mtime)[:-MEMO_KEEP]
        for p in old:
            p.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only home: every process reads the closure itself
    return mods


def _compute_locked(package_dirs: Mapping[str, str | Path]) -> tuple[tuple[str, ...], str]:
    mods = _closure_memoized(_Tree(package_dirs))
    h = hashlib.sha256(RULE_VERSION.encode() + b"\n")
    for name in sorted(mods):
        h.update(name.encode() + b"\0" + mods[name].read_bytes() + b"\0")
    return tuple(sorted(mods)), h.hexdigest()


_LIVE: list[tuple[tuple[str, ...], str]] = []


def _live() -> tuple[tuple[str, ...], str]:
    if not _LIVE:
        with _LOCK:
            if not _LIVE:
                _LIVE.append(_compute_locked(_default_dirs()))
    return _LIVE[0]


def _resolve(package_dirs: Mapping[str, str | Path] | None) -> tuple[tuple[str, ...], str]:
    if package_dirs is None:
        return _live()
    missing = [p for p in PACKAGES if p not in package_dirs]
    if missing:
        raise RecipeError(f"package_dirs lacks {', '.join(missing)}")
    return _compute(package_dirs)


def recipe_modules(package_dirs: Mapping[str, str | Path] | None = None) -> tuple[str, ...]:
    """The modules the rule selects, sorted (default: the live packages, memoized)."""
    return _resolve(package_dirs)[0]


def recipe_digest(package_dirs: Mapping[str, str | Path] | None = None) -> str:
    """Hex sha256 over the source of every recipe module (default: the live packages, memoized)."""
    return _resolve(package_dirs)[1]


def module_files(package_dirs: Mapping[str, str | Path] | None = None) -> dict[str, Path]:
    """module name -> its source file, for the modules the rule selects."""
    with _LOCK:
        return _closure(_Tree(package_dirs if package_dirs is not None else _default_dirs()))


def default_package_dirs() -> dict[str, Path]:
    return _default_dirs()


# -- per family: a plugin's own code ------------------------------------------------------------

FAMILY_RULE = "rocke-aot/recipe/family/v1"
_FAMILY_DIGESTS: dict[str, str] = {}
_FAMILY_LOCK = threading.Lock()


def _module_of(obj: Any) -> str | None:
    raw = getattr(obj, "raw", obj)  # a plugin lowerer wrapper (aot/families plugin_lowerer)
    mod = getattr(raw, "__module__", None)
    return mod if isinstance(mod, str) and mod else None


def family_packages(name: str) -> tuple[str, ...]:
    """The top-level packages outside rocke_aot (and the standard library) that define a piece
    of family ``name``: its spec and problem types, its table's and model's functions, its entry
    point's module and its lowerer. Empty for a built-in family."""
    family = get_family(name)  # the aot lookup: a plugin's lowerer is loaded (PluginError if not)
    t, m = family.table, family.model
    pieces = [family.spec_type, family.problem_type, t.baked, t.knobs, t.make_spec, t.check, t.spec_from_dict,
              t.arch_rule, t.paths, m.accepts, m.efficiency, m.work, m.counts, family.lowerer]
    kernel = getattr(family.spec_type, "KERNEL", None)  # a Triton family: its kernel's module
    mods = [_module_of(p) for p in pieces] + ([kernel.module, *kernel.sources] if kernel is not None else [])
    value = family.source.value.partition(":")[0]
    mods.append(value or None)
    folder = FAMILY_FOLDERS.split(".")
    tops = {".".join(mod.split(".")[:len(folder) + 1]) if mod.split(".")[:len(folder)] == folder
            and len(mod.split(".")) > len(folder) else mod.split(".")[0] for mod in mods if mod}
    return tuple(sorted(x for x in tops if x != "rocke_aot" and x not in sys.stdlib_module_names
                        and x != "builtins"))


def _package_files(top: str) -> list[tuple[str, Path]]:
    """Every .py file of package ``top`` (a top-level package, or one of rocke_aot's family
    folders), named by its path from the package (``top/x.py``)."""
    spec = importlib.util.find_spec(top)
    if spec is None:
        raise RecipeError(f"package {top} defines part of a family but cannot be found to hash its source")
    if spec.submodule_search_locations:
        out = []
        for loc in spec.submodule_search_locations:
            root = Path(loc)
            out += [(f"{top}/{p.relative_to(root).as_posix()}", p) for p in root.rglob("*.py")
                    if "__pycache__" not in p.parts]
        return sorted(out)
    if spec.origin is None or not spec.origin.endswith(".py"):
        raise RecipeError(f"module {top} defines part of a family but has no Python source to hash "
                          f"({spec.origin}); the plan key cannot cover it")
    return [(f"{top}.py", Path(spec.origin))]


def family_digest(name: str) -> str:
    """The recipe digest a plan key of family ``name`` carries (module doc). Memoized per process."""
    got = _FAMILY_DIGESTS.get(name)
    if got is not None:
        return got
    pkgs = family_packages(name)
    if not pkgs:
        digest = recipe_digest()
    else:
        source = get_family(name).source
        h = hashlib.sha256(f"{FAMILY_RULE}\n{recipe_digest()}\n{source.distribution}\0{source.version}\n".encode())
        for top in pkgs:
            for rel, path in _package_files(top):
                h.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
        digest = h.hexdigest()
    with _FAMILY_LOCK:
        return _FAMILY_DIGESTS.setdefault(name, digest)
