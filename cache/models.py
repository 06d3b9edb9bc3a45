"""The cache schema (SQLAlchemy Core tables), shared by the store and the Alembic migrations.

    blobs                          artifacts                                 rocke_meta
    ─────                          ─────────                                 ──────────
    sha256 (PK, of raw bytes) ◄─── blob_sha256 (FK, NULL for a failure)      name (PK)
    size      (raw bytes)          key (PK)  status 'ok' | 'failed'          value
    stored_size, codec, data       arch lane profile family spec_json        ("schema_version")
    created_at                     recipe_digest toolchain_json options_json generation
    dict_id ───┐                   ir_sha256 metadata_json provenance_json
               │                   error log built_at last_read_at
               └──> zstd_dicts (id, arch, family, sha256, data): a trained dictionary

    generations (id, arch, lane, recipe_digest, toolchain_json, created_at, retired_at)
    refs ((arch, lane) PK -> generation): the current generation each (arch, lane) serves

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
    cast,
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
)

SCHEMA_VERSION = 5
# Alembic revision ids, oldest first; the last one is the head this code runs on.
REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0003_generations", "0002_recipe_options")
HEAD_REVISION = REVISIONS[-1]
SCHEMA_FOR_REVISION = {"0001": 1, "0002": 2, "0003": 3, "0003_generations": 4, "0002_recipe_options": 5}

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
)

# A generation: the artifacts one build produced for (arch, lane) with one recipe digest and
# toolchain identity (rev 0003_generations). ``id`` is a hash of exactly those four.
generations = Table(
    "generations",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("arch", String(128), nullable=False),
    Column("lane", String(32), nullable=False),
    Column("recipe_digest", String(128), nullable=False),
    Column("toolchain_json", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("retired_at", Float, nullable=True),  # when a ref last moved away from it
    Index("ix_generations_arch_lane", "arch", "lane"),
)

# The current generation per (arch, lane), moved by a successful build (huggingface_hub's
# refs are the model: a name that points at one immutable revision).
refs = Table(
    "refs",
    metadata,
    Column("arch", String(128), primary_key=True),
    Column("lane", String(32), primary_key=True),
    Column("generation", String(32), nullable=False),
    Column("moved_at", Float, nullable=False),
)

# What every read of blob bytes selects. The CAST keeps a damaged row readable: on SQLite a
# hand edit such as ``data || data`` turns the value into TEXT, which the driver would fail
# to decode as UTF-8 before the sha256 check ever ran; cast back to bytes, it is simply a
# blob whose hash does not match, and is reported as corrupt.
blob_data = cast(blobs.c.data, LargeBinary).label("data")
