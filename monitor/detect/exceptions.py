"""Errors raised by the detection layer."""

from monitor.exceptions import SpecwatchError


class DetectionError(SpecwatchError):
    """Base class of detection errors."""


class StateVersionError(DetectionError):
    """A stored detector snapshot has a version this build cannot read."""
