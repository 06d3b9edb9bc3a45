"""The artifact service in process (FastAPI TestClient) over real compiled kernels.

References the service did not produce: hashlib over the bytes the store verified, the
stored zstd frame read straight from the table, aot/codeobject.py's parse of the code
object, the tile-efficiency formula worked by hand, and prometheus' own text parser.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging

import pytest
import zstandard
from _service import filled_store  # noqa: F401
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select, text, update

from rocke_aot.aot.codeobject import validate
from rocke_aot.arch import ARCHES
from rocke_aot.cache.keys import KeyInputs, artifact_key, thaw
from rocke_aot.cache.models import blobs as B
from rocke_aot.lanes import LANE_NAMES
from rocke_aot.service.app import IMMUTABLE, create_app
from rocke_aot.targets import Target

TOKEN = "publish-token-for-tests"


@pytest.fixture
def store(tmp_path, kernel_bundle):
    s = filled_store(tmp_path / "served.sqlite", kernel_bundle[1])
    yield s
    s.close()


@pytest.fixture
def client(store):
    with TestClient(create_app(store, token=TOKEN)) as c:
        yield c


def metric(c: TestClient, name: str, **labels) -> float:
    total = 0.0
    for fam in text_string_to_metric_families(c.get("/metrics").text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def stored_frame(store, sha: str) -> bytes:
    with store.engine.connect() as conn:
        return bytes(conn.execute(select(B.c.data).where(B.c.sha256 == sha)).scalar_one())


# ---- fetch ---------------------------------------------------------------------------------

def test_blob_identity_headers_and_bytes(client, store):
    arts = store.find()
    assert len(arts) >= 2  # the fixture's kernels: an empty store would pass the loop
    for a in arts:
        r = client.get(f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200
        assert hashlib.sha256(r.content).hexdigest() == a.sha256 and len(r.content) == a.size
        assert r.content == store.get(a.key).code_object
        assert r.headers["etag"] == f'"{a.sha256}"'
        assert r.headers["cache-control"] == "public, max-age=31536000, immutable" == IMMUTABLE
        assert "content-encoding" not in r.headers
        assert r.headers["content-type"] == "application/octet-stream"


def test_zstd_pass_through_sends_the_stored_frame(client, store):
    a = store.find()[0]
    with client.stream("GET", f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": "zstd"}) as r:
        wire = b"".join(r.iter_raw())
    assert r.status_code == 200 and r.headers["content-encoding"] == "zstd"
    assert wire == stored_frame(store, a.sha256)  # the frame as stored, not re-compressed
    assert len(wire) < a.size
    assert zstandard.ZstdDecompressor().decompress(wire) == store.get(a.key).code_object
    # q=0 refuses zstd: raw bytes
    r = client.get(f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": "zstd;q=0, identity"})
    assert "content-encoding" not in r.headers and hashlib.sha256(r.content).hexdigest() == a.sha256


def test_dictionary_frames_are_served_raw(client, store):
    """A blob recompressed with a trained dictionary cannot be decoded by a client alone."""
    from rocke_aot.cache import codec

    a = store.find()[0]
    raw = store.get(a.key).code_object
    samples = [store.get(x.key).code_object for x in store.find()] * 8
    zd = codec.train(samples, 2048)
    from rocke_aot.cache.models import zstd_dicts as D

    with store.engine.begin() as conn:
        did = conn.execute(D.insert().values(arch=a.arch, family=a.family, sha256=zd.sha256, size=len(zd.data),
                                             samples=len(samples), data=zd.data, created_at=0.0)).inserted_primary_key[0]
        frame = codec.encode(raw, 3, zd)
        conn.execute(update(B).where(B.c.sha256 == a.sha256).values(
            data=frame, stored_size=len(frame), codec=codec.CODEC_DICT, dict_id=did))
    r = client.get(f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": "zstd"})
    assert r.status_code == 200 and "content-encoding" not in r.headers and r.content == raw


def test_if_none_match_and_head(client, store):
    a = store.find()[0]
    for inm in (f'"{a.sha256}"', f'W/"{a.sha256}"', f'"{"0" * 64}", "{a.sha256}"', "*"):
        r = client.get(f"/v1/blobs/{a.sha256}", headers={"If-None-Match": inm})
        assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == f'"{a.sha256}"'
    r = client.get(f"/v1/blobs/{a.sha256}", headers={"If-None-Match": f'"{"0" * 64}"'})
    assert r.status_code == 200
    r = client.get(f"/v1/kernels/{a.key}", headers={"If-None-Match": f'"{a.sha256}"'})
    assert r.status_code == 304
    r = client.get(f"/v1/blobs/{'0' * 64}", headers={"If-None-Match": f'"{"0" * 64}"'})
    assert r.status_code == 404  # a 304 is never a claim about a blob the store does not hold
    r = client.head(f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) == a.size
    r = client.head(f"/v1/kernels/{a.key}", headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200 and r.headers["etag"] == f'"{a.sha256}"'
    assert metric(client, "rocke_not_modified_total") == 5


def test_kernel_by_key_and_meta(client, store):
    arts = store.find()
    assert len(arts) >= 2  # the fixture's kernels: an empty store would pass the loop
    for a in arts:
        r = client.get(f"/v1/kernels/{a.key}", headers={"Accept-Encoding": "identity"})
        assert r.status_code == 200 and hashlib.sha256(r.content).hexdigest() == a.sha256
        assert r.headers["content-location"] == f"/v1/blobs/{a.sha256}"
        m = client.get(f"/v1/kernels/{a.key}/meta").json()
        info = validate(r.content, Target.parse("gfx942"))  # the code object's own metadata note, parsed independently
        assert m["resources"]["vgpr_count"] == info.vgpr_count and m["resources"]["sgpr_count"] == info.sgpr_count
        assert m["resources"]["lds_bytes"] == info.lds_bytes and m["resources"]["wavefront_size"] == 64
        # the launch contract the builder stored, its argument layout as the code object's note says
        assert m["launch"] == thaw(a.metadata)["launch"]
        note = {(x.offset, x.size) for x in info.args}
        assert m["launch"]["args"] and all((x["offset"], x["size"]) in note for x in m["launch"]["args"])
        assert m["spec"] == thaw(a.spec) and m["lane"] == "llvm22" and m["profile"] == a.profile
        assert m["toolchain"] == thaw(a.toolchain) and m["ir_sha256"] == a.ir_sha256
        ins = KeyInputs(m["arch"], m["lane"], m["profile"], m["family"], m["spec"], m["recipe_digest"], m["toolchain"], m["options"])
        assert artifact_key(ins) == a.key  # the record is enough to recompute the key


def test_listing_pages_cover_every_artifact_once(client, store):
    want = sorted(a.key for a in store.find())
    got, cursor, pages = [], None, 0
    while True:
        r = client.get("/v1/kernels", params={"limit": 3, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200
        page = r.json()
        got += [i["key"] for i in page["items"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert got == want and pages == 3
    assert len(client.get("/v1/kernels", params={"lane": "llvm22", "family": "gemm", "arch": "gfx942"}).json()["items"]) == 8
    assert client.get("/v1/kernels", params={"lane": "llvm20"}).json() == {"items": [], "next_cursor": None}
    assert client.get("/v1/kernels", params={"arch": "gfx1250"}).json()["items"] == []


# ---- select --------------------------------------------------------------------------------

def test_select_ranks_by_hand_worked_efficiency(client, store):
    cus = ARCHES["gfx942"].cu_count
    r = client.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": {"m": 1000, "n": 1000, "k": 512}})
    assert r.status_code == 200, r.text
    body = r.json()
    # every stored spec tiles 64x64: M and N pad 1000 -> 1024, 16*16 = 256 tiles over the CUs
    want = (1000 / 1024) ** 2 * (256 / (-(-256 // cus) * cus))
    assert len(body["accepted"]) == 8 and body["rejected"] == []
    for c in body["accepted"]:
        assert c["efficiency"]["total"] == pytest.approx(want, rel=1e-12)
        blob = client.get(c["url"], headers={"Accept-Encoding": "identity"})
        assert hashlib.sha256(blob.content).hexdigest() == c["sha256"]
        assert client.get(c["kernel_url"], headers={"Accept-Encoding": "identity"}).content == blob.content
    assert len(client.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "limit": 2,
                                               "problem": {"m": 1000, "n": 1000, "k": 512}}).json()["accepted"]) == 2
    # below the floor: rejected with the efficiency named
    floor = {"arch": "gfx942", "family": "gemm", "min_efficiency": 0.9, "problem": {"m": 1000, "n": 1000, "k": 512}}
    r = client.post("/v1/select", json=floor).json()
    assert r["accepted"] == [] and r["rejected"] == [] and r["rejected_count"] == 8  # listed only with explain
    r = client.post("/v1/select", json={**floor, "explain": True}).json()
    assert r["accepted"] == [] and len(r["rejected"]) == 8 == r["rejected_count"]
    assert all(x["reason"].startswith("efficiency below the floor: efficiency 0.803") for x in r["rejected"])
    # a dtype no stored spec is baked for
    r = client.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "explain": True,
                                        "problem": {"m": 64, "n": 64, "k": 64, "dtype": "f32"}}).json()
    assert r["accepted"] == [] and r["rejected"] and all(x["reason"].startswith("spec does not accept the problem: dtype")
                                       for x in r["rejected"])
    # every accepted candidate carries its generation and its occupancy (from the shared select)
    body = client.post("/v1/select", json={"arch": "gfx942", "family": "gemm",
                                           "problem": {"m": 1000, "n": 1000, "k": 512}}).json()
    assert all(c["generation"] and c["resources"]["occupancy"] for c in body["accepted"])


# ---- bad inputs: one table -------------------------------------------------------------------

K = "ab" * 32
GOOD_PROBLEM = {"m": 64, "n": 64, "k": 64}


def sel(**kw):
    return {"arch": "gfx942", "family": "gemm", "problem": GOOD_PROBLEM, **kw}


BAD = [
    # (method, path, request kwargs, status, error class, message fragment, field)
    ("GET", "/v1/blobs/xyz", {}, 422, "RequestValidationError", "should match pattern", "path.sha256"),
    ("GET", "/v1/blobs/" + "a" * 63, {}, 422, "RequestValidationError", "should match pattern", "path.sha256"),
    ("GET", "/v1/blobs/" + "A" * 64, {}, 422, "RequestValidationError", "should match pattern", "path.sha256"),
    ("GET", "/v1/blobs/" + "a" * 65, {}, 422, "RequestValidationError", "should match pattern", "path.sha256"),
    ("GET", "/v1/blobs/" + "0" * 64, {}, 404, "NotFoundError", "no blob", None),
    ("GET", "/v1/kernels/nothex", {}, 422, "RequestValidationError", "should match pattern", "path.key"),
    ("GET", "/v1/kernels/" + K, {}, 404, "NotFoundError", "no artifact", None),
    ("GET", "/v1/kernels/g" + K[1:] + "/meta", {}, 422, "RequestValidationError", "should match pattern", "path.key"),
    ("GET", "/v1/kernels/" + K + "/meta", {}, 404, "NotFoundError", "no artifact", None),
    ("GET", "/v1/kernels?lane=llvm99", {}, 422, "FieldError", "unknown compiler lane 'llvm99'", "lane"),
    ("GET", "/v1/kernels?arch=gfx9999", {}, 422, "FieldError", "gfx9999", "arch"),
    ("GET", "/v1/kernels?family=nope", {}, 422, "FieldError", "unknown family 'nope'", "family"),
    ("GET", "/v1/kernels?limit=-1", {}, 422, "RequestValidationError", "greater than or equal to 1", "query.limit"),
    ("GET", "/v1/kernels?limit=0", {}, 422, "RequestValidationError", "greater than or equal to 1", "query.limit"),
    ("GET", "/v1/kernels?limit=1000000000", {}, 422, "RequestValidationError", "less than or equal to 1000", "query.limit"),
    ("GET", "/v1/kernels?limit=ten", {}, 422, "RequestValidationError", "valid integer", "query.limit"),
    ("GET", "/v1/kernels?cursor=zz", {}, 422, "RequestValidationError", "should match pattern", "query.cursor"),
    ("GET", "/v1/kernels?lane=" + "x" * 100, {}, 422, "RequestValidationError", "at most 32 characters", "query.lane"),
    ("POST", "/v1/select", {"json": sel(lanes=["llvm99"])}, 422, "FieldError", "unknown compiler lane", "lanes.0"),
    ("POST", "/v1/select", {"json": sel(lanes=[22])}, 422, "RequestValidationError", "valid string", "body.lanes.0"),
    ("POST", "/v1/select", {"json": sel(lanes="llvm22")}, 422, "RequestValidationError", "valid list", "body.lanes"),
    ("POST", "/v1/select", {"json": sel(limit=-1)}, 422, "RequestValidationError", "greater than or equal to 1", "body.limit"),
    ("POST", "/v1/select", {"json": sel(limit=10**12)}, 422, "RequestValidationError", "less than or equal", "body.limit"),
    ("POST", "/v1/select", {"json": sel(min_efficiency=1.5)}, 422, "RequestValidationError", "less than or equal", "body.min_efficiency"),
    ("POST", "/v1/select", {"json": sel(arch="gfx9999")}, 422, "FieldError", "gfx9999", "arch"),
    ("POST", "/v1/select", {"json": sel(arch="gfx942:xnack*")}, 422, "FieldError", "malformed target feature", "arch"),
    ("POST", "/v1/select", {"json": sel(family="conv9")}, 422, "FieldError", "unknown family 'conv9'", "family"),
    ("POST", "/v1/select", {"json": sel(problem={"m": "64", "n": 64, "k": 64})}, 422, "FieldError", "must be an int", "problem"),
    ("POST", "/v1/select", {"json": sel(problem={"m": 64})}, 422, "FieldError", "missing", "problem"),
    ("POST", "/v1/select", {"json": sel(problem={"m": 64, "n": 64, "k": 64, "q": 1})}, 422, "FieldError", "unknown gemm problem fields", "problem"),
    ("POST", "/v1/select", {"json": sel(problem={"m": -64, "n": 64, "k": 64})}, 422, "FieldError", "must be >= 1", "problem"),
    ("POST", "/v1/select", {"json": sel(extra=1)}, 422, "RequestValidationError", "Extra inputs are not permitted", "body.extra"),
    ("POST", "/v1/select", {"json": {"family": "gemm", "problem": GOOD_PROBLEM}}, 422, "RequestValidationError", "Field required", "body.arch"),
    ("POST", "/v1/select", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 422,
     "RequestValidationError", "malformed JSON body", "body"),
    ("POST", "/v1/select", {"content": b"[" + b"1," * 40000 + b"1]", "headers": {"content-type": "application/json"}},
     413, "TooLarge", "over the 65536-byte limit", None),
    # path tricks: %2f is decoded before routing, so they fall outside every route (404) or
    # fail the parameter's pattern (422); nothing ever reads a file
    ("GET", "/v1/blobs/..%2f..%2fetc%2fpasswd", {}, 404, "NotFound", "Not Found", None),
    ("GET", "/v1/blobs/%2e%2e", {}, 422, "RequestValidationError", "should match pattern", "path.sha256"),
    ("GET", "/v1/kernels/..%2f" + K, {}, 404, "NotFound", "Not Found", None),
    ("GET", "/v1/kernels/%2e%2e%2fmeta", {}, 422, "RequestValidationError", "should match pattern", "path.key"),
    ("GET", "/v1/kernels/..%2f..%2fhealthz/meta", {}, 404, "NotFound", "Not Found", None),
    ("GET", "/v1/kernels/" + "a" * 64 + "%00", {}, 422, "RequestValidationError", "should match pattern", "path.key"),
    ("GET", "/v1/kernels?cursor=..%2f..%2f", {}, 422, "RequestValidationError", "should match pattern", "query.cursor"),
    # a write without the token is refused from its head alone, before routing (service/guard.py)
    ("PUT", "/v1/kernels/..%2f..%2fx", {"json": {}}, 401, "Unauthorized", "bearer token", None),
    ("PUT", "/v1/kernels/..%2f..%2fx", {"json": {}, "headers": {"Authorization": f"Bearer {TOKEN}"}}, 404,
     "NotFound", "Not Found", None),
    ("PUT", "/v1/kernels/%2e%2e", {"json": {}, "headers": {"Authorization": f"Bearer {TOKEN}"}}, 422,
     "RequestValidationError", "should match pattern", "path.key"),
    # publish refusals that need no body
    ("PUT", "/v1/kernels/" + K, {"json": {}}, 401, "Unauthorized", "bearer token", None),
    ("PUT", "/v1/kernels/" + K, {"json": {}, "headers": {"Authorization": "Bearer wrong"}}, 401, "Unauthorized", "bearer token", None),
    ("PUT", "/v1/kernels/" + K, {"json": {}, "headers": {"Authorization": f"Basic {TOKEN}"}}, 401, "Unauthorized", "bearer token", None),
    ("PUT", "/v1/kernels/" + K, {"content": b"{", "headers": {"Authorization": f"Bearer {TOKEN}",
                                                            "content-type": "application/json"}},
     422, "FieldError", "Invalid JSON", "body"),
    ("PUT", "/v1/kernels/" + K, {"content": b"x" * (17 << 20), "headers": {"Authorization": f"Bearer {TOKEN}"}},
     413, "TooLarge", "over the 16777216-byte limit", None),
    ("DELETE", "/v1/kernels/" + K, {}, 401, "Unauthorized", "bearer token", None),
    ("DELETE", "/v1/kernels/" + K, {"headers": {"Authorization": f"Bearer {TOKEN}"}}, 405, "MethodNotAllowed",
     "Method Not Allowed", None),
]


@pytest.mark.parametrize("method,path,kw,status,error,fragment,field", BAD,
                         ids=[f"{i}-{b[0]}-{b[1][:40]}" for i, b in enumerate(BAD)])
def test_bad_inputs(client, method, path, kw, status, error, fragment, field):
    r = client.request(method, path, **kw)
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"] == error, body
    assert fragment in body["message"], body
    assert body.get("field") == field, body
    if error == "FieldError" and field in ("lane", "lanes.0"):
        assert body["accepted"] == list(LANE_NAMES)
    if error == "FieldError" and field == "arch":
        assert "gfx942" in body["accepted"] and "gfx1250" in body["accepted"]
    if error == "FieldError" and field == "family":
        assert "gemm" in body["accepted"]


def test_read_only_server_refuses_publish(store):
    with TestClient(create_app(store)) as c:
        r = c.put(f"/v1/kernels/{K}", json={}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 403 and r.json()["error"] == "ReadOnly"


# ---- publish ---------------------------------------------------------------------------------

def publish_body(a, code: bytes, **over):
    d = {"arch": a.arch, "lane": a.lane, "profile": a.profile, "family": a.family, "spec": thaw(a.spec),
         "recipe_digest": a.recipe_digest, "toolchain": thaw(a.toolchain), "options": thaw(a.options), "ir_sha256": a.ir_sha256,
         "sha256": hashlib.sha256(code).hexdigest(), "code_object": base64.b64encode(code).decode(),
         "metadata": thaw(a.metadata), "provenance": {"from": "test"}}
    d.update(over)
    return d


def count_rows(store) -> tuple[int, int]:
    with store.engine.connect() as conn:
        return (conn.execute(text("SELECT count(*) FROM artifacts")).scalar(),
                conn.execute(text("SELECT count(*) FROM blobs")).scalar())


def test_publish_verifies_and_refuses_without_writing(tmp_path, store):
    from rocke_aot.cache.store import Store

    src = store.find()
    a = src[0]
    other = next(x for x in src if x.sha256 != a.sha256)  # two specs may compile to the same bytes
    code, other_code = store.get(a.key).code_object, store.get(other.key).code_object
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with Store.open(tmp_path / "empty.sqlite") as dst, TestClient(create_app(dst, token=TOKEN)) as c:
        refusals = [
            (publish_body(a, code, sha256="0" * 64), a.key, 422, "sha256"),
            (publish_body(a, other_code, sha256=hashlib.sha256(code).hexdigest()), a.key, 422, "sha256"),
            (publish_body(a, code), other.key, 422, "key"),  # inputs hash to a.key, not other.key
            (publish_body(a, b"\x7fELF not really"), a.key, 422, "CodeObjectError"),
            (publish_body(a, code, code_object="!!notbase64!!"), a.key, 422, "code_object"),
            (publish_body(a, code, lane="llvm99"), a.key, 422, "lane"),
            (publish_body(a, code, arch="gfx90a"),
             artifact_key(KeyInputs("gfx90a", a.lane, a.profile, a.family, a.spec, a.recipe_digest, a.toolchain,
                                   a.options)),
             422, "CodeObjectError"),  # gfx942 bytes declared for gfx90a
        ]
        for body, key, status, what in refusals:
            r = c.put(f"/v1/kernels/{key}", json=body, headers=auth)
            assert r.status_code == status, (what, r.text)
            assert what in r.text
            assert count_rows(dst) == (0, 0), what  # nothing written on any refusal
        r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, code), headers=auth)
        assert r.status_code == 200, r.text
        assert r.json()["created"] is True and r.json()["kernel"]["sha256"] == a.sha256
        assert dst.get(a.key).code_object == code
        r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, code), headers=auth)
        assert r.status_code == 200 and r.json()["created"] is False
        # the same key with other (valid, well-formed) bytes: 409, the stored bytes stay
        r = c.put(f"/v1/kernels/{a.key}", json=publish_body(a, other_code), headers=auth)
        assert r.status_code == 409 and r.json()["error"] == "Conflict"
        assert dst.get(a.key).code_object == code and count_rows(dst) == (1, 1)
        assert c.get(f"/v1/kernels/{a.key}", headers={"Accept-Encoding": "identity"}).content == code
        assert metric(c, "rocke_publishes_total", outcome="created") == 1


# ---- corruption, metrics, OpenAPI ------------------------------------------------------------

def test_corrupt_blob_is_never_served(store, caplog):
    a = store.find()[0]
    frame = bytearray(stored_frame(store, a.sha256))
    frame[len(frame) // 2] ^= 0xFF
    with store.engine.begin() as conn:
        conn.execute(update(B).where(B.c.sha256 == a.sha256).values(data=bytes(frame)))
    with TestClient(create_app(store)) as c, caplog.at_level(logging.ERROR, logger="rocke_aot.service"):
        for path in (f"/v1/blobs/{a.sha256}", f"/v1/kernels/{a.key}"):
            for enc in ("zstd", "identity"):
                r = c.get(path, headers={"Accept-Encoding": enc})
                assert r.status_code == 500 and r.json()["error"] == "IntegrityError", r.text
                assert a.sha256 in r.json()["message"]
                assert bytes(frame) not in r.content
        assert metric(c, "rocke_verification_failures_total") == 4
        assert sum("corrupt blob" in rec.getMessage() for rec in caplog.records) == 4
        other = store.find()[1]
        assert c.get(f"/v1/blobs/{other.sha256}").status_code == 200  # only the damaged blob is refused


def test_metrics_count_requests_bytes_hits_and_misses(client, store):
    arts = store.find()
    sent = 0
    for a in arts[:3]:
        sent += len(client.get(f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": "identity"}).content)
    client.get(f"/v1/blobs/{arts[0].sha256}", headers={"Accept-Encoding": "identity"})
    sent += arts[0].size
    client.get(f"/v1/blobs/{'0' * 64}")
    client.get("/v1/kernels?lane=bad")
    assert metric(client, "rocke_http_requests_total", route="/v1/blobs/{sha256}", status="200") == 4
    assert metric(client, "rocke_http_requests_total", route="/v1/blobs/{sha256}", status="404") == 1
    assert metric(client, "rocke_http_requests_total", route="/v1/kernels", status="422") == 1
    assert metric(client, "rocke_bytes_served_total", encoding="identity") == sent
    assert metric(client, "rocke_lookups_total", result="hit") == 4
    assert metric(client, "rocke_lookups_total", result="miss") == 1
    assert metric(client, "rocke_frame_cache_total", result="hit") == 1
    assert metric(client, "rocke_http_request_seconds_count", route="/v1/blobs/{sha256}") == 5
    client.get("/no/such/route")
    assert metric(client, "rocke_http_requests_total", route="<unmatched>", status="404") == 1


def test_openapi_documents_every_endpoint_parameter_and_error(client):
    doc = client.get("/openapi.json").json()
    ops = {(m.upper(), p): op for p, item in doc["paths"].items() for m, op in item.items()}
    assert set(ops) == {
        ("GET", "/v1/blobs/{sha256}"), ("HEAD", "/v1/blobs/{sha256}"), ("GET", "/v1/kernels/{key}"),
        ("HEAD", "/v1/kernels/{key}"), ("PUT", "/v1/kernels/{key}"), ("GET", "/v1/kernels/{key}/meta"),
        ("GET", "/v1/kernels"), ("POST", "/v1/select"), ("GET", "/healthz"), ("GET", "/metrics"),
        ("GET", "/v1/trust/{name}"), ("PUT", "/v1/trust/{name}"),
        ("GET", "/v1/triton/{key}"), ("PUT", "/v1/triton/{key}"),  # Triton's remote cache (docs/triton.md)
    }
    for (method, path), op in ops.items():
        if path not in ("/healthz", "/metrics"):
            assert "422" in op["responses"], (method, path)
            assert op["responses"]["422"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")
        for prm in op.get("parameters", []):
            assert prm["schema"] and prm.get("description"), (method, path, prm)
    assert {"401", "403", "409", "413", "422"} <= set(ops[("PUT", "/v1/kernels/{key}")]["responses"])
    assert ops[("PUT", "/v1/kernels/{key}")]["requestBody"]["content"]["application/json"]["schema"]["$ref"] \
        == "#/components/schemas/PublishRequest"
    assert "PublishRequest" in doc["components"]["schemas"]
    assert "HTTPBearer" in json.dumps(doc["components"]["securitySchemes"])
    assert "304" in ops[("GET", "/v1/blobs/{sha256}")]["responses"]


def test_hot_path_answers_exactly_what_the_route_answers(store):
    """The first GET is a miss (the FastAPI route verifies and caches), the second a hit
    (HotBlobs answers from memory): same status, headers and bytes, both encodings."""
    a = store.find()[3]
    for enc in ("identity", "zstd", "gzip, zstd;q=0.5"):
        with TestClient(create_app(store)) as c:
            got = []
            for _ in range(2):
                with c.stream("GET", f"/v1/blobs/{a.sha256}", headers={"Accept-Encoding": enc}) as r:
                    got.append((r.status_code, {k: v for k, v in r.headers.items() if k not in ("date", "server")},
                                b"".join(r.iter_raw())))
            assert got[0] == got[1], enc
            assert metric(c, "rocke_frame_cache_total", result="hit") == 1
            assert metric(c, "rocke_frame_cache_total", result="miss") == 1
            assert metric(c, "rocke_http_requests_total", route="/v1/blobs/{sha256}", status="200") == 2
