"""The fast select path (cached candidate lists and rankings) against the straightforward one,
and its invalidation: a write anywhere (another Store, another process, this Store) is seen by
the very next select.

    reference   a fresh Store (no memo), rank() with the variant module's spec and verdict
                caches emptied: everything recomputed from the rows
    under test  select() on one long-lived read-only Store, asked each question twice (the
                second answer comes from the caches)
"""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from _selstore import fake_inputs, put_fake

from rocke_aot.cache.generations import generation_of
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.service.selection import parse_problem, select
from rocke_aot.targets import Target
from rocke_aot.variants import selection as S
from rocke_aot.variants import table

DEVICE = "gfx942:sramecc+:xnack-"
ARCHES = {("gfx942", "llvm22"): "gfx942", ("gfx942", "llvm24"): "gfx942:xnack-",
          ("gfx942", "llvm24x"): "gfx942:xnack+"}  # the last: incompatible with DEVICE (lane llvm24)
PROBLEMS = {  # the bench's problems and gemm variations (odd sizes, another dtype)
    "gemm": [{"m": 4096, "n": 4096, "k": 4096, "dtype": "f16"}, {"m": 1000, "n": 1000, "k": 512, "dtype": "f16"},
             {"m": 77, "n": 4097, "k": 64, "dtype": "bf16"}],
    "conv_direct_fwd": [{"n": 8, "h": 56, "w": 56, "c": 64, "k": 64, "r": 3, "s": 3, "stride_h": 1, "stride_w": 1,
                         "pad_h": 1, "pad_w": 1, "dtype": "f16"}],
    "conv_dgrad_patch": [{"n": 8, "h": 224, "w": 224, "c": 3, "k": 768, "p": 16, "dtype": "f16"}],
}


def _fill(store: Store) -> None:
    for (proc, lane), arch in ARCHES.items():
        lane = lane.rstrip("x")
        for digest in ("gen-a", "gen-b"):
            for fam in table.family_names():
                for i, spec in enumerate(table.enumerate_specs(fam, proc, lane)):
                    if i % 3 and arch == "gfx942:xnack+":
                        continue  # a third is enough to be rejected as incompatible
                    put_fake(store, arch, lane, fam, spec.to_dict(), digest=digest,
                             vgprs=24 + 8 * (i % 20), sgprs=20 + (i % 90), lds=1024 * (i % 32))
                store.complete_generation(generation_of(fake_inputs(arch, lane, fam, spec.to_dict(), digest)))


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("fastsel") / "c.sqlite"
    with Store.open(path) as store:
        _fill(store)
    return path


def _reference(path, family, problem, **kw):
    """Everything recomputed: a new Store, the variant module's caches emptied."""
    S._SPECS.clear()
    S.clear_verdicts()
    explain = kw.pop("explain")
    limit = kw.pop("limit")
    with Store.open(path, readonly=True) as fresh:
        cands = fresh.candidates(family, DEVICE, kw["lanes"], compatible_only=not explain, current_only=not explain)
        lanes = None if kw["lanes"] is None else [get_lane(x) for x in kw["lanes"]]
        r = S.rank(list(cands), parse_problem(family, problem), Target.parse(DEVICE),
                   min_efficiency=kw["min_efficiency"], lanes=lanes)
    acc = r.accepted if limit is None else r.accepted[:limit]
    return [c.as_dict() for c in acc], [x.as_dict() for x in r.rejected]


CASES = [(fam, i, explain, lanes, floor, limit)
         for fam, probs in PROBLEMS.items() for i in range(len(probs))
         for explain, lanes, floor, limit in itertools.product((True, False), (None, ("llvm22",)), (0.0, 0.5),
                                                               (None, 3))]


@pytest.mark.parametrize("family,i,explain,lanes,floor,limit", CASES)
def test_fast_select_equals_recomputed(store_path, family, i, explain, lanes, floor, limit):
    problem = PROBLEMS[family][i]
    want = _reference(store_path, family, problem, explain=explain, lanes=lanes, min_efficiency=floor, limit=limit)
    with Store.open(store_path, readonly=True) as store:
        for _ in range(2):  # the second from the caches
            sel = select(store, DEVICE, family, problem, lanes=lanes, min_efficiency=floor, limit=limit,
                         explain=explain)
            assert ([c.as_dict() for c in sel.accepted], [r.as_dict() for r in sel.rejected]) == want
    assert want[0] and want[1]  # the comparison is not vacuous: both lists have entries


def test_unchanged_store_answers_from_the_caches(store_path):
    with Store.open(store_path, readonly=True) as store:
        p = PROBLEMS["gemm"][0]
        a, b = select(store, DEVICE, "gemm", p), select(store, DEVICE, "gemm", p)
        assert a.accepted is b.accepted  # the same Ranking, not recomputed
        assert store.candidates("gemm", DEVICE) is store.candidates("gemm", DEVICE)


def _keys(sel):
    return {c.key for c in sel.accepted}


def _generations(sel):
    return {(c.arch, c.lane): c.candidate.generation for c in sel.accepted}


@pytest.fixture()
def own_copy(store_path, tmp_path):
    path = tmp_path / "c.sqlite"
    path.write_bytes(store_path.read_bytes())
    return path


def _ref_back_to_gen_a(writer: Store) -> str:
    """gen-a completes again (a rebuild under its recipe): it serves every spec it has."""
    spec = next(iter(table.enumerate_specs("gemm", "gfx942", "llvm22"))).to_dict()
    gen_a = generation_of(fake_inputs("gfx942", "llvm22", "gemm", spec, "gen-a"))
    writer.complete_generation(gen_a)
    return gen_a


@pytest.mark.parametrize("explain", [True, False])
def test_ref_moved_by_another_store_is_seen(own_copy, explain):
    p = PROBLEMS["gemm"][1]
    with Store.open(own_copy, readonly=True) as reader, Store.open(own_copy) as writer:
        before = select(reader, DEVICE, "gemm", p, lanes=["llvm22"], explain=explain)
        select(reader, DEVICE, "gemm", p, lanes=["llvm22"], explain=explain)  # now cached
        gen_a = _ref_back_to_gen_a(writer)
        after = select(reader, DEVICE, "gemm", p, lanes=["llvm22"], explain=explain)
    assert _generations(before)[("gfx942", "llvm22")] != gen_a
    assert _generations(after)[("gfx942", "llvm22")] == gen_a
    assert _keys(before) != _keys(after)


def test_ref_moved_by_another_process_is_seen(own_copy):
    p = PROBLEMS["gemm"][1]
    with Store.open(own_copy, readonly=True) as reader:
        before = select(reader, DEVICE, "gemm", p, lanes=["llvm22"])
        select(reader, DEVICE, "gemm", p, lanes=["llvm22"])
        code = ("import sys; sys.path.insert(0, 'tests'); from test_select_fast import _ref_back_to_gen_a; "
                "from rocke_aot.cache.store import Store\n"
                f"with Store.open({str(own_copy)!r}) as w: print(_ref_back_to_gen_a(w))")
        gen_a = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                               cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1])).stdout.strip()
        after = select(reader, DEVICE, "gemm", p, lanes=["llvm22"])
    assert _generations(before)[("gfx942", "llvm22")] != gen_a
    assert _generations(after)[("gfx942", "llvm22")] == gen_a


def _new_spec():
    """A gemm spec outside the table's grid, in the current generation (a top-up build)."""
    spec = next(iter(table.enumerate_specs("gemm", "gfx942", "llvm22"))).to_dict()
    return {**spec, "block_m": 16, "block_n": 16}


@pytest.mark.parametrize("same_store", [True, False])
def test_put_into_the_current_generation_is_seen(own_copy, same_store):
    p = {"m": 16, "n": 16, "k": 4096, "dtype": "f16"}  # 16x16 tiles fit it exactly
    with Store.open(own_copy) as store, Store.open(own_copy) as other:
        # the efficiency order, under which the new spec is the best (the test is about the cache)
        before = select(store, DEVICE, "gemm", p, limit=1, model="efficiency")
        select(store, DEVICE, "gemm", p, limit=1, model="efficiency")
        writer = store if same_store else other
        art = put_fake(writer, "gfx942", "llvm24", "gemm", _new_spec(), digest="gen-b", vgprs=24)
        after = select(store, DEVICE, "gemm", p, limit=1, model="efficiency")
    assert art.key not in _keys(before)
    assert after.best.key == art.key


def test_gc_of_the_served_generation_is_seen(own_copy):
    p = PROBLEMS["gemm"][0]
    with Store.open(own_copy, readonly=True) as reader, Store.open(own_copy) as writer:
        before = select(reader, DEVICE, "gemm", p, lanes=["llvm22"])
        select(reader, DEVICE, "gemm", p, lanes=["llvm22"])
        gen_a = _ref_back_to_gen_a(writer)
        writer.gc_generations(keep=0)  # gen-b of gfx942/llvm22 gemm served nothing: gone now
        after = select(reader, DEVICE, "gemm", p, lanes=["llvm22"], explain=True)
    assert {c.candidate.generation for c in before.accepted} != {gen_a}
    assert {c.candidate.generation for c in after.accepted} == {gen_a}
    assert not _keys(before) & {r.key for r in after.rejected}
