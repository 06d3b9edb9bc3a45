"""Triton cache entries: the files a GPU host's Triton looks up, by Triton's own cache key.

Revision ID: 0008_triton_entries
Revises: 0007_measurements
Create Date: 2026-12-03

One row per (triton_key, filename): the base32 key Triton's cache manager is constructed with,
and a file name of that entry (``<kernel>.json``, ``<kernel>.hsaco`` / ``.cubin``, the group file
``__grp__<kernel>.json``, an autotuner's ``<kernel>.autotune.json``). The bytes are a blob
(foreign key: a blob an entry holds is never collected). ``artifact_key`` names the artifact a
build stored with the entry (NULL: a GPU host published it, compiled by its own Triton);
``triton_version`` and ``target`` ("hip:gfx942:64", "cuda:90:32"; "" for a file of no target)
are what a host checks before it uses one. Nothing else changes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_triton_entries"
down_revision = "0007_measurements"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "triton_entries",
        sa.Column("triton_key", sa.String(128), primary_key=True),
        sa.Column("filename", sa.String(255), primary_key=True),
        sa.Column("blob_sha256", sa.String(64), sa.ForeignKey("blobs.sha256", name="fk_triton_entries_blob"),
                  nullable=False),
        sa.Column("triton_version", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("artifact_key", sa.String(64), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.CheckConstraint("source IN ('build', 'host')", name="ck_triton_entries_source"),
    )
    op.create_index("ix_triton_entries_blob", "triton_entries", ["blob_sha256"])
    op.create_index("ix_triton_entries_artifact", "triton_entries", ["artifact_key"])
    op.execute("UPDATE rocke_meta SET value = '8' WHERE name = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_triton_entries_artifact", table_name="triton_entries")
    op.drop_index("ix_triton_entries_blob", table_name="triton_entries")
    op.drop_table("triton_entries")
    op.execute("UPDATE rocke_meta SET value = '7' WHERE name = 'schema_version'")
