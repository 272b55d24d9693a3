"""The msgspec fast path of the parser against the hand-written validator (the slow path).

The fast path may refuse more than the validator (the message is then parsed the slow way),
but whatever it accepts must be exactly what the slow path gives: same events, field by field
and type by type, and same rejections (none). The differential tests below compare
``Parser(fast=True)`` with ``Parser(fast=False)`` on random, mostly near-valid messages whose
JSON text itself is varied (number spellings, escaped keys, duplicate keys, whitespace).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.telemetry import parse as parse_module
from monitor.telemetry import schema
from monitor.telemetry.event import Event, Rejection
from monitor.telemetry.parse import Parser, _fast_parse
from tests.monitor.telemetry.bad_inputs import DROP, bad_input_corpus, valid_event
from tests.monitor.telemetry.test_parse import json_values, near_timestamps

FAST = Parser(fast=True)
SLOW = Parser(fast=False)
# hypothesis examples per differential test; raise it for a long run, e.g. FAST_PARSE_EXAMPLES=50000
EXAMPLES = int(os.environ.get("FAST_PARSE_EXAMPLES", "600"))


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # an integer beyond 64 bits
        return json.dumps(value, ensure_ascii=False).encode()


def _canon(result: tuple[list[Event], list[Rejection]]) -> tuple[list[Any], list[Rejection]]:
    """Events down to each field's type and repr (0 != 0.0, -0.0 != 0.0 here)."""
    events, rejections = result
    canon = [
        [
            (f.name, type(getattr(e, f.name)), repr(getattr(e, f.name)))
            for f in dataclasses.fields(e)
        ]
        for e in events
    ]
    return canon, rejections


def check_same(raw: bytes) -> tuple[list[Event], list[Rejection]]:
    fast = FAST.parse(raw)
    slow = SLOW.parse(raw)
    assert _canon(fast) == _canon(slow), raw
    assert all(type(e) is Event for e in fast[0])
    return fast


# --- deterministic checks ----------------------------------------------------------------------


def test_schema_limits_match_the_validator() -> None:
    for name in ("MAX_ID_CHARS", "MAX_NAME_CHARS", "MAX_SPEC_TOKENS", "MAX_COUNT", "MAX_MS",
                 "MAX_TAGS", "MAX_HASH_CHARS"):
        assert getattr(schema, name) == getattr(parse_module, name), name


_V11: dict[str, Any] = {
    "tags": {"lang": "py", "tenant": "free"},
    "outcome": {"ok": True, "schema_valid": False, "tool_calls_valid": None},
    "experiment": {"name": "exp-1", "arm": "candidate"},
    "itl_ms": {"p50": 12, "p99": 40.5, "max": 91.25},
    "gpu_seconds": 1.5, "prompt_hash": "p" * 64, "output_hash": "o" * 64,
}  # fmt: skip


@pytest.mark.parametrize(
    "event",
    [
        valid_event(),
        valid_event(draft=DROP, spec=DROP),
        valid_event(**{"spec.method": "eagle", "spec.params": {"k": 3, "policy": "fixed"}}),
        valid_event(status="timeout", draft_evicted=True, temperature=0, ts=1793628187),
        valid_event(**{k: None for k in ("status", "draft", "spec", "prompt_tokens", "ttft_ms",
                                          "batch_size", "instance", "engine", "draft_evicted",
                                          "temperature", *_V11)}),
        valid_event(**_V11),
        valid_event(tags={}, outcome={}, itl_ms={"p50": 0, "p99": 1e10, "max": 10**10},
                    gpu_seconds=0, prompt_hash="🚀" * 128, output_hash="x",
                    experiment={"name": "é" * 256, "arm": "b"}),
        valid_event(tags={f"k{i}": "" for i in range(16)}, outcome={"ok": False}),
        valid_event(request_id="x" * 128, ts="2000-01-01T00:00:00Z", output_tokens=10**9,
                    e2e_ms=1e10, ttft_ms=1e10, batch_size=1, route="🚀" * 128,
                    spec={"num_speculative_tokens": 64, "drafted_tokens": 0,
                          "accepted_tokens": 0}),
        valid_event(ts="2026-12-31T23:59:60Z"),
        valid_event(ts="2026-11-02t14:03:07.5+05:30"),
    ],
)  # fmt: skip
def test_valid_events_take_the_fast_path(event: dict[str, Any]) -> None:
    raw = orjson.dumps(event)
    fast = _fast_parse(raw)
    assert fast is not None and len(fast) == 1
    assert _canon((fast, [])) == _canon(SLOW.parse(raw))
    batch = orjson.dumps([event, event])
    assert _fast_parse(batch) is not None
    check_same(batch)


def test_the_bad_input_corpus_gives_the_same_results() -> None:
    for bad in bad_input_corpus():
        check_same(bad.message)


def _with(literal: bytes, field: str) -> bytes:
    marker = "__literal__"
    base = copy.deepcopy(_V11) if field.split(".")[0] in _V11 else {}
    return orjson.dumps(valid_event(**{**base, field: marker})).replace(
        f'"{marker}"'.encode(), literal
    )


@pytest.mark.parametrize(
    ("raw", "valid"),
    [
        # msgspec skips unknown fields without checking UTF-8 or overflow; orjson does not
        (_with(b'"\xff"', "extra"), 0),
        (_with(b'"\xed\xa0\x80"', "extra"), 0),
        (_with(b"1e999", "extra"), 0),
        (_with(b"1e999", "spec.future"), 0),
        (_with(b'"\xff"', "target.quant"), 0),
        # integers beyond a double: orjson fails, msgspec keeps an int
        (_with(b"1" * 400, "spec.params"), 0),
        (_with(b'{"k": ' + b"1" * 400 + b"}", "spec.params"), 0),
        (_with(b'{"k": ' + b"1" * 300 + b"}", "spec.params"), 1),
        (_with(b'{"k": [[[[[[[[[[[[1]]]]]]]]]]]]}', "spec.params"), 1),
        (_with(b'{"k": ' + b"[" * 1100 + b"]" * 1100 + b"}", "spec.params"), 0),
        (_with(b'{"k": 1.7976931348623157e308, "j": -1e308}', "spec.params"), 1),
        (_with(b'{"k": 1.7976931348623159e308}', "spec.params"), 0),
        (_with(b"1" * 400, "ts"), 0),
        (_with(b"18446744073709551616", "output_tokens"), 0),
        (_with(b"-9223372036854775809", "ts"), 0),
        (_with(b"1793628187e0", "ts"), 1),
        (_with(b"240e0", "output_tokens"), 0),
        (_with(b"-0", "temperature"), 1),
        (_with(b"-0.0", "temperature"), 1),
        (_with(b"10000000000.000001", "e2e_ms"), 0),
        (_with(b"10000000000.0000001", "e2e_ms"), 1),
        (_with(b"1e-400", "ttft_ms"), 1),
        (_with(b'"\xff"', "outcome.future"), 0),
        (_with(b"1e999", "itl_ms.p90"), 0),
        (_with(b'{"p50":1,"p99":2,"max":-0}', "itl_ms"), 1),
        (_with(b'{"p50":1,"p99":2,"max":1e999}', "itl_ms"), 0),
        (_with(b"18446744073709551616", "gpu_seconds"), 0),
        (_with(b"9999999999", "gpu_seconds"), 1),
        (_with(b"1" * 400, "gpu_seconds"), 0),
        (_with(b'{"a":"1","a":2}', "tags"), 0),
        (_with(b'{"a":2,"a":"1"}', "tags"), 1),
        (_with(b'{"l\\u0061ng":"py","lang":"go"}', "tags"), 1),
        (_with(b'{"a":"\\ud800"}', "tags"), 0),
        (_with(b'{"ok":true,"ok":"no"}', "outcome"), 0),
        (_with(b'{"name":"e","arm":"a","arm":""}', "experiment"), 0),
        # keys: escapes, duplicates (the last one wins in both)
        (orjson.dumps(valid_event()).replace(b'"ttft_ms"', b'"ttft\\u005fms"'), 1),
        (orjson.dumps(valid_event(ttft_ms=1.0)).replace(b'"ttft_ms":1.0', b'"ttft\\u005fms":9e9'),
         0),
        (orjson.dumps(valid_event()).replace(b"{", b'{"ttft_ms":9e9,', 1), 1),
        (orjson.dumps(valid_event()).replace(b"{", b'{"ttft_ms":"x",', 1), 1),
        (orjson.dumps(valid_event()).replace(b'"e2e_ms":2311.5', b'"e2e_ms":2311.5,"e2e_ms":1'),
         0),
        (orjson.dumps(valid_event()).replace(b'"target":{', b'"target":{"model":null,'), 1),
        (orjson.dumps(valid_event()).replace(b'"target":', b'"target":{"model":"m"},"target":'),
         1),
        (orjson.dumps(valid_event()).replace(b'"target":', b'"target":7,"target":'), 1),
        (orjson.dumps(valid_event()).replace(b'"draft":{', b'"draft":{"pinned_target_revision":'
                                             b'"' + b"p" * 300 + b'",'), 1),
        (orjson.dumps(valid_event()).replace(b'"route":"code-assistant"',
                                             b'"route":"\\ud83d\\ude80\\u0000\\/"'), 1),
        (orjson.dumps(valid_event()).replace(b'"route":"code-assistant"', b'"route":"\\ud800"'), 0),
        (b"\xef\xbb\xbf" + orjson.dumps(valid_event()), 0),
        (b" \t\r\n" + orjson.dumps([valid_event()]) + b" \r\n", 1),
        (orjson.dumps(valid_event()) + b"\n" + orjson.dumps([valid_event()]), 2),
        (orjson.dumps(valid_event()) + b"\r\n" + orjson.dumps(valid_event()) + b"\n \n", 2),
        (orjson.dumps(valid_event()) + b"\n" + orjson.dumps(valid_event(route=DROP)), 1),
        (b"[]", 0),
        (b"[]\n[]", 0),
    ],
)  # fmt: skip
def test_known_decoder_differences(raw: bytes, valid: int) -> None:
    events, _ = check_same(raw)
    assert len(events) == valid


_IDS = ["", "x", "x" * 128, "x" * 129, "🚀" * 128, "🚀" * 129, "é" * 129, 7, None, True]
_NAMES = ["", "x" * 256, "x" * 257, "🚀" * 256, "🚀" * 257, 7, None, ["x"], {}]
_COUNTS = [-1, 0, 1, 10**9, 10**9 + 1, True, False, 1.0, 0.0, -0.0, 2**63, 2**64 - 1, 2**64,
           -(2**63) - 1, 1e30, "1", None, DROP]
_MS = [-1, -0.0, 0, 0.0, -5e-324, 5e-324, -1e-300, 1e10, math.nextafter(1e10, math.inf),
       10**10, 10**10 + 1, 1e308, 2**64, True, "1", None, DROP]
_EDGES: dict[str, list[Any]] = {
    "request_id": _IDS, "route": _IDS,
    "target.model": _NAMES, "target.revision": _NAMES, "target.tokenizer": _NAMES,
    "draft.model": _NAMES, "draft.revision": _NAMES, "draft.tokenizer": _NAMES,
    "draft.pinned_target_revision": _NAMES, "spec.method": _NAMES, "instance": _NAMES,
    "engine": _NAMES,
    "output_tokens": _COUNTS, "prompt_tokens": _COUNTS, "spec.verify_steps": _COUNTS,
    "spec.drafted_tokens": _COUNTS, "batch_size": _COUNTS,
    "e2e_ms": _MS, "ttft_ms": _MS, "temperature": _MS,
    "ts": [946684800, 946684799, 4102444799, 4102444800, 946684800.0, 946684799.9999999,
           math.nextafter(4102444800.0, 0), 4102444800.0, True, None, "", "2000-01-01T00:00:00Z",
           "1999-12-31T23:59:59.999999Z", "2099-12-31T23:59:60Z", "2100-01-01T00:00:00Z",
           "2026-11-02T14:03:07.412"],
    "status": ["ok", "error", "timeout", "cancelled", "OK", "", None, 1, DROP],
    "draft_evicted": [True, False, None, 0, 1, "true"],
    "draft": [None, DROP, {}, [], "d"], "spec": [None, DROP, {}, [], "s"], "target": [None, {}],
    "spec.params": [None, {}, [], "p", {"a": [1, {"b": None}]}, {"a": 2**64}, {"a": 1e308}],
    "tags": [None, DROP, {}, [], "t", {"": "x"}, {"x" * 256: "y" * 256}, {"x" * 257: "y"},
             {"x": "y" * 257}, {"🚀" * 256: "🚀" * 256}, {"x": None}, {"x": 1}, {"x": True},
             {str(i): "v" for i in range(16)}, {str(i): "v" for i in range(17)}],
    "outcome": [None, DROP, {}, [], True, "ok", {"ok": None}, {"ok": 1}, {"ok": 0},
                {"schema_valid": "true"}, {"tool_calls_valid": False}, {"other": 1}],
    "outcome.ok": [True, False, None, DROP, 1, 0, "true", []],
    "outcome.schema_valid": [True, False, None, DROP, 1.0, {}],
    "outcome.tool_calls_valid": [True, False, None, DROP, "false"],
    "experiment": [None, DROP, {}, [], "exp", {"name": "e"}, {"arm": "a"},
                   {"name": "e", "arm": "a", "x": 1}],
    "experiment.name": _NAMES + [DROP], "experiment.arm": _NAMES + [DROP],
    "itl_ms": [None, DROP, {}, [], 5, {"p50": 1, "p99": 2}, {"p50": 3, "p99": 2, "max": 1},
               {"p50": 1, "p99": 2, "max": 3, "p90": 2}],
    "itl_ms.p50": _MS, "itl_ms.p99": _MS, "itl_ms.max": _MS, "gpu_seconds": _MS,
    "prompt_hash": _IDS, "output_hash": _IDS + ["h" * 128, "h" * 129, "🚀" * 129],
}  # fmt: skip


def _edge_cases() -> list[dict[str, Any]]:
    # v1.1 objects present, so that their inner paths exist to override
    cases = [valid_event(**copy.deepcopy(_V11), **{path: value})
             if path.split(".")[0] in _V11 and "." in path
             else valid_event(**{path: value})
             for path, values in _EDGES.items() for value in values]  # fmt: skip
    for nst in (0, 1, 64, 65):  # with and without a matching accepted_per_position
        cases.append(valid_event(**{"spec.num_speculative_tokens": nst,
                                    "spec.accepted_per_position": DROP}))  # fmt: skip
        cases.append(valid_event(**{"spec.num_speculative_tokens": nst,
                                    "spec.accepted_per_position": [171] + [0] * (nst - 1)}))
    for accepted, drafted in ((0, 0), (240, 240), (241, 240), (-1, 0)):
        cases.append(valid_event(**{"spec.accepted_tokens": accepted,
                                    "spec.drafted_tokens": drafted,
                                    "spec.accepted_per_position": DROP}))  # fmt: skip
    for per_position in ([44, 39, 34, 29, 25], [44, 39, 34, 29, 24], [44, 39, 34, 54],
                         [171, 0, 0, 0, 0, 0], [44, 39, 34, 29, 25.0], [44, 39, 34, 29, True],
                         [44, 39, -1, 29, 60], [], None, "44", [None] * 5):  # fmt: skip
        cases.append(valid_event(**{"spec.accepted_per_position": per_position}))
    for ttft in (2311.5, math.nextafter(2311.5, math.inf), math.nextafter(2311.5, 0)):
        cases.append(valid_event(ttft_ms=ttft))
    return cases


def test_edge_values_give_the_same_results() -> None:
    accepted = 0
    for event in _edge_cases():
        raw = _dumps(event)
        events, _ = check_same(raw)
        check_same(b"[" + raw + b"," + raw + b"]")
        if events and _known_fields_only(event):
            accepted += 1
            assert _fast_parse(raw) is not None, raw
    assert accepted > 100


def test_fast_path_internal_errors_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(raw: bytes) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(parse_module, "_fast_decode", boom)
    raw = orjson.dumps([valid_event(), valid_event(e2e_ms=-1)])
    assert _canon(Parser().parse(raw)) == _canon(SLOW.parse(raw))
    assert len(Parser().parse(raw)[0]) == 1


# --- differential property tests ---------------------------------------------------------------

_unicode = st.characters(blacklist_categories=("Cs",))


def _one_in(k: int) -> st.SearchStrategy[bool]:
    """True about once in ``k`` draws (hypothesis favours 0 and the bounds, so avoid them)."""
    return st.integers(min_value=0, max_value=10**6).map(lambda n: n % k == k // 2 + 1)


def _rarely(draw: st.DrawFn, k: int) -> bool:
    return draw(_one_in(k))


def _mostly(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """``usual`` nine times in ten, else ``rare`` (edge cases, many of them invalid)."""
    return _one_in(10).flatmap(lambda is_rare: rare if is_rare else usual)


def _sized_text(low: int, high: int) -> st.SearchStrategy[str]:
    """Mostly short valid text, sometimes right at (or just past) a length limit."""
    near = [n for n in (low - 1, low, low + 1, high - 1, high, high + 1) if n >= 0]
    return _mostly(
        st.text(_unicode, min_size=max(low, 0), max_size=12),
        st.sampled_from(near).flatmap(
            lambda n: st.sampled_from(["x", "é", "🚀", "\x00"]).map(lambda c: c * n)
        )
        | st.text(_unicode, min_size=max(low - 1, 0), max_size=high + 1),
    )


def _int_near(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [low - 1, low, low + 1, high - 1, high, high + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64,
             -(2**63), -(2**63) - 1, 10**400]  # fmt: skip
    return _mostly(
        st.integers(min_value=low, max_value=min(high, 10**4)) | st.sampled_from([low, high]),
        st.sampled_from(edges),
    )


def _float_near(high: float) -> st.SearchStrategy[float]:
    edges = [-0.0, 5e-324, -5e-324, math.nextafter(high, math.inf), 1e300, -1e-300, -1.0]
    return _mostly(
        st.floats(min_value=0, max_value=5000)
        | st.sampled_from([0.0, high, math.nextafter(high, 0), 1e-300]),
        st.sampled_from(edges) | st.floats(allow_nan=False, allow_infinity=False),
    )


_ts_values = _mostly(
    st.sampled_from(["2026-11-02T14:03:07Z", "2026-11-02T14:03:07.412Z"])
    | st.floats(min_value=946684800.0, max_value=4102444799.0)
    | st.integers(min_value=946684800, max_value=4102444799)
    | st.datetimes().map(lambda d: d.isoformat() + "Z")
    | st.datetimes().map(lambda d: d.isoformat(timespec="milliseconds") + "+05:30"),
    near_timestamps()
    | st.sampled_from(["2000-01-01T00:00:00Z", "1999-12-31T23:59:59.999Z",
                       "2099-12-31T23:59:59.999999Z", "2100-01-01T00:00:00Z",
                       "2026-12-31T23:59:60Z", "2026-11-02 14:03:07z",
                       "2026-11-02T14:03:07.412+25:00", "2026-11-02T14:03:07.", "",
                       "2026-11-02T14:03:07.412\u0662Z", "2026-11-02T14:03:07.4121234567Z",
                       "2000-01-01T00:30:00+01:00", "2026-11-02T14:03:07.412"])
    | st.floats(min_value=9e8, max_value=4.2e9)
    | st.integers(min_value=9 * 10**8, max_value=42 * 10**8)
    | st.sampled_from([946684800, 946684799, 4102444800, 4102444799, 946684800.0,
                       4102444799.999999, math.nextafter(4102444800.0, 0), 0, -1, 1e30, True]),
)  # fmt: skip

_weird = st.one_of(
    json_values,
    st.none(),
    st.booleans(),
    st.just(DROP),
    st.integers(min_value=-3, max_value=300),
    st.floats(min_value=-1, max_value=5000, allow_nan=False),
    st.sampled_from(["", "ok", "OK", "error", "x" * 129, "y" * 257, [], {}, [1], {"a": 1}, "1",
                     "NaN", 1.0, 0.0, -0.0, 1e10, 1e10 + 2e-6, 10**9, 10**9 + 1, 64, 65, 2**64]),
    st.lists(st.integers(min_value=-1, max_value=80), max_size=6),
)

_PATHS = (
    "request_id", "ts", "route", "status", "target", "target.model", "target.revision",
    "target.tokenizer", "draft", "draft.model", "draft.revision", "draft.tokenizer",
    "draft.pinned_target_revision", "spec", "spec.num_speculative_tokens",
    "spec.drafted_tokens", "spec.accepted_tokens", "spec.verify_steps",
    "spec.accepted_per_position", "spec.method", "spec.params", "output_tokens",
    "prompt_tokens", "ttft_ms", "e2e_ms", "batch_size", "instance", "engine", "draft_evicted",
    "temperature", "unknown", "target.unknown", "draft.unknown", "spec.unknown",
    "tags", "tags.lang", "outcome", "outcome.ok", "outcome.schema_valid",
    "outcome.tool_calls_valid", "outcome.unknown", "experiment", "experiment.name",
    "experiment.arm", "experiment.unknown", "itl_ms", "itl_ms.p50", "itl_ms.p99", "itl_ms.max",
    "itl_ms.unknown", "gpu_seconds", "prompt_hash", "output_hash",
)  # fmt: skip


def _maybe(draw: st.DrawFn, value: st.SearchStrategy[Any], null_ok: bool = True) -> Any:
    """A value, or absent (DROP), or null."""
    choice = draw(st.integers(min_value=0, max_value=5))
    if choice == 0:
        return DROP
    if choice == 1 and null_ok:
        return None
    return draw(value)


def _sparse(draw: st.DrawFn, value: st.SearchStrategy[Any]) -> Any:
    """Absent (DROP) half the time, else like ``_maybe``."""
    return DROP if draw(st.booleans()) else _maybe(draw, value)


@st.composite
def random_events(draw: st.DrawFn) -> Any:
    """A random event near the contract: mostly valid, with random fields and mutations."""
    nst = draw(_mostly(st.integers(min_value=1, max_value=6), st.sampled_from([64, 65, 0])))
    per_position = draw(st.lists(st.integers(min_value=0, max_value=50), min_size=nst, max_size=nst)
                        if nst <= 64 else st.just([1] * nst))  # fmt: skip
    accepted = sum(per_position)
    drafted = accepted + draw(st.integers(min_value=0, max_value=100))
    e2e = draw(_float_near(1e10) | st.integers(min_value=0, max_value=10**4))
    share = draw(_mostly(st.floats(min_value=0, max_value=1), st.just(2.0)))
    ttft = share * (e2e if e2e > 0 else 1.0)
    event: dict[str, Any] = {
        "request_id": draw(_sized_text(1, 128)),
        "ts": draw(_ts_values),
        "route": draw(_sized_text(1, 128)),
        "status": _maybe(draw, _mostly(st.sampled_from(["ok", "error", "timeout", "cancelled"]),
                                        st.sampled_from(["Ok", "", "okay"]))),
        "target": {
            "model": draw(_sized_text(1, 256)),
            "revision": draw(_sized_text(1, 256)),
            "tokenizer": draw(_sized_text(1, 256)),
        },
        "draft": _maybe(draw, st.fixed_dictionaries({
            "model": _sized_text(1, 256), "revision": _sized_text(1, 256),
            "tokenizer": _sized_text(1, 256),
        }, optional={"pinned_target_revision": st.none() | _sized_text(0, 256)})),
        "spec": _maybe(draw, st.fixed_dictionaries({
            "num_speculative_tokens": st.just(nst), "drafted_tokens": st.just(drafted),
            "accepted_tokens": st.just(accepted),
        }, optional={
            "verify_steps": st.none() | _int_near(0, 10**9),
            "accepted_per_position": st.none() | st.just(per_position),
            "method": st.none() | _sized_text(0, 256),
            "params": st.none() | st.dictionaries(st.text(max_size=5), json_values, max_size=4),
        })),
        "output_tokens": draw(_int_near(0, 10**9)),
        "e2e_ms": e2e,
        "prompt_tokens": _maybe(draw, _int_near(0, 10**9)),
        "ttft_ms": _maybe(draw, _mostly(st.just(ttft), _float_near(1e10))),
        "batch_size": _maybe(draw, _int_near(1, 10**9)),
        "instance": _maybe(draw, _sized_text(0, 256)),
        "engine": _maybe(draw, _sized_text(0, 256)),
        "draft_evicted": _maybe(draw, st.booleans()),
        "temperature": _maybe(draw, _float_near(1e10) | st.integers(min_value=0, max_value=3)),
        # v1.1, absent more often than not (as in traffic)
        "tags": _sparse(draw, st.dictionaries(_sized_text(1, 256), _sized_text(0, 256),
                                              max_size=draw(_mostly(st.just(4), st.just(18))))),
        "outcome": _sparse(draw, st.fixed_dictionaries({}, optional={
            "ok": st.none() | st.booleans(), "schema_valid": st.none() | st.booleans(),
            "tool_calls_valid": st.none() | st.booleans()})),
        "experiment": _sparse(draw, st.fixed_dictionaries({
            "name": _sized_text(1, 256), "arm": _sized_text(1, 256)})),
        "itl_ms": _sparse(draw, st.fixed_dictionaries({
            "p50": _float_near(1e10), "p99": _float_near(1e10),
            "max": _float_near(1e10) | st.integers(min_value=0, max_value=10**4)})),
        "gpu_seconds": _sparse(draw, _float_near(1e10) | st.integers(min_value=0, max_value=9)),
        "prompt_hash": _sparse(draw, _sized_text(1, 128)),
        "output_hash": _sparse(draw, _sized_text(1, 128)),
    }  # fmt: skip
    event = {k: v for k, v in event.items() if v is not DROP}
    for _ in range(draw(st.integers(min_value=1, max_value=3)) if _rarely(draw, 4) else 0):
        *parents, leaf = draw(st.sampled_from(_PATHS)).split(".")
        node = event.get(parents[0]) if parents else event
        if not isinstance(node, dict):
            continue
        value = draw(_weird)
        if value is DROP:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    if _rarely(draw, 20):
        return draw(json_values)  # not an event at all
    return event


def _number_text(draw: st.DrawFn, value: int | float) -> str:
    """One of the JSON spellings of a number (they may read back as int or float)."""
    if not _rarely(draw, 4):
        return json.dumps(value).replace("Infinity", "1e999")  # the usual spelling
    if type(value) is int:
        return draw(st.sampled_from([
            str(value), f"{value}.0", f"{value}e0", f"{value}E+0", f"{value}0e-1",
            "-0" if value == 0 else str(value),
        ]))  # fmt: skip
    if not math.isfinite(value):
        return draw(st.sampled_from(["1e999", "-1e999"]))
    text = json.dumps(value)
    return draw(st.sampled_from([
        text, f"{value:.17g}", f"{value:.25e}", f"{value:.3e}", f"{value:.20f}",
        text.replace("e", "E"), text + "0" if "." in text and "e" not in text else text,
        f"{value!r}".replace("e+", "e"),
    ])).replace("inf", "1e999")  # fmt: skip


def _string_text(draw: st.DrawFn, text: str) -> str:
    if draw(st.integers(min_value=0, max_value=3)):
        return json.dumps(text, ensure_ascii=False)
    return json.dumps(text, ensure_ascii=True)  # \uXXXX escapes, surrogate pairs for astral


@st.composite
def json_texts(draw: st.DrawFn, value: Any, depth: int = 0) -> str:
    """``value`` as JSON text, spelled in one of many equivalent (or near) ways."""
    space = draw(st.sampled_from(["", "", " ", "\n", " \t\r\n"])) if depth < 3 else ""
    if value is None or type(value) is bool:
        return json.dumps(value)
    if type(value) in (int, float):
        return _number_text(draw, value)
    if type(value) is str:
        return _string_text(draw, value)
    if type(value) is list:
        return "[" + ",".join(space + draw(json_texts(v, depth + 1)) for v in value) + "]"
    assert type(value) is dict
    parts = []
    for key, item in value.items():
        if _rarely(draw, 20):
            # an earlier duplicate of this key: the later one must win on both paths
            earlier = draw(_weird)
            if earlier is not DROP:
                parts.append(f"{_string_text(draw, key)}:{draw(json_texts(earlier, depth + 1))}")
        parts.append(f"{_string_text(draw, key)}{space}:{space}{draw(json_texts(item, depth + 1))}")
    return "{" + space + ",".join(parts) + space + "}"


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from(["one", "batch", "lines", "dumps"]))
    if shape == "one":
        return draw(json_texts(draw(random_events()))).encode()
    if shape == "dumps":
        return _dumps(draw(st.lists(random_events(), max_size=4)))
    if shape == "batch":
        events = draw(st.lists(random_events(), max_size=5))
        return draw(json_texts(events)).encode()
    lines = [draw(json_texts(draw(random_events() | st.lists(random_events(), max_size=3))))
             for _ in range(draw(st.integers(min_value=1, max_value=4)))]  # fmt: skip
    junk = draw(st.sampled_from(["", "", "17", "{", "[1,", "\ufeff{}", " "]))
    return "\n".join([*lines, junk]).encode()


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(messages())
def test_fast_path_equals_slow_path(raw: bytes) -> None:
    check_same(raw)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip
@given(st.lists(random_events(), min_size=1, max_size=4))
def test_fast_path_equals_slow_path_on_plain_batches(batch: list[Any]) -> None:
    raw = _dumps(batch)
    fast = check_same(raw)
    # the fast path is no dead code: a message without unknown fields whose events are all valid
    # is decoded by it (all-valid batches are common in this strategy)
    if not fast[1] and all(_known_fields_only(e) for e in batch):
        assert _fast_parse(raw) is not None, raw


_KNOWN = {
    "": {f for f in schema.RawEvent.__struct_fields__},
    "target": set(schema.Target.__struct_fields__),
    "draft": set(schema.Draft.__struct_fields__),
    "spec": set(schema.Spec.__struct_fields__),
    "outcome": set(schema.Outcome.__struct_fields__),
    "experiment": set(schema.Experiment.__struct_fields__),
    "itl_ms": set(schema.Itl.__struct_fields__),
}


def _known_fields_only(event: Any) -> bool:
    if type(event) is not dict or not set(event) <= _KNOWN[""]:
        return False
    for part in ("target", "draft", "spec", "outcome", "experiment", "itl_ms"):
        inner = event.get(part)
        if type(inner) is dict and not set(inner) <= _KNOWN[part]:
            return False
    params = (event.get("spec") or {}).get("params")
    return not params or parse_module._plain_params(params, 0)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=200))
def test_fast_path_equals_slow_path_on_bytes(raw: bytes) -> None:
    check_same(raw)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(min_value=0, max_value=600), st.binary(min_size=1, max_size=4),
       st.sampled_from([b"", b"\n"]))  # fmt: skip
def test_fast_path_equals_slow_path_on_corrupted_events(at: int, junk: bytes, end: bytes) -> None:
    good = orjson.dumps(valid_event())
    check_same(good[:at] + junk + good[at:] + end)
    check_same(good[:at] + good[at + len(junk):])
