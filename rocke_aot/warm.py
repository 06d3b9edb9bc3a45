"""A warm host's answer for one kernel, read with the standard library alone.

A warm offline fetch (ROCKE_AOT_OFFLINE=1, what the host verified last) reads a handful of files;
loading the library that checks them costs several times more than reading them (click, the
vocabulary's tables, dataclasses). So a host that answered a key once writes down what that
answer rested on, and a later process that finds every one of those files unchanged answers
from the note with nothing but os, json and hashlib (cli/entry.py's `rocke-aot fetch KEY`; it sits beside the
vocabulary so that importing it runs no package's __init__):

    <trust dir>/answers/<key>      (trust dir: <client home>/trust/tuf-<pin id>, beside
                                    verified.state: the same trust as what an offline host reads)
        {"v": 1, "key", "state_sha256"   the bytes of verified.state it was answered under
         "bin", "bin_sha256", "bin_expires"  the host's verified bin holding the key, its bytes
         "code_file", "code_id", "contract"  the launch contract's marker (client/contracts.py)
         "kernel": {"sha256", "size", "arch", "lane", "family", "generation", "snapshot_version"}}
        written by the Fetcher (remember=True: `rocke-aot fetch` of one kernel) after every
        check of a signed get passed, from the files as they are on disk then, read again and
        compared with what was checked (client/fetch.py _remember)

    answer(root, pin, key) -> Warm | None
        verified.state has the bytes of the note's state_sha256 ──no──> None
        its expiry (root, snapshot, targets) is in the future ──no──> None
        snapshot.json hashes to the state's snapshot_sha256 ──no──> None
        the bin file has the note's bytes, not expired ──no──> None
        the contract's code file stats as written (same interpreter, path and code), its id is
            the note's, the marker exists ──no──> None
        the local blob has the signed sha256 and size ──no──> None   (its use time is touched)
        ──> the kernel's fields and bytes

None is never an answer: the caller runs the whole library (client/fetch.py Fetcher), which
verifies again and answers, refuses by name, or writes a new note. Since every file the note
rests on is compared by its sha256 (or, for code, by stat as the contract memo does), a changed
or corrupt one can only make this path step aside. The blob is hashed on every read, as
LocalStore.blob does. Nothing here parses a bin or a record: the note says what the library
found in those exact bytes.

This module imports nothing but the standard library's os, sys, json, hashlib and time (and the
rocke_aot package, which imports nothing): tests/test_warm_fetch.py checks that a warm `rocke-aot fetch` imports
neither click nor any other rocke_aot module.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time

from rocke_aot import settings

VERSION = 1
ANSWERS = "answers"
STATE = "verified.state"
MAX_NOTE = 64 << 10
MAX_STATE = 64 << 10
_HEX = frozenset("0123456789abcdef")
_STAMP = "%Y-%m-%dT%H:%M:%SZ"


# ---- the code a launch contract check runs (client/contracts.py keeps the markers) --------------

def interpreter() -> list[str]:
    """What besides the files decides which code runs: the interpreter, where rocke_aot is, the
    module search path (less sys.path[0], the running script's folder, which differs between the
    CLI and a library process and holds no distribution) and the plugin import bound (whether a
    slow plugin's family exists at all)."""
    import rocke_aot

    return [sys.version, sys.executable, os.path.dirname(rocke_aot.__file__),
            os.environ.get(settings.PLUGIN_IMPORT_TIMEOUT_S, ""), *sys.path[1:]]


def code_file() -> str:
    """code-<hash of interpreter()>.json: each interpreter and path keeps its own."""
    doc = json.dumps(interpreter(), separators=(",", ":")).encode()
    return f"code-{hashlib.sha256(doc).hexdigest()[:16]}.json"


def stat_entry(path: str) -> list:
    st = os.stat(path)
    return [path, st.st_mtime_ns, st.st_size, st.st_ino]


def code_id(entries: list) -> str:
    doc = json.dumps([interpreter(), entries], separators=(",", ":")).encode()
    return hashlib.sha256(doc).hexdigest()


def current_code_id(directory: str | os.PathLike) -> str | None:
    """The id this interpreter's code file in ``directory`` records if every entry still stats
    the same here, else None (absent, unreadable, any file moved, another interpreter)."""
    try:
        with open(os.path.join(directory, code_file()), "rb") as f:
            doc = json.loads(f.read())
        entries, cid = doc["entries"], doc["id"]
        if not isinstance(entries, list) or not isinstance(cid, str) or code_id(entries) != cid:
            return None
        for e in entries:
            if stat_entry(e[0]) != e:
                return None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return cid


# ---- the pin's folder -----------------------------------------------------------------------------

def pin_id(text: str) -> str | None:
    """trusted.pin_id(trusted.pinned_key(text)) for the pin's usual forms ("ed25519:<hex>", a
    .pub file, an initial root.json), else None (the library then reads it and names what is
    wrong). A test checks both agree."""
    if text.startswith("ed25519:"):
        public = text[len("ed25519:"):]
    else:
        try:
            with open(text, "rb") as f:
                data = f.read(1 << 20)
        except OSError:
            return None
        if b'"signed"' in data[:4096]:
            return hashlib.sha256(data).hexdigest()[:16] if len(data) < 1 << 20 else None
        try:
            doc = json.loads(data.decode())
        except ValueError:  # (UnicodeDecodeError too)
            return None
        if not isinstance(doc, dict) or doc.get("keytype") != "ed25519" or not isinstance(doc.get("public"), str):
            return None
        public = doc["public"]
    if not isinstance(public, str) or len(public) != 64 or not set(public) <= _HEX:
        return None
    return hashlib.sha256(bytes.fromhex(public)).hexdigest()[:16]


# ---- the note and the answer ---------------------------------------------------------------------

class Warm:
    """A kernel answered from a note (no dataclass: that module costs more than this whole path)."""

    __slots__ = ("key", "sha256", "size", "arch", "lane", "family", "generation", "snapshot_version", "code_object")

    def __init__(self, key: str, sha256: str, size: int, arch: str, lane: str, family: str, generation: str | None,
                 snapshot_version: int, code_object: bytes):
        self.key, self.sha256, self.size, self.code_object = key, sha256, size, code_object
        self.arch, self.lane, self.family = arch, lane, family
        self.generation, self.snapshot_version = generation, snapshot_version


def note(*, key: str, state_sha256: str, bin_name: str, bin_sha256: str, bin_expires: str, code_file: str,
         code_id: str, contract: str, sha256: str, size: int, arch: str, lane: str, family: str,
         generation: str | None, snapshot_version: int) -> bytes:
    """The note's bytes (the writer: client/fetch.py Fetcher._remember)."""
    return json.dumps({"v": VERSION, "key": key, "state_sha256": state_sha256, "bin": bin_name,
                       "bin_sha256": bin_sha256, "bin_expires": bin_expires, "code_file": code_file,
                       "code_id": code_id, "contract": contract,
                       "kernel": {"sha256": sha256, "size": size, "arch": arch, "lane": lane, "family": family,
                                  "generation": generation, "snapshot_version": snapshot_version}},
                      sort_keys=True).encode()


def _read(path: str, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    return data if len(data) <= limit else None


def _sha(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _future(stamp: object, now: str) -> bool:
    """``stamp`` a %Y-%m-%dT%H:%M:%SZ time after ``now`` (one fixed-width form: text order is time order)."""
    return isinstance(stamp, str) and len(stamp) == 20 and stamp[4] == "-" and stamp[10] == "T" \
        and stamp[19] == "Z" and stamp > now


def _name(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 128 and "/" not in value and value not in (".", "..") \
        and "\0" not in value


def answer(root: str, pin: str, key: str) -> Warm | None:
    """The kernel ``key`` from the local store at ``root`` under pin ``pin``, when a note and
    every file it rests on are unchanged (module doc); else None."""
    pid = pin_id(pin)
    if pid is None or len(key) != 64 or not set(key) <= _HEX:
        return None
    tdir = os.path.join(root, "trust", f"tuf-{pid}")
    raw = _read(os.path.join(tdir, ANSWERS, key), MAX_NOTE)
    state = _read(os.path.join(tdir, STATE), MAX_STATE)
    if raw is None or state is None:
        return None
    try:
        n = json.loads(raw)
        st = json.loads(state)
        k = n["kernel"]
        if n["v"] != VERSION or n["key"] != key or n["state_sha256"] != hashlib.sha256(state).hexdigest():
            return None
        now = time.strftime(_STAMP, time.gmtime())
        if not (_future(st["expires"], now) and _future(n["bin_expires"], now)):
            return None
        if st["pin"] != pid or _sha(os.path.join(tdir, "snapshot.json")) != st["snapshot_sha256"]:
            return None
        if not _name(n["bin"]) or _sha(os.path.join(tdir, f"{n['bin']}.json")) != n["bin_sha256"]:
            return None
        cdir = os.path.join(tdir, "contracts")
        cid, contract = n["code_id"], n["contract"]
        if n["code_file"] != code_file() or not (isinstance(cid, str) and len(cid) == 64 and _name(contract)):
            return None
        if current_code_id(cdir) != cid or not os.path.isfile(os.path.join(cdir, cid[:32], contract)):
            return None
        sha, size = k["sha256"], k["size"]
        if not (isinstance(sha, str) and len(sha) == 64 and set(sha) <= _HEX and type(size) is int and size > 0):
            return None
        path = os.path.join(root, "blobs", sha)
        data = _read(path, size)
        if data is None or len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            return None  # the library reads it again: a changed blob is removed and refused there
        out = Warm(key, sha, size, k["arch"], k["lane"], k["family"], k["generation"], k["snapshot_version"], data)
        if not all(isinstance(v, str) for v in (out.arch, out.lane, out.family)) \
                or not (out.generation is None or isinstance(out.generation, str)) \
                or type(out.snapshot_version) is not int:
            return None
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    try:  # its last use, for gc's least-recently-used order (LocalStore.blob does the same)
        os.utime(path)
    except OSError:
        pass
    return out
