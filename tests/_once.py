"""Expensive test inputs made once per test run, shared by every pytest-xdist worker.

    once(tmp_path_factory, name, make) -> Path
        a folder holding what ``make(folder)`` wrote: the first worker to ask makes it (under a
        file lock in the run's shared base temp), every other worker waits and gets the same
        folder; without xdist, a folder of this session. ``make`` raising leaves no folder, so
        the next worker that asks tries again and fails the same named way.

A session fixture alone is made once per worker (twice on 2 cores), and a fixture imported into
a test module is a fixture of that module (made once per module): conftest.py holds the shared
ones. Callers copy what they will write to; the folder itself is read-only by convention.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def once(tmp_path_factory, name: str, make: Callable[[Path], object]) -> Path:
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        base = tmp_path_factory.getbasetemp()
    else:  # every worker's base temp is a folder of the run's one: share its parent
        base = tmp_path_factory.getbasetemp().parent
    done, where = base / f"once-{name}.done", base / f"once-{name}"
    with open(base / f"once-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            try:
                make(where)
            except BaseException:
                shutil.rmtree(where, ignore_errors=True)
                raise
            done.touch()
    return where
