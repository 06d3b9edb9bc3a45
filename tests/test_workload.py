"""Workload-driven grids: `build --problems` builds a model's layers, the default lists stay the
main job's, and selection says "no candidate: build with --problems" with the command.

References the code under test did not produce: the ResNet-50 layer shapes of He et al. 2015
(Table 1) and the ViT-B/16 configuration of Dosovitskiy et al. 2020 (Table 1), transcribed
here; the default layers as docs/variants.md lists them; the main job's 772 specs per lane
(README, `bash scripts/run-main.sh`); LDS bytes and knob-grid sizes worked by hand; real
compiles by the llvm22 lane (one new ResNet layer on gfx942, three specs) read back from the store.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _bench import load_bench
from _selstore import put_fake
from fastapi.testclient import TestClient

from rocke_aot.aot.builder import Workload, build, make_plan
from rocke_aot.aot.builder.problems import load_problems
from rocke_aot.cache.store import Store
from rocke_aot.errors import IntegrityError
from rocke_aot.families.conv_direct_fwd.spec import ConvDirectFwdSpec
from rocke_aot.lanes import get_lane
from rocke_aot.service import schemas
from rocke_aot.service.app import create_app
from rocke_aot.service.client import parse_select
from rocke_aot.service.selection import select
from rocke_aot.targets import Target
from rocke_aot.variants import selection, table
from rocke_aot.variants.problems import ConvProblem, out_extent

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "bench" / "problems" / "models"
EXE = str(Path(sys.executable).with_name("rocke-aot"))
GFX942 = Target.parse("gfx942")


def _extractor():
    return load_bench("model_problems")


def _key(p: dict) -> tuple:
    return tuple(sorted(p.items()))


# -- the shipped model files against the papers ----------------------------------------------------

# He et al. 2015, Table 1, the 50-layer column: conv1 7x7, 64, stride 2 (output 112x112), a 3x3
# max pool of stride 2, then per stage (output size, [1x1, w; 3x3, w; 1x1, 4w] x blocks); the first
# block of conv3_x..conv5_x downsamples by 2, the shortcut is a 1x1 projection where the shape
# changes (option B). The stride sits on the 3x3 conv (v1.5, torchvision's ResNet-50).
TABLE_1 = (("conv2_x", 56, 64, 3), ("conv3_x", 28, 128, 4), ("conv4_x", 14, 256, 6), ("conv5_x", 7, 512, 3))
BATCH = 8


def _table_1_layers() -> tuple[set[tuple], dict[tuple, int]]:
    """The distinct conv layers of ResNet-50 from Table 1, and each one's stage output size."""
    out, sizes = set(), {}

    def add(h, c, k, r, stride, pad, out_size):
        p = {"n": BATCH, "h": h, "w": h, "c": c, "k": k, "r": r, "s": r, "stride_h": stride, "stride_w": stride,
             "pad_h": pad, "pad_w": pad, "dil_h": 1, "dil_w": 1, "dtype": "f16"}
        out.add(_key(p))
        sizes[_key(p)] = out_size

    add(224, 3, 64, 7, 2, 3, 112)  # conv1
    c_in, h_in = 64, 56  # after the max pool
    for _, size, w, blocks in TABLE_1:
        for b in range(blocks):
            stride = 2 if b == 0 and size != 56 else 1
            h = h_in if b == 0 else size
            add(h, c_in, w, 1, 1, 0, h)  # the first 1x1 keeps its input's size
            add(h, w, w, 3, stride, 1, size)
            add(size, w, 4 * w, 1, 1, 0, size)
            if b == 0:  # projection shortcut: 1x1, stride as the block
                add(h_in, c_in, 4 * w, 1, stride, 0, size)
            c_in = 4 * w
        h_in = size
    return out, sizes


def test_resnet50_file_is_table_1_of_he_et_al():
    doc = json.loads((MODELS / "resnet50.json").read_text())
    want, sizes = _table_1_layers()
    got = [_key(p) for p in doc["conv_direct_fwd"]]
    assert len(got) == len(set(got)) == len(want) == 23  # each distinct layer once
    assert set(got) == want
    for p in doc["conv_direct_fwd"]:  # every layer lands on its stage's output size (Table 1)
        assert out_extent(p["h"], p["r"], p["stride_h"], p["pad_h"], p["dil_h"]) == sizes[_key(p)]
    assert doc["gemm"] == [{"m": BATCH, "n": 1000, "k": 2048, "dtype": "f16"}]  # the 1000-way fc
    assert load_problems(MODELS / "resnet50.json")  # a valid --problems file


def test_vit_file_is_vit_b16_of_dosovitskiy_et_al():
    # Table 1 of the ViT paper, ViT-Base: 12 layers, hidden 768, MLP 3072, 12 heads; patch 16 on
    # 224x224: 14 x 14 = 196 patches + the class token = 197 tokens per image.
    doc = json.loads((MODELS / "vit_b16.json").read_text())
    tokens, d, mlp = BATCH * 197, 768, 3072
    gemm = {(BATCH * 196, d, 16 * 16 * 3),  # the patch embedding's forward, as its GEMM
            (tokens, 3 * d, d), (tokens, d, d), (tokens, mlp, d), (tokens, d, mlp),  # qkv, proj, fc1, fc2
            (BATCH, 1000, d)}  # the head, on the class token
    assert {(p["m"], p["n"], p["k"]) for p in doc["gemm"]} == gemm and len(doc["gemm"]) == len(gemm)
    assert doc["conv_dgrad_patch"] == [{"n": BATCH, "h": 224, "w": 224, "c": 3, "k": d, "p": 16, "dtype": "f16"}]
    assert load_problems(MODELS / "vit_b16.json")


def test_extractor_core_on_hand_written_layers():
    mp = _extractor()
    conv = {"kind": "conv2d", "name": "body", "input": [2, 64, 32, 32], "out_channels": 128, "kernel_size": [3, 3],
            "stride": [2, 2], "padding": [1, 1], "dilation": [1, 1], "groups": 1, "padding_mode": "zeros"}
    records = [
        conv, dict(conv, name="again"),  # the same layer twice: one problem
        dict(conv, name="dw", groups=64),
        dict(conv, name="same", padding="same"),
        dict(conv, name="circ", padding_mode="circular"),
        {"kind": "conv1d", "name": "c1", "input": [2, 8, 100]},
        {"kind": "conv2d", "name": "patch", "input": [1, 3, 224, 224], "out_channels": 1024, "kernel_size": [14, 14],
         "stride": [14, 14], "padding": [0, 0], "dilation": [1, 1], "groups": 1, "padding_mode": "zeros"},
        {"kind": "linear", "name": "fc", "input": [4, 10, 512], "out_features": 256},
    ]
    skipped: list[str] = []
    doc = mp.problems(records, "bf16", skipped)
    assert doc == {
        "conv_direct_fwd": [{"n": 2, "h": 32, "w": 32, "c": 64, "k": 128, "r": 3, "s": 3, "stride_h": 2,
                             "stride_w": 2, "pad_h": 1, "pad_w": 1, "dil_h": 1, "dil_w": 1, "dtype": "bf16"}],
        "conv_dgrad_patch": [{"n": 1, "h": 224, "w": 224, "c": 3, "k": 1024, "p": 14, "dtype": "bf16"}],
        # 16 x 16 patches of 14 x 14 x 3 = 588 values; a linear's rows are every leading dim: 4 x 10
        "gemm": [{"m": 256, "n": 1024, "k": 588, "dtype": "bf16"}, {"m": 40, "n": 256, "k": 512, "dtype": "bf16"}],
    }
    assert [s.split(":")[0] for s in skipped] == ["dw", "same", "circ", "c1"]
    assert "groups=64" in skipped[0] and "padding_mode='circular'" in skipped[2]
    assert load_problems(doc)  # every problem parses as its family's


# -- grids: a layer absent from the default list -------------------------------------------------

# docs/variants.md, "The grids": the default conv_direct_fwd layers that are ResNet-50 layers too
# (3x3/1 C64 K64, 1x1 C256 K64, the 7x7/2 C3 K64 stem).
DEFAULT_RESNET = {(64, 64, 3, 1), (256, 64, 1, 1), (3, 64, 7, 2)}


def _resnet() -> list[ConvProblem]:
    return load_problems(MODELS / "resnet50.json")["conv_direct_fwd"]


def test_a_layer_absent_from_the_default_list_gets_specs_with_its_parameters():
    probs = _resnet()
    specs, layers = table.workload_specs("conv_direct_fwd", GFX942, "llvm22", probs)
    default = list(table.enumerate_specs("conv_direct_fwd", GFX942, "llvm22"))
    assert list(specs[:len(default)]) == default  # the default grid first, unchanged
    assert len(layers) == 23
    assert {(g.baked["c"], g.baked["k"], g.baked["r"], g.baked["stride_h"]) for g in layers if g.default} \
        == DEFAULT_RESNET
    new = set(specs[len(default):])
    for g in layers:
        baked = {k: v for k, v in g.baked.items()}
        assert g.specs and all(s.baked() == baked for s in g.specs)  # the layer's own parameters
        # knobs on gfx942: tile_h {4, 8} x tile_w {8, 16} x tile_k {16, 32, 64} x c_chunk {8, 16, 32}
        # dividing C (C itself for C=3) x path {mfma, fma}
        chunks = len([x for x in (8, 16, 32) if baked["c"] % x == 0]) or 1
        assert g.points == 2 * 2 * 3 * chunks * 2
        assert sum(n for _, n in g.refused) == g.points - len(g.specs)
        assert all(reason and n > 0 for reason, n in g.refused)
        if g.default:
            assert set(g.specs) <= set(default)  # nothing new: the main job's specs, the same keys
        else:
            assert set(g.specs) <= new and not set(g.specs) & set(default)
        for s in g.specs:  # admitted = lays out on the arch (the lowering's own geometry)
            s.geometry(GFX942)


def test_refused_points_carry_the_tables_reasons():
    # conv4_x -> conv5_x: the 3x3 stride-2 C512 K512 layer. At tile 8 x 16, tile_k 64, c_chunk 32 the
    # halo is (8-1)*2+3 = 17 by (16-1)*2+3 = 33 pixels of 32 channels, the weights 64 x 9 x 32: 2 bytes
    # x (17952 + 18432) = 72768, + 4 of alignment = 72772 > 65536 (gfx942's static LDS).
    baked = dict(dtype="f16", c=512, k=512, r=3, s=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1, dil_h=1, dil_w=1)
    g = table.layer_grid("conv_direct_fwd", "gfx942", "llvm22", baked)
    assert not g.default and g.reason == ""
    why = dict(g.refused)
    assert why["conv_direct_fwd: needs about 72772 bytes of LDS, gfx942 allows 65536 static"] == 2  # mfma and fma
    assert ConvDirectFwdSpec(**baked, tile_h=8, tile_w=16, tile_k=64, c_chunk=32, path="fma") not in g.specs
    # a patch size the family has no kernel for: the whole layer is refused, with the spec's reason
    patch = table.layer_grid("conv_dgrad_patch", "gfx942", "llvm22", dict(dtype="f16", c=3, p=8))
    assert not patch.specs and patch.reason == "conv_dgrad_patch patch size p=8 not in (4, 14, 16)"
    # a refused (arch, lane) is the grid's reason, not an error
    assert table.layer_grid("conv_direct_fwd", "gfx1250", "llvm20", baked).reason == "LLVM 20 (llvm20) has no gfx1250 target"


# -- the plan: the main job unchanged, a default layer builds nothing new -------------------------

# The families the README's main-job figure counts (a plugin installed beside them adds its own).
NATIVE = ["gemm", "conv_direct_fwd", "conv_dgrad_patch"]


def test_main_job_plan_is_unchanged(tmp_path, llvm22):
    kw = dict(arches=[Target.parse("gfx1250")], families=NATIVE, lanes=[get_lane("llvm22")], toolchains=[llvm22])
    with Store.open(tmp_path / "c.sqlite") as store:
        before = make_plan(store=store, **kw)
        make_plan(store=store, workload=Workload(MODELS / "resnet50.json"), **kw)
        after = make_plan(store=store, **kw)
    assert before.planned == 772 and not before.layers  # README: 772 kernels per lane
    assert [j.key for j in after.to_build] == [j.key for j in before.to_build]  # a workload leaves no trace


def test_problems_plan_new_layers_and_reuse_the_default_keys(tmp_path, llvm22):
    with Store.open(tmp_path / "c.sqlite") as store:
        kw = dict(arches=[GFX942], families=["conv_direct_fwd"], lanes=[get_lane("llvm22")], toolchains=[llvm22], store=store)
        default = {j.key for j in make_plan(**kw).to_build}
        plan = make_plan(**kw, workload=Workload(MODELS / "resnet50.json"))
    keys = {j.key for j in plan.to_build}
    by_layer = {tuple(sorted(lp.grid.baked.items())): lp for lp in plan.layers}
    old = {j.key for j in plan.to_build if tuple(sorted(ConvDirectFwdSpec.from_dict(j.spec).baked().items()))
           in {k for k, lp in by_layer.items() if lp.grid.default}}
    assert old and old <= default  # the three default layers: the main job's keys
    assert not (keys - old) & default  # the twenty new ones: keys of their own
    assert len(keys) == sum(lp.serving for lp in plan.layers)  # no floor: every admitted spec serves
    assert all(lp.serving == len(lp.grid.specs) and lp.problems == 1 for lp in plan.layers)


# -- no candidate: build with --problems ----------------------------------------------------------

NEW_LAYER = {"n": 8, "h": 28, "w": 28, "c": 256, "k": 256, "r": 3, "s": 3, "stride_h": 2, "stride_w": 2,
             "pad_h": 1, "pad_w": 1}  # conv4_x's first 3x3 (ResNet-50), in no default list
DEFAULT_LAYER = {"n": 8, "h": 56, "w": 56, "c": 64, "k": 64, "r": 3, "s": 3, "stride_h": 1, "stride_w": 1,
                 "pad_h": 1, "pad_w": 1}


def test_no_candidate_names_the_build_command(tmp_path):
    with Store.open(tmp_path / "c.sqlite") as store:
        for spec in itertools.islice(table.enumerate_specs("conv_direct_fwd", GFX942, "llvm22"), 0, 400, 40):
            put_fake(store, "gfx942", "llvm22", "conv_direct_fwd", spec.to_dict())
        sel = select(store, "gfx942", "conv_direct_fwd", NEW_LAYER)
        assert not sel.accepted and sel.rejected
        assert {r.reason for r in sel.rejected} == {selection.NOT_ACCEPTED}
        nc = sel.no_candidate
        assert nc.kind == "build"
        assert nc.command == "rocke-aot build --arch gfx942 --family conv_direct_fwd --problems problems.json"
        assert nc.message.startswith("no candidate: the cache holds no conv_direct_fwd kernel baked for this problem "
                                     "(dtype=f16 c=256 k=256 r=3 s=3 stride_h=2")
        assert f"`{nc.command}`" in nc.message
        assert load_problems(nc.problems)["conv_direct_fwd"] == [ConvProblem(**NEW_LAYER)]
        # the answer keeps nothing per problem (a server is asked distinct problems at will)
        held = table._layer_grid.cache_info().currsize
        for c in range(1, 41):
            assert select(store, "gfx942", "conv_direct_fwd", dict(NEW_LAYER, c=8 * c)).no_candidate.kind == "build"
        assert table._layer_grid.cache_info().currsize == held
        # with lanes asked for, the command builds those lanes
        assert select(store, "gfx942", "conv_direct_fwd", NEW_LAYER, lanes=["llvm22"]).no_candidate.command == \
            "rocke-aot build --arch gfx942 --family conv_direct_fwd --lane llvm22 --problems problems.json"
        # a candidate that runs the problem but is below the floor: its rejection is the answer
        baked = table.problem_baked("conv_direct_fwd", ConvProblem(**NEW_LAYER))
        spec = table.layer_grid("conv_direct_fwd", GFX942, "llvm22", baked).specs[0]
        put_fake(store, "gfx942", "llvm22", "conv_direct_fwd", spec.to_dict())
        low = select(store, "gfx942", "conv_direct_fwd", NEW_LAYER, min_efficiency=1.0)
        assert not low.accepted and low.no_candidate is None
        assert selection.BELOW_FLOOR in {r.reason for r in low.rejected}
        assert select(store, "gfx942", "conv_direct_fwd", NEW_LAYER).accepted  # and without the floor, it runs


def test_no_candidate_says_why_nothing_can_run_it(tmp_path):
    with Store.open(tmp_path / "c.sqlite") as store:
        patch = select(store, "gfx942", "conv_dgrad_patch", {"n": 1, "h": 224, "w": 224, "c": 3, "k": 768, "p": 8})
        assert patch.no_candidate.kind == "unservable" and patch.no_candidate.command is None
        assert patch.no_candidate.reasons == tuple(f"{lane}: conv_dgrad_patch patch size p=8 not in (4, 14, 16)"
                                                   for lane in ("llvm20", "llvm22", "llvm23", "llvm24"))
        assert "llvm20, llvm22, llvm23, llvm24: conv_dgrad_patch patch size p=8" in patch.no_candidate.message
        # 2**31 bytes of input need 64-bit offsets: no spec of the grid, baked for it or not, runs it
        big = dict(DEFAULT_LAYER, n=4096, h=64, w=64)
        nc = select(store, "gfx942", "conv_direct_fwd", big, lanes=["llvm22"]).no_candidate
        assert nc.kind == "unservable" and "split the batch" in nc.reasons[0]
        # gfx1250 on llvm20 is refused by the table: that lane's reason is the table's
        nc = select(store, "gfx1250", "conv_dgrad_patch", {"n": 1, "h": 224, "w": 224, "c": 3, "k": 8, "p": 8},
                    lanes=["llvm20"]).no_candidate
        assert nc.reasons == ("llvm20: LLVM 20 (llvm20) has no gfx1250 target",)


def test_service_answer_is_typed_and_the_client_refuses_a_malformed_one(tmp_path):
    with Store.open(tmp_path / "c.sqlite") as store, TestClient(create_app(store)) as c:
        r = c.post("/v1/select", json={"arch": "gfx942", "family": "conv_direct_fwd", "problem": NEW_LAYER})
        assert r.status_code == 200
        doc = r.json()
        r2 = c.post("/v1/select", json={"arch": "gfx942", "family": "conv_dgrad_patch",
                                        "problem": {"n": 1, "h": 64, "w": 64, "c": 3, "k": 8, "p": 8}})
        unservable = r2.json()
    nc = doc["no_candidate"]
    assert doc["accepted"] == [] and nc["kind"] == "build" and "--problems problems.json" in nc["command"]
    assert nc["problems"] == {"conv_direct_fwd": [{**NEW_LAYER, "dil_h": 1, "dil_w": 1, "dtype": "f16"}]}
    assert unservable["no_candidate"]["kind"] == "unservable"
    assert parse_select(json.dumps(doc).encode()) == doc
    assert parse_select(json.dumps(unservable).encode()) == unservable
    ranked = {"key": "k" * 64, "sha256": "0" * 64, "arch": "gfx942", "lane": "llvm22", "spec": {}, "efficiency": {},
              "basis": "efficiency", "estimate_ms": None, "bound": None, "fallback": None, "measured_ms": None,
              "measurement": None, "resources": {}, "generation": None, "url": "u", "kernel_url": "k"}
    for bad in ({**nc, "command": None}, {**nc, "problems": None}, {**nc, "kind": "later"}, {**nc, "extra": 1},
                {**nc, "reasons": ["why"]}, {**nc, "command": "rocke-aot build --arch gfx942"},
                {**unservable["no_candidate"], "command": "rocke-aot build --problems x"},
                {**unservable["no_candidate"], "reasons": []}):
        with pytest.raises(IntegrityError, match="/v1/select"):
            parse_select(json.dumps({**doc, "no_candidate": bad}).encode())
    with pytest.raises(IntegrityError, match="/v1/select"):  # an explanation of nothing beside a kernel
        parse_select(json.dumps({**doc, "accepted": [ranked]}).encode())
    with pytest.raises(IntegrityError, match="/v1/select"):  # the field is required
        parse_select(json.dumps({k: v for k, v in doc.items() if k != "no_candidate"}).encode())


def test_a_plugin_table_with_a_baked_for_that_is_not_callable_is_a_finding():
    import dataclasses

    from rocke_aot.families.conv_direct_fwd.table import TABLE as CONV_DIRECT_FWD

    assert table.audit_table(CONV_DIRECT_FWD, ConvDirectFwdSpec, grid=False) == []
    bad = dataclasses.replace(CONV_DIRECT_FWD, baked_for=5)
    assert table.audit_table(bad, ConvDirectFwdSpec, grid=False) == ["its table's baked_for is neither None nor callable"]


def test_no_candidate_kinds_are_one_vocabulary():
    import typing

    assert typing.get_args(schemas.NoCandidateKind) == selection.NO_CANDIDATE_KINDS


# -- the whole path on a real compiler -------------------------------------------------------------

def _run(*args):
    return subprocess.run([EXE, *args], capture_output=True, text=True, timeout=600, env=dict(os.environ))


def test_select_says_build_then_the_command_builds_what_select_accepts(tmp_path, llvm22):
    url = f"sqlite:///{tmp_path / 'cache.sqlite'}"
    Store.open(url).close()
    p = _run("select", "--arch", "gfx942", "--family", "conv_direct_fwd", "--problem", json.dumps(NEW_LAYER),
             "--cache", url)
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("no candidate: "))
    assert "no conv_direct_fwd kernel baked for this problem" in lines[i] and "--problems" in lines[i]
    echo, command = lines[i + 1].strip(), lines[i + 2].strip()
    assert command == "rocke-aot build --arch gfx942 --family conv_direct_fwd --problems problems.json"
    # the printed recipe, as a user runs it (narrowed to three specs by --where, one lane)
    subprocess.run(["bash", "-c", echo], cwd=tmp_path, check=True)
    narrow = ["--lane", "llvm22", "--where", "path=mfma", "--where", "tile_h=4", "--where", "tile_w=8",
              "--where", "c_chunk=16", "--cache", url, "--json"]
    b = subprocess.run([EXE, *command.split()[1:], *narrow], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600, env=dict(os.environ))
    assert b.returncode == 0, b.stderr + b.stdout
    summary = json.loads(b.stdout)
    assert summary["built"] == 3 and summary["failed"] == [] and summary["compiles"] == 3  # tile_k 16, 32, 64
    [layer] = summary["layers"]
    assert layer["default"] is False and layer["baked"]["c"] == 256 and layer["admitted"] >= 3
    with Store.open(url, readonly=True) as store:
        arts = store.find(arch="gfx942", lane="llvm22", family="conv_direct_fwd")
    assert sorted(a.spec["tile_k"] for a in arts) == [16, 32, 64]
    assert all(ConvDirectFwdSpec.from_dict(dict(a.spec)).baked() == layer["baked"] for a in arts)
    s = _run("select", "--arch", "gfx942:sramecc+:xnack-", "--family", "conv_direct_fwd", "--problem",
             json.dumps(NEW_LAYER), "--cache", url, "--json")
    assert s.returncode == 0, s.stderr
    out = json.loads(s.stdout)
    assert {a["key"] for a in out["accepted"]} == {a.key for a in arts} and out["no_candidate"] is None
    assert all(a["resources"]["vgprs"] > 0 for a in out["accepted"])  # read from the real code objects
    # a second run of the same command compiles nothing
    again = subprocess.run([EXE, *command.split()[1:], *narrow], cwd=tmp_path, capture_output=True, text=True,
                           timeout=600, env=dict(os.environ))
    assert again.returncode == 0 and json.loads(again.stdout)["compiles"] == 0


def test_build_api_builds_a_new_layer(tmp_path, llvm22):
    with Store.open(tmp_path / "c.sqlite") as store:
        s = build(arches=[GFX942], families=["conv_dgrad_patch"], lanes=["llvm22"], store=store, toolchains=[llvm22],
                  problems={"conv_dgrad_patch": [{"n": 2, "h": 64, "w": 64, "c": 1, "k": 64, "p": 16}]},
                  where={"path": "fma", "tile_h": "2", "tile_w": "4", "r_blk": "16", "k_chunk": "16"}, dry_run=True)
    # a grey-scale patch layer (C=1), in no default list: its own grid, planned, nothing compiled
    [layer] = s["layers"]
    assert layer["baked"] == {"c": 1, "dtype": "f16", "p": 16} and not layer["default"] and layer["admitted"]
    assert s["to_build"] == 1 and s["compiles"] == 0


def test_floor_never_leaves_a_problem_without_kernels():
    """A problem no spec serves at the floor keeps the specs at its best efficiency (the torch run's
    ResNet-50 layers at 14x14 and 7x7 got no kernel under --min-efficiency 0.8 before). Reference,
    by hand (tests/test_select_cli.py): on gfx942 (304 CUs) m=n=1000 k=512 reaches (1000/1024)^2*16/19
    = 0.803 at best, with the 32x64/64x32/64x64/32x128/128x32 tiles of the two-wave f16 mfma grid."""
    want = {"block_k": 32, "in_dtype": "f16", "out_dtype": "f32", "double_buffer": False, "waves": 2, "path": "mfma"}
    grid = [s for s in table.enumerate_specs("gemm", GFX942, "llvm22")
            if all(s.to_dict().get(k) == v for k, v in want.items())]
    problem = {"m": 1000, "n": 1000, "k": 512, "dtype": "f16"}
    tiles = {(32, 64), (64, 32), (64, 64), (32, 128), (128, 32)}
    for floor in (0.5, 0.9):  # at the floor: the five; above every spec's reach: still the five
        kept = selection.specs_serving("gemm", grid, [problem], GFX942, min_efficiency=floor)
        assert {(s.block_m, s.block_n) for s in kept} == tiles
        assert selection.below_floor("gemm", grid, [problem], GFX942, min_efficiency=floor) == (floor > 0.803)
    big = {"m": 4096, "n": 4096, "k": 512, "dtype": "f16"}  # a problem at the floor adds nothing for the small one
    kept = selection.specs_serving("gemm", grid, [problem, big], GFX942, min_efficiency=0.9)
    assert tiles <= {(s.block_m, s.block_n) for s in kept}
