"""Errors raised by the alerting package."""

# The record type lives below alerts/ (monitor/alert_record.py), and so does its error.
from monitor.exceptions import InvalidAlert, SpecwatchError

__all__ = ["AlertError", "InvalidAlert"]


class AlertError(SpecwatchError):
    """Base class of alerting errors."""
