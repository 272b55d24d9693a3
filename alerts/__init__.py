"""Alerts: the alert record (alerts v1) and, as they land, the lifecycle and the sinks."""

from monitor.alert_record import AlertRecord, fingerprint

__all__ = ["AlertRecord", "fingerprint"]
