"""Rule ``output_mismatch``: greedy requests of one prompt, with and without speculation, must
answer the same; the detector alone, through the engine, and across a restart."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest

from monitor.aggregate.guard import OVERFLOW
from monitor.config import DetectionConfig
from monitor.detect.engine import Detection
from monitor.detect.lossless import LOSSLESS_PREFIX, LosslessMonitor
from monitor.detect.rules import KINDS, RULES
from monitor.detect.segments import key_id
from monitor.rules import CATALOGUE
from monitor.telemetry.event import Event


def event(i: int, prompt: str | None, out: str | None, *, spec: bool = True,
          ts: float | None = None, temperature: float | None = 0.0, status: str = "ok",
          route: str = "code", target_rev: str = "r2", draft_rev: str = "d1",
          target: str = "m") -> Event:
    return Event(f"r-{i}", float(i) if ts is None else ts, route, status, target, target_rev,
                 "tok", 10, 50.0, draft_model="d" if spec else None,
                 draft_revision=draft_rev if spec else None, has_spec=spec,
                 num_speculative_tokens=4 if spec else 0, drafted_tokens=8 if spec else 0,
                 accepted_tokens=5 if spec else 0, temperature=temperature,
                 prompt_hash=prompt, output_hash=out)


def feed(m: LosslessMonitor, events: list[Event]) -> list[tuple[str, dict[str, str],
                                                               dict[str, Any]]]:
    flips = []
    for e in events:
        m.update(e)
        flips += [(f.state, f.labels, f.evidence) for f in m.flips]
    return flips


# -- the detector ----------------------------------------------------------------------------


def test_a_mismatch_fires_on_the_draft_of_the_speculative_side() -> None:
    m = LosslessMonitor()
    # the speculative side first, the side without speculation second: the pair is the
    # remembered request's (draft d1), not the unspeculated event's (no draft)
    flips = feed(m, [event(1, "p1", "a"), event(2, "p1", "a", spec=False),
                     event(9, "p2", "x", spec=False), event(17, "p2", "y")])
    assert [(s, lab) for s, lab, _ in flips] == [("firing", {
        "route": "code", "target_model": "m", "target_revision": "r2", "draft_model": "d",
        "draft_revision": "d1"})]
    ev = flips[0][2]
    assert (ev["matched_pairs"], ev["mismatches"]) == (2, 1)
    assert (ev["spec_request_id"], ev["no_spec_request_id"]) == ("r-17", "r-9")
    assert ev["route"] == "code" and ev["pair"]["draft_revision"] == "d1"
    assert m.firing and m.conditions[0].since == 17.0

    # reversed: the unspeculated request is remembered, the speculative one arrives later
    m = LosslessMonitor()
    flips = feed(m, [event(3, "p", "a"), event(4, "p", "b", spec=False)])
    assert flips[0][0] == "firing" and flips[0][1]["draft_model"] == "d"
    assert (flips[0][2]["spec_request_id"], flips[0][2]["no_spec_request_id"]) == ("r-3", "r-4")


def test_the_summary_names_route_pair_counts_and_samples() -> None:
    m = LosslessMonitor()
    stream = [e for i in range(40) for e in (event(2 * i, f"p{i}", "a", spec=False),
                                             event(2 * i + 1, f"p{i}", "a"))]
    stream += [event(100, "q", "x", spec=False), event(101, "q", "y")]
    (state, labels, ev), = feed(m, stream)
    assert CATALOGUE["output_mismatch"].summary(state, labels, ev) == (
        "code: 1 of 41 greedy prompt pairs differ with speculation off "
        "(target m r2, draft d d1); e.g. r-101 vs r-100")
    assert CATALOGUE["output_mismatch"].severity == "critical"
    assert CATALOGUE["output_mismatch"].scope == "pair"


@pytest.mark.parametrize("odd", [
    {"temperature": None},  # not reported: not assumed greedy
    {"temperature": 0.7},
    {"status": "cancelled"},  # a partial output
])
def test_only_finished_greedy_requests_count(odd: dict[str, Any]) -> None:
    m = LosslessMonitor()
    assert feed(m, [event(1, "p", "a", spec=False), event(2, "p", "b", **odd)]) == []
    assert m.evidence()["pairs"] == []


def test_requests_without_hashes_are_ignored() -> None:
    m = LosslessMonitor()
    assert feed(m, [event(1, None, None, spec=False), event(2, "p", None),
                    event(3, None, "a")]) == []
    assert m.prompts == 0


def test_prompts_are_matched_per_target_revision() -> None:
    m = LosslessMonitor()
    assert feed(m, [event(1, "p", "a", spec=False, target_rev="r1"),
                    event(2, "p", "b", target_rev="r2"),
                    event(3, "p", "c", target="other")]) == []


def test_differences_on_one_side_are_counted_not_blamed() -> None:
    m = LosslessMonitor()
    assert feed(m, [event(1, "p", "a", spec=False), event(2, "p", "b", spec=False),
                    event(3, "p", "c"), event(4, "p", "d")]) != []  # c vs the first: a
    m = LosslessMonitor()
    assert feed(m, [event(1, "p", "a", spec=False), event(2, "p", "b", spec=False),
                    event(3, "q", "c"), event(4, "q", "d")]) == []
    assert m.evidence()["same_side_differences"] == 2


def test_resolves_after_enough_agreeing_pairs_in_a_row() -> None:
    m = LosslessMonitor(resolve_pairs=3)
    flips = feed(m, [event(1, "p", "a", spec=False), event(2, "p", "b")])
    assert [s for s, _, _ in flips] == ["firing"]
    flips = feed(m, [event(3, "q", "a", spec=False), event(4, "q", "a"), event(5, "q", "a"),
                     event(6, "p", "b"),  # another mismatch: the count starts again
                     event(7, "q", "a"), event(8, "q", "a")])
    assert flips == []
    flips = feed(m, [event(9, "q", "a")])
    assert [(s, ev["agreeing_in_a_row"], ev["mismatches"]) for s, _, ev in flips] == [
        ("resolved", 3, 2)]
    assert CATALOGUE["output_mismatch"].summary(*flips[0]) == (
        "code: 3 greedy prompt pairs in a row agree with speculation off "
        "(target m r2, draft d d1)")
    # and fires again, with the new mismatch as its sample
    flips = feed(m, [event(10, "p", "z")])
    assert [(s, ev["spec_request_id"], ev["no_spec_request_id"]) for s, _, ev in flips] == [
        ("firing", "r-10", "r-1")]


def test_pairs_are_tallied_apart() -> None:
    m = LosslessMonitor(resolve_pairs=1)
    flips = feed(m, [event(1, "p", "a", spec=False), event(2, "p", "b", draft_rev="d2"),
                     event(3, "p", "a", draft_rev="d1")])
    assert [(s, lab["draft_revision"]) for s, lab, _ in flips] == [("firing", "d2")]
    assert [c.labels["draft_revision"] for c in m.conditions] == ["d2"]


def test_prompts_are_forgotten_after_the_horizon() -> None:
    m = LosslessMonitor(horizon=100.0)
    assert feed(m, [event(1, "p", "a", spec=False), event(50, "q", "a", spec=False),
                    event(102, "p", "b")]) == []
    assert m.evidence()["expired"] == 1
    assert feed(m, [event(103, "q", "b")]) != []


def test_a_late_event_does_not_revive_an_expired_prompt() -> None:
    m = LosslessMonitor(horizon=100.0)
    feed(m, [event(500, "x", "a", spec=False), event(1, "p", "a", ts=10.0, spec=False)])
    assert feed(m, [event(2, "p", "b", ts=20.0)]) == []  # p seen at 10, now is 500


def test_memory_is_bounded_and_evictions_counted() -> None:
    m = LosslessMonitor(max_prompts=50, max_pairs=2)
    flips = feed(m, [event(i, f"p{i}", "a", spec=False) for i in range(200)])
    assert flips == [] and m.prompts == 50 and m.evidence()["evictions"] == 150
    assert feed(m, [event(300, "p10", "b")]) == []  # forgotten
    assert feed(m, [event(301, "p199", "b")]) != []  # remembered
    # model pairs are bounded too: the least recently matched quiet one goes first
    for rev in ("d2", "d3", "d4"):
        feed(m, [event(400, "p198", "a", draft_rev=rev)])
    assert len(m.evidence()["pairs"]) == 2
    assert [c.labels["draft_revision"] for c in m.conditions] == ["d1"]


def test_a_quiet_firing_pair_resolves_after_the_horizon() -> None:
    m = LosslessMonitor(horizon=1000.0)
    feed(m, [event(1, "p", "a", spec=False), event(2, "p", "b")])
    m.tick(500.0)
    assert not m.changed
    m.tick(1002.0)
    assert [(f.state, f.evidence["reason_resolved"]) for f in m.flips] == [
        ("resolved", "no matched pairs")]
    assert not m.firing


def test_registered_for_the_rule() -> None:
    assert RULES["output_mismatch"] is LosslessMonitor and KINDS["lossless"] is LosslessMonitor
    assert LosslessMonitor.severity == "critical"


# -- the contract every detector keeps -------------------------------------------------------


def stream(seed: int, n: int) -> list[Event]:
    """Greedy and sampled traffic over a few prompts: most agree, a faulty draft revision
    differs now and then, some requests fail or are late, some have no hashes."""
    rng = np.random.default_rng(seed)
    out, ts = [], 1_000.0
    for i in range(n):
        ts += float(rng.exponential(3.0))
        spec = bool(rng.random() < 0.6)
        draft_rev = str(rng.choice(["d1", "d1", "d2"]))
        prompt = f"p{int(rng.integers(0, 120))}"
        answer = f"a-{prompt}"
        if spec and draft_rev == "d2" and rng.random() < 0.3:
            answer += "-wrong"
        out.append(event(
            i, None if rng.random() < 0.1 else prompt, answer, spec=spec,
            ts=ts - (30.0 if rng.random() < 0.05 else 0.0),
            temperature=float(rng.choice([0.0, 0.0, 0.0, 0.7])),
            status="ok" if rng.random() > 0.05 else "error",
            target_rev=str(rng.choice(["r1", "r1", "r2"])), draft_rev=draft_rev))
    return out


def outputs(m: LosslessMonitor) -> str:
    return json.dumps([m.snapshot(), m.evidence(), [(f.state, f.labels, f.evidence)
                                                   for f in m.flips]], sort_keys=True)


def make() -> LosslessMonitor:
    return LosslessMonitor(horizon=900.0, max_prompts=60, resolve_pairs=5, max_pairs=3)


def test_declared_params_round_trip() -> None:
    m = make()
    params = json.loads(json.dumps(m.snapshot()["params"]))
    assert list(m.snapshot())[:3] == ["kind", "version", "params"]
    assert LosslessMonitor._from_params(params).snapshot() == m.snapshot()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_restore_continues_identically(seed: int) -> None:
    events = stream(seed, 3000)
    m = make()
    fired = 0
    for e in events[:1500]:
        m.update(e)
        fired += m.changed
    assert fired  # the stream reaches firing and resolving, not just quiet
    snap = orjson.loads(orjson.dumps(m.snapshot()))  # as stored: orjson, no NaN/Infinity
    again = LosslessMonitor.restore(snap)
    assert outputs(again) == outputs(m)
    for i, e in enumerate(events[1500:]):
        m.update(e)
        again.update(e)
        assert again.flips == m.flips
        if i % 100 == 0:  # the whole state now and then: it is large
            assert outputs(again) == outputs(m)
    assert outputs(again) == outputs(m)
    assert m.prompts <= 60 and len(m.evidence()["pairs"]) <= 3


def test_a_fresh_monitor_stores_as_json() -> None:
    snap = LosslessMonitor().snapshot()
    again = LosslessMonitor.restore(json.loads(json.dumps(snap, allow_nan=False)))
    assert again.snapshot() == snap


# -- through the engine ----------------------------------------------------------------------


def config(**kw: Any) -> DetectionConfig:
    return DetectionConfig(lossless_resolve_pairs=2, **kw)


def records(detection: Detection) -> list[tuple[str, str, str, dict[str, str]]]:
    return [(r.rule, r.state, r.summary, r.labels) for r in detection.drain()
            if r.rule == "output_mismatch"]


def test_the_engine_raises_and_resolves_the_alert() -> None:
    det = Detection(config())
    det.observe(0, [event(1, "p", "a", spec=False), event(2, "p", "a"),
                    event(3, "q", "x", spec=False), event(4, "q", "y")])
    got = records(det)
    assert got == [("output_mismatch", "firing",
                    "code: 1 of 2 greedy prompt pairs differ with speculation off "
                    "(target m r2, draft d d1); e.g. r-4 vs r-3",
                    {"route": "code", "target_model": "m", "target_revision": "r2",
                     "draft_model": "d", "draft_revision": "d1"})]
    assert ("output_mismatch", "code", "critical") in list(det.view().pair_conditions())
    det.observe(0, [event(5, "p", "a"), event(6, "p", "a")])
    assert [(rule, state) for rule, state, _, _ in records(det)] == [
        ("output_mismatch", "resolved")]
    assert list(det.view().pair_conditions()) == []


def test_overflowed_pairs_are_left_out() -> None:
    det = Detection(config())
    e = event(2, "p", "b", spec=False)
    e.target_model = e.target_revision = OVERFLOW
    det.observe(0, [event(1, "p", "a"), e])
    assert records(det) == [] and det.view().lossless["code"].prompts == 1


def test_state_is_written_only_when_it_changed() -> None:
    det = Detection(config())
    key = LOSSLESS_PREFIX + key_id(["code"])
    det.observe(0, [event(1, None, None)])
    assert not any(k.startswith(LOSSLESS_PREFIX) for k in det.snapshot())
    det.observe(0, [event(2, "p", "a")])
    assert key in det.snapshot()
    det.observe(0, [event(3, None, None), event(4, "p", "a", temperature=0.5)])
    snap = det.snapshot()
    assert snap and key not in snap


def test_a_restart_raises_the_alerts_of_one_uninterrupted_run() -> None:
    events = stream(4, 2000)
    whole = Detection(config(lossless_max_prompts=80))
    whole.observe(0, events)
    expected = records(whole)
    assert any(state == "firing" for _, state, _, _ in expected)

    first = Detection(config(lossless_max_prompts=80))
    first.observe(0, events[:1000])
    got = records(first)
    stored = orjson.loads(orjson.dumps(dict(first.snapshot())))
    second = Detection(config(lossless_max_prompts=80))
    second.load(stored)
    second.observe(0, events[1000:])
    assert got + records(second) == expected


def test_a_route_of_another_process_is_kept_aside_until_taken_over() -> None:
    det = Detection(config())
    det.observe(3, [event(1, "p", "a", spec=False)])
    stored = det.snapshot()
    peer = Detection(config())
    peer.owned = {0}
    peer.load(stored)
    assert "code" not in peer.view().lossless
    peer.observe(0, [event(2, "p", "b")])  # the route's events arrive here: taken over
    assert [state for _, state, _, _ in records(peer)] == ["firing"]


def test_the_engine_sweep_resolves_a_pair_that_left() -> None:
    det = Detection(config(lossless_horizon=600.0), clock="wall")
    det.observe(0, [event(1, "p", "a", spec=False), event(2, "p", "b")])
    assert [state for _, state, _, _ in records(det)] == ["firing"]
    det.tick(300.0)
    assert records(det) == []
    det.tick(700.0)
    assert [state for _, state, _, _ in records(det)] == ["resolved"]
    assert LOSSLESS_PREFIX + key_id(["code"]) in det.snapshot()


def test_the_view_lists_every_pair_condition_outside_the_firing_maps() -> None:
    det = Detection(config())
    e = event(1, None, None)
    e.draft_tokenizer = "other"  # a tokenizer mismatch: route.metadata's condition
    det.observe(0, [e, event(2, "p", "a", spec=False), event(3, "p", "b")])
    assert sorted(det.view().pair_conditions()) == [
        ("output_mismatch", "code", "critical"), ("tokenizer_mismatch", "code", "critical")]


@pytest.mark.parametrize("lossy", [True, False])
def test_the_simulated_lossy_verifier_fires_on_its_route_only(lossy: bool) -> None:
    """The simulator's ``lossy-verifier`` scenario (shadow requests without speculation; from
    20 to 40 minutes code-assistant's verifier keeps unchecked drafts), and its null twin."""
    from monitor.simulate.scenarios import scenario_config
    from monitor.simulate.simulator import Simulator
    from monitor.telemetry.parse import event_from_obj

    cfg = scenario_config("lossy-verifier", duration_s=3600, rate=3.0, seed=7,
                          start="2026-11-02T00:00:00Z", **({} if lossy else {"incidents": ()}))
    det = Detection(DetectionConfig())
    det.load({})
    det.observe(0, [event_from_obj(o) for o in Simulator(cfg).events()])
    got = [(r.state, r.labels["route"], r.at.minute) for r in det.drain()
           if r.rule == "output_mismatch"]
    pairs = {name: sum(p["matched_pairs"] for p in m.evidence()["pairs"])
             for name, m in det.view().lossless.items()}
    assert all(n > 10 for n in pairs.values()), pairs  # every greedy route had pairs
    if not lossy:
        assert got == []
        return
    (state, route, minute), (state2, route2, minute2) = got
    assert (state, route, state2, route2) == ("firing", "code-assistant",
                                              "resolved", "code-assistant")
    assert 20 <= minute < 40 <= minute2  # during the incident; resolved after it ended


def test_a_shadow_twin_feeds_only_the_losslessness_check() -> None:
    """A shadow request (``tags.shadow``: the proxy's ``--shadow-upstream``) is no request of
    the route's: it makes no segment and no setup change, and it is still one side of a
    matched pair."""
    det = Detection(config())
    det.observe(0, [event(1, "p", "a")])
    segments = set(det.view().segments)
    twin = event(2, "p", "b", spec=False)
    twin.tags = {"shadow": "true"}
    det.observe(0, [twin])
    assert set(det.view().segments) == segments
    assert [(rule, state) for rule, state, _, _ in records(det)] == [
        ("output_mismatch", "firing")]
    assert not [c for c in det.drain_changes() if c.kind == "speculation_off"]
