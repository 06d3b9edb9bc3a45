"""Where rocke-aot keeps per-user state.

    $ROCKE_AOT_HOME (default: the user cache dir, e.g. ~/.cache/rocke-aot)
    ├── toolchains.json      registered toolchains (lane environments, offline interpreters)
    ├── lanes/<lane>/        virtual environments made by `rocke-aot toolchain install <lane>`
    ├── lanes/.<lane>.lock   held while one process makes or fills that environment (exclusive)
    ├── .toolchains.lock     held while one process rewrites toolchains.json
    ├── recipe/<sha>.json    the recipe rule's closure per source tree (aot/recipe.py; a memo)
    └── cache.sqlite         the default artifact cache (ROCKE_AOT_CACHE overrides the URL)
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from rocke_aot import settings


def home() -> Path:
    value = settings.raw(settings.HOME)
    if not value:
        import platformdirs  # (here: a host that names its folders never loads it)

        value = platformdirs.user_cache_dir("rocke-aot")
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


_TMP_SEQ = itertools.count()  # temp names unique within the process; pid and thread across them


def atomic_write(path: str | os.PathLike, data: bytes, mode: int = 0o644, *, durable: bool = True,
                 make_parent: bool = True) -> None:
    """Write ``data`` to ``path`` whole or not at all (temp file in the same dir, fsync, rename).

    ``durable`` False skips the fsync: for files whose every read is verified (a content hash),
    where a crash may lose the file but never make a wrong one pass. ``make_parent`` False:
    the caller made the directory already (a store writing many files into one). The file
    gets exactly ``mode`` whatever the umask (a registry other users read stays readable).
    The temp file is named by pid, thread and a counter and opened O_EXCL: no random names,
    no buffered file object (half of what a small write cost through tempfile.mkstemp)."""
    path = os.fspath(path)
    parent, name = os.path.split(path)
    if make_parent:
        os.makedirs(parent or ".", exist_ok=True)
    while True:
        tmp = os.path.join(parent, f".{name}.{os.getpid()}.{threading.get_ident()}.{next(_TMP_SEQ)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
            break
        except FileExistsError:  # left by a crashed process whose pid and thread this one has
            continue
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # not the umask's: the store is readable like any cache
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


@contextlib.contextmanager
def exclusive(path: str | os.PathLike) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``path`` (made if missing) for the ``with`` block, across
    processes: a read-modify-write of shared state (a lane environment being made, the toolchain
    registry, a trust directory's publish) is not interleaved with another process's. The kernel
    drops the lock when the process dies, so a crash never leaves it held."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
