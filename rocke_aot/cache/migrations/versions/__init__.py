"""Alembic revision scripts, one per schema change; ids are listed in models.REVISIONS."""
