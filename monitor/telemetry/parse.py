"""Raw Kafka message values (or replay-file lines) to validated telemetry v1 events.

The validator is deliberately straight-line code: parsing is the largest share of ingest cost,
so it avoids per-field helper calls on the happy path and only builds reason strings (through
the ``_*_problem`` helpers) once something is already wrong.

A fast path runs first: msgspec decodes and type-checks the whole message against the Structs
in ``schema.py`` and ``_fast_event`` applies the cross-field rules. If anything in the message
fails there, the message (or, for JSON lines, the line) is parsed again the slow way, by orjson
and ``event_from_obj``, which stays the single source of truth for rejections and their reasons.
``tests/monitor/telemetry/test_fast_parse.py`` checks that both paths give identical results.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields
from datetime import datetime
from typing import Any

import orjson

from monitor.telemetry.event import STATUSES, Event, Rejection
from monitor.telemetry.exceptions import InvalidEvent
from monitor.telemetry.schema import RawEvent
from monitor.telemetry.schema import decode_message as _fast_decode

__all__ = ["Parser", "event_from_obj"]

MAX_ID_CHARS = 128  # request_id, route
MAX_NAME_CHARS = 256  # model names, revisions, tokenizers and the other descriptive strings
MAX_SPEC_TOKENS = 64
MAX_COUNT = 10**9  # token counts and the like; anything above is a producer bug, not traffic
MAX_MS = 1e10  # ~116 days; also the bound of the other non-negative numbers
MAX_TAGS = 16
MAX_HASH_CHARS = 128  # prompt_hash, output_hash
TS_MIN = 946684800.0  # 2000-01-01T00:00:00Z
TS_MAX = 4102444800.0  # 2100-01-01T00:00:00Z, exclusive

# fromisoformat alone accepts far more than RFC 3339 (week dates, "+0530", "14:03Z", ","),
# so the shape is checked first. Space for "T" is the RFC's own readability allowance.
_rfc3339 = re.compile(
    r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(?:\.\d+)?(?:[Zz]|[+-]\d\d:\d\d)", re.ASCII
).fullmatch
_fromisoformat = datetime.fromisoformat
_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError

# event_from_obj builds Event positionally (3x cheaper than keywords); fail loudly at import
# rather than silently shift values if someone reorders the dataclass.
_EVENT_ORDER = (
    "request_id", "ts", "route", "status", "target_model", "target_revision",
    "target_tokenizer", "output_tokens", "e2e_ms", "draft_model", "draft_revision",
    "draft_tokenizer", "pinned_target_revision", "has_spec", "num_speculative_tokens",
    "drafted_tokens", "accepted_tokens", "verify_steps", "accepted_per_position", "method",
    "prompt_tokens", "ttft_ms", "batch_size", "instance", "engine", "draft_evicted",
    "temperature",
)  # fmt: skip
# The v1.1 fields are set by name, and only on events that carry any: in CPython 3.11 twelve
# more arguments to Event() cost ~0.5 us per event (~8% of a fast-path parse), measured, and
# most traffic has none of them.
_V11_FIELDS = (
    "tags", "outcome_ok", "outcome_schema_valid", "outcome_tool_calls_valid", "experiment_name",
    "experiment_arm", "itl_p50_ms", "itl_p99_ms", "itl_max_ms", "gpu_seconds", "prompt_hash",
    "output_hash",
)  # fmt: skip
_names = tuple(f.name for f in fields(Event))
if _names[: len(_EVENT_ORDER)] != _EVENT_ORDER or not set(_V11_FIELDS) <= set(_names):
    raise ImportError("Event fields changed; update event_from_obj in telemetry/parse.py")
del _names


class Parser:
    """Turns one message into events and rejections; never raises.

    A message is one JSON object, a JSON array of objects (a batch) or JSON lines (each line an
    object or a batch); a message that does not parse whole is read as JSON lines only if at
    least one of its lines is a JSON object or array, else it is one rejection. Messages over
    ``max_message_bytes`` are rejected unread. An empty batch is harmless and yields nothing.

    Rejections of a batch element carry its position as ``index`` and the element
    re-serialised as ``raw``; for a line of JSON lines, ``index`` is the 0-based line number
    (an element of a batch on that line has its position in the reason). Message-level
    rejections have ``index=None`` and the whole message as ``raw``.

    >>> ok = {"request_id": "r-1", "ts": "2026-11-02T14:03:07Z", "route": "chat",
    ...       "target": {"model": "m", "revision": "1", "tokenizer": "t"},
    ...       "output_tokens": 9, "e2e_ms": 120.5}
    >>> events, rejections = Parser().parse(orjson.dumps([ok, {**ok, "e2e_ms": -1}]))
    >>> [(e.route, e.ts, e.status) for e in events]
    [('chat', 1793628187.0, 'ok')]
    >>> [(r.index, r.reason) for r in rejections]
    [(1, 'e2e_ms must be >= 0 (got -1)')]
    """

    __slots__ = ("max_message_bytes", "fast")

    def __init__(self, max_message_bytes: int = 1 << 20, *, fast: bool = True) -> None:
        """``fast=False`` turns the msgspec fast path off (same results, slower)."""
        if max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be >= 1, got {max_message_bytes}")
        self.max_message_bytes = max_message_bytes
        self.fast = fast

    def parse(self, raw: bytes) -> tuple[list[Event], list[Rejection]]:
        """Valid events and rejections (with reasons) of one message."""
        try:
            return self._parse(raw)
        except Exception as exc:  # last resort: one poison message must not stop ingest
            whole = raw if isinstance(raw, bytes) else b""
            return [], [Rejection(f"internal error: {type(exc).__name__}: {exc}", whole)]

    def _parse(self, raw: bytes) -> tuple[list[Event], list[Rejection]]:
        if type(raw) is not bytes:
            raw = bytes(raw)  # bytearray / memoryview from a client library
        size = len(raw)
        if size > self.max_message_bytes:
            reason = f"message too large: {size} bytes > limit {self.max_message_bytes}"
            return [], [Rejection(reason, raw)]
        if self.fast:
            fast = _fast_parse(raw)
            if fast is not None:
                return fast, []
        try:
            doc = _loads(raw)
        except _JSONDecodeError as exc:
            if not raw.strip():
                return [], [Rejection("empty message", raw)]
            if b"\n" in raw:
                events, rejections, any_container = _parse_lines(raw, self.fast)
                if any_container:
                    return events, rejections
            # not JSON lines either (say, a truncated pretty-printed object): one rejection,
            # rather than one per line of noise
            return [], [Rejection(_decode_problem(raw, exc), raw)]
        if type(doc) is list:
            return _parse_batch(doc, raw, None)
        try:
            return [event_from_obj(doc)], []
        except InvalidEvent as exc:
            reason = exc.reason
            if type(doc) is not dict:
                reason = f"message must be a JSON object or array (got {_kind(doc)})"
            return [], [Rejection(reason, raw)]


def _parse_lines(raw: bytes, fast: bool = False) -> tuple[list[Event], list[Rejection], bool]:
    """Events and rejections of JSON lines, and whether any line was a JSON object or array.

    A lone number is no evidence of JSON lines: a pretty-printed array has such lines.
    """
    events: list[Event] = []
    rejections: list[Rejection] = []
    any_container = False
    for number, line in enumerate(raw.split(b"\n")):
        if not line.strip():
            continue
        if fast:
            found = _fast_parse(line)
            if found is not None:  # the line was an event or a batch of valid events
                any_container = True
                events += found
                continue
        try:
            doc = _loads(line)
        except _JSONDecodeError as exc:
            rejections.append(Rejection(_decode_problem(line, exc), line, number))
            continue
        if type(doc) is list:
            any_container = True
            found, rejected = _parse_batch(doc, line, number)
            events += found
            rejections += rejected
            continue
        any_container |= type(doc) is dict
        try:
            events.append(event_from_obj(doc))
        except InvalidEvent as exc:
            reason = exc.reason
            if type(doc) is not dict:
                reason = f"line must be a JSON object or array (got {_kind(doc)})"
            rejections.append(Rejection(reason, line, number))
    return events, rejections, any_container


def _parse_batch(
    doc: list[object], whole: bytes, line: int | None
) -> tuple[list[Event], list[Rejection]]:
    events: list[Event] = []
    rejections: list[Rejection] = []
    add = events.append
    for i, obj in enumerate(doc):
        try:
            add(event_from_obj(obj))
        except InvalidEvent as exc:
            reason = exc.reason if line is None else f"element {i}: {exc.reason}"
            rejections.append(Rejection(reason, _dump(obj, whole), i if line is None else line))
        except Exception as exc:  # a validator bug must cost one element, not the batch
            reason = f"internal error: {type(exc).__name__}: {exc}"
            rejections.append(Rejection(reason, _dump(obj, whole), i if line is None else line))
    return events, rejections


def _dump(obj: object, whole: bytes) -> bytes:
    try:
        return _dumps(obj)
    except orjson.JSONEncodeError:
        # orjson writes at most 255 levels but reads 1024; keep the evidence as the message
        return whole


def _decode_problem(raw: bytes, exc: orjson.JSONDecodeError) -> str:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"invalid UTF-8 at byte {bad.start}"
    message = str(exc)
    if "depth limit" in message or "recursion" in message.lower():
        return f"invalid JSON: nesting too deep ({message})"
    return f"invalid JSON: {message}"


def event_from_obj(obj: object) -> Event:
    """Validate one decoded JSON value; raises ``InvalidEvent`` naming the first problem.

    >>> event_from_obj({"request_id": "r-1"})
    Traceback (most recent call last):
    ...
    monitor.telemetry.exceptions.InvalidEvent: missing required field: ts
    """
    if type(obj) is not dict:
        raise InvalidEvent(f"event must be a JSON object (got {_kind(obj)})")
    get = obj.get

    request_id = get("request_id")
    if type(request_id) is not str or not 0 < len(request_id) <= MAX_ID_CHARS:
        raise InvalidEvent(_str_problem("request_id", request_id, MAX_ID_CHARS))

    raw_ts = get("ts")
    kind = type(raw_ts)
    if kind is str:
        ts = _read_ts_text(raw_ts)
        if ts is None:
            raise InvalidEvent(_ts_problem(raw_ts))
    elif kind is float:
        ts = raw_ts
    elif kind is int and TS_MIN <= raw_ts < TS_MAX:
        ts = float(raw_ts)
    else:
        raise InvalidEvent(_ts_problem(raw_ts))
    if not TS_MIN <= ts < TS_MAX:
        raise InvalidEvent(_ts_problem(raw_ts))

    route = get("route")
    if type(route) is not str or not 0 < len(route) <= MAX_ID_CHARS:
        raise InvalidEvent(_str_problem("route", route, MAX_ID_CHARS))

    status = get("status")
    if status is None:
        status = "ok"
    elif type(status) is not str or status not in STATUSES:
        raise InvalidEvent(
            f"status must be one of {', '.join(sorted(STATUSES))} (got {_show(status)})"
        )

    target = get("target")
    if type(target) is not dict:
        raise InvalidEvent(_object_problem("target", target))
    tget = target.get
    target_model = tget("model")
    if type(target_model) is not str or not 0 < len(target_model) <= MAX_NAME_CHARS:
        raise InvalidEvent(_str_problem("target.model", target_model, MAX_NAME_CHARS))
    target_revision = tget("revision")
    if type(target_revision) is not str or not 0 < len(target_revision) <= MAX_NAME_CHARS:
        raise InvalidEvent(_str_problem("target.revision", target_revision, MAX_NAME_CHARS))
    target_tokenizer = tget("tokenizer")
    if type(target_tokenizer) is not str or not 0 < len(target_tokenizer) <= MAX_NAME_CHARS:
        raise InvalidEvent(_str_problem("target.tokenizer", target_tokenizer, MAX_NAME_CHARS))

    draft = get("draft")
    if draft is None:
        draft_model = draft_revision = draft_tokenizer = pinned = None
    elif type(draft) is dict:
        dget = draft.get
        draft_model = dget("model")
        if type(draft_model) is not str or not 0 < len(draft_model) <= MAX_NAME_CHARS:
            raise InvalidEvent(_str_problem("draft.model", draft_model, MAX_NAME_CHARS))
        draft_revision = dget("revision")
        if type(draft_revision) is not str or not 0 < len(draft_revision) <= MAX_NAME_CHARS:
            raise InvalidEvent(_str_problem("draft.revision", draft_revision, MAX_NAME_CHARS))
        draft_tokenizer = dget("tokenizer")
        if type(draft_tokenizer) is not str or not 0 < len(draft_tokenizer) <= MAX_NAME_CHARS:
            raise InvalidEvent(_str_problem("draft.tokenizer", draft_tokenizer, MAX_NAME_CHARS))
        pinned = dget("pinned_target_revision")
        if pinned is not None and (type(pinned) is not str or len(pinned) > MAX_NAME_CHARS):
            raise InvalidEvent(_str_problem("draft.pinned_target_revision", pinned, 0))
    else:
        raise InvalidEvent(_object_problem("draft", draft))

    spec = get("spec")
    if spec is None:
        has_spec = False
        nst = drafted = accepted = 0
        verify_steps = per_position = method = None
    elif type(spec) is dict:
        has_spec = True
        sget = spec.get
        nst = sget("num_speculative_tokens")
        if type(nst) is not int or nst < 1 or nst > MAX_SPEC_TOKENS:
            raise InvalidEvent(_int_problem("spec.num_speculative_tokens", nst, 1, MAX_SPEC_TOKENS))
        drafted = sget("drafted_tokens")
        if type(drafted) is not int or drafted < 0 or drafted > MAX_COUNT:
            raise InvalidEvent(_int_problem("spec.drafted_tokens", drafted, 0, MAX_COUNT))
        accepted = sget("accepted_tokens")
        if type(accepted) is not int or accepted < 0 or accepted > MAX_COUNT:
            raise InvalidEvent(_int_problem("spec.accepted_tokens", accepted, 0, MAX_COUNT))
        if accepted > drafted:
            raise InvalidEvent(
                f"spec.accepted_tokens ({accepted}) > spec.drafted_tokens ({drafted})"
            )
        verify_steps = sget("verify_steps")
        if verify_steps is not None and (
            type(verify_steps) is not int or verify_steps < 0 or verify_steps > MAX_COUNT
        ):
            raise InvalidEvent(_int_problem("spec.verify_steps", verify_steps, 0, MAX_COUNT))
        per_position = sget("accepted_per_position")
        if per_position is not None:
            if type(per_position) is not list:
                raise InvalidEvent(
                    f"spec.accepted_per_position must be an array (got {_show(per_position)})"
                )
            if len(per_position) != nst:
                raise InvalidEvent(
                    f"spec.accepted_per_position has {len(per_position)} entries, want"
                    f" spec.num_speculative_tokens = {nst}"
                )
            for n in per_position:
                if type(n) is not int or n < 0 or n > MAX_COUNT:
                    i = [m is n for m in per_position].index(True)
                    raise InvalidEvent(
                        _int_problem(f"spec.accepted_per_position[{i}]", n, 0, MAX_COUNT)
                    )
            total = sum(per_position)
            if total != accepted:
                raise InvalidEvent(
                    f"spec.accepted_per_position sums to {total}, want"
                    f" spec.accepted_tokens = {accepted}"
                )
            per_position = tuple(per_position)
        method = sget("method")
        if method is not None and (type(method) is not str or len(method) > MAX_NAME_CHARS):
            raise InvalidEvent(_str_problem("spec.method", method, 0))
        params = sget("params")
        if params is not None and type(params) is not dict:
            raise InvalidEvent(_object_problem("spec.params", params))
    else:
        raise InvalidEvent(_object_problem("spec", spec))

    output_tokens = get("output_tokens")
    if type(output_tokens) is not int or output_tokens < 0 or output_tokens > MAX_COUNT:
        raise InvalidEvent(_int_problem("output_tokens", output_tokens, 0, MAX_COUNT))
    prompt_tokens = get("prompt_tokens")
    if prompt_tokens is not None and (
        type(prompt_tokens) is not int or prompt_tokens < 0 or prompt_tokens > MAX_COUNT
    ):
        raise InvalidEvent(_int_problem("prompt_tokens", prompt_tokens, 0, MAX_COUNT))

    # Numbers: a chained comparison also rejects NaN; ints are range-checked before float()
    # so that an arbitrary Python int cannot overflow.
    ttft_ms = get("ttft_ms")
    if ttft_ms is not None:
        kind = type(ttft_ms)
        if kind is int and 0 <= ttft_ms <= MAX_MS:
            ttft_ms = float(ttft_ms)
        elif kind is not float or not 0.0 <= ttft_ms <= MAX_MS:
            raise InvalidEvent(_number_problem("ttft_ms", ttft_ms, MAX_MS))
    e2e_ms = get("e2e_ms")
    kind = type(e2e_ms)
    if kind is int and 0 <= e2e_ms <= MAX_MS:
        e2e_ms = float(e2e_ms)
    elif kind is not float or not 0.0 <= e2e_ms <= MAX_MS:
        raise InvalidEvent(_number_problem("e2e_ms", e2e_ms, MAX_MS))
    if ttft_ms is not None and ttft_ms > e2e_ms:
        raise InvalidEvent(f"ttft_ms ({ttft_ms}) > e2e_ms ({e2e_ms})")

    batch_size = get("batch_size")
    if batch_size is not None and (
        type(batch_size) is not int or batch_size < 1 or batch_size > MAX_COUNT
    ):
        raise InvalidEvent(_int_problem("batch_size", batch_size, 1, MAX_COUNT))
    instance = get("instance")
    if instance is not None and (type(instance) is not str or len(instance) > MAX_NAME_CHARS):
        raise InvalidEvent(_str_problem("instance", instance, 0))
    engine = get("engine")
    if engine is not None and (type(engine) is not str or len(engine) > MAX_NAME_CHARS):
        raise InvalidEvent(_str_problem("engine", engine, 0))
    draft_evicted = get("draft_evicted")
    if draft_evicted is None:
        draft_evicted = False
    elif type(draft_evicted) is not bool:
        raise InvalidEvent(f"draft_evicted must be a boolean (got {_show(draft_evicted)})")
    temperature = get("temperature")
    if temperature is not None:
        kind = type(temperature)
        if kind is int and 0 <= temperature <= MAX_MS:
            temperature = float(temperature)
        elif kind is not float or not 0.0 <= temperature <= MAX_MS:
            raise InvalidEvent(_number_problem("temperature", temperature, MAX_MS))

    event = Event(
        request_id, ts, route, status, target_model, target_revision, target_tokenizer,
        output_tokens, e2e_ms, draft_model, draft_revision, draft_tokenizer, pinned, has_spec,
        nst, drafted, accepted, verify_steps, per_position, method, prompt_tokens, ttft_ms,
        batch_size, instance, engine, draft_evicted, temperature,
    )  # fmt: skip
    if (
        "tags" in obj or "outcome" in obj or "experiment" in obj or "itl_ms" in obj
        or "gpu_seconds" in obj or "prompt_hash" in obj or "output_hash" in obj
    ):  # fmt: skip
        _read_v11(event, get)
    return event


def _read_v11(event: Event, get: Any) -> None:
    """Validate the telemetry v1.1 fields (``get`` is the event dict's) and set them on
    ``event``; raises ``InvalidEvent`` naming the first problem, in the spec's field order.

    Unknown keys inside ``outcome``, ``experiment`` and ``itl_ms`` are ignored, as everywhere
    else in the contract (a newer producer may add some). ``p50 <= p99 <= max`` is not
    checked: producers that take quantiles from a sketch (DDSketch-like) may report a p99 a
    rounding error above the exactly tracked max, and the event's outcome, GPU time and
    hashes must not be dead-lettered for that; each quantile feeds its own histogram.

    >>> e = Event("r", 1e9, "chat", "ok", "m", "1", "t", 0, 0.0)
    >>> _read_v11(e, {"outcome": {"ok": False}, "gpu_seconds": 2}.get)
    >>> e.outcome_ok, e.outcome_schema_valid, e.gpu_seconds
    (False, None, 2.0)
    """
    tags = get("tags")
    if tags is not None:
        if type(tags) is not dict:
            raise InvalidEvent(_object_problem("tags", tags))
        if len(tags) > MAX_TAGS:
            raise InvalidEvent(f"tags has {len(tags)} keys, at most {MAX_TAGS} allowed")
        for key, value in tags.items():
            if not 0 < len(key) <= MAX_NAME_CHARS:
                raise InvalidEvent(
                    f"tags key {_short(key)} must be 1..{MAX_NAME_CHARS} characters"
                    f" (got {len(key)})"
                )
            if type(value) is not str:
                raise InvalidEvent(f"tags[{_short(key)}] must be a string (got {_show(value)})")
            if len(value) > MAX_NAME_CHARS:
                raise InvalidEvent(_str_problem(f"tags[{_short(key)}]", value, 0))
        event.tags = dict(tags)  # the caller's dict may change later; ours may not
    outcome = get("outcome")
    if outcome is not None:
        if type(outcome) is not dict:
            raise InvalidEvent(_object_problem("outcome", outcome))
        oget = outcome.get
        outcome_ok = oget("ok")
        if outcome_ok is not None and type(outcome_ok) is not bool:
            raise InvalidEvent(_bool_problem("outcome.ok", outcome_ok))
        outcome_schema_valid = oget("schema_valid")
        if outcome_schema_valid is not None and type(outcome_schema_valid) is not bool:
            raise InvalidEvent(_bool_problem("outcome.schema_valid", outcome_schema_valid))
        outcome_tool_calls_valid = oget("tool_calls_valid")
        if outcome_tool_calls_valid is not None and type(outcome_tool_calls_valid) is not bool:
            raise InvalidEvent(
                _bool_problem("outcome.tool_calls_valid", outcome_tool_calls_valid)
            )
        event.outcome_ok = outcome_ok
        event.outcome_schema_valid = outcome_schema_valid
        event.outcome_tool_calls_valid = outcome_tool_calls_valid
    experiment = get("experiment")
    if experiment is not None:
        if type(experiment) is not dict:
            raise InvalidEvent(_object_problem("experiment", experiment))
        experiment_name = experiment.get("name")
        if type(experiment_name) is not str or not 0 < len(experiment_name) <= MAX_NAME_CHARS:
            raise InvalidEvent(_str_problem("experiment.name", experiment_name, MAX_NAME_CHARS))
        experiment_arm = experiment.get("arm")
        if type(experiment_arm) is not str or not 0 < len(experiment_arm) <= MAX_NAME_CHARS:
            raise InvalidEvent(_str_problem("experiment.arm", experiment_arm, MAX_NAME_CHARS))
        event.experiment_name = experiment_name
        event.experiment_arm = experiment_arm
    itl = get("itl_ms")
    if itl is not None:
        if type(itl) is not dict:
            raise InvalidEvent(_object_problem("itl_ms", itl))
        values = []
        for key in ("p50", "p99", "max"):  # present only in v1.1 events: off the hot path
            value = itl.get(key)
            kind = type(value)
            if kind is int and 0 <= value <= MAX_MS:
                value = float(value)
            elif kind is not float or not 0.0 <= value <= MAX_MS:
                raise InvalidEvent(_number_problem(f"itl_ms.{key}", value, MAX_MS))
            values.append(value)
        event.itl_p50_ms, event.itl_p99_ms, event.itl_max_ms = values
    gpu_seconds = get("gpu_seconds")
    if gpu_seconds is not None:
        kind = type(gpu_seconds)
        if kind is int and 0 <= gpu_seconds <= MAX_MS:
            gpu_seconds = float(gpu_seconds)
        elif kind is not float or not 0.0 <= gpu_seconds <= MAX_MS:
            raise InvalidEvent(_number_problem("gpu_seconds", gpu_seconds, MAX_MS))
        event.gpu_seconds = gpu_seconds
    prompt_hash = get("prompt_hash")
    if prompt_hash is not None and (
        type(prompt_hash) is not str or not 0 < len(prompt_hash) <= MAX_HASH_CHARS
    ):
        raise InvalidEvent(_str_problem("prompt_hash", prompt_hash, MAX_HASH_CHARS))
    output_hash = get("output_hash")
    if output_hash is not None and (
        type(output_hash) is not str or not 0 < len(output_hash) <= MAX_HASH_CHARS
    ):
        raise InvalidEvent(_str_problem("output_hash", output_hash, MAX_HASH_CHARS))
    event.prompt_hash = prompt_hash
    event.output_hash = output_hash


# --- fast path ------------------------------------------------------------------------------


def _fast_parse(raw: bytes) -> list[Event] | None:
    """All events of a message that is one valid event or a batch of only valid events.

    ``None`` means "take the slow path": the message does not decode into the Structs of
    ``schema.py``, or one of its events breaks a rule that only ``_fast_event`` checks. It
    never raises: whatever goes wrong here, the slow path gets to say why.
    """
    try:
        doc = _fast_decode(raw)
        if type(doc) is list:
            events = []
            add = events.append
            for item in doc:
                event = _fast_event(item)
                if event is None:
                    return None
                add(event)
            return events
        event = _fast_event(doc)
        return None if event is None else [event]
    except Exception:  # msgspec.DecodeError, RecursionError, ...: the slow path names it
        return None


def _fast_event(raw: RawEvent) -> Event | None:
    """The Event for a decoded ``RawEvent``, or ``None`` if it breaks any rule of
    ``event_from_obj`` that the Struct constraints do not cover.

    Types, lengths and ranges were checked by msgspec (schema.py mirrors the limits above);
    this checks ts, status, the cross-field rules and ``spec.params`` and builds the Event
    exactly as ``event_from_obj`` does.
    """
    raw_ts = raw.ts
    kind = type(raw_ts)
    if kind is str:
        ts = _read_ts_text(raw_ts)
        if ts is None:
            return None
    elif kind is float:
        ts = raw_ts
    elif kind is int and TS_MIN <= raw_ts < TS_MAX:
        ts = float(raw_ts)
    else:
        return None
    if not TS_MIN <= ts < TS_MAX:
        return None

    status = raw.status
    if status is None:
        status = "ok"
    elif status not in STATUSES:
        return None

    draft = raw.draft
    if draft is None:
        draft_model = draft_revision = draft_tokenizer = pinned = None
    else:
        draft_model = draft.model
        draft_revision = draft.revision
        draft_tokenizer = draft.tokenizer
        pinned = draft.pinned_target_revision

    spec = raw.spec
    if spec is None:
        has_spec = False
        nst = drafted = accepted = 0
        verify_steps = per_position = method = None
    else:
        has_spec = True
        nst = spec.num_speculative_tokens
        drafted = spec.drafted_tokens
        accepted = spec.accepted_tokens
        if accepted > drafted:
            return None
        verify_steps = spec.verify_steps
        per_position = spec.accepted_per_position
        if per_position is not None:
            if len(per_position) != nst or sum(per_position) != accepted:
                return None
            per_position = tuple(per_position)
        method = spec.method
        params = spec.params
        if params and not _plain_params(params, 0):
            return None

    e2e_ms = raw.e2e_ms
    ttft_ms = raw.ttft_ms
    if ttft_ms is not None and ttft_ms > e2e_ms:
        return None
    draft_evicted = raw.draft_evicted
    if draft_evicted is None:
        draft_evicted = False

    target = raw.target
    event = Event(
        raw.request_id, ts, raw.route, status, target.model, target.revision, target.tokenizer,
        raw.output_tokens, e2e_ms, draft_model, draft_revision, draft_tokenizer, pinned,
        has_spec, nst, drafted, accepted, verify_steps, per_position, method,
        raw.prompt_tokens, ttft_ms, raw.batch_size, raw.instance, raw.engine, draft_evicted,
        raw.temperature,
    )  # fmt: skip
    if (
        raw.tags is not None or raw.outcome is not None or raw.experiment is not None
        or raw.itl_ms is not None or raw.gpu_seconds is not None or raw.prompt_hash is not None
        or raw.output_hash is not None
    ):  # fmt: skip
        _fast_v11(event, raw)
    return event


def _fast_v11(event: Event, raw: RawEvent) -> None:
    """Copy the v1.1 fields msgspec decoded (and checked: no rule here crosses fields)."""
    event.tags = raw.tags
    outcome = raw.outcome
    if outcome is not None:
        event.outcome_ok = outcome.ok
        event.outcome_schema_valid = outcome.schema_valid
        event.outcome_tool_calls_valid = outcome.tool_calls_valid
    experiment = raw.experiment
    if experiment is not None:
        event.experiment_name = experiment.name
        event.experiment_arm = experiment.arm
    itl = raw.itl_ms
    if itl is not None:
        event.itl_p50_ms = itl.p50
        event.itl_p99_ms = itl.p99
        event.itl_max_ms = itl.max
    event.gpu_seconds = raw.gpu_seconds
    event.prompt_hash = raw.prompt_hash
    event.output_hash = raw.output_hash


_INT_LOW = -(2**63)  # orjson reads integers outside [-2**63, 2**64) as floats
_INT_HIGH = 2**64
_PARAMS_MAX_DEPTH = 8


def _plain_params(value: dict[str, Any] | list[Any], depth: int) -> bool:
    """Whether orjson surely reads ``spec.params`` (decoded by msgspec) without error.

    ``params`` is the one place msgspec decodes untyped JSON, where its number and depth limits
    differ from orjson's (orjson fails on integers beyond a double, msgspec keeps them as ints;
    depth limits hang on the recursion limit). Only small plain values stay on the fast path.
    """
    if depth >= _PARAMS_MAX_DEPTH:
        return False
    for item in value.values() if type(value) is dict else value:
        kind = type(item)
        if kind is int:
            if not _INT_LOW <= item < _INT_HIGH:
                return False
        elif kind is float:
            if not -1e308 < item < 1e308:
                return False
        elif kind is dict or kind is list:
            if not _plain_params(item, depth + 1):
                return False
        elif kind is not str and kind is not bool and item is not None:
            return False
    return True


# "YYYY-MM-DDTHH:MM:SS" -> its Unix seconds, for texts of that second read before: traffic
# sends many events a second, and fromisoformat + timestamp() cost 0.5 us an event.
_SECONDS: dict[str, int] = {}
_SECONDS_MAX = 4096
# "YYYY-MM-DDTHH:MM:" -> its Unix seconds, for a second not read before in a minute that was:
# at a few requests a second, half of them are a second's first.
_MINUTES: dict[str, int] = {}
_MINUTES_MAX = 4096
# the seconds of a minute ("00" to "59")
_OF_MINUTE = {f"{i:02d}": i for i in range(60)}
# what may follow the seconds, -> milliseconds (ASCII digits only, as fromisoformat reads)
_FRACTIONS = {"Z": 0, **{f".{i:03d}Z": i for i in range(1000)}}


def _read_ts_text(text: str) -> float | None:
    """Unix seconds of an RFC 3339 ``ts``, or ``None`` when it is not one.

    Fast path for the usual "2026-11-02T14:03:07[.fff]Z": given that shape, fromisoformat
    only succeeds on RFC 3339 (tests check this). Anything else takes the regex. A second,
    or a minute, read before, with no fraction or milliseconds, is worked out from its
    cached start: ``timestamp()`` divides the microseconds since the epoch by 10**6,
    correctly rounded, and ``(seconds * 1000 + millis) / 1000`` is the same quotient,
    rounded the same way.
    """
    millis = _FRACTIONS.get(text[19:])
    if millis is not None:
        whole = _SECONDS.get(text[:19])
        if whole is None:
            minute = _MINUTES.get(text[:17])
            second = _OF_MINUTE.get(text[17:19])
            if minute is not None and second is not None:
                whole = minute + second
                if len(_SECONDS) >= _SECONDS_MAX:
                    _SECONDS.clear()
                _SECONDS[text[:19]] = whole
        if whole is not None:
            return (whole * 1000 + millis) / 1000
    if text[4:17:3] == "--T::" and text[-1] == "Z" and (
        len(text) == 20 or len(text) > 21 and text[19] == "."
    ):
        try:
            ts = _fromisoformat(text).timestamp()
        except (ValueError, OverflowError):
            pass
        else:
            if millis is not None:  # a minute's and a second's start, read once
                if len(_MINUTES) >= _MINUTES_MAX:
                    _MINUTES.clear()
                minute = _MINUTES[text[:17]] = int(
                    _fromisoformat(text[:16] + ":00Z").timestamp())
                second = _OF_MINUTE.get(text[17:19])
                if second is not None:
                    if len(_SECONDS) >= _SECONDS_MAX:
                        _SECONDS.clear()
                    _SECONDS[text[:19]] = minute + second
            return ts
    return _read_rfc3339(text)


def _read_rfc3339(text: str) -> float | None:
    if _rfc3339(text) is None:
        return None
    try:
        return _fromisoformat(text).timestamp()
    except (ValueError, OverflowError):
        pass
    # Valid RFC 3339 that fromisoformat refuses: lowercase "t"/"z" and leap seconds (":60").
    fixed = text[:10] + "T" + text[11:]
    if fixed[-1] in "zZ":
        fixed = fixed[:-1] + "+00:00"
    leap = fixed[17:19] == "60"
    if leap:
        fixed = fixed[:17] + "59" + fixed[19:]
    try:
        return _fromisoformat(fixed).timestamp() + leap
    except (ValueError, OverflowError):
        return None


# The helpers below run only once a value is known to be bad: they name the problem.


def _ts_problem(value: object) -> str:
    if value is None:
        return "missing required field: ts"
    kind = type(value)
    if kind is str:
        if _read_rfc3339(value) is None:  # type: ignore[arg-type]
            return f"ts: cannot read {_short(value)} (want RFC 3339 with zone or Unix seconds)"
    elif kind is int or kind is float:
        if kind is float and not math.isfinite(value):  # type: ignore[arg-type]
            return f"ts must be finite (got {value!r})"
    else:
        return f"ts must be an RFC 3339 string or Unix seconds (got {_show(value)})"
    return f"ts {_short(value)} is outside [2000-01-01, 2100-01-01)"


def _kind(value: object) -> str:
    if value is None:
        return "null"
    kind = type(value)
    if kind is bool:
        return "boolean"
    if kind is int or kind is float:
        return "number"
    if kind is str:
        return "string"
    if kind is list:
        return "array"
    if kind is dict:
        return "object"
    return type(value).__name__


def _short(value: object, limit: int = 64) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int too long for str() (Python's 4300-digit limit)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: object) -> str:
    if type(value) in (list, dict) or value is None:
        return _kind(value)
    if type(value) is bool:
        return f"boolean {'true' if value else 'false'}"
    return f"{_kind(value)} {_short(value)}"


def _bool_problem(path: str, value: object) -> str:
    return f"{path} must be a boolean or null (got {_show(value)})"


def _object_problem(path: str, value: object) -> str:
    if value is None:
        return f"missing required field: {path}"
    return f"{path} must be an object (got {_show(value)})"


def _str_problem(path: str, value: object, limit: int) -> str:
    """``limit`` 0 marks an optional string, which may be empty."""
    if value is None:
        return f"missing required field: {path}"
    if type(value) is not str:
        return f"{path} must be a string (got {_show(value)})"
    if limit == 0:
        return f"{path} must be at most {MAX_NAME_CHARS} characters (got {len(value)})"
    return f"{path} must be 1..{limit} characters (got {len(value)})"


def _int_problem(path: str, value: object, low: int, high: int) -> str:
    if value is None:
        return f"missing required field: {path}"
    kind = type(value)
    if kind is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            return f"{path} must be finite (got {value!r})"
        if abs(value) > MAX_COUNT:  # type: ignore[arg-type]
            return f"{path} is a huge number ({_short(value)} > {MAX_COUNT})"
    if kind is not int:
        return f"{path} must be an integer (got {_show(value)})"
    if value < low:  # type: ignore[operator]
        return f"{path} must be >= {low} (got {_short(value)})"
    if high == MAX_COUNT:
        return f"{path} is a huge number ({_short(value)} > {high})"
    return f"{path} must be <= {high} (got {_short(value)})"


def _number_problem(path: str, value: object, high: float) -> str:
    if value is None:
        return f"missing required field: {path}"
    kind = type(value)
    if kind is not int and kind is not float:
        return f"{path} must be a number (got {_show(value)})"
    if kind is float and not math.isfinite(value):  # type: ignore[arg-type]
        return f"{path} must be finite (got {value!r})"
    if value < 0:  # type: ignore[operator]
        return f"{path} must be >= 0 (got {_short(value)})"
    return f"{path} is a huge number ({_short(value)} > {high:g})"
