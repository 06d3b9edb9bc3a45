"""IR goldens (aot/golden.py): the CI check itself, the selection rule, drift reports,
profile-aware aliases, and the lane-registry checks; writing them (devtools/goldens.py, the
maintainer tooling outside the product) into the directory it is given, and the product's
command refusing to write.

The full check lowers every case on every registered lane (no compiler needed: lowering
takes the lane as an argument), so it runs on any host.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import os
import subprocess
from types import MappingProxyType

import pytest
from click.testing import CliRunner

from devtools import goldens as goldens_dev
from rocke_aot import lanes
from rocke_aot.aot import golden
from rocke_aot.aot.lower import lower as real_lower
from rocke_aot.cli.main import cli
from rocke_aot.errors import LaneError
from rocke_aot.lanes import Lane
from rocke_aot.variants import table

# the registry itself (FAMILIES is its read-only view): tests swap an entry with monkeypatch
from rocke_aot.variants.families import _REGISTRY as REGISTRY
from rocke_aot.variants.families import get_family


@pytest.fixture(scope="module")
def doc():
    return golden.load()


# ------------------------------------------------------------------ the CI gate


def test_golden_check_passes_for_every_lane(doc):
    # lowering is pure Python: lower in processes (about 1,000 lowerings over four lanes)
    report = golden.check(doc, jobs=max(1, min(4, os.cpu_count() or 1)))
    assert report.ok, report.render()
    # every registry lane was lowered and compared, aliased or not
    assert set(report.checked) == set(lanes.LANE_NAMES)
    for lane in lanes.LANE_NAMES:
        assert report.checked[lane]["cases"] == len(doc["cases"])


def test_golden_file_is_complete_and_consistent(doc):
    store = golden.load_ir_store()
    assert set(doc["lanes"]) == set(lanes.LANE_NAMES)
    for name, entry in doc["lanes"].items():
        assert entry["profile"] == lanes.get_lane(name).profile_name
        full, _ = golden.lane_entries(doc, lanes.get_lane(name))
        assert set(full) == set(doc["cases"])
        for o in full.values():
            if "sha256" in o:
                # the store holds the very IR the hash names (the report's old lines come from it)
                ir = store[o["sha256"]]
                assert hashlib.sha256(ir.encode()).hexdigest() == o["sha256"]
                assert len(ir.encode()) == o["size"]
                assert f'@"{o["kernel"]}"(' in ir
    # gfx1250 at llvm20 and sm_90 at llvm24 are expected failures with the table's reason
    e20 = doc["lanes"]["llvm20"]["expected_failures"]
    assert any(cid.split("/")[1] == "gfx1250" for cid in e20)
    # (the attention family refuses llvm20 on every arch first, with its own reason)
    assert all("has no gfx1250 target" in o["reason"] for cid, o in e20.items()
               if "/gfx1250/" in cid and not cid.startswith("attention/"))
    assert all("LLVM 22 and later" in o["reason"] for cid, o in e20.items() if cid.startswith("attention/"))
    e24 = doc["lanes"]["llvm24"]["expected_failures"]
    assert {cid.split("/")[1] for cid in e24} == {"sm_90"}
    # this project's lanes all have profiles of their own: no alias is legal, none is written
    assert not any("alias_of" in e for e in doc["lanes"].values())


# ------------------------------------------------------------------ the rule


def _reference_cover_targets(family, arch, lane):
    """Recomputed here from the table alone: per (baked, path) group (a point in the group of the
    baked set it matches with the most parameters), each knob's extremes."""
    tab = get_family(family).table
    target = table._target(arch)
    lane = table.lane_of(lane)
    specs = [s.to_dict() for s in table.enumerate_specs(family, arch, lane)]
    bakeds = list(tab.baked(target, lane))
    members = {}
    for s in specs:
        fits = [b for b in bakeds if all(s.get(k) == v for k, v in b.items())]
        if fits:
            best = max(len(b) for b in fits)
            baked = next(b for b in fits if len(b) == best)
            members.setdefault((json.dumps(sorted(baked.items())), s["path"]), []).append(s)
    need = {}
    for (baked_json, path), group in members.items():
        baked = dict(json.loads(baked_json))
        need[(baked_json, path)] = set()
        for k in tab.knobs(baked, target, lane):
            vals = {s[k] for s in group} if k != "path" else set()
            if len(vals) > 1:
                need[(baked_json, path)].update({(k, min(vals)), (k, max(vals))})
    return need, members


def _triples(params):
    """Every set of one, two or three (name, value) pairs of a group's parameters."""
    items = sorted((k, repr(v)) for k, v in params.items())
    return {frozenset(c) for r in (1, 2, 3) for c in itertools.combinations(items, r)}


@pytest.mark.parametrize("family,arch,lane", [("gemm", "gfx942", "llvm22"), ("gemm", "gfx1250", "llvm24"),
                                              ("conv_direct_fwd", "gfx950", "llvm20"),
                                              ("conv_dgrad_patch", "sm_90", "llvm22"),
                                              ("attention", "gfx942", "llvm22"), ("attention", "sm_90", "llvm22")])
def test_selection_covers_every_triple_of_groups_and_every_knob_extreme(family, arch, lane):
    cases = [c for c in golden.select_cases([family]) if c.arch == arch]
    lane_obj = lanes.get_lane(lane)
    chosen = [c.spec for c in cases if golden.evaluate_case(c, lane_obj).ok]
    need, members = _reference_cover_targets(family, arch, lane)
    assert need, "the table serves this (arch, lane)"
    groups = {key: [s for s in chosen if s in group] for key, group in members.items()}
    # every value, pair and triple of values that some group's parameters hold is held by a group with
    # cases (the groups' 3-way cover)
    held = set()
    for (baked_json, path), group in groups.items():
        if group:
            held |= _triples({**dict(json.loads(baked_json)), "path": path})
    for baked_json, path in groups:
        missing = _triples({**dict(json.loads(baked_json)), "path": path}) - held
        assert not missing, f"{family} {arch}: no case holds {sorted(map(sorted, missing))[:3]}"
    # a group with cases covers its knobs' extremes
    for (baked_json, path), group in groups.items():
        for k, v in need[(baked_json, path)] if group else ():
            assert any(s[k] == v for s in group), f"{family} {arch} {baked_json} {path}: no case with {k}={v}"
    if family == "gemm":
        assert {s["double_buffer"] for s in chosen} == {False, True}
        assert {(s["in_dtype"], s["out_dtype"]) for s in chosen} == {("f16", "f32"), ("f16", "f16"), ("bf16", "bf16")}
    if family == "attention":
        # the cover is a real reduction of the table's singleton groups, not every spec
        assert len([g for g in groups.values() if g]) < len(groups)


def test_representative_cover_on_a_hand_worked_grid():
    @dataclasses.dataclass(frozen=True)
    class S:
        a: int
        b: bool

        def to_dict(self):
            return {"a": self.a, "b": self.b}

    grid = [S(1, False), S(2, False), S(4, False), S(1, True), S(4, True)]
    # extremes: a=1, a=4, b=False, b=True; S(1, False) and S(4, True) cover all four
    assert golden.representative(grid, ["a", "b"]) == [S(1, False), S(4, True)]
    # a knob with one value needs nothing; a one-point grid gives that point
    assert golden.representative([S(2, True)], ["a", "b"]) == [S(2, True)]


# ------------------------------------------------------------------ drift


def _only_gfx942(monkeypatch):
    """Keep the rule's gemm cases on gfx942 only: these tests exercise the comparison, and the
    full rule runs in test_golden_check_passes_for_every_lane."""
    every = golden.select_cases

    def some(families=None):
        return [c for c in every(families) if c.arch == "gfx942"]

    monkeypatch.setattr(golden, "select_cases", some)
    return some(["gemm"])


def _one_char_change(ir: str) -> tuple[str, str, str, int]:
    lines = ir.splitlines()
    i = next(n for n, ln in enumerate(lines) if ln.startswith("define "))
    new_line = lines[i].replace("nounwind", "nounwinD", 1)
    assert new_line != lines[i]
    lines2 = lines[:i] + [new_line] + lines[i + 1:]
    return "\n".join(lines2) + ("\n" if ir.endswith("\n") else ""), lines[i], new_line, i + 1


def test_a_one_character_change_in_the_ir_is_drift_with_the_first_differing_line(doc, monkeypatch, capsys):
    victim = next(cid for cid in doc["cases"] if cid.startswith("gemm/gfx942/") and "mfma" in cid)
    seen = {}
    _only_gfx942(monkeypatch)

    def patched(family, spec, arch, lane):
        k = real_lower(family, spec, arch, lane)
        if f"{family}/{arch}/{k.kernel_name}" == victim and lanes.get_lane(lane).name == "llvm22":
            ir, old_line, new_line, lineno = _one_char_change(k.ir)
            seen.update(old=old_line, new=new_line, lineno=lineno, sha=hashlib.sha256(ir.encode()).hexdigest())
            k = dataclasses.replace(k, ir=ir)
        return k

    monkeypatch.setattr(golden, "lower", patched)
    only = copy.deepcopy(doc)
    for entry in only["lanes"].values():
        for part in ("results", "expected_failures"):
            entry[part] = {cid: o for cid, o in entry.get(part, {}).items() if "/gfx942/" in cid}
    report = golden.check(only, lanes=[lanes.get_lane("llvm22")], families=["gemm"])
    assert not report.ok
    (f,) = report.findings
    assert (f.kind, f.lane, f.case) == ("drift", "llvm22", victim)
    assert f.old.startswith(doc["lanes"]["llvm22"]["results"][victim]["sha256"])
    assert f.new.startswith(seen["sha"])
    assert f.detail[0] == f"first difference at line {seen['lineno']}:"
    assert f"- {seen['old']}" in f.detail and f"+ {seen['new']}" in f.detail
    text = report.render()
    assert "DRIFT lane llvm22 case " + victim in text and f"+ {seen['new']}" in text

    # the CLI prints the same report and exits non-zero
    from rocke_aot.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["golden", "--check", "--lane", "llvm22", "--family", "gemm", "--jobs", "1"])
    assert exc.value.code == 1
    assert f"+ {seen['new']}" in capsys.readouterr().out


def test_first_difference_on_a_hand_example():
    old = "a\nb\nc\nd\n"
    new = "a\nb\nX\nd\n"
    assert golden.first_difference(old, new) == ("first difference at line 3:", "- c", "+ X")
    assert "not in the IR store" in golden.first_difference(None, new)[0]


# ------------------------------------------------------------------ aliases and the registry


def test_an_alias_across_profiles_is_refused(doc):
    bad = copy.deepcopy(doc)
    bad["lanes"]["llvm24"] = {"profile": "llvm24", "alias_of": "llvm23"}
    with pytest.raises(LaneError, match="must not cross emission profiles"):
        golden.check(bad, lanes=[lanes.get_lane("llvm24")], families=["gemm"])
    # llvm22 and llvm23 emit the same bytes today, and still may not alias: profiles differ
    with pytest.raises(LaneError, match="'llvm23'.*'llvm22'"):
        golden.validate_alias(lanes.get_lane("llvm23"), lanes.get_lane("llvm22"))


@pytest.fixture
def sibling_lane(monkeypatch):
    """llvm25, a lane sharing llvm24's profile, served by gemm (registry as every caller sees it)."""
    fake = Lane(25, "llvm25", "llvm24")
    monkeypatch.setattr(lanes, "LANES", lanes.LANES + (fake,))
    monkeypatch.setattr(lanes, "_BY_NAME", MappingProxyType({**lanes._BY_NAME, "llvm25": fake}))
    for fam, e in list(REGISTRY.items()):
        decided = dict(e.table.lane_decisions, llvm25=e.table.lane_decisions["llvm24"])
        monkeypatch.setitem(REGISTRY, fam, dataclasses.replace(e, table=dataclasses.replace(e.table, lane_decisions=decided)))
    return fake


def test_a_same_profile_lane_is_written_as_an_alias_and_still_lowered(sibling_lane, monkeypatch):
    cases = _only_gfx942(monkeypatch)
    results = golden.evaluate(cases, [lanes.get_lane("llvm24"), sibling_lane])
    doc = goldens_dev.build(cases, results)
    assert doc["lanes"]["llvm25"] == {"profile": "llvm24", "alias_of": "llvm24",
                                      "summary": doc["lanes"]["llvm24"]["summary"]}
    store = {o.sha256: o.ir for r in results.values() for o in r.values() if o.ok}
    rep = golden.check(doc, lanes=[lanes.get_lane("llvm24"), sibling_lane], families=["gemm"], ir_store=store)
    assert rep.ok, rep.render()
    assert rep.aliases == {"llvm25": "llvm24"} and rep.checked["llvm25"]["ok_cases"] > 0

    # the aliased lane is lowered itself: a change only it emits is drift against its target
    victim = next(c for c in cases if c.arch == "gfx942")

    def patched(family, spec, arch, lane):
        k = golden_lower(family, spec, arch, lane)
        if lanes.get_lane(lane).name == "llvm25" and k.kernel_name == victim.kernel and arch == "gfx942":
            k = dataclasses.replace(k, ir=_one_char_change(k.ir)[0])
        return k

    golden_lower = golden.lower
    monkeypatch.setattr(golden, "lower", patched)
    rep = golden.check(doc, lanes=[sibling_lane], families=["gemm"], ir_store=store)
    assert [(f.kind, f.lane, f.case) for f in rep.findings] == [("drift", "llvm25", victim.id)]
    assert "via alias llvm24" in rep.findings[0].old


def test_a_stale_lane_is_reported(doc):
    stale = copy.deepcopy(doc)
    stale["lanes"]["llvm19"] = copy.deepcopy(doc["lanes"]["llvm20"])
    findings = golden.registry_findings(stale)
    assert [(f.kind, f.lane) for f in findings] == [("stale-lane", "llvm19")]
    assert "STALE LANE lane llvm19" in findings[0].render()


def test_a_registry_lane_missing_from_the_golden_fails(doc):
    short = copy.deepcopy(doc)
    del short["lanes"]["llvm23"]
    rep = golden.check(short, lanes=[lanes.get_lane("llvm23")], families=["gemm"])
    assert [(f.kind, f.lane) for f in rep.findings] == [("missing-lane", "llvm23")]


def test_a_new_lane_no_family_decides_fails(doc, monkeypatch):
    fake = Lane(25, "llvm25", "llvm24")
    monkeypatch.setattr(lanes, "LANES", lanes.LANES + (fake,))
    kinds = {(f.kind, f.lane) for f in golden.registry_findings(doc)}
    assert ("missing-lane", "llvm25") in kinds and ("undecided", "llvm25") in kinds


def test_a_lane_whose_profile_changed_is_reported(doc):
    moved = copy.deepcopy(doc)
    moved["lanes"]["llvm22"]["profile"] = "llvm20"
    assert [(f.kind, f.lane) for f in golden.registry_findings(moved)] == [("profile", "llvm22")]


# ------------------------------------------------------------------ write


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_write_refuses_a_dirty_tree_and_prints_what_changed(tmp_path, monkeypatch):
    _only_gfx942(monkeypatch)
    _git(tmp_path, "init", "-q")
    (tmp_path / "module.py").write_text("x = 1\n")
    out = tmp_path / "goldens"
    path = out / golden.GOLDEN_NAME
    with pytest.raises(golden.GoldenError, match="dirty tree.*module.py"):
        goldens_dev.write(out, lanes=["llvm24"], families=["gemm"], root=tmp_path)
    assert not out.exists()
    lines = goldens_dev.write(out, lanes=["llvm24"], families=["gemm"], root=tmp_path, allow_dirty=True)
    assert lines and lines[0].startswith("new golden file")
    assert sorted(p.name for p in out.iterdir()) == sorted([golden.GOLDEN_NAME, golden.IR_STORE_NAME])
    written = golden.load(path)
    assert written["lanes"]["llvm24"]["summary"]["ok_cases"] > 0
    store = golden.load_ir_store(out / golden.IR_STORE_NAME)
    assert all(store[o["sha256"]] for o in written["lanes"]["llvm24"]["results"].values())
    # the output directory itself does not make the tree dirty: with module.py committed, a
    # rewrite of the files it wrote is refused for nothing
    _git(tmp_path, "add", "module.py")
    _git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "m")
    assert goldens_dev.git_dirty(tmp_path, exclude=out) == []
    assert goldens_dev.git_dirty(tmp_path) == ["goldens/"]
    # writing again changes nothing; a changed entry is named with old and new hash
    assert goldens_dev.write(out, lanes=["llvm24"], families=["gemm"], root=tmp_path) == []
    cid, entry = next(iter(written["lanes"]["llvm24"]["results"].items()))
    tampered = copy.deepcopy(written)
    tampered["lanes"]["llvm24"]["results"][cid] = dict(entry, sha256="0" * 64)
    assert goldens_dev.changes(tampered, written) == [
        f"lane llvm24 {cid}: {'0' * 64} ({entry['size']} bytes, kernel {entry['kernel']}) -> "
        f"{entry['sha256']} ({entry['size']} bytes, kernel {entry['kernel']})"]


def test_the_product_command_only_reads_the_goldens():
    """`rocke-aot golden --write` writes nothing: a usage error naming the maintainer tool."""
    before = golden.GOLDEN_PATH.stat().st_mtime_ns, golden.IR_STORE_PATH.stat().st_mtime_ns
    r = CliRunner().invoke(cli, ["golden", "--write", "--lane", "llvm24", "--family", "gemm"])
    assert r.exit_code == 2 and golden.WRITE_COMMAND in r.output, r.output
    assert "--write" not in CliRunner().invoke(cli, ["golden", "--help"]).output
    assert (golden.GOLDEN_PATH.stat().st_mtime_ns, golden.IR_STORE_PATH.stat().st_mtime_ns) == before


def test_the_dev_tool_writes_only_the_directory_it_is_given(tmp_path, monkeypatch, capsys):
    _only_gfx942(monkeypatch)
    out = tmp_path / "out"
    assert goldens_dev.main(["--out", str(out), "--lane", "llvm24", "--family", "gemm", "--allow-dirty",
                             "--jobs", "1", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["written"] == [str(out / golden.GOLDEN_NAME), str(out / golden.IR_STORE_NAME)]
    assert golden.load(out / golden.GOLDEN_NAME)["lanes"]["llvm24"]["summary"]["ok_cases"] > 0
    assert goldens_dev.main(["--out", str(out), "--lane", "llvm21"]) == 2  # a LaneError, named
    assert "LaneError" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        goldens_dev.main(["--lane", "llvm24"])  # no --out: nothing defaults into the package


def test_group_cover_on_a_hand_worked_grid():
    # three binary parameters, all eight combinations: a triple names a whole combination, so the 3-way
    # cover keeps every group; the 2-way cover keeps fewer, each value pair still held by a kept group
    grid = [{"a": a, "b": b, "c": c} for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    assert golden.group_cover(grid, 3) == list(range(8))
    two = golden.group_cover(grid, 2)
    assert len(two) < 8
    for x, y in itertools.combinations("abc", 2):
        assert {(g[x], g[y]) for g in (grid[i] for i in two)} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    # ties go to the earlier group: one parameter with one value -> the first group only
    assert golden.group_cover([{"a": 1}, {"a": 1}]) == [0]
