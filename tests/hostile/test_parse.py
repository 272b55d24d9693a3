"""The parser on hostile names and bytes: every message gives events or rejections with a
reason, never an exception; names within the limits come back byte-equal, names over them
are rejected naming the field, and the pipeline dead-letters them and goes on."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.config import IngestConfig
from monitor.deadletter import FileDeadLetter
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.telemetry.event import Event
from monitor.telemetry.parse import Parser
from monitor.telemetry.serialize import event_to_dict
from tests.hostile import (
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    NAME_FIELDS,
    RAW_BREAKERS,
    event,
    hostile_text,
    long_text,
    names,
)
from tests.monitor.test_pipeline import MemoryStore

# Event attribute of each name field (draft fields and method are optional: None when absent).
ATTRIBUTE = {"route": "route", "target.model": "target_model",
             "target.revision": "target_revision", "target.tokenizer": "target_tokenizer",
             "draft.model": "draft_model", "draft.revision": "draft_revision",
             "draft.tokenizer": "draft_tokenizer", "spec.method": "method"}
LIMIT = {f: MAX_ID_CHARS if f == "route" else MAX_NAME_CHARS for f in NAME_FIELDS}
# The order event_from_obj checks the fields in: the first one over its limit is named.
CHECK_ORDER = ("route", "target.model", "target.revision", "target.tokenizer", "draft.model",
               "draft.revision", "draft.tokenizer", "spec.method")


def attributes(e: Event) -> dict[str, Any]:
    return {f: getattr(e, a) for f, a in ATTRIBUTE.items()}


def no_internal_error(rejections: list[Any]) -> None:
    assert not [r for r in rejections if r.reason.startswith("internal error")], rejections


@given(names(), st.sampled_from(["object", "batch", "lines"]))
def test_names_within_the_limits_come_back_byte_equal(fields: dict[str, str], shape: str) -> None:
    doc = event(fields)
    raw = {"object": orjson.dumps(doc), "batch": orjson.dumps([doc, doc]),
           "lines": orjson.dumps(doc) + b"\r\n" + orjson.dumps(doc)}[shape]
    for fast in (True, False):
        events, rejections = Parser(fast=fast).parse(raw)
        assert rejections == []
        assert len(events) == (1 if shape == "object" else 2)
        for e in events:
            assert attributes(e) == fields


@st.composite
def some_too_long(draw: st.DrawFn) -> tuple[dict[str, str], str]:
    fields = draw(names())
    over = draw(st.lists(st.sampled_from(NAME_FIELDS), min_size=1, unique=True))
    for f in over:
        fields[f] = draw(long_text(LIMIT[f]))
    first = next(f for f in CHECK_ORDER if f in over)
    return fields, first


@given(some_too_long())
def test_names_over_the_limits_are_rejected_naming_the_field(case: tuple[dict[str, str], str]
                                                             ) -> None:
    fields, first = case
    raw = orjson.dumps(event(fields))
    for fast in (True, False):
        events, rejections = Parser(fast=fast).parse(raw)
        assert events == []
        [r] = rejections
        assert r.reason.startswith(f"{first} must be"), r.reason
        assert str(len(fields[first])) in r.reason and r.raw == raw


@given(hostile_text(1, 40), st.lists(st.sampled_from(RAW_BREAKERS), min_size=1, max_size=3),
       st.sampled_from(["route", "target.model", "draft.revision", "request_id"]))
def test_broken_utf8_and_lone_surrogates_are_rejected_and_neighbours_kept(
        text: str, breakers: list[bytes], field: str) -> None:
    marker = "\u2603MARK\u2603"  # a valid placeholder, replaced by the raw bytes
    bad = orjson.dumps(event({field: marker} if field != "request_id" else {}, 1,
                             **({"request_id": marker} if field == "request_id" else {})))
    cut = orjson.dumps(text)[1:-1]  # the text as JSON string content
    # "x" between breakers: two lone surrogate escapes side by side could make a valid pair
    bad = bad.replace(orjson.dumps(marker)[1:-1], cut + b"x".join(breakers) + cut)
    good = orjson.dumps(event({"route": text}, 2))
    for raw, want in ((bad, 0), (bad + b"\n" + good, 1)):
        events, rejections = Parser().parse(raw)
        # a raw newline among the breakers splits the bad event over two lines: two rejections
        assert len(events) == want and rejections
        no_internal_error(rejections)
        for r in rejections:
            assert "UTF-8" in r.reason or "JSON" in r.reason or "surrogate" in r.reason, r


@given(st.binary(max_size=64), hostile_text(1, 20))
def test_arbitrary_bytes_around_hostile_text_never_raise(junk: bytes, text: str) -> None:
    for raw in (junk, junk + text.encode(), text.encode() + b"\n" + junk,
                orjson.dumps(event({"route": text})) + junk):
        events, rejections = Parser().parse(raw)
        assert events or rejections
        no_internal_error(rejections)


@settings(max_examples=40)
@given(st.lists(st.tuples(names(), st.sampled_from(NAME_FIELDS), st.booleans()), min_size=1,
                max_size=6))
def test_pipeline_dead_letters_what_it_rejects_and_counts_the_rest(
        tmp_path_factory: Any, cases: list[tuple[dict[str, str], str, bool]]) -> None:
    """Each rejected message is one dead-letter record with its reason and its exact bytes;
    each valid one is counted; the pipeline never stops."""
    path: Path = tmp_path_factory.mktemp("dl") / "dead.jsonl"
    store = MemoryStore()
    registry = CollectorRegistry()
    sink = FileDeadLetter(str(path))
    p = Pipeline(store, "hostile", IngestConfig(), IngestMetrics(registry), sink)
    p.assign([0])
    sent: list[bytes] = []
    valid = 0
    for i, (fields, field, too_long) in enumerate(cases):
        if too_long:
            fields = {**fields, field: "\u202e<" * LIMIT[field] + "x"}
        raw = orjson.dumps(event(fields, i))
        p.process(0, i, raw)
        if too_long:
            sent.append(raw)
        else:
            valid += 1
    assert p.checkpoint()
    sink.close()
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert [r.get("raw", "").encode() or base64.b64decode(r["raw_base64"]) for r in records] \
        == sent
    assert all(" must be " in r["reason"] and " characters (got " in r["reason"]
               for r in records)
    assert p.summary.events == valid and p.summary.invalid == len(sent)
    assert registry.get_sample_value("specwatch_dead_letters_total") == len(sent)
    assert store.offsets[0] == len(cases)


@given(names(), st.floats(1e9, 4e9) | st.integers(946684800, 4102444799).map(
    lambda s: f"{datetime.fromtimestamp(s, UTC):%Y-%m-%dT%H:%M:%S}.{s % 99991:05d}Z"))
def test_a_valid_event_parses_back_from_its_serialisation(fields: dict[str, str],
                                                          ts: float | str) -> None:
    """Found by bench/fuzz.py: a time with sub-millisecond digits lost them on the way back
    (``event_to_dict`` wrote milliseconds), so a late event's dead letter was not the event."""
    [e], _ = Parser().parse(orjson.dumps({**event(fields), "ts": ts}))
    assert Parser().parse(orjson.dumps(event_to_dict(e))) == ([e], [])
