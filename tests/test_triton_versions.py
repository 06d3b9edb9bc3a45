"""One request, one Triton version: an artifact built by one Triton is never served to a host of another.

    the store     triton_softmax (BLOCK=1024, cols % 16 == 0) for gfx942 built by the real builder
                  twice: Triton 3.6.0 (llvm22) and Triton 3.9.0 (llvm24), one compile each. Two
                  Triton versions on ONE lane cannot be built here (each lane has one Triton), so
                  the third record is constructed through the store's public API: the 3.6.0 code
                  object put under a toolchain identity naming Triton 3.6.1 on llvm22 (Store.put,
                  then Store.complete_generation: a newer complete build of the same spec)
    generations   both llvm22 rows stay served (a Triton version is a serving line of its own)
    select        triton_version=3.6.0 -> the 3.6.0 build only (3.9.0's newer lane and 3.6.1's newer
                  generation rejected as "other Triton version"); none -> every version's build,
                  each labelled, triton_versions listing them; a version for gemm refused
    the service   POST /v1/select typed (SelectRequest.triton_version, RankedKernel.triton_version,
                  triton_versions), 422 naming the field; service/client.py refuses an answer to
                  another version (AnswerMismatchError) or a row whose version the answer does not
                  list (MalformedAnswerError); the runner's ServerSource refuses a kernel whose key's
                  toolchain names another Triton, also when the server relabels its row
    the host      bench's Triton version: --triton-version, else the installed triton's (a real
                  install: the llvm24 lane's interpreter, 3.9.0), else a SpecError before any GPU
"""

from __future__ import annotations

import json
import os
import subprocess
import sysconfig
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.builder import build
from rocke_aot.cache.generations import generation_of
from rocke_aot.cache.keys import KeyInputs, thaw
from rocke_aot.cache.store import Store
from rocke_aot.cli.main import cli
from rocke_aot.client import Fetcher, LocalStore, ServiceSource
from rocke_aot.errors import AnswerMismatchError, MalformedAnswerError, SpecError
from rocke_aot.lanes import get_lane
from rocke_aot.runner.bench import ServerSource, host_triton_version
from rocke_aot.service.app import create_app
from rocke_aot.service.client import Client, check_select, parse_select
from rocke_aot.service.selection import parse_problem, select
from rocke_aot.targets import Target
from rocke_aot.variants.selection import OTHER_LANE, OTHER_TRITON

REPO = Path(__file__).resolve().parents[1]
WHERE = {"BLOCK": "1024", "cols_class": "div16"}
PROBLEM = {"rows": 8, "cols": 1024}


@pytest.fixture(scope="module")
def two(tmp_path_factory, all_toolchains):
    for lane in ("llvm22", "llvm24"):
        if not tcs.toolchains_for_lane(get_lane(lane), all_toolchains, consumes="triton"):
            pytest.fail(f"no Triton on the {lane} lane here: run `bash scripts/setup.sh`")
    url = str(tmp_path_factory.mktemp("triton-versions") / "cache.sqlite")
    with Store.open(url) as store:
        for lane in ("llvm22", "llvm24"):
            s = build(arches=[Target.parse("gfx942")], families=["triton_softmax"], lanes=[lane], store=store,
                      toolchains=all_toolchains, where=WHERE)
            assert s["built"] == 1 and not s["failed"], s["failed"]
        arts = {a.inputs.toolchain["triton_version"]: a for a in store.find(family="triton_softmax")}
        assert set(arts) == {"3.6.0", "3.9.0"} and arts["3.6.0"].lane == "llvm22" and arts["3.9.0"].lane == "llvm24"
        assert arts["3.6.0"].spec == arts["3.9.0"].spec  # one spec, two Tritons
        # Triton "3.6.1" on llvm22: no such build here, so its record is constructed (module doc)
        a = arts["3.6.0"]
        inputs = KeyInputs(a.arch, a.lane, a.profile, a.family, thaw(a.inputs.spec), a.inputs.recipe_digest,
                           {**thaw(a.inputs.toolchain), "triton_version": "3.6.1"}, thaw(a.inputs.options))
        meta = thaw(a.metadata)
        meta["triton"]["triton_version"] = "3.6.1"
        arts["3.6.1"] = store.put(inputs, store.get(a.key).code_object, ir_sha256=a.ir_sha256, metadata=meta,
                                  provenance=thaw(a.provenance))
        store.complete_generation(generation_of(inputs))  # a newer complete build of the same (arch, lane, spec)
    return {"url": url, "arts": arts}


def _keys(sel) -> dict[str, str]:
    return {c.candidate.triton_version: c.key for c in sel.accepted}


def test_each_triton_version_keeps_its_served_row(two):
    with Store.open(two["url"]) as store:
        served = {a.key for a in store.find(family="triton_softmax", served_only=True)}
    assert served == {a.key for a in two["arts"].values()}  # 3.6.1's newer generation took nothing from 3.6.0


def test_a_request_naming_a_version_gets_that_versions_build_only(two):
    arts = two["arts"]
    with Store.open(two["url"], readonly=True) as store:
        for version in ("3.6.0", "3.6.1", "3.9.0"):
            sel = select(store, "gfx942", "triton_softmax", PROBLEM, triton_version=version)
            assert _keys(sel) == {version: arts[version].key}
            assert sel.triton_version == version and sel.triton_versions == ("3.6.0", "3.6.1", "3.9.0")
            others = {r.key: r for r in sel.rejected}
            assert set(others) == {a.key for v, a in arts.items() if v != version}
            assert {r.reason for r in others.values()} == {OTHER_TRITON}
            assert all(f"the request runs Triton {version}" in r.detail for r in others.values())
        # without a version: every version's build, each labelled; never "other lane preferred" across Tritons
        sel = select(store, "gfx942", "triton_softmax", PROBLEM)
        assert _keys(sel) == {v: a.key for v, a in arts.items()} and sel.triton_version is None
        assert OTHER_LANE not in {r.reason for r in sel.rejected}
        # a version nobody built: nothing, and no build hint (the cache holds the spec, for other Tritons)
        none = select(store, "gfx942", "triton_softmax", PROBLEM, triton_version="3.5.0")
        assert not none.accepted and none.no_candidate is None and none.triton_versions == ("3.6.0", "3.6.1", "3.9.0")
        with pytest.raises(SpecError, match="gemm is not a Triton family"):
            select(store, "gfx942", "gemm", {"m": 64, "n": 64, "k": 64}, triton_version="3.6.0")
        with pytest.raises(SpecError, match="triton_version"):
            select(store, "gfx942", "triton_softmax", PROBLEM, triton_version="3.6.0; drop")


def test_the_service_and_its_client_keep_versions_apart(two, tmp_path):
    arts = two["arts"]
    with Store.open(two["url"], readonly=True) as store, TestClient(create_app(store)) as http:
        with Client("http://testserver", cache=tmp_path / "local.sqlite", http=http) as client:
            doc = client.select("gfx942", "triton_softmax", PROBLEM, triton_version="3.6.0")
            assert [c["key"] for c in doc["accepted"]] == [arts["3.6.0"].key]
            assert doc["accepted"][0]["triton_version"] == "3.6.0" and doc["triton_version"] == "3.6.0"
            every = client.select("gfx942", "triton_softmax", PROBLEM)
            assert {c["triton_version"]: c["key"] for c in every["accepted"]} == {v: a.key for v, a in arts.items()}
            assert every["triton_versions"] == ["3.6.0", "3.6.1", "3.9.0"]
            with pytest.raises(SpecError, match="gemm is not a Triton family"):
                client.select("gfx942", "gemm", {"m": 64, "n": 64, "k": 64}, triton_version="3.6.0")
        r = http.post("/v1/select", json={"arch": "gfx942", "family": "gemm", "problem": {"m": 1, "n": 1, "k": 1},
                                          "triton_version": "3.6.0"})
        assert r.status_code == 422 and r.json()["field"] == "triton_version"
        r = http.post("/v1/select", json={"arch": "gfx942", "family": "triton_softmax", "problem": PROBLEM,
                                          "triton_version": 3.6})
        assert r.status_code == 422  # strict: a number is not a version
        raw = http.post("/v1/select", json={"arch": "gfx942", "family": "triton_softmax", "problem": PROBLEM}).content
    device = Target.parse("gfx942")
    # a server answering every version to a request naming 3.6.0
    with pytest.raises(AnswerMismatchError, match="the request named '3.6.0'"):
        check_select(parse_select(raw), device, "triton_softmax", None, None, "http://evil", triton_version="3.6.0")
    doc = json.loads(raw)
    doc["triton_version"] = "3.6.0"  # ... saying it answers 3.6.0, with 3.9.0's row among them
    with pytest.raises(MalformedAnswerError, match="request named 3.6.0"):
        parse_select(json.dumps(doc).encode())
    doc = json.loads(raw)
    doc["triton_versions"] = ["3.6.0"]  # a row of a version the answer does not list
    with pytest.raises(MalformedAnswerError, match="triton_versions does not list"):
        parse_select(json.dumps(doc).encode())
    doc = json.loads(raw)
    doc["triton_version"] = "3.6.0"
    doc["accepted"] = [c for c in doc["accepted"] if c["key"] == arts["3.9.0"].key]
    doc["accepted"][0]["triton_version"] = "3.6.0"  # relabelled: parse and the row checks cannot tell
    assert check_select(parse_select(json.dumps(doc).encode()), device, "triton_softmax", None, None, "http://evil",
                        triton_version="3.6.0")["accepted"][0]["key"] == arts["3.9.0"].key


def test_the_runner_never_launches_another_tritons_kernel(two, tmp_path):
    """ServerSource over the service: the 3.6.0 build loads; a server relabelling 3.9.0's row as
    3.6.0 is caught by the key's own toolchain identity before anything is kept or launched."""
    arts = two["arts"]
    problem = parse_problem("triton_softmax", PROBLEM)
    with Store.open(two["url"], readonly=True) as store, TestClient(create_app(store)) as http:
        def relabel(request: httpx.Request) -> httpx.Response:  # a server lying about a row's Triton
            r = http.request(request.method, str(request.url), content=request.content, headers=request.headers)
            body = r.content
            if request.url.path == "/v1/select":
                doc = json.loads(body)
                for c in doc["accepted"]:
                    c["key"], c["sha256"] = arts["3.9.0"].key, arts["3.9.0"].sha256
                body = json.dumps(doc).encode()
            return httpx.Response(r.status_code, headers={"content-type": r.headers["content-type"]}, content=body)

        with pytest.warns(UserWarning, match="WITHOUT signature checks"):
            fetcher = Fetcher([ServiceSource("http://testserver", http=http, retries=0)], LocalStore(tmp_path / "a"),
                              insecure=True)
        with Client("http://testserver", cache=tmp_path / "a.sqlite", http=http) as client, fetcher:
            src = ServerSource(client, fetcher)
            ranked = src.ranked(Target.parse("gfx942"), "triton_softmax", problem, None, "3.6.0")
            assert [r["key"] for r in ranked] == [arts["3.6.0"].key]
            image, meta = src.load_many([arts["3.6.0"].key])[arts["3.6.0"].key]
            assert image == store.get(arts["3.6.0"].key).code_object and meta["triton"]["triton_version"] == "3.6.0"
        evil = httpx.Client(transport=httpx.MockTransport(relabel), base_url="http://testserver")
        with pytest.warns(UserWarning, match="WITHOUT signature checks"):
            fetcher = Fetcher([ServiceSource("http://testserver", http=http, retries=0)], LocalStore(tmp_path / "b"),
                              insecure=True)
        with Client("http://testserver", cache=tmp_path / "b.sqlite", http=evil) as client, fetcher:
            src = ServerSource(client, fetcher)
            ranked = src.ranked(Target.parse("gfx942"), "triton_softmax", problem, None, "3.6.0")
            assert [r["key"] for r in ranked] == [arts["3.9.0"].key]  # the row claims 3.6.0
            with pytest.raises(AnswerMismatchError, match="built by Triton 3.9.0, not the 3.6.0 asked for"):
                src.load_many([arts["3.9.0"].key])
        assert not (tmp_path / "b" / "blobs").exists()  # nothing kept


def test_a_hosts_triton_version_is_the_installed_one(all_toolchains):
    assert host_triton_version("gemm", None) is None
    assert host_triton_version("triton_matmul", "3.6.0") == "3.6.0"
    with pytest.raises(SpecError, match="no triton installed: give the Triton version"):
        host_triton_version("triton_matmul", None)  # this interpreter has no triton
    # a real install: the llvm24 lane's interpreter runs Triton 3.9.0
    tc = tcs.toolchains_for_lane(get_lane("llvm24"), all_toolchains, consumes="triton")[0]
    code = "from rocke_aot.runner.bench import host_triton_version as h; print(h('triton_softmax', None))"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": f"{REPO}:{sysconfig.get_paths()['purelib']}",
           "ROCKE_AOT_HOME": os.environ.get("ROCKE_AOT_HOME", str(Path.home() / ".cache" / "rocke-aot"))}
    out = subprocess.run([tc.python, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == tc.detect().extra["triton_version"] == "3.9.0"


def test_bench_refuses_a_triton_family_without_a_version_before_looking_for_a_gpu(two):
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "gfx942", "--family", "triton_softmax",
                                 "--problem", json.dumps(PROBLEM), "--cache", two["url"]])
    assert r.exit_code == 2 and "no triton installed" in r.output, r.output
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "gfx942", "--family", "gemm",
                                 "--problem", '{"m": 64, "n": 64, "k": 64}', "--triton-version", "3.6.0"])
    assert r.exit_code == 2 and "gemm is not a Triton family" in r.output, r.output
    r = CliRunner().invoke(cli, ["bench", "--run-from-cache", "--arch", "gfx942", "--family", "triton_softmax",
                                 "--problem", json.dumps(PROBLEM), "--cache", two["url"], "--triton-version", "3.6.0"])
    assert r.exit_code == 77, r.output  # the version is fine: then the GPU is looked for (none here)


def test_select_cli_labels_every_row(two):
    r = CliRunner().invoke(cli, ["select", "--arch", "gfx942", "--family", "triton_softmax", "--problem",
                                 json.dumps(PROBLEM), "--cache", two["url"]])
    assert r.exit_code == 0, r.output
    assert "Triton versions: 3.6.0, 3.6.1, 3.9.0" in r.output
    assert {v for v in ("3.6.0", "3.6.1", "3.9.0") if f"triton={v} " in r.output} == {"3.6.0", "3.6.1", "3.9.0"}
    r = CliRunner().invoke(cli, ["select", "--arch", "gfx942", "--family", "triton_softmax", "--problem",
                                 json.dumps(PROBLEM), "--cache", two["url"], "--triton-version", "3.9.0", "--json"])
    doc = json.loads(r.output)
    assert [c["key"] for c in doc["accepted"]] == [two["arts"]["3.9.0"].key] and doc["triton_version"] == "3.9.0"
