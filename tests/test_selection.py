"""Selection over what the cache holds: the hand-worked example of docs/selection.md, the
lane policy, generations, named errors, and every spec of every variant table.

Expected numbers are computed by hand (docs/selection.md shows the arithmetic), never by
calling the code under test.
"""

from __future__ import annotations

import json

import pytest
from _pg import pg_database, store_url  # noqa: F401
from _selstore import put_fake

from rocke_aot.arch import ARCHES
from rocke_aot.cache.generations import generation_id
from rocke_aot.cache.keys import canonical_json
from rocke_aot.cache.store import Store
from rocke_aot.candidates import groups_per_cu, occupancy
from rocke_aot.errors import LaneError, SpecError
from rocke_aot.service.selection import select
from rocke_aot.targets import Target
from rocke_aot.variants import selection as S
from rocke_aot.variants import table
from rocke_aot.variants.problems import ConvProblem, GemmProblem, PatchDgradProblem

DEVICE = "gfx942:sramecc+:xnack-"
PROBLEM = {"m": 1000, "n": 1000, "k": 512, "dtype": "f16"}

# the built-in families lowered to LLVM IR (gemm: a family folder, rocke_aot/families/gemm, entry points)
NATIVE = ("gemm", "conv_direct_fwd", "conv_dgrad_patch")


def gemm(**kw):
    base = dict(in_dtype="f16", out_dtype="f32", block_m=64, block_n=64, block_k=32, waves=4, path="fma",
                double_buffer=False, vector_width=4, mma="auto")
    base.update(kw)
    return base


def _example_store(url):
    """The eight artifacts of docs/selection.md's worked example."""
    store = Store.open(url)
    # F: A's spec from an older build (d0), shadowed once d1 completes (A replaces it)
    put_fake(store, "gfx942", "llvm22", "gemm", gemm(), digest="d0", vgprs=64)
    arts = {
        "A": put_fake(store, "gfx942", "llvm22", "gemm", gemm(), vgprs=128, sgprs=40, lds=8192, workgroup=256),
        "B": put_fake(store, "gfx942", "llvm24", "gemm", gemm(), vgprs=96, sgprs=40, lds=8192, workgroup=256),
        "C": put_fake(store, "gfx942:xnack-", "llvm22", "gemm", gemm(double_buffer=True), vgprs=48, sgprs=40,
                      lds=16384, workgroup=256),
        "D": put_fake(store, "gfx942", "llvm22", "gemm", gemm(block_m=128, block_n=128), vgprs=200),
        "E": put_fake(store, "gfx942:xnack+", "llvm22", "gemm", gemm(block_m=32, block_n=32, waves=2)),
        "G": put_fake(store, "gfx942", "llvm22", "gemm", gemm(in_dtype="bf16", out_dtype="bf16")),
        "H": put_fake(store, "gfx942", "llvm22", "gemm", gemm(block_m=32, block_n=32, waves=2), vgprs=32, sgprs=90,
                      lds=4096, workgroup=128),
    }
    # The build of digest d1 finished: gfx942/llvm22 moves from d0's generation to d1's.
    gen1 = generation_id("gfx942", "llvm22", "gemm", "d1", canonical_json({"kind": "fake", "llvm": "22.1.0"}))
    store.complete_generation(gen1)
    stale = [a for a in store.find(arch="gfx942", lane="llvm22", family="gemm") if a.recipe_digest == "d0"][0]
    arts["F"] = stale
    return store, arts


def test_hand_worked_example(store_url):
    store, arts = _example_store(store_url)
    with store:
        sel = select(store, DEVICE, "gemm", json.dumps(PROBLEM), min_efficiency=0.5, model="efficiency")
    key_of = {a.key: name for name, a in arts.items()}
    # equal efficiency and path: bytes staged per MAC first (64x64 reuses more than 32x32), then occupancy
    assert [key_of[c.candidate.key] for c in sel.accepted] == ["B", "C", "H"]
    assert [c.reuse for c in sel.accepted] == pytest.approx([(64 + 64) * 32 * 2 / (64 * 64 * 32)] * 2
                                                            + [(32 + 32) * 32 * 2 / (32 * 32 * 32)])
    # 64x64 and 32x32 tiles: (1000/1024)^2 * 16/19 (hand arithmetic in docs/selection.md)
    want = (1000 / 1024) ** 2 * 16 / 19
    for c in sel.accepted:
        assert c.efficiency.total == pytest.approx(want, rel=1e-12)
        assert c.efficiency.total == pytest.approx(0.8030941611842105, rel=1e-12)
    assert [c.candidate.occupancy for c in sel.accepted] == [5, 4, 8]
    reasons = {key_of[r.candidate.key]: r.reason for r in sel.rejected}
    assert reasons == {"A": S.OTHER_LANE, "D": S.BELOW_FLOOR, "E": S.INCOMPATIBLE, "F": S.STALE,
                       "G": S.NOT_ACCEPTED}
    d = next(r for r in sel.rejected if key_of[r.candidate.key] == "D")
    assert "0.2008" in d.detail and "CU 0.2105" in d.detail  # (1000/1024)^2 * 4/19, CU 64/304
    g = next(r for r in sel.rejected if key_of[r.candidate.key] == "G")
    assert "dtype" in g.detail and "bf16" in g.detail
    assert sel.accepted[2].candidate.resources.vgprs == 32  # read from the stored metadata
    assert sel.model == "efficiency" and sel.as_dict()["model"] == "efficiency"


def test_lanes_restrict_and_limit(store_url):
    store, arts = _example_store(store_url)
    with store:
        sel = select(store, DEVICE, "gemm", PROBLEM, lanes=["llvm22"], min_efficiency=0.5, limit=1,
                     model="efficiency")
    key_of = {a.key: name for name, a in arts.items()}
    # A is no longer out-laned: A and C tie on efficiency, reuse and occupancy (4), so the key decides
    assert [key_of[c.candidate.key] for c in sel.accepted] == [min(("A", "C"), key=lambda n: arts[n].key)]
    assert sel.beyond_limit == 2  # the other one and H follow
    assert "B" not in {key_of.get(r.candidate.key) for r in sel.rejected}  # llvm24 never fetched


def test_ranking_is_deterministic_under_permutation(store_url):
    store, _ = _example_store(store_url)
    with store:
        cands = store.candidates("gemm", DEVICE, compatible_only=False)
    problem = GemmProblem(1000, 1000, 512)
    first = S.rank(cands, problem, Target.parse(DEVICE), min_efficiency=0.5)
    assert len(cands) > 3 and len(first.accepted) >= 2  # an order to keep: empty lists compare equal
    for perm in (list(reversed(cands)), cands[3:] + cands[:3]):
        again = S.rank(perm, problem, Target.parse(DEVICE), min_efficiency=0.5)
        assert [c.candidate.key for c in again.accepted] == [c.candidate.key for c in first.accepted]
        assert [(r.candidate.key, r.reason) for r in again.rejected] == \
               [(r.candidate.key, r.reason) for r in first.rejected]


@pytest.mark.parametrize("kw,err,names", [
    (dict(family="gemmm"), SpecError, ["family", "gemm", "conv_direct_fwd", "conv_dgrad_patch"]),
    (dict(target="gfx943"), SpecError, ["gfx943", "gfx942", "gfx950"]),
    (dict(lanes=["llvm21"]), LaneError, ["llvm21", "llvm22", "llvm24"]),
    (dict(problem='{"m": 1, "n": 1}'), SpecError, ["k"]),
    (dict(problem='{"m": 1, "n": 1, "k": 1, "q": 2}'), SpecError, ["q"]),
    (dict(problem="{not json"), SpecError, ["problem"]),
    (dict(min_efficiency=1.5), SpecError, ["min_efficiency"]),
])
def test_named_errors(tmp_path, kw, err, names):
    args = dict(target=DEVICE, family="gemm", problem=PROBLEM)
    lanes = kw.pop("lanes", None)
    floor = kw.pop("min_efficiency", None)
    args.update(kw)
    with Store.open(tmp_path / "c.sqlite") as store, pytest.raises(err) as ei:
        select(store, args["target"], args["family"], args["problem"], lanes=lanes, min_efficiency=floor)
    for n in names:
        assert n in str(ei.value)


def test_occupancy_by_hand():
    gfx942, gfx1250 = ARCHES["gfx942"], ARCHES["gfx1250"]
    # 512 VGPRs per lane, granule 8: 100 -> 104 allocated -> 4 waves
    assert occupancy(gfx942, vgprs=100, sgprs=30, lds_bytes=0, workgroup_size=256) == 4
    # SGPR table (GFX9): 102 SGPRs -> 7 waves, under VGPR's 8
    assert occupancy(gfx942, vgprs=16, sgprs=102, lds_bytes=0, workgroup_size=256) == 7
    # LDS: 65536 // 40000 = 1 group of 1024/64 = 16 waves over 4 SIMDs -> 4
    assert occupancy(gfx942, vgprs=16, sgprs=16, lds_bytes=40000, workgroup_size=1024) == 4
    # gfx1250 wave32: 1024 VGPRs, granule 16: 200 -> 208 -> 4 waves; SGPRs never limit
    assert occupancy(gfx1250, vgprs=200, sgprs=106, lds_bytes=0, workgroup_size=256) == 4
    # sm_90 (CUDA C Programming Guide, cc 9.0): 64K registers per SM = 512 per lane of each of 4
    # sub-partitions, allocated per warp in 256s (8 per thread); 16 warps per sub-partition.
    sm90 = ARCHES["sm_90"]
    assert occupancy(sm90, vgprs=32, sgprs=0, lds_bytes=0, workgroup_size=256) == 16  # 512 // 32 = 16
    # 95 -> 96 registers: 512 // 96 = 5 warps per sub-partition
    assert occupancy(sm90, vgprs=95, sgprs=0, lds_bytes=10752, workgroup_size=128) == 5
    # groups per SM: 5 x 4 = 20 warps // 4 per block = 5 blocks; shared 228 KB // (10752 + 1 KB reserved) = 19
    assert groups_per_cu(sm90, vgprs=95, sgprs=None, lds_bytes=10752, workgroup_size=128) == 5
    # shared-limited: 40 KiB + 1 KiB -> 228 KB // 41 KB = 5; registers 32 -> 16 x 4 // 8 = 8
    assert groups_per_cu(sm90, vgprs=32, sgprs=None, lds_bytes=40 * 1024, workgroup_size=256) == 5
    # block-limited: 32 threads, 16 registers, no shared memory: 64 warps would allow 64, the cap is 32
    assert groups_per_cu(sm90, vgprs=16, sgprs=None, lds_bytes=0, workgroup_size=32) == 32
    # warp-limited: 1024 threads = 32 warps, 32 registers: 64 // 32 = 2
    assert groups_per_cu(sm90, vgprs=32, sgprs=None, lds_bytes=0, workgroup_size=1024) == 2
    # 255 registers -> 256: 512 // 256 = 2 warps per sub-partition = 8 warps: 8 // 4 = 2 blocks of 128
    assert groups_per_cu(sm90, vgprs=255, sgprs=None, lds_bytes=0, workgroup_size=128) == 2


# -- every spec of every variant table ------------------------------------------------------------

def _flip(dtype: str) -> str:
    return "bf16" if dtype == "f16" else "f16"


# family -> (a problem the spec serves, a problem it cannot serve, the reason's field)
PROBLEMS = {
    "gemm": (lambda s: GemmProblem(4 * s.block_m, 4 * s.block_n, 256, s.in_dtype, s.out_dtype),
             lambda s: GemmProblem(4 * s.block_m, 4 * s.block_n, 256, _flip(s.in_dtype)), "dtype"),
    "conv_direct_fwd": (
        lambda s: ConvProblem(1, 32, 32, s.c, s.k, s.r, s.s, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
                              s.dil_h, s.dil_w, s.dtype),
        lambda s: ConvProblem(1, 32, 32, 2 * s.c, s.k, s.r, s.s, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
                              s.dil_h, s.dil_w, s.dtype), "input channels C"),
    "conv_dgrad_patch": (lambda s: PatchDgradProblem(1, 8 * s.p, 8 * s.p, s.c, 64, s.p, s.dtype),
                         lambda s: PatchDgradProblem(1, 8 * s.p, 8 * s.p, s.c, 64, s.p, _flip(s.dtype)), "dtype"),
}


@pytest.fixture(scope="module")
def table_store(tmp_path_factory):
    """Every spec of every family's gfx942/llvm22 grid, one fake artifact each."""
    store = Store.open(tmp_path_factory.mktemp("tables") / "c.sqlite")
    for fam in NATIVE:  # PROBLEMS below are theirs (plugins: tests/test_plugins.py)
        for spec in table.enumerate_specs(fam, "gfx942", "llvm22"):
            put_fake(store, "gfx942", "llvm22", fam, spec.to_dict())
    yield store
    store.close()


def test_every_family_has_a_problem_builder():
    assert set(PROBLEMS) == set(NATIVE)


@pytest.mark.parametrize("family", sorted(PROBLEMS))
def test_each_spec_selected_by_a_problem_it_serves(table_store, family):
    serve, refuse, field = PROBLEMS[family]
    cands = table_store.candidates(family, DEVICE)
    specs = list(table.enumerate_specs(family, "gfx942", "llvm22"))
    assert len(cands) == len(specs) > 0
    by_spec = {canonical_json(dict(c.spec)): c for c in cands}
    for spec in specs:
        c = by_spec[canonical_json(spec.to_dict())]
        ok = S.rank(cands, serve(spec), Target.parse(DEVICE))
        assert c.key in {ch.candidate.key for ch in ok.accepted}, spec
        bad = S.rank([c], refuse(spec), Target.parse(DEVICE))
        assert not bad.accepted
        (rej,) = bad.rejected
        assert rej.reason == S.NOT_ACCEPTED and rej.detail.startswith(field), rej.detail


@pytest.mark.parametrize("family", sorted(PROBLEMS))
def test_select_through_the_store(table_store, family):
    serve, _, _ = PROBLEMS[family]
    spec = list(table.enumerate_specs(family, "gfx942", "llvm22"))[0]
    sel = select(table_store, DEVICE, family, serve(spec), model="efficiency")
    assert spec in {c.spec for c in sel.accepted}
    assert all(a.efficiency.total >= b.efficiency.total for a, b in zip(sel.accepted, sel.accepted[1:]))
    timed = select(table_store, DEVICE, family, serve(spec))  # gfx942 has hardware facts: by estimate
    assert timed.model == "hardware" and timed.note is None
    est = [c.estimate_ms for c in timed.accepted]
    assert all(e is not None for e in est) and est == sorted(est)
    assert {c.bound for c in timed.accepted} <= {"compute", "issue", "lds", "memory", "latency"}


def test_a_matrix_path_beats_fma_at_equal_efficiency(tmp_path):
    # Same tile (so equal tile efficiency); the fma kernel has the higher occupancy, which
    # alone would put it first. The matrix unit's peak is several times the FMA path's on
    # every wired arch, so the mfma kernel must rank first (docs/bench.md measures why).
    store = Store.open(tmp_path / "c.sqlite")
    fma = put_fake(store, "gfx942", "llvm22", "gemm", gemm(), vgprs=32, workgroup=256)
    mfma = put_fake(store, "gfx942", "llvm22", "gemm", gemm(path="mfma"), vgprs=200, workgroup=256)
    sel = select(store, DEVICE, "gemm", PROBLEM, model="efficiency")
    keys = [c.key for c in sel.accepted]
    assert keys.index(mfma.key) < keys.index(fma.key)
    assert sel.accepted[0].efficiency.total == sel.accepted[1].efficiency.total
    assert sel.accepted[1].candidate.occupancy > sel.accepted[0].candidate.occupancy
    store.close()
