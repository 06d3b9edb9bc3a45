"""The cache schema (SQLAlchemy Core tables), shared by the store and the Alembic migrations.

    blobs                          artifacts                                 rocke_meta
    ─────                          ─────────                                 ──────────
    sha256 (PK, of raw bytes) ◄─── blob_sha256 (FK, NULL for a failure)      name (PK)
    size      (raw bytes)          key (PK)  status 'ok' | 'failed'          value
    stored_size, codec, data       arch lane profile family spec_json        ("schema_version")
    created_at                     recipe_digest toolchain_json options_json generation
    dict_id ───┐                   ir_sha256 metadata_json provenance_json
               │                   error log built_at last_read_at
               │                   entered entered_json verified_at (cache/provenance.py)
               └──> zstd_dicts (id, arch, family, sha256, data): a trained dictionary

                                   code_key ──> code_objects (key = what the compiler consumed:
                                   served         arch, profile, ir_sha256, toolchain, options;
                                                  blob_sha256, info_json, status, error)
    generations (id, arch, lane, family, recipe_digest, toolchain_json, created_at, completed_at)
    claims (key PK, holder, claimed_at, expires_at): build leases

``artifacts`` is the plan index: its key (keys.artifact_key) needs no lowering, its rows carry
the launch contract and are what select, the listing and the service serve (``served``: one
row per (arch, lane, family, spec), cache/generations.py); ``code_objects`` is keyed by the
compiler's input, so rows of several recipes (or specs) with equal IR share one compile.

One ``artifacts`` table holds both successes and cached failures (``status``), so the
builder's no-op path is a single indexed ``key IN (...)`` query over one table. A
CHECK constraint keeps the two shapes apart: an 'ok' row has a blob, a 'failed' row
has an error and no blob. The foreign key (no cascade) means a blob an artifact still
references can never be deleted, on either backend.

Times are float seconds since the epoch: they sort the same on SQLite and PostgreSQL
and least-recently-read eviction only needs their order.

The schema is created and upgraded only through Alembic (``cache/migrations``); the
revision ids this code knows are listed in ``REVISIONS`` (a test checks they match the
migration scripts) and ``SCHEMA_VERSION`` is what the newest one writes to
``rocke_meta``.
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    cast,
)

SCHEMA_VERSION = 10
# Alembic revision ids, oldest first; the last one is the head this code runs on.
REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0003_generations", "0002_recipe_options", "0006_ir_keys",
                             "0007_measurements", "0008_triton_entries", "0009_target_identity", "0010_provenance")
HEAD_REVISION = REVISIONS[-1]
SCHEMA_FOR_REVISION = {"0001": 1, "0002": 2, "0003": 3, "0003_generations": 4, "0002_recipe_options": 5,
                       "0006_ir_keys": 6, "0007_measurements": 7, "0008_triton_entries": 8,
                       "0009_target_identity": 9, "0010_provenance": 10}

metadata = MetaData()

meta = Table(
    "rocke_meta",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(256), nullable=False),
)

blobs = Table(
    "blobs",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("size", Integer, nullable=False),  # raw code-object bytes
    Column("stored_size", Integer, nullable=False),  # compressed bytes as stored
    Column("codec", String(32), nullable=False),  # "zstd" | "zstd-dict"
    Column("data", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("dict_id", Integer, nullable=True),  # zstd_dicts.id for "zstd-dict" (rev 0002)
)

# Trained zstd dictionaries, one current per (arch, family) (the newest id); never deleted.
zstd_dicts = Table(
    "zstd_dicts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("arch", String(128), nullable=False),
    Column("family", String(128), nullable=False),
    Column("sha256", String(64), nullable=False, unique=True),
    Column("size", Integer, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_zstd_dicts_arch_family", "arch", "family"),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("status", String(8), nullable=False),
    Column("arch", String(128), nullable=False),
    Column("lane", String(32), nullable=False),
    Column("profile", String(32), nullable=False),
    Column("family", String(128), nullable=False),
    Column("spec_json", Text, nullable=False),
    Column("recipe_digest", String(128), nullable=False),  # was lowering_digest (rev 0002_recipe_options)
    Column("toolchain_json", Text, nullable=False),
    Column("options_json", Text, nullable=False),  # compile options (rev 0002_recipe_options)
    Column("blob_sha256", String(64), ForeignKey("blobs.sha256", name="fk_artifacts_blob"), nullable=True),
    Column("ir_sha256", String(64), nullable=True),
    Column("metadata_json", Text, nullable=False),
    Column("provenance_json", Text, nullable=False),
    Column("error", Text, nullable=True),
    Column("log", Text, nullable=True),
    Column("built_at", Float, nullable=False),
    Column("last_read_at", Float, nullable=True),
    # The build generation it belongs to (cache/generations.py; rev 0003_generations).
    Column("generation", String(32), nullable=True),
    # The code object's own key (keys.code_object_key: what the compiler consumed; rev 0006_ir_keys),
    # NULL for a failure that never reached the compiler.
    Column("code_key", String(64), nullable=True),
    # 1 for the one 'ok' row per (arch, lane, family, spec) that select and the listing serve:
    # the one of the best-ranked generation (cache/generations.py; rev 0006_ir_keys).
    Column("served", Integer, nullable=False, server_default="0"),
    # How the row entered the store, by what, and when a build here verified it (rev 0010_provenance;
    # cache/provenance.py): 'build' | 'import' | 'publish' | 'fetch' | 'legacy'.
    Column("entered", String(16), nullable=False, server_default="legacy"),
    Column("entered_json", Text, nullable=False, server_default="{}"),
    Column("verified_at", Float, nullable=True),
    CheckConstraint(
        "(status = 'ok' AND blob_sha256 IS NOT NULL AND error IS NULL)"
        " OR (status = 'failed' AND blob_sha256 IS NULL AND error IS NOT NULL)",
        name="ck_artifacts_status_shape",
    ),
    Index("ix_artifacts_arch_lane_family", "arch", "lane", "family"),
    Index("ix_artifacts_blob", "blob_sha256"),
    Index("ix_artifacts_last_read", "last_read_at"),
    # Covering index of lookup_many (rev 0003): answered without touching the table.
    Index("ix_artifacts_lookup", "key", "status", "blob_sha256"),
    Index("ix_artifacts_generation", "generation"),
    # Store.candidates: one family on one processor's target IDs (rev 0003_generations).
    Index("ix_artifacts_family_arch_lane", "family", "arch", "lane"),
    # Which row of one spec is served: every generation's row of it (rev 0006_ir_keys).
    Index("ix_artifacts_spec", "arch", "lane", "family", "spec_json"),
    Index("ix_artifacts_code_key", "code_key"),
    Index("ix_artifacts_entered", "entered"),
)

# Code objects by what the compiler consumed (rev 0006_ir_keys): the key hashes (target ID,
# emission profile, the IR's sha256, toolchain identity, compile options), so equal compiler
# inputs are compiled once whatever Python code produced the IR. ``info_json`` keeps what the
# builder needs to reuse one without compiling: the format and, for a cubin, its PTX (the
# launch contract is checked against it). A 'failed' row records that the compiler refused it.
code_objects = Table(
    "code_objects",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("status", String(8), nullable=False),
    Column("arch", String(128), nullable=False),
    Column("profile", String(32), nullable=False),
    Column("ir_sha256", String(64), nullable=False),
    Column("toolchain_json", Text, nullable=False),
    Column("options_json", Text, nullable=False),
    Column("blob_sha256", String(64), ForeignKey("blobs.sha256", name="fk_code_objects_blob"), nullable=True),
    Column("info_json", Text, nullable=False),
    Column("error", Text, nullable=True),
    Column("built_at", Float, nullable=False),
    # 'build': compiled by a build of this store, the only kind the builder reuses (rev 0010_provenance)
    Column("entered", String(16), nullable=False, server_default="legacy"),
    CheckConstraint(
        "(status = 'ok' AND blob_sha256 IS NOT NULL AND error IS NULL)"
        " OR (status = 'failed' AND blob_sha256 IS NULL AND error IS NOT NULL)",
        name="ck_code_objects_status_shape",
    ),
    Index("ix_code_objects_blob", "blob_sha256"),
)

# Build claims (rev 0006_ir_keys): a builder holds a key while it compiles it; the lease ends
# at ``expires_at`` unless renewed, so a builder killed mid-compile frees its keys by itself.
claims = Table(
    "claims",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("holder", String(128), nullable=False),
    Column("claimed_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)

# A generation: the rows builds made for one (arch, lane, family) with one recipe digest and
# toolchain identity (rev 0006_ir_keys added the family; ``id`` hashes exactly those five).
# ``completed_at``: when a build that planned into it last ran to the end (NULL: never).
generations = Table(
    "generations",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("arch", String(128), nullable=False),
    Column("lane", String(32), nullable=False),
    Column("recipe_digest", String(128), nullable=False),
    Column("toolchain_json", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("retired_at", Float, nullable=True),  # unused since 0006 (kept: old stores have it)
    Column("family", String(128), nullable=False),
    Column("completed_at", Float, nullable=True),
    Index("ix_generations_arch_lane", "arch", "lane"),
)

# Measured kernel times (rev 0007_measurements; cache/measurements.py reads and writes them).
# No foreign key to artifacts: a gc never waits on timings; reads join on (key, generation).
measurements = Table(
    "measurements",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(64), nullable=False),
    Column("generation", String(32), nullable=False),
    Column("arch", String(128), nullable=False),
    Column("processor", String(64), nullable=False),
    Column("device", Text, nullable=False),
    Column("family", String(128), nullable=False),
    Column("problem_json", Text, nullable=False),
    Column("shape_class", Text, nullable=False),
    Column("median_ms", Float, nullable=False),
    Column("repeats", Integer, nullable=False),
    Column("recorded_at", Float, nullable=False),
    Column("source", Text, nullable=False),
    CheckConstraint("median_ms > 0", name="ck_measurements_median"),
    CheckConstraint("repeats >= 1", name="ck_measurements_repeats"),
    UniqueConstraint("key", "generation", "arch", "problem_json", "source", name="uq_measurements_row"),
    Index("ix_measurements_family_processor", "family", "processor"),
)

# Triton cache entries (rev 0008_triton_entries; cache/triton_entries.py): the files a GPU host's
# Triton looks up under its own cache key, each a blob; artifact_key NULL = published by a host.
triton_entries = Table(
    "triton_entries",
    metadata,
    Column("triton_key", String(128), primary_key=True),
    Column("filename", String(255), primary_key=True),
    Column("blob_sha256", String(64), ForeignKey("blobs.sha256", name="fk_triton_entries_blob"), nullable=False),
    Column("triton_version", String(64), nullable=False),
    Column("target", String(128), nullable=False),
    Column("artifact_key", String(64), nullable=True),
    Column("source", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    CheckConstraint("source IN ('build', 'host')", name="ck_triton_entries_source"),
    Index("ix_triton_entries_blob", "blob_sha256"),
    Index("ix_triton_entries_artifact", "artifact_key"),
)

# Triton entries a GPU host published (rev 0010_provenance; cache/triton_entries.py): one tenant's
# alone, by the publish token's id (cache/provenance.py token_id). Looked up only by the same
# publisher, and never where a build's entry holds the key (a host file never shadows a prebuilt one).
triton_host_entries = Table(
    "triton_host_entries",
    metadata,
    Column("triton_key", String(128), primary_key=True),
    Column("publisher", String(32), primary_key=True),
    Column("filename", String(255), primary_key=True),
    Column("blob_sha256", String(64), ForeignKey("blobs.sha256", name="fk_triton_host_entries_blob"), nullable=False),
    Column("triton_version", String(64), nullable=False),
    Column("target", String(128), nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_triton_host_entries_blob", "blob_sha256"),
)

# What every read of blob bytes selects. The CAST keeps a damaged row readable: on SQLite a
# hand edit such as ``data || data`` turns the value into TEXT, which the driver would fail
# to decode as UTF-8 before the sha256 check ever ran; cast back to bytes, it is simply a
# blob whose hash does not match, and is reported as corrupt.
blob_data = cast(blobs.c.data, LargeBinary).label("data")
