"""How each artifact entered the store: built here, imported from a bundle, published, fetched.

Revision ID: 0010_provenance
Revises: 0009_target_identity
Create Date: 2026-12-05

``artifacts`` gain three columns (cache/provenance.py is their one reader and writer):

- ``entered``: 'build' (compiled by this store's builder), 'import' (a bundle), 'publish' (a
  service publish, under a token), 'fetch' (a client kept it from a server), 'legacy' (it was
  in the store before this revision: nobody recorded how it came).
- ``entered_json``: by what: the toolchain identity and host of a build, the bundle's manifest
  sha256 and file name of an import, the token's id (sha256 prefix, never the token) of a
  publish, the server of a fetch.
- ``verified_at``: when a build here recompiled a row that did not enter by a build and got
  the same bytes (NULL: never).

``code_objects`` gain ``entered`` too: only a code object a build here produced ('build') is
reused by the builder instead of compiling; the rest ('legacy') are compiled once more.

``triton_host_entries`` (triton_key, publisher, filename): the Triton entries GPU hosts publish,
each its tenant's alone (publisher: the token's id); ``triton_entries`` keeps the builds' only.
Host rows of an older store move there under publisher 'legacy' (no token has that id: nobody
reads them any more; gc keeps their blobs until they are deleted by hand).

Signing (cache/provenance.py signable) takes only rows entered by a build or verified since,
so every row of an older store ('legacy') is left out of ``trust sign`` until a build verifies
it: fail closed, as a row published before this revision may be a token holder's bytes. The
first build after the upgrade therefore compiles each planned legacy row once and compares
(``verified`` / ``replaced`` in its summary); later builds compile nothing that did not move.
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_provenance"
down_revision = "0009_target_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ADD COLUMN (with a server default) on both backends: no table rebuild, so SQLite keeps
    # the tables' CHECK constraints (a batch rebuild would not reflect them)
    op.add_column("artifacts", sa.Column("entered", sa.String(16), nullable=False, server_default="legacy"))
    op.add_column("artifacts", sa.Column("entered_json", sa.Text, nullable=False, server_default="{}"))
    op.add_column("artifacts", sa.Column("verified_at", sa.Float, nullable=True))
    op.add_column("code_objects", sa.Column("entered", sa.String(16), nullable=False, server_default="legacy"))
    op.create_index("ix_artifacts_entered", "artifacts", ["entered"])
    op.create_table(
        "triton_host_entries",
        sa.Column("triton_key", sa.String(128), primary_key=True),
        sa.Column("publisher", sa.String(32), primary_key=True),
        sa.Column("filename", sa.String(255), primary_key=True),
        sa.Column("blob_sha256", sa.String(64), sa.ForeignKey("blobs.sha256", name="fk_triton_host_entries_blob"),
                  nullable=False),
        sa.Column("triton_version", sa.String(64), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_triton_host_entries_blob", "triton_host_entries", ["blob_sha256"])
    op.execute("INSERT INTO triton_host_entries (triton_key, publisher, filename, blob_sha256, triton_version, target, "
               "created_at) SELECT triton_key, 'legacy', filename, blob_sha256, triton_version, target, created_at "
               "FROM triton_entries WHERE source = 'host'")
    op.execute("DELETE FROM triton_entries WHERE source = 'host'")
    op.execute("UPDATE rocke_meta SET value = '10' WHERE name = 'schema_version'")


def downgrade() -> None:
    op.drop_index("ix_triton_host_entries_blob", table_name="triton_host_entries")
    op.drop_table("triton_host_entries")
    op.drop_index("ix_artifacts_entered", table_name="artifacts")
    with op.batch_alter_table("code_objects") as b:
        b.drop_column("entered")
    with op.batch_alter_table("artifacts") as b:
        b.drop_column("verified_at")
        b.drop_column("entered_json")
        b.drop_column("entered")
    op.execute("UPDATE rocke_meta SET value = '9' WHERE name = 'schema_version'")
