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
    check(kernel, what)
        code-<h>.json's entries all stat as written (same interpreter and path) and the marker
        exists ──yes──> nothing to do (no family is imported)
             │ no (absent, unreadable, any file moved, another interpreter, a new record)
        the full check (check_contract) ──raises──> LaunchContractError; nothing is written
             │ passed
        code-<h>.json rewritten from the code loaded now (if its id moved), the marker written

Bounded by the local store's own bound: LocalStore.gc, when it evicts anything, drops every
memo (client/local.py drop_memos), and the next fetch of each kernel checks it in full once more.

Fail-closed: only a marker under the id of the code as it stats now answers; anything
unreadable or unexpected is a miss and the full check runs. The markers name check inputs,
not keys, so two keys with one contract share one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rocke_aot.cache.keys import thaw
from rocke_aot.errors import LaunchContractError
from rocke_aot.warm import code_file, code_id, current_code_id, stat_entry

if TYPE_CHECKING:
    from rocke_aot.client.local import Kernel

def inputs_digest(k: Kernel) -> str:
    """sha256 of what check_record_launch reads of ``k``: family, spec, arch, metadata."""
    doc = [k.inputs.family, thaw(k.inputs.spec), k.inputs.arch, thaw(k.metadata)]
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


def check_contract(k: Kernel, what: str) -> None:
    """The launch contract(s) ``k``'s record carries are its family's for its spec and arch
    (rocke_aot/variants/contract.py check_record_launch: the grid, block, every argument's size
    and layout); else LaunchContractError naming ``what``, before the kernel is kept or launched."""
    # here: it loads the record's family only; a memo hit loads none
    from rocke_aot.variants.contract import check_record_launch

    try:
        check_record_launch(k.inputs.family, thaw(k.inputs.spec), k.inputs.arch, thaw(k.metadata))
    except LaunchContractError as e:
        raise LaunchContractError(f"{what}: {e}") from None


class ContractMemo:
    def __init__(self, directory: str | os.PathLike):
        self.dir = Path(directory)
        self._id: str | None = None  # this process's code id, once it stats as its code file says

    def _current_id(self) -> str | None:
        """The id this interpreter's code file records if every entry still stats the same here, else None."""
        if self._id is None:
            self._id = current_code_id(self.dir)  # (rocke_aot/warm.py: a warm `rocke-aot fetch` reads it too)
        return self._id

    def _marker(self, cid: str, digest: str) -> Path:
        return self.dir / cid[:32] / digest

    def proof(self, k: Kernel) -> tuple[str, str, str] | None:
        """(code file, code id, inputs digest) of the marker that answers ``k`` now, else None:
        what a warm note names (rocke_aot/warm.py reads them again, by stat and path)."""
        try:
            digest = inputs_digest(k)
        except (TypeError, ValueError):
            return None
        cid = self._current_id()
        if cid is None or not self._marker(cid, digest).is_file():
            return None
        return code_file(), cid, digest

    def check(self, k: Kernel, what: str) -> None:
        """``k``'s launch contract(s) its family's, from a marker of this code when there is one,
        else checked in full (check_contract; LaunchContractError) and written down."""
        try:
            digest: str | None = inputs_digest(k)
        except (TypeError, ValueError):  # not JSON as a record is: no marker names it, checked in full
            digest = None
        cid = self._current_id() if digest is not None else None
        if cid is not None and digest is not None and self._marker(cid, digest).is_file():
            return
        check_contract(k, what)
        if digest is None:
            return
        try:
            self._record(digest)
        except OSError:
            pass  # a host that cannot write its trust folder checks in full each time

    def _record(self, digest: str) -> None:
        from rocke_aot.paths import atomic_write

        cid = self._current_id()
        if cid is None:
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
        marker = self._marker(cid, digest)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
