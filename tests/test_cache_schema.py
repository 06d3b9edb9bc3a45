"""Schema and opening: Alembic is the only way in, URLs resolve as documented."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
from _pg import pg_database, store_url  # noqa: F401
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from rocke_aot import settings
from rocke_aot.cache import db, models
from rocke_aot.cache.store import Store
from rocke_aot.errors import CacheError


def test_revisions_match_the_migration_scripts():
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(db.__file__).parent / "migrations"))
    script = ScriptDirectory.from_config(cfg)
    chain = [r.revision for r in script.walk_revisions()][::-1]
    assert tuple(chain) == models.REVISIONS
    assert script.get_current_head() == models.HEAD_REVISION
    assert set(models.SCHEMA_FOR_REVISION) == set(models.REVISIONS)
    assert models.SCHEMA_FOR_REVISION[models.HEAD_REVISION] == models.SCHEMA_VERSION


def test_migrations_create_exactly_the_models(store_url):
    with Store.open(store_url) as s, s.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), models.metadata)
        assert diff == []
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == models.HEAD_REVISION
        assert {"artifacts", "blobs", "rocke_meta"} <= set(inspect(conn).get_table_names())


def test_sqlite_pragmas(tmp_path):
    with Store.open(tmp_path / "c.sqlite") as s, s.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == db.BUSY_TIMEOUT_MS
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def _open_and_put(url: str, i: int, barrier) -> None:
    from _pg import put

    barrier.wait()
    with Store.open(url) as s:
        put(s, i)


def test_concurrent_first_opens_create_the_schema_once(tmp_path):
    url = f"sqlite:///{tmp_path / 'race.sqlite'}"
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(4)
    procs = [ctx.Process(target=_open_and_put, args=(url, i, barrier)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    with Store.open(url) as s:
        assert s.stats().artifacts == 4


def test_url_resolution(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.CACHE, raising=False)
    monkeypatch.setenv(settings.HOME, str(tmp_path / "home"))
    assert db.resolve_url(None) == f"sqlite:///{tmp_path / 'home' / 'cache.sqlite'}"
    monkeypatch.setenv(settings.CACHE, str(tmp_path / "env.sqlite"))
    assert db.resolve_url(None) == f"sqlite:///{tmp_path / 'env.sqlite'}"
    assert db.resolve_url(tmp_path / "p.sqlite") == f"sqlite:///{tmp_path / 'p.sqlite'}"
    assert db.resolve_url("postgresql://u@h/d") == "postgresql+psycopg://u@h/d"
    assert "secret" not in db.display_url("postgresql+psycopg://u:secret@h/d")
    for bad in ("mysql://h/d", "postgresql+psycopg2://h/d", ""):
        with pytest.raises(CacheError):
            db.resolve_url(bad)


def test_default_store_lives_in_rocke_aot_home(tmp_path, monkeypatch):
    monkeypatch.delenv(settings.CACHE, raising=False)
    monkeypatch.setenv(settings.HOME, str(tmp_path / "home"))
    with Store.open() as s:
        assert s.stats().artifacts == 0
    assert (tmp_path / "home" / "cache.sqlite").is_file()


def test_platformdirs_default(monkeypatch):
    monkeypatch.delenv(settings.HOME, raising=False)
    from platformdirs import user_cache_dir

    assert db.default_path() == Path(user_cache_dir("rocke-aot")) / "cache.sqlite"
