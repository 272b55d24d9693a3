"""revision_mismatch and tokenizer_mismatch: immediate, deterministic, one alert per pair."""

from __future__ import annotations

import json
from collections import Counter
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.detect.exceptions import StateVersionError
from monitor.detect.metadata import MetadataRules
from monitor.simulate import DEFAULT_ROUTES, DraftModel, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import event_from_obj

ROUTES = {r.name: r for r in DEFAULT_ROUTES}


@cache
def simulate(incidents: tuple[str, ...] = (), routes: tuple = DEFAULT_ROUTES, hours: float = 3.0):
    cfg = scenario_config("quiet", duration_s=hours * 3600, seed=8, rate=5.0, routes=routes)
    return tuple(event_from_obj(d) for d in Simulator(cfg.add_incidents(incidents)).events())


def all_flips(rules: MetadataRules, events) -> list:
    start = events[0].ts
    out = []
    for e in events:
        rules.update(e)
        out.extend((f.at - start, f) for f in rules.flips)
    return out


def test_revision_change_against_the_pinned_revision_fires_once_per_pair() -> None:
    events = simulate(("revision_change:route=creative-writing,at=1h,for=1h",))
    got = all_flips(MetadataRules(), events)
    assert [(f.rule, f.state) for _, f in got] == [
        ("revision_mismatch", "firing"),
        ("revision_mismatch", "resolved"),
    ]
    (t_fire, fire), (t_resolve, resolve) = got
    first_new = next(e for e in events if e.route == "creative-writing"
                     and e.target_revision != "2026-10-28")  # fmt: skip
    assert fire.at == first_new.ts and 3600 <= t_fire < 3660  # immediate: its first event
    last_bad = max(e.ts for e in events if e.route == "creative-writing"
                   and e.target_revision != "2026-10-28")  # fmt: skip
    # resolved by the route's first consistent event once the pair was gone for the grace
    assert last_bad + 300 <= resolve.at < last_bad + 310 and t_resolve < 7200 + 310
    assert fire.labels == resolve.labels
    assert fire.labels["route"] == "creative-writing"
    assert fire.labels["target_revision"] != ROUTES["creative-writing"].target.revision
    assert fire.evidence["reason"] == "pinned_target_revision"
    assert fire.evidence["pinned_target_revision"] == "2026-10-28"
    assert fire.severity == "warning" and resolve.evidence["events"] > 100
    json.dumps(fire.evidence, allow_nan=False)


def test_tokenizer_swap_fires_once_and_is_not_a_revision_mismatch() -> None:
    events = simulate(("tokenizer_swap:route=translation,at=1h,for=30m",))
    got = all_flips(MetadataRules(), events)
    assert [(f.rule, f.state) for _, f in got] == [
        ("tokenizer_mismatch", "firing"),
        ("tokenizer_mismatch", "resolved"),
    ]
    fire = got[0][1]
    assert fire.severity == "critical"
    assert fire.evidence["target_tokenizer"] == "gemma3" != fire.evidence["draft_tokenizer"]


def test_unpinned_draft_target_changed_while_draft_did_not() -> None:
    chat = ROUTES["chat"]
    unpinned = chat.with_(draft=DraftModel(chat.draft.model, chat.draft.revision,
                                           chat.draft.tokenizer))  # fmt: skip
    events = simulate(("revision_change:route=chat,at=1h",), routes=(unpinned,))
    assert all(e.pinned_target_revision is None for e in events)
    got = all_flips(MetadataRules(), events)
    assert [(f.rule, f.state) for _, f in got] == [("revision_mismatch", "firing")]
    fire = got[0][1]
    assert fire.evidence["reason"] == "target_changed"
    assert fire.evidence["previous_target_revision"] == chat.target.revision


def test_quiet_routes_and_ngram_routes_never_fire() -> None:
    events = simulate(("speculation_off:route=summarize,at=1h,for=30m",))
    assert all_flips(MetadataRules(), events) == []


def ev(ts: float, target_rev: str, draft_rev: str = "d1", pinned: str | None = None,
       draft_tok: str = "llama3", route: str = "chat") -> Event:  # fmt: skip
    return Event(f"r{ts}", ts, route, "ok", "llama-70b", target_rev, "llama3", 10, 50.0,
                 draft_model="llama-1b", draft_revision=draft_rev, draft_tokenizer=draft_tok,
                 pinned_target_revision=pinned)  # fmt: skip


def test_rolling_deploy_does_not_flap() -> None:
    rules = MetadataRules(grace=300)
    states = []
    for i in range(600):  # old and new replicas answer in turn for 10 minutes
        rules.update(ev(float(i), "r1" if i % 2 else "r2", pinned="r1"))
        states += [(f.state, f.labels["target_revision"]) for f in rules.flips]
    for i in range(600, 1200):  # the rollout was reverted
        rules.update(ev(float(i), "r1", pinned="r1"))
        states += [(f.state, f.labels["target_revision"]) for f in rules.flips]
    assert states == [("firing", "r2"), ("resolved", "r2")]


def test_pinned_revision_is_authoritative() -> None:
    rules = MetadataRules()
    rules.update(ev(0.0, "r1", pinned="r2"))
    assert [f.state for f in rules.flips] == ["firing"]
    rules.update(ev(400.0, "r2", pinned="r2"))  # target moved to what the draft was made for
    assert [f.state for f in rules.flips] == ["resolved"]
    assert not rules.firing


def test_draft_less_events_count_as_consistent() -> None:
    rules = MetadataRules(grace=60)
    rules.update(ev(0.0, "r1", draft_tok="qwen2"))
    assert rules.firing
    rules.update(Event("x", 100.0, "chat", "ok", "llama-70b", "r1", "llama3", 10, 50.0))
    assert not rules.firing and [f.rule for f in rules.flips] == ["tokenizer_mismatch"]


def test_conditions_are_per_route_and_per_pair() -> None:
    rules = MetadataRules()
    rules.update(ev(0.0, "r1", draft_tok="qwen2", route="a"))
    rules.update(ev(1.0, "r1", draft_tok="qwen2", route="b"))
    rules.update(ev(2.0, "r1", draft_rev="d2", draft_tok="qwen2", route="b"))
    rules.update(ev(3.0, "r1", draft_tok="qwen2", route="a"))
    keys = Counter((c.rule, c.labels["route"], c.labels["draft_revision"])
                   for c in rules.conditions)  # fmt: skip
    assert keys == Counter({("tokenizer_mismatch", "a", "d1"): 1,
                            ("tokenizer_mismatch", "b", "d1"): 1,
                            ("tokenizer_mismatch", "b", "d2"): 1})  # fmt: skip
    assert rules.conditions[0].events == 2
    assert len(rules.evidence()["conditions"]) == 3


def test_memory_is_bounded() -> None:
    rules = MetadataRules(max_pairs=4)
    resolved = 0
    for i in range(20):
        rules.update(ev(float(i), "r1", draft_rev=f"d{i}", draft_tok="qwen2"))
        resolved += sum(f.state == "resolved" for f in rules.flips)
    assert len(rules.conditions) == 4 and resolved == 16
    assert len(rules.snapshot()["first_target"]) <= 4


class NoMemo(MetadataRules):
    """Every event checked from scratch: what the memo of the last event must reproduce."""

    def update(self, event: Event) -> None:
        self._last = None
        super().update(event)


PAIRS = st.tuples(
    st.sampled_from(["a", "b"]),  # route
    st.sampled_from(["r1", "r2"]),  # target revision
    st.sampled_from(["d1", "d2", None]),  # draft revision (None: no draft model)
    st.sampled_from([None, "r1", "r2"]),  # pinned target revision
    st.sampled_from(["llama3", "llama3", "qwen2"]),  # draft tokenizer
    st.sampled_from([0.0, 0.0, 0.0, 50.0, 400.0, -100.0]),  # time step (late events too)
    st.integers(1, 30),  # events in a row
)


@given(st.lists(PAIRS, max_size=40), st.integers(1, 8))
def test_the_memo_of_the_last_event_changes_nothing(runs, max_pairs: int) -> None:
    memo, scratch = MetadataRules(grace=300, max_pairs=max_pairs), NoMemo(300, max_pairs)
    ts = 0.0
    for route, target_rev, draft_rev, pinned, draft_tok, step, repeat in runs:
        for _ in range(repeat):
            ts += step / repeat + 1.0
            if draft_rev is None:
                e = Event("x", ts, route, "ok", "llama-70b", target_rev, "llama3", 1, 1.0)
            else:
                e = ev(ts, target_rev, draft_rev, pinned, draft_tok, route)
            memo.update(e)
            scratch.update(e)
            assert memo.flips == scratch.flips
    assert memo.snapshot() == scratch.snapshot()
    assert memo.conditions == scratch.conditions


def test_a_long_condition_counts_its_events_and_hands_out_copies() -> None:
    rules = MetadataRules()
    for i in range(100):
        rules.update(ev(1000.0 + i - 50 * (i == 99), "r1", draft_tok="qwen2"))  # last one late
    (cond,) = rules.conditions
    assert (cond.events, cond.since, cond.last_seen) == (100, 1000.0, 1098.0)
    cond.events = 0  # a copy: the rules' own record is untouched
    assert rules.conditions[0].events == 100
    assert next(iter(rules.active.values())).events == 100


def test_snapshot_restore_mid_stream_gives_identical_outputs() -> None:
    events = simulate(("revision_change:route=creative-writing,at=1h,for=1h",
                       "tokenizer_swap:route=translation,at=90m,for=20m"))  # fmt: skip
    cut = next(i for i, e in enumerate(events) if e.ts - events[0].ts > 4000)
    a = MetadataRules()
    for e in events[:cut]:
        a.update(e)
    assert a.firing
    b = MetadataRules.restore(json.loads(json.dumps(a.snapshot())))
    assert b.snapshot() == a.snapshot()
    flips = 0
    for e in events[cut:]:
        a.update(e)
        b.update(e)
        assert a.flips == b.flips and a.changed == b.changed
        flips += len(a.flips)
    assert flips == 3  # revision resolves; tokenizer fires and resolves
    assert a.snapshot() == b.snapshot()


def test_bad_versions_raise() -> None:
    snap = MetadataRules().snapshot()
    with pytest.raises(StateVersionError):
        MetadataRules.restore({**snap, "version": 2})
    with pytest.raises(StateVersionError):
        MetadataRules.restore({**snap, "kind": "throughput"})
