"""One bad record breaks nothing: the record schema on every write path, resources from the
code object, validate() on mutated ELF, and select() past a malformed row.

References: llvm-readelf-22 --notes (the code object's own metadata note) for the resources
the server must record; the SQLite file read and written with the stdlib sqlite3 (rows
planted by hand, digests before and after); a seeded mutation of a real code object.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import re
import sqlite3
import subprocess

import pytest
from _service import filled_store  # noqa: F401
from fastapi.testclient import TestClient
from test_reliability_service import sqlite_digest
from test_service import TOKEN, publish_body

from rocke_aot.aot.codeobject import CodeObjectInfo, validate
from rocke_aot.cache.store import Store
from rocke_aot.errors import CodeObjectError, SpecError
from rocke_aot.record import RecordError, check_metadata
from rocke_aot.service.app import create_app
from rocke_aot.service.selection import select
from rocke_aot.targets import Target

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def built(tmp_path, kernel_bundle):  # noqa: F811
    """(store path, artifacts, {key: code object}) of the real gfx942 build."""
    path = tmp_path / "built.sqlite"
    with filled_store(path, kernel_bundle[1]) as s:
        arts = s.find()
        codes = {a.key: s.get(a.key).code_object for a in arts}
    return path, arts, codes


def readelf_resources(code: bytes, tmp_path) -> dict[str, int]:
    """.vgpr_count, .sgpr_count, .group_segment_fixed_size, .kernarg_segment_size from the
    metadata note as llvm-readelf-22 prints it."""
    f = tmp_path / "k.hsaco"
    f.write_bytes(code)
    out = subprocess.run(["llvm-readelf-22", "--notes", str(f)], capture_output=True, text=True, check=True).stdout
    got = {}
    for name in ("vgpr_count", "sgpr_count", "group_segment_fixed_size", "kernarg_segment_size"):
        m = re.search(rf"\.{name}:\s+(\d+)", out)
        assert m, (name, out[:2000])
        got[name] = int(m.group(1))
    return got


# ---- validate(): only named errors -------------------------------------------------------------

def test_validate_raises_only_named_errors_on_mutated_elf(built):
    _, arts, codes = built
    a = arts[0]
    code = codes[a.key]
    assert isinstance(validate(code, Target.parse(a.arch)), CodeObjectInfo)
    rng = random.Random(20261203)
    e_shoff = int.from_bytes(code[0x28:0x30], "little")
    e_phoff = int.from_bytes(code[0x20:0x28], "little")
    regions = [(0, 64), (e_phoff, e_phoff + 56 * 4), (e_shoff, len(code)), (0, len(code))]
    cases = [code[:n] for n in sorted({*range(0, 200, 7), *rng.sample(range(len(code)), 60)})]
    for _ in range(700):
        lo, hi = rng.choice(regions)
        b = bytearray(code)
        for _ in range(rng.choice((1, 1, 2, 4, 8))):
            i = rng.randrange(lo, min(hi, len(b)))
            b[i] = rng.choice((0x00, 0xff, 0x7f, 0x80, rng.randrange(256)))
        cases.append(bytes(b))
    outcomes = {"valid": 0, "CodeObjectError": 0}
    for data in cases:
        try:
            validate(data, Target.parse(a.arch))
            outcomes["valid"] += 1
        except CodeObjectError:
            outcomes["CodeObjectError"] += 1
        # anything else (KeyError, AttributeError, OverflowError, ...) fails the test here
    assert outcomes["CodeObjectError"] > len(cases) // 4, outcomes
    assert sum(outcomes.values()) == len(cases)


# ---- the record schema -------------------------------------------------------------------------

BAD_METADATA = [
    ("code_object not an object", {"code_object": "x"}),
    ("negative vgprs", {"code_object": {"vgpr_count": -1}}),
    ("bool lds", {"code_object": {"lds_bytes": True}}),
    ("huge lds", {"code_object": {"lds_bytes": 1 << 40}}),
    ("launch a list", {"launch": [1, 2, 3]}),
    ("launch fields missing", {"launch": {"kernel": "k"}}),
    ("launch args wrong shape", {"launch": {"kernel": "k", "problem": [], "lets": [], "grid": ["1", "1", "1"],
                                            "block": ["1", "1", "1"], "args": [7], "kernarg_size": 0,
                                            "max_tensor_bytes": 1}}),
    ("format unknown", {"format": "exe"}),
    ("deep", json.loads("[" * 100 + "]" * 100) and {"x": json.loads("[" * 100 + "]" * 100)}),
    ("huge", {"x": "y" * (2 << 20)}),
]


@pytest.mark.parametrize("what,md", BAD_METADATA, ids=[w for w, _ in BAD_METADATA])
def test_the_record_schema_refuses_malformed_metadata(what, md):
    with pytest.raises(RecordError):
        check_metadata(md)


def test_store_put_refuses_a_malformed_record_before_writing(built):
    path, arts, codes = built
    a = arts[0]
    before = sqlite_digest(path)
    with Store.open(path) as s:
        for _, md in BAD_METADATA:
            with pytest.raises(SpecError):
                s.put(a.inputs, codes[a.key], ir_sha256=a.ir_sha256, metadata=md, provenance={})
        with pytest.raises(SpecError):
            s.put(a.inputs, codes[a.key], ir_sha256=a.ir_sha256, metadata={}, provenance={"x": float("nan")})
    assert sqlite_digest(path) == before


def test_publish_refuses_malformed_metadata_and_records_the_servers_resources(built, tmp_path):
    path, arts, codes = built
    a = arts[0]
    fresh = tmp_path / "fresh.sqlite"
    Store.open(fresh).close()
    before = sqlite_digest(fresh)
    with TestClient(create_app(f"sqlite:///{fresh}", token=TOKEN)) as c:
        # (the code_object and format of a publish are the server's own: the sender's are replaced)
        for what, md in [(w, m) for w, m in BAD_METADATA if w.startswith(("launch", "deep"))]:
            r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, codes[a.key], metadata=md), headers=AUTH)
            assert r.status_code == 422, (what, r.text)
        md = json.loads(json.dumps(a.as_dict()["metadata"]))
        md["launch"]["args"][0]["offset"] += 8  # a launch contract the code object contradicts
        md["launch"]["kernarg_size"] += 8
        r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, codes[a.key], metadata=md), headers=AUTH)
        assert r.status_code == 422, r.text
        assert sqlite_digest(fresh) == before  # nothing written by any refusal
        lies = json.loads(json.dumps(a.as_dict()["metadata"]))
        lies["code_object"].update(vgpr_count=1, sgpr_count=1, lds_bytes=0, kernarg_size=lies["code_object"]["kernarg_size"])
        r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, codes[a.key], metadata=lies), headers=AUTH)
        assert r.status_code == 200, r.text
        res = c.get(f"/v1/kernels/{a.key}/meta").json()["resources"]
    want = readelf_resources(codes[a.key], tmp_path)
    assert (res["vgpr_count"], res["sgpr_count"], res["lds_bytes"]) == (
        want["vgpr_count"], want["sgpr_count"], want["group_segment_fixed_size"]), (res, want)
    assert want["vgpr_count"] != 1  # the sender's numbers were not kept


def test_select_skips_a_malformed_row_counts_and_logs_it(built, caplog):
    path, arts, _ = built
    good = {a.key for a in arts}
    conn = sqlite3.connect(path)
    victims = [arts[0].key, arts[1].key, arts[2].key]
    for key, bad in zip(victims, ('{"code_object": "x"}', "[]", '{"code_object": {"vgpr_count": "many"}}')):
        conn.execute("UPDATE artifacts SET metadata_json = ? WHERE key = ?", (bad, key))
    conn.commit()
    conn.close()
    caplog.set_level(logging.ERROR, logger="rocke_aot.cache")
    problem = {"m": 4096, "n": 4096, "k": 4096}
    with Store.open(path, readonly=True) as s:
        got = select(s, "gfx942", "gemm", problem, explain=False)
        assert {c.key for c in got.accepted} == good - set(victims)
        assert s.malformed_rows == 3
        assert sum("malformed" in r.getMessage() for r in caplog.records) == 3
    with TestClient(create_app(f"sqlite:///{path}")) as c:
        r = c.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": problem})
        assert r.status_code == 200 and len(r.json()["accepted"]) == len(good) - 3, r.text


def test_publish_of_a_code_object_for_another_arch_or_a_script_is_refused(built, tmp_path):
    _, arts, codes = built
    a = arts[0]
    fresh = tmp_path / "fresh.sqlite"
    Store.open(fresh).close()
    before = sqlite_digest(fresh)
    script = b"#!/bin/sh\nrm -rf /\n" + b"#" * 100
    with TestClient(create_app(f"sqlite:///{fresh}", token=TOKEN)) as c:
        r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, script), headers=AUTH)
        assert r.status_code == 422 and r.json()["error"] == "CodeObjectError", r.text
        body = publish_body(a, codes[a.key], code_object=base64.b64encode(codes[a.key][:100]).decode())
        assert c.put(f"/v1/kernels/{a.key}", json=body, headers=AUTH).status_code == 422
    assert sqlite_digest(fresh) == before
