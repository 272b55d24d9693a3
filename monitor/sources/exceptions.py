"""Errors of the sources: what the broker answered that retrying cannot fix."""

from monitor.exceptions import ConfigError, SpecwatchError


class BrokerConfigError(ConfigError):
    """The broker refuses this configuration: bad credentials, no authorization for a topic
    or the group, a missing topic that may not be created, an unsupported setting. Retrying
    cannot help, so the daemon stops with this one line."""


class BrokerUnavailableError(SpecwatchError):
    """No broker answered where an answer was needed at once (at start, before anything is
    consumed); once running, the daemon waits for the broker instead."""


class ReplayInputError(SpecwatchError):
    """The replay input cannot be opened or read (no such file, stdin closed, not gzip)."""


class InputEndedEarlyError(ReplayInputError):
    """The replay input broke off (a truncated ``.gz``, a read error) after some lines; the
    lines before the break were processed and committed, and the message says where."""
