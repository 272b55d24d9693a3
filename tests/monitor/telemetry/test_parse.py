"""Parser and validator of telemetry v1 messages."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.exceptions import SpecwatchError
from monitor.telemetry import parse as parse_module
from monitor.telemetry.event import STATUSES, Event, Rejection
from monitor.telemetry.exceptions import InvalidEvent
from monitor.telemetry.parse import Parser, _read_ts_text, _rfc3339, event_from_obj
from tests.monitor.telemetry.bad_inputs import DROP, BadInput, bad_input_corpus, valid_event

T0 = 1793628187.0  # 2026-11-02T14:03:07Z

SPEC_EXAMPLE = b"""{"request_id": "r-000017", "ts": "2026-11-02T14:03:07.412Z", "route": "code-assistant",
 "status": "ok",
 "target": {"model": "llama-3.1-70b-instruct", "revision": "2026-10-28", "tokenizer": "llama3"},
 "draft":  {"model": "llama-3.2-1b-instruct", "revision": "2026-09-30", "tokenizer": "llama3",
            "pinned_target_revision": "2026-09-15"},
 "spec": {"num_speculative_tokens": 5, "drafted_tokens": 240, "accepted_tokens": 171,
          "verify_steps": 48, "accepted_per_position": [44, 39, 34, 29, 25]},
 "prompt_tokens": 812, "output_tokens": 219, "ttft_ms": 142.0, "e2e_ms": 2311.5,
 "batch_size": 12, "instance": "pod-3", "engine": "vllm"}"""  # noqa: E501  (verbatim from the spec)

SPEC_EXAMPLE_EVENT = Event(
    request_id="r-000017",
    ts=1793628187.412,
    route="code-assistant",
    status="ok",
    target_model="llama-3.1-70b-instruct",
    target_revision="2026-10-28",
    target_tokenizer="llama3",
    output_tokens=219,
    e2e_ms=2311.5,
    draft_model="llama-3.2-1b-instruct",
    draft_revision="2026-09-30",
    draft_tokenizer="llama3",
    pinned_target_revision="2026-09-15",
    has_spec=True,
    num_speculative_tokens=5,
    drafted_tokens=240,
    accepted_tokens=171,
    verify_steps=48,
    accepted_per_position=(44, 39, 34, 29, 25),
    method=None,
    prompt_tokens=812,
    ttft_ms=142.0,
    batch_size=12,
    instance="pod-3",
    engine="vllm",
    draft_evicted=False,
    temperature=None,
)

CORPUS = bad_input_corpus()


def parse(raw: bytes) -> tuple[list[Event], list[Rejection]]:
    return Parser().parse(raw)


def one_event(obj: Any) -> Event:
    events, rejections = parse(orjson.dumps(obj))
    assert not rejections, rejections
    assert len(events) == 1
    return events[0]


def one_rejection(obj: Any) -> Rejection:
    events, rejections = parse(orjson.dumps(obj))
    assert not events
    assert len(rejections) == 1
    return rejections[0]


# --- the bad-input corpus ---------------------------------------------------------------------


def test_corpus_has_enough_distinct_kinds() -> None:
    names = [b.name for b in CORPUS]
    assert len(names) == len(set(names)), "duplicate corpus names"
    assert len(names) >= 35


@pytest.mark.parametrize("bad", CORPUS, ids=[b.name for b in CORPUS])
def test_bad_input(bad: BadInput) -> None:
    events, rejections = parse(bad.message)
    assert len(events) == bad.valid_events
    assert len(rejections) == bad.invalid, [r.reason for r in rejections]
    for r in rejections:
        assert bad.reason_contains.lower() in r.reason.lower(), r.reason
        assert isinstance(r.raw, bytes)
        assert len(r.reason) < 300  # short enough for a dead-letter header and a log line
        if r.index is None:
            assert r.raw == bad.message


def test_corpus_respects_a_larger_limit() -> None:
    limit = 12 << 20
    (big,) = [b for b in bad_input_corpus(limit) if b.name == "message_too_large_10mb"]
    assert len(big.message) > limit
    events, rejections = Parser(limit).parse(big.message)
    assert not events
    assert rejections[0].reason == f"message too large: {len(big.message)} bytes > limit {limit}"


def test_too_large_is_checked_before_parsing() -> None:
    limit = 100
    message = b"x" * 101  # not JSON either: size must win
    assert Parser(limit).parse(message) == (
        [],
        [Rejection("message too large: 101 bytes > limit 100", message, None)],
    )
    at_limit = orjson.dumps(valid_event())
    assert len(Parser(len(at_limit)).parse(at_limit)[0]) == 1
    with pytest.raises(ValueError):
        Parser(0)


# --- valid forms ------------------------------------------------------------------------------


def test_spec_example_parses_to_the_exact_event() -> None:
    events, rejections = parse(SPEC_EXAMPLE)
    assert rejections == []
    assert events == [SPEC_EXAMPLE_EVENT]
    assert type(events[0].ts) is float and type(events[0].e2e_ms) is float


def test_every_field_lands_in_its_own_slot() -> None:
    # Event is built positionally: distinct values catch any shifted field
    event = one_event(valid_event(
        request_id="rid", ts=T0 + 1, route="rt", status="timeout",
        target={"model": "tm", "revision": "tr", "tokenizer": "tt"},
        draft={"model": "dm", "revision": "dr", "tokenizer": "dt",
               "pinned_target_revision": "pin"},
        spec={"num_speculative_tokens": 2, "drafted_tokens": 30, "accepted_tokens": 7,
              "verify_steps": 15, "accepted_per_position": [5, 2], "method": "eagle",
              "params": {"k": 3}},
        output_tokens=11, e2e_ms=900.0, prompt_tokens=13, ttft_ms=17.0, batch_size=19,
        instance="inst", engine="eng", draft_evicted=True, temperature=0.7,
        tags={"lang": "py"}, outcome={"ok": False, "schema_valid": True},
        experiment={"name": "exp", "arm": "arm"}, itl_ms={"p50": 21.0, "p99": 23.0, "max": 29.0},
        gpu_seconds=31.0, prompt_hash="ph", output_hash="oh",
    ))  # fmt: skip
    assert dataclasses.asdict(event) == {
        "request_id": "rid", "ts": T0 + 1, "route": "rt", "status": "timeout",
        "target_model": "tm", "target_revision": "tr", "target_tokenizer": "tt",
        "output_tokens": 11, "e2e_ms": 900.0, "draft_model": "dm", "draft_revision": "dr",
        "draft_tokenizer": "dt", "pinned_target_revision": "pin", "has_spec": True,
        "num_speculative_tokens": 2, "drafted_tokens": 30, "accepted_tokens": 7,
        "verify_steps": 15, "accepted_per_position": (5, 2), "method": "eagle",
        "prompt_tokens": 13, "ttft_ms": 17.0, "batch_size": 19, "instance": "inst",
        "engine": "eng", "draft_evicted": True, "temperature": 0.7, "tags": {"lang": "py"},
        "outcome_ok": False, "outcome_schema_valid": True, "outcome_tool_calls_valid": None,
        "experiment_name": "exp", "experiment_arm": "arm", "itl_p50_ms": 21.0,
        "itl_p99_ms": 23.0, "itl_max_ms": 29.0, "gpu_seconds": 31.0, "prompt_hash": "ph",
        "output_hash": "oh", "gpu_estimated": False,
    }  # fmt: skip


def test_minimal_event_gets_the_defaults() -> None:
    event = one_event({
        "request_id": "r", "ts": T0, "route": "chat", "output_tokens": 0, "e2e_ms": 0,
        "target": {"model": "m", "revision": "1", "tokenizer": "t"},
    })  # fmt: skip
    assert event == Event("r", T0, "chat", "ok", "m", "1", "t", 0, 0.0)
    assert type(event.e2e_ms) is float


def test_null_optional_fields_mean_absent() -> None:
    nulls = {k: None for k in ("status", "draft", "spec", "prompt_tokens", "ttft_ms",
                               "batch_size", "instance", "engine", "draft_evicted",
                               "temperature")}  # fmt: skip
    event = one_event(valid_event(**nulls))
    assert (event.status, event.draft_model, event.has_spec, event.num_speculative_tokens) == (
        "ok", None, False, 0)  # fmt: skip
    assert (event.prompt_tokens, event.ttft_ms, event.batch_size, event.draft_evicted) == (
        None, None, None, False)  # fmt: skip
    inner = one_event(valid_event(**{"draft.pinned_target_revision": None,
                                     "spec.verify_steps": None, "spec.method": None,
                                     "spec.accepted_per_position": None}))  # fmt: skip
    assert inner.pinned_target_revision is None and inner.verify_steps is None
    assert inner.accepted_per_position is None and inner.method is None and inner.has_spec


def test_unknown_fields_are_ignored() -> None:
    event = one_event(valid_event(extra={"a": [1, None]}, **{"spec.future": "x",
                                                            "target.quant": 4}))
    assert event.route == "code-assistant"


@pytest.mark.parametrize("route", ["a", "r" * 128, "line\nbreak\x00\x1b[31m", "مسار-الكود",
                                   "\u202eevil", "🚀 code"])  # fmt: skip
def test_any_unicode_route_is_kept_as_is(route: str) -> None:
    assert one_event(valid_event(route=route)).route == route


@pytest.mark.parametrize("status", sorted(STATUSES))
def test_every_status(status: str) -> None:
    assert one_event(valid_event(status=status)).status == status


def test_boundaries_are_accepted() -> None:
    event = one_event(valid_event(
        request_id="x" * 128, ts="2000-01-01T00:00:00Z", output_tokens=10**9,
        e2e_ms=1e10, ttft_ms=1e10, batch_size=1, temperature=0,
        target={"model": "m" * 256, "revision": "r", "tokenizer": "t"},
        spec={"num_speculative_tokens": 64, "drafted_tokens": 0, "accepted_tokens": 0},
    ))  # fmt: skip
    assert event.ts == 946684800.0 and event.num_speculative_tokens == 64
    assert event.temperature == 0.0 and type(event.temperature) is float
    assert event.drafted_tokens == 0 and event.accepted_per_position is None
    drafted_all_accepted = one_event(valid_event(**{"spec.accepted_tokens": 240,
                                                    "spec.accepted_per_position": DROP}))
    assert drafted_all_accepted.accepted_tokens == 240


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        ("2026-11-02T14:03:07Z", T0),
        ("2026-11-02T14:03:07.412Z", 1793628187.412),
        ("2026-11-02T14:03:07.4Z", 1793628187.4),
        ("2026-11-02T14:03:07.123456Z", 1793628187.123456),
        ("2026-11-02T14:03:07.123456789Z", 1793628187.123456),  # microseconds, truncated
        ("2026-11-02T15:03:07.5+01:00", T0 + 0.5),
        ("2026-11-02T09:03:07-05:00", T0),
        ("2026-11-02T19:33:07.25+05:30", T0 + 0.25),
        ("2026-11-02T14:03:07+00:00", T0),
        ("2026-11-02T14:03:07-00:00", T0),
        ("2026-11-02t14:03:07z", T0),
        ("2026-11-02 14:03:07Z", T0),
        ("2026-12-31T23:59:60Z", 1798761600.0),  # leap second: the next second
        ("2099-12-31T23:59:59.999Z", 4102444799.999),
        (T0, T0),
        (1793628187, T0),
        (1793628187.412, 1793628187.412),
    ],
)
def test_ts_forms(ts: str | float, expected: float) -> None:
    event = one_event(valid_event(ts=ts))
    assert event.ts == expected
    assert type(event.ts) is float


@pytest.mark.parametrize(
    "ts", ["2100-01-01T00:00:00Z", "2000-01-01T00:30:00+01:00", 946684799.999, 4102444800]
)
def test_ts_range_is_half_open(ts: str | float) -> None:
    assert "outside [2000-01-01, 2100-01-01)" in one_rejection(valid_event(ts=ts)).reason


def test_batch() -> None:
    batch = [valid_event() for _ in range(5)]
    events, rejections = parse(orjson.dumps(batch))
    assert rejections == []
    assert [e.request_id for e in events] == [b["request_id"] for b in batch]


def test_empty_batch_is_harmless() -> None:
    assert parse(b"[]") == ([], [])
    assert parse(b" [ ]\n") == ([], [])
    assert parse(b"[]\n[]\n") == ([], [])


def test_pretty_printed_object_is_one_document() -> None:
    events, rejections = parse(orjson.dumps(valid_event(), option=orjson.OPT_INDENT_2))
    assert len(events) == 1 and not rejections


def test_json_lines_with_blank_lines_crlf_and_batches() -> None:
    a, b, c, d = (valid_event() for _ in range(4))
    message = b"\r\n".join([
        orjson.dumps(a), b"", b"  ", orjson.dumps([b, c]), orjson.dumps(d), b"",
    ])  # fmt: skip
    events, rejections = parse(message)
    assert rejections == []
    assert [e.request_id for e in events] == [x["request_id"] for x in (a, b, c, d)]


def test_json_lines_rejections_carry_line_numbers() -> None:
    bad_elem = valid_event(output_tokens=-1)
    lines = [
        orjson.dumps(valid_event()),
        b"{broken",
        b"",
        orjson.dumps([valid_event(), bad_elem]),
        orjson.dumps(valid_event(route=None)),
    ]
    events, rejections = parse(b"\n".join(lines))
    assert len(events) == 2
    assert [(r.index, r.raw) for r in rejections] == [
        (1, b"{broken"),
        (3, orjson.dumps(bad_elem)),
        (4, lines[4]),
    ]
    assert rejections[1].reason == "element 1: output_tokens must be >= 0 (got -1)"
    assert rejections[2].reason == "missing required field: route"


def test_rejection_raw_and_index() -> None:
    bad = valid_event(**{"spec.accepted_tokens": 250})
    message = orjson.dumps(bad)
    assert parse(message) == (
        [], [Rejection("spec.accepted_tokens (250) > spec.drafted_tokens (240)", message)]
    )  # fmt: skip
    events, rejections = parse(orjson.dumps([valid_event(), bad, 7]))
    assert len(events) == 1
    assert [(r.index, orjson.loads(r.raw)) for r in rejections] == [(1, bad), (2, 7)]


def test_element_too_deep_to_reserialise_keeps_the_message() -> None:
    message = b"[" + b"[" * 300 + b"]" * 300 + b"]"
    events, rejections = parse(message)
    assert not events
    assert rejections == [Rejection("event must be a JSON object (got array)", message, 0)]


def test_bytes_like_input() -> None:
    raw = orjson.dumps(valid_event())
    assert len(parse(bytearray(raw))[0]) == 1
    assert len(parse(memoryview(raw))[0]) == 1  # type: ignore[arg-type]


def test_non_bytes_input_does_not_raise() -> None:
    events, rejections = Parser().parse("not bytes")  # type: ignore[arg-type]
    assert not events and rejections[0].reason.startswith("internal error")


# --- event_from_obj ---------------------------------------------------------------------------


def test_event_from_obj_raises_invalid_event_with_reason() -> None:
    with pytest.raises(InvalidEvent) as info:
        event_from_obj(valid_event(e2e_ms=DROP))
    assert info.value.reason == "missing required field: e2e_ms"
    assert isinstance(info.value, SpecwatchError)
    with pytest.raises(InvalidEvent, match="must be a JSON object"):
        event_from_obj([valid_event()])


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"output_tokens": 240.0}, "output_tokens must be an integer (got number 240.0)"),
        ({"output_tokens": True}, "output_tokens must be an integer (got boolean true)"),
        ({"target.model": 7}, "target.model must be a string (got number 7)"),
        ({"ts": "2026-13-45"},
         "ts: cannot read '2026-13-45' (want RFC 3339 with zone or Unix seconds)"),
        ({"e2e_ms": float("nan")}, "e2e_ms must be finite (got nan)"),
        ({"ttft_ms": float("inf")}, "ttft_ms must be finite (got inf)"),
        ({"ts": float("nan")}, "ts must be finite (got nan)"),
        ({"output_tokens": 10**400}, "output_tokens is a huge number"),
        ({"e2e_ms": 10**400}, "e2e_ms is a huge number"),
        ({"ts": 10**400}, "is outside [2000-01-01, 2100-01-01)"),
        ({"output_tokens": 10**5000}, "output_tokens is a huge number"),
        ({"draft_evicted": 1}, "draft_evicted must be a boolean (got number 1)"),
        ({"status": ["ok"]}, "status must be one of cancelled, error, ok, timeout (got array)"),
        ({"route": "x" * 1000}, "route must be 1..128 characters (got 1000)"),
    ],
)  # fmt: skip
def test_reasons_name_the_field(overrides: dict[str, Any], reason: str) -> None:
    # values orjson never produces (NaN, huge ints) can still reach event_from_obj directly
    with pytest.raises(InvalidEvent) as info:
        event_from_obj(valid_event(**overrides))
    assert reason in info.value.reason


def test_first_problem_wins() -> None:
    with pytest.raises(InvalidEvent, match="^missing required field: request_id$"):
        event_from_obj(valid_event(request_id=DROP, e2e_ms=DROP))


# --- properties ------------------------------------------------------------------------------

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(_text, children, max_size=5),
    max_leaves=25,
)

_PATHS = (
    "request_id", "ts", "route", "status", "target", "target.model", "target.revision",
    "target.tokenizer", "draft", "draft.model", "draft.revision", "draft.tokenizer",
    "draft.pinned_target_revision", "spec", "spec.num_speculative_tokens",
    "spec.drafted_tokens", "spec.accepted_tokens", "spec.verify_steps",
    "spec.accepted_per_position", "spec.method", "spec.params", "output_tokens",
    "prompt_tokens", "ttft_ms", "e2e_ms", "batch_size", "instance", "engine", "draft_evicted",
    "temperature", "unknown",
)  # fmt: skip
_field_values = (
    json_values
    | st.integers(min_value=-5, max_value=300)
    | st.floats(min_value=-1, max_value=5000, allow_nan=False)
    | st.sampled_from(["2026-11-02T14:03:07Z", "ok", "", "x" * 300, DROP])
    | st.lists(st.integers(min_value=-1, max_value=80), max_size=6)
)


@st.composite
def mutated_events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with one to three fields replaced by anything, or dropped."""
    event = valid_event()
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        *parents, leaf = draw(st.sampled_from(_PATHS)).split(".")
        node = event.get(parents[0]) if parents else event
        if not isinstance(node, dict):
            continue  # the parent object was replaced or dropped by an earlier step
        value = draw(_field_values)
        if value is DROP:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return event


def _is_empty_batch(raw: bytes) -> bool:
    def load(part: bytes) -> Any:
        try:
            return orjson.loads(part)
        except orjson.JSONDecodeError:
            return None

    if load(raw) == []:
        return True
    lines = [line for line in raw.split(b"\n") if line.strip()]
    return bool(lines) and all(load(line) == [] for line in lines)


def _check_result(raw: bytes, result: Any) -> None:
    events, rejections = result
    assert all(type(e) is Event for e in events)
    assert all(type(r) is Rejection and type(r.raw) is bytes and r.reason for r in rejections)
    if not events and not rejections:
        assert _is_empty_batch(raw), raw


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    _check_result(raw, Parser().parse(raw))


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_never_raises_on_json_values(value: Any) -> None:
    raw = orjson.dumps(value)
    events, rejections = Parser().parse(raw)
    _check_result(raw, (events, rejections))
    # every element of a batch ends up exactly once, everything else is one outcome
    assert len(events) + len(rejections) == (len(value) if type(value) is list else 1)


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values | mutated_events(), max_size=6), st.binary(max_size=20))
def test_never_raises_on_json_lines(values: list[Any], junk: bytes) -> None:
    raw = b"\n".join([orjson.dumps(v) for v in values] + [junk])
    _check_result(raw, Parser().parse(raw))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_events())
def test_mutated_events_give_exactly_one_outcome(event: dict[str, Any]) -> None:
    events, rejections = Parser().parse(orjson.dumps(event))
    assert len(events) + len(rejections) == 1
    for e in events:  # whatever got through obeys the contract
        assert 0 <= e.accepted_tokens <= e.drafted_tokens
        assert e.ttft_ms is None or e.ttft_ms <= e.e2e_ms
        assert 946684800.0 <= e.ts < 4102444800.0
        assert e.status in STATUSES
        if e.accepted_per_position is not None:
            assert len(e.accepted_per_position) == e.num_speculative_tokens
            assert sum(e.accepted_per_position) == e.accepted_tokens


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values | mutated_events(), max_size=8))
def test_batch_rejection_raw_round_trips(batch: list[Any]) -> None:
    events, rejections = Parser().parse(orjson.dumps(batch))
    assert len(events) + len(rejections) == len(batch)
    for r in rejections:
        assert r.index is not None
        assert orjson.loads(r.raw) == batch[r.index]


_TS_ALPHABET = "0123456789-T:.Z+ ,Wtz_e\u0661\u00b2"


@st.composite
def near_timestamps(draw: st.DrawFn) -> str:
    chars = list(draw(st.sampled_from(["2026-11-02T14:03:07.412Z", "2026-11-02T14:03:07Z",
                                       "2026-11-02T14:03:07+05:30"])))  # fmt: skip
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        i = draw(st.integers(min_value=0, max_value=len(chars)))
        op = draw(st.sampled_from(["set", "insert", "delete"]))
        if op == "insert" or i == len(chars):
            chars.insert(i, draw(st.sampled_from(_TS_ALPHABET)))
        elif op == "set":
            chars[i] = draw(st.sampled_from(_TS_ALPHABET))
        else:
            del chars[i]
    return "".join(chars)


@settings(max_examples=1000, deadline=None)
@given(near_timestamps())
def test_only_rfc3339_timestamps_are_accepted(ts: str) -> None:
    # guards the fast path, which leans on fromisoformat for everything it does not check
    try:
        event_from_obj(valid_event(ts=ts))
    except InvalidEvent as exc:
        assert exc.reason.startswith("ts"), exc.reason
    else:
        assert _rfc3339(ts) is not None, ts


@settings(max_examples=1000, deadline=None)
@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2099, 12, 31, 23, 59, 59)),
       st.sampled_from(["", ".{ms:03d}", ".{us:06d}"]), st.integers(0, 999))
def test_timestamps_read_exactly_as_fromisoformat(when: datetime, fraction: str,
                                                  other_ms: int) -> None:
    """A minute read before is worked out from its cached start: the same float, to the bit,
    as fromisoformat + timestamp(), first read or cached, and for another second and
    millisecond of it."""
    second = when.strftime("%Y-%m-%dT%H:%M:%S")
    text = second + fraction.format(ms=when.microsecond // 1000, us=when.microsecond) + "Z"
    want = datetime.fromisoformat(text).timestamp()
    assert _read_ts_text(text) == want
    assert _read_ts_text(text) == want
    other = f"{second}.{other_ms:03d}Z"
    assert _read_ts_text(other) == datetime.fromisoformat(other).timestamp()
    other_second = f"{second[:-2]}{(when.second + other_ms) % 60:02d}.{other_ms:03d}Z"
    assert _read_ts_text(other_second) == datetime.fromisoformat(other_second).timestamp()
    for bad in (f"{second[:-2]}60Z", f"{second[:-2]}6Z", f"{second[:-2]}5xZ"):
        # a leap second is RFC 3339 (read as the next second), the others are not
        assert _read_ts_text(bad) == _read_rfc3339_reference(bad)
    # a fraction of other digits than ASCII's: the cached second reads it as no cache would
    odd = f"{second}.{other_ms:03d}".replace("0", "\u0660").replace("1", "\u0661")
    odd = second + odd[len(second):] + "Z"
    cached = _read_ts_text(odd)
    parse_module._SECONDS.clear()
    parse_module._MINUTES.clear()
    assert _read_ts_text(odd) == cached


def _read_rfc3339_reference(text: str) -> float | None:
    """What the validator reads without any cache (parse._read_rfc3339)."""
    return parse_module._read_rfc3339(text)


def test_truncated_pretty_printed_object_is_one_rejection() -> None:
    message = orjson.dumps(valid_event(), option=orjson.OPT_INDENT_2)[:-60]
    events, rejections = parse(message)
    assert not events
    assert len(rejections) == 1
    assert rejections[0].index is None and rejections[0].raw == message
    assert rejections[0].reason.startswith("invalid JSON: unexpected end of data")
