"""The ``policy`` scenario: structure a speculation policy must find, and its true speed model."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson
import pytest

from monitor.simulate import SimulationError, Simulator, scenario_config
from monitor.simulate.policy_traits import PolicyTraits, TagValue, VerifyCost
from monitor.simulate.policy_truth import (
    marginal_cost,
    true_best_k,
    true_bucket_speedup,
    true_speedup,
)
from monitor.simulate.profiles import POLICY_ROUTES
from monitor.telemetry.parse import Parser
from tests.monitor.simulate.shape import check_event

Events = list[dict[str, Any]]
PYTHON, RUST, HASKELL = ({"lang": v} for v in ("python", "rust", "haskell"))
EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@pytest.fixture(scope="module")
def days() -> Events:
    """The scenario's own two days at 2 events/s: about 350,000 events."""
    return list(Simulator(scenario_config("policy", rate=2, seed=3)).events())


def _ok(events: Iterable[dict[str, Any]], route: str, lang: str | None,
        low: int, high: int) -> Events:
    return [
        e for e in events
        if e["route"] == route and e["status"] == "ok" and low <= e["batch_size"] <= high
        and (lang is None or e["tags"]["lang"] == lang)
    ]


def empirical_speedup(events: Events) -> tuple[float, int, int]:
    """Plain decode ms per token over speculative decode ms per token, and the two counts."""
    sums = {True: [0.0, 0], False: [0.0, 0]}
    for e in events:
        s = sums["spec" in e]
        s[0] += e["e2e_ms"] - e["ttft_ms"]
        s[1] += e["output_tokens"]
    (spec_ms, spec_tokens), (plain_ms, plain_tokens) = sums[True], sums[False]
    n_spec = sum(1 for e in events if "spec" in e)
    return (plain_ms / plain_tokens) / (spec_ms / spec_tokens), len(events) - n_spec, n_spec


# -- the traffic ---------------------------------------------------------------------------


def test_two_days_of_valid_v11_telemetry(days: Events) -> None:
    config = scenario_config("policy")
    assert config.duration_s == 2 * 86400 and config.v11 and config.rate == 50
    assert len(days) > 300_000
    for e in days[::50]:
        check_event(e)
    sample = days[::25]
    parser = Parser()
    parsed = rejected = 0
    for at in range(0, len(sample), 500):
        good, bad = parser.parse(b"\n".join(orjson.dumps(e) for e in sample[at:at + 500]))
        parsed += len(good)
        rejected += len(bad)
    assert rejected == 0 and parsed == len(sample)


def test_lang_tags_only_on_code_assistant_in_the_stated_mix(days: Events) -> None:
    langs = Counter(e["tags"]["lang"] for e in days if e["route"] == "code-assistant")
    total = sum(langs.values())
    assert langs["python"] / total == pytest.approx(0.55, abs=0.01)
    assert langs["rust"] / total == pytest.approx(0.30, abs=0.01)
    assert langs["haskell"] / total == pytest.approx(0.15, abs=0.01)
    assert not any("tags" in e for e in days if e["route"] != "code-assistant")


def test_a_share_runs_without_speculation_on_the_same_target(days: Events) -> None:
    for route in POLICY_ROUTES:
        events = [e for e in days if e["route"] == route.name]
        plain = [e for e in events if "spec" not in e]
        assert len(plain) / len(events) == pytest.approx(0.15, abs=0.01)
        assert all("draft" not in e and "draft_evicted" not in e for e in plain)
        assert {orjson.dumps(e["target"]) for e in events} == {
            orjson.dumps(route.target.as_dict())
        }
        # lang is known before the request runs, with or without speculation
        if route.name == "code-assistant":
            assert all("lang" in e["tags"] for e in plain)


def test_every_batch_bucket_gets_both_kinds_of_request(days: Events) -> None:
    bounds = [*zip(EDGES, [b - 1 for b in EDGES[1:]], strict=False), (256, 256)]
    for route in ("code-assistant", "chat", "summarize"):
        for low, high in bounds:
            events = _ok(days, route, None, low, high)
            plain = sum(1 for e in events if "spec" not in e)
            assert plain >= 100 and len(events) - plain >= 600, (route, low, high)
    assert max(e["batch_size"] for e in days) == 256


def test_summarize_is_prefill_bound_and_code_is_decode_bound(days: Events) -> None:
    def decode_share(route: str) -> float:
        ok = _ok(days, route, None, 1, 256)
        return sum(e["e2e_ms"] - e["ttft_ms"] for e in ok) / sum(e["e2e_ms"] for e in ok)

    assert decode_share("summarize") < 0.3
    assert decode_share("code-assistant") > 0.9 and decode_share("chat") > 0.9


def test_stationary_across_the_two_days(days: Events) -> None:
    """The second day agrees with the first: acceptance per lang moves < 2 %."""
    assert scenario_config("policy").start == "2026-11-02T00:00:00Z"

    def rate(lang: str, second_day: bool) -> float:
        accepted = drafted = 0
        for e in days:
            if "spec" in e and e.get("tags", {}).get("lang") == lang:
                if (e["ts"] >= "2026-11-03") == second_day:
                    accepted += e["spec"]["accepted_tokens"]
                    drafted += e["spec"]["drafted_tokens"]
        return accepted / drafted

    for lang in ("python", "rust", "haskell"):
        assert rate(lang, True) == pytest.approx(rate(lang, False), rel=0.02)
    assert rate("python", False) > rate("rust", False) + 0.15 > rate("haskell", False) + 0.3


def test_deterministic_with_seed() -> None:
    def digest(seed: int) -> str:
        config = scenario_config("policy", duration_s=600, rate=5, seed=seed)
        h = hashlib.sha256()
        for e in Simulator(config).events():
            h.update(orjson.dumps(e))
        return h.hexdigest()

    assert digest(1) == digest(1) != digest(2)


# -- the true speed model ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "lang", "low", "high", "k"),
    [
        ("code-assistant", "python", 1, 15, 4),  # free verification, k = 4 wins
        ("code-assistant", "rust", 64, 127, 4),  # verification makes it a loss
        ("code-assistant", "haskell", 2, 15, 4),  # a loss at any batch size
        ("chat", None, 32, 63, 3),
        ("summarize", None, 128, 255, 3),
    ],
)
def test_empirical_speedup_matches_the_truth(
    days: Events, route: str, lang: str | None, low: int, high: int, k: int
) -> None:
    empirical, plain, spec = empirical_speedup(_ok(days, route, lang, low, high))
    assert plain >= 300 and spec >= 1500
    tags = {} if lang is None else {"lang": lang}
    assert empirical == pytest.approx(true_bucket_speedup(route, tags, low, high, k), rel=0.03)


def test_empirical_speedup_at_one_batch_size_matches_true_speedup(days: Events) -> None:
    # batch sizes up to 16 verify for free: every one of them has the batch-1 speed-up
    for route, lang in (("code-assistant", "python"), ("chat", None)):
        empirical, _, _ = empirical_speedup(_ok(days, route, lang, 1, 16))
        tags = {} if lang is None else {"lang": lang}
        assert empirical == pytest.approx(true_speedup(route, tags, 1, 4 if lang else 3),
                                          rel=0.03)


def test_speculation_loses_for_haskell_at_every_batch_size_and_draft_length() -> None:
    for batch in range(1, 257):
        assert true_best_k("code-assistant", HASKELL, batch, 4) == 0
        assert max(true_speedup("code-assistant", HASKELL, batch, k) for k in (1, 2, 3, 4)) < 1
    # the route's own setting (k = 4) loses by a third or more
    assert true_speedup("code-assistant", HASKELL, 1, 4) < 0.67


def test_rust_loses_at_high_batch_and_python_only_near_the_top() -> None:
    assert true_best_k("code-assistant", RUST, 8, 4) == 2
    for batch in range(70, 257):
        assert true_best_k("code-assistant", RUST, batch, 4) == 0
    for batch in range(1, 17):
        assert true_best_k("code-assistant", PYTHON, batch, 4) == 4
        assert true_speedup("code-assistant", PYTHON, batch, 4) > 1.9
    assert true_best_k("code-assistant", PYTHON, 128, 4) == 1
    for batch in range(170, 257):
        assert true_best_k("code-assistant", PYTHON, batch, 4) == 0


def test_pooled_route_is_the_mix_of_its_langs() -> None:
    pooled = true_speedup("code-assistant", {}, 1, 4)
    parts = [true_speedup("code-assistant", t, 1, 4) for t in (PYTHON, RUST, HASKELL)]
    assert min(parts) < pooled < max(parts)
    # time adds up, not speed: 1 / pooled is the share-weighted mean of 1 / speed-up
    harmonic = 1 / sum(s / p for s, p in zip((0.55, 0.30, 0.15), parts, strict=True))
    assert pooled == pytest.approx(harmonic, rel=1e-9)
    assert true_speedup("chat", {"lang": "python"}, 1, 3) == true_speedup("chat", {}, 1, 3)


def test_marginal_cost_rises_with_batch() -> None:
    costs = [marginal_cost("code-assistant", b) for b in (1, 16, 32, 64, 128, 256)]
    assert costs[0] == costs[1] == pytest.approx(0.2)
    assert costs == sorted(costs) and costs[-1] == pytest.approx(0.95)


def test_truth_rejects_what_the_scenario_does_not_have() -> None:
    with pytest.raises(SimulationError, match="known"):
        true_speedup("translation", {}, 1, 3)
    with pytest.raises(SimulationError, match="known: python, rust, haskell"):
        true_speedup("code-assistant", {"lang": "cobol"}, 1, 3)
    with pytest.raises(SimulationError):
        true_bucket_speedup("chat", {}, 300, None, 3)
    assert true_speedup("chat", {}, 64, 0) == 1.0


def test_traits_check_their_values() -> None:
    cost = VerifyCost(((16, 0.0),))
    with pytest.raises(SimulationError, match="add up to 1"):
        PolicyTraits(verify=cost, tag_key="lang", values=(TagValue("a", 0.5, 0.5),))
    with pytest.raises(SimulationError, match="tag key"):
        PolicyTraits(verify=cost, values=(TagValue("a", 1.0, 0.5),))
    with pytest.raises(SimulationError, match="increasing"):
        VerifyCost(((32, 0.1), (16, 0.0)))


# sha256 of the events (orjson, one per line) of the v1.1 scenarios at 30 minutes, 6 events/s,
# seed 7, as they were before the policy scenario: its per-request tags and requests without
# speculation must not move a byte of them (test_experiment guards the v1 scenarios).
BEFORE_POLICY = {
    "experiment": (7041, "8df6c2d057cac84abc4416412b1577a03497b5a08d16db5c6769ce046bdd0ea8"),
    "experiment-null": (
        7041, "e46ebdcc341f255deebfb46bdc8c2326be99e1560d6eada0f3d813fa55ffdd97",
    ),
    "experiment-pass": (
        7041, "7e080fe345775252772ba3d7f178a896f02d9a3c2d554c176fe731afb5f72954",
    ),
    "lossy-verifier": (7168, "671bda81d38619af9914ea153bfb2176c7fad1fee142577795ec5b4801cdf2ef"),
}


@pytest.mark.parametrize("name", sorted(BEFORE_POLICY))
def test_v11_scenarios_are_byte_identical(name: str) -> None:
    digest, n = hashlib.sha256(), 0
    for e in Simulator(scenario_config(name, duration_s=1800, rate=6, seed=7)).events():
        digest.update(orjson.dumps(e) + b"\n")
        n += 1
    assert (n, digest.hexdigest()) == BEFORE_POLICY[name]
