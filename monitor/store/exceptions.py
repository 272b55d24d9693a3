"""Errors raised by the store."""


from monitor.exceptions import SpecwatchError


class StoreError(SpecwatchError):
    """Base class of store errors."""


class NotMigratedError(StoreError):
    """The database schema is missing or not at the revision this build needs."""


class FencedError(StoreError):
    """Another consumer advanced a partition's stored offset since we last checkpointed.

    The checkpoint was rolled back as a whole: this process is a zombie for that partition
    and must drop its in-memory state and reload from the store.
    """
