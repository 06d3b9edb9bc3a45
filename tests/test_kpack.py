"""Kernels where the ROCm ecosystem looks for them (issue 41): kpack archives with signed rocKE
bundle manifests, `cache import` of a kpack, device wheels, rocKE instance lists.

    store (8 real gemm kernels, gfx942, llvm22) ──rocke-aot export --kpack --wheel──> dist/
    kpack  ──a reader written HERE from RFC0008's text (header "<4sIQ", zero padding to 64, uint32
             count + (uint32 size, zstd frame) per ordinal at zstd_offset, a MessagePack TOC at the
             TOC offset; msgpack and zstandard as the reference decoders, none of cache/kpack.py)
           ──> every kernel's bytes and sha256 equal the store's; the manifest's argument signature
               equals the ELF metadata note's (aot/codeobject.py's reading, not the manifest writer)
    kpack + manifest ──rocke-aot cache import --root-key──> another store: same bytes, select ranks
           them, they export again (signed here); every tamper refused by name, nothing stored
    wheel  ──pip install into a clean venv──> `python -m rocke_aot.cli fetch` with a pinned root key,
           no mirror, no server: the bytes equal the store's; offline (ROCKE_AOT_OFFLINE=1) after;
           a tampered kpack / signed TUF timestamp inside the installed wheel refused by name (its
           signed/ directory verified by python-tuf's Updater, pinned on the root key)
    aot_list.json ──rocke-aot build --instances──> built; a family this project lacks named
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import venv
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import msgpack
import pytest
import zstandard
from _service import EXE, built_store  # noqa: F401
from _signed import make_keys

from rocke_aot import errors
from rocke_aot.cache.keys import artifact_key
from rocke_aot.cache.store import Store
from rocke_aot.trust import keys, repo

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime.now(timezone.utc)


def cli(*args, ok: bool = True, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    if ok:
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def world(tmp_path_factory, kernel_bundle):
    d = tmp_path_factory.mktemp("kpack")
    k = make_keys(d)
    (d / "root.json").write_bytes(repo.signed_root(1, NOW + timedelta(days=365), k["root"], [k["release"].public]))
    url = f"sqlite:///{d / 'built.sqlite'}"
    built_store(url, kernel_bundle).close()  # built here: a release signs these rows
    out = json.loads(cli("export", "--kpack", "--wheel", "--arch", "gfx942", "--key", d / "release.key",
                         "--root", d / "root.json", "--cache", url, "-o", d / "dist", "--json").stdout)
    with Store.open(url, readonly=True) as s:
        arts = s.find(served_only=True)
        blobs = {a.key: s.get_blob(a.sha256) for a in arts}
        arts = {a.key: a for a in arts}
    return {"d": d, "url": url, "out": out, "arts": arts, "blobs": blobs, "pin": d / "root.key.pub"}


def rfc0008_read(path: Path) -> tuple[dict, dict[tuple[str, str], bytes]]:
    """An independent reader from RFC0008's text: (TOC, {(toc name, arch): decompressed bytes})."""
    data = path.read_bytes()
    magic, version, toc_offset = struct.unpack_from("<4sIQ", data, 0)
    assert (magic, version) == (b"KPAK", 1)
    assert data[16:64] == bytes(48)  # "padding to 64-byte boundary"
    toc = msgpack.unpackb(data[toc_offset:], raw=False)
    assert toc["format_version"] == 1 and toc["compression_scheme"] == "zstd-per-kernel"
    pos = toc["zstd_offset"]
    assert pos % 64 == 0 and pos + toc["zstd_size"] == toc_offset
    (count,) = struct.unpack_from("<I", data, pos)
    pos += 4
    frames = []
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos)
        frames.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    assert pos == toc_offset
    out = {}
    for name, arches in toc["toc"].items():
        for arch, e in arches.items():
            assert e["type"] == "hsaco"
            raw = zstandard.ZstdDecompressor().decompress(frames[e["ordinal"]])
            assert len(raw) == e["original_size"]
            out[(name, arch)] = raw
    return toc, out


def test_kpack_round_trips_through_an_independent_reader(world):
    kp = Path(world["out"]["kpack"]["kpack"])
    toc, kernels = rfc0008_read(kp)
    assert toc["gfx_arches"] == ["gfx942"] and toc["group_name"] == "rocke_aot"
    assert len(kernels) == len(world["arts"]) == 8
    for key, a in world["arts"].items():
        raw = kernels[(f"rocke_aot/{a.family}/{a.lane}/{key}#0", "gfx942")]
        assert raw == world["blobs"][key] and hashlib.sha256(raw).hexdigest() == a.sha256
    # deterministic: the same store exports the same bytes
    again = world["d"] / "again"
    cli("export", "--kpack", "--arch", "gfx942", "--key", world["d"] / "release.key", "--cache", world["url"],
        "-o", again)
    assert (again / kp.name).read_bytes() == kp.read_bytes()
    assert (again / "rocke_aot_gfx942.json").read_bytes() == (kp.parent / "rocke_aot_gfx942.json").read_bytes()


def test_the_manifest_carries_the_sidecar_fields_of_the_code_object(world):
    doc = json.loads(Path(world["out"]["kpack"]["manifest"]).read_bytes())
    assert doc["schema"] == "rocke.aot.bundle/v1" and doc["arch"] == "gfx942"
    assert doc["kpack_sha256"] == hashlib.sha256(Path(world["out"]["kpack"]["kpack"]).read_bytes()).hexdigest()
    for e in doc["entries"]:
        a = world["arts"][e["cache_key"]]
        co = a.metadata["code_object"]  # what aot/codeobject.py read from the ELF's metadata note
        assert e["symbol"] == co["kernel"] and e["sha256"] == a.sha256 and e["size"] == a.size
        assert [(s["name"], s["offset"], s["size_bytes"]) for s in e["args_signature"]] == \
               [(x["name"], x["offset"], x["size"]) for x in co["args"]]
        assert [s["kind"] for s in e["args_signature"]] == \
               ["pointer" if x["value_kind"] == "global_buffer" else "scalar" for x in co["args"]]
        assert e["launch"]["block"][0] * e["launch"]["block"][1] * e["launch"]["block"][2] <= \
            co["max_flat_workgroup_size"]
        assert e["launch"]["static_shared_mem_bytes"] == co["lds_bytes"]
        assert e["selection"]["attribute_constraints"]["path"] == {"equals": a.spec["path"]}


def _import(world, dest, manifest=None, *extra, ok=True):
    d = manifest.parent if manifest else Path(world["out"]["kpack"]["kpack"]).parent
    return cli("cache", "import", d / "rocke_aot_gfx942.kpack", "--manifest", manifest or d / "rocke_aot_gfx942.json",
               "--cache", dest, *extra, ok=ok)


def test_cache_import_verifies_signs_and_serves(world, tmp_path):
    dest = f"sqlite:///{tmp_path / 'other.sqlite'}"
    res = json.loads(_import(world, dest, None, "--root-key", world["pin"], "--json").stdout)
    assert res["kernels"] == res["artifacts"] == 8 and res["signed_by"] == keys.load_private(
        world["d"] / "release.key").public.keyid
    with Store.open(dest, readonly=True) as s:
        for key, raw in world["blobs"].items():
            assert s.get(key).code_object == raw
    sel = json.loads(cli("select", "--arch", "gfx942", "--family", "gemm", "--problem",
                         '{"m": 256, "n": 256, "k": 256}', "--cache", dest, "--json").stdout)
    assert sel["accepted"] and {r["key"] for r in sel["accepted"]} <= set(world["blobs"])
    # signed here: the imported kernels export again under this host's key
    keys.generate(tmp_path / "here.key")
    cli("export", "--kpack", "--arch", "gfx942", "--key", tmp_path / "here.key", "--cache", dest, "-o", tmp_path / "x")
    assert rfc0008_read(tmp_path / "x" / "rocke_aot_gfx942.kpack")[1].keys() == \
           rfc0008_read(Path(world["out"]["kpack"]["kpack"]))[1].keys()
    again = json.loads(_import(world, dest, None, "--json").stdout)
    assert (again["artifacts"], again["unchanged"]) == (0, 8)
    p = cli("cache", "import", world["out"]["kpack"]["kpack"], "--cache", dest, ok=False)
    assert p.returncode == 2 and "--manifest" in p.stderr


def _copy_dist(world, tmp_path) -> Path:
    d = tmp_path / "dist"
    d.mkdir()
    for name in ("rocke_aot_gfx942.kpack", "rocke_aot_gfx942.json", "rocke_aot_gfx942.sig.json",
                 "rocke_aot_gfx942.root.json"):
        shutil.copy(Path(world["out"]["kpack"]["kpack"]).parent / name, d / name)
    return d


def _refused(world, tmp_path, d: Path, name: str, *extra):
    dest = tmp_path / "victim.sqlite"
    p = _import(world, f"sqlite:///{dest}", d / "rocke_aot_gfx942.json", *extra, ok=False)
    assert p.returncode != 0 and name in p.stderr, p.stderr
    if dest.exists():
        with Store.open(dest, readonly=True) as s:
            assert s.find(status="all") == []
    return p.stderr


def _frame_of(d: Path, i: int = 0) -> tuple[int, int]:
    e = json.loads((d / "rocke_aot_gfx942.json").read_bytes())["entries"][i]
    return e["frame_offset"], e["frame_size"]


def test_a_tampered_kpack_is_refused_by_name(world, tmp_path):
    d = _copy_dist(world, tmp_path)
    off, n = _frame_of(d, 3)
    data = bytearray((d / "rocke_aot_gfx942.kpack").read_bytes())
    data[off + n // 2] ^= 0xFF
    (d / "rocke_aot_gfx942.kpack").write_bytes(bytes(data))
    assert "tampered" in _refused(world, tmp_path, d, "KpackError", "--root-key", world["pin"])


def test_a_tampered_manifest_is_refused_by_its_signature(world, tmp_path):
    d = _copy_dist(world, tmp_path)
    doc = json.loads((d / "rocke_aot_gfx942.json").read_bytes())
    doc["entries"][0]["launch"]["block"] = [1024, 1, 1]
    (d / "rocke_aot_gfx942.json").write_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    _refused(world, tmp_path, d, "SignatureError", "--root-key", world["pin"])
    # unsigned import checks the sidecar against the launch contract all the same
    assert "disagrees with its launch contract" in _refused(world, tmp_path, d, "KpackError")


def test_a_signature_by_a_key_the_root_does_not_list_is_refused(world, tmp_path):
    d = _copy_dist(world, tmp_path)
    evil = keys.load_private(world["d"] / "evil.key")
    body = (d / "rocke_aot_gfx942.json").read_bytes()
    sig = json.loads((d / "rocke_aot_gfx942.sig.json").read_bytes())
    (d / "rocke_aot_gfx942.sig.json").write_text(json.dumps({**sig, "keyid": evil.public.keyid,
                                                              "signature": evil.sign(body)}))
    _refused(world, tmp_path, d, "UnlistedKeyError", "--root-key", world["pin"])


def test_a_code_object_under_another_arch_is_refused_by_the_elf_reader(world, tmp_path):
    """Relabel the gfx942 kernels gfx950 (keys recomputed, so only the ELF can tell)."""
    from rocke_aot.cache import kpack as K
    from rocke_aot.cache.keys import KeyInputs

    d = tmp_path / "relabel"
    d.mkdir()
    src = json.loads(Path(world["out"]["kpack"]["manifest"]).read_bytes())
    entries, kernels = [], []
    for e in src["entries"][:2]:
        inputs = {**e["inputs"], "arch": "gfx950"}
        key = artifact_key(KeyInputs.from_dict(inputs))
        e = {**e, "inputs": inputs, "cache_key": key, "arch": "gfx950", "toc_key": K.toc_name("gemm", "llvm22", key)}
        e["selection"] = {**e["selection"], "arch": "gfx950"}
        entries.append(e)
        kernels.append((e["toc_key"], "gfx950", world["blobs"][src["entries"][len(entries) - 1]["cache_key"]]))
    data, spans = K.write(d / "rocke_aot_gfx950.kpack", kernels, arch_family="gfx950", arches=["gfx950"])
    entries = [{**e, **s.as_dict()} for e, s in zip(entries, spans)]
    (d / "rocke_aot_gfx950.json").write_bytes(K.dumps(K.manifest("gfx950", "rocke_aot_gfx950.kpack", data, entries)))
    p = cli("cache", "import", d / "rocke_aot_gfx950.kpack", "--manifest", d / "rocke_aot_gfx950.json",
            "--cache", f"sqlite:///{tmp_path / 'v.sqlite'}", ok=False)
    assert p.returncode == 1 and "KpackError" in p.stderr and "not a valid code object for gfx950" in p.stderr


# ---- device wheels ------------------------------------------------------------------------------

def test_the_wheel_is_a_valid_wheel(world):
    whl = Path(world["out"]["wheel"]["wheel"])
    assert whl.name == "rocke_aot_device_gfx942-1-py3-none-any.whl"
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        record = z.read("rocke_aot_device_gfx942-1.dist-info/RECORD").decode()
        rows = list(csv.reader(io.StringIO(record)))
        assert sorted(r[0] for r in rows) == sorted(names)
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = z.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert (digest, int(size)) == (want, len(data)), path
        assert "Tag: py3-none-any" in z.read("rocke_aot_device_gfx942-1.dist-info/WHEEL").decode()
        assert z.read("rocke_aot_device_gfx942/rocke_aot_gfx942.kpack") == \
            Path(world["out"]["kpack"]["kpack"]).read_bytes()


@pytest.fixture()
def host(world, tmp_path):
    """A clean venv (no pip, no site-packages but the wheel's; the project's dependencies and its
    source tree by a plain .pth line) with the device wheel pip-installed."""
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-project.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n{ROOT}\n")
    p = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                        "--disable-pip-version-check", world["out"]["wheel"]["wheel"]],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONPATH"}
    env.update(HOME=str(tmp_path / "home"), ROCKE_AOT_HOME=str(tmp_path / "home"),
               HTTP_PROXY="http://127.0.0.1:9", HTTPS_PROXY="http://127.0.0.1:9")  # no network to reach
    return {"py": py, "pkg": site / "rocke_aot_device_gfx942", "env": env, "local": tmp_path / "local"}


FETCH_ALL = """
import hashlib, json, sys
from rocke_aot.client import Fetcher, LocalStore, sources_from
from rocke_aot.client.device_kernels import DeviceWheelSource
srcs = sources_from()
assert srcs and all(isinstance(s, DeviceWheelSource) for s in srcs), srcs
out = {}
with Fetcher(srcs, LocalStore(sys.argv[1]), root_key=sys.argv[2]) as f:
    for key in sys.argv[3:]:
        try:
            k = f.get(key, arch="gfx942")
            out[key] = [hashlib.sha256(k.code_object).hexdigest(), k.origin.get("source")]
        except Exception as e:
            out[key] = ["error", type(e).__name__, str(e)]
print(json.dumps(out))
"""


def _fetch_all(host, world, *keys_, env=None) -> dict:
    p = subprocess.run([str(host["py"]), "-c", FETCH_ALL, str(host["local"]), str(world["pin"]), *keys_],
                       capture_output=True, text=True, timeout=300, env={**host["env"], **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_pip_installed_device_wheel_serves_fetch_offline(world, host):
    keys_ = sorted(world["arts"])
    got = _fetch_all(host, world, *keys_)
    for key in keys_:
        assert got[key][0] == world["arts"][key].sha256, got[key]
        assert got[key][1] == host["pkg"].as_uri()
    # the command line too, and then offline from what the first fetch kept
    p = subprocess.run([str(host["py"]), "-m", "rocke_aot.cli", "fetch", "--root-key", str(world["pin"]),
                        "--local", str(host["local"]), keys_[0], "-o", str(host["local"] / "k.hsaco"), "--json"],
                       capture_output=True, text=True, timeout=300, env={**host["env"], "ROCKE_AOT_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr
    assert (host["local"] / "k.hsaco").read_bytes() == world["blobs"][keys_[0]]
    # select ranks the installed wheel's kernels, no cache, no server (signature checked first)
    p = subprocess.run([str(host["py"]), "-m", "rocke_aot.cli", "select", "--arch", "gfx942", "--family", "gemm",
                        "--problem", '{"m": 512, "n": 512, "k": 512}', "--device-wheels", "--root-key",
                        str(world["pin"]), "--json"], capture_output=True, text=True, timeout=300, env=host["env"])
    assert p.returncode == 0, p.stderr
    sel = json.loads(p.stdout)
    assert sel["accepted"] and {r["key"] for r in sel["accepted"]} <= set(world["arts"])
    keys.generate(host["local"] / "other.key")
    p = subprocess.run([str(host["py"]), "-m", "rocke_aot.cli", "select", "--arch", "gfx942", "--family", "gemm",
                        "--problem", '{"m": 512, "n": 512, "k": 512}', "--device-wheels", "--root-key",
                        str(host["local"] / "other.key.pub")], capture_output=True, text=True, timeout=300,
                       env=host["env"])
    assert p.returncode == 1 and "UnlistedKeyError" in p.stderr, p.stderr


def test_a_tampered_device_wheel_is_refused_by_name(world, host):
    keys_ = sorted(world["arts"])
    doc = json.loads((host["pkg"] / "rocke_aot_gfx942.json").read_bytes())
    victim = doc["entries"][2]
    kp = host["pkg"] / "rocke_aot_gfx942.kpack"
    data = bytearray(kp.read_bytes())
    data[victim["frame_offset"] + victim["frame_size"] // 2] ^= 0xFF
    kp.write_bytes(bytes(data))
    got = _fetch_all(host, world, *keys_)
    assert got[victim["cache_key"]][:2] == ["error", "BlobMismatchError"]
    assert all(got[k][0] == world["arts"][k].sha256 for k in keys_ if k != victim["cache_key"])
    assert not any(p.name == victim["sha256"] for p in host["local"].rglob("*"))  # nothing kept of it
    # a changed signed timestamp (TUF, python-tuf's Updater): the signature check refuses the whole wheel
    m = host["pkg"] / "signed" / "timestamp.json"
    before = m.read_bytes()
    m.write_bytes(before.replace(b'"version":1', b'"version":7', 1))
    assert m.read_bytes() != before
    shutil.rmtree(host["local"])
    got = _fetch_all(host, world, keys_[0])
    assert got[keys_[0]][0] == "error" and issubclass(getattr(errors, got[keys_[0]][1]), errors.TrustError), got


# ---- rocKE instance lists -----------------------------------------------------------------------

def test_build_instances_builds_ours_and_names_the_rest(tmp_path, llvm22):
    spec = {"path": "fma", "block_m": 64, "block_n": 64, "block_k": 64, "in_dtype": "f16", "out_dtype": "f32",
            "waves": 4, "vector_width": 4, "double_buffer": True}
    lst = [{"schema": "rocke.aot.instance/v1", "name": "gemm_fma_64x64", "op": "gemm", "family": "gemm",
            "arch": "gfx942", "compile_spec": spec, "selection": {"attribute_constraints": {"path": {"equals": "fma"}}},
            "test_profiles": [{"m": 64, "n": 64, "k": 64}]},
           {"schema": "rocke.aot.instance/v1", "name": "sdpa_fwd_fmha_fwd_mfma_fp16_bshd_gfx942_q64_k64_hq4_hkv4_d64_none",
            "op": "sdpa_fwd", "family": "fmha_fwd_mfma", "arch": "gfx942", "compile_spec": {"dtype": "fp16"},
            "selection": {}},
           {"schema": "rocke.aot.instance/v1", "name": "gemm_no_such_tile", "family": "gemm", "arch": "gfx942",
            "compile_spec": {"path": "fma", "block_m": 7}, "selection": {}}]
    (tmp_path / "aot_list.json").write_text(json.dumps(lst))
    url = f"sqlite:///{tmp_path / 'c.sqlite'}"
    p = cli("build", "--instances", tmp_path / "aot_list.json", "--lane", "llvm22", "--cache", url, "--json", ok=False)
    assert p.returncode == 1, p.stderr
    r = json.loads(p.stdout)
    assert [(i["name"], i["planned"], i["built"]) for i in r["instances"]] == [("gemm_fma_64x64", 1, 1)]
    refused = {x["name"]: x["reason"] for x in r["refused"]}
    assert "no family 'fmha_fwd_mfma'" in refused["sdpa_fwd_fmha_fwd_mfma_fp16_bshd_gfx942_q64_k64_hq4_hkv4_d64_none"]
    assert "no spec" in refused["gemm_no_such_tile"]
    with Store.open(url, readonly=True) as s:
        (a,) = s.find()
    assert {k: a.spec[k] for k in spec} == spec
    lst[0]["extra"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(lst))
    p = cli("build", "--instances", tmp_path / "bad.json", "--cache", url, ok=False)
    assert p.returncode == 2 and "unknown field 'extra'" in p.stderr


def test_export_help_has_an_example():
    p = cli("export", "--help")
    assert "Example:" in p.stdout and "--json" in p.stdout and "--kpack" in p.stdout


def _corrupt(data: bytes, how: str) -> bytes:
    b = bytearray(data)
    toc_offset = struct.unpack_from("<Q", b, 8)[0]
    if how == "magic":
        b[0:4] = b"KPAX"
    elif how == "version":
        struct.pack_into("<I", b, 4, 2)
    elif how == "toc past the end":
        struct.pack_into("<Q", b, 8, len(b) + 10)
    elif how == "toc inside the header":
        struct.pack_into("<Q", b, 8, 8)
    elif how == "truncated":
        return bytes(b[:12])
    elif how == "frame size past the blob":
        struct.pack_into("<I", b, 68, 1 << 30)
    elif how == "count over the frames":
        struct.pack_into("<I", b, 64, 1000)
    elif how == "toc not msgpack":
        b[toc_offset:] = b"\xc1" * (len(b) - toc_offset)
    return bytes(b)


@pytest.mark.parametrize("how", ["magic", "version", "toc past the end", "toc inside the header", "truncated",
                                 "frame size past the blob", "count over the frames", "toc not msgpack"])
def test_the_reader_bounds_every_offset(tmp_path, how):
    from rocke_aot.cache import kpack as K

    data, _ = K.encode([("a#0", "gfx942", b"\x7fELF" + bytes(300)), ("b#0", "gfx942", os.urandom(200))],
                       arch_family="gfx942", arches=["gfx942"])
    assert rfc0008_read_bytes_ok(tmp_path, data)
    (tmp_path / "x.kpack").write_bytes(_corrupt(data, how))
    with pytest.raises(errors.KpackError):
        K.read(tmp_path / "x.kpack")


def rfc0008_read_bytes_ok(tmp_path, data: bytes) -> bool:
    (tmp_path / "ok.kpack").write_bytes(data)
    _, kernels = rfc0008_read(tmp_path / "ok.kpack")
    return set(kernels) == {("a#0", "gfx942"), ("b#0", "gfx942")}


def test_a_manifest_signed_by_the_root_key_itself_verifies_without_root_json(tmp_path):
    from rocke_aot.cli.export import signature_doc
    from rocke_aot.client.device_kernels import verify_signature

    keys.generate(tmp_path / "root.key")
    keys.generate(tmp_path / "other.key")
    root, other = keys.load_private(tmp_path / "root.key"), keys.load_private(tmp_path / "other.key")
    body = b'{"schema":"rocke.aot.bundle/v1"}'
    assert verify_signature(body, signature_doc(root, body), root.public) == root.public.keyid
    with pytest.raises(errors.SignatureError):
        verify_signature(body + b" ", signature_doc(root, body), root.public)
    with pytest.raises(errors.UnlistedKeyError):
        verify_signature(body, signature_doc(other, body), root.public)
