"""Telemetry v1: the per-request event, and parsing raw messages into events."""

from monitor.telemetry.event import Event, Rejection

__all__ = ["Event", "Rejection"]
