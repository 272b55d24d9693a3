"""Errors raised by the store."""


from monitor.exceptions import SpecwatchError


class StoreError(SpecwatchError):
    """Base class of store errors."""


class DatabaseUrlError(StoreError):
    """The database URL cannot be read, or names a database specwatch does not store into."""


class NotMigratedError(StoreError):
    """The database schema is missing or not at the revision this build needs."""


class FencedError(StoreError):
    """Another consumer advanced a partition's stored offset since we last checkpointed.

    The checkpoint was rolled back as a whole: this process is a zombie for that partition
    and must drop its in-memory state and reload from the store.
    """


class StoreUnavailableError(StoreError):
    """The database could not be reached or answered in time (connection refused, reset or
    timed out; server shutting down; out of connections or disk).

    Transient by nature: nothing of the failed operation can be relied on (a commit may or
    may not have landed), so the caller drops what it had in memory, waits and reloads from
    the store once it answers again. The driver's error is the ``__cause__``.
    """
