"""Triton entries per tenant (issue 42), against a real `rocke-aot serve` with two publish tokens:
a host's entry is its tenant's alone (another tenant and an anonymous host never get it, and
cannot write over it), and no host file joins or shadows a build's entry (an autotune record
published under a prebuilt kernel's key is refused; the prebuilt entry stays whole)."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from _service import serve_process

from rocke_aot.cache.provenance import token_id
from rocke_aot.cache.store import Store

K1 = "A" * 52
K2 = "B" * 52


def autotune(timing: float) -> dict:
    doc = {"key": ["1024", "4096"], "configs_timings": [[{"BLOCK": 1024}, [timing]]]}
    return {"triton_version": "3.9.0", "files": {"k.autotune.json": base64.b64encode(json.dumps(doc).encode()).decode()}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("tenants")
    with Store.open(d / "s.sqlite") as store:  # a build's entry (what a Triton build's put writes)
        store.put_triton_entry(K2, {"k.json": b'{"name": "k"}', "k.hsaco": b"\x7fELF..."}, triton_version="3.9.0",
                               target="hip:gfx942:64", source="build")
    (d / "tokens").write_text("tenant-a\ntenant-b\n")
    with serve_process(f"sqlite:///{d / 's.sqlite'}", token_file=str(d / "tokens")) as (_, base):
        yield {"base": base, "path": d / "s.sqlite"}


def _get(base, key, token=None):
    return httpx.get(f"{base}/v1/triton/{key}", headers={"Authorization": f"Bearer {token}"} if token else {},
                     timeout=30)


def _put(base, key, token, body):
    return httpx.put(f"{base}/v1/triton/{key}", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_a_hosts_entry_is_its_tenants_alone(served):
    base = served["base"]
    assert _put(base, K1, "tenant-a", autotune(0.5)).status_code == 200
    mine = _get(base, K1, "tenant-a")
    assert mine.status_code == 200 and set(mine.json()["files"]) == {"k.autotune.json"}
    assert _get(base, K1).status_code == 404 and _get(base, K1, "tenant-b").status_code == 404
    assert _get(base, K1, "not-a-token").status_code == 404
    # tenant b publishes other bytes under the same key: its own entry, a's untouched
    assert _put(base, K1, "tenant-b", autotune(9.0)).status_code == 200
    a, b = _get(base, K1, "tenant-a").json(), _get(base, K1, "tenant-b").json()
    assert a["files"]["k.autotune.json"]["sha256"] != b["files"]["k.autotune.json"]["sha256"]
    assert a == mine.json()
    # and a tenant cannot write over its own file with other bytes
    assert _put(base, K1, "tenant-a", autotune(0.1)).status_code == 409
    with Store.open(served["path"], readonly=True) as store:
        assert store.triton_entry(K1) == {}
        assert set(store.triton_entry(K1, token_id("tenant-a"))) == {"k.autotune.json"}


def test_no_host_file_shadows_a_prebuilt_entry(served):
    base = served["base"]
    before = _get(base, K2).json()
    r = _put(base, K2, "tenant-a", autotune(0.5))
    assert r.status_code == 409 and "prebuilt" in r.json()["message"], r.text
    assert _get(base, K2).json() == before == _get(base, K2, "tenant-a").json()
    assert set(before["files"]) == {"k.json", "k.hsaco"} and {f["source"] for f in before["files"].values()} == {"build"}
