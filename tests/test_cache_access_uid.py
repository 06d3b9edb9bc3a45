"""A cache directory the process cannot write: the error names the uid it runs as and the
command that gives it the directory, and that very command makes the next open work
(the builder and serving images run as uid 10001: README, "Docker").

As root (CI), the open runs in a child process as uid/gid 10001 (setpriv), the directory
root's; otherwise as this user, the directory mode 0555.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

OPEN = "import sys; from rocke_aot.cache.store import Store; Store.open(sys.argv[1]).close(); print('opened')"


def _as(uid: int, gid: int) -> list[str]:
    if os.geteuid() == 0 and (uid, gid) != (0, 0):
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]
    return []


def test_unwritable_cache_directory_names_the_uid_and_the_fix_that_works():
    root = os.geteuid() == 0
    if root and shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed to open the store as another uid")
    uid, gid = (10001, 10001) if root else (os.getuid(), os.getgid())
    base = Path(tempfile.mkdtemp(prefix="rocke-uid-"))
    try:
        base.chmod(0o755)
        d = base / "cache"
        d.mkdir()
        if not root:
            d.chmod(0o555)
        url = f"sqlite:///{d / 'cache.sqlite'}"
        env = {**os.environ, "HOME": str(base), "ROCKE_AOT_HOME": str(base / "home")}
        (base / "home").mkdir()
        if root:
            os.chown(base / "home", uid, gid)
        p = subprocess.run([*_as(uid, gid), sys.executable, "-c", OPEN, url], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode != 0 and "CacheAccessError" in p.stderr, p.stderr
        msg = p.stderr.strip().splitlines()[-1]
        assert f"not writable by uid {uid} (gid {gid})" in msg, msg
        m = re.search(r"`(install -d [^`]+)`", msg)
        assert m and m.group(1) == f"install -d -o {uid} -g {gid} {d}", msg
        subprocess.run(shlex.split(m.group(1)), check=True)  # the command the message gives
        p = subprocess.run([*_as(uid, gid), sys.executable, "-c", OPEN, url], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0 and "opened" in p.stdout, p.stderr
        assert (d / "cache.sqlite").stat().st_uid == uid
    finally:
        shutil.rmtree(base, ignore_errors=True)
