"""The bounded JSON reader (rocke_aot/boundedjson.py) and where the server side uses it.

References: Python's own json module (what a value is) and the process's peak memory in a child
process (what parsing an over-bound document would have cost: json.loads builds every object)."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import tarfile

import httpx
import pytest
from _service import serve_process

from rocke_aot import boundedjson
from rocke_aot.boundedjson import MAX_MESSAGE, JSONLimitError, Limits, check, cut, loads
from rocke_aot.cache.store import Store
from rocke_aot.errors import BundleError, SpecError

L = Limits(max_bytes=16 << 20, max_depth=8, max_items=1000, max_string=100)


def _outcome(data, limits):
    try:
        check(data, limits)
    except JSONLimitError as e:
        return e.limit, str(e)
    return None


def test_the_fast_proof_passes_only_what_the_token_scan_passes(monkeypatch):
    # check() first tries to prove a text within the bounds by whole-text operations (_within);
    # the reference is the token scan it short-cuts (the same check with the proof switched off):
    # every outcome must be the scan's, on hostile texts (lone and escaped quotes, brackets inside
    # strings, closes before opens, exactly at each bound), as bytes and as text
    rnd = random.Random(39)
    alphabet = ['"', '"', "\\", "[", "]", "{", "}", ",", "a", " ", "1", ":", "\u00e9"]
    texts = ["", '"', '"[[[', '"\\"[" [', '"abc\\', "[" * 9, "[" * 8 + "]" * 8, "]]][[[", "]]]" + "[" * 9,
             '"' + "x" * 100 + '"', '"' + "x" * 101 + '"', "[" + "1," * 999 + "1]", "[" + "1," * 1000 + "1]",
             '["]]]]","[[[["]', '"\\\\"[[[[[[[[[', '{"a":"\\"}"}', json.dumps({"k": ["[[[{{{", "]]]}}}", 'q"[q']})]
    texts += ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(0, 60))) for _ in range(4000)]
    limits = [L, Limits(1 << 20, max_depth=1, max_items=3, max_string=2), Limits(1 << 20, max_depth=3, max_items=12,
              max_string=5), Limits(1 << 20, max_depth=2, max_items=1_000_000, max_string=1 << 20)]
    proven = 0
    for text in texts:
        for data in (text, text.encode()):
            for lim in limits:
                got = _outcome(data, lim)
                proven += boundedjson._within(data, lim)
                with monkeypatch.context() as m:
                    m.setattr(boundedjson, "_within", lambda d, lm: False)
                    assert got == _outcome(data, lim), (data, lim)
    assert proven > 5000  # the proof answered most of them (the test is not vacuous)


@pytest.mark.parametrize("doc", [{"a": [1, 2.5, None, True, "x\\y"]}, [], {}, "s", 0, [[[[[]]]]],
                                 {"k": ["[[[{{{", "]]]}}}", 'q"[q', "\\"]}])
def test_values_within_the_bounds_read_as_json_reads_them(doc):
    text = json.dumps(doc)
    assert loads(text, L) == json.loads(text) and loads(text.encode(), L) == json.loads(text)


@pytest.mark.parametrize("text,limit", [
    ("[" * 9 + "]" * 9, "depth"), ("[" + "0," * 1000 + "0]", "items"), ('"' + "a" * 101 + '"', "string"),
    ('{"a": 1, "a": 2}', "malformed"), ("[NaN]", "malformed"), ("[1,", "malformed"), ("[1 2]", "malformed"),
])
def test_each_bound_is_named(text, limit):
    with pytest.raises(JSONLimitError) as e:
        loads(text, L)
    assert e.value.limit == limit and isinstance(e.value, SpecError) and len(str(e.value)) <= MAX_MESSAGE


def test_bytes_over_the_bound_are_refused_before_any_scan():
    with pytest.raises(JSONLimitError) as e:
        loads(b" " * (16 << 20) + b"0", L)
    assert e.value.limit == "bytes"


def test_messages_are_cut():
    assert len(cut("x" * 120_000_000)) == MAX_MESSAGE


CHILD = """
import sys, json, tracemalloc
from rocke_aot.boundedjson import loads, Limits, JSONLimitError
data = b"[" + b"{}," * (5 << 20) + b"{}]"   # 15 MiB of empty objects, under a 16 MiB bound
tracemalloc.start()  # what the call allocates (peak), not the process's resident size
try:
    {call}
except JSONLimitError as e:
    print("refused", e.limit)
print("grew_mb", tracemalloc.get_traced_memory()[1] >> 20)
"""


def _child(call: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD.replace("{call}", call)], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return dict(line.split() for line in p.stdout.splitlines())


def test_a_document_of_many_small_values_is_refused_before_it_is_built():
    plain = _child("json.loads(data)")  # the reference: what building it costs
    bounded = _child("loads(data, Limits(16 << 20, 32, 100_000))")
    assert bounded["refused"] == "items"
    assert int(plain["grew_mb"]) > 150 and int(bounded["grew_mb"]) < 50, (plain, bounded)


def _bundle(path, members):
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_a_bundle_manifest_over_its_value_bound_is_refused(tmp_path, monkeypatch):
    from rocke_aot.cache import bundle

    monkeypatch.setattr(bundle, "MANIFEST_LIMITS", Limits(bundle.MAX_MANIFEST, bundle.MAX_DEPTH, 1000))
    _bundle(tmp_path / "b.bundle", [("manifest.json", b"[" + b"{}," * 5000 + b"{}]")])
    with Store.open(tmp_path / "s.sqlite") as store, pytest.raises(BundleError, match="more than 1000 values"):
        store.import_(tmp_path / "b.bundle")


def test_a_huge_tar_header_is_refused_before_it_is_read(tmp_path):
    # a GNU long-name header that claims 1 GiB: tarfile would read all of it into memory
    head = tarfile.TarInfo("././@LongLink")
    head.type, head.size = tarfile.GNUTYPE_LONGNAME, 1 << 30
    with open(tmp_path / "h.bundle", "wb") as f:
        f.write(head.tobuf(format=tarfile.GNU_FORMAT))
        f.write(b"a" * (1 << 20))
    with Store.open(tmp_path / "s.sqlite") as store, pytest.raises(BundleError, match="over the 65536-byte bound"):
        store.import_(tmp_path / "h.bundle")


def test_the_service_scans_request_bodies_before_parsing_them(tmp_path):
    Store.open(tmp_path / "s.sqlite").close()
    (tmp_path / "token").write_text("t")
    with serve_process(f"sqlite:///{tmp_path / 's.sqlite'}", token_file=str(tmp_path / "token")) as (_, base):
        deep = httpx.post(f"{base}/v1/select", content=b"[" * 5000 + b"]" * 5000,
                          headers={"content-type": "application/json"}, timeout=30)
        many = httpx.put(f"{base}/v1/kernels/{'0' * 64}", content=b"[" + b"{}," * 300_000 + b"{}]",
                         headers={"content-type": "application/json", "authorization": "Bearer t"}, timeout=30)
        fine = httpx.post(f"{base}/v1/select", json={"arch": "gfx942", "family": "gemm",
                                                     "problem": {"m": 64, "n": 64, "k": 64}}, timeout=30)
    assert deep.status_code == 422 and "nested deeper than 16" in deep.json()["message"], deep.text
    assert many.status_code == 422 and "more than 100000 values" in many.json()["message"], many.text
    assert len(deep.text) < 600 and fine.status_code == 200, fine.text
