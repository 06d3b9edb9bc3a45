"""Maintainer tooling stays apart from the product (devtools/__init__.py draws it).

- no module of the product layers imports devtools (read from the source: AST, every import
  statement at any depth, ``importlib.import_module`` of a literal too), so a wheel install,
  which does not carry devtools (tests/test_packaging.py), never misses it;
- no product module writes into the package's own data folders: the writers that used to
  (``golden.write``, ``characterize.write_recorded``) live in devtools, taking the paths they
  are given.
"""

from __future__ import annotations

import ast

from _product import ROOT, product_files, rel

from rocke_aot.aot import characterize, golden


def _imports(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
              in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)):
            yield str(node.args[0].value)


def test_no_product_module_imports_devtools():
    bad = []
    for path in product_files():
        for name in _imports(ast.parse(path.read_text(), rel(path))):
            if name == "devtools" or name.startswith("devtools."):
                bad.append(f"{rel(path)}: imports {name}")
    assert bad == []


def test_the_scan_sees_an_import_of_devtools():
    tree = ast.parse("def f():\n    from devtools import goldens\n    import importlib\n"
                     "    importlib.import_module('devtools.characterize')\n")
    assert [n for n in _imports(tree) if n.startswith("devtools")] == ["devtools", "devtools.characterize"]


def test_the_writers_left_the_product():
    assert not hasattr(golden, "write") and not hasattr(golden, "git_dirty") and not hasattr(golden, "build")
    assert not hasattr(characterize, "write_recorded")
    assert not (ROOT / "rocke_aot" / "aot" / "characterize_llvm24.py").exists()
    from devtools import characterize as ch_dev
    from devtools import goldens, llvm24_report

    assert callable(goldens.write) and callable(ch_dev.write_recorded) and callable(llvm24_report.main)
