"""Errors raised by the alerting package."""

from monitor.exceptions import SpecwatchError


class AlertError(SpecwatchError):
    """Base class of alerting errors."""


class InvalidAlert(AlertError):
    """An alert record that breaks the alerts v1 contract."""
