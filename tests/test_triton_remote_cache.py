"""The Triton remote cache backend (client/triton_cache.py) against a real `rocke-aot serve` on loopback.

A "GPU host" here is a Triton process on this CPU (tests/_triton_host.py: Triton 3.9 of the
llvm24 lane, the HIP target gfx942 named by a stand-in driver) launching the softmax kernel as
a host does; Triton's own compilation listener counts what it compiled. The server is filled
by the builder (one softmax variant), and a host's compile is published back with a token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from _service import live_server

from rocke_aot.aot import toolchains as tcs
from rocke_aot.aot.builder import build
from rocke_aot.cache.store import Store
from rocke_aot.lanes import get_lane
from rocke_aot.targets import Target

REPO = Path(__file__).resolve().parents[1]
HOST = REPO / "tests" / "_triton_host.py"


@pytest.fixture(scope="module")
def triton39(all_toolchains):
    found = [t for t in tcs.toolchains_for_lane(get_lane("llvm24"), all_toolchains, consumes="triton")
             if t.detect().extra.get("python_version", "").startswith(
                 f"{sys.version_info[0]}.{sys.version_info[1]}.")]
    if not found:
        pytest.fail("no Triton of this Python on the llvm24 lane: run `bash scripts/setup.sh`")
    return found[0]


@pytest.fixture(scope="module")
def served(tmp_path_factory, all_toolchains, triton39):
    d = tmp_path_factory.mktemp("triton-remote")
    url = str(d / "cache.sqlite")
    with Store.open(url) as store:
        s = build(arches=[Target.parse("gfx942")], families=["triton_softmax"], lanes=["llvm24"], store=store,
                  toolchains=all_toolchains, where={"BLOCK": "1024", "cols_class": "div16"})
        assert s["built"] == 1 and not s["failed"]
        art = store.find(family="triton_softmax")[0]
    token = d / "token"
    token.write_text("s3cret\n")
    with live_server(url, token_file=str(token)) as base:
        yield {"url": url, "base": base, "art": art, "dir": d}


def host(triton39, served, tmp_path, *args, env=None):
    """Run the host program once, fresh: its own Triton cache dir and local store."""
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
         # the client's own dependencies come from this interpreter's site-packages (same Python)
         "PYTHONPATH": f"{REPO}:{sysconfig.get_paths()['purelib']}",
         "TRITON_CACHE_MANAGER": "triton.runtime.cache:RemoteCacheManager",
         "TRITON_REMOTE_CACHE_BACKEND": "rocke_aot.client.triton_cache:Backend",
         "TRITON_CACHE_DIR": str(tmp_path / "triton-cache"), "TRITON_HOME": str(tmp_path / "triton-home"),
         "ROCKE_AOT_SERVER": served["base"], "ROCKE_AOT_CLIENT_HOME": str(tmp_path / "client"),
         "ROCKE_AOT_INSECURE": "1", **(env or {})}
    r = subprocess.run([triton39.python, str(HOST), *map(str, args)], capture_output=True, text=True, env=e,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_a_fresh_host_compiles_nothing_that_the_builder_prebuilt(triton39, served, tmp_path):
    got, _ = host(triton39, served, tmp_path, "hip", "gfx942", 64, 1024, 4096)
    assert got["compiled"] == 0 and got["cache_hit"] == 1
    assert got["events"] == {"hit": 2}  # Triton's two lookups: the group file, then the files it lists
    assert got["hash"] == served["art"].metadata["triton"]["hash"]  # the key the host's Triton computed
    assert set(got["files"]) == {"hsaco"}  # asm of the non-metadata files: the binary only
    # the local store keeps it: offline, the next process still compiles nothing
    again, _ = host(triton39, served, tmp_path, "hip", "gfx942", 64, 1024, 4096, env={"ROCKE_AOT_OFFLINE": "1"})
    assert again["compiled"] == 0 and again["cache_hit"] == 1


def test_what_a_host_compiles_is_published_and_the_next_host_takes_it(triton39, served, tmp_path):
    # cols=1000: not divisible by 16, a specialization nobody prebuilt
    first, _ = host(triton39, served, tmp_path / "a", "hip", "gfx942", 64, 1024, 1000,
                    env={"ROCKE_AOT_TOKEN": "s3cret"})
    assert first["compiled"] == 1 and first["events"].get("published") == 1
    # entries are per tenant: a host of another (no token) does not get it; one of the same tenant does
    other, _ = host(triton39, served, tmp_path / "c", "hip", "gfx942", 64, 1024, 1000)
    assert other["compiled"] == 1 and other["cache_hit"] == 0
    second, _ = host(triton39, served, tmp_path / "b", "hip", "gfx942", 64, 1024, 1000,
                     env={"ROCKE_AOT_TOKEN": "s3cret"})
    assert second["compiled"] == 0 and second["cache_hit"] == 1
    with Store.open(served["url"]) as store:
        from rocke_aot.client.triton_cache import Backend  # noqa: F401  (importable without triton)

        key = [k for k in [first["hash"]]][0]
        import base64

        from rocke_aot.cache.provenance import token_id

        files = store.triton_entry(base64.b32encode(bytes.fromhex(key)).decode().rstrip("="), token_id("s3cret"))
        assert {f.source for f in files.values()} == {"host"} and len(files) >= 3


def test_fail_closed_is_a_miss_and_a_counted_event(triton39, served, tmp_path):
    # a device of another target asks for the gfx942 kernel's key: the backend refuses it
    # (Triton's key differs per target; here the stand-in driver and the entry disagree on purpose)
    got, err = host(triton39, served, tmp_path / "t", "hip", "gfx942", 64, 1024, 4096, "hip", "gfx950", 64)
    assert got["compiled"] == 1 and got["events"].get("hit") is None
    # a pinned root key and no signed metadata on the server: nothing unsigned is used
    signed, err = host(triton39, served, tmp_path / "s", "hip", "gfx942", 64, 1024, 4096,
                       env={"ROCKE_AOT_INSECURE": "0", "ROCKE_AOT_ROOT_KEY": "ed25519:" + "11" * 32})
    assert signed["compiled"] == 1 and signed["events"].get("unsigned") == 1
    assert "triton cache unsigned" in err
    # no key and not insecure: refused as every fetch is
    plain, err = host(triton39, served, tmp_path / "u", "hip", "gfx942", 64, 1024, 4096,
                      env={"ROCKE_AOT_INSECURE": "0"})
    assert plain["compiled"] == 1 and plain["events"].get("untrusted") == 1


def test_another_triton_version_is_never_served(served, tmp_path, monkeypatch):
    from rocke_aot.client import triton_cache

    monkeypatch.setenv("ROCKE_AOT_SERVER", served["base"])
    monkeypatch.setenv("ROCKE_AOT_INSECURE", "1")
    monkeypatch.setenv("ROCKE_AOT_CLIENT_HOME", str(tmp_path / "client"))
    monkeypatch.setattr(triton_cache, "_triton_version", lambda: "3.6.0")  # the entry is 3.9.0's
    triton_cache.reset_config()
    triton_cache.reset_events()
    entry = served["art"].metadata["triton"]
    b = triton_cache.Backend(entry["key"])
    assert b.get([f"__grp__{entry['name']}.json"]) == {}
    assert triton_cache.events() == {"version": 1}
    monkeypatch.setattr(triton_cache, "_triton_version", lambda: "3.9.0")
    monkeypatch.setattr(triton_cache, "_current_target", lambda: None)
    b = triton_cache.Backend(entry["key"])
    got = b.get([f"__grp__{entry['name']}.json"])
    assert json.loads(got[f"__grp__{entry['name']}.json"])["child_paths"] == sorted(
        [f"{entry['name']}.json", entry["binary"]])
    assert "triton" not in sys.modules
    triton_cache.reset_config()


def test_a_host_is_told_once_why_it_cannot_hit(triton39, served, tmp_path):
    """Issue 39: a host whose own settings make every lookup miss hears why, once per process."""
    # the builder records Triton's cache-invalidating variables with the entry (none were set)
    assert served["art"].metadata["triton"]["env_vars"] == {}
    # TRITON_DEFAULT_FP_FUSION=1 (Triton's own default value, set as Triton 3.9 advises): Triton
    # hashes every such variable that is set into the key, so the prebuilt kernel cannot hit
    got, err = host(triton39, served, tmp_path / "env", "hip", "gfx942", 64, 1024, 4096,
                    env={"TRITON_DEFAULT_FP_FUSION": "1"})
    assert got["compiled"] == 1 and got["cache_hit"] == 0 and got["events"].get("env") == 1
    assert got["hash"] != served["art"].metadata["triton"]["hash"]
    lines = [ln for ln in err.splitlines() if "cache-invalidating" in ln]
    assert len(lines) == 1 and "TRITON_DEFAULT_FP_FUSION=" in lines[0], err[-2000:]  # Triton says "true"
    # without it, the same host hits (the variable was the only difference)
    same, _ = host(triton39, served, tmp_path / "same", "hip", "gfx942", 64, 1024, 4096)
    assert same["cache_hit"] == 1 and same["events"].get("env") is None
    # neither a server nor mirrors: one line saying so, however many lookups miss
    alone, err = host(triton39, served, tmp_path / "alone", "hip", "gfx942", 64, 1024, 4096,
                      env={"ROCKE_AOT_SERVER": ""})
    assert alone["compiled"] == 1 and alone["events"].get("nosource") == 1
    lines = [ln for ln in err.splitlines() if "neither $ROCKE_AOT_SERVER nor $ROCKE_AOT_MIRRORS" in ln]
    assert len(lines) == 1, err[-2000:]
