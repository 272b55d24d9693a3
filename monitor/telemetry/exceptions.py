"""Errors raised while reading telemetry."""

from __future__ import annotations

from monitor.exceptions import SpecwatchError


class InvalidEvent(SpecwatchError):
    """An event breaks the telemetry v1 contract; ``reason`` names the field path and problem."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
