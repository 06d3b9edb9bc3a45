"""Planning: fast keys equal the canonical keys; stale inputs never hit; Dask gives the same bytes."""

from __future__ import annotations

import dataclasses

import pytest

from rocke_aot.aot.builder import build, make_plan
from rocke_aot.aot.builder.plan import choose_lanes, parse_where, spec_json
from rocke_aot.cache.keys import KeyInputs, KeyTemplate, artifact_key, canonical_json
from rocke_aot.cache.store import Store
from rocke_aot.errors import SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target
from rocke_aot.variants import table

TINY = {"block_m": 32, "block_n": 32, "block_k": 32, "in_dtype": "f16", "out_dtype": "f32",
        "double_buffer": False, "path": "fma"}


@pytest.mark.parametrize("family,arch,lane", [("gemm", "gfx942", "llvm22"), ("gemm", "gfx1250", "llvm22"),
                                              ("conv_dgrad_patch", "gfx950", "llvm20")])
def test_template_keys_equal_canonical_keys_over_whole_grid(family, arch, lane):
    ident = {"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "LLD 22.1.8"}
    lane_ = get_lane(lane)
    opts = {"speed_level": 3, "ld.lld": ["-shared"]}
    tpl = KeyTemplate(arch, lane, lane_.profile_name, family, "digest", ident, opts)
    specs = list(table.enumerate_specs(family, arch, lane))
    assert specs
    for spec in specs:
        sj = spec_json(spec)
        assert sj == canonical_json(spec.to_dict())
        assert tpl.key(sj) == artifact_key(KeyInputs(arch, lane, lane_.profile_name, family, spec.to_dict(), "digest",
                                                     ident, opts))


def _plan(store, tcs, **kw):
    return make_plan(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")], toolchains=tcs,
                     store=store, where=TINY, **kw)


class _OtherLinker:
    """The real llvm22 toolchain under a different linker identity (as after an ld.lld upgrade)."""

    def __init__(self, tc):
        self.tc = tc
        self.kind = tc.kind

    def detect(self):
        return self.tc.detect()

    def core_identity(self):
        return self.tc.core_identity()

    def identity(self, target):
        return {**self.tc.identity(target), "linker": "LLD 99.0.0"}

    def compile_options(self, target):
        return self.tc.compile_options(target)

    def compile(self, *a, **kw):
        return self.tc.compile(*a, **kw)


def test_changed_toolchain_identity_misses_every_key(tmp_path, llvm22):
    with Store.open(tmp_path / "c.sqlite") as store:
        s = build(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")], store=store,
                  toolchains=[llvm22], where=TINY)
        assert s["built"] == 2 and s.exit_code == 0
        assert not _plan(store, [llvm22]).to_build
        stale = _plan(store, [_OtherLinker(llvm22)])
        assert len(stale.to_build) == 2 and not stale.cached  # never served from the old linker's bytes


def test_where_filters_and_rejects_unknown_fields(tmp_path, llvm22):
    with Store.open(tmp_path / "c.sqlite") as store:
        assert _plan(store, [llvm22]).planned == 2
        with pytest.raises(SpecError, match="no field 'colour'"):
            make_plan(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")],
                      toolchains=[llvm22], store=store, where={"colour": "red"})
    # syntax only here; the values are typed per family by where_for (tests/test_cli.py)
    assert parse_where(["path=fma", "block_m=64", "double_buffer=false"]) == {
        "path": "fma", "block_m": "64", "double_buffer": "false"}
    with pytest.raises(SpecError):
        parse_where(["block_m"])


def test_choose_lanes_defaults_to_lanes_with_toolchains_and_skips_by_name(all_toolchains):
    chosen, skips = choose_lanes([], all_toolchains)
    assert {"llvm20", "llvm22"} <= set(chosen) and not skips
    # every lane has a toolchain on a set-up host: take llvm23's away to see the named skip
    others = [tc for tc in all_toolchains if tc.detect().lane != "llvm23"]
    assert len(others) < len(all_toolchains)
    chosen, skips = choose_lanes([get_lane("llvm23"), get_lane("llvm22")], others)
    assert list(chosen) == ["llvm22"] and [s.reason for s in skips] == [
        "llvm23: no LLVM 23 toolchain on this host (see `rocke-aot toolchain install llvm23`)"]


def test_dask_local_cluster_builds_same_keys_and_bytes(tmp_path, llvm22):
    distributed = pytest.importorskip("distributed", reason="installed by the test extra")
    from rocke_aot.aot.builder.dask_backend import dask_submitter

    args = dict(arches=[Target.parse("gfx942")], families=["gemm"], lanes=[get_lane("llvm22")], toolchains=[llvm22], where=TINY)
    with Store.open(tmp_path / "local.sqlite") as local:
        build(store=local, **args)
        want = {a.key: local.get(a.key).sha256 for a in local.find()}
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, Store.open(tmp_path / "dask.sqlite") as remote:
        s = build(store=remote, submit=dask_submitter(client, timeout=300), **args)
        assert s["built"] == 2 and s.exit_code == 0
        got = {a.key: remote.get(a.key).sha256 for a in remote.find()}
    assert got == want and len(want) == 2


def test_dask_workers_refuse_a_job_planned_under_another_recipe(tmp_path, llvm22):
    distributed = pytest.importorskip("distributed", reason="installed by the test extra")
    from rocke_aot.aot.builder import execute
    from rocke_aot.aot.builder.dask_backend import WorkerRefused, dask_submitter, remote_build
    from rocke_aot.aot.recipe import family_digest, recipe_digest

    gfx942 = Target.parse("gfx942")
    ident, opts = llvm22.identity(gfx942), llvm22.compile_options(gfx942)
    other = "0" * 64
    assert other != recipe_digest()
    # The function the worker runs, called directly: refused before any toolchain is touched.
    with pytest.raises(WorkerRefused, match="recipe digest"):
        remote_build("gemm", TINY | {"block_k": 32}, "gfx942", "llvm22", ident, other, opts, 60)
    with pytest.raises(WorkerRefused, match="options"):
        remote_build("gemm", TINY | {"block_k": 32}, "gfx942", "llvm22", ident, family_digest("gemm"),
                     {**opts, "speed_level": 2}, 60)
    with Store.open(tmp_path / "c.sqlite") as store:
        plan = _plan(store, [llvm22])
        assert len(plan.to_build) == 2
        for job in plan.to_build:  # as if the driver ran other lowering code than the workers
            job.template.proto = dataclasses.replace(job.template.proto, recipe_digest=other)
        with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                      dashboard_address=None) as cluster, distributed.Client(cluster) as client:
            out = execute(plan, store, submit=dask_submitter(client, timeout=120))
        assert not out.built and len(out.failed) == 2
        assert all("WorkerRefused" in msg and "recipe digest" in msg for _, msg in out.failed)
        # a refusal says nothing about the key: nothing is cached, the next build retries
        assert store.stats().failures == 0 and store.stats().artifacts == 0
