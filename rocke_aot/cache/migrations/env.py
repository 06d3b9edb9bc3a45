"""Alembic environment for the cache schema.

    Store.open ──> migrate.upgrade(conn) ──> alembic.command.upgrade(cfg, "head")
                                               └─> this file: runs the revision scripts
                                                   on cfg.attributes["connection"]

The store hands over a connection that is already inside its write transaction
(SQLite: BEGIN IMMEDIATE; PostgreSQL: a transaction holding an advisory lock), so
concurrent first opens of one store serialize and the loser finds the schema at head.
Run by hand (``alembic -c <ini>`` with ``sqlalchemy.url``), it opens its own engine.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from rocke_aot.cache.models import metadata
from rocke_aot.errors import CacheAccessError

config = context.config


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTER needs batch mode
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:  # pragma: no cover - manual use of the alembic command line
    url = config.get_main_option("sqlalchemy.url")
    if url is None:
        raise CacheAccessError("alembic run by hand needs sqlalchemy.url in its ini (the cache's database)")
    engine = create_engine(url)
    with engine.begin() as conn:
        _run(conn)
