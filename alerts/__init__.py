"""Alerts: the alert record (alerts v1) and, as they land, the lifecycle and the sinks."""

from alerts.record import AlertRecord, fingerprint

__all__ = ["AlertRecord", "fingerprint"]
