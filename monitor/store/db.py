"""Engines, URL handling and schema migrations (Alembic, configured without an ini file)."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from sqlalchemy import URL, Connection, Engine, column, create_engine, event, select, table
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from monitor.jsonable import json_text
from monitor.store.exceptions import (
    DatabaseUrlError,
    NotMigratedError,
    StoreError,
    StoreUnavailableError,
)

# Alembic is imported inside the functions that use it: importing it costs ~0.1 s (it loads
# every dialect's DDL, autogenerate and mako with pygments), which every command paid even
# when it only reads.
if TYPE_CHECKING:
    from alembic.config import Config

SQLITE_BUSY_TIMEOUT_S = 30.0

# PostgreSQL: how long one round trip (a statement, a COMMIT, a ping) may wait for the server
# before the connection is given up as dead. The kernel's own timers do not cover a server
# that keeps the TCP connection open and answers nothing (frozen, or a stalled middlebox that
# still acknowledges packets): without this a checkpoint would wait forever.
PG_IO_TIMEOUT_S = 30.0
# libpq connection parameters for noticing an unreachable server in seconds, not in the
# kernel's two hours; any of them given in the URL wins.
PG_CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,  # seconds, for the whole connection set-up
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30000,  # ms that sent data may stay unacknowledged
}

# Execution option for read-only work: on SQLite it opens the transaction DEFERRED, so a
# long report does not hold the write lock that the daemon's checkpoints need.
READ_ONLY = "specwatch_read_only"

_SECRET_QUERY = re.compile(r"([?&](?:ssl)?password=)[^&]*", re.IGNORECASE)
# Greedy to the last '@': a password with an unencoded '@' must not leave its tail behind.
_USERINFO = re.compile(r"^((?:[^:/@]*://)?[^:/@]*):.*@")


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


SUPPORTED_URLS = "sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
_BACKENDS = frozenset({"sqlite", "postgresql"})


def parse_url(url: str) -> URL:
    """``url`` read by SQLAlchemy; :class:`DatabaseUrlError` unless it is SQLite or PostgreSQL.

    >>> parse_url("postgres://u@h/db").drivername
    'postgresql+psycopg'
    >>> parse_url("mysql://u@h/db")
    Traceback (most recent call last):
    ...
    monitor.store.exceptions.DatabaseUrlError: mysql databases are not supported \
(mysql://u@h/db): specwatch stores into SQLite or PostgreSQL, \
sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DATABASE
    """
    try:
        u = make_url(normalize_url(url))
    except (ArgumentError, ValueError):
        raise DatabaseUrlError(
            f"cannot read database URL {redact_url(url)!r}: want {SUPPORTED_URLS}"
        ) from None
    backend = u.get_backend_name()
    if backend not in _BACKENDS:
        raise DatabaseUrlError(
            f"{backend} databases are not supported ({redact_url(url)}): specwatch stores "
            f"into SQLite or PostgreSQL, {SUPPORTED_URLS}"
        )
    return u


def redact_url(url: str) -> str:
    """``url`` with its password (also one given as a query parameter) replaced by ``***``.

    >>> redact_url("postgresql://me:s3cret@db:5432/x?sslpassword=k")
    'postgresql://me:***@db:5432/x?sslpassword=***'
    >>> redact_url("not a url://me:s3cret@host")
    'not a url://me:***@host'
    >>> redact_url("postgresql://me:s3c@ret@db/x")  # unencoded '@': SQLAlchemy splits it wrong
    'postgresql://me:***@db/x'
    >>> redact_url("me:s3cret@db/x")  # no scheme: not a URL, still a password
    'me:***@db/x'
    """
    try:
        u = make_url(url)
    except (ArgumentError, ValueError):
        u = None
    if u is None or "@" in (u.host or ""):
        return _SECRET_QUERY.sub(r"\1***", _USERINFO.sub(r"\1:***@", url))
    return _SECRET_QUERY.sub(r"\1***", u.render_as_string(hide_password=True))


def make_engine(
    url: str,
    *,
    sqlite_busy_timeout: float = SQLITE_BUSY_TIMEOUT_S,
    io_timeout: float | None = PG_IO_TIMEOUT_S,
) -> Engine:
    """An engine for ``url``; on SQLite: WAL, ``synchronous=NORMAL``, and ``BEGIN IMMEDIATE``.

    Checkpoints read rows and then write them; under SQLite's default deferred BEGIN two such
    transactions can both take the read lock and then deadlock upgrading it (SQLITE_BUSY
    without waiting). Taking the write lock at BEGIN makes them queue on the busy timeout.

    On PostgreSQL (psycopg 3) every round trip waits at most ``io_timeout`` seconds (``None``:
    forever) and connections get :data:`PG_CONNECT_DEFAULTS`: a dead, frozen or unreachable
    server is an error within seconds (:func:`is_unavailable`), never a hang.
    """
    u = parse_url(url)
    json_args: dict[str, Any] = {"json_serializer": json_text, "json_deserializer": orjson.loads}
    if u.get_backend_name() != "sqlite":
        try:
            engine = create_engine(u, pool_pre_ping=True, **json_args)
        except (NoSuchModuleError, ImportError) as e:  # a driver this build does not ship
            raise DatabaseUrlError(f"cannot use {redact_url(url)}: {e}; want "
                                   f"{SUPPORTED_URLS}") from None
        if u.get_driver_name() == "psycopg":
            _bound_psycopg(engine, io_timeout)
        return engine

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


def _bound_psycopg(engine: Engine, io_timeout: float | None) -> None:
    """Connect through :class:`_DeadlineConnection`, with the libpq defaults filled in."""
    from psycopg import Connection as PgConnection
    from psycopg import OperationalError as PgOperationalError
    from psycopg import errors as pg_errors

    # psycopg (3.3) raises its internal _WaitTimeout when a wait's timeout expires. A release
    # without timeouts on waits gets the libpq defaults only.
    wait_timeout: type[Exception] = getattr(pg_errors, "_WaitTimeout", PgOperationalError)
    if wait_timeout is PgOperationalError or \
            "timeout" not in inspect.signature(PgConnection.wait).parameters:
        io_timeout = None

    class _DeadlineConnection(PgConnection):  # type: ignore[type-arg]
        """A psycopg connection whose every wait for the server has a deadline."""

        def wait(self, gen: Any, interval: Any = None, timeout: float | None = None) -> Any:
            kwargs: dict[str, Any] = {"timeout": io_timeout if timeout is None else timeout}
            if interval is not None:
                kwargs["interval"] = interval
            try:
                return super().wait(gen, **kwargs)
            except wait_timeout as e:
                if timeout is not None or io_timeout is None:
                    raise  # psycopg's own deadline (a cancel): its business
                # The server may or may not have run what was sent: the connection's state is
                # unknown, so it is closed (the pool then discards it).
                self.close()
                raise PgOperationalError(
                    f"no answer from the database server within {io_timeout:g}s; "
                    "connection closed"
                ) from e

    factory = PgConnection if io_timeout is None else _DeadlineConnection

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        for key, value in PG_CONNECT_DEFAULTS.items():
            cparams.setdefault(key, value)
        return factory.connect(*cargs, **cparams)


_UNAVAILABLE_SQLSTATE_CLASSES = frozenset({
    "08",  # connection exception
    "53",  # insufficient resources: too many connections, disk full, out of memory
    "57",  # operator intervention: shutdown, cannot connect now, query canceled
    "58",  # system error: I/O
})
_SQLITE_UNAVAILABLE = ("database is locked", "disk i/o error", "unable to open database file",
                       "database or disk is full")


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is unreachable or unable to answer for now (worth
    waiting for), as opposed to a bug, a constraint or a schema problem.

    >>> is_unavailable(ValueError("x"))
    False
    """
    from sqlalchemy.exc import DBAPIError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    if isinstance(exc, PoolTimeout):
        return True  # every pooled connection is stuck on the server
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True  # the dialect saw the connection die
    code = getattr(exc.orig, "sqlstate", None)
    if code:
        return str(code)[:2] in _UNAVAILABLE_SQLSTATE_CLASSES
    if not isinstance(exc, OperationalError):
        return False
    if type(exc.orig).__module__.startswith("sqlite3"):
        return any(m in str(exc.orig).lower() for m in _SQLITE_UNAVAILABLE)
    # Without a SQLSTATE the server never answered: refused, reset, timed out.
    return True


def _sqlite_hint(url: URL) -> str:
    """Why SQLite could not open the file at ``url``, when the file system says."""
    if not url.database or url.database == ":memory:":
        return ""
    path = Path(url.database)
    if path.is_dir():
        return f" ({path} is a directory)"
    parent = path.absolute().parent
    if not parent.is_dir():
        return f" (directory {parent} does not exist)"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f" ({path if path.exists() else parent} is not writable)"
    return ""


@contextmanager
def opening(engine: Engine, shown: str) -> Iterator[None]:
    """A failure to open or read the database at start as one line: a
    :class:`StoreUnavailableError` for what may pass with time (refused, timed out, locked),
    else a :class:`StoreError` (authentication, no such database, no such directory)."""
    try:
        yield
    except DBAPIError as exc:
        orig = exc.orig if exc.orig is not None else exc
        first = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
        hint = _sqlite_hint(engine.url) if engine.url.get_backend_name() == "sqlite" else ""
        error = StoreUnavailableError if is_unavailable(exc) else StoreError
        raise error(f"cannot open database {shown}: {first}{hint}") from exc


def _shown(engine_or_url: Engine | str, display_url: str | None) -> str:
    """The URL for messages: as the user wrote it if known, never with its password."""
    if display_url is not None:
        return redact_url(display_url)
    if isinstance(engine_or_url, str):
        return redact_url(engine_or_url)
    return engine_or_url.url.render_as_string(hide_password=True)


def migrations_dir() -> str:
    """The directory of the ``migrations`` package, installed or in a checkout."""
    spec = importlib.util.find_spec("migrations")
    if spec is None or not spec.submodule_search_locations:
        raise StoreError("the migrations package is not installed with this build")
    return list(spec.submodule_search_locations)[0]


def _alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    # ConfigParser interpolates '%': escape it in the path.
    cfg.set_main_option("script_location", migrations_dir().replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The schema revision this build needs."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:
        raise StoreError("the migrations package has no revision")
    return head


def current_revision(engine_or_url: Engine | str, *, display_url: str | None = None
                     ) -> str | None:
    """The database's schema revision, ``None`` when it was never migrated.

    A database that cannot be opened is a one-line :class:`StoreError` (see :func:`opening`).
    """
    from alembic.runtime.migration import MigrationContext

    engine = make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    try:
        with opening(engine, _shown(engine_or_url, display_url)), \
                engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        if isinstance(engine_or_url, str):
            engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision``, in one transaction."""
    from alembic import command

    engine = make_engine(url)
    try:
        with opening(engine, redact_url(url)), engine.begin() as conn:
            command.upgrade(_alembic_config(conn), revision)
    finally:
        engine.dispose()


def create_if_new(url: str) -> bool:
    """Migrate the database at ``url`` if it holds no table at all (a SQLite file not there
    yet, an empty PostgreSQL database) and say whether it did.

    A database with tables is left alone, migrated or not: nothing here decides what to do
    with someone's data (:func:`check_migrated` refuses it with the way out). The check and
    the migration are one transaction, so two processes cannot both migrate it.
    """
    from alembic import command

    engine = make_engine(url)
    try:
        with opening(engine, redact_url(url)), engine.begin() as conn:
            if sa_inspect(conn).get_table_names():
                return False
            command.upgrade(_alembic_config(conn), "head")
            return True
    finally:
        engine.dispose()


_VERSION_TABLE = "alembic_version"  # MigrationContext's default, which current_revision uses
_VERSION_NUM = table(_VERSION_TABLE, column("version_num")).c.version_num
_REVISION_NAMES = frozenset({"revision", "down_revision", "branch_labels", "depends_on"})


@cache  # the revision scripts shipped with this build do not change while it runs
def _head_from_sources() -> str | None:
    """The head revision read from the revision scripts' source, as :func:`head_revision`
    has it, or ``None`` when a script is not the plain linear form (string ``revision``,
    string or ``None`` ``down_revision``, no branch labels) or there is not exactly one head:
    then only Alembic can say.
    """
    versions = Path(migrations_dir()) / "versions"
    revisions: set[str] = set()
    parents: set[str] = set()
    # The files Alembic reads: *.py in versions/, not __init__ nor an editor's .# lock file.
    for path in sorted(versions.glob("*.py")):
        if path.name.startswith(("__init__", ".#")):
            continue
        names: dict[str, object] = {}
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target, value = node.target.id, node.value
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name)):
                target, value = node.targets[0].id, node.value
            else:
                continue
            if target not in _REVISION_NAMES:
                continue
            if not isinstance(value, ast.Constant):
                return None
            names[target] = value.value
        revision, parent = names.get("revision"), names.get("down_revision")
        if (not isinstance(revision, str) or revision in revisions
                or not (parent is None or isinstance(parent, str))
                or names.get("branch_labels") is not None):
            return None
        revisions.add(revision)
        if parent is not None:
            parents.add(parent)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 and parents <= revisions else None


def _at_head_without_alembic(engine_or_url: Engine | str, display_url: str | None) -> bool:
    """Whether the database's version table holds exactly the head revision, read with plain
    SQL; ``False`` means "ask Alembic", not "not migrated"."""
    head = _head_from_sources()
    if head is None:
        return False
    engine = make_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    try:
        with opening(engine, _shown(engine_or_url, display_url)), \
                engine.connect().execution_options(**{READ_ONLY: True}) as conn:
            if not sa_inspect(conn).has_table(_VERSION_TABLE):
                return False
            rows = conn.execute(select(_VERSION_NUM)).all()
            return [tuple(r) for r in rows] == [(head,)]
    finally:
        if isinstance(engine_or_url, str):
            engine.dispose()


def check_migrated(engine_or_url: Engine | str, *, display_url: str | None = None) -> None:
    """Raise :class:`NotMigratedError` unless the database is at :func:`head_revision`.

    ``display_url`` is the URL as the user wrote it, for the message (it is redacted here).
    """
    shown = _shown(engine_or_url, display_url)
    # Every Store opens with this check: confirm the usual case (one row, at the head) without
    # importing Alembic; anything else goes through Alembic for its verdict and message.
    if _at_head_without_alembic(engine_or_url, display_url):
        return
    head = head_revision()
    current = current_revision(engine_or_url, display_url=display_url)
    if current == head:
        return
    if current is not None:
        from alembic.script import ScriptDirectory
        from alembic.script.revision import RevisionError
        from alembic.util.exc import CommandError

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
