"""Engines, URL handling and schema migrations (Alembic, configured without an ini file)."""

from __future__ import annotations

import importlib.util
import re
from typing import Any

import orjson
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util.exc import CommandError
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from monitor.store.exceptions import NotMigratedError, StoreError

SQLITE_BUSY_TIMEOUT_S = 30.0

# Execution option for read-only work: on SQLite it opens the transaction DEFERRED, so a
# long report does not hold the write lock that the daemon's checkpoints need.
READ_ONLY = "specwatch_read_only"

_SECRET_QUERY = re.compile(r"([?&](?:ssl)?password=)[^&]*", re.IGNORECASE)
_USERINFO = re.compile(r"(://[^:/@]*):[^@]*@")


def normalize_url(url: str) -> str:
    """Send bare PostgreSQL URLs to psycopg 3.

    >>> normalize_url("postgres://u@h/db")
    'postgresql+psycopg://u@h/db'
    >>> normalize_url("sqlite:///x.db")
    'sqlite:///x.db'
    """
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def redact_url(url: str) -> str:
    """``url`` with its password (also one given as a query parameter) replaced by ``***``.

    >>> redact_url("postgresql://me:s3cret@db:5432/x?sslpassword=k")
    'postgresql://me:***@db:5432/x?sslpassword=***'
    >>> redact_url("not a url://me:s3cret@host")
    'not a url://me:***@host'
    """
    try:
        u = make_url(url)
    except (ArgumentError, ValueError):
        return _USERINFO.sub(r"\1:***@", url)
    return _SECRET_QUERY.sub(r"\1***", u.render_as_string(hide_password=True))


def _json_dumps(obj: Any) -> str:
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode()


def make_engine(url: str, *, sqlite_busy_timeout: float = SQLITE_BUSY_TIMEOUT_S) -> Engine:
    """An engine for ``url``; on SQLite: WAL, ``synchronous=NORMAL``, and ``BEGIN IMMEDIATE``.

    Checkpoints read rows and then write them; under SQLite's default deferred BEGIN two such
    transactions can both take the read lock and then deadlock upgrading it (SQLITE_BUSY
    without waiting). Taking the write lock at BEGIN makes them queue on the busy timeout.
    """
    u = make_url(normalize_url(url))
    json_args: dict[str, Any] = {"json_serializer": _json_dumps, "json_deserializer": orjson.loads}
    if u.get_backend_name() != "sqlite":
        return create_engine(u, pool_pre_ping=True, **json_args)

    engine = create_engine(u, connect_args={"timeout": sqlite_busy_timeout}, **json_args)
    busy_ms = int(sqlite_busy_timeout * 1000)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Take BEGIN away from the sqlite3 module (pysqlite recipe); _on_begin emits it.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={busy_ms:d}")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        deferred = conn.get_execution_options().get(READ_ONLY, False)
        conn.exec_driver_sql("BEGIN DEFERRED" if deferred else "BEGIN IMMEDIATE")

    return engine


def migrations_dir() -> str:
    """The directory of the ``migrations`` package, installed or in a checkout."""
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the migrations package is not installed with this build")
    return list(spec.submodule_search_locations)[0]


def _alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    # ConfigParser interpolates '%': escape it in the path.
    cfg.set_main_option("script_location", migrations_dir().replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The schema revision this build needs."""
    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:
        raise StoreError("the migrations package has no revision")
    return head


def current_revision(engine_or_url: Engine | str) -> str | None:
    """The database's schema revision, ``None`` when it was never migrated."""
    engine = make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    try:
        with engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if isinstance(engine_or_url, str):
            engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision``, in one transaction."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            command.upgrade(_alembic_config(conn), revision)
    finally:
        engine.dispose()


def check_migrated(engine_or_url: Engine | str, *, display_url: str | None = None) -> None:
    """Raise :class:`NotMigratedError` unless the database is at :func:`head_revision`.

    ``display_url`` is the URL as the user wrote it, for the message (it is redacted here).
    """
    if display_url is None and isinstance(engine_or_url, str):
        display_url = engine_or_url
    if display_url is not None:
        shown = redact_url(display_url)
    else:
        assert isinstance(engine_or_url, Engine)
        shown = engine_or_url.url.render_as_string(hide_password=True)
    head = head_revision()
    current = current_revision(engine_or_url)
    if current == head:
        return
    if current is not None:
        try:
            known = ScriptDirectory.from_config(_alembic_config()).get_revision(current)
        except (CommandError, RevisionError):
            known = None
        if known is None:
            raise NotMigratedError(
                f"database {shown} is at revision {current}, which this build does not know "
                f"(it needs {head}): a newer specwatch migrated it; run that version instead"
            )
    raise NotMigratedError(
        f"database {shown} is not migrated (at revision {current or 'none'}, this build needs "
        f"{head}); run: specwatch db upgrade --db {shown}"
    )
