"""Which sink gets which alert: the config's per-sink filters and per-route overrides.

>>> from datetime import UTC, datetime
>>> from monitor.config import Config
>>> from alerts.notification import AlertItem, Notification
>>> from monitor.alert_record import AlertRecord
>>> cfg = Config.model_validate({"alerting": {
...     "routing": {"pagerduty": {"severities": ["critical"]}},
...     "route_overrides": [{"routes": ["batch-*"], "routing": {"slack": {"enabled": False}}}],
... }}).alerting
>>> t = datetime(2026, 11, 2, tzinfo=UTC)
>>> def note(route, severity):
...     rec = AlertRecord("below_breakeven", "firing", t, severity, {"route": route}, "s")
...     return Notification("k", {"route": route}, t, (AlertItem(rec, "firing", "e", t),))
>>> [s for s, _ in route_notification(note("code", "warning"), cfg, ["slack", "pagerduty"])]
['slack']
>>> [s for s, _ in route_notification(note("batch-1", "critical"), cfg, ["slack", "pagerduty"])]
['pagerduty']
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from alerts.notification import Notification
from monitor.config import AlertingConfig

__all__ = ["route_notification"]


def route_notification(
    n: Notification, config: AlertingConfig, sinks: Iterable[str]
) -> list[tuple[str, Notification]]:
    """Per sink, the notification restricted to the items that sink admits (sinks that admit
    none are left out)."""
    out = []
    route = n.route
    for sink in sinks:
        f = config.filter_for(sink, route)
        items = tuple(i for i in n.items if f.admits(i.rule, i.severity))
        if items:
            active = tuple(i for i in n.active if f.admits(i.rule, i.severity))
            out.append((sink, replace(n, items=items, active=active)))
    return out
