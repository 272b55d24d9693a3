"""Shared adapter pieces: acceptance math (engine-telemetry.md 5.1), status, event assembly,
and the counting conventions checked against recorded real engine requests."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.adapters import ADAPTERS
from monitor.adapters.common import (
    AdapterError,
    SpecCounts,
    build_event,
    from_histogram,
    status_of,
)
from monitor.adapters.defaults import Defaults
from monitor.telemetry.parse import Parser
from tests.monitor.adapters import FIXTURES, parses_cleanly

# Copied verbatim from /work/shared/data/real-engine-events.jsonl: llama.cpp and transformers
# runs, one flat record per request.
REAL = FIXTURES / "real-engine-events.jsonl"


@given(st.integers(1, 8).flatmap(
    lambda k: st.lists(st.integers(0, 50), min_size=1, max_size=k + 1).map(lambda h: (k, h))))
def test_histogram_to_per_position_identities(case: tuple[int, list[int]]) -> None:
    k, hist = case
    per_position, steps, accepted = from_histogram(hist, k, "h")
    padded = hist + [0] * (k + 1 - len(hist))
    # section 5.1: sum of per-position accepted = A = sum j*h[j]; S = sum h;
    # position 0 survives in every step that accepted anything; survival never rises
    assert len(per_position) == k
    assert sum(per_position) == accepted == sum(j * n for j, n in enumerate(padded))
    assert steps == sum(padded)
    assert per_position[0] == steps - padded[0]
    assert all(a >= b for a, b in zip(per_position, per_position[1:], strict=False))


def test_histogram_problems_are_named() -> None:
    with pytest.raises(AdapterError, match=r"^h\[1\]: must be an integer \(got string '2'\)"):
        from_histogram([1, "2"], 3, "h")
    with pytest.raises(AdapterError, match=r"^h: must be an array \(got object\)"):
        from_histogram({"0": 1}, 3, "h")  # the pre-merge sparse design, string keys


@pytest.mark.parametrize(("reason", "status"), [
    ("stop", "ok"), ("length", "ok"), ("STOP", "ok"), ("end_id", "ok"), ("repetition", "ok"),
    ("abort", "cancelled"), ("cancelled", "cancelled"), ("timeout", "timeout"),
    ("error", "error"),
])  # fmt: skip
def test_finish_reasons(reason: str, status: str) -> None:
    assert status_of(reason, "x") == status


def test_status_needs_a_string() -> None:
    with pytest.raises(AdapterError, match=r"^x: must be a string \(got number 1\)"):
        status_of(1, "x")


FULL = Defaults(route="code", target_model="m", target_revision="1", target_tokenizer="t",
               draft_model="d", draft_revision="2", draft_tokenizer="t",
               pinned_target_revision="0", method="eagle", instance="pod-1",
               clock=lambda: 1793628187.0)


def _event(defaults: Defaults, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = dict(engine="vllm", defaults=defaults, request_id="r", ts=None,
                                ts_note="why", status="ok", output_tokens=3, e2e_ms=10.0)
    return build_event(**(args | kw))


def test_event_carries_every_descriptive_field() -> None:
    event = _event(FULL, spec=SpecCounts(2, 8, 5, 4, (3, 2)), ttft_ms=1.0, prompt_tokens=7)
    parses_cleanly(event)
    assert event == {
        "request_id": "r", "ts": "2026-11-02T14:03:07.000Z", "route": "code", "status": "ok",
        "target": {"model": "m", "revision": "1", "tokenizer": "t"},
        "draft": {"model": "d", "revision": "2", "tokenizer": "t",
                  "pinned_target_revision": "0"},
        "spec": {"num_speculative_tokens": 2, "drafted_tokens": 8, "accepted_tokens": 5,
                 "verify_steps": 4, "accepted_per_position": [3, 2], "method": "eagle"},
        "prompt_tokens": 7, "output_tokens": 3, "ttft_ms": 1.0, "e2e_ms": 10.0,
        "instance": "pod-1", "engine": "vllm", "adapter_note": "ts is not from the engine: why",
    }  # fmt: skip


@pytest.mark.parametrize(("field", "reason"), [
    ("route", "route: the engine output has no route; pass --route or map model 'm'"),
    ("target_revision", "target_revision: not in the engine output; pass --target-revision"),
    ("draft_tokenizer", "draft_tokenizer: not in the engine output; pass --draft-tokenizer"),
])  # fmt: skip
def test_missing_descriptive_fields_are_named(field: str, reason: str) -> None:
    from dataclasses import replace

    with pytest.raises(AdapterError) as err:
        _event(replace(FULL, **{field: None}))
    assert err.value.reason.startswith(reason)


# --- recorded real requests -----------------------------------------------------------------


def _real() -> list[dict[str, Any]]:
    return [json.loads(line) for line in REAL.read_text(encoding="utf-8").splitlines()]


def test_recorded_requests_are_neither_engine_shape_nor_telemetry() -> None:
    """The recorded file is llama.cpp / transformers flat records: no engine adapter takes
    them (only ``--from record``, tests/monitor/adapters/test_recorded.py) and they are not
    telemetry v1 either (no request_id, ts, target object or e2e_ms)."""
    rows = _real()
    assert len(rows) == 180
    d = Defaults(route="r", target_revision="1", target_tokenizer="t")
    reasons = {}
    for engine, to_event in ADAPTERS.items():
        if engine == "record":
            continue
        for row in rows:
            with pytest.raises(AdapterError) as err:
                to_event(row, d)
            reasons.setdefault(engine, set()).add(err.value.reason.split(" (")[0])
    assert reasons == {
        "vllm": {"neither a vLLM server response"},
        "sglang": {"meta_info: missing"},
        "trtllm": {"neither a TensorRT-LLM RequestOutput"},
        "llamacpp": {"neither a llama-server OpenAI-compatible response"},
    }
    _, rejections = Parser().parse(REAL.read_bytes())
    assert len(rejections) == len(rows)
    assert {r.reason for r in rejections} == {"missing required field: request_id"}


def test_recorded_requests_follow_the_counting_conventions() -> None:
    """What the adapters assume of engine counts holds on real runs (section 5.1):
    accepted excludes the bonus token, so a run that reports its verify steps emits exactly
    one target token per step on top of the accepted drafts (output = A + S, tau = 1 + A/S);
    accepted <= drafted; and "nothing drafted" is an ordinary outcome, with nothing accepted,
    not a zero rate: n-gram lookups that found no match, and a draft model the server refused
    (incompatible vocabulary) while it went on serving without speculation."""
    rows = _real()
    with_steps = [r for r in rows if "verify_steps" in r]
    assert len(with_steps) == 38
    for r in with_steps:
        assert r["output_tokens"] == r["accepted_tokens"] + r["verify_steps"]
        assert r["output_tokens"] / r["verify_steps"] == pytest.approx(
            1 + r["accepted_tokens"] / r["verify_steps"])
    assert all(0 <= r["accepted_tokens"] <= r["drafted_tokens"] for r in rows)
    idle = [r for r in rows if r["drafted_tokens"] == 0]
    assert idle and all(r["accepted_tokens"] == 0 for r in idle)
    assert {r["spec_type"] for r in idle} == {"ngram-simple", "draft-simple"}
    assert {r["run"] for r in idle if r["spec_type"] == "draft-simple"} == {
        "run-mismatch1/mismatch-smollm2-draft"}
