"""The recipe digest: every module the rule selects moves the key; modules off the path do not.

Each test works on a copy of the package folders (rocke_aot/, aot/, cache/, variants/,
service/, cli/) given to recipe_digest(package_dirs=...), so edits never touch the checkout.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rocke_aot.aot.recipe import (
    PACKAGES,
    RecipeError,
    default_package_dirs,
    module_files,
    recipe_digest,
    recipe_modules,
)
from rocke_aot.cache.keys import KeyTemplate

LIVE_MODULES = recipe_modules()
TOOLCHAIN = {"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "LLD 22.1.8"}
OPTIONS = {"speed_level": 3}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> dict[str, Path]:
    """A copy of the package tree: package name -> copied folder."""
    root = tmp_path_factory.mktemp("tree")
    out = {}
    for pkg, src in default_package_dirs().items():
        dst = root / pkg.replace(".", "_")
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        out[pkg] = dst
    return out


_FILES: dict[tuple[tuple[str, str], ...], dict[str, Path]] = {}


def _file(tree: dict[str, Path], module: str) -> Path:
    """The copy's file of ``module``. The closure (an AST read of every module on the path) is read
    once per copy: an edit only appends bytes to a file, so no module moves to another file."""
    k = tuple(sorted((pkg, str(d)) for pkg, d in tree.items()))
    if k not in _FILES:
        _FILES[k] = module_files(tree)
    return _FILES[k][module]


def _key(digest: str) -> str:
    return KeyTemplate("gfx942", "llvm22", "llvm22", "gemm", digest, TOOLCHAIN, OPTIONS).key('{"block_m":32}')


class _Edit:
    """Change a file of the copy for the duration of a with-block."""

    def __init__(self, path: Path, new: bytes):
        self.path, self.new = path, new

    def __enter__(self):
        self.old = self.path.read_bytes()
        self.path.write_bytes(self.new)

    def __exit__(self, *exc):
        self.path.write_bytes(self.old)


def test_the_copy_digests_like_the_live_packages(tree, tmp_path, monkeypatch):
    # the closure memo is keyed by the files' fingerprint, which the copy shares with the live tree:
    # an empty home makes this call read the copy's imports itself instead of the live tree's memo
    monkeypatch.setenv("ROCKE_AOT_HOME", str(tmp_path / "home"))
    got = recipe_modules(tree)
    assert [p.name for p in (tmp_path / "home" / "recipe").glob("*.json")], "the copy's closure was not read"
    assert got == LIVE_MODULES
    assert {"rocke_aot.aot.codeobject", "rocke_aot.aot.compiler.ptx", "rocke_aot.aot.lower.nvptx"} <= set(got)
    assert recipe_digest(tree) == recipe_digest()
    assert recipe_digest() == recipe_digest()  # memoized and stable


def test_the_rule_selects_the_lowering_and_compile_path_and_nothing_of_the_cli_or_cache():
    mods = set(LIVE_MODULES)
    # roots: whole packages, worker scripts included, and the code-object validator
    for m in ("rocke_aot.aot.lower.module", "rocke_aot.aot.lower.amdgpu", "rocke_aot.aot.families._conv_ir",
              "rocke_aot.aot.families.triton", "rocke_aot.aot.compiler._llvm_worker",
              "rocke_aot.aot.compiler.link", "rocke_aot.aot.compiler.options",
              "rocke_aot.aot.toolchains._triton24_worker", "rocke_aot.aot.toolchains._llvmlite_probe",
              "rocke_aot.aot.codeobject"):
        assert m in mods, m
    # reached through the closure: the vocabulary and the spec modules
    for m in ("rocke_aot.lanes", "rocke_aot.targets", "rocke_aot.arch", "rocke_aot.mma", "rocke_aot.dtypes",
              "rocke_aot.variants.problems", "rocke_aot.variants.conv", "rocke_aot.aot.toolchains.drift"):
        assert m in mods, m
    # the family folders (rocke_aot/families/<name>/) are found through entry points: no recipe module
    # imports them, each family's plan key covers its own folder (family_digest)
    assert not [m for m in mods if m.startswith("rocke_aot.families")]
    assert not [m for m in mods if m.startswith(("rocke_aot.cli", "rocke_aot.cache", "rocke_aot.service",
                                                 "rocke_aot.aot.builder"))]
    assert list(LIVE_MODULES) == sorted(LIVE_MODULES)


@pytest.mark.parametrize("module", LIVE_MODULES)
def test_a_one_byte_edit_of_a_recipe_module_moves_the_key(tree, module):
    base = recipe_digest(tree)
    path = _file(tree, module)
    with _Edit(path, path.read_bytes() + b"\n"):
        edited = recipe_digest(tree)
    assert edited != base
    assert _key(edited) != _key(base)
    assert recipe_digest(tree) == base  # restored


@pytest.mark.parametrize("path", ["cli/cache.py", "cli/main.py", "cache/store.py", "aot/builder/plan.py"])
def test_an_edit_off_the_compile_path_keeps_the_key(tree, path):
    pkg = {"cli": "rocke_aot.cli", "cache": "rocke_aot.cache", "aot": "rocke_aot.aot"}[path.split("/")[0]]
    f = tree[pkg].joinpath(*path.split("/")[1:])
    base = recipe_digest(tree)
    with _Edit(f, f.read_bytes() + b"\n# off the path\n"):
        assert recipe_digest(tree) == base
        assert _key(recipe_digest(tree)) == _key(base)


def test_an_import_inside_a_function_brings_its_module_in(tree):
    f = _file(tree, "rocke_aot.aot.lower.module")
    extra = b"\n\ndef _late():\n    from rocke_aot.cache import codec  # noqa\n    return codec\n"
    with _Edit(f, f.read_bytes() + extra):
        mods = recipe_modules(tree)
        assert "rocke_aot.cache.codec" in mods and "rocke_aot.cache" in mods
        c = tree["rocke_aot.cache"] / "codec.py"
        base = recipe_digest(tree)
        with _Edit(c, c.read_bytes() + b"\n"):
            assert recipe_digest(tree) != base


def test_a_new_module_in_a_root_package_is_covered(tree):
    new = tree["rocke_aot.aot"] / "families" / "tiny_new.py"
    new.write_text("X = 1\n")
    try:
        base = recipe_digest(tree)
        assert "rocke_aot.aot.families.tiny_new" in recipe_modules(tree)  # listed nowhere, still a root
        new.write_text("X = 2\n")
        assert recipe_digest(tree) != base
    finally:
        new.unlink()


def test_table_driven_dynamic_imports_are_followed(tree):
    # As aot/families (_FAMILY_MODULES, f"{__name__}.{mod_name}") and aot/toolchains
    # (KIND_MODULES.get(kind)) do, in a module the closure reaches (not a root itself).
    f = tree["rocke_aot.variants"] / "__init__.py"
    extra = (b"\nimport importlib\n_MODS = ('efficiency',)\n_KINDS = {'t': 'rocke_aot.variants.selection'}\n"
             b"def _load(kind):\n    for m in _MODS:\n        importlib.import_module(f'{__name__}.{m}')\n"
             b"    name = _KINDS.get(kind)\n    return importlib.import_module(name)\n")
    assert "rocke_aot.variants.efficiency" not in LIVE_MODULES and "rocke_aot.variants.selection" not in LIVE_MODULES
    with _Edit(f, f.read_bytes() + extra):
        mods = recipe_modules(tree)
    assert {"rocke_aot.variants.efficiency", "rocke_aot.variants.selection"} <= set(mods)


def test_an_unresolvable_dynamic_import_fails_closed(tree):
    f = _file(tree, "rocke_aot.aot.lower.nvptx")
    extra = b"\n\ndef _dyn(name):\n    import importlib\n    return importlib.import_module(name + '.x')\n"
    with _Edit(f, f.read_bytes() + extra):
        with pytest.raises(RecipeError, match=r"nvptx.py:\d+"):
            recipe_digest(tree)


def test_a_missing_module_on_the_path_fails_closed(tree):
    f = _file(tree, "rocke_aot.aot.lower.nvptx")
    with _Edit(f, f.read_bytes() + b"\nimport rocke_aot.aot.no_such_module  # noqa\n"):
        with pytest.raises(RecipeError, match="no_such_module"):
            recipe_digest(tree)


def test_package_dirs_must_name_every_package(tree):
    partial = {k: v for k, v in tree.items() if k != "rocke_aot.cli"}
    with pytest.raises(RecipeError, match="rocke_aot.cli"):
        recipe_digest(partial)
    assert set(PACKAGES) == set(tree)


def test_a_declared_dynamic_import_brings_in_its_whole_package(tree):
    # A loader doing import_module(a variable), restricted to one package, declares what it may import.
    f = tree["rocke_aot.variants"] / "__init__.py"
    extra = (b"\nimport importlib\n__recipe_imports__ = ('rocke_aot.cache',)\n"
             b"def _load(name):\n    return importlib.import_module(name)\n")
    with _Edit(f, f.read_bytes() + extra):
        mods = recipe_modules(tree)
    cache = {f"rocke_aot.cache.{p.stem}" for p in tree["rocke_aot.cache"].glob("*.py") if p.stem != "__init__"}
    assert not cache & set(LIVE_MODULES)
    assert cache and cache | {"rocke_aot.cache"} <= set(mods)


def test_the_closure_memo_is_read_only_for_the_tree_it_was_read_from(tree, tmp_home, monkeypatch):
    from rocke_aot.aot import recipe

    reads = []
    real = recipe._closure
    monkeypatch.setattr(recipe, "_closure", lambda t: reads.append(1) or real(t))
    base, mods = recipe_digest(tree), recipe_modules(tree)
    assert len(reads) == 1, "the second call reads the memo, not the ASTs"
    memos = list((tmp_home / "recipe").glob("*.json"))
    assert len(memos) == 1 and json.loads(memos[0].read_text())["modules"] == list(mods)
    # Any byte of any module of the tree (on the closure or not) is another tree: read again.
    off = tree["rocke_aot.cli"] / "main.py"
    with _Edit(off, off.read_bytes() + b"\n"):
        assert recipe_digest(tree) == base and len(reads) == 2
    # A memo that cannot be read, or names a module the tree lacks, is ignored (and rewritten).
    for bad in ("{not json", json.dumps({"modules": ["rocke_aot.aot.no_such_module"]})):
        memos[0].write_text(bad)
        n = len(reads)
        assert recipe_digest(tree) == base and recipe_modules(tree) == mods and len(reads) == n + 1
        assert json.loads(memos[0].read_text())["modules"] == list(mods)


FOLDER_FAMILIES = ("triton_attention", "gemm", "conv_direct_fwd", "conv_dgrad_patch", "triton_matmul", "triton_softmax")


@pytest.mark.parametrize("folder, module, family", [
    ("attention", "triton", "triton_attention"), ("attention", "triton_kernel", "triton_attention"),
    ("attention", "problem", "triton_attention"), ("attention", "reference", "triton_attention"),
    ("attention", "__init__", "triton_attention"),
    ("gemm", "spec", "gemm"), ("gemm", "counts", "gemm"), ("gemm", "lower_async", "gemm"),
    ("gemm", "lower_warpgroup", "gemm"), ("gemm", "__init__", "gemm"),
    ("conv_direct_fwd", "spec", "conv_direct_fwd"), ("conv_direct_fwd", "lower", "conv_direct_fwd"),
    ("conv_dgrad_patch", "table", "conv_dgrad_patch"), ("conv_dgrad_patch", "counts", "conv_dgrad_patch"),
    ("triton_matmul", "family", "triton_matmul"), ("triton_softmax", "__init__", "triton_softmax"),
])
def test_a_one_byte_edit_in_a_family_folder_moves_that_familys_key_only(folder, module, family):
    """rocke_aot/families/<name>/ (a family shipped as a plugin): its plan keys carry a digest over its
    folder (family_digest); recipe_digest() and every other family's digest stay (nothing imports it)."""
    from rocke_aot.aot import recipe

    path = Path(recipe.__file__).resolve().parents[1] / "families" / folder / f"{module}.py"
    assert "rocke_aot.families" in PACKAGES
    assert recipe.family_packages(family) == (f"rocke_aot.families.{folder}",)

    def digests() -> tuple[str, ...]:
        recipe._FAMILY_DIGESTS.clear()
        return (*(recipe.family_digest(f) for f in FOLDER_FAMILIES), recipe_digest())

    before = digests()
    old = path.read_bytes()
    try:
        path.write_bytes(old + b"#")
        after = digests()
    finally:
        path.write_bytes(old)
    moved = [f for f, a, b in zip(FOLDER_FAMILIES, after, before) if a != b]
    assert moved == [family]
    assert after[-1] == before[-1] and recipe_digest() not in before[:-1]  # every folder family: its own digest
    assert digests() == before
