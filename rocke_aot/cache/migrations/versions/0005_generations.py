"""Build generations and a current-generation ref per (arch, lane).

Revision ID: 0003_generations
Revises: 0003
Create Date: 2026-12-02

A generation is the set of artifacts one build produced for (arch, lane): one recipe
digest and one toolchain identity; its id hashes exactly those (cache/generations.py).
An index on (family, arch, lane) serves selection's one query. ``refs`` holds the generation
each (arch, lane) serves; selection serves only it, so an old lowering is never mixed with a
new one. Existing rows are backfilled: each gets its
generation, and each (arch, lane) ref points at the generation of its newest artifact.
"""

import hashlib

import sqlalchemy as sa
from alembic import op

revision = "0003_generations"
down_revision = "0003"
branch_labels = None
depends_on = None


def generation_id(arch: str, lane: str, recipe_digest: str, toolchain_json: str) -> str:
    """The v1 generation id (per arch and lane), frozen here: cache/generations.py moved on to v2."""
    h = hashlib.sha256(b"rocke-aot/generation/v1\n")
    for part in (arch, lane, recipe_digest, toolchain_json):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def upgrade() -> None:
    op.create_table(
        "generations",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("arch", sa.String(128), nullable=False),
        sa.Column("lane", sa.String(32), nullable=False),
        sa.Column("recipe_digest", sa.String(128), nullable=False),
        sa.Column("toolchain_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("retired_at", sa.Float, nullable=True),
    )
    op.create_index("ix_generations_arch_lane", "generations", ["arch", "lane"])
    op.create_table(
        "refs",
        sa.Column("arch", sa.String(128), primary_key=True),
        sa.Column("lane", sa.String(32), primary_key=True),
        sa.Column("generation", sa.String(32), nullable=False),
        sa.Column("moved_at", sa.Float, nullable=False),
    )
    op.add_column("artifacts", sa.Column("generation", sa.String(32), nullable=True))
    op.create_index("ix_artifacts_generation", "artifacts", ["generation"])
    op.create_index("ix_artifacts_family_arch_lane", "artifacts", ["family", "arch", "lane"])
    _backfill(op.get_bind())
    op.execute("UPDATE rocke_meta SET value = '4' WHERE name = 'schema_version'")


def _backfill(conn) -> None:
    groups = conn.execute(sa.text(
        "SELECT arch, lane, lowering_digest, toolchain_json, MIN(built_at), MAX(built_at) FROM artifacts "
        "GROUP BY arch, lane, lowering_digest, toolchain_json")).all()
    newest: dict[tuple[str, str], tuple[float, str]] = {}
    for arch, lane, digest, tc_json, first, last in groups:
        gid = generation_id(arch, lane, digest, tc_json)
        conn.execute(sa.text("INSERT INTO generations (id, arch, lane, recipe_digest, toolchain_json, created_at) "
                             "VALUES (:i, :a, :l, :d, :t, :c)"),
                     {"i": gid, "a": arch, "l": lane, "d": digest, "t": tc_json, "c": first})
        conn.execute(sa.text("UPDATE artifacts SET generation = :i WHERE arch = :a AND lane = :l "
                             "AND lowering_digest = :d AND toolchain_json = :t"),
                     {"i": gid, "a": arch, "l": lane, "d": digest, "t": tc_json})
        if (arch, lane) not in newest or last > newest[(arch, lane)][0]:
            newest[(arch, lane)] = (last, gid)
    for (arch, lane), (when, gid) in sorted(newest.items()):
        conn.execute(sa.text("INSERT INTO refs (arch, lane, generation, moved_at) VALUES (:a, :l, :g, :m)"),
                     {"a": arch, "l": lane, "g": gid, "m": when})


def downgrade() -> None:
    op.drop_index("ix_artifacts_family_arch_lane", "artifacts")
    op.drop_index("ix_artifacts_generation", "artifacts")
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("generation")
    op.drop_table("refs")
    op.drop_index("ix_generations_arch_lane", "generations")
    op.drop_table("generations")
    op.execute("UPDATE rocke_meta SET value = '3' WHERE name = 'schema_version'")
