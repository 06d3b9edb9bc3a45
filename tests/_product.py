"""The product's folders and files, derived once from the package tree (no hand-kept list).

Every subpackage of ``rocke_aot/`` is a product folder; ``tests/test_layers.py`` checks that the
layer contracts in ``.importlinter`` name each of them, so a new folder cannot escape the
architecture tests. Paths are given relative to ``rocke_aot/`` (``aot/compiler/pool.py``,
``lanes.py``), the names the design documents use.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "rocke_aot"
SUBPACKAGES: tuple[str, ...] = tuple(sorted(
    p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()))


def product_files(package: Path = PACKAGE) -> list[Path]:
    """Every module of the product, sorted."""
    return sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path, package: Path = PACKAGE) -> str:
    """``path`` relative to the package folder, as the docs name it."""
    return path.relative_to(package).as_posix()
