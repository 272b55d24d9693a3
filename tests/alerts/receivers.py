"""Local HTTP receivers that stand in for Slack, PagerDuty and plain webhooks in tests.

Each receiver is a threaded HTTP server on 127.0.0.1 (an ephemeral port) that records every
request and answers like the real service: it checks the documented format
(``shared/reference/alert-sinks-and-prometheus.md``), records what breaks it in
``.violations`` and rejects it as the service would. A *script* of cue answers overrides the
next requests (``r.respond(429, headers={"Retry-After": "1"}, body=b"rate_limited")``), so
rate limits and outages are reproduced without waiting; a cue of status 0 drops the
connection without answering (a network error). A cued answer is still recorded and checked
but changes no state: the service did not take the request.

Plain objects, no pytest needed::

    with SlackReceiver() as slack:
        client.send(HttpRequest("POST", slack.webhook_url, body, "test"))
        assert not slack.violations and len(slack.messages) == 1

The checks are written from the services' documentation, independently of specwatch's
sinks, so that a sink and its receiver can't share a misreading.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

__all__ = [
    "Incident", "PagerDutyReceiver", "Received", "Receiver", "SlackReceiver",
    "WebhookReceiver", "mrkdwn_problems", "record_problems", "spec_fingerprint",
]

Answer = tuple[int, dict[str, str], bytes]


class Received(NamedTuple):
    """One request as the receiver saw it: header names lower-cased, ``body`` the parsed
    JSON or, when the body is not JSON, the raw bytes."""

    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class _Cue:
    status: int
    headers: dict[str, str]
    body: bytes


def _encode(body: bytes | str | dict[str, Any] | list[Any]) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body).encode()


class Receiver:
    """A recording HTTP server answering 200 with an empty body (or ``default``), with a
    script of cue answers. Subclasses add :meth:`check`, :meth:`reject` and :meth:`accept`.

    Use as a context manager, or :meth:`start` and :meth:`close` by hand.
    """

    def __init__(self, default: Answer = (200, {}, b"")) -> None:
        self.requests: list[Received] = []
        self.raw: list[bytes] = []  # parallel to ``requests``
        self.methods: list[str] = []
        self.violations: list[str] = []
        self._default = default
        self._port = 0
        self._script: deque[_Cue] = deque()
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Receiver:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={
            "poll_interval": 0.05}, name=f"{type(self).__name__}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Any:  # the subclass, for type checkers and readers alike
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``; the port stays known after :meth:`close` (a closed
        receiver's URL is a handy refused connection)."""
        if self._server is not None:
            self._port = self._server.server_address[1]
        return f"http://127.0.0.1:{self._port}"

    # -- the script --------------------------------------------------------------------------

    def respond(self, status: int, *, headers: dict[str, str] | None = None,
                body: bytes | str | dict[str, Any] | list[Any] = b"", times: int = 1) -> None:
        """Answer the next ``times`` requests with this (status 0: drop the connection)."""
        with self._lock:
            for _ in range(times):
                self._script.append(_Cue(status, dict(headers or {}), _encode(body)))

    def clear(self) -> int:
        """Drop the cues not used yet (an outage ends); returns how many there were."""
        with self._lock:
            n = len(self._script)
            self._script.clear()
            return n

    @property
    def pending(self) -> int:
        """Cues not used yet."""
        with self._lock:
            return len(self._script)

    # -- what subclasses refine ----------------------------------------------------------------

    def check(self, method: str, req: Received, raw: bytes) -> list[str]:
        """The request's format problems (none: the base receiver takes anything)."""
        return []

    def reject(self, problems: list[str]) -> Answer:
        return 400, {"Content-Type": "text/plain"}, b"; ".join(p.encode() for p in problems)

    def accept(self, method: str, req: Received, raw: bytes) -> Answer:
        return self._default

    # -- the server side -----------------------------------------------------------------------

    def _handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> _Cue:
        try:
            body: Any = json.loads(raw) if raw else raw
        except (ValueError, UnicodeDecodeError):
            body = raw
        req = Received(path, headers, body)
        with self._lock:
            index = len(self.requests)
            self.requests.append(req)
            self.raw.append(raw)
            self.methods.append(method)
            problems = self.check(method, req, raw)
            self.violations += [f"request {index} ({path}): {p}" for p in problems]
            if self._script:
                return self._script.popleft()
            status, h, b = self.reject(problems) if problems else self.accept(method, req, raw)
            return _Cue(status, h, b)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            cue = receiver._handle(self.command, self.path, headers, raw)
            if cue.status == 0:
                self.close_connection = True  # no answer at all: the client sees an error
                return
            self.send_response(cue.status)
            for k, v in cue.headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(cue.body)))
            self.end_headers()
            self.wfile.write(cue.body)

        do_POST = do_PUT = do_GET = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- stdlib name
            pass  # keep test output clean

    return Handler


# -- Slack ---------------------------------------------------------------------------------------

# What may follow "<" in mrkdwn we send: a link with an optional label, or a date with its
# fallback. Mentions (<!channel>, <@U…>, <#C…>) are never legitimate in an alert.
_LINK = re.compile(r"<(?:https?://|mailto:)[^\s<>|]+(?:\|([^<>]*))?>")
_DATE = re.compile(r"<!date\^\d+\^[^|<>]+(?:\^[^|<>]+)?\|([^<>]*)>")
_ENTITY = re.compile(r"&(?:amp|lt|gt);")


def _bare_amps(s: str) -> int:
    return s.count("&") - len(_ENTITY.findall(s))


def mrkdwn_problems(text: str) -> list[str]:
    """Unescaped control characters in mrkdwn: an ``&`` that is not ``&amp;``/``&lt;``/
    ``&gt;``, a ``<`` that doesn't open a link or date construct, a stray ``>``.

    >>> mrkdwn_problems("a &amp; b <https://x.test|docs> <!date^1^{time}|14:20>")
    []
    >>> [p.split(" at ")[0] for p in mrkdwn_problems("<!channel> a&b")]
    ["'<' outside a link or date", "stray '>'", "bare '&'"]
    """
    problems: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "<":
            m = _LINK.match(text, i) or _DATE.match(text, i)
            if m is None:
                problems.append(f"'<' outside a link or date at {i}: {text[i:i + 20]!r}")
                i += 1
                continue
            if m.group(1) and _bare_amps(m.group(1)):
                problems.append(f"bare '&' in a label at {i}: {m.group(0)[:40]!r}")
            i = m.end()
            continue
        if c == "&":
            if not _ENTITY.match(text, i):
                problems.append(f"bare '&' at {i}: {text[max(0, i - 1):i + 20]!r}")
        elif c == ">":
            problems.append(f"stray '>' at {i}: {text[max(0, i - 20):i + 1]!r}")
        i += 1
    return problems


_BLOCK_TYPES = frozenset({"header", "section", "context", "divider", "image", "actions",
                          "rich_text", "markdown", "input", "file", "video"})


def _text_object(obj: Any, where: str, limit: int, kinds: tuple[str, ...]) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        return [f"{where}: text object must be of type {'/'.join(kinds)}"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"{where}: empty text"]
    out = []
    if len(text) > limit:
        out.append(f"{where}: {len(text)} characters (limit {limit})")
    if obj["type"] == "mrkdwn":
        out += [f"{where}: {p}" for p in mrkdwn_problems(text)]
    return out


def _block_problems(i: int, b: Any, ids: set[str]) -> list[str]:
    where = f"blocks[{i}]"
    if not isinstance(b, dict) or b.get("type") not in _BLOCK_TYPES:
        return [f"{where}: unknown block type"]
    out = []
    if "block_id" in b:
        bid = b["block_id"]
        if not isinstance(bid, str) or not 0 < len(bid) <= 255 or bid in ids:
            out.append(f"{where}: block_id missing, over 255 characters or repeated")
        else:
            ids.add(bid)
    kind = b["type"]
    if kind == "header":
        out += _text_object(b.get("text"), f"{where} header", 150, ("plain_text",))
    elif kind == "section":
        if "text" not in b and "fields" not in b:
            out.append(f"{where}: section needs text or fields")
        if "text" in b:
            out += _text_object(b["text"], f"{where} section", 3000, ("mrkdwn", "plain_text"))
        if "fields" in b:
            fields = b["fields"]
            if not isinstance(fields, list) or not 0 < len(fields) <= 10:
                out.append(f"{where}: fields must be 1 to 10 items")
            else:
                for j, f in enumerate(fields):
                    out += _text_object(f, f"{where} fields[{j}]", 2000,
                                        ("mrkdwn", "plain_text"))
    elif kind == "context":
        elements = b.get("elements")
        if not isinstance(elements, list) or not 0 < len(elements) <= 10:
            out.append(f"{where}: context needs 1 to 10 elements")
        else:
            for j, e in enumerate(elements):
                if isinstance(e, dict) and e.get("type") == "image":
                    continue
                out += _text_object(e, f"{where} elements[{j}]", 3000, ("mrkdwn", "plain_text"))
    return out


class SlackReceiver(Receiver):
    """A Slack incoming webhook at :attr:`webhook_url`: 200 ``ok`` for a valid message, 400
    ``invalid_payload`` for a broken one, 404 ``no_service`` for any other path (a revoked
    or mistyped webhook). ``.messages``: the payloads it accepted."""

    def __init__(self, token_path: str = "/services/T0000TEST/B0000TEST/s3cr3tT0kenV4lue42xyz"
                 ) -> None:
        super().__init__()
        self.token_path = token_path
        self.messages: list[dict[str, Any]] = []

    @property
    def webhook_url(self) -> str:
        return self.url + self.token_path

    def check(self, method: str, req: Received, raw: bytes) -> list[str]:
        if req.path != self.token_path:
            return []  # Slack answers no_service before looking at the body
        out = []
        if method != "POST":
            out.append(f"method {method}, not POST")
        if not req.headers.get("content-type", "").startswith("application/json"):
            out.append("Content-Type is not application/json")
        body = req.body
        if not isinstance(body, dict):
            return [*out, "body is not a JSON object"]
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            out.append("no text (the fallback is required with blocks)")
        else:
            if len(text) > 40_000:
                out.append(f"text of {len(text)} characters (Slack truncates past 40000)")
            out += [f"text: {p}" for p in mrkdwn_problems(text)]
        blocks = body.get("blocks")
        if blocks is not None:
            if not isinstance(blocks, list):
                out.append("blocks is not a list")
            else:
                if len(blocks) > 50:
                    out.append(f"{len(blocks)} blocks (limit 50)")
                ids: set[str] = set()
                for i, b in enumerate(blocks):
                    out += _block_problems(i, b, ids)
        return out

    def reject(self, problems: list[str]) -> Answer:
        return 400, {"Content-Type": "text/plain"}, b"invalid_payload"

    def accept(self, method: str, req: Received, raw: bytes) -> Answer:
        if req.path != self.token_path:
            return 404, {"Content-Type": "text/plain"}, b"no_service"
        self.messages.append(req.body)
        return 200, {"Content-Type": "text/plain"}, b"ok"


# -- PagerDuty -----------------------------------------------------------------------------------

@dataclass
class Incident:
    """One PagerDuty alert, opened by a trigger and kept open until resolved. ``number`` is
    the order of opening (1-based); ``opened_at`` the first trigger's payload timestamp
    (or arrival when it had none); ``resolved_at`` the arrival of the resolve."""

    dedup_key: str
    number: int
    routing_key: str
    opened_at: datetime
    summary: str
    severity: str
    triggers: int = 1
    acknowledged: bool = False
    resolved: bool = False
    resolved_at: datetime | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


_PD_SEVERITIES = frozenset({"critical", "error", "warning", "info"})
_PD_ACTIONS = frozenset({"trigger", "acknowledge", "resolve"})
_PD_BODY_MAX = 512_000


def _iso_problem(value: Any, where: str) -> list[str]:
    if not isinstance(value, str):
        return [f"{where} is not a string"]
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return [f"{where} is not ISO 8601: {value[:40]!r}"]
    return [] if t.tzinfo is not None else [f"{where} has no time zone"]


def _summary_problems(payload: dict[str, Any]) -> list[str]:
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary:
        return ["payload.summary is required"]
    if len(summary) > 1024:
        return [f"payload.summary of {len(summary)} characters (limit 1024)"]
    return []


class PagerDutyReceiver(Receiver):
    """PagerDuty's Events API v2 (``/v2/enqueue``) and change events
    (``/v2/change/enqueue``): 202 for a valid event, 400 ``invalid event`` otherwise.

    Models the dedup rules: per (routing key, dedup key) at most one open alert; a trigger
    on it merges (``triggers`` += 1), a resolve closes it, a trigger on a closed key opens a
    *new* incident, an acknowledge or resolve on an unknown or closed key is dropped
    (``.dropped``). ``.incidents`` in opening order; ``.change_events`` the accepted
    change-event bodies.
    """

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        super().__init__()
        self.clock = clock
        self.incidents: list[Incident] = []
        self.change_events: list[dict[str, Any]] = []
        self.dropped: list[dict[str, Any]] = []
        self._open: dict[tuple[str, str], Incident] = {}

    def open_incidents(self) -> list[Incident]:
        return [i for i in self.incidents if not i.resolved]

    def incidents_for(self, dedup_key: str) -> list[Incident]:
        return [i for i in self.incidents if i.dedup_key == dedup_key]

    def check(self, method: str, req: Received, raw: bytes) -> list[str]:
        if req.path not in ("/v2/enqueue", "/v2/change/enqueue"):
            return [f"unknown path {req.path}"]
        out = []
        if method != "POST":
            out.append(f"method {method}, not POST")
        if len(raw) > _PD_BODY_MAX:
            out.append(f"body of {len(raw)} bytes (limit {_PD_BODY_MAX})")
        body = req.body
        if not isinstance(body, dict):
            return [*out, "body is not a JSON object"]
        key = body.get("routing_key")
        if not isinstance(key, str) or len(key) != 32:
            out.append("Length of 'routing_key' is incorrect (should be 32 characters)")
        payload = body.get("payload")
        if req.path == "/v2/change/enqueue":
            if "event_action" in body or "dedup_key" in body:
                out.append("change events take no event_action or dedup_key")
            if not isinstance(payload, dict):
                return [*out, "payload is required"]
            out += _summary_problems(payload)
            if "source" in payload and not isinstance(payload["source"], str):
                out.append("payload.source is not a string")
            if "timestamp" in payload:
                out += _iso_problem(payload["timestamp"], "payload.timestamp")
            return out
        action = body.get("event_action")
        if action not in _PD_ACTIONS:
            out.append(f"event_action {action!r} is not trigger, acknowledge or resolve")
        dedup = body.get("dedup_key")
        if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
            out.append("dedup_key must be a string of 1 to 255 characters")
        if action in ("acknowledge", "resolve") and dedup is None:
            out.append(f"dedup_key is required to {action}")
        if action == "trigger":
            if not isinstance(payload, dict):
                return [*out, "payload is required for trigger"]
            out += _summary_problems(payload)
            if not isinstance(payload.get("source"), str) or not payload["source"]:
                out.append("payload.source is required")
            if payload.get("severity") not in _PD_SEVERITIES:
                out.append(f"payload.severity {payload.get('severity')!r} is not in the enum")
            if "timestamp" in payload:
                out += _iso_problem(payload["timestamp"], "payload.timestamp")
            for k in ("component", "group", "class"):
                if k in payload and not isinstance(payload[k], str):
                    out.append(f"payload.{k} is not a string")
            if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
                out.append("payload.custom_details is not an object")
        return out

    def reject(self, problems: list[str]) -> Answer:
        if any(p.startswith("unknown path") for p in problems):
            return 404, {"Content-Type": "application/json"}, b'{"status":"not found"}'
        body = {"status": "invalid event", "message": "Event object is invalid",
                "errors": problems}
        return 400, {"Content-Type": "application/json"}, json.dumps(body).encode()

    def accept(self, method: str, req: Received, raw: bytes) -> Answer:
        body = req.body
        if req.path == "/v2/change/enqueue":
            self.change_events.append(body)
            return 202, {"Content-Type": "application/json"}, json.dumps(
                {"status": "success", "message": "Change event processed"}).encode()
        action = body["event_action"]
        key = body.get("dedup_key") or uuid.uuid4().hex  # PD makes one up for a bare trigger
        slot = (body["routing_key"], key)
        inc = self._open.get(slot)
        if action == "trigger":
            if inc is None:
                payload = body["payload"]
                ts = payload.get("timestamp")
                opened = (datetime.fromisoformat(ts.replace("Z", "+00:00")) if ts
                          else self.clock())
                inc = Incident(key, len(self.incidents) + 1, body["routing_key"], opened,
                               payload["summary"], payload["severity"])
                self.incidents.append(inc)
                self._open[slot] = inc
            else:
                inc.triggers += 1
            inc.events.append(body)
        elif inc is None:
            self.dropped.append(body)
        elif action == "acknowledge":
            inc.acknowledged = True
            inc.events.append(body)
        else:
            inc.resolved, inc.resolved_at = True, self.clock()
            inc.events.append(body)
            del self._open[slot]
        return 202, {"Content-Type": "application/json"}, json.dumps(
            {"status": "success", "message": "Event processed", "dedup_key": key}).encode()


# -- webhook -------------------------------------------------------------------------------------

# From shared/spec/alerts-v1.md, restated here rather than imported: the receiver checks
# specwatch against the spec, not against itself.
_RULES = frozenset({
    "acceptance_drop", "below_breakeven", "throughput_drop", "revision_mismatch",
    "tokenizer_mismatch", "memory_contention", "telemetry_stale", "speculation_inactive",
    "output_mismatch", "acceptance_rise",
})
_RECORD_KEYS = frozenset({"rule", "state", "at", "severity", "labels", "summary", "details",
                          "fingerprint"})
_KINDS = {"trigger": "firing", "reminder": "firing", "resolve": "resolved"}


def spec_fingerprint(rule: str, labels: dict[str, str]) -> str:
    """The alerts-v1 fingerprint: the first 16 hex digits of SHA-256 over the compact JSON
    of ``[rule, labels]`` with sorted keys."""
    canonical = json.dumps([rule, labels], sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def record_problems(body: Any) -> list[str]:
    """How ``body`` breaks the alerts-v1 record format (empty: it doesn't)."""
    if not isinstance(body, dict):
        return ["body is not a JSON object"]
    out = []
    if set(body) != _RECORD_KEYS:
        out.append(f"keys {sorted(body)} are not exactly {sorted(_RECORD_KEYS)}")
    if body.get("rule") not in _RULES:
        out.append(f"unknown rule {body.get('rule')!r}")
    if body.get("state") not in ("firing", "resolved"):
        out.append(f"state {body.get('state')!r} is not firing or resolved")
    at = body.get("at")
    if not isinstance(at, str) or not at.endswith("Z"):
        out.append("at is not an RFC 3339 UTC time ending in Z")
    else:
        out += _iso_problem(at, "at")
    if body.get("severity") not in _PD_SEVERITIES:
        out.append(f"severity {body.get('severity')!r} is not in the enum")
    labels = body.get("labels")
    if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        out.append("labels is not an object of strings")
        labels = None
    elif not labels.get("route"):
        out.append("labels.route is required")
    if not isinstance(body.get("summary"), str):
        out.append("summary is not a string")
    if not isinstance(body.get("details"), dict):
        out.append("details is not an object")
    fp = body.get("fingerprint")
    if labels is not None and isinstance(body.get("rule"), str) and (
            fp != spec_fingerprint(body["rule"], labels)):
        out.append(f"fingerprint {fp!r} does not match rule and labels")
    return out


class WebhookReceiver(Receiver):
    """A webhook endpoint taking alerts-v1 records: 200 for a valid one, 400 otherwise.
    With ``require_headers`` (the default) the ``X-Specwatch-*`` headers must be present
    and agree with the record's state. ``.records``: accepted records;
    ``.deliveries``: (key, kind, episode, record) of each."""

    def __init__(self, require_headers: bool = True) -> None:
        super().__init__()
        self.require_headers = require_headers
        self.records: list[dict[str, Any]] = []
        self.deliveries: list[tuple[str, str, str, dict[str, Any]]] = []

    def check(self, method: str, req: Received, raw: bytes) -> list[str]:
        out = [] if method == "POST" else [f"method {method}, not POST"]
        if not req.headers.get("content-type", "").startswith("application/json"):
            out.append("Content-Type is not application/json")
        out += record_problems(req.body)
        if self.require_headers:
            kind = req.headers.get("x-specwatch-notification")
            if kind not in _KINDS:
                out.append(f"X-Specwatch-Notification {kind!r} is not trigger/reminder/resolve")
            elif isinstance(req.body, dict) and req.body.get("state") != _KINDS[kind]:
                out.append(f"X-Specwatch-Notification {kind} with state {req.body.get('state')}")
            for h in ("x-specwatch-episode", "x-specwatch-key"):
                if not req.headers.get(h):
                    out.append(f"header {h} missing")
        return out

    def accept(self, method: str, req: Received, raw: bytes) -> Answer:
        self.records.append(req.body)
        h = req.headers
        self.deliveries.append((h.get("x-specwatch-key", ""), h.get("x-specwatch-notification",
                                ""), h.get("x-specwatch-episode", ""), req.body))
        return 200, {}, b""
