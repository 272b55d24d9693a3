"""Per-position survival curves and the recommended draft length."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.detect.breakeven import CostModel
from monitor.detect.exceptions import StateVersionError
from monitor.detect.positions import PositionCurve, speedup_curve
from monitor.simulate import DEFAULT_ROUTES, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import event_from_obj

ROUTES = {r.name: r for r in DEFAULT_ROUTES}
EVENT = Event("r", 0.0, "chat", "ok", "t", "1", "tok", 10, 50.0, draft_model="d", has_spec=True,
              num_speculative_tokens=3)  # fmt: skip


@cache
def simulate(name: str, incidents: tuple[str, ...] = (), hours: float = 2.0):
    cfg = scenario_config("quiet", duration_s=hours * 3600, seed=4, rate=5.0)
    cfg = cfg.with_(routes=(ROUTES[name],)).add_incidents(incidents)
    return tuple(event_from_obj(d) for d in Simulator(cfg).events())


def feed(curve: PositionCurve, events) -> PositionCurve:
    for e in events:
        curve.update(e)
    return curve


def test_survival_is_per_position_over_steps() -> None:
    events = simulate("chat")
    curve = feed(PositionCurve(window=10 * 3600), events)
    steps = sum(e.verify_steps for e in events)
    per_pos = [sum(e.accepted_per_position[i] for e in events) for i in range(4)]
    assert curve.steps == steps
    assert curve.survival == pytest.approx([n / steps for n in per_pos])
    p = curve.survival
    assert all(a >= b for a, b in zip(p, p[1:], strict=False))  # prefix acceptance
    # sum p_i = A / S = tau - 1 (engine-telemetry.md 5.1)
    accepted = sum(e.accepted_tokens for e in events)
    assert curve.tau == pytest.approx(1 + accepted / steps)


def test_without_verify_steps_the_steps_are_drafted_over_k() -> None:
    events = simulate("chat")
    with_steps = feed(PositionCurve(window=10 * 3600), events)
    without = feed(PositionCurve(window=10 * 3600), [replace(e, verify_steps=None) for e in events])
    assert without.survival == pytest.approx(with_steps.survival)
    assert without.knee == with_steps.knee


def test_knee_per_route_under_its_own_cost() -> None:
    # code-assistant: r = 0.80 at k = 5, c = 0.08: every position pays, the knee is at the limit
    code = feed(PositionCurve(CostModel(c=0.08)), simulate("code-assistant"))
    assert code.knee == 5 and code.evidence()["at_limit"]
    # creative-writing: r = 0.42 at k = 3, c = 0.35: only the first draft position pays
    creative = feed(PositionCurve(CostModel(c=0.35)), simulate("creative-writing"))
    assert creative.knee == 1
    assert creative.speedup[1] > max(creative.speedup[0], creative.speedup[2])
    # chat: at the default cost of 0.40 per drafted token the fourth position stops paying
    chat = feed(PositionCurve(), simulate("chat"))
    assert chat.knee == 3 and chat.last_paying == 4
    json.dumps(chat.evidence(), allow_nan=False)


def test_below_breakeven_at_k_but_not_at_a_shorter_draft() -> None:
    # translation: r = 0.35 at k = 3 is under the default 0.40, yet its first position
    # survives 55 % of steps: drafting one token would still pay (T(1) = 1.55 / 1.4)
    events = simulate("translation")
    rate = sum(e.accepted_tokens for e in events) / sum(e.drafted_tokens for e in events)
    assert rate < 0.40
    curve = feed(PositionCurve(), events)
    assert curve.knee == 1 and curve.speedup[1] > 1.0 > curve.speedup[3]
    # at a cost no position covers, the recommendation is 0: speculation off
    dear = feed(PositionCurve(CostModel(c=0.6)), events)
    assert dear.knee == 0 and dear.last_paying == 0


@st.composite
def curves(draw):
    k = draw(st.integers(1, 10))
    p = sorted((draw(st.floats(0.0, 1.0)) for _ in range(k)), reverse=True)
    return p, draw(st.floats(0.0, 1.5))


@given(curves())
@example(([1e-05, 1e-05], 1e-05))  # every position pays exactly its cost: T(j) = 1 for all j
def test_knee_is_the_throughput_optimum(case) -> None:
    p, m = case
    curve = PositionCurve(CostModel(c=m), min_steps=1)
    steps = 1_000_000
    curve.observe([round(x * steps) for x in p], steps, 0.0)
    survival = curve.survival
    brute = [(1 + sum(survival[:j])) / (1 + j * m) for j in range(len(p) + 1)]
    best = max(brute)
    # the optimum up to rounding, and no shorter draft is as fast (ties go to the shorter one)
    assert brute[curve.knee] >= best * (1 - 1e-9)
    assert all(t < best * (1 - 1e-13) for t in brute[: curve.knee])
    assert curve.speedup == pytest.approx(brute)
    # the simpler "the position pays for itself" rule never recommends a shorter draft
    assert curve.last_paying >= curve.knee


def test_speedup_curve_matches_the_rate_form_at_full_length() -> None:
    # T(K) = (1 + K r) / (1 + K m): the break-even rule r > m is T(K) > 1
    p = [0.9, 0.7, 0.5]
    r = sum(p) / 3
    assert speedup_curve(p, 0.3)[3] == pytest.approx(CostModel(0.3).speedup(r, 3))


def test_the_window_follows_the_present() -> None:
    events = simulate("chat", ("acceptance_shift:route=chat,at=1h,factor=0.6",), hours=3.0)
    start = events[0].ts
    curve = PositionCurve(window=1800)
    before = None
    for e in events:
        curve.update(e)
        if before is None and e.ts - start >= 3600:
            before = (curve.survival[0], curve.knee)
    assert before is not None
    assert curve.survival[0] < before[0] - 0.1
    assert curve.knee < before[1]


def test_skips_what_it_cannot_use() -> None:
    events = simulate("chat")[:50]
    curve = PositionCurve(min_steps=1)
    curve.update(replace(events[0], accepted_per_position=None))
    assert curve.missing == 1 and curve.survival is None and curve.knee is None
    feed(curve, events[1:])
    curve.update(replace(events[0], accepted_per_position=(1, 1, 0), num_speculative_tokens=3))
    assert curve.mismatched == 1 and curve.num_speculative_tokens == 4


@st.composite
def requests(draw):
    """(ts, per-position counts, verify_steps or None) for K = 3, some late, some very late."""
    out, ts = [], 1000.0
    for _ in range(draw(st.integers(1, 700))):
        ts += draw(st.sampled_from([0.0, 0.5, 3.0, 20.0, 100.0]))
        late = draw(st.sampled_from([0.0, 0.0, 0.0, 90.0, 5000.0]))
        per_pos = tuple(sorted(draw(st.lists(st.integers(0, 9), min_size=3, max_size=3)),
                               reverse=True))  # fmt: skip
        out.append((ts - late, per_pos, draw(st.sampled_from([None, 3, 9]))))
    return out


@settings(max_examples=40)
@given(requests())
def test_window_sums_match_brute_force(reqs) -> None:
    # counts wait per bucket to be summed in bulk: whenever they are, the sums are the window's
    curve = PositionCurve(window=300, min_steps=1)
    head, kept = None, []
    for n, (ts, per_pos, steps) in enumerate(reqs):
        drafted = 3 * (steps or 4)
        event = replace(EVENT, ts=ts, accepted_per_position=per_pos, verify_steps=steps,
                        drafted_tokens=drafted)  # fmt: skip
        curve.update(event)
        if n % 97 == 0:
            assert curve.survival is not None  # a read sums what waits: nothing may change
        i = math.floor(ts / 60)
        head = i if head is None else max(head, i)
        if i > head - 5:
            kept.append((i, per_pos, steps if steps is not None else drafted / 3, drafted))
    window = [k for k in kept if k[0] > head - 5]
    totals = curve.snapshot()["ring"]["totals"]
    assert totals[1:] == [
        len(window), sum(k[3] for k in window), sum(sum(k[1]) for k in window),
        *(sum(k[1][j] for k in window) for j in range(3)),
    ]  # fmt: skip
    assert totals[0] == pytest.approx(sum(k[2] for k in window))


def test_a_list_changed_after_observe_is_counted_as_it_was() -> None:
    curve = PositionCurve(min_steps=1)
    counts = [5, 3, 1]
    curve.observe(counts, 10, 0.0)
    counts[0] = 500
    assert curve.survival == [0.5, 0.3, 0.1]


def test_insufficient_steps_give_no_knee() -> None:
    curve = PositionCurve(min_steps=200)
    curve.observe([50, 40, 30, 20], 100, 0.0)
    assert curve.survival is not None and curve.knee is None and curve.last_paying is None


def test_snapshot_restore_mid_stream_gives_identical_outputs() -> None:
    events = simulate("chat", ("acceptance_shift:route=chat,at=1h,factor=0.6",), hours=3.0)
    cut = len(events) // 2
    a = feed(PositionCurve(CostModel(0.1, 0.02), window=1200), events[:cut])
    b = PositionCurve.restore(json.loads(json.dumps(a.snapshot())))
    assert b.snapshot() == a.snapshot()
    for e in events[cut:]:
        a.update(e)
        b.update(e)
        assert a.knee == b.knee
        assert json.dumps(a.evidence()) == json.dumps(b.evidence())


def test_bad_versions_raise() -> None:
    snap = PositionCurve().snapshot()
    with pytest.raises(StateVersionError):
        PositionCurve.restore({**snap, "version": 0})
    with pytest.raises(StateVersionError):
        PositionCurve.restore({**snap, "kind": "breakeven"})
