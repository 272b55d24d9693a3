"""Each incident does what it says inside its window, and nothing outside it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from monitor.simulate import SimulationConfig, SimulationError, Simulator, scenario_config
from tests.monitor.simulate.shape import check_event, rate, throughput, ts_of

Events = list[dict[str, Any]]
AT, FOR = 40 * 60, 40 * 60  # window [40m, 80m) of a 2 h run


def base() -> SimulationConfig:
    return scenario_config("quiet", duration_s=2 * 3600, rate=10, seed=21)


def run(*incidents: str) -> Events:
    return list(Simulator(base().add_incidents(incidents)).events())


def split(events: Events, route: str) -> tuple[Events, Events]:
    """(inside the window, outside it) for one route."""
    start = base().start_ts
    inside, outside = [], []
    for e in events:
        if e["route"] == route:
            t = ts_of(e) - start
            (inside if AT <= t < AT + FOR else outside).append(e)
    return inside, outside


def window(kind: str, route: str, extra: str = "") -> str:
    return f"{kind}:route={route},at={AT}s,for={FOR}s" + (f",{extra}" if extra else "")


@pytest.fixture(scope="module")
def baseline() -> Events:
    return list(Simulator(base()).events())


def ok(events: Events) -> Events:
    return [e for e in events if e["status"] == "ok"]


def test_revision_change_moves_target_revision_and_lowers_acceptance(baseline: Events) -> None:
    route = "creative-writing"
    events = run(window("revision_change", route, "factor=0.85"))
    inside, outside = split(events, route)
    old = base().route(route)
    assert {e["target"]["revision"] for e in outside} == {old.target.revision}
    new = {e["target"]["revision"] for e in inside}
    assert len(new) == 1 and new != {old.target.revision}
    # the draft did not move: it is still pinned to the old target revision
    assert {e["draft"]["pinned_target_revision"] for e in inside} == {old.target.revision}
    assert {e["draft"]["revision"] for e in inside} == {old.draft.revision}
    assert rate(inside) / rate(outside) == pytest.approx(0.85, abs=0.03)
    assert rate(outside) == pytest.approx(old.acceptance, abs=0.02)
    # other routes are untouched, request for request
    assert [e for e in events if e["route"] == "chat"] == [
        e for e in baseline if e["route"] == "chat"
    ]


def test_revision_change_without_duration_lasts_to_the_end() -> None:
    events = run("revision_change:route=chat,at=1h,revision=2027-01-01")
    start = base().start_ts
    for e in events:
        if e["route"] == "chat":
            late = ts_of(e) - start >= 3600
            assert (e["target"]["revision"] == "2027-01-01") == late


def test_tokenizer_swap_changes_the_draft_family_and_collapses_acceptance() -> None:
    route = "translation"
    inside, outside = split(run(window("tokenizer_swap", route)), route)
    assert all(e["draft"]["tokenizer"] != e["target"]["tokenizer"] for e in inside)
    assert all(e["draft"]["tokenizer"] == e["target"]["tokenizer"] for e in outside)
    assert len({e["draft"]["model"] for e in inside}) == 1
    assert rate(inside) == pytest.approx(0.1, abs=0.02)
    assert rate(outside) == pytest.approx(0.35, abs=0.02)
    assert np.median([throughput(e) for e in ok(inside)]) < 0.8 * np.median(
        [throughput(e) for e in ok(outside)]
    )


def test_eviction_flags_requests_and_slows_them_but_keeps_acceptance(baseline: Events) -> None:
    route = "code-assistant"
    events = run(window("eviction", route, "share=0.3,slowdown=2.5"))
    inside, outside = split(events, route)
    assert not any(e["draft_evicted"] for e in outside)
    evicted = [e for e in inside if e["draft_evicted"]]
    assert len(evicted) / len(inside) == pytest.approx(0.3, abs=0.03)
    kept = [e for e in inside if not e["draft_evicted"]]
    assert np.median([throughput(e) for e in ok(evicted)]) < 0.5 * np.median(
        [throughput(e) for e in ok(kept)]
    )
    # same requests as without the incident, same acceptance counters, only slower
    same = {e["request_id"]: e for e in baseline}
    for e in inside:
        assert e["spec"] == same[e["request_id"]]["spec"]


def test_silence_sends_nothing_for_the_route_in_its_window() -> None:
    events = run(window("silence", "chat"))
    inside, outside = split(events, "chat")
    assert inside == [] and len(outside) > 1000
    others, _ = split(events, "code-assistant")
    assert len(others) > 1000


def test_speculation_off_drafts_nothing() -> None:
    route = "chat"
    inside, outside = split(run(window("speculation_off", route)), route)
    assert inside and all(e["spec"]["drafted_tokens"] == 0 for e in inside)
    assert all(e["spec"]["accepted_per_position"] == [0] * 4 for e in inside)
    assert all("draft" in e for e in inside)  # configured, just not drafting
    assert all(e["spec"]["drafted_tokens"] > 0 for e in ok(outside))
    # no speculation: one token per target step, so decode is slower
    assert np.median([throughput(e) for e in ok(inside)]) < 0.6 * np.median(
        [throughput(e) for e in ok(outside)]
    )


def test_acceptance_shift_scales_acceptance_without_metadata_change() -> None:
    route = "code-assistant"
    inside, outside = split(run(window("acceptance_shift", route, "factor=0.8")), route)
    assert rate(inside) / rate(outside) == pytest.approx(0.8, abs=0.03)
    meta = {(e["target"]["revision"], e["draft"]["model"], e["draft"]["tokenizer"])
            for e in inside + outside}
    assert len(meta) == 1
    assert np.median([throughput(e) for e in ok(inside)]) < np.median(
        [throughput(e) for e in ok(outside)]
    )


def test_error_spike_raises_errors_and_slows_decode() -> None:
    route = "chat"
    inside, outside = split(run(window("error_spike", route, "rate=0.25")), route)
    errors_in = sum(e["status"] != "ok" for e in inside) / len(inside)
    errors_out = sum(e["status"] != "ok" for e in outside) / len(outside)
    assert errors_in == pytest.approx(0.25, abs=0.03)
    assert errors_out < 0.01
    assert np.median([throughput(e) for e in ok(inside)]) < 0.7 * np.median(
        [throughput(e) for e in ok(outside)]
    )


def test_batch_surge_raises_batch_and_lowers_throughput_not_acceptance() -> None:
    route = "chat"
    inside, outside = split(run(window("batch_surge", route, "factor=3")), route)
    assert np.mean([e["batch_size"] for e in inside]) > 2.2 * np.mean(
        [e["batch_size"] for e in outside]
    )
    assert np.median([throughput(e) for e in ok(inside)]) < 0.8 * np.median(
        [throughput(e) for e in ok(outside)]
    )
    assert rate(inside) == pytest.approx(rate(outside), abs=0.02)


def test_star_hits_every_route() -> None:
    events = run(window("silence", "*"))
    start = base().start_ts
    assert not any(AT <= ts_of(e) - start < AT + FOR for e in events)
    assert len(events) > 1000


def test_overlapping_incidents_compose() -> None:
    route = "creative-writing"
    events = run(window("revision_change", route, "factor=0.85"),
                 window("acceptance_shift", route, "factor=0.8"))
    inside, outside = split(events, route)
    assert rate(inside) / rate(outside) == pytest.approx(0.85 * 0.8, abs=0.03)
    for e in events:
        check_event(e)


def test_revision_change_with_factor_one_moves_only_the_revision(baseline: Events) -> None:
    """A fine-tune that leaves acceptance alone: same requests, same counters, new revision."""
    route = "chat"
    events = run(window("revision_change", route, "factor=1,revision=t2"))
    inside, outside = split(events, route)
    old = base().route(route)
    assert {e["target"]["revision"] for e in inside} == {"t2"}
    assert {e["target"]["revision"] for e in outside} == {old.target.revision}
    same = {e["request_id"]: e for e in baseline}
    for e in inside + outside:
        assert e["spec"] == same[e["request_id"]]["spec"]


def test_draft_change_moves_the_draft_revision_and_scales_acceptance(baseline: Events) -> None:
    route = "code-assistant"
    events = run(window("draft_change", route))  # the defaults: factor 0.85, dated revision
    inside, outside = split(events, route)
    old = base().route(route)
    assert old.draft is not None
    assert {e["draft"]["revision"] for e in outside} == {old.draft.revision}
    new = {e["draft"]["revision"] for e in inside}
    assert new == {base().start.split("T")[0]} and new != {old.draft.revision}
    # the target did not move, and the new draft is pinned to it: no revision mismatch
    for e in inside:
        assert e["target"] == old.target.as_dict()
        assert e["draft"]["pinned_target_revision"] == e["target"]["revision"]
        assert (e["draft"]["model"], e["draft"]["tokenizer"]) == (old.draft.model,
                                                                  old.draft.tokenizer)
    assert rate(inside) / rate(outside) == pytest.approx(0.85, abs=0.03)
    assert rate(outside) == pytest.approx(old.acceptance, abs=0.02)
    # the traffic is the same requests; other routes are untouched
    same = {e["request_id"]: e for e in baseline}
    assert all(e["prompt_tokens"] == same[e["request_id"]]["prompt_tokens"] for e in inside)
    assert [e for e in events if e["route"] == "chat"] == [
        e for e in baseline if e["route"] == "chat"
    ]


def test_a_better_draft_raises_acceptance() -> None:
    route = "chat"
    inside, outside = split(run(window("draft_change", route, "factor=1.15,revision=d2")), route)
    assert {e["draft"]["revision"] for e in inside} == {"d2"}
    assert rate(inside) / rate(outside) == pytest.approx(1.15, abs=0.03)
    assert np.median([throughput(e) for e in ok(inside)]) > np.median(
        [throughput(e) for e in ok(outside)]
    )


def test_a_draft_after_a_fine_tune_is_pinned_to_the_new_target() -> None:
    route = "chat"
    events = run("revision_change:route=chat,at=30m,revision=t2",
                 "draft_change:route=chat,at=60m,revision=d2")
    start = base().start_ts
    for e in events:
        if e["route"] != route:
            continue
        t = ts_of(e) - start
        if t >= 3600:
            assert (e["target"]["revision"], e["draft"]["revision"],
                    e["draft"]["pinned_target_revision"]) == ("t2", "d2", "t2")
        elif t >= 1800:  # draft drift: the old draft, pinned to the old target
            assert e["target"]["revision"] == "t2"
            assert e["draft"]["pinned_target_revision"] != "t2"


def test_draft_change_needs_a_draft_and_a_sane_factor() -> None:
    with pytest.raises(SimulationError, match="draft model"):
        base().add_incidents(["draft_change:route=summarize,at=1h"])  # n-gram: no draft
    with pytest.raises(SimulationError, match="below 1"):
        base().add_incidents(["draft_change:route=code-assistant,at=1h,factor=1.3"])
    # every route with a draft under route=*; summarize is left alone
    events = run(window("draft_change", "*", "revision=d9"))
    inside, _ = split(events, "summarize")
    assert inside and all("draft" not in e for e in inside)


def _positions(events: Events, k: int) -> np.ndarray:
    """Pooled acceptance at each of the first ``k`` positions: accepted there / verify steps."""
    steps = sum(e["spec"]["verify_steps"] for e in events)
    return np.array([sum(e["spec"]["accepted_per_position"][i] for e in events)
                     for i in range(k)]) / steps


def test_draft_length_keeps_shared_positions_and_lowers_the_raw_rate(baseline: Events) -> None:
    route = "creative-writing"
    old = base().route(route)
    assert old.num_speculative_tokens == 3
    events = run(window("draft_length", route, "k=5"))
    inside, outside = split(events, route)
    assert {e["spec"]["num_speculative_tokens"] for e in inside} == {5}
    assert {e["spec"]["num_speculative_tokens"] for e in outside} == {3}
    for e in inside:
        check_event(e)  # 5 positions, drafted = 5 x steps, a prefix
        assert len(e["spec"]["accepted_per_position"]) == 5
    # metadata does not move: only the length
    assert {(e["target"]["revision"], e["draft"]["revision"]) for e in inside + outside} == {
        (old.target.revision, old.draft.revision)
    }
    # the raw rate falls with no drift (0.42 at k=3 is ~0.30 at k=5 for the same drafter) ...
    assert rate(outside) == pytest.approx(0.42, abs=0.02)
    assert rate(inside) == pytest.approx(0.30, abs=0.02)
    # ... while the positions both lengths share keep their acceptance (the same per-token
    # chain; pooling over steps shifts it by ~1.7 %, well under a 5 % effect)
    shared_in, shared_out = _positions(inside, 3), _positions(outside, 3)
    assert shared_in == pytest.approx(shared_out, rel=0.04)
    assert shared_in.sum() == pytest.approx(shared_out.sum(), rel=0.04)
    # same requests as without the incident (prompts come from the fixed stream; the chain
    # draws of deeper positions differ); other routes untouched
    same = {e["request_id"]: e for e in baseline}
    assert all(e["prompt_tokens"] == same[e["request_id"]]["prompt_tokens"]
               for e in inside + outside)
    assert [e for e in events if e["route"] == "chat"] == [
        e for e in baseline if e["route"] == "chat"
    ]
