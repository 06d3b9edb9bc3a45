"""rocke_aot.paths.atomic_write: whole or nothing, the mode asked for, no temp file left.

    the file's mode is the one asked (0644) under a umask of 077 (stat, not our code)
    a write that fails half-way leaves the old file and no temp file
    16 threads writing one path: the result is one writer's bytes whole, no temp left
"""

from __future__ import annotations

import os
import stat
import threading

import pytest

from rocke_aot.paths import atomic_write


def test_the_mode_is_the_one_asked_whatever_the_umask(tmp_path):
    old = os.umask(0o077)
    try:
        atomic_write(tmp_path / "a" / "f.json", b"{}")
        atomic_write(tmp_path / "g", b"x", 0o600, durable=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "f.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "g").stat().st_mode) == 0o600
    assert (tmp_path / "a" / "f.json").read_bytes() == b"{}"


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "f"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, 12345)  # not bytes: os.write refuses after the temp file exists
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["f"]
    with pytest.raises(FileNotFoundError):
        atomic_write(tmp_path / "missing" / "f", b"x", make_parent=False)


def test_concurrent_writers_of_one_path(tmp_path):
    target = tmp_path / "blob"
    bodies = [bytes([i]) * (1 << 16) for i in range(16)]
    threads = [threading.Thread(target=atomic_write, args=(target, b), kwargs={"durable": False}) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_bytes() in bodies and os.listdir(tmp_path) == ["blob"]
