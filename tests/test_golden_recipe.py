"""The goldens and the cache key agree: whatever moves a golden IR hash moves the recipe digest.

Two checks, both in subprocesses that import a COPY of the tree (as git sees it, symlinks kept:
tests/_tree.py), so nothing is patched in this process:

1. Lowering golden cases of a lane (the first four of every family on gfx942, gfx1250 and sm_90)
   imports only modules the recipe rule selects: an edit anywhere else cannot move a golden hash,
   and an edit inside moves the key.
2. One real IR-shaping edit (an implicit input the llvm22 profile disclaims, in the lane
   registry) moves a golden case's hash AND the recipe digest of the same copy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _tree import git_tree

from rocke_aot.aot import golden
from rocke_aot.aot.recipe import recipe_digest, recipe_modules

_PROBE = r"""
import json, sys
from rocke_aot.aot import golden
from rocke_aot import lanes
lane = lanes.get_lane("llvm22")
# the first N cases of every (family, arch) of three arches: every family's lowering and every kind of
# target in a few cases each (the rule's order alone would give one family's cases on one arch)
groups = {}
for c in golden.select_cases():
    if c.arch in ("gfx942", "gfx1250", "sm_90"):
        groups.setdefault((c.family, c.arch), []).append(c)
cases = [c for g in groups.values() for c in g[: int(sys.argv[1])]]
assert {f for f, _ in groups} == set(golden._golden_families()), groups.keys()
out = {c.id: golden.evaluate_case(c, lane).sha256 for c in cases}
mods = sorted(m for m in sys.modules if m.startswith("rocke_aot"))
print(json.dumps({"hashes": out, "modules": mods}))
"""


def _run(site: Path, n: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(n)], cwd=site, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _dirs(site: Path) -> dict[str, Path]:
    return {"rocke_aot": site / "rocke_aot", **{f"rocke_aot.{p}": site / "rocke_aot" / p
                                                 for p in ("aot", "cache", "variants", "service", "cli", "runner", "families")}}


def test_golden_lowering_imports_only_recipe_modules(tmp_path):
    site = git_tree(tmp_path / "site")
    got = _run(site, 4)
    selected = set(recipe_modules(_dirs(site)))
    # packages' __init__ modules that only hold other modules count as their package
    # rocke-aot's own family folders (rocke_aot/families/<name>) are keyed per family: family_digest
    # hashes the folder into that family's plan keys (tests/test_recipe.py), not the shared digest
    outside = [m for m in got["modules"] if m not in selected and m != "rocke_aot.aot.golden"
               and not any(s.startswith(m + ".") for s in selected)
               and m != "rocke_aot.families" and not m.startswith("rocke_aot.families.")]
    assert outside == [], f"golden lowering imported modules the recipe digest does not cover: {outside}"
    doc = golden.load()
    recorded = doc["lanes"]["llvm22"]["results"]
    # the copy lowers exactly what the golden file records (the copy is faithful)
    for cid, sha in got["hashes"].items():
        entry = recorded[cid]
        assert entry.get("sha256") == sha, cid


def test_an_ir_edit_moves_the_golden_hash_and_the_recipe_digest(tmp_path):
    site = git_tree(tmp_path / "site")
    before_digest = recipe_digest(_dirs(site))
    assert before_digest == recipe_digest()  # the copy is the live tree
    base = _run(site, 1)
    lanes_py = site / "rocke_aot" / "lanes.py"
    src = lanes_py.read_text()
    needle = '_AMDGPU_NO_INPUTS_LLVM22 = _AMDGPU_NO_INPUTS_LLVM20 + ("cluster-id-x", "cluster-id-y", "cluster-id-z")'
    assert needle in src
    lanes_py.write_text(src.replace(needle, needle.replace(', "cluster-id-z")', ")")))
    after = _run(site, 1)
    moved = [c for c in base["hashes"] if c.split("/")[1] != "sm_90" and base["hashes"][c] != after["hashes"][c]]
    assert moved, "the edit should change the IR of the AMDGPU golden cases"
    assert recipe_digest(_dirs(site)) != before_digest
