"""Text helpers the sinks share: Slack escaping, truncation, timestamps and the small
parsing of answers (``Retry-After``, error bodies) that every ``classify`` needs.

Lengths are counted in characters (code points), which is how the services state their
limits; nothing here ever sees a URL or a key, so reasons built from it are secret-free
as long as callers pass only answers' bodies.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import orjson

__all__ = [
    "ELLIPSIS", "answer_code", "compact_json", "header", "retry_after", "rfc3339",
    "reason", "scrub", "slack_escape", "truncate", "truncate_mrkdwn", "one_line", "url_secrets",
]

ELLIPSIS = "…"

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def slack_escape(s: str) -> str:
    """Slack's three control characters as entities, ``&`` first so the others' ``&``
    is not escaped twice; nothing else (Slack decodes only these three).

    >>> slack_escape("a&b<c> <!channel>")
    'a&amp;b&lt;c&gt; &lt;!channel&gt;'
    >>> slack_escape("🚀 مسار 'x' \\"y\\" |")
    '🚀 مسار \\'x\\' "y" |'
    """
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(s: str, n: int) -> str:
    """``s`` if it fits in ``n`` characters, else its start ending in "…" (``n`` in all).

    >>> truncate("abcdef", 4)
    'abc…'
    >>> truncate("abc", 3)
    'abc'
    >>> truncate("abc", 0)
    ''
    """
    if len(s) <= n:
        return s
    if n <= 0:
        return ""
    return s[: n - 1] + ELLIPSIS


_PARTIAL_ENTITY = re.compile(r"&[a-z]*$")


def truncate_mrkdwn(s: str, n: int) -> str:
    """:func:`truncate` for escaped mrkdwn: never cuts an entity (``&amp;``) or one of our
    own ``<…>`` constructs in half, since a half construct is what Slack rejects or shows
    raw. Every ``<`` left in escaped text is ours, so an unclosed one is cut whole.

    >>> truncate_mrkdwn("a &amp; b", 5)
    'a …'
    >>> truncate_mrkdwn("x <!date^1^{time}|14:20> y", 10)
    'x …'
    """
    if len(s) <= n:
        return s
    if n <= 0:
        return ""
    head = s[: n - 1]
    lt = head.rfind("<")
    if lt > head.rfind(">"):
        head = head[:lt]
    head = _PARTIAL_ENTITY.sub("", head)
    return head + ELLIPSIS


def one_line(s: str) -> str:
    """Control characters and line breaks as single spaces (log lines, headers, reasons).

    >>> one_line("a\\nb\\r\\n\\tc")
    'a b c'
    """
    return _CONTROL.sub(" ", s)


def rfc3339(t: datetime) -> str:
    """UTC with a ``Z``, the form every receiver here accepts.

    >>> rfc3339(datetime(2026, 11, 2, 14, 20, tzinfo=UTC))
    '2026-11-02T14:20:00Z'
    """
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def compact_json(value: Any) -> str:
    """Deterministic, compact JSON; values JSON cannot hold become their ``str``.

    >>> compact_json({"b": 1, "a": [0.5, None]})
    '{"a":[0.5,null],"b":1}'
    """
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
                        default=str).decode()


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, whatever its case (:class:`HttpAnswer` lowercases them, a test's
    dict may not).

    >>> header({"Retry-After": "3"}, "retry-after")
    '3'
    """
    want = name.lower()
    for k, v in headers.items():
        if k.lower() == want:
            return v
    return None


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait from ``Retry-After``: delay-seconds or an HTTP-date (RFC 9110).
    ``None`` when absent or unreadable; a date in the past gives 0.

    >>> retry_after({"retry-after": "30"})
    30.0
    >>> retry_after({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"},
    ...             now=datetime(2015, 10, 21, 7, 28, tzinfo=UTC).timestamp())
    10.0
    >>> retry_after({"Retry-After": "soon"}) is None
    True
    """
    raw = header(headers, "retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP-dates are GMT by definition
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def scrub(s: str, secrets: Iterable[str]) -> str:
    """``s`` with every non-trivial secret replaced: a service that echoes our request
    back in an error must not leak the key into logs.

    >>> scrub("bad key abcdefgh", ["abcdefgh", ""])
    'bad key [redacted]'
    """
    for secret in secrets:
        if len(secret) >= 4:
            s = s.replace(secret, "[redacted]")
    return s


def url_secrets(url: str) -> list[str]:
    """What a receiver's error body might echo of a sink URL that carries a credential: the
    URL, its path and query, long path segments (a token in the path), query values, and
    the userinfo (also Base64-encoded, as it travels in ``Authorization: Basic``). Longest
    first, for :func:`scrub`.

    >>> url_secrets("http://am:pw0rd@h:9093/hook?token=t0k3n&x=1")[2:]
    ['YW06cHcwcmQ=', 'am:pw0rd', '/hook', 'pw0rd', 't0k3n']
    """
    try:
        parts = urlsplit(url)
        username, password = parts.username, parts.password
    except ValueError:
        return [url]
    found = {url, parts.path, parts.query, unquote(parts.path)}
    found.update(p for p in parts.path.split("/") if len(p) >= 8)
    found.update(v for _, v in parse_qsl(parts.query, keep_blank_values=True))
    if password:
        userinfo = f"{unquote(username or '')}:{unquote(password)}"
        found.update({password, unquote(password), userinfo,
                      base64.b64encode(userinfo.encode()).decode()})
    return sorted((s for s in found if len(s) >= 4), key=lambda s: (-len(s), s))


def answer_code(body: bytes, n: int = 100, secrets: Iterable[str] = ()) -> str:
    """The short, printable text of an error body (Slack's ``no_service``; the message of a
    JSON error), scrubbed of ``secrets`` and then capped at ``n`` characters (in that order,
    so a cut can't leave a secret's prefix behind).

    >>> answer_code(b"no_service\\n")
    'no_service'
    >>> answer_code(b'{"status":"invalid event","message":"Event object is invalid"}')
    'invalid event: Event object is invalid'
    >>> answer_code(b'{"code":602,"message":"0.labels in body is required"}')
    '0.labels in body is required'
    """
    text = body.decode("utf-8", "replace").strip()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        parts = [str(data[k]) for k in ("error", "status", "message") if data.get(k)]
        errors = data.get("errors")
        if isinstance(errors, list) and errors:
            parts.append(str(errors[0]))
        if parts:
            text = ": ".join(parts)
    return truncate(scrub(" ".join(one_line(text).split()), secrets), n)


def reason(status: int, body: bytes, secrets: Iterable[str] = ()) -> str:
    """An :class:`Outcome` reason: the status and the service's own short code, scrubbed
    of ``secrets`` (never the URL: callers don't have it here).

    >>> reason(404, b"no_service")
    'HTTP 404 no_service'
    >>> reason(500, b"")
    'HTTP 500'
    >>> reason(0, b"")
    'no answer (network error or timeout)'
    """
    if status == 0:
        return "no answer (network error or timeout)"
    code = answer_code(body, secrets=secrets)
    return f"HTTP {status} {code}".rstrip()
