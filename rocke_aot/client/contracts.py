"""A launch contract checked once per host and code, not once per process.

The Fetcher checks every record's launch contract against its family's formulas
(variants/contract.py check_record_launch) before a kernel is kept or handed out: a signature
proves who signed a contract, not that it is right. That check imports the family registry and
the record's family (its spec, table and model, by name: variants/families.py), most of a warm
fetch's cost. Its answer is a pure function
of the record's check inputs (family, spec, arch, metadata) and of the code that checks them, so
a host that checked a record once may answer from what it wrote down then, as long as neither
changed:

    ContractMemo(dir)                   <trust dir>/contracts/ (beside verified.state: the same
                                        trust as the verified metadata an offline host reads)
        code-<h>.json {"id": sha256, "entries": [[path, mtime_ns, size, inode], ...]}, one per
                     interpreter and module search path (h: their hash, rocke_aot/warm.py interpreter)
                     every .py file and folder of the code the check runs: rocke_aot's vocabulary
                     modules (rocke_aot/*.py), rocke_aot/variants/ and rocke_aot/families/, the
                     package of every family entry point (a plugin's, where its spec type
                     lives), loaded or not, each sys.path folder (a distribution
                     installed or removed moves its mtime: the entry points); the id
                     hashes them with the interpreter's identity
        <id[:32]>/<digest>   an empty file: the record whose check inputs hash to <digest>
                     passed under code <id>
        <id[:32]>/<pid>-<thread>-<ns>-<n>.batch   the same for many records, one digest a line: what
                     a batch (ContractMemo.batch: Fetcher.get_each) writes at its end, atomically,
                     instead of one file per record (creating a file costs a fetch about as much
                     as checking the record); read once per process (a line of exactly 64 hex
                     digits is a marker, anything else none); a warm note's proof is a file,
                     and so is a batch of one; over MAX_LISTS lists, the reader merges them
    check(kernel, what)
        code-<h>.json's entries all stat as written (same interpreter and path) and the marker
        exists ──yes──> nothing to do (no family is imported)
             │ no (absent, unreadable, any file moved, another interpreter, a new record)
        the full check (check_contract) ──raises──> LaunchContractError; nothing is written
             │ passed
        code-<h>.json rewritten from the code loaded now (if its id moved), the marker written
        (in a batch: at the batch's end, in its list; this memo answers it until then)

Bounded by the local store's own bound: LocalStore.gc, when it evicts anything, drops every
memo (client/local.py drop_memos), and the next fetch of each kernel checks it in full once more.

Fail-closed: only a marker under the id of the code as it stats now answers; anything
unreadable or unexpected is a miss and the full check runs. The markers name check inputs,
not keys, so two keys with one contract share one.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocke_aot.cache.keys import thaw
from rocke_aot.errors import LaunchContractError
from rocke_aot.warm import code_file, code_id, current_code_id, stat_entry

if TYPE_CHECKING:
    from rocke_aot.client.local import Kernel

def check_inputs(k: Kernel) -> tuple[str, Any, str, Any]:
    """What check_record_launch reads of ``k``, as plain JSON values: (family, spec, arch, metadata)."""
    return k.inputs.family, thaw(k.inputs.spec), k.inputs.arch, thaw(k.metadata)


def inputs_digest(k: Kernel, plain: tuple[str, Any, str, Any] | None = None) -> str:
    """sha256 of what check_record_launch reads of ``k``: family, spec, arch, metadata (``plain``:
    check_inputs(k) made already)."""
    doc = list(plain if plain is not None else check_inputs(k))
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _code_paths() -> list[str]:
    """Every file and folder of the code a contract check runs (module doc), found without loading
    a family (a check loads only the family it names: variants/families.py, "By name"): the
    folders of the packages the registry's families come from (family_packages: each family
    entry point's package, where a plugin's spec type lives), whether loaded or not."""
    import importlib.util

    import rocke_aot
    from rocke_aot.variants import families as registry

    root = Path(rocke_aot.__file__).parent
    trees = {root / "variants", root / "families"}
    for name in registry.family_packages():
        try:
            spec = importlib.util.find_spec(name)  # a top-level name: found, not imported
        except (ImportError, ValueError):  # a package that cannot be found: no files to watch
            continue
        origin = getattr(spec, "origin", None)
        if spec is not None and spec.has_location and origin and Path(origin).parent != root:
            trees.add(Path(origin).parent)
    out = {str(root)}
    out |= {str(p) for p in root.glob("*.py")}
    for t in trees:
        if t.is_dir():
            out.add(str(t))
            for dirpath, dirnames, filenames in os.walk(t):
                dirnames[:] = [d for d in dirnames if d != "__pycache__"]
                out |= {os.path.join(dirpath, d) for d in dirnames}
                out |= {os.path.join(dirpath, f) for f in filenames if f.endswith(".py")}
    out |= {p for p in sys.path if p and os.path.isdir(p)}
    return sorted(out)


def check_contract(k: Kernel, what: str, plain: tuple[str, Any, str, Any] | None = None) -> None:
    """The launch contract(s) ``k``'s record carries are its family's for its spec and arch
    (rocke_aot/variants/contract.py check_record_launch: the grid, block, every argument's size
    and layout); else LaunchContractError naming ``what``, before the kernel is kept or launched.
    ``plain``: check_inputs(k) made already (ContractMemo.check: one copy for the digest and the check)."""
    # here: it loads the record's family only; a memo hit loads none
    from rocke_aot.variants.contract import check_record_launch

    family, spec, arch, metadata = plain if plain is not None else check_inputs(k)
    try:
        check_record_launch(family, spec, arch, metadata)
    except LaunchContractError as e:
        raise LaunchContractError(f"{what}: {e}") from None


BATCH = ".batch"  # a marker list's suffix (ContractMemo.batch): one digest per line
MAX_BATCH_FILE = 1 << 20  # a list longer than this is not read (a miss: checked in full)
MAX_LISTS = 32  # more lists than this in a folder: the process that reads them merges them (ContractMemo._has)
MERGED_LIST = 8192  # digests per merged list (about 530 KB: under MAX_BATCH_FILE)
_HEX = frozenset("0123456789abcdef")
_SEQ = itertools.count()  # list names unique within a process (with its pid, thread and clock)


class ContractMemo:
    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self._id: str | None = None  # this process's code id, once it stats as its code file says
        self._lock = threading.Lock()  # the fetch's workers share the memo
        self._made: set[Path] = set()  # marker folders made by this process (one mkdir each, not one per marker)
        self._batching = 0  # inside batch(): passed digests are kept in _pending, written as one list
        self._pending: dict[str, None] = {}  # digests passed in this batch, not written yet (in order)
        self._listed: dict[str, frozenset[str]] = {}  # code id -> the digests its marker lists hold (read once)

    def _current_id(self) -> str | None:
        """The id this interpreter's code file records if every entry still stats the same here, else None."""
        if self._id is None:
            self._id = current_code_id(self.dir)  # (rocke_aot/warm.py: a warm `rocke-aot fetch` reads it too)
        return self._id

    def _marker(self, cid: str, digest: str) -> Path:
        return self.dir / cid[:32] / digest

    def _has(self, cid: str, digest: str) -> bool:
        """A marker of ``digest`` under code ``cid``: its own file, or a line of a marker list."""
        listed = self._listed.get(cid)
        if listed is None:
            folder = self.dir / cid[:32]
            names, listed = _read_lists(folder)
            self._listed[cid] = listed
            if len(names) > MAX_LISTS:  # many small batches: merged, so later processes read a few files
                try:
                    _merge_lists(folder, names, listed)
                except OSError:
                    pass
        return digest in listed or self._marker(cid, digest).is_file()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Within it, a check that passes is written down at the end, all in one marker list
        (``<id[:32]>/<unique>.batch``, atomically) instead of one file per record: a fetch of many
        kernels creates one file, not one per kernel. Until then this memo answers them itself."""
        with self._lock:
            self._batching += 1
        try:
            yield
        finally:
            with self._lock:
                self._batching -= 1
                pending, self._pending = (list(self._pending), {}) if not self._batching else ([], self._pending)
            if pending:
                try:
                    self._write_list(pending)
                except OSError:
                    pass  # a host that cannot write its trust folder checks in full each time

    def proof(self, k: Kernel) -> tuple[str, str, str] | None:
        """(code file, code id, inputs digest) of the marker that answers ``k`` now, else None:
        what a warm note names (rocke_aot/warm.py reads them again, by stat and path: a digest
        still pending in a batch gets its own marker file here)."""
        try:
            digest = inputs_digest(k)
        except (TypeError, ValueError):
            return None
        with self._lock:
            pending = self._pending.pop(digest, 0) is None
        if pending:
            try:
                self._write_marker(digest)
            except OSError:
                return None
        cid = self._current_id()
        if cid is None or not self._marker(cid, digest).is_file():
            return None
        return code_file(), cid, digest

    def check(self, k: Kernel, what: str) -> None:
        """``k``'s launch contract(s) its family's, from a marker of this code when there is one,
        else checked in full (check_contract; LaunchContractError) and written down."""
        plain = check_inputs(k)
        try:
            digest: str | None = inputs_digest(k, plain)
        except (TypeError, ValueError):  # not JSON as a record is: no marker names it, checked in full
            digest = None
        if digest is not None and digest in self._pending:
            return  # passed in this batch (this process checked it)
        cid = self._current_id() if digest is not None else None
        if cid is not None and digest is not None and self._has(cid, digest):
            return
        check_contract(k, what, plain)
        if digest is None:
            return
        with self._lock:
            if self._batching:
                self._pending[digest] = None
                return
        try:
            self._write_marker(digest)
        except OSError:
            pass  # a host that cannot write its trust folder checks in full each time

    def _folder(self) -> Path:
        """This code's marker folder, made once per process (the code file written first if needed)."""
        cid = self._current_id()
        if cid is None:
            with self._lock:
                cid = self._id or self._write_code_file()
        folder = self.dir / cid[:32]
        if folder not in self._made:
            folder.mkdir(parents=True, exist_ok=True)
            self._made.add(folder)
        return folder

    def _write_marker(self, digest: str) -> None:
        for attempt in (0, 1):
            folder = self._folder()
            try:
                os.close(os.open(folder / digest, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))  # an empty file
                return
            except FileNotFoundError:  # its folder went meanwhile (a gc dropped the memos): made again
                self._made.discard(folder)
                if attempt:
                    raise

    def _write_list(self, digests: list[str]) -> None:
        if len(digests) == 1:  # a batch of one: its own marker file, as outside a batch
            self._write_marker(digests[0])
            return
        _write_list_file(self._folder(), digests)

    def _write_code_file(self) -> str:
        """code-<h>.json from the code as it stats now; its id (the markers of an older id removed)."""
        from rocke_aot.paths import atomic_write

        entries = [stat_entry(p) for p in _code_paths()]
        cid = code_id(entries)
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / code_file()
        try:
            old = json.loads(path.read_bytes()).get("id")
        except (OSError, ValueError, AttributeError):
            old = None
        atomic_write(path, json.dumps({"id": cid, "entries": entries}).encode(), durable=False)
        self._id = cid
        if isinstance(old, str) and old != cid and len(old) == 64:  # the markers of code no longer here
            import shutil

            shutil.rmtree(self.dir / old[:32], ignore_errors=True)
        return cid


def _write_list_file(folder: Path, digests: list[str]) -> None:
    from rocke_aot.paths import atomic_write

    name = f"{os.getpid()}-{threading.get_ident()}-{time.time_ns()}-{next(_SEQ)}{BATCH}"
    atomic_write(folder / name, "".join(f"{d}\n" for d in digests).encode(), durable=False, make_parent=True)


def _read_lists(folder: Path) -> tuple[list[str], frozenset[str]]:
    """(the marker lists read whole, every digest they hold) in ``folder`` (ContractMemo.batch): a
    line of exactly 64 lowercase hex digits; anything else, a list longer than MAX_BATCH_FILE or
    unreadable, is no marker (fail closed: that record is checked in full)."""
    out: set[str] = set()
    read: list[str] = []
    try:
        names = [n for n in os.listdir(folder) if n.endswith(BATCH)]
    except OSError:
        return [], frozenset()
    for n in names:
        try:
            with open(folder / n, "rb") as f:
                data = f.read(MAX_BATCH_FILE + 1)
        except OSError:
            continue
        if len(data) > MAX_BATCH_FILE:
            continue
        read.append(n)
        for line in data.decode("ascii", "replace").split("\n"):
            if len(line) == 64 and _HEX.issuperset(line):
                out.add(line)
    return read, frozenset(out)


def _merge_lists(folder: Path, names: list[str], digests: frozenset[str]) -> None:
    """The lists ``names`` (read whole) replaced by lists of at most MERGED_LIST digests holding
    ``digests``: the new lists are written (atomically) before the old ones are removed, so a
    reader meanwhile finds every digest in one or the other."""
    ordered = sorted(digests)
    for i in range(0, len(ordered), MERGED_LIST):
        _write_list_file(folder, ordered[i:i + MERGED_LIST])
    for n in names:
        try:
            os.unlink(folder / n)
        except FileNotFoundError:
            pass
