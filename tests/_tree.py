"""A copy of the repository as git sees it: tracked and untracked-but-not-ignored files, symlinks kept.

    git_tree(dest) -> dest     what a fresh clone (plus uncommitted work) holds, no build output
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git_tree(dest: Path) -> Path:
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True).stdout.decode()
    for rel in filter(None, out.split("\0")):
        src, dst = ROOT / rel, dest / rel
        if not os.path.lexists(src):  # deleted in the work tree, not yet committed
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest
