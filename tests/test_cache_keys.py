"""Cache keys: every input changes the key, field order never does, bad inputs fail closed."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import pytest

from rocke_aot.cache.keys import KEY_VERSION, KeyInputs, artifact_key, canonical_json, check_key, encode
from rocke_aot.errors import LaneError, SpecError
from rocke_aot.lanes import LANES
from rocke_aot.targets import Target

BASE = dict(
    arch="gfx942:sramecc+:xnack-", lane="llvm22", profile="llvm22", family="gemm",
    spec={"dtype": "f16", "tile": [64, 64], "knobs": {"unroll": 2, "lds": True}},
    recipe_digest="0f1e2d", toolchain={"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "LLD 22.1.8"},
    options={"speed_level": 3, "opt_level": 3, "reloc": "pic", "ld.lld": ["-shared", "--no-undefined"]},
)


# sha256 of the expected encoding in test_encoding_is_versioned_and_stable (computed by hand
# from those bytes with `printf ... | sha256sum`-equivalent hashing, not by the code under test).
KEY_SHA256 = "57c713d8e0e6cd06d697ca9333b4da4fe0b6a09cf9f927bf2f6ce4c21d848d3c"


def key(**over) -> str:
    return artifact_key(KeyInputs(**{**BASE, **over}))


# One change per input; each must move the key.
CHANGES = [
    ("arch", "gfx942"),
    ("arch", "gfx942:sramecc-:xnack-"),
    ("arch", "gfx950"),
    ("lane", "llvm23"),  # profile stays llvm23 below via the pair test; here lane+profile change
    ("family", "conv_direct_fwd"),
    ("spec", {**BASE["spec"], "dtype": "bf16"}),
    ("spec", {**BASE["spec"], "tile": [64, 128]}),
    ("spec", {**BASE["spec"], "tile": [64, 64, 1]}),
    ("spec", {**BASE["spec"], "knobs": {"unroll": 4, "lds": True}}),
    ("spec", {**BASE["spec"], "extra": None}),
    ("recipe_digest", "0f1e2e"),
    ("toolchain", {**BASE["toolchain"], "llvm_version": "22.1.1"}),
    ("toolchain", {**BASE["toolchain"], "linker": "LLD 22.1.9"}),
    ("toolchain", {**BASE["toolchain"], "kind": "comgr"}),
    ("toolchain", {**BASE["toolchain"], "revision": "abc"}),
    ("toolchain", {**BASE["toolchain"], "library_sha256": "0" * 64}),
    ("options", {**BASE["options"], "speed_level": 2}),
    ("options", {**BASE["options"], "opt_level": 2}),
    ("options", {**BASE["options"], "reloc": "static"}),
    ("options", {**BASE["options"], "ld.lld": ["-shared"]}),
    ("options", {**BASE["options"], "ptxas": ["-O3"]}),
    ("options", {}),
]


@pytest.mark.parametrize("field,value", CHANGES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(CHANGES)])
def test_each_input_changes_the_key(field, value):
    over = {field: value}
    if field == "lane":
        over["profile"] = "llvm23"
    assert key(**over) != key()


def test_every_lane_has_its_own_keys():
    # Lanes may share an emission profile (the registry allows it); their binaries still
    # differ, so the lane itself must be in the key, not only the profile.
    keys = {key(lane=lane.name, profile=lane.profile_name) for lane in LANES}
    assert len(keys) == len(LANES)
    enc = encode(KeyInputs(**BASE))
    assert b'"lane":"llvm22"' in enc and b'"profile":"llvm22"' in enc


def test_all_changes_give_distinct_keys():
    keys = {key()}
    for field, value in CHANGES:
        over = {field: value, **({"profile": "llvm23"} if field == "lane" else {})}
        keys.add(key(**over))
    assert len(keys) == len(CHANGES) + 1


def test_field_order_never_matters():
    spec = {"knobs": {"lds": True, "unroll": 2}, "tile": [64, 64], "dtype": "f16"}
    toolchain = dict(reversed(list(BASE["toolchain"].items())))
    assert list(spec) != list(BASE["spec"])
    assert key(spec=spec, toolchain=toolchain) == key()


def test_target_feature_order_is_canonicalized():
    k = KeyInputs(**{**BASE, "arch": "gfx942:xnack-:sramecc+"})
    assert k.arch == "gfx942:sramecc+:xnack-"
    assert artifact_key(k) == key()


@pytest.mark.parametrize("a,b", [(1, "1"), (1, 1.0), (1, True), (0, None), ([1, 2], [2, 1]), ("a", "a ")])
def test_json_values_are_not_conflated(a, b):
    assert key(spec={"v": a}) != key(spec={"v": b})


def test_tuples_and_lists_are_the_same_json():
    assert key(spec={"t": (1, 2)}) == key(spec={"t": [1, 2]})


def test_encoding_is_versioned_and_stable():
    # The exact bytes the key hashes, written out: changing the encoding must be a
    # deliberate KEY_VERSION bump, never an accident of refactoring.
    expected = (
        b"rocke-aot/artifact-key/v2\n"
        b'{"arch":"gfx942:sramecc+:xnack-","family":"gemm","lane":"llvm22",'
        b'"options":{"ld.lld":["-shared","--no-undefined"],"opt_level":3,"reloc":"pic","speed_level":3},'
        b'"profile":"llvm22","recipe_digest":"0f1e2d",'
        b'"spec":{"dtype":"f16","knobs":{"lds":true,"unroll":2},"tile":[64,64]},'
        b'"toolchain":{"kind":"llvmlite","linker":"LLD 22.1.8","llvm_version":"22.1.0"}}'
    )
    assert KEY_VERSION == 2
    assert encode(KeyInputs(**BASE)) == expected
    assert key() == hashlib.sha256(expected).hexdigest() == KEY_SHA256


@pytest.mark.parametrize("over", [
    {},
    {"recipe_digest": 'd "quoted" \\ back\u00e9\u2603', "family": "conv_dgrad_patch"},
    {"spec": {"z": [1.5, -2, None, {"\u00e9": "\n\t"}], "a": {"b": {"c": [True, False]}}, "": 0},
     "toolchain": {"kind": "llvmlite", "path": "/opt/\u00fc/\"x\""}, "options": {}},
])
def test_encoding_is_the_stdlib_json_of_the_eight_fields(over):
    # encode() splices the canonical texts of spec/toolchain/options: the reference is the
    # standard library's json.dumps of the whole object (sorted keys, no spaces), not our code
    ki = KeyInputs(**{**BASE, **over})
    doc = {n: getattr(ki, n) for n in ("arch", "lane", "profile", "family", "recipe_digest")}
    doc.update(spec={**BASE, **over}["spec"], toolchain={**BASE, **over}["toolchain"],
               options={**BASE, **over}["options"])
    want = b"rocke-aot/artifact-key/v2\n" + json.dumps(doc, sort_keys=True, separators=(",", ":"),
                                                       ensure_ascii=False).encode()
    assert encode(ki) == want


def test_canonical_json_form():
    assert canonical_json({"b": [1, {"d": 1, "c": 2}], "a": "é"}) == '{"a":"é","b":[1,{"c":2,"d":1}]}'


@pytest.mark.parametrize(
    "over,err",
    [
        ({"lane": 22}, LaneError),
        ({"lane": None}, LaneError),
        ({"lane": b"llvm22"}, LaneError),
        ({"lane": "llvm21"}, LaneError),
        ({"lane": "LLVM22"}, LaneError),
        ({"profile": "llvm23"}, LaneError),  # not lane llvm22's profile
        ({"profile": 22}, LaneError),
        ({"lane": "llvm20", "profile": "llvm22"}, LaneError),
        ({"arch": 942}, SpecError),
        ({"arch": "gfx9999"}, SpecError),
        ({"arch": "gfx942:xnack"}, SpecError),
        ({"family": ""}, SpecError),
        ({"family": 3}, SpecError),
        ({"family": "Gemm X"}, SpecError),
        ({"spec": [1, 2]}, SpecError),
        ({"spec": {1: "a"}}, SpecError),
        ({"spec": {"x": math.nan}}, SpecError),
        ({"spec": {"x": math.inf}}, SpecError),
        ({"spec": {"x": {1, 2}}}, SpecError),
        ({"spec": {"x": b"raw"}}, SpecError),
        ({"spec": {"x": object()}}, SpecError),
        ({"recipe_digest": ""}, SpecError),
        ({"recipe_digest": None}, SpecError),
        ({"options": None}, SpecError),
        ({"options": ["-O3"]}, SpecError),
        ({"options": {"flags": {"-O3"}}}, SpecError),
        ({"options": {"speed": math.nan}}, SpecError),
        ({"toolchain": {}}, SpecError),
        ({"toolchain": {"llvm_version": "22.1.0"}}, SpecError),  # no kind
        ({"toolchain": {"kind": "llvmlite", "llvm_major": 22}}, SpecError),
    ],
)
def test_bad_inputs_fail_closed(over, err):
    with pytest.raises(err):
        KeyInputs(**{**BASE, **over})


def test_inputs_are_frozen_and_hashable():
    k = KeyInputs(**BASE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.lane = "llvm20"
    with pytest.raises(TypeError):
        k.spec["dtype"] = "bf16"
    assert hash(k) == hash(KeyInputs(**BASE)) and k == KeyInputs(**BASE)
    assert KeyInputs.from_dict(k.as_dict()) == k


@pytest.mark.parametrize("bad", ["", "A" * 64, "g" * 64, "a" * 63, 1, None])
def test_check_key(bad):
    with pytest.raises(SpecError):
        check_key(bad)


def test_key_template_matches_artifact_key():
    # KeyTemplate (the builder's planning fast path) must give artifact_key byte for byte.
    from rocke_aot.cache.keys import KeyTemplate

    tpl = KeyTemplate(BASE["arch"], BASE["lane"], BASE["profile"], BASE["family"], BASE["recipe_digest"],
                      BASE["toolchain"], BASE["options"])
    for spec in (BASE["spec"], {}, {"a": [1, 2.5, None, True]}, {"é": "ü", "n": {"m": {}}}):
        assert tpl.key(canonical_json(spec)) == key(spec=spec)
        assert artifact_key(tpl.inputs(spec)) == key(spec=spec)


# ---- the builder's real inputs: compile options and toolchain libraries move the key -----------


def _plan_key(tc, target="gfx942", spec=None):
    """The key the builder plans for ``tc`` (same code path as aot/builder/plan.py)."""
    from rocke_aot.aot.recipe import recipe_digest
    from rocke_aot.cache.keys import KeyTemplate
    from rocke_aot.targets import Target

    t = Target.parse(target)
    tpl = KeyTemplate(t.id, "llvm22", "llvm22", "gemm", recipe_digest(), tc.identity(t), tc.compile_options(t))
    return tpl.key(canonical_json(spec or {"block_m": 32}))


def test_changing_one_compile_option_moves_the_key_and_the_compile_request(llvm22, monkeypatch):
    from rocke_aot.aot import compiler
    from rocke_aot.aot.compiler import options
    from rocke_aot.targets import Target

    base_key = _plan_key(llvm22)
    base_payload = compiler.llvm_payload("ir", Target.parse("gfx942"))
    assert base_payload["speed_level"] == 3 and base_payload["reloc"] == "pic"
    # Frozen value: swap the one definition for another (as an edit of options.py would).
    monkeypatch.setattr(options, "LLVMLITE", options.LlvmOptions(speed_level=2))
    monkeypatch.setattr(compiler, "LLVMLITE", options.LLVMLITE)
    from rocke_aot.aot.toolchains import llvmlite_toolchain
    monkeypatch.setattr(llvmlite_toolchain, "LLVMLITE", options.LLVMLITE)
    assert _plan_key(llvm22) != base_key
    # ... and the compile itself asks the worker for exactly that option.
    assert compiler.llvm_payload("ir", Target.parse("gfx942"))["speed_level"] == 2


def test_ld_lld_flags_are_in_the_amdgpu_options_and_ptxas_flags_in_the_nvptx_ones(llvm22):
    from rocke_aot.aot.compiler.options import LLD_FLAGS, PTXAS_FLAGS
    from rocke_aot.targets import Target

    amd = llvm22.compile_options(Target.parse("gfx942"))
    nv = llvm22.compile_options(Target.parse("sm_90"))
    assert amd["ld.lld"] == ["-shared", "--no-undefined"] == list(LLD_FLAGS) and "ptxas" not in amd
    assert nv["ptxas"] == ["-O3"] == list(PTXAS_FLAGS) and nv["features"] == "+ptx80" and "ld.lld" not in nv


def test_changing_the_library_hash_in_the_identity_moves_the_key(llvm22, tmp_path):
    import dataclasses

    from rocke_aot.aot.toolchains import LlvmliteToolchain

    lib = tmp_path / "libllvmlite.so"
    lib.write_bytes(b"\x7fELF" + b"\0" * 4096)
    tc = LlvmliteToolchain(llvm22.python)
    info = tc.detect()
    tc.__dict__["_info"] = dataclasses.replace(info, extra={**info.extra, "library": str(lib)})
    ident = tc.identity(Target.parse("gfx942"))
    assert ident["library_sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
    k1 = _plan_key(tc)
    assert k1 != _plan_key(llvm22)  # the real library hashes otherwise
    # One byte changed in the library (new size: re-hashed, not served from the memo).
    lib.write_bytes(b"\x7fELF" + b"\0" * 4095 + b"\1" + b"\0")
    assert tc.identity(Target.parse("gfx942"))["library_sha256"] == hashlib.sha256(lib.read_bytes()).hexdigest()
    assert _plan_key(tc) != k1


def test_real_identities_hash_their_libraries_and_tools(llvm22):
    from rocke_aot.aot.compiler.lld import find_lld

    ident = llvm22.identity(Target.parse("gfx942"))
    lib = llvm22.detect().extra["library"]
    assert lib.endswith(".so") and "llvmlite" in lib
    with open(lib, "rb") as f:
        assert ident["library_sha256"] == hashlib.file_digest(f, "sha256").hexdigest()
    with open(find_lld(), "rb") as f:
        assert ident["linker_sha256"] == hashlib.file_digest(f, "sha256").hexdigest()
