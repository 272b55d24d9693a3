from __future__ import annotations

from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from monitor.simulate import (
    DEFAULT_ROUTES,
    SimulationConfig,
    SimulationError,
    Simulator,
    scenario_config,
)
from monitor.simulate.acceptance import calibrated_mean
from tests.monitor.simulate.shape import check_event, rate, ts_of

Events = list[dict[str, Any]]


@pytest.fixture(scope="module")
def quiet() -> Events:
    """Three hours of steady traffic, about 110,000 events."""
    return list(Simulator(scenario_config("quiet", duration_s=3 * 3600, rate=10, seed=3)).events())


@pytest.fixture(scope="module")
def by_route(quiet: Events) -> dict[str, Events]:
    out: dict[str, Events] = defaultdict(list)
    for e in quiet:
        out[e["route"]].append(e)
    return out


def test_same_seed_same_events_other_seed_other_events() -> None:
    config = scenario_config("every-incident", duration_s=1800, rate=20, seed=11,
                             duplicates=0.02, late=0.02, late_max=30)
    first = list(Simulator(config).events())
    sim = Simulator(config)
    assert list(sim.events()) == first
    assert list(sim.events()) == first  # events() starts over on every call
    other = list(Simulator(config.with_(seed=12)).events())
    assert other != first
    assert {e["request_id"] for e in other}.isdisjoint(e["request_id"] for e in first)


def test_every_event_is_telemetry_v1() -> None:
    config = scenario_config("every-incident", duration_s=4 * 3600, rate=4, seed=5,
                             duplicates=0.01, late=0.01, error_rate=0.05)
    events = list(Simulator(config).events())
    assert len(events) > 25_000
    for e in events:
        check_event(e)
    statuses = Counter(e["status"] for e in events)
    assert set(statuses) == {"ok", "error", "timeout", "cancelled"}


def test_quiet_events_are_in_event_time_order_with_unique_ids(quiet: Events) -> None:
    ts = [e["ts"] for e in quiet]
    assert ts == sorted(ts)
    assert len({e["request_id"] for e in quiet}) == len(quiet)
    start = datetime(2026, 11, 2, tzinfo=UTC).timestamp()
    assert start <= ts_of(quiet[0]) and ts_of(quiet[-1]) < start + 3 * 3600


def test_route_mix_follows_the_shares(by_route: dict[str, Events], quiet: Events) -> None:
    total = sum(r.share for r in DEFAULT_ROUTES)
    for route in DEFAULT_ROUTES:
        assert len(by_route[route.name]) / len(quiet) == pytest.approx(
            route.share / total, abs=0.01
        )


@pytest.mark.parametrize("route", DEFAULT_ROUTES, ids=lambda r: r.name)
def test_route_acceptance_is_near_the_profile(route: Any, by_route: dict[str, Events]) -> None:
    assert rate(by_route[route.name]) == pytest.approx(route.acceptance, abs=0.015)


@pytest.mark.parametrize("route", DEFAULT_ROUTES, ids=lambda r: r.name)
def test_metadata_follows_the_profile(route: Any, by_route: dict[str, Events]) -> None:
    events = by_route[route.name]
    assert {e["target"]["revision"] for e in events} == {route.target.revision}
    assert {e["spec"]["num_speculative_tokens"] for e in events} == {route.num_speculative_tokens}
    assert {e["spec"]["method"] for e in events} == {route.method}
    assert {e["temperature"] for e in events} == {route.temperature}
    if route.draft is None:
        assert not any("draft" in e or "draft_evicted" in e for e in events)
    else:
        assert {e["draft"]["tokenizer"] for e in events} == {route.target.tokenizer}
        assert not any(e["draft_evicted"] for e in events)


def chain_variance(alpha: float, k: int) -> float:
    """Variance of one step's accepted count when each step accepts a prefix (no spread)."""
    survival = alpha ** np.arange(1, k + 1)  # P(at least i accepted)
    second_moment = np.sum((2 * np.arange(1, k + 1) - 1) * survival)
    return float(second_moment - survival.sum() ** 2)


def rates_and_steps(events: Events, min_steps: int) -> tuple[np.ndarray, np.ndarray]:
    spec = [e["spec"] for e in events if e["spec"]["verify_steps"] >= min_steps]
    r = np.array([s["accepted_tokens"] / s["drafted_tokens"] for s in spec])
    return r, np.array([s["verify_steps"] for s in spec])


def test_per_request_acceptance_is_overdispersed(by_route: dict[str, Events]) -> None:
    """Requests differ beyond sampling noise (prompt heterogeneity), as real engines show."""
    for name in ("code-assistant", "creative-writing"):
        route = next(r for r in DEFAULT_ROUTES if r.name == name)
        k = route.num_speculative_tokens
        r, steps = rates_and_steps(by_route[name], 20)
        alpha = calibrated_mean(route.acceptance, k, route.concentration)
        sampling = np.mean(chain_variance(alpha, k) / (k * k * steps))
        assert r.var() > 2 * sampling, name
        assert r.var() > 4 * np.mean(r.mean() * (1 - r.mean()) / (k * steps)), name  # binomial
    # the spreads of the measured routes: code ~0.70-1.00, creative ~0.23-0.78
    code_r, _ = rates_and_steps(by_route["code-assistant"], 10)
    assert 0.55 < np.percentile(code_r, 5) < 0.75 and np.percentile(code_r, 95) > 0.92
    creative_r, _ = rates_and_steps(by_route["creative-writing"], 10)
    assert np.percentile(creative_r, 5) < 0.3 and np.percentile(creative_r, 95) > 0.6


def test_without_spread_requests_vary_only_by_sampling() -> None:
    route = DEFAULT_ROUTES[0].with_(concentration=1e6, share=1.0)
    events = list(Simulator(SimulationConfig(routes=(route,), duration_s=1800, rate=20,
                                             seed=2)).events())
    k = route.num_speculative_tokens
    r, steps = rates_and_steps(events, 20)
    sampling = np.mean(chain_variance(chain_alpha_of(route), k) / (k * k * steps))
    assert r.var() == pytest.approx(sampling, rel=0.15)
    assert rate(events) == pytest.approx(route.acceptance, abs=0.01)


def chain_alpha_of(route: Any) -> float:
    return calibrated_mean(route.acceptance, route.num_speculative_tokens, route.concentration)


def test_per_position_survival_follows_the_chain(by_route: dict[str, Events]) -> None:
    route = DEFAULT_ROUTES[0]
    spec = [e["spec"] for e in by_route[route.name] if e["spec"]["verify_steps"]]
    steps = sum(s["verify_steps"] for s in spec)
    survival = np.array([sum(s["accepted_per_position"][i] for s in spec)
                         for i in range(route.num_speculative_tokens)]) / steps
    assert np.all(np.diff(survival) < 0)
    # conditional acceptance of each position is about the per-request alpha
    alpha = calibrated_mean(route.acceptance, route.num_speculative_tokens, route.concentration)
    conditional = survival / np.concatenate([[1.0], survival[:-1]])
    assert conditional == pytest.approx(np.full(len(conditional), alpha), abs=0.04)


def test_ngram_route_often_drafts_nothing(by_route: dict[str, Events]) -> None:
    route = next(r for r in DEFAULT_ROUTES if r.method == "ngram")
    events = by_route[route.name]
    empty = [e for e in events if e["spec"]["drafted_tokens"] == 0]
    assert len(empty) / len(events) == pytest.approx(route.no_draft, abs=0.02)
    for e in empty:
        assert e["spec"]["accepted_tokens"] == e["spec"]["verify_steps"] == 0
        assert e["spec"]["accepted_per_position"] == [0] * route.num_speculative_tokens
        assert e["spec"]["params"] == dict(route.spec_params)
    for name, events in by_route.items():
        if name != route.name:
            ok = [e for e in events if e["status"] == "ok"]
            assert all(e["spec"]["drafted_tokens"] > 0 for e in ok), name


def test_output_lengths_follow_the_profile(by_route: dict[str, Events]) -> None:
    for route in DEFAULT_ROUTES:
        out = [e["output_tokens"] for e in by_route[route.name] if e["status"] == "ok"]
        assert np.median(out) == pytest.approx(route.output_median, rel=0.05), route.name
        assert max(out) <= route.max_output


def test_errors_are_rare_and_short(quiet: Events) -> None:
    failed = [e for e in quiet if e["status"] != "ok"]
    assert len(failed) / len(quiet) == pytest.approx(0.005, abs=0.0015)
    assert np.median([e["output_tokens"] for e in failed]) < 20
    timeouts = [e for e in failed if e["status"] == "timeout"]
    assert timeouts and all(e["e2e_ms"] >= 60_000 for e in timeouts)


def test_lower_acceptance_means_lower_decode_throughput(by_route: dict[str, Events]) -> None:
    # same target model and step cost on chat and creative-writing; creative accepts less
    def tokens_per_step_ms(events: Events) -> float:
        ok = [e for e in events if e["status"] == "ok" and e["spec"]["verify_steps"]]
        return float(np.median([e["output_tokens"] / (e["e2e_ms"] - e["ttft_ms"]) for e in ok]))

    assert tokens_per_step_ms(by_route["creative-writing"]) < tokens_per_step_ms(by_route["chat"])


def test_batch_size_follows_load() -> None:
    config = scenario_config("quiet", duration_s=86400, rate=0.5, seed=4)
    events = list(Simulator(config).events())
    hour = np.array([int(e["ts"][11:13]) for e in events])
    batch = np.array([e["batch_size"] for e in events])
    assert batch[(hour >= 13) & (hour < 16)].mean() > 1.8 * batch[(hour >= 1) & (hour < 4)].mean()


def test_daily_cycle_and_mean_rate() -> None:
    config = scenario_config("default", duration_s=86400, rate=1.0, seed=8)
    events = list(Simulator(config).events())
    assert len(events) / 86400 == pytest.approx(1.0, rel=0.1)
    hours = Counter(int(e["ts"][11:13]) for e in events)
    peak, trough = hours[13] + hours[14], hours[1] + hours[2]
    assert peak > 2 * trough


def test_instances_and_engine(quiet: Events) -> None:
    pods: dict[str, set[str]] = defaultdict(set)
    for e in quiet:
        pods[e["route"]].add(e["instance"])
    for route in DEFAULT_ROUTES:
        assert len(pods[route.name]) == route.replicas
    all_pods = [p for s in pods.values() for p in s]
    assert len(all_pods) == len(set(all_pods))  # a pod serves one route


def test_custom_routes_and_unbounded_runs() -> None:
    route = DEFAULT_ROUTES[3].with_(name="ルート/日本語", share=2.0)
    sim = Simulator(SimulationConfig(routes=(route,), duration_s=None, rate=5, seed=1))
    stream = sim.events()
    first = [next(stream) for _ in range(50_000)]  # more than an hour; never ends by itself
    assert {e["route"] for e in first} == {route.name}
    assert ts_of(first[-1]) - ts_of(first[0]) > 3600


def test_start_forms_agree() -> None:
    a = SimulationConfig(start="2026-11-02T00:00:00Z", duration_s=60)
    b = SimulationConfig(start=datetime(2026, 11, 2, tzinfo=UTC), duration_s=60)
    c = SimulationConfig(start=a.start_ts, duration_s=60)
    assert list(Simulator(a).events()) == list(Simulator(b).events()) == list(
        Simulator(c).events()
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"routes": ()},
        {"rate": 0},
        {"duplicates": 1.5},
        {"seed": -1},
        {"incidents": ("silence:route=nowhere",)},
        {"incidents": ("tokenizer_swap:route=summarize",)},  # ngram: no draft to swap
        {"routes": (DEFAULT_ROUTES[0], DEFAULT_ROUTES[0])},
    ],
)
def test_bad_configs_are_rejected(changes: dict[str, Any]) -> None:
    with pytest.raises(SimulationError):
        SimulationConfig(**changes)
