"""Measured kernel times: ``bench --run-from-cache`` results kept beside the artifacts they timed.

Revision ID: 0007_measurements
Revises: 0006_ir_keys
Create Date: 2026-12-03

One row per (artifact key, its generation, device target ID, problem, source): the device's
name, the family, the problem's canonical JSON and its shape class (variants/measured.py),
the median time and how many repeats it is the median of, when and from where it was
recorded. No foreign key to ``artifacts``: a gc of an artifact must never be blocked by its
timings; a row whose (key, generation) no artifact holds any more is never read
(cache/measurements.py joins on both) and ``prune`` deletes it. Nothing else changes.
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_measurements"
down_revision = "0006_ir_keys"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("generation", sa.String(32), nullable=False),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("processor", sa.String(64), nullable=False),
        sa.Column("device", sa.Text, nullable=False),
        sa.Column("family", sa.String(128), nullable=False),
        sa.Column("problem_json", sa.Text, nullable=False),
        sa.Column("shape_class", sa.Text, nullable=False),
        sa.Column("median_ms", sa.Float, nullable=False),
        sa.Column("repeats", sa.Integer, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.CheckConstraint("median_ms > 0", name="ck_measurements_median"),
        sa.CheckConstraint("repeats >= 1", name="ck_measurements_repeats"),
        sa.UniqueConstraint("key", "generation", "arch", "problem_json", "source", name="uq_measurements_row"),
    )
    op.create_index("ix_measurements_family_processor", "measurements", ["family", "processor"])
    op.execute("UPDATE rocke_meta SET value = '7' WHERE name = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_measurements_family_processor", table_name="measurements")
    op.drop_table("measurements")
    op.execute("UPDATE rocke_meta SET value = '6' WHERE name = 'schema_version'")
