"""Telemetry v1.1 optional fields: parsing on both paths, rejection reasons, serialising.

Every check runs through ``Parser(fast=True)`` and ``Parser(fast=False)``: whatever the
msgspec fast path accepts must be what the validator gives, and every rejection comes from
the validator, so both name the same field.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.telemetry.event import Event
from monitor.telemetry.exceptions import InvalidEvent
from monitor.telemetry.parse import Parser, _fast_parse, event_from_obj
from monitor.telemetry.serialize import event_to_dict, request_tail, v11_fields
from tests.monitor.telemetry.bad_inputs import DROP, valid_event

FAST = Parser(fast=True)
SLOW = Parser(fast=False)

V11 = {
    "temperature": 0,
    "tags": {"lang": "python", "task": "refactor", "tenant": ""},
    "outcome": {"ok": True, "schema_valid": False, "tool_calls_valid": True},
    "experiment": {"name": "eagle3-rollout", "arm": "candidate"},
    "itl_ms": {"p50": 21.5, "p99": 48, "max": 130.25},
    "gpu_seconds": 1.75,
    "prompt_hash": "sha256:" + "a" * 64,
    "output_hash": "sha256:" + "b" * 64,
}
V11_FIELDS = {
    "tags": {"lang": "python", "task": "refactor", "tenant": ""},
    "outcome_ok": True, "outcome_schema_valid": False, "outcome_tool_calls_valid": True,
    "experiment_name": "eagle3-rollout", "experiment_arm": "candidate",
    "itl_p50_ms": 21.5, "itl_p99_ms": 48.0, "itl_max_ms": 130.25, "gpu_seconds": 1.75,
    "prompt_hash": "sha256:" + "a" * 64, "output_hash": "sha256:" + "b" * 64,
}  # fmt: skip
NONE_FIELDS = {name: None for name in V11_FIELDS}


def _v11_of(e: Event) -> dict[str, Any]:
    return {name: getattr(e, name) for name in V11_FIELDS}


def _canon(events: list[Event]) -> list[list[tuple[str, type, str]]]:
    return [
        [(f.name, type(v := getattr(e, f.name)), repr(v)) for f in dataclasses.fields(e)]
        for e in events
    ]


def parse_both(obj: Any) -> list[Event]:
    """Events of ``obj`` as one message; both paths must agree exactly (reasons included)."""
    raw = orjson.dumps(obj)
    fast, slow = FAST.parse(raw), SLOW.parse(raw)
    assert _canon(fast[0]) == _canon(slow[0]) and fast[1] == slow[1], raw
    assert not fast[1], fast[1]
    return fast[0]


def reject_both(obj: Any) -> str:
    raw = orjson.dumps(obj)
    fast, slow = FAST.parse(raw), SLOW.parse(raw)
    assert fast == slow
    assert fast[0] == [] and len(fast[1]) == 1, fast
    return fast[1][0].reason


# --- accepted --------------------------------------------------------------------------------


def test_all_v11_fields_land_in_their_slots_on_the_fast_path() -> None:
    obj = valid_event(**V11)
    fast = _fast_parse(orjson.dumps(obj))
    assert fast is not None  # all known fields: msgspec decodes it
    (event,) = parse_both(obj)
    assert _canon(fast) == _canon([event])
    assert _v11_of(event) == V11_FIELDS
    assert type(event.itl_p99_ms) is float and event.temperature == 0.0
    assert event.gpu_estimated is False and event.success is True


def test_v10_events_have_no_v11_values() -> None:
    (event,) = parse_both(valid_event())
    assert _v11_of(event) == NONE_FIELDS
    assert event.success is True  # no outcome: status ok decides


@pytest.mark.parametrize("field", list(V11))
def test_null_means_absent(field: str) -> None:
    (event,) = parse_both(valid_event(**{**V11, field: None}))
    (dropped,) = parse_both(valid_event(**{**V11, field: DROP}))
    assert _canon([event])[0][1:] == _canon([dropped])[0][1:]  # all but request_id


@pytest.mark.parametrize(
    ("outcome", "ok", "schema_valid", "tool_calls_valid"),
    [
        ({}, None, None, None),
        ({"ok": False}, False, None, None),
        ({"schema_valid": True, "ok": None}, None, True, None),
        ({"tool_calls_valid": False}, None, None, False),
        ({"ok": True, "schema_valid": True, "tool_calls_valid": True}, True, True, True),
    ],
)
def test_outcome_absent_keys_are_unknown_never_false(
    outcome: dict[str, Any], ok: bool | None, schema_valid: bool | None,
    tool_calls_valid: bool | None,
) -> None:  # fmt: skip
    (event,) = parse_both(valid_event(outcome=outcome))
    assert (event.outcome_ok, event.outcome_schema_valid, event.outcome_tool_calls_valid) == (
        ok, schema_valid, tool_calls_valid)  # fmt: skip


def test_success_follows_outcome_ok_over_status() -> None:
    (failed,) = parse_both(valid_event(outcome={"ok": False}))
    (rescued,) = parse_both(valid_event(status="error", outcome={"ok": True}))
    (unknown,) = parse_both(valid_event(status="timeout", outcome={"schema_valid": True}))
    assert (failed.success, rescued.success, unknown.success) == (False, True, False)


@pytest.mark.parametrize(
    "overrides",
    [
        {"outcome": {"ok": True, "tests_passed": 12}},
        {"experiment": {"name": "e", "arm": "a", "started": "2026-11-01"}},
        {"itl_ms": {"p50": 1.0, "p99": 2.0, "max": 3.0, "p90": "x"}},
    ],
)
def test_unknown_keys_inside_v11_objects_are_ignored(overrides: dict[str, Any]) -> None:
    # as everywhere in the contract: a newer producer may add keys. The fast path refuses
    # them (its Structs forbid unknown fields), so the validator decides, and accepts.
    assert _fast_parse(orjson.dumps(valid_event(**overrides))) is None
    (event,) = parse_both(valid_event(**overrides))
    (plain,) = parse_both(valid_event(**{k: _known(v) for k, v in overrides.items()}))
    assert _canon([event])[0][1:] == _canon([plain])[0][1:]


def _known(value: dict[str, Any]) -> dict[str, Any]:
    known = {"ok", "schema_valid", "tool_calls_valid", "name", "arm", "p50", "p99", "max"}
    return {k: v for k, v in value.items() if k in known}


def test_itl_quantile_order_is_not_checked() -> None:
    # sketch-based producers may report p99 a rounding error above the exact max; the event
    # (outcome, cost, hashes) must still count
    (event,) = parse_both(valid_event(itl_ms={"p50": 5.0, "p99": 9.01, "max": 9.0}))
    assert (event.itl_p50_ms, event.itl_p99_ms, event.itl_max_ms) == (5.0, 9.01, 9.0)


def test_boundaries_are_accepted() -> None:
    tags = {f"{i:x}" * 256 if i else "🚀" * 256: "v" * 256 for i in range(16)}
    (event,) = parse_both(valid_event(
        tags=tags, experiment={"name": "x" * 256, "arm": "é" * 256},
        itl_ms={"p50": 0, "p99": 1e10, "max": 10**10}, gpu_seconds=1e10,
        prompt_hash="h" * 128, output_hash="🚀" * 128,
    ))  # fmt: skip
    assert event.tags == tags and len(event.tags) == 16
    assert (event.itl_p50_ms, event.itl_max_ms, event.gpu_seconds) == (0.0, 1e10, 1e10)
    assert type(event.itl_max_ms) is float
    (empty,) = parse_both(valid_event(tags={}, gpu_seconds=0))
    assert empty.tags == {} and empty.gpu_seconds == 0.0


def test_duplicate_tag_keys_count_once() -> None:
    pairs = ",".join(f'"lang":"v{i}"' for i in range(20))
    raw = orjson.dumps(valid_event(tags={"x": "y"})).replace(b'{"x":"y"}', f"{{{pairs}}}".encode())
    fast, slow = FAST.parse(raw), SLOW.parse(raw)
    assert _canon(fast[0]) == _canon(slow[0]) and fast[1] == slow[1] == []
    assert fast[0][0].tags == {"lang": "v19"}  # the last one wins, as for any key


def test_event_tags_do_not_alias_the_input() -> None:
    obj = valid_event(tags={"lang": "py"})
    event = event_from_obj(obj)
    obj["tags"]["lang"] = "go"
    assert event.tags == {"lang": "py"}


# --- rejected --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"tags": ["lang"]}, "tags must be an object (got array)"),
        ({"tags": "lang=py"}, "tags must be an object (got string 'lang=py')"),
        ({"tags": {f"k{i}": "v" for i in range(17)}}, "tags has 17 keys, at most 16 allowed"),
        ({"tags": {"": "x"}}, "tags key '' must be 1..256 characters (got 0)"),
        ({"tags": {"k" * 257: "x"}}, "must be 1..256 characters (got 257)"),
        ({"tags": {"lang": 7}}, "tags['lang'] must be a string (got number 7)"),
        ({"tags": {"lang": None}}, "tags['lang'] must be a string (got null)"),
        ({"tags": {"lang": ["py"]}}, "tags['lang'] must be a string (got array)"),
        ({"tags": {"lang": "p" * 257}}, "tags['lang'] must be at most 256 characters (got 257)"),
        ({"outcome": "ok"}, "outcome must be an object (got string 'ok')"),
        ({"outcome": [True]}, "outcome must be an object (got array)"),
        ({"outcome": {"ok": "true"}}, "outcome.ok must be a boolean or null (got string 'true')"),
        ({"outcome": {"ok": 1}}, "outcome.ok must be a boolean or null (got number 1)"),
        ({"outcome": {"schema_valid": 0}}, "outcome.schema_valid must be a boolean or null"),
        ({"outcome": {"tool_calls_valid": {}}},
         "outcome.tool_calls_valid must be a boolean or null (got object)"),
        ({"experiment": "exp-1"}, "experiment must be an object (got string 'exp-1')"),
        ({"experiment": {}}, "missing required field: experiment.name"),
        ({"experiment": {"name": "e"}}, "missing required field: experiment.arm"),
        ({"experiment": {"name": "", "arm": "a"}},
         "experiment.name must be 1..256 characters (got 0)"),
        ({"experiment": {"name": "e", "arm": 2}}, "experiment.arm must be a string (got number 2)"),
        ({"experiment": {"name": "e", "arm": "a" * 257}},
         "experiment.arm must be 1..256 characters (got 257)"),
        ({"itl_ms": 12.5}, "itl_ms must be an object (got number 12.5)"),
        ({"itl_ms": {"p99": 2, "max": 3}}, "missing required field: itl_ms.p50"),
        ({"itl_ms": {"p50": 1, "max": 3}}, "missing required field: itl_ms.p99"),
        ({"itl_ms": {"p50": 1, "p99": 2}}, "missing required field: itl_ms.max"),
        ({"itl_ms": {"p50": -1, "p99": 2, "max": 3}}, "itl_ms.p50 must be >= 0 (got -1)"),
        ({"itl_ms": {"p50": 1, "p99": -0.5, "max": 3}}, "itl_ms.p99 must be >= 0 (got -0.5)"),
        ({"itl_ms": {"p50": 1, "p99": 2, "max": "3"}},
         "itl_ms.max must be a number (got string '3')"),
        ({"itl_ms": {"p50": True, "p99": 2, "max": 3}},
         "itl_ms.p50 must be a number (got boolean true)"),
        ({"itl_ms": {"p50": 1, "p99": 2, "max": 1e11}}, "itl_ms.max is a huge number"),
        ({"gpu_seconds": -0.5}, "gpu_seconds must be >= 0 (got -0.5)"),
        ({"gpu_seconds": "1.5"}, "gpu_seconds must be a number (got string '1.5')"),
        ({"gpu_seconds": False}, "gpu_seconds must be a number (got boolean false)"),
        ({"gpu_seconds": 1e300}, "gpu_seconds is a huge number"),
        ({"prompt_hash": ""}, "prompt_hash must be 1..128 characters (got 0)"),
        ({"prompt_hash": "h" * 129}, "prompt_hash must be 1..128 characters (got 129)"),
        ({"output_hash": 1234}, "output_hash must be a string (got number 1234)"),
        ({"output_hash": "🚀" * 129}, "output_hash must be 1..128 characters (got 129)"),
    ],
)  # fmt: skip
def test_invalid_values_are_rejected_naming_the_field(
    overrides: dict[str, Any], reason: str
) -> None:
    assert reason in reject_both(valid_event(**overrides))
    # also inside a batch, beside a good event
    raw = orjson.dumps([valid_event(**V11), valid_event(**overrides)])
    for parser in (FAST, SLOW):
        events, rejections = parser.parse(raw)
        assert len(events) == 1 and [r.index for r in rejections] == [1]
        assert reason in rejections[0].reason


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"itl_ms": {"p50": float("nan"), "p99": 1, "max": 1}},
         "itl_ms.p50 must be finite (got nan)"),
        ({"itl_ms": {"p50": 1, "p99": 1, "max": float("inf")}},
         "itl_ms.max must be finite (got inf)"),
        ({"gpu_seconds": float("-inf")}, "gpu_seconds must be finite (got -inf)"),
        ({"gpu_seconds": 10**400}, "gpu_seconds is a huge number"),
    ],
)  # fmt: skip
def test_non_finite_values_that_json_cannot_carry(overrides: dict[str, Any], reason: str) -> None:
    # orjson never yields these from text (NaN is invalid JSON); event_from_obj still names them
    with pytest.raises(InvalidEvent) as info:
        event_from_obj(valid_event(**overrides))
    assert reason in info.value.reason


def test_first_v11_problem_wins_in_field_order() -> None:
    reason = reject_both(valid_event(tags=[], outcome=1, gpu_seconds=-1))
    assert reason == "tags must be an object (got array)"
    reason = reject_both(valid_event(e2e_ms=-1, outcome=1))
    assert reason.startswith("e2e_ms")


# --- serialising ---------------------------------------------------------------------------


def test_v10_output_is_byte_identical() -> None:
    # what every producer wrote before v1.1, byte for byte
    tail = request_tail({"request_id": "r"}, output_tokens=7, e2e_ms=0.1 + 0.2,
                        prompt_tokens=3, ttft_ms=0.05, temperature=0.0, instance="i",
                        engine="vllm")  # fmt: skip
    assert orjson.dumps(tail) == (
        b'{"request_id":"r","prompt_tokens":3,"output_tokens":7,"ttft_ms":0.05,"e2e_ms":0.3,'
        b'"temperature":0.0,"instance":"i","engine":"vllm"}'
    )
    event = SLOW.parse(orjson.dumps(valid_event(ts=1793628187.412)))[0][0]
    assert orjson.dumps(event_to_dict(event)) == (
        b'{"request_id":"' + event.request_id.encode() + b'","ts":"2026-11-02T14:03:07.412Z",'
        b'"route":"code-assistant","status":"ok","target":{"model":"llama-3.1-70b-instruct",'
        b'"revision":"2026-10-28","tokenizer":"llama3"},"draft":{"model":"llama-3.2-1b-instruct",'
        b'"revision":"2026-09-30","tokenizer":"llama3","pinned_target_revision":"2026-09-15"},'
        b'"spec":{"num_speculative_tokens":5,"drafted_tokens":240,"accepted_tokens":171,'
        b'"verify_steps":48,"accepted_per_position":[44,39,34,29,25]},"output_tokens":219,'
        b'"e2e_ms":2311.5,"prompt_tokens":812,"ttft_ms":142.0,"batch_size":12,"instance":"pod-3",'
        b'"engine":"vllm"}'
    )


def test_request_tail_writes_v11_fields_that_parse_back() -> None:
    base = {k: v for k, v in valid_event().items()
            if k not in ("prompt_tokens", "output_tokens", "ttft_ms", "e2e_ms")}  # fmt: skip
    obj = request_tail(base, output_tokens=219, e2e_ms=2311.5, engine="vllm", **V11_FIELDS)
    assert list(obj)[-7:] == ["tags", "outcome", "experiment", "itl_ms", "gpu_seconds",
                              "prompt_hash", "output_hash"]  # fmt: skip
    (event,) = parse_both(obj)
    assert _v11_of(event) == V11_FIELDS


def test_v11_fields_writes_only_what_is_set() -> None:
    assert v11_fields({}) == {}
    assert v11_fields({}, outcome_schema_valid=False) == {"outcome": {"schema_valid": False}}
    assert v11_fields({}, tags={}) == {"tags": {}}
    tags = {"a": "b"}
    written = v11_fields({}, tags=tags)
    assert written == {"tags": {"a": "b"}} and written["tags"] is not tags


@pytest.mark.parametrize(
    "kwargs",
    [
        {"experiment_name": "e"},
        {"experiment_arm": "candidate"},
        {"itl_p50_ms": 1.0, "itl_p99_ms": 2.0},
        {"itl_max_ms": 3.0},
    ],
)
def test_half_set_objects_are_a_producer_bug(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="needs"):
        v11_fields({}, **kwargs)


def test_estimated_gpu_seconds_are_not_written_back() -> None:
    # dead letters and re-serialised events say what the producer reported
    event = SLOW.parse(orjson.dumps(valid_event()))[0][0]
    event.gpu_seconds, event.gpu_estimated = 2.5, True
    assert "gpu_seconds" not in event_to_dict(event)
    event.gpu_estimated = False
    assert event_to_dict(event)["gpu_seconds"] == 2.5


_names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=20)
_ms = st.floats(min_value=0, max_value=1e10) | st.integers(min_value=0, max_value=10**6)


@st.composite
def v11_events(draw: st.DrawFn) -> dict[str, Any]:
    """A valid event with a random subset of the v1.1 fields."""
    fields = {
        "temperature": st.sampled_from([0, 0.7, 1.0]),
        "tags": st.dictionaries(_names, st.text(max_size=20), max_size=16),
        "outcome": st.fixed_dictionaries({}, optional={
            "ok": st.booleans() | st.none(), "schema_valid": st.booleans(),
            "tool_calls_valid": st.booleans()}),
        "experiment": st.fixed_dictionaries({"name": _names, "arm": _names}),
        "itl_ms": st.fixed_dictionaries({"p50": _ms, "p99": _ms, "max": _ms}),
        "gpu_seconds": _ms,
        "prompt_hash": st.text(min_size=1, max_size=128),
        "output_hash": st.text(min_size=1, max_size=128),
    }  # fmt: skip
    chosen = draw(st.sets(st.sampled_from(sorted(fields))))
    return valid_event(**{name: draw(fields[name]) for name in sorted(chosen)})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v11_events())
def test_serialise_then_parse_gives_the_same_event(obj: dict[str, Any]) -> None:
    (event,) = parse_both(obj)
    again = parse_both(event_to_dict(event))
    assert again == [event]
    assert _canon(again) == _canon([event])
    assert _fast_parse(orjson.dumps(event_to_dict(event))) is not None
