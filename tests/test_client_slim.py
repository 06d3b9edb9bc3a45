"""The slim client (rocke_aot.client) and the lazy command line.

    import rocke_aot.client          (a fresh interpreter) ──sys.modules──> no fastapi,
                                     starlette, sqlalchemy, llvmlite, rocke_aot.aot/service
    rocke-aot --help                 (a fresh interpreter) ──> no command module imported
    COMMANDS' summary lines          == each command's own (click's get_short_help_str)
    Fetcher against a real `rocke-aot serve`: bytes equal the builder's store, kept in the
        LocalStore, a second get makes no request, offline answers locally only; a source
        that sends other bytes is refused and nothing is stored; a dead source hands over
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys

import httpx
import pytest
from _service import HTTP_TIMEOUT_S, filled_store, free_port, live_server  # noqa: F401

from rocke_aot.cache.keys import thaw
from rocke_aot.client import Fetcher, LocalStore, OfflineMiss, ServiceSource
from rocke_aot.errors import IntegrityError, SpecError

pytestmark = pytest.mark.filterwarnings("ignore::rocke_aot.client.InsecureFetchWarning")
HEAVY = ("fastapi", "starlette", "sqlalchemy", "llvmlite", "rocke_aot.aot", "rocke_aot.service", "alembic",
         "uvicorn")


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_client_imports_no_server_compiler_or_database():
    mods = _modules_after("import rocke_aot.client; rocke_aot.client.ServiceSource")
    assert "rocke_aot.client.fetch" in mods and "httpcore" in mods  # the probe saw the import
    loaded = sorted(m for m in mods if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert loaded == []
    # a warm offline fetch needs no HTTP stack, no signature library and no TUF client: they load
    # when a source is made or metadata is verified (bench/bench_tuf.py measures that process)
    mods = _modules_after("import rocke_aot.client")
    assert "rocke_aot.client.fetch" in mods
    assert sorted(m for m in mods if m.split(".")[0] in ("httpx", "httpcore", "cryptography", "tuf")) == []
    # nor the family registry (the contract check answers from its markers: client/contracts.py),
    # the launch contract type, zstandard (the local store keeps raw bytes) or platformdirs
    assert sorted(m for m in mods if m.split(".")[0] in ("zstandard", "platformdirs")
                  or m.startswith(("rocke_aot.variants", "rocke_aot.launch"))) == []


def test_a_plain_http_source_runs_on_httpcore_without_httpx():
    # httpx (about 50 ms of a fetch process's imports) loads only for an injected client, a proxy
    # or TLS; a refused connection is still a transport failure (SourceError after the retries)
    port = free_port()  # nothing listens there
    mods = _modules_after(
        "import os\nfor k in [k for k in os.environ if k.lower().endswith('_proxy')]: del os.environ[k]\n"
        "from rocke_aot.client import MirrorSource\nfrom rocke_aot.errors import SourceError\n"
        f"s = MirrorSource('http://127.0.0.1:{port}', retries=1, backoff=0.01)\n"
        "try:\n    s.metadata('timestamp.json', limit=1000)\nexcept SourceError as e:\n    print('refused', e)\n"
        "else:\n    raise SystemExit('answered')\n")
    assert "httpcore" in mods and "httpx" not in mods


def test_the_service_imports_no_compiler_and_no_numpy(tmp_path, kernel_bundle):
    # numpy is not in the [serve] extra (the serving image has none): importing the service
    # and answering a select over real kernels must not need it
    url = f"sqlite:///{tmp_path / 's.sqlite'}"
    filled_store(url, kernel_bundle[1]).close()
    mods = _modules_after(
        "import rocke_aot.service.app, rocke_aot.cli.serve\n"
        "from rocke_aot.cache.store import Store\n"
        "from rocke_aot.service.selection import select\n"
        f"with Store.open({url!r}, readonly=True) as st:\n"
        "    sel = select(st, 'gfx942', 'gemm', {'m': 512, 'n': 512, 'k': 512})\n"
        "    assert sel.accepted, sel\n")
    assert "fastapi" in mods and "rocke_aot.service.app" in mods and "rocke_aot.variants.models" in mods
    compilers = ("llvmlite", "triton", "hip", "rocm", "rocke_aot.aot.toolchains", "rocke_aot.aot.lower",
                 "rocke_aot.aot.builder", "numpy")
    assert sorted(m for m in mods if any(m == c or m.startswith(c + ".") for c in compilers)) == []


def test_help_imports_no_command_module():
    code = ("from rocke_aot.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    mods = _modules_after(code)
    assert "rocke_aot.cli.main" in mods
    commands = sorted(m for m in mods if m.startswith("rocke_aot.cli.") and m not in ("rocke_aot.cli.main",))
    assert commands == []
    assert not any(m == h or m.startswith(h + ".") for m in mods for h in HEAVY)


def test_the_command_table_summaries_are_the_commands_own():
    from rocke_aot.cli.main import COMMANDS

    for name, (module, attr, summary) in COMMANDS.items():
        cmd = getattr(importlib.import_module(module), attr)
        assert cmd.name == name
        assert summary == cmd.get_short_help_str(limit=10**6), name


@pytest.fixture(scope="module")
def server(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("slim")
    url = f"sqlite:///{d / 'served.sqlite'}"
    src = filled_store(url, kernel_bundle[1])
    with live_server(url) as base:
        yield base, src
    src.close()


def test_fetch_from_the_service_keeps_verified_bytes_locally(server, tmp_path):
    base, src = server
    a = src.find()[0]
    want = src.get(a.key).code_object
    store = LocalStore(tmp_path / "client")
    with Fetcher([ServiceSource(base)], store, insecure=True) as f:
        k = f.get(a.key)
        assert k.code_object == want and hashlib.sha256(k.code_object).hexdigest() == a.sha256
        assert k.key == a.key and k.size == len(want) and thaw(k.launch) == thaw(a.metadata["launch"])
        n = f.sources[0].requests
        assert n == 2  # the record, the blob
        assert f.get(a.key).code_object == want and f.sources[0].requests == n
    assert store.keys() == [a.key]
    assert (tmp_path / "client" / "blobs" / a.sha256).read_bytes() == want
    # the record kept (an unsigned fetch) is the server's, field for field, plus where it came from
    rec = json.loads((tmp_path / "client" / "kernels" / f"{a.key}.json").read_text())
    meta = httpx.get(f"{base}/v1/kernels/{a.key}/meta", timeout=HTTP_TIMEOUT_S).json()
    assert rec.pop("origin") == {"source": base, "signed": False}
    assert rec == {f: meta[f] for f in rec} and len(rec) == 14
    with Fetcher([], store, offline=True, insecure=True) as f:
        assert f.get(a.key).code_object == want
        with pytest.raises(OfflineMiss, match=src.find()[1].key):
            f.get(src.find()[1].key)
    # a blob changed on disk is refused on the next read, and removed
    (tmp_path / "client" / "blobs" / a.sha256).write_bytes(b"\0" + want[1:])
    with pytest.raises(IntegrityError):
        store.get(a.key)
    assert not (tmp_path / "client" / "blobs" / a.sha256).exists()


def test_a_source_sending_other_bytes_is_refused_and_nothing_is_stored(server, tmp_path):
    base, src = server
    a = src.find()[0]
    real = httpx.Client(timeout=HTTP_TIMEOUT_S)

    def tamper(request: httpx.Request) -> httpx.Response:
        r = real.get(str(request.url), headers={"accept-encoding": "identity"})
        body = r.content
        if "/v1/blobs/" in request.url.path:
            body = body[:-1] + bytes([body[-1] ^ 1])
        return httpx.Response(r.status_code, stream=httpx.ByteStream(body))

    store = LocalStore(tmp_path / "client")
    evil = ServiceSource(base, http=httpx.Client(transport=httpx.MockTransport(tamper)))
    with Fetcher([evil], store, insecure=True) as f, pytest.raises(IntegrityError, match="hash"):
        f.get(a.key)
    assert store.keys() == [] and not (tmp_path / "client" / "blobs").exists()
    # a dead source first, then the good one: the fetch succeeds from the second
    dead = ServiceSource(f"http://127.0.0.1:{free_port()}", retries=0)
    with Fetcher([dead, evil, ServiceSource(base)], store, insecure=True) as f:
        assert f.get(a.key).code_object == src.get(a.key).code_object
    real.close()


def test_fetcher_needs_a_source_and_a_valid_offline_setting(monkeypatch, tmp_path):
    with pytest.raises(SpecError, match="source"):
        Fetcher([], LocalStore(tmp_path), insecure=True)
    monkeypatch.setenv("ROCKE_AOT_OFFLINE", "yes")
    with pytest.raises(SpecError, match="ROCKE_AOT_OFFLINE"):
        Fetcher([], LocalStore(tmp_path))
