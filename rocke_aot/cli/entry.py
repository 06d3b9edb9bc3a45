"""The ``rocke-aot`` script: a warm `rocke-aot fetch KEY` answered before click loads, else cli/main.py.

    ROCKE_AOT_OFFLINE=1 rocke-aot fetch KEY [--mirror URL]... [--server URL] [--root-key PUB]
                                            [--local DIR] [-o FILE | --out-dir DIR] [--json]
        KEY all 64 digits, a pinned root key, the local store named (--local,
        $ROCKE_AOT_CLIENT_HOME or $ROCKE_AOT_HOME)
        ──rocke_aot/warm.py answer(store, pin, KEY): the host's warm note, every file it rests
          on unchanged, the blob's sha256 checked──> the command's own output (-o/--out-dir
          file, one line or the --json document), exit 0
    anything else: another command, another option or form (--help, a prefix, several keys,
        --arch, -oFILE), a setting that changes the fetch ($ROCKE_AOT_CLIENT_MAX_BYTES, a
        $ROCKE_AOT_FETCH_WORKERS the library would refuse), an online fetch, no note or any
        file changed ──> cli/main.py's main(): click and the library, which verify again and
        answer (writing a new note), or refuse by name

So the fast path only ever answers what the whole command line would answer, in the same bytes
(tests/test_warm_fetch.py runs both on the same host), and otherwise steps aside before writing
anything. It imports the standard library's os, sys, json, hashlib and time, and no click.
"""

from __future__ import annotations

import os
import sys

from rocke_aot import settings  # names only: the module is os and a plain class (no dataclasses)

# option -> field: the options of `rocke-aot fetch` (cli/fetch.py) this path reads; --mirror and
# --server name sources, which an offline fetch does not use
_OPTIONS = {"--mirror": "mirrors", "--server": "server", "--root-key": "root_key", "--local": "local",
            "-o": "output", "--output": "output", "--out-dir": "out_dir"}
_HEX = frozenset("0123456789abcdef")


def _parse(args: list[str]) -> dict | None:
    """The fetch's arguments when they are within this path's forms (module doc), else None."""
    got: dict = {"mirrors": [], "json": False}
    keys = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--json":
            got["json"] = True
            continue
        if not a.startswith("-"):
            keys.append(a)
            continue
        name, eq, value = a.partition("=") if a.startswith("--") else (a, "", "")
        field = _OPTIONS.get(name)
        if field is None:
            return None
        if not eq:
            if i >= len(args):
                return None
            value = args[i]
            i += 1
        if not value or value.startswith("-"):
            return None
        if field == "mirrors":
            got["mirrors"].append(value)
        elif field in got:  # given twice: click keeps the last; not this path's business
            return None
        else:
            got[field] = value
    if len(keys) != 1 or len(keys[0]) != 64 or not set(keys[0]) <= _HEX:
        return None
    if "output" in got and "out_dir" in got:
        return None
    got["key"] = keys[0]
    return got


def _normal(path: str) -> bool:
    """str(pathlib.Path(path)) == path (how the command prints the folders it was given)."""
    return path not in ("", ".") and os.path.normpath(path) == path


def _path_ok(path: str, *, file: bool) -> bool:
    """What click.Path(dir_okay=False, writable=True) (``file``) or click.Path(file_okay=False)
    accepts, for an existing path: readable (and writable), of the right kind."""
    import stat

    try:
        st = os.stat(path)
    except OSError:
        return True
    if file:
        return not stat.S_ISDIR(st.st_mode) and os.access(path, os.R_OK) and os.access(path, os.W_OK)
    return not stat.S_ISREG(st.st_mode) and os.access(path, os.R_OK)


def warm_fetch(args: list[str]) -> int | None:
    """The exit code of `rocke-aot fetch ARGS` answered from a warm note, or None (module doc)."""
    env = os.environ
    if env.get(settings.OFFLINE) != "1" or env.get(settings.CLIENT_MAX_BYTES):
        return None
    workers = env.get(settings.FETCH_WORKERS)
    if workers and not (workers.isascii() and workers.isdigit() and int(workers) >= 1):
        return None
    got = _parse(args)
    if got is None:
        return None
    pin = got.get("root_key") or env.get(settings.ROOT_KEY)
    home = env.get(settings.HOME)
    root = got.get("local") or env.get(settings.CLIENT_HOME) or (os.path.join(home, "client") if home else None)
    if not pin or not root or not _normal(root):
        return None
    output, out_dir = got.get("output"), got.get("out_dir")
    if (output is not None and not _path_ok(output, file=True)) or \
            (out_dir is not None and not (_normal(out_dir) and _path_ok(out_dir, file=False))):
        return None
    from rocke_aot.warm import answer

    k = answer(root, pin, got["key"])
    if k is None:
        return None
    path = output or (os.path.join(out_dir, f"{k.key}.{'cubin' if k.arch.startswith('sm_') else 'hsaco'}")
                      if out_dir else None)
    if path:
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "wb") as f:
                f.write(k.code_object)
        except OSError:
            return None  # the command line says what is wrong
    origin = {"source": root, "signed": True, "snapshot_version": k.snapshot_version, "generation": k.generation}
    if got["json"]:
        import json

        doc = {"kernels": [{"key": k.key, "sha256": k.sha256, "size": k.size, "arch": k.arch, "lane": k.lane,
                            "family": k.family, "output": path, "origin": origin}],
               "failed": [], "metadata_skipped": [], "local": root, "trimmed": []}
        sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    else:
        sys.stdout.write(f"{k.key}  {k.arch} {k.lane} {k.family}  {k.size} bytes  sha256 {k.sha256}  from {root}"
                         + (f"  -> {path}" if path else "") + "\n")
    sys.stdout.flush()
    return 0


def main() -> int | None:
    """The console script: the warm path for `fetch` (module doc), else the whole command line."""
    if sys.argv[1:2] == ["fetch"]:
        code = warm_fetch(sys.argv[2:])
        if code is not None:
            return code
    from rocke_aot.cli.main import main as command_line

    command_line()
    return None
