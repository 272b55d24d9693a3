"""Alembic migrations of the specwatch store; run them with ``specwatch db upgrade``."""
