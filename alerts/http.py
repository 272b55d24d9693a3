"""The one place specwatch talks HTTP to a sink. Errors never carry the URL (it may hold a
secret): a failed request comes back as status 0 and a short reason."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import httpx

from alerts.sinks.base import HttpRequest

__all__ = ["HttpAnswer", "HttpClient"]

# httpx logs every request URL at INFO, and httpcore traces requests and response headers
# at DEBUG; a Slack webhook URL (or a webhook's ?token=) is the credential itself. Neither
# may log below WARNING whatever the root level is: the level pin covers a root at DEBUG, and
# the filter covers a logger turned up by name afterwards (setLevel, dictConfig, a test's
# caplog). A logger's filters see only the records logged on it, so each logger that httpx
# and httpcore log on gets its own. The delivery worker's own lines say what was sent.
QUIET_LOGGERS = ("httpx", "httpcore", "httpcore.connection", "httpcore.http11",
                 "httpcore.http2", "httpcore.proxy", "httpcore.socks")


def _warnings_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


for _name in QUIET_LOGGERS:
    _logger = logging.getLogger(_name)
    _logger.setLevel(logging.WARNING)
    if _warnings_only not in _logger.filters:
        _logger.addFilter(_warnings_only)


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """``status`` 0 means no HTTP answer at all (refused, reset, timed out)."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str = ""


class HttpClient:
    """A pooled client with a total timeout per request; never follows redirects (a
    redirected webhook is a misconfiguration to surface, not to follow silently)."""

    def __init__(self, timeout: float = 10.0) -> None:
        self._client = httpx.Client(timeout=timeout, follow_redirects=False)

    def send(self, req: HttpRequest) -> HttpAnswer:
        try:
            r = self._client.request(req.method, req.url, content=req.body,
                                     headers=dict(req.headers))
        except httpx.TimeoutException:
            return HttpAnswer(0, error="timed out")
        except httpx.HTTPError as e:
            # The exception text may quote the URL: keep only the class name.
            return HttpAnswer(0, error=type(e).__name__)
        return HttpAnswer(r.status_code, {k.lower(): v for k, v in r.headers.items()},
                          r.content[:65536])

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
