"""Errors shared across specwatch; each subpackage adds its own in its ``exceptions.py``."""


class SpecwatchError(Exception):
    """Base class of every error specwatch raises on purpose.

    The command line prints it as one ``specwatch: ...`` line and exits with ``exit_code``:
    2 for what the user can fix (usage, configuration, unreachable or unreadable inputs).
    """

    exit_code = 2


class ConfigError(SpecwatchError):
    """The configuration file or environment is invalid; the message names the key path."""


class InvalidAlert(SpecwatchError):
    """An alert record that breaks the alerts v1 contract (``monitor/alert_record.py``)."""


class StateVersionError(SpecwatchError):
    """A stored snapshot (a detector's, the alert lifecycle's) has a kind or version this
    build cannot read."""


class LoopFailedError(SpecwatchError):
    """The daemon's poll loop failed too often in a row to go on: the process exits non-zero
    for its supervisor to restart it (each failure's traceback is in the log). Exit code 1,
    not 2: nothing in the configuration is wrong, and a restart may well succeed."""

    exit_code = 1
