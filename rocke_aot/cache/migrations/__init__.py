"""Alembic migrations of the cache schema (run by Store.open; see env.py)."""
