"""The alert sinks, and which of them a process has.

Sink URLs and keys come only from the environment, so the config file can be checked in:

====================================  =============================================
``SPECWATCH_SLACK_WEBHOOK_URL``       Slack incoming webhook URL
``SPECWATCH_PAGERDUTY_ROUTING_KEY``   PagerDuty Events v2 integration key
``SPECWATCH_PAGERDUTY_URL``           PagerDuty events base URL (EU, tests)
``SPECWATCH_ALERTMANAGER_URL``        Alertmanager base URLs, comma-separated
``SPECWATCH_WEBHOOK_URL``             generic webhook URL
====================================  =============================================

>>> from monitor.config import AlertingConfig
>>> sorted(build_sinks(AlertingConfig(), {"SPECWATCH_WEBHOOK_URL": "https://h.test/x"}))
['log', 'webhook']
>>> build_sinks(AlertingConfig(), {"SPECWATCH_WEBHOOK_URL": "ftp://h.test/s3cr3t"})
Traceback (most recent call last):
...
alerts.sinks.SinkConfigError: SPECWATCH_WEBHOOK_URL must be an http(s) URL with a host
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from alerts.exceptions import AlertError
from alerts.sinks.alertmanager import AlertmanagerSink
from alerts.sinks.base import Episode, HttpRequest, LocalSink, Outcome, Sink
from alerts.sinks.log import LogSink
from alerts.sinks.pagerduty import PagerDutySink
from alerts.sinks.slack import SlackSink
from alerts.sinks.webhook import WebhookSink
from monitor.config import AlertingConfig

__all__ = [
    "ENV", "PAGERDUTY_URL_ENV", "AlertmanagerSink", "Episode", "HttpRequest", "LocalSink",
    "LogSink", "Outcome", "PagerDutySink", "Sink", "SinkConfigError", "SlackSink",
    "WebhookSink", "build_sinks",
]

ENV: dict[str, str] = {
    "slack": "SPECWATCH_SLACK_WEBHOOK_URL",
    "pagerduty": "SPECWATCH_PAGERDUTY_ROUTING_KEY",
    "alertmanager": "SPECWATCH_ALERTMANAGER_URL",
    "webhook": "SPECWATCH_WEBHOOK_URL",
}
PAGERDUTY_URL_ENV = "SPECWATCH_PAGERDUTY_URL"


class SinkConfigError(AlertError):
    """A sink's environment variable is unusable. The message names the variable and
    never quotes its value: that value is often the secret itself."""


def _url(value: str, var: str) -> str:
    problem = f"{var} must be an http(s) URL with a host"
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError on a non-numeric port
    except ValueError:
        raise SinkConfigError(problem) from None  # the cause would quote the value
    if parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in value):
        raise SinkConfigError(problem)
    return value


def _enabled(config: AlertingConfig, name: str) -> bool:
    f = config.routing.get(name)  # type: ignore[call-overload]
    return f is None or bool(f.enabled)


def build_sinks(config: AlertingConfig, env: Mapping[str, str], *,
                clock: Callable[[], float] = time.time) -> dict[str, Sink | LocalSink]:
    """The sinks this process delivers to, by name: each HTTP sink whose variable is set
    (and not disabled in ``routing``), plus ``log`` unless disabled. Raises
    :class:`SinkConfigError` for a malformed URL or key, so a typo fails at start rather
    than at the first page."""
    def value(var: str) -> str:
        return env.get(var, "").strip()

    sinks: dict[str, Sink | LocalSink] = {}
    if (v := value(ENV["slack"])) and _enabled(config, "slack"):
        sinks["slack"] = SlackSink(_url(v, ENV["slack"]), config.slack)
    if (v := value(ENV["pagerduty"])) and _enabled(config, "pagerduty"):
        if any(c.isspace() or not c.isprintable() for c in v):
            raise SinkConfigError(f"{ENV['pagerduty']} must be a single printable token")
        base = value(PAGERDUTY_URL_ENV)
        sinks["pagerduty"] = (
            PagerDutySink(v, config.pagerduty, _url(base, PAGERDUTY_URL_ENV)) if base
            else PagerDutySink(v, config.pagerduty))
    if (v := value(ENV["alertmanager"])) and _enabled(config, "alertmanager"):
        urls = [_url(u, ENV["alertmanager"]) for u in (p.strip() for p in v.split(",")) if u]
        if not urls:  # set but only commas: a broken template, not "no Alertmanager"
            raise SinkConfigError(f"{ENV['alertmanager']} lists no URL")
        sinks["alertmanager"] = AlertmanagerSink(urls, config.alertmanager, clock)
    if (v := value(ENV["webhook"])) and _enabled(config, "webhook"):
        sinks["webhook"] = WebhookSink(_url(v, ENV["webhook"]))
    if _enabled(config, "log"):
        sinks["log"] = LogSink()
    return sinks
