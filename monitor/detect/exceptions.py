"""Errors raised by the detection layer."""

# Shared with the alert lifecycle's snapshots, so it lives below both packages.
from monitor.exceptions import SpecwatchError, StateVersionError

__all__ = ["DetectionError", "StateVersionError"]


class DetectionError(SpecwatchError):
    """Base class of detection errors."""
