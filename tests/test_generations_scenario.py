"""Issue 22's scenario: a partial rebuild under a changed recipe takes nothing out of service.

    gfx942 / llvm22 cache: gemm (8 fma specs) + conv_direct_fwd (3 ResNet 3x3 specs), real builds
    an edit that changes the recipe: a comment added to rocke_aot/lanes.py in a copy of the
        package folders; its real recipe digest (aot/recipe.py over that copy) is what the
        rebuild plans with
    rocke-aot build --family gemm (in process), while a real `rocke-aot serve` over the same
        store answers POST /v1/select for conv_direct_fwd and gemm in a loop
    -> every answer during and after the rebuild has the same conv kernels; gemm never empty
    -> the rebuild compiled nothing (the comment moved no IR: every code object was reused),
       and gemm is served from the new generation afterwards

On SQLite and PostgreSQL (tests/_pg.py store_url).
"""

from __future__ import annotations

import shutil
import threading
import time

import httpx
from _pg import pg_database, store_url  # noqa: F401
from _service import live_server

from rocke_aot.aot import builder, recipe
from rocke_aot.aot.builder import plan as plan_mod
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.service.selection import select
from rocke_aot.targets import Target

GFX942 = Target.parse("gfx942")
GEMM_WHERE = {"block_m": "64", "block_n": "64", "in_dtype": "f16", "out_dtype": "f32", "path": "fma"}
CONV_WHERE = {"c": "64", "k": "64", "r": "3", "s": "3", "dtype": "f16", "dil_h": "1", "stride_h": "1",
              "pad_h": "1", "tile_k": "32", "path": "fma", "tile_h": "4", "tile_w": "8"}
RESNET_3X3 = {"n": 8, "h": 56, "w": 56, "dtype": "f16", "c": 64, "k": 64, "r": 3, "s": 3, "stride_h": 1,
              "stride_w": 1, "pad_h": 1, "pad_w": 1, "dil_h": 1, "dil_w": 1}
GEMM_PROBLEM = {"m": 1024, "n": 1024, "k": 512, "dtype": "f16"}


def _build(store, family, where, llvm22):
    s = builder.build(arches=[GFX942], families=[family], lanes=[get_lane("llvm22")], store=store,
                      toolchains=[llvm22], where=where, jobs=2)
    assert s.ok, s["failed"]
    return s


def _digest_after_comment(tmp_path) -> str:
    """The real recipe digest of this code with one comment line added to rocke_aot/lanes.py."""
    dirs = recipe.default_package_dirs()
    copy = {}
    for pkg, src in dirs.items():
        dst = tmp_path / "edited" / pkg.replace(".", "_")
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.md"))
        copy[pkg] = dst
    lanes = copy["rocke_aot"] / "lanes.py"
    lanes.write_text(lanes.read_text() + "\n# a comment that shapes no byte\n")
    return recipe.recipe_digest(copy)


def _ask(base: str, family: str, problem) -> set[str]:
    r = httpx.post(base + "/v1/select", json={"arch": "gfx942", "family": family, "problem": problem,
                                              "limit": 50}, timeout=30)
    assert r.status_code == 200, r.text
    return {c["key"] for c in r.json()["accepted"]}


def test_rebuilding_gemm_under_a_new_recipe_keeps_conv_served(store_url, llvm22, tmp_path, monkeypatch):
    with Store.open(store_url) as store:
        _build(store, "gemm", GEMM_WHERE, llvm22)
        _build(store, "conv_direct_fwd", CONV_WHERE, llvm22)
        conv_before = {c.candidate.key for c in select(store, GFX942, "conv_direct_fwd", RESNET_3X3).accepted}
        gemm_before = {c.candidate.key for c in select(store, GFX942, "gemm", GEMM_PROBLEM).accepted}
        assert len(conv_before) == 3 and gemm_before
        old_blobs = {str(sorted(a.spec.items())): a.sha256 for a in store.find(family="gemm")}

    new_digest = _digest_after_comment(tmp_path)
    assert new_digest != recipe.recipe_digest()
    family_digest = plan_mod.family_digest  # gemm's recipe moves; conv's (its own folder's digest) does not
    monkeypatch.setattr(plan_mod, "family_digest", lambda family: new_digest if family == "gemm" else family_digest(family))

    answers: list[tuple[set[str], set[str]]] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    with live_server(store_url) as base:
        def poll():
            try:
                while not stop.is_set():
                    answers.append((_ask(base, "conv_direct_fwd", RESNET_3X3), _ask(base, "gemm", GEMM_PROBLEM)))
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)

        t = threading.Thread(target=poll)
        t.start()
        try:
            while not answers and not errors:
                time.sleep(0.05)
            with Store.open(store_url) as store:
                s = _build(store, "gemm", GEMM_WHERE, llvm22)
            during = len(answers)
            time.sleep(0.5)  # a few answers after the rebuild finished
            final_conv, final_gemm = _ask(base, "conv_direct_fwd", RESNET_3X3), _ask(base, "gemm", GEMM_PROBLEM)
        finally:
            stop.set()
            t.join()
    assert not errors, errors
    assert during >= 1 and len(answers) > during
    # No answer ever lost a conv kernel, or every gemm kernel.
    assert all(conv == conv_before for conv, _ in answers), [len(c) for c, _ in answers]
    assert all(gemm for _, gemm in answers)
    assert final_conv == conv_before
    # The comment moved the recipe digest (8 plan misses) but no IR: nothing compiled.
    assert s["to_build"] == 8 and s["built"] == 8 and s["reused"] == 8 and s["compiles"] == 0
    with Store.open(store_url) as store:
        new = {a.key: a for a in store.find(family="gemm") if a.recipe_digest == new_digest}
        assert set(new) == final_gemm and not final_gemm & gemm_before
        # the same code objects (bytes), now under the new plan keys
        assert {str(sorted(a.spec.items())): a.sha256 for a in new.values()} == old_blobs
        gens = {(g.family, g.recipe_digest): g for g in store.generations(arch="gfx942", lane="llvm22")}
        assert gens[("gemm", new_digest)].current and gens[("gemm", new_digest)].served == 8
        assert gens[("conv_direct_fwd", family_digest("conv_direct_fwd"))].served == 3
