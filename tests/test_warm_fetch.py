"""A warm `rocke-aot fetch KEY` answers from the host's warm note, without click or the library,
in the bytes the whole command line prints, and steps aside whenever anything it rests on moved.

    a host fetches one kernel from a real nginx (tests/_signed.py's tree, cold) ──> its note
    ROCKE_AOT_OFFLINE=1 `rocke-aot fetch KEY [...]` (cli/entry.py, rocke_aot/warm.py) against
        `python -c "from rocke_aot.cli.main import main; main()" fetch KEY [...]` (click and the
        library): the same exit code, stdout and written file; the script loads no click
    every file the note rests on changed in turn (the blob, the bin, the snapshot, the state,
        the note itself, the code on the path): the script loads click (the library answers or
        refuses) and says exactly what the command line says
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _nginx import nginx, served_dir
from _service import EXE

from rocke_aot import warm
from rocke_aot.client.trusted import pin_id, pinned_key

FULL = "import sys; sys.argv[0] = 'rocke-aot'; from rocke_aot.cli.main import main; main()"


@pytest.fixture(scope="module")
def warm_host(signed_world, tmp_path_factory):
    """A host that fetched one kernel online (`rocke-aot fetch --mirror`), and that kernel."""
    where = served_dir()
    shutil.copytree(signed_world["d"] / "tree", where / "tree")
    home = tmp_path_factory.mktemp("warm") / "host"
    a = signed_world["store"].find()[0]
    try:
        with nginx(where / "tree") as base:
            p = subprocess.run([EXE, "fetch", "--mirror", base, a.key], env=_env(signed_world, home, offline=False),
                               capture_output=True, text=True, timeout=120)
            assert p.returncode == 0, p.stderr
    finally:
        shutil.rmtree(where)
    yield home, a


def _env(world, home: Path, *, offline: bool = True, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKE_AOT_") and k != "PYTHONPATH"}
    env.update(ROCKE_AOT_ROOT_KEY=world["pin"], ROCKE_AOT_CLIENT_HOME=str(home), **extra)
    if offline:
        env["ROCKE_AOT_OFFLINE"] = "1"
    return env


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str, str, bool]:
    """(exit code, stdout, stderr less the import lines, whether click loaded)."""
    p = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True,
                       timeout=120)
    lines = p.stderr.splitlines()
    imported = {ln.rsplit("|", 1)[-1].strip() for ln in lines if ln.startswith("import time:")}
    return p.returncode, p.stdout, "\n".join(ln for ln in lines if not ln.startswith("import time:")), \
        "click" in imported


def both(args: list[str], env: dict[str, str], outputs: list[Path] = ()) -> tuple[int, str, bool]:
    """The script's answer and the command line's, compared: (exit code, stdout, script loaded click)."""
    got = []
    for argv in ([EXE, "fetch", *args], ["-c", FULL, "fetch", *args]):
        for o in outputs:
            o.unlink(missing_ok=True)
        rc, out, err, click = _run(argv, env)
        got.append((rc, out, err, click, [o.read_bytes() if o.exists() else None for o in outputs]))
    (rc, out, err, click, files), (rc2, out2, err2, click2, files2) = got
    assert click2 is True  # the reference: the whole command line
    assert (rc, out, files) == (rc2, out2, files2)
    assert err == err2 or not click  # the script's own path prints nothing on stderr
    return rc, out, click


def test_the_warm_path_answers_as_the_command_line_does_without_click(signed_world, warm_host, tmp_path):
    home, a = warm_host
    assert (next((home / "trust").glob("tuf-*")) / "answers" / a.key).is_file()
    env = _env(signed_world, home)
    want = signed_world["store"].get(a.key).code_object
    o = tmp_path / "sub" / "k.hsaco"
    rc, out, click = both([a.key, "-o", str(o), "--json", "--mirror", "http://127.0.0.1:9"], env, [o])
    assert (rc, click) == (0, False)
    doc = json.loads(out)
    assert doc["kernels"][0]["sha256"] == a.sha256 and doc["kernels"][0]["origin"]["signed"] is True
    assert o.read_bytes() == want
    d = tmp_path / "out"
    rc, out, click = both(["--out-dir", str(d), a.key], env, [d / f"{a.key}.hsaco"])
    assert (rc, click) == (0, False) and out.startswith(f"{a.key}  {a.arch} {a.lane} gemm ")
    rc, out, click = both([f"--local={home}", a.key], {k: v for k, v in env.items() if k != "ROCKE_AOT_CLIENT_HOME"})
    assert (rc, click) == (0, False)
    # outside its forms the script is the command line: a prefix, another option, a bound to keep
    for args, extra in (([a.key[:16]], {}), ([a.key, "--arch", a.arch], {}), ([a.key, "--workers", "2"], {}),
                        ([a.key, "--json"], {"ROCKE_AOT_CLIENT_MAX_BYTES": str(10**9)}),
                        ([a.key, "--json"], {"ROCKE_AOT_FETCH_WORKERS": "0"})):
        rc, out, click = both(args, {**env, **extra})
        assert click is True, args


def test_pin_ids_agree_with_the_library(signed_world):
    pub = signed_world["pin"]
    inline = pinned_key(pub).as_pin()
    for text in (pub, inline, str(signed_world["d"] / "root.json")):
        assert warm.pin_id(text) == pin_id(pinned_key(text)), text
    assert warm.pin_id("ed25519:" + "0" * 63) is None and warm.pin_id("/nonexistent/key.pub") is None


def _tamper_blob(host: Path, a, env: dict) -> None:
    p = host / "blobs" / a.sha256
    data = bytearray(p.read_bytes())
    data[100] ^= 1
    p.write_bytes(bytes(data))


def _tamper_bin(host: Path, a, env: dict) -> None:
    tdir = next((host / "trust").glob("tuf-*"))
    note = json.loads((tdir / "answers" / a.key).read_bytes())
    p = tdir / f"{note['bin']}.json"
    p.write_bytes(p.read_bytes().replace(b'"expires"', b'"expires" ', 1))  # one byte longer


def _tamper_snapshot(host: Path, a, env: dict) -> None:
    p = next((host / "trust").glob("tuf-*")) / "snapshot.json"
    p.write_bytes(p.read_bytes() + b" ")


def _expire_state(host: Path, a, env: dict) -> None:
    p = next((host / "trust").glob("tuf-*")) / "verified.state"
    st = json.loads(p.read_bytes())
    p.write_bytes(json.dumps({**st, "expires": "2001-01-01T00:00:00Z"}, sort_keys=True).encode())


def _garble_note(host: Path, a, env: dict) -> None:
    (next((host / "trust").glob("tuf-*")) / "answers" / a.key).write_bytes(b'{"v": 1, "key": "')


def _other_code(host: Path, a, env: dict) -> None:
    """Another module search path: the code file moves (rocke_aot/warm.py interpreter)."""
    (host.parent / "elsewhere").mkdir()
    env["PYTHONPATH"] = str(host.parent / "elsewhere")


@pytest.mark.parametrize("change, refused", [
    (_tamper_blob, "OfflineMiss"), (_tamper_bin, "TrustError"), (_tamper_snapshot, "TrustError"),
    (_expire_state, "ExpiredError"), (_garble_note, None), (_other_code, None)])
def test_any_change_makes_the_warm_path_step_aside(signed_world, warm_host, tmp_path, change, refused):
    home, a = warm_host
    host = tmp_path / "host"
    shutil.copytree(home, host)
    env = _env(signed_world, host)
    assert both([a.key, "--json"], env)[2] is False  # warm before the change
    change(host, a, env)
    rc, out, click = both([a.key, "--json"], env)
    assert click is True
    if refused is None:  # the library answered, and wrote the note again: the next is warm
        assert rc == 0 and json.loads(out)["kernels"][0]["sha256"] == a.sha256
        assert both([a.key, "--json"], env)[2] is False
    else:
        rc, _, err, _ = _run(["-c", FULL, "fetch", a.key], env)
        assert rc == 1 and refused in err, err


def test_a_gc_that_evicts_drops_the_notes_and_the_script_steps_aside(signed_world, warm_host, tmp_path):
    """The notes (and the contract memos) are bounded by the local store's own bound: a gc that
    evicts removes them (client/local.py drop_memos); the next fetch runs the whole command line."""
    from rocke_aot.client.local import LocalStore

    src, a = warm_host
    home = tmp_path / "host"
    shutil.copytree(src, home)
    tdir = next((home / "trust").glob("tuf-*"))
    assert (tdir / "answers" / a.key).is_file() and (tdir / "contracts").is_dir()
    assert [e.sha256 for e in LocalStore(home).gc(0)] == [a.sha256]
    assert not (tdir / "answers").exists() and not (tdir / "contracts").exists()
    rc, out, click = both([a.key, "--json"], _env(signed_world, home))
    assert click is True and rc != 0  # evicted and offline: the command line refuses, by name
