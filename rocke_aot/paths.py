"""Where rocke-aot keeps per-user state.

    $ROCKE_AOT_HOME (default: the user cache dir, e.g. ~/.cache/rocke-aot)
    ├── toolchains.json      registered toolchains (lane environments, offline interpreters)
    ├── lanes/<lane>/        virtual environments made by `rocke-aot toolchain install <lane>`
    ├── recipe/<sha>.json    the recipe rule's closure per source tree (aot/recipe.py; a memo)
    └── cache.sqlite         the default artifact cache (ROCKE_AOT_CACHE overrides the URL)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import platformdirs

from rocke_aot import settings

ENV_HOME = settings.HOME


def home() -> Path:
    value = settings.raw(ENV_HOME)
    path = Path(value) if value else Path(platformdirs.user_cache_dir("rocke-aot"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True, make_parent: bool = True) -> None:
    """Write ``data`` to ``path`` whole or not at all (temp file in the same dir, fsync, rename).

    ``durable`` False skips the fsync: for files whose every read is verified (a content hash),
    where a crash may lose the file but never make a wrong one pass. ``make_parent`` False:
    the caller made the directory already (a store writing many files into one)."""
    if make_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, mode)  # mkstemp makes 0600; the store is readable like any cache
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
