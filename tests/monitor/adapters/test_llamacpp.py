"""llama-server responses -> telemetry v1, counts by hand from the response fields
(``timings.draft_n`` / ``draft_n_accepted``, present only when something was drafted)."""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from monitor.adapters.cli import register
from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.defaults import Defaults, load_mapping
from monitor.adapters.llamacpp import to_event
from monitor.cli import main
from monitor.store.store import Store
from tests.monitor.adapters import FIXTURES, PINNED_TS, event_ts, outputs, parses_cleanly

MAPPING = FIXTURES / "llamacpp-mapping.yaml"  # by llama-server --alias

QWEN = "Qwen2.5-Coder-1.5B-Instruct-Q4_K_M"
SMOL = "SmolLM2-135M-Instruct-Q4_1"


def defaults() -> Defaults:
    return Defaults(models=load_mapping(MAPPING), clock=lambda: PINNED_TS)


def _events() -> list[dict[str, Any]]:
    d = defaults()
    return [to_event(raw, d) for raw in outputs("llamacpp")]


def test_every_request_by_hand() -> None:
    events = _events()
    # (request_id, route, ts, status, output, prompt, e2e, ttft, spec or None)
    want = [
        # draft model: draft_n 57, draft_n_accepted 44; e2e = prompt_ms 400.8 + predicted_ms
        # 6099.2; ts = created (the response's own second)
        ("chatcmpl-Qm3xv0TnZb8LcQ4sJ2Ka7yWdP1rHfE9u", "code", 1793628120.0, "ok", 64, 77,
         6500.0, 400.8, (3, 57, 44, "draft_model")),
        # n-gram, no match in the whole request: no draft_n -> drafted 0, no rate
        ("chatcmpl-8fGh2LkPq0WzXc5VbN7mJ4tRy1sDa6Ue", "creative", 1793628125.0, "ok", 96, 41,
         1027.0, 25.5, (8, 0, 0, "ngram")),
        # n-gram with matches; prompt_tokens is usage's 58 (20 processed + 38 from the cache)
        ("chatcmpl-Zx4Cv7Bn1Mq8Wl2Ek5Rt9Yu3Io6Pa0Sd", "creative", 1793628130.0, "ok", 96, 58,
         1135.0, 14.25, (8, 64, 21, "ngram")),
        # the refused draft: the server served without speculation, nothing in the response
        # says so; the mapping says a draft model is configured -> drafted 0
        ("chatcmpl-Hj8Kl2Mn4Bv6Cx1Za3Qw5Er7Ty9Ui0Op", "code-canary", 1793628140.0, "ok", 32, 52,
         3500.0, 310.0, (3, 0, 0, "draft_model")),
        # /v1/completions: all 9 drafts accepted
        ("cmpl-Tg5Yh6Uj7Ik8Ol9Pa0Sd1Fg2Hj3Kl4Zx", "code", 1793628150.0, "ok", 12, 30, 1000.0,
         150.0, (3, 9, 9, "draft_model")),
        # native /completion: stop_type eos; no id (digest) and no time (pinned clock)
        (None, "code", PINNED_TS, "ok", 47, 30, 4500.0, 99.5, (3, 40, 33, "draft_model")),
        # no speculation configured and none reported: no spec block
        ("chatcmpl-Lk3Jh4Gf5Ds6Aq7Wz8Xc9Vb0Nm1Pl2Ok", "chat", 1793628160.0, "ok", 8, 20, 100.0,
         10.0, None),
    ]
    assert len(events) == len(want)
    for e, (rid, route, ts, status, out, prompt, e2e, ttft, spec) in zip(events, want,
                                                                          strict=True):
        parses_cleanly(e)
        if rid is not None:
            assert e["request_id"] == rid
        assert (e["route"], e["status"], e["output_tokens"], e["prompt_tokens"]) == (
            route, status, out, prompt)
        assert event_ts(e) == pytest.approx(ts, abs=1e-3)
        assert (e["e2e_ms"], e["ttft_ms"]) == (pytest.approx(e2e), pytest.approx(ttft))
        assert e["engine"] == "llamacpp"
        if spec is None:
            assert "spec" not in e and "draft" not in e
        else:
            k, drafted, accepted, method = spec
            want_spec = {"num_speculative_tokens": k, "drafted_tokens": drafted,
                         "accepted_tokens": accepted, "method": method}
            if drafted == 0:  # no step had a draft to verify
                want_spec["verify_steps"] = 0
            assert e["spec"] == want_spec
    assert [NOTE_KEY in e for e in events] == [False] * 5 + [True, False]


def test_metadata_comes_from_the_mapping_by_alias() -> None:
    events = _events()
    code, ngram, canary = events[0], events[1], events[3]
    assert code["target"]["model"] == QWEN and code["draft"]["model"].startswith("Qwen2.5")
    assert code["target"]["tokenizer"] == code["draft"]["tokenizer"]
    assert "draft" not in ngram and ngram["target"]["model"] == SMOL
    # the refused pair: its tokenizers differ (what tokenizer_mismatch compares)
    assert canary["draft"]["model"] == SMOL
    assert canary["target"]["tokenizer"] != canary["draft"]["tokenizer"]


def test_a_native_response_id_is_a_digest_of_the_response() -> None:
    raw = outputs("llamacpp")[5]
    d = defaults()
    first = to_event(raw, d)["request_id"]
    assert first.startswith("llamacpp-") and len(first) == len("llamacpp-") + 24
    assert to_event(copy.deepcopy(raw), d)["request_id"] == first
    other = copy.deepcopy(raw)
    other["timings"]["predicted_ms"] += 1.0
    assert to_event(other, d)["request_id"] != first


@pytest.mark.parametrize(("index", "edit", "reason"), [
    (0, lambda r: r["timings"].update(draft_n_accepted=58),
     "timings: 58 accepted drafts > 57 drafted"),
    (0, lambda r: r["timings"].pop("draft_n"),
     "timings.draft_n: missing while draft_n_accepted is given"),
    (0, lambda r: r["timings"].update(draft_n=-1), "timings.draft_n: must be >= 0 (got -1)"),
    (0, lambda r: r.pop("timings"), "timings: missing"),
    (0, lambda r: r["timings"].pop("predicted_ms"), "timings.predicted_ms: missing"),
    (0, lambda r: r["choices"].append(r["choices"][0]),
     "choices: want exactly 1 sequence (n == 1), got 2"),
    (0, lambda r: r["choices"][0].update(finish_reason=None),
     "choices[0].finish_reason: missing (request not finished?)"),
    (0, lambda r: r["usage"].pop("completion_tokens"), "usage.completion_tokens: missing"),
    (5, lambda r: r.update(stop_type="none"),
     "stop_type: want one of eos, limit, word for a finished request (got 'none')"),
    # drafts reported by a server the mapping says does not speculate: the length is unknown
    (6, lambda r: r["timings"].update(draft_n=10, draft_n_accepted=4),
     "num_speculative_tokens: the engine output does not say the draft length"),
])  # fmt: skip
def test_problems_are_named(index: int, edit: Any, reason: str) -> None:
    raw = copy.deepcopy(outputs("llamacpp")[index])
    edit(raw)
    with pytest.raises(AdapterError) as err:
        to_event(raw, defaults())
    assert err.value.reason.startswith(reason), err.value.reason


def test_neither_shape_is_named() -> None:
    with pytest.raises(AdapterError, match="neither a llama-server OpenAI-compatible"):
        to_event({"content": "x"}, defaults())
    with pytest.raises(AdapterError, match="must be a JSON object"):
        to_event([1], defaults())  # type: ignore[arg-type]


def _adapt(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="specwatch")
    register(parser.add_subparsers(dest="command", required=True), None, None)
    args = parser.parse_args(["adapt", *argv])
    return int(args.func(args))


def test_adapt_then_replay_keeps_no_draft_requests_out_of_the_rate(
    db_url: str, tmp_path: Path
) -> None:
    out, dead = tmp_path / "events.jsonl", tmp_path / "dead.jsonl"
    assert _adapt(["--from", "llamacpp", str(FIXTURES / "llamacpp.jsonl"), "--out", str(out),
                   "--dead-letter", str(dead), "--mapping", str(MAPPING),
                   # the native response's time: between its neighbours' (event time
                   # runs forward in a replay; 2 min late would be dropped as late)
                   "--default-ts", "2026-11-02T14:02:35Z"]) == 0
    assert dead.read_text() == ""
    replay_dead = tmp_path / "replay-dead.jsonl"
    assert main(["replay", str(out), "--db", db_url, "--migrate", "--no-progress",
                 "--source-id", "adapt-llamacpp", "--dead-letter", str(replay_dead)]) == 0
    assert replay_dead.read_text() == ""
    rows: dict[str, list[int]] = {}
    with Store(db_url) as store:
        for r in store.ratios(granularity="day"):
            t = rows.setdefault(r.route, [0, 0, 0, 0, 0])
            for i, v in enumerate((r.requests, r.spec_requests, r.drafting_requests,
                                   r.drafted_tokens, r.accepted_tokens)):
                t[i] += v
    # (requests, with spec, that drafted, drafted D, accepted A) from test_every_request_by_hand
    assert rows == {
        "code": [3, 3, 3, 57 + 9 + 40, 44 + 9 + 33],
        "creative": [2, 2, 1, 64, 21],      # one n-gram request drafted nothing
        "code-canary": [1, 1, 0, 0, 0],     # the refused draft: no rate at all, not 0
        "chat": [1, 0, 0, 0, 0],
    }
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sum(NOTE_KEY in e for e in lines) == 1
