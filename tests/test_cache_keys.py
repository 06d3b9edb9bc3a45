"""Cache keys: every input changes the key, field order never does, bad inputs fail closed."""

from __future__ import annotations

import hashlib
import math

import pytest

from rocke_aot.lanes import LANES
from rocke_aot.cache.keys import KEY_VERSION, KeyInputs, artifact_key, canonical_json, check_key, encode
from rocke_aot.errors import LaneError, SpecError

BASE = dict(
    arch="gfx942:sramecc+:xnack-", lane="llvm22", profile="llvm22", family="gemm",
    spec={"dtype": "f16", "tile": [64, 64], "knobs": {"unroll": 2, "lds": True}},
    lowering_digest="0f1e2d", toolchain={"kind": "llvmlite", "llvm_version": "22.1.0", "linker": "LLD 22.1.8"},
)


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
    ("lowering_digest", "0f1e2e"),
    ("toolchain", {**BASE["toolchain"], "llvm_version": "22.1.1"}),
    ("toolchain", {**BASE["toolchain"], "linker": "LLD 22.1.9"}),
    ("toolchain", {**BASE["toolchain"], "kind": "comgr"}),
    ("toolchain", {**BASE["toolchain"], "revision": "abc"}),
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
        b"rocke-aot/artifact-key/v1\n"
        b'{"arch":"gfx942:sramecc+:xnack-","family":"gemm","lane":"llvm22","lowering_digest":"0f1e2d",'
        b'"profile":"llvm22","spec":{"dtype":"f16","knobs":{"lds":true,"unroll":2},"tile":[64,64]},'
        b'"toolchain":{"kind":"llvmlite","linker":"LLD 22.1.8","llvm_version":"22.1.0"}}'
    )
    assert KEY_VERSION == 1
    assert encode(KeyInputs(**BASE)) == expected
    assert key() == hashlib.sha256(expected).hexdigest() == "f414c3b36bdee71088458f8a0511005d0a53d73ab709f47cdc227d1aee67d071"


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
        ({"lowering_digest": ""}, SpecError),
        ({"lowering_digest": None}, SpecError),
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
    with pytest.raises(Exception):
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

    tpl = KeyTemplate(BASE["arch"], BASE["lane"], BASE["profile"], BASE["family"], BASE["lowering_digest"],
                      BASE["toolchain"])
    for spec in (BASE["spec"], {}, {"a": [1, 2.5, None, True]}, {"é": "ü", "n": {"m": {}}}):
        assert tpl.key(canonical_json(spec)) == key(spec=spec)
        assert artifact_key(tpl.inputs(spec)) == key(spec=spec)
