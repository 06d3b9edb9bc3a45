"""Initial cache schema: blobs, artifacts (successes and cached failures), rocke_meta.

Revision ID: 0001
Revises:
Create Date: 2026-12-02

Written out column by column (not ``metadata.create_all``) so this revision stays what
it was when models.py changes later; tests/test_cache_schema.py checks that the schema
it creates matches models.py.
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rocke_meta",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(256), nullable=False),
    )
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("stored_size", sa.Integer, nullable=False),
        sa.Column("codec", sa.String(32), nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "artifacts",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("status", sa.String(8), nullable=False),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("lane", sa.String(32), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("family", sa.String(128), nullable=False),
        sa.Column("spec_json", sa.Text, nullable=False),
        sa.Column("lowering_digest", sa.String(128), nullable=False),
        sa.Column("toolchain_json", sa.Text, nullable=False),
        sa.Column("blob_sha256", sa.String(64), sa.ForeignKey("blobs.sha256", name="fk_artifacts_blob"), nullable=True),
        sa.Column("ir_sha256", sa.String(64), nullable=True),
        sa.Column("metadata_json", sa.Text, nullable=False),
        sa.Column("provenance_json", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("log", sa.Text, nullable=True),
        sa.Column("built_at", sa.Float, nullable=False),
        sa.Column("last_read_at", sa.Float, nullable=True),
        sa.CheckConstraint(
            "(status = 'ok' AND blob_sha256 IS NOT NULL AND error IS NULL)"
            " OR (status = 'failed' AND blob_sha256 IS NULL AND error IS NOT NULL)",
            name="ck_artifacts_status_shape",
        ),
    )
    op.create_index("ix_artifacts_arch_lane_family", "artifacts", ["arch", "lane", "family"])
    op.create_index("ix_artifacts_blob", "artifacts", ["blob_sha256"])
    op.create_index("ix_artifacts_last_read", "artifacts", ["last_read_at"])
    op.bulk_insert(
        sa.table("rocke_meta", sa.column("name", sa.String), sa.column("value", sa.String)),
        [{"name": "schema_version", "value": "1"}],
    )


def downgrade() -> None:
    op.drop_table("artifacts")
    op.drop_table("blobs")
    op.drop_table("rocke_meta")
