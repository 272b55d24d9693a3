"""The configuration's environment variables and the store's default URL: all that a
command reading only the store needs when no config file is given, without building the
config models (pydantic's, about 0.1 s of `specwatch ratios`). ``monitor/config.py`` reads
the same table and default."""

from __future__ import annotations

from collections.abc import Mapping

DEFAULT_STORE_URL = "sqlite:///specwatch.db"
STORE_URL_VAR = "SPECWATCH_DB_URL"

# variable -> (section, key) it overrides; a variable set to "" overrides nothing
ENV_OVERRIDES: dict[str, tuple[str, str]] = {
    STORE_URL_VAR: ("store", "url"),
    "SPECWATCH_KAFKA_BOOTSTRAP": ("kafka", "bootstrap_servers"),
}


def store_url(env: Mapping[str, str], given: str | None = None) -> str:
    """The store URL of a process without a config file: ``given`` (``--db``), else the
    environment's, else the default; what ``load_config(None, ...)`` gives.

    >>> store_url({})
    'sqlite:///specwatch.db'
    >>> store_url({"SPECWATCH_DB_URL": "postgresql+psycopg://h/db"})
    'postgresql+psycopg://h/db'
    >>> store_url({"SPECWATCH_DB_URL": "postgresql+psycopg://h/db"}, "sqlite:///x.db")
    'sqlite:///x.db'
    """
    return given or env.get(STORE_URL_VAR) or DEFAULT_STORE_URL
