"""Key v2: ``lowering_digest`` becomes ``recipe_digest``, compile options get a column.

Revision ID: 0002_recipe_options
Revises: 0003_generations
Create Date: 2026-12-02

(The id says what it is about rather than its place; its place is after 0003_generations.)

Cache keys v2 (cache/keys.py KEY_VERSION 2) hash the recipe digest (every module on the
lowering/compile path, by rule: aot/recipe.py) and the compile options as fields of their
own. No v1 key can equal a v2 key, so the rows stored under v1 keys can never be hit again,
and ``cache verify`` would rightly report each as a key that does not match its inputs: the
upgrade deletes them (artifacts and cached failures), and with them the generations they
formed and the refs to those (a ref to an emptied generation would serve nothing). Their blobs
stay, unreferenced, until ``rocke-aot cache gc`` removes them; nothing is rebuilt implicitly.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_recipe_options"
down_revision = "0003_generations"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DELETE FROM artifacts")
    op.execute("DELETE FROM refs")
    op.execute("DELETE FROM generations")
    # Plain SQL: both SQLite (>= 3.25) and PostgreSQL rename a column in place, which keeps the
    # artifacts table (and the foreign key into blobs) as it is.
    op.execute("ALTER TABLE artifacts RENAME COLUMN lowering_digest TO recipe_digest")
    op.add_column("artifacts", sa.Column("options_json", sa.Text, nullable=False, server_default="{}"))
    op.execute("UPDATE rocke_meta SET value = '5' WHERE name = 'schema_version'")


def downgrade() -> None:
    op.execute("DELETE FROM artifacts")
    op.execute("DELETE FROM refs")
    op.execute("DELETE FROM generations")
    with op.batch_alter_table("artifacts") as batch:
        batch.drop_column("options_json")
    op.execute("ALTER TABLE artifacts RENAME COLUMN recipe_digest TO lowering_digest")
    op.execute("UPDATE rocke_meta SET value = '4' WHERE name = 'schema_version'")
