"""The content-addressed store: one thin facade over SQLite (default) or PostgreSQL and its parts.

    Store.open(url) ── db.resolve_url / make_engine / ensure_schema (cache/db.py) ─> db.Handle
        │                (url, engine, readonly), shared by every part below
        ▼
    Store (this module: open, close, and one-line delegations; nothing else)
      ├─ artifacts  cache/artifacts.py      the plan index: put, put_failure, get, record,
      │                                     get_failure, lookup_many, find (THE listing),
      │                                     resolve_key, flush_reads
      ├─ blobs      cache/blobs.py          sha256 -> zstd frame (+ trained dictionaries):
      │                                     get_blob, blob_frame, has_blob, stored_bytes,
      │                                     train_dictionaries
      ├─ plans      cache/plans.py          generations (cache/generations.py), code objects by
      │                                     what the compiler consumed (cache/code_objects.py),
      │                                     build claims (cache/claims.py)
      ├─ maintenance cache/maintenance.py   stats, verify (blobs, keys, records, origins), gc,
      │                                     gc_generations, purge(origin), evict
      ├─ selection  cache/selection_view.py the selection read model: candidates() -> Candidates
      ├─ triton     cache/triton_entries.py Triton cache entries by Triton's own key: a host's
      │                                     publish and the lookup (a build's: inside its put)
      └─ bundles    cache/bundle.py         export / import_, through the parts' public methods

    builder ──put──> artifacts ──(one write tx)──> generation, blob, code object, row, served
        └─ over max_bytes after a put ──> maintenance.evict
    service / CLI / runner ──get, record, find, candidates, get_blob, blob_frame──> a part

Writers: SQLite BEGIN IMMEDIATE (db.write_tx); PostgreSQL shared advisory lock for puts,
exclusive for gc/evict/import/claims. ``last_read_at`` is refreshed at most every
``touch_interval`` seconds per artifact, so hot reads do not turn into a write each. A part
reaches another only through its public methods; no module imports another's private names
(tests/test_store_parts.py checks both).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from rocke_aot import settings
from rocke_aot.boundedjson import is_int
from rocke_aot.cache import bundle, claims, codec, db
from rocke_aot.cache.artifacts import Artifacts
from rocke_aot.cache.blobs import Blobs
from rocke_aot.cache.code_objects import CodeHit
from rocke_aot.cache.generations import Generation
from rocke_aot.cache.keys import KeyInputs
from rocke_aot.cache.maintenance import Maintenance
from rocke_aot.cache.plans import Plans
from rocke_aot.cache.provenance import BUILD, Entry
from rocke_aot.cache.records import Artifact, Failure, GcReport, Hit, StoreStats, VerifyReport
from rocke_aot.cache.selection_view import SelectionView
from rocke_aot.cache.triton_entries import EntryFile, TritonEntries
from rocke_aot.candidates import Candidate
from rocke_aot.errors import CacheError, NotFoundError
from rocke_aot.targets import Target

LOOKUP_CHUNK = db.LOOKUP_CHUNK



def _target(arch: Target | str | None) -> Target | None:
    """A filter's target ID, parsed at the Store's door (its parts take the Target), or None."""
    return None if arch is None else Target.parse(arch)

class Store:
    """A cache store. Open with :meth:`Store.open`; use as a context manager or call close()."""

    def __init__(self, url: str, engine, *, level: int, max_bytes: int | None, touch_interval: float,
                 readonly: bool = False):
        self.handle = db.Handle(url, engine, readonly)
        self.max_bytes = max_bytes
        self.blobs = Blobs(self.handle, level)
        self.artifacts = Artifacts(self.handle, self.blobs, touch_interval=touch_interval)
        self.plans = Plans(self.handle)
        self.maintenance = Maintenance(self.handle, self.blobs, self.artifacts)
        self.selection = SelectionView(self.handle)
        self.triton = TritonEntries(self.handle, self.blobs)

    @classmethod
    def open(
        cls,
        url: str | os.PathLike | None = None,
        *,
        level: int = codec.DEFAULT_LEVEL,
        max_bytes: int | None = None,
        touch_interval: float = 60.0,
        create: bool = True,
        readonly: bool = False,
    ) -> Store:
        """Open (creating or upgrading through Alembic) the store at ``url``.

        ``url`` None -> ``$ROCKE_AOT_CACHE`` -> ``$ROCKE_AOT_HOME/cache.sqlite`` -> the user
        cache dir. ``max_bytes`` (or ``$ROCKE_AOT_CACHE_MAX_BYTES``) caps the stored bytes:
        puts beyond it evict least-recently-read artifacts.

        ``readonly``: no write ever (a read-only SQLite file or PostgreSQL role works; read
        times are not recorded; every write method raises ReadOnlyError). The schema must
        already be at head: a read-only store is never migrated.
        """
        resolved = db.resolve_url(url)
        if max_bytes is None:
            max_bytes = settings.integer(settings.CACHE_MAX_BYTES)
        if max_bytes is not None and (not is_int(max_bytes) or max_bytes < 0):
            raise CacheError(f"max_bytes must be a non-negative int, got {max_bytes!r}")
        if readonly and resolved.startswith("sqlite"):
            path = resolved.split(":///", 1)[1]
            if not os.path.isfile(path):
                raise NotFoundError(f"no cache at {path}: a read-only store is never created (build one first)")
        engine = db.make_engine(resolved, readonly=readonly)
        try:
            db.ensure_schema(engine, resolved, create=create and not readonly)
        except Exception:
            engine.dispose()
            raise
        return cls(resolved, engine, level=level, max_bytes=max_bytes, touch_interval=touch_interval,
                   readonly=readonly)

    def close(self) -> None:
        try:
            self.flush_reads()
        finally:
            self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return str(self.handle)

    @property
    def url(self) -> str:
        return self.handle.url

    @property
    def engine(self):
        return self.handle.engine

    @property
    def readonly(self) -> bool:
        return self.handle.readonly

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    @property
    def level(self) -> int:
        return self.blobs.level

    @property
    def touch_interval(self) -> float:
        return self.artifacts.touch_interval

    @property
    def malformed_rows(self) -> int:
        """Rows candidates() skipped (each logged)."""
        return self.selection.malformed_rows

    # ---- artifacts (cache/artifacts.py) --------------------------------------------------

    def put(self, inputs: KeyInputs, code_object: bytes, *, ir_sha256: str, metadata: Mapping[str, Any],
            provenance: Mapping[str, Any], replace: bool = False, ptx: str | None = None,
            triton_files: Mapping[str, bytes] | None = None, entered: Entry = BUILD) -> Artifact:
        """Publish a code object under the key of ``inputs``; blob and row in one transaction.

        ``entered`` records how it came (cache/provenance.py): the builder's puts are builds (the
        default); a service publish, a client's fetch say so (Entry.published / Entry.fetched),
        and only a build's row (or one a build verified) is ever signed or reused as a code object.

        Idempotent: the same inputs and bytes again return the stored artifact. The same
        inputs with *different* bytes are refused (the key misses an input, or the build is
        not deterministic) unless ``replace`` (a forced rebuild). A success replaces a
        cached failure of the same key. The code object is also kept under its own key
        (keys.code_object_key: what the compiler consumed), with ``ptx`` for a cubin, so a
        later plan whose IR is the same reuses it without compiling. A Triton build's
        ``triton_files`` become its Triton cache entry in the same transaction. Past
        ``max_bytes``, the least-recently-read artifacts are evicted.
        """
        art = self.artifacts.put(inputs, code_object, ir_sha256=ir_sha256, metadata=metadata,
                                 provenance=provenance, replace=replace, ptx=ptx, triton_files=triton_files,
                                 entered=entered)
        if self.max_bytes is not None and self.stored_bytes() > self.max_bytes:
            self.evict(self.max_bytes)
        return art

    def put_failure(self, inputs: KeyInputs, error: str, log: str = "", *, ir_sha256: str | None = None) -> Hit:
        """Record that building ``inputs`` failed, so builds skip it unless forced.

        A key that already holds an artifact keeps it (a good binary is never shadowed by a
        later flaky failure): the returned Hit then has kind 'artifact'. ``ir_sha256`` (the
        compiler refused this IR, rather than the lowering failing): the refusal is kept under
        the code-object key too, so the same IR under another recipe is not compiled again.
        """
        return self.artifacts.put_failure(inputs, error, log, ir_sha256=ir_sha256)

    def get(self, key: str) -> Artifact:
        """The artifact with verified ``code_object``; NotFoundError / IntegrityError."""
        return self.artifacts.get(key)

    def record(self, key: str) -> Artifact:
        """The artifact's record without its bytes and without a read-time write (the service's
        kernel lookup); the same checks as get(): NotFoundError, IntegrityError (blob missing)."""
        return self.artifacts.record(key)

    def get_failure(self, key: str) -> Failure:
        return self.artifacts.get_failure(key)

    def flush_reads(self) -> int:
        """Write the pending read times in one transaction (eviction order); close() calls it."""
        return self.artifacts.flush_reads()

    def lookup_many(self, keys: Iterable[str]) -> dict[str, Hit]:
        """For each present key: artifact or cached failure. Bulk, chunked; no blob is read."""
        return self.artifacts.lookup_many(keys)

    def find(self, arch: str | None = None, lane: str | None = None, family: str | None = None,
             profile: str | None = None, *, status: str = "ok", served_only: bool = False,
             key_prefix: str | None = None, after: str | None = None,
             limit: int | None = None) -> list[Artifact | Failure]:
        """The one listing: artifacts (``status='ok'``), failures ('failed') or both ('all') in
        key order, no blobs. ``served_only``: only the rows select serves. Keyset paging:
        ``after`` the last key of the previous page, ``limit`` rows at most; a page costs the
        same at any depth, and a concurrent put never shifts one."""
        return self.artifacts.find(_target(arch), lane, family, profile, status=status, served_only=served_only,
                                   key_prefix=key_prefix, after=after, limit=limit)

    def unverified(self, keys: Iterable[str] | None = None) -> dict[str, str]:
        """{key: how it entered} of the artifacts among ``keys`` (None: all) that no build here made
        or verified: imported, published, fetched, or older than provenance (cache/provenance.py).
        A build recompiles these before it counts them; a release never signs them."""
        return self.artifacts.unverified(keys)

    def resolve_key(self, prefix: str) -> str:
        """The one key starting with ``prefix`` (for the CLI); NotFoundError or SpecError."""
        return self.artifacts.resolve_key(prefix)

    # ---- Triton cache entries (cache/triton_entries.py) ----------------------------------

    def put_triton_entry(self, key: str, files: Mapping[str, bytes], *, triton_version: str, target: str,
                         artifact_key: str | None = None, source: str = "host", publisher: str | None = None) -> None:
        """Store a Triton cache entry (a GPU host's publish: every file it put under ``key``, its
        tenant's alone: ``publisher`` is the token's id; refused where a build's entry holds the key)."""
        self.triton.put(key, files, triton_version=triton_version, target=target, artifact_key=artifact_key,
                        source=source, publisher=publisher)

    def triton_entry(self, key: str, publisher: str | None = None) -> dict[str, EntryFile]:
        """{filename: EntryFile} of the build's Triton entry under ``key``; where none, ``publisher``'s
        own (empty when there is none)."""
        return self.triton.lookup(key, publisher)

    # ---- blobs (cache/blobs.py) ----------------------------------------------------------

    def get_blob(self, sha256: str) -> bytes:
        """The verified raw bytes of one blob by its sha256 (immutable content URLs)."""
        return self.blobs.get(sha256)

    def blob_frame(self, sha256: str) -> tuple[bytes, bytes | None]:
        """(verified raw bytes, the stored zstd frame as is, or None for a dictionary frame)."""
        return self.blobs.frame(sha256)

    def has_blob(self, sha256: str) -> bool:
        return self.blobs.exists(sha256)

    def stored_bytes(self) -> int:
        return self.blobs.stored_bytes()

    def train_dictionaries(self, **kw: Any) -> list[dict[str, Any]]:
        """Train a zstd dictionary per (arch, family) where it pays and recompress that pair's
        blobs with it (see cache/blobs.py; measured in docs/cache.md). New puts of the pair use it."""
        return self.blobs.train(**kw)

    # ---- plans: generations, code objects, claims (cache/plans.py) ------------------------

    def current_generation(self, arch: str, lane: str, family: str) -> str | None:
        """The newest complete generation of (arch, lane, family), or None."""
        return self.plans.current_generation(Target.parse(arch), lane, family)

    def generations(self, arch: str | None = None, lane: str | None = None,
                    family: str | None = None) -> list[Generation]:
        """Every generation with its artifact, failure and served counts, and whether it is the
        newest complete one of its (arch, lane, family)."""
        return self.plans.generations(_target(arch), lane, family)

    def complete_generation(self, generation: str) -> None:
        """Mark ``generation`` complete (a build that planned into it ran to the end): it then
        serves every spec it holds ahead of older generations. NotFoundError if unknown."""
        self.plans.complete_generation(generation)

    def lookup_code_objects(self, keys: Iterable[str]) -> dict[str, CodeHit]:
        """For each present code-object key: its blob (and format, PTX) or the compiler's refusal."""
        return self.plans.lookup_code_objects(keys)

    @staticmethod
    def claim_holder(host: str) -> str:
        """A holder name for this process on ``host``: claims of a holder gone from this host are
        free at once (cache/claims.py)."""
        return claims.new_holder(host)

    def claim(self, keys: Iterable[str], holder: str, lease_s: float, host: str | None = None) -> list[str]:
        """Lease ``keys`` for ``holder`` for ``lease_s`` seconds where no other holder has a live
        lease (cache/claims.py; with ``host``, a claimant gone from this host has none); the keys
        now ours."""
        return self.plans.claim(keys, holder, lease_s, host)

    def renew_claims(self, keys: Iterable[str], holder: str, lease_s: float) -> int:
        return self.plans.renew_claims(keys, holder, lease_s)

    def release_claims(self, keys: Iterable[str], holder: str) -> int:
        return self.plans.release_claims(keys, holder)

    def claimed_by_others(self, keys: Iterable[str], holder: str, host: str | None = None) -> set[str]:
        return self.plans.claimed_by_others(keys, holder, host)

    # ---- maintenance (cache/maintenance.py) ----------------------------------------------

    def stats(self) -> StoreStats:
        return self.maintenance.stats(max_bytes=self.max_bytes)

    def verify(self, batch: int = 256) -> VerifyReport:
        """Decode every blob (decompress + size + sha256), recompute every key, check every record
        against the record schema and count the artifacts per origin."""
        return self.maintenance.verify(batch)

    def gc(self) -> GcReport:
        """Delete blobs that no artifact references."""
        return self.maintenance.gc()

    def purge(self, origin: str) -> GcReport:
        """Drop every artifact whose provenance says a client fetched it from ``origin`` (a server
        URL; service/client.py records it), hand each served spec to the next-best generation's
        row, then delete the blobs nothing references any more."""
        return self.maintenance.purge(origin)

    def gc_generations(self, keep: int = 0) -> GcReport:
        """Per (arch, lane, family), keep the best-ranked generation and ``keep`` more whole; of
        the older ones drop every row nothing serves (a served row is never dropped), the
        generations left empty, the code objects and blobs nothing references any more."""
        report = self.maintenance.gc_generations(keep)
        self.selection.forget()
        return report

    def evict(self, max_bytes: int) -> GcReport:
        """Drop least-recently-read artifacts until the stored blobs fit in ``max_bytes``.

        Failures hold no blob and are not evicted. Blobs shared by several artifacts are
        freed only when their last artifact goes.
        """
        return self.maintenance.evict(max_bytes)

    # ---- the selection read model (cache/selection_view.py) ------------------------------

    def candidates(self, family: str, device: Target | str, lanes: Iterable[str] | None = None, *,
                   compatible_only: bool = True, current_only: bool = False) -> tuple[Candidate, ...]:
        """The stored artifacts of ``family`` that a ``device`` target ID may run, as Candidates.

        One query over artifacts; each row's ``current`` is its served flag (the row of its
        spec that the best-ranked generation built: cache/generations.py). ``compatible_only``
        False also returns the processor's other target IDs (selection then rejects them,
        naming why); ``current_only`` leaves rows that are not served out in SQL. Resources
        come from the stored metadata's "code_object" section (the work-group size from its
        "launch" block); rows are immutable per (key, blob), so each is parsed once per Store.
        """
        return self.selection.candidates(family, Target.parse(device), lanes, compatible_only=compatible_only,
                                         current_only=current_only)

    # ---- bundles (cache/bundle.py) -------------------------------------------------------

    def export(self, path: str | os.PathLike, **filters: Any) -> dict[str, Any]:
        """Write the (filtered: arch=, lane=, family=, failures=) store to one bundle file."""
        return bundle.export_bundle(self.engine, self.blobs, path, target=_target(filters.pop("arch", None)), **filters)

    def import_(self, path: str | os.PathLike, *, check=None, failures: bool = False,
                check_entry=None) -> dict[str, Any]:
        """Import a bundle, all or nothing (cache/bundle.py): ``check(code, arch)`` validates
        each code object and returns its resources (the CLI passes aot's validation; without
        it only the record schema and the hashes are checked); ``check_entry(entry)`` checks each
        artifact entry (the CLI passes variants/contract.py check_entry: spec admission and the
        launch contract against the family); ``failures`` imports its failure records too. The
        rows are recorded as imported (cache/provenance.py): a release signs none until a build
        here verifies it."""
        self.handle.writable("import")
        out = bundle.import_bundle(self.engine, self.blobs, path, check=check, failures=failures, check_entry=check_entry)
        self.plans.adopt_imported()  # imported rows join the generation of their inputs
        return out
