"""Trained zstd dictionaries per (arch, family); blobs may be compressed with one.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02

bench/bench_cache.py measured small code objects compressing 2.5-3x better with a
dictionary trained on their (arch, family) siblings (docs/cache.md), so blobs gain a
``dict_id``. No foreign key on it: adding one to an existing SQLite table means
rebuilding ``blobs``, which the artifacts' foreign key forbids; the store fails closed
instead (a blob whose dictionary is missing is an IntegrityError), and dictionaries are
never deleted.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "zstd_dicts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("family", sa.String(128), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, unique=True),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("samples", sa.Integer, nullable=False),
        sa.Column("data", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_zstd_dicts_arch_family", "zstd_dicts", ["arch", "family"])
    op.add_column("blobs", sa.Column("dict_id", sa.Integer, nullable=True))
    op.execute("UPDATE rocke_meta SET value = '2' WHERE name = 'schema_version'")


def downgrade() -> None:
    # Blobs compressed with a dictionary would be unreadable without it.
    raise NotImplementedError("downgrading past 0002 would orphan dictionary-compressed blobs")
