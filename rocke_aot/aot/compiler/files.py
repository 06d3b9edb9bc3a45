"""The files a compile runs and hashes: an external tool located (find_executable), a toolchain
file hashed for its identity (file_sha256). aot/compiler/lld.py and ptx.py locate their tools
with them; aot/toolchains hash their libraries with them (identities are cache-key inputs)."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Iterable

from rocke_aot import settings
from rocke_aot.errors import ToolchainError


def find_executable(name: str, env_var: str, candidates: Iterable[str], missing: str) -> str:
    """A tool's executable: ``env_var`` when set (it must name an executable file: a typo
    fails, it never falls through), else ``name`` on PATH, else the first executable of
    ``candidates``; ToolchainError(``missing``) when there is none."""
    env = settings.raw(env_var)
    if env is not None:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise ToolchainError(f"{env_var}={env!r} is not an executable file")
        return env
    for path in (shutil.which(name), *candidates):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ToolchainError(missing)


_FILE_HASHES: dict[tuple[str, int, int], str] = {}
_FILE_HASH_LOCK = threading.Lock()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a toolchain file (a shared library, a linker binary), after symlinks.

    Hashed once per process per (real path, mtime, size): identities are asked for per lane
    and per plan, and a library is 100-200 MB. A file replaced in place (new mtime or size)
    is hashed again. ToolchainError when it cannot be read: an identity never guesses.
    """
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError as e:
        raise ToolchainError(f"cannot hash toolchain file {path}: {e}") from e
    memo = (real, st.st_mtime_ns, st.st_size)
    got = _FILE_HASHES.get(memo)
    if got is None:
        with _FILE_HASH_LOCK:
            got = _FILE_HASHES.get(memo)
            if got is None:
                h = hashlib.sha256()
                try:
                    with open(real, "rb") as f:
                        for chunk in iter(lambda: f.read(1 << 20), b""):
                            h.update(chunk)
                except OSError as e:
                    raise ToolchainError(f"cannot hash toolchain file {path}: {e}") from e
                got = _FILE_HASHES[memo] = h.hexdigest()
    return got
