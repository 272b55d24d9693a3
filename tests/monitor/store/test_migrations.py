"""Schema migrations, the not-migrated guard, engines and URL redaction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.engine import make_url

from monitor.store import NotMigratedError, Store
from monitor.store.db import (
    READ_ONLY,
    _head_from_sources,
    check_migrated,
    current_revision,
    head_revision,
    make_engine,
    normalize_url,
    redact_url,
    upgrade,
)
from monitor.store.tables import metadata


def _with_password(url: str, password: str) -> tuple[str, str | None]:
    """``url`` carrying a password (its own, if it has one), and that password."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return url, None
    if u.password:
        return url, str(u.password)
    return u.set(password=password).render_as_string(hide_password=False), password


def test_upgrade_from_empty_then_store_works(db_url: str) -> None:
    assert current_revision(db_url) is None
    upgrade(db_url)
    assert current_revision(db_url) == head_revision() == "0007"
    upgrade(db_url)  # idempotent
    check_migrated(db_url)
    with Store(db_url) as s:
        assert s.ratios() == []


def test_unmigrated_store_names_the_fix_and_hides_the_password(db_url: str) -> None:
    url, password = _with_password(db_url, "hunter2-s3cret")
    with pytest.raises(NotMigratedError) as info:
        Store(url)
    msg = str(info.value)
    assert f"is not migrated (at revision none, this build needs {head_revision()})" in msg
    assert f"run: specwatch db upgrade --db {redact_url(url)}" in msg
    if password is not None:
        assert password not in msg and ":***@" in msg
    # Not required: a tool that runs the migration itself opens it anyway.
    Store(url, require_migrated=False).close()


def test_database_from_a_newer_build_is_refused(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(NotMigratedError, match="9999, which this build does not know"):
        Store(migrated_url)


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    # check_migrated confirms a database at the head without Alembic, from this reading.
    assert _head_from_sources() == head_revision()


def test_database_at_an_older_revision_is_refused(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0006'"))
    engine.dispose()
    with pytest.raises(NotMigratedError, match=f"at revision 0006, this build needs "
                                               f"{head_revision()}"):
        Store(migrated_url)


def test_migration_creates_exactly_the_models(migrated_url: str) -> None:
    engine = make_engine(migrated_url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(ctx, metadata) == []
    finally:
        engine.dispose()


def test_sqlite_engine_uses_wal_and_begin_immediate(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    engine = make_engine(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() > 0
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            with engine.begin():
                # The write lock is taken at BEGIN, before any statement.
                with pytest.raises(sqlite3.OperationalError, match="locked"):
                    other.execute("BEGIN IMMEDIATE")
            with engine.execution_options(**{READ_ONLY: True}).connect() as conn:
                conn.exec_driver_sql("SELECT 1").all()
                other.execute("BEGIN IMMEDIATE")  # a reader does not hold the write lock
                other.execute("ROLLBACK")
        finally:
            other.close()
    finally:
        engine.dispose()


def test_urls_are_normalised_and_redacted() -> None:
    assert normalize_url("postgresql://u:p@h/d") == "postgresql+psycopg://u:p@h/d"
    assert normalize_url("postgres://h/d") == "postgresql+psycopg://h/d"
    assert normalize_url("postgresql+psycopg://h/d") == "postgresql+psycopg://h/d"
    assert redact_url("postgresql://me:pa%40ss@h:5432/d") == "postgresql://me:***@h:5432/d"
    assert redact_url("postgresql://me@h/d?password=x&sslmode=require") == (
        "postgresql://me@h/d?password=***&sslmode=require"
    )
    assert redact_url("sqlite:///a/b.db") == "sqlite:///a/b.db"
    assert "pw" not in redact_url("bogus://me:pw@")
    s = Store.__new__(Store)
    s.url = redact_url("postgresql://me:topsecret@h/d")
    assert "topsecret" not in repr(s)
