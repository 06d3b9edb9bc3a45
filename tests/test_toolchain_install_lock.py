"""Lane environments made by two processes at once, or left half-made by a killed install.

Found on this project's CI machine: scripts/setup.sh run twice at once (a CI clone and a
checkout sharing ~/.cache/rocke-aot) failed with "lanes/llvm20/bin/python: No module named pip":
the second install saw the first's interpreter before the first had installed pip into it.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import time
import venv
from pathlib import Path

from rocke_aot.aot import toolchains
from rocke_aot.paths import exclusive


def _has_pip(python: Path) -> bool:
    return subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode == 0


def test_a_half_made_environment_is_made_again(tmp_path):
    env_dir = tmp_path / "lanes" / "llvm20"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # what a kill before ensurepip leaves
    assert (env_dir / "bin" / "python").exists() and not _has_pip(env_dir / "bin" / "python")
    made = []

    def make(where: Path) -> None:
        made.append(where)
        venv.EnvBuilder(with_pip=True, clear=True).create(where)

    python = toolchains.lane_environment(env_dir, make)
    assert made == [env_dir] and _has_pip(python)
    # a whole environment is kept as it is
    assert toolchains.lane_environment(env_dir, make) == python and made == [env_dir]


def _hold(path: str, seconds: float, log: str) -> None:
    with exclusive(path):
        Path(log).write_text(json.dumps({"start": time.monotonic()}))
        time.sleep(seconds)
        Path(log).write_text(json.dumps({"start": json.loads(Path(log).read_text())["start"],
                                         "end": time.monotonic()}))


def test_exclusive_serializes_processes_and_a_dead_holder_frees_it(tmp_path):
    lock = str(tmp_path / "lanes" / ".llvm20.lock")
    ctx = multiprocessing.get_context("fork")
    a = ctx.Process(target=_hold, args=(lock, 1.0, str(tmp_path / "a.json")))
    a.start()
    while not (tmp_path / "a.json").exists():
        time.sleep(0.01)
    t0 = time.monotonic()
    with exclusive(lock):  # waits for the other process's block to end
        waited = time.monotonic() - t0
        first = json.loads((tmp_path / "a.json").read_text())
        assert "end" in first, "entered while another process held the lock"
    a.join()
    assert waited > 0.3
    # a holder killed inside its block leaves nothing held (the kernel drops flock locks)
    b = ctx.Process(target=_hold, args=(lock, 60.0, str(tmp_path / "b.json")))
    b.start()
    while not (tmp_path / "b.json").exists():
        time.sleep(0.01)
    b.kill()
    b.join()
    t0 = time.monotonic()
    with exclusive(lock):
        assert time.monotonic() - t0 < 5


def test_two_registrations_at_once_both_stay(tmp_path, monkeypatch):
    """register's read-modify-write of toolchains.json under the registry lock: N processes each
    adding an entry leave N entries (without the lock, last writer wins)."""
    monkeypatch.setenv("ROCKE_AOT_HOME", str(tmp_path))
    code = ("import sys\n"
            "from rocke_aot.aot import toolchains as t\n"
            "for i in range(20):\n"
            "    with t._registry_lock():\n"
            "        e = t._load_registry(); e.append({'kind': 'x', 'python': sys.argv[1] + str(i)})\n"
            "        t._save_registry(e)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, f"p{n}-"]) for n in range(4)]
    assert [p.wait() for p in procs] == [0] * 4
    entries = json.loads((tmp_path / "toolchains.json").read_text())["toolchains"]
    assert len(entries) == 80
