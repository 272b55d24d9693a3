"""The gate's verdicts on hand-built sides: pass, fail naming the route and metric,
insufficient data with the requests each side needs, and the alpha split."""

from __future__ import annotations

import json

import pytest

from monitor.gate import FAIL, INSUFFICIENT, PASS, GateSettings, GateSides, judge_gate
from monitor.gate.stats import half_width
from monitor.gate.text import format_gate
from tests.monitor.gate.traffic import Arm, bucket, scaled, sides

CODE = Arm(p_success=0.8, gpu_mean=1.0, acceptance=0.6)
FASTER_CODE = Arm(p_success=0.8, gpu_mean=0.8, acceptance=0.75, e2e_ms=850.0)
JSON = Arm(p_success=0.9, gpu_mean=0.5, p_tool_valid=0.98, p_schema_valid=0.99)
BROKEN_JSON = Arm(p_success=0.9, gpu_mean=0.5, p_tool_valid=0.90, p_schema_valid=0.99)


def test_pass_on_a_faster_draft_that_breaks_nothing() -> None:
    n = 120_000
    g = sides({"code-assistant": (CODE, n), "json-tools": (JSON, n // 2)},
              {"code-assistant": (FASTER_CODE, n), "json-tools": (JSON, n // 2)}, seed=1)
    j = judge_gate(g)
    assert j.verdict == PASS, j.reason
    assert j.exit_code == 0 and not j.failures and j.needed is None
    eff = j.efficiency
    assert eff.cs is not None and eff.cs.low > -0.02 and 0.1 < eff.cs.estimate < 0.2
    assert eff.extra["weights"]["code-assistant"] == pytest.approx(2 / 3, abs=0.01)
    # every gating test of both routes passed: ok, schema, tool calls, errors, p99 e2e
    assert j.tests == 1 + 3 + 5
    for r in j.routes:
        assert r.gated and r.verdict == PASS
        assert {m.name for m in r.metrics if m.gating} <= {
            "ok_rate", "schema_valid_rate", "tool_calls_valid_rate", "error_rate", "e2e_p99"}
    assert j.route("code-assistant").metric("success_per_gpu_second").gating is False
    assert j.reason.startswith("pass: overall success_per_gpu_second")


def test_fail_names_json_tools_and_tool_calls_valid() -> None:
    """A candidate draft that raises acceptance (and efficiency) on code-assistant but lowers
    tool_calls_valid on json-tools fails, naming json-tools and tool_calls_valid only."""
    g = sides({"code-assistant": (CODE, 20_000), "json-tools": (JSON, 5_000)},
              {"code-assistant": (FASTER_CODE, 20_000), "json-tools": (BROKEN_JSON, 5_000)},
              seed=2)
    assert g.candidate["code-assistant"].acceptance_rate > g.baseline[
        "code-assistant"].acceptance_rate + 0.1
    j = judge_gate(g)
    assert j.verdict == FAIL and j.exit_code == 1
    assert [(m.route, m.name) for m in j.failures] == [("json-tools", "tool_calls_valid_rate")]
    assert j.route("json-tools").verdict == FAIL
    assert j.route("code-assistant").verdict != FAIL
    assert j.efficiency.cs is not None and j.efficiency.cs.estimate > 0.1  # it is faster
    assert j.reason.startswith("fail: json-tools tool_calls_valid_rate 0.978")
    doc = j.to_json()
    assert doc["failures"] == [{"route": "json-tools", "metric": "tool_calls_valid_rate"}]
    tool = doc["routes"][1]["metrics"]["tool_calls_valid_rate"]
    assert tool["verdict"] == "fail" and tool["interval"][1] < -0.01
    table = format_gate(j, "table")
    assert table.startswith("gate experiment test: FAIL\n")
    assert "tool_calls_valid_rate" in table and "route json-tools" in table


def test_insufficient_data_says_how_many_more_requests_each_side_needs() -> None:
    """A small sample: insufficient, with per side the requests that would decide if the
    estimates held. Scaled to exactly that many (same rates, same latencies), the gate
    decides; scaled to 90% of it, it does not yet."""
    rng = __import__("numpy").random.default_rng(3)
    base = {"code-assistant": bucket(CODE, 600, rng), "json-tools": bucket(JSON, 300, rng)}
    # the candidate: the same requests at 80% of the GPU-seconds
    cand = {r: scaled(b, 1.0, gpu=0.8) for r, b in base.items()}
    j = judge_gate(GateSides("experiment", "small", base, cand))
    assert j.verdict == INSUFFICIENT and j.exit_code == 3
    assert j.needed is not None
    more_b, more_c = j.needed
    assert more_b is not None and more_c is not None and more_b > 10_000
    assert f"about {more_b:,} more baseline and {more_c:,} more candidate requests" in j.reason
    doc = j.to_json()
    assert doc["requests_needed"] == {"baseline": more_b, "candidate": more_c}
    for r in doc["routes"]:
        for name, m in r["metrics"].items():
            if m["verdict"] == "insufficient_data" and m["gating"]:
                assert m["requests_needed"]["baseline"] > 0, (r["route"], name)

    total_b = sum(b.requests for b in base.values())
    enough = 1.02 * (total_b + more_b) / total_b
    grown = judge_gate(GateSides("experiment", "grown",
                                 {r: scaled(b, enough) for r, b in base.items()},
                                 {r: scaled(b, enough) for r, b in cand.items()}))
    assert grown.verdict == PASS, grown.reason
    short = 0.9 * (total_b + more_b) / total_b
    not_yet = judge_gate(GateSides("experiment", "short",
                                   {r: scaled(b, short) for r, b in base.items()},
                                   {r: scaled(b, short) for r, b in cand.items()}))
    assert not_yet.verdict == INSUFFICIENT


def test_a_route_below_the_minimum_count_needs_at_least_the_rest() -> None:
    g = sides({"chat": (CODE, 40)}, {"chat": (CODE, 70)})
    j = judge_gate(g)
    assert j.verdict == INSUFFICIENT
    err = j.route("chat").metric("error_rate")
    assert err.needed == (60, 30) and "40 baseline and 70 candidate requests" in (err.reason or "")
    p99 = j.route("chat").metric("e2e_p99")
    assert p99.needed == (960, 930)  # a p99 needs 1,000 requests a side


def test_small_routes_inform_and_do_not_gate() -> None:
    """A route under min_route_share that regresses badly does not fail the gate; above the
    share it would."""
    g = sides({"big": (JSON, 50_000), "tiny": (JSON, 1_000)},
              {"big": (JSON, 50_000), "tiny": (BROKEN_JSON, 1_000)}, seed=4)
    j = judge_gate(g)
    tiny = j.route("tiny")
    assert not tiny.gated and tiny.share < 0.05
    assert tiny.metric("tool_calls_valid_rate").verdict == FAIL
    assert tiny.metric("tool_calls_valid_rate").gating is False
    assert j.verdict != FAIL
    strict = judge_gate(g, GateSettings(min_route_share=0.01))
    assert strict.verdict == FAIL
    assert [(m.route, m.name) for m in strict.failures] == [("tiny", "tool_calls_valid_rate")]


def test_a_promised_latency_class_must_improve() -> None:
    n = 30_000
    slow_same = sides({"chat": (CODE, n)}, {"chat": (CODE, n)}, seed=5)
    faster = sides({"chat": (CODE, n)}, {"chat": (FASTER_CODE, n)}, seed=5)
    promise = GateSettings(latency_classes=((("ch*",), "e2e_p99"),), rate_tolerance=0.02)
    j = judge_gate(faster, promise)
    lat = j.route("chat").metric("latency_class")
    assert lat.verdict == PASS and lat.gating and lat.extra["promised"] == "e2e_p99"
    assert j.tests == 1 + 3 + 1  # efficiency; ok, errors, p99; the promise
    same = judge_gate(slow_same, promise)
    assert same.route("chat").metric("latency_class").verdict == INSUFFICIENT
    assert same.verdict == INSUFFICIENT  # no improvement shown: never a pass
    worse = judge_gate(sides({"chat": (FASTER_CODE, n)}, {"chat": (CODE, n)}, seed=6), promise)
    assert worse.route("chat").metric("latency_class").verdict == FAIL
    assert ("chat", "latency_class") in [(m.route, m.name) for m in worse.failures]


def test_alpha_is_split_over_the_gating_tests() -> None:
    g = sides({"a": (JSON, 5000), "b": (CODE, 5000)}, {"a": (JSON, 5000), "b": (CODE, 5000)})
    j = judge_gate(g, GateSettings(alpha=0.1))
    # efficiency + a: ok, schema, tool calls, errors, p99 + b: ok, errors, p99
    assert j.tests == 9
    for r in j.routes:
        for m in r.metrics:
            if m.cs is not None:
                assert m.cs.alpha == pytest.approx(0.1 / 9)
                assert m.cs.half_width == pytest.approx(
                    half_width(m.cs.variance, 0.1 / 9, m.metric.tau))
    assert j.to_json()["alpha_per_test"] == pytest.approx(0.1 / 9)


def test_empty_sides_are_insufficient_and_json_is_strict() -> None:
    j = judge_gate(GateSides("experiment", "none", {}, {}))
    assert j.verdict == INSUFFICIENT
    doc = json.loads(format_gate(j, "json"))
    assert doc["verdict"] == "insufficient_data" and doc["routes"] == []
    assert doc["requests_needed"] == {"baseline": 100, "candidate": 100}


def test_settings_from_the_configuration() -> None:
    from monitor.config import Config

    assert GateSettings.from_config(Config().gate) == GateSettings()
    cfg = Config.model_validate({"gate": {"alpha": 0.01, "latency_classes": [
        {"routes": ["chat*", "docs"], "metric": "ttft_p99"}]}})
    s = GateSettings.from_config(cfg.gate)
    assert s.alpha == 0.01 and s.latency_class_of("chat-eu") == "ttft_p99"
    assert s.latency_class_of("docs") == "ttft_p99" and s.latency_class_of("code") is None
    with pytest.raises(ValueError, match="latency class"):
        GateSettings(latency_classes=((("x",), "e2e_p42"),))
