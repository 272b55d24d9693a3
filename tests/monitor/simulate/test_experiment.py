"""A/B experiment traffic and telemetry v1.1 fields from the simulator."""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from scipy import stats

from monitor.simulate import (
    EXPERIMENT_ROUTES,
    ArmChange,
    Experiment,
    SimulationError,
    Simulator,
    scenario_config,
)
from monitor.simulate.cli import main
from monitor.simulate.experiment import CANDIDATE_DRAFT_CODE, CANDIDATE_DRAFT_JSON
from monitor.telemetry.parse import Parser
from tests.monitor.simulate.shape import V11_KEYS, check_event, rate, ts_of

Events = list[dict[str, Any]]
Arms = dict[tuple[str, str], Events]  # (route, arm) -> events


def run(name: str, **overrides: Any) -> Events:
    values: dict[str, Any] = {"duration_s": 2 * 3600, "rate": 10, "seed": 2}
    values.update(overrides)
    return list(Simulator(scenario_config(name, **values)).events())


def by_arm(events: Iterable[dict[str, Any]]) -> Arms:
    out: Arms = defaultdict(list)
    for e in events:
        if "experiment" in e:
            out[e["route"], e["experiment"]["arm"]].append(e)
    return out


@pytest.fixture(scope="module")
def experiment() -> Events:
    """Two hours of the A/B scenario, about 37,000 events."""
    return run("experiment")


@pytest.fixture(scope="module")
def null() -> Events:
    return run("experiment-null")


def share(events: Events, outcome: str) -> tuple[float, int]:
    """Share of the events reporting ``outcome`` that report it true, and how many report it."""
    values = [e["outcome"][outcome] for e in events if outcome in e.get("outcome", {})]
    return sum(values) / len(values), len(values)


def gap(p: float, q: float, n: int, m: int, sigmas: float = 4.0) -> float:
    """``sigmas`` standard errors of a difference of two shares."""
    pooled = (p * n + q * m) / (n + m)
    return sigmas * math.sqrt(pooled * (1 - pooled) * (1 / n + 1 / m))


def mean(events: Events, value: Callable[[dict[str, Any]], float]) -> float:
    return float(np.mean([value(e) for e in events]))


def test_every_request_gets_one_arm_and_the_arms_are_balanced(experiment: Events) -> None:
    served = [e for e in experiment if "spec" in e]  # shadow requests belong to no arm
    assert all(e["experiment"]["name"] == "draft-v2" for e in served)
    arms = by_arm(served)
    assert {route for route, _ in arms} == {r.name for r in EXPERIMENT_ROUTES}
    for r in EXPERIMENT_ROUTES:
        n_base, n_cand = len(arms[r.name, "baseline"]), len(arms[r.name, "candidate"])
        n = n_base + n_cand
        assert n_cand / n == pytest.approx(0.5, abs=4 * math.sqrt(0.25 / n)), r.name


def test_candidate_accepts_more_on_code_assistant_and_costs_fewer_gpu_seconds(
    experiment: Events,
) -> None:
    arms = by_arm(experiment)
    base, cand = arms["code-assistant", "baseline"], arms["code-assistant", "candidate"]
    assert rate(base) == pytest.approx(0.80, abs=0.01)
    assert rate(cand) == pytest.approx(0.88, abs=0.01)
    # fewer verify steps for the same output: shorter requests, less GPU time per request
    # and per output token (the acceptance -> latency model, not a separate knob)
    per_token = {
        arm: sum(e["gpu_seconds"] for e in es) / sum(e["output_tokens"] for e in es)
        for arm, es in (("baseline", base), ("candidate", cand))
    }
    assert per_token["candidate"] < 0.95 * per_token["baseline"]
    tps = {arm: mean([e for e in es if e["status"] == "ok"],
                     lambda e: e["output_tokens"] / (e["e2e_ms"] - e["ttft_ms"]))
           for arm, es in (("baseline", base), ("candidate", cand))}
    assert tps["candidate"] > 1.04 * tps["baseline"]
    # the candidate serves the new draft there, the baseline the old one
    assert all(e["draft"] == CANDIDATE_DRAFT_CODE.as_dict() for e in cand)
    assert all(e["draft"]["revision"] == "2026-09-30" for e in base)
    # task outcomes on code do not move
    (p, n), (q, m) = share(base, "ok"), share(cand, "ok")
    assert abs(p - q) < gap(p, q, n, m)


def test_candidate_breaks_tool_calls_on_json_tools_by_the_configured_amount(
    experiment: Events,
) -> None:
    arms = by_arm(experiment)
    base, cand = arms["json-tools", "baseline"], arms["json-tools", "candidate"]
    for events, expected in ((base, 0.97), (cand, 0.85)):
        p, n = share(events, "tool_calls_valid")
        assert p == pytest.approx(expected, abs=4 * math.sqrt(expected * (1 - expected) / n))
        # ok needs valid tool calls: 0.99 of the valid ones
        q, m = share(events, "ok")
        assert q == pytest.approx(0.99 * expected, abs=4 * math.sqrt(q * (1 - q) / m))
    (p, n), (q, m) = share(base, "schema_valid"), share(cand, "schema_valid")
    assert abs(p - q) < gap(p, q, n, m) and p == pytest.approx(0.98, abs=0.02)
    assert rate(cand) == pytest.approx(rate(base), abs=0.02)  # no speed-up to pay for it
    assert {e["draft"]["revision"] for e in cand} == {CANDIDATE_DRAFT_JSON.revision}
    for e in base + cand:
        outcome = e.get("outcome", {})
        assert outcome.get("tool_calls_valid", False) <= outcome.get("schema_valid", True)


@pytest.mark.parametrize("route", ["chat", "summarize", "creative-writing", "translation"])
def test_other_routes_do_not_change(experiment: Events, route: str) -> None:
    arms = by_arm(experiment)
    base, cand = arms[route, "baseline"], arms[route, "candidate"]
    assert rate(cand) == pytest.approx(rate(base), abs=0.02)
    assert ({orjson.dumps(e.get("draft")) for e in base}
            == {orjson.dumps(e.get("draft")) for e in cand})
    e2e = stats.ks_2samp([e["e2e_ms"] for e in base], [e["e2e_ms"] for e in cand])
    assert e2e.pvalue > 1e-3


def test_null_arms_are_the_same_traffic_with_labels(null: Events) -> None:
    # Both arms behave the same: drop the labels and the events are those of the same run
    # without an experiment, byte for byte.
    plain = run("experiment-null", experiment=None)
    assert len(plain) == len(null)
    for labelled, bare in zip(null, plain, strict=True):
        assert {k: v for k, v in labelled.items() if k != "experiment"} == bare
    arms = by_arm(null)
    for r in EXPERIMENT_ROUTES:
        base, cand = arms[r.name, "baseline"], arms[r.name, "candidate"]
        assert rate(cand) == pytest.approx(rate(base), abs=0.02), r.name
        for outcome in r.outcomes:
            (p, n), (q, m) = share(base, outcome), share(cand, outcome)
            assert abs(p - q) < gap(p, q, n, m), (r.name, outcome)
        ks = stats.ks_2samp([e["e2e_ms"] for e in base], [e["e2e_ms"] for e in cand])
        assert ks.pvalue > 1e-3, r.name


def test_v11_fields_where_they_apply(experiment: Events) -> None:
    routes = {r.name: r for r in EXPERIMENT_ROUTES}
    for e in experiment[::7]:
        check_event(e)
        route = routes[e["route"]]
        greedy = route.temperature == 0
        assert ("prompt_hash" in e) == greedy
        assert ("gpu_seconds" in e) == route.reports_gpu_seconds
        if e["status"] != "ok" or "spec" not in e:
            assert "outcome" not in e  # no verdict on a failed request or a shadow
        else:
            assert set(e.get("outcome", {})) == set(route.outcomes)
        if "gpu_seconds" in e:
            expected = e["e2e_ms"] / 1000 * route.gpus / e["batch_size"]
            assert e["gpu_seconds"] == pytest.approx(expected, abs=1e-6)
        if "spec" in e and e["spec"]["verify_steps"] >= 2 and e["status"] == "ok":
            # one streamed chunk per verify step: the gaps add up to about the decode time
            steps = e["spec"]["verify_steps"]
            decode = e["e2e_ms"] - e["ttft_ms"]
            assert e["itl_ms"]["p50"] == pytest.approx(decode / steps, rel=0.1)
    assert {e["route"] for e in experiment if "outcome" not in e and e["status"] == "ok"
            and "spec" in e} == {"creative-writing"}


def test_speculation_is_lossless_unless_told_otherwise(experiment: Events) -> None:
    unique = list({e["request_id"]: e for e in experiment}.values())  # drop duplicates
    served = {e["prompt_hash"]: e for e in unique if "spec" in e and "prompt_hash" in e}
    # every request has a prompt of its own: only shadows repeat a prompt hash
    assert len(served) == sum(1 for e in unique if "spec" in e and "prompt_hash" in e)
    shadows = [e for e in unique if "spec" not in e]
    assert len(shadows) > 300
    pairs = 0
    for twin in shadows:
        original = served[twin["prompt_hash"]]
        assert twin["output_hash"] == original["output_hash"]
        assert twin["target"] == original["target"]
        assert twin["output_tokens"] == original["output_tokens"]
        # the plain upstream decodes every token with one target step: slower when drafting pays
        if original["spec"]["accepted_tokens"] > original["output_tokens"] / 2:
            assert twin["e2e_ms"] > original["e2e_ms"]
        pairs += original["spec"]["drafted_tokens"] > 0
    assert pairs > 300
    # shadows share the stream: event-time order holds within a few seconds
    late = [ts_of(a) - ts_of(b) for a, b in zip(experiment, experiment[1:], strict=False)]
    assert max(late) < 120


def test_lossy_verifier_changes_outputs_only_where_and_when_it_is_on() -> None:
    config = scenario_config("lossy-verifier", duration_s=3 * 3600, rate=6, seed=4)
    events = list(Simulator(config).events())
    start = config.start_ts
    served = {e["prompt_hash"]: e for e in events if "spec" in e and "prompt_hash" in e}
    seen: dict[tuple[str, bool], list[bool]] = defaultdict(list)
    for twin in (e for e in events if "spec" not in e):
        original = served[twin["prompt_hash"]]
        if not original["spec"]["accepted_tokens"]:
            assert original["output_hash"] == twin["output_hash"]
            continue
        offset = ts_of(original) - start
        inside = 3600 <= offset < 7200
        seen[original["route"], inside].append(original["output_hash"] != twin["output_hash"])
    assert not any(any(v) for (route, inside), v in seen.items()
                   if route != "code-assistant" or not inside)
    hits = seen["code-assistant", True]
    assert len(hits) > 100
    assert np.mean(hits) == pytest.approx(0.2, abs=4 * math.sqrt(0.16 / len(hits)))


def test_same_seed_same_events(experiment: Events) -> None:
    again = run("experiment")
    assert again == experiment
    other = run("experiment", seed=3)
    assert other != experiment
    assert {e["prompt_hash"] for e in other if "prompt_hash" in e}.isdisjoint(
        e["prompt_hash"] for e in experiment if "prompt_hash" in e
    )


# sha256 of the events (orjson, one per line) of each scenario at 30 minutes, 6 events/s,
# seed 7, as the simulator produced them before v1.1 existed: adding experiments and v1.1
# fields must not move a single byte of the existing scenarios.
BEFORE_V11 = {
    "default": (6936, "4052c3ae46a9c88a3ab9170cce4d31c7876d2e1833b3689bb80f38287e9f7f38"),
    "quiet": (5970, "64df05eac15bc381e00e1ea7eb42dd38f3aba5dfd3f8297043aa7ca03be6e674"),
    "incidents": (6856, "5ea45a59e23c1701f3aad4c4e35b810fdd774ab03fedc17f3a4b0bfc9c11ffd5"),
    "noisy": (7068, "0d701bd91effd5b806d8b061d8c19c2b3406fbd169ac03ee14bc42699a16c863"),
    "outage": (6931, "c0281e5d8387e710baa034624cf018f110ce3d10fa4d7e3e47613c1215f79b7f"),
    "every-incident": (
        6819, "5c25c4a869eaa5c95e9e74b360f38d2f829666ff7e5515cd30bda12aee7b0795",
    ),
}


@pytest.mark.parametrize("name", sorted(BEFORE_V11))
def test_existing_scenarios_are_byte_identical(name: str) -> None:
    digest, n = hashlib.sha256(), 0
    for e in Simulator(scenario_config(name, duration_s=1800, rate=6, seed=7)).events():
        assert not V11_KEYS & set(e)
        digest.update(orjson.dumps(e) + b"\n")
        n += 1
    assert (n, digest.hexdigest()) == BEFORE_V11[name]


def _parsed(events: Events) -> tuple[list[Any], list[Any]]:
    parser = Parser()
    parsed, rejected = [], []
    for chunk in range(0, len(events), 500):
        raw = b"\n".join(orjson.dumps(e) for e in events[chunk:chunk + 500])
        good, bad = parser.parse(raw)
        parsed += good
        rejected += bad
    return parsed, rejected


@pytest.mark.parametrize("name", ["experiment", "experiment-pass", "lossy-verifier"])
def test_every_event_is_valid_telemetry(name: str) -> None:
    events = run(name, duration_s=3600, rate=4, duplicates=0.0, late=0.0)
    for e in events:
        check_event(e)
    parsed, rejected = _parsed(events)
    assert rejected == [] and len(parsed) == len(events)
    # v1.1 fields arrive as the spec says (once the parser reads them; None before that)
    if all(p.tags is None for p in parsed):  # every event of these scenarios has tags
        pytest.skip("the telemetry parser does not read v1.1 fields yet")
    for e, p in zip(events, parsed, strict=True):
        assert p.request_id == e["request_id"]
        outcome = e.get("outcome", {})
        assert (p.outcome_ok, p.outcome_schema_valid, p.outcome_tool_calls_valid) == (
            outcome.get("ok"), outcome.get("schema_valid"), outcome.get("tool_calls_valid"))
        exp = e.get("experiment", {})
        assert (p.experiment_name, p.experiment_arm) == (exp.get("name"), exp.get("arm"))
        itl = e.get("itl_ms", {})
        assert (p.itl_p50_ms, p.itl_p99_ms, p.itl_max_ms) == (
            itl.get("p50"), itl.get("p99"), itl.get("max"))
        assert p.gpu_seconds == e.get("gpu_seconds")
        assert (p.prompt_hash, p.output_hash) == (e.get("prompt_hash"), e.get("output_hash"))
        assert p.tags == e.get("tags") and p.temperature == e["temperature"]
        assert p.success == outcome.get("ok", e["status"] == "ok")


def test_the_command_runs_experiment_scenarios(tmp_path: Path) -> None:
    out = tmp_path / "ab.jsonl"
    assert main(["--scenario", "experiment_null", "--duration", "10m", "--rate", "5",
                 "--seed", "1", "--start", "2026-11-02T12:00:00Z", "--experiment", "spec-k5",
                 "--shadow", "0.1", "--out", str(out)]) == 0
    events = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(events) > 2500
    assert {e["experiment"]["name"] for e in events if "spec" in e} == {"spec-k5"}
    greedy = sum(1 for e in events if "spec" in e and e["temperature"] == 0)
    shadows = sum(1 for e in events if "spec" not in e)
    assert shadows == pytest.approx(0.1 * greedy, rel=0.25)
    # --experiment means nothing without an A/B split
    assert main(["--scenario", "quiet", "--duration", "1m", "--experiment", "x",
                 "--out", str(tmp_path / "q.jsonl")]) == 2


@pytest.mark.parametrize(
    "changes",
    [
        {"experiment": Experiment(changes={"nope": ArmChange(1.1)})},  # unknown route
        {"experiment": Experiment(changes={"code-assistant": ArmChange(1.3)})},  # 0.8 x 1.3
        {"experiment": Experiment(  # tool calls valid more often than the JSON is
            changes={"json-tools": ArmChange(outcomes={"tool_calls_valid": 0.99})})},
        {"experiment": Experiment(changes={"chat": ArmChange(outcomes={"valid": 0.5})})},
        {"experiment": Experiment(  # creative writing has no automatic verdict to change
            changes={"creative-writing": ArmChange(outcomes={"ok": 0.5})})},
        {"v11": False},  # shadow requests without hashes
        {"v11": False, "shadow": 0.0},  # lossy_verifier without hashes
        {"shadow": 1.5},
    ],
)
def test_bad_experiment_configs_are_rejected(changes: dict[str, Any]) -> None:
    config = scenario_config("experiment")
    if "shadow" in changes and "v11" in changes:
        config = config.with_(incidents=("lossy_verifier:route=chat,at=1m",))
    with pytest.raises(SimulationError):
        config.with_(**changes)


@pytest.mark.parametrize(
    "kwargs",
    [{"name": ""}, {"candidate_share": 1.5}],
)
def test_bad_experiments_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(SimulationError):
        Experiment(**kwargs)


def test_candidate_share_moves_the_split() -> None:
    config = scenario_config("experiment", duration_s=1800, rate=5, seed=8)
    experiment = config.experiment
    assert experiment is not None
    skewed = config.with_(experiment=Experiment(experiment.name, 0.1, experiment.changes))
    served = [e for e in Simulator(skewed).events() if "spec" in e]
    cand = sum(e["experiment"]["arm"] == "candidate" for e in served) / len(served)
    assert cand == pytest.approx(0.1, abs=4 * math.sqrt(0.09 / len(served)))
