"""memory_contention, telemetry_stale and speculation_inactive on simulated streams."""

from __future__ import annotations

import json
import random
from functools import cache

import pytest

from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.exceptions import StateVersionError
from monitor.detect.rules import SEVERITY, restore
from monitor.simulate import DEFAULT_ROUTES, Simulator, scenario_config
from monitor.telemetry.event import Event
from monitor.telemetry.parse import event_from_obj

ROUTES = {r.name: r for r in DEFAULT_ROUTES}


@cache
def simulate(incidents: tuple[str, ...] = (), names: tuple[str, ...] = (), hours: float = 3.0):
    cfg = scenario_config("quiet", duration_s=hours * 3600, seed=6, rate=10.0)
    if names:
        cfg = cfg.with_(routes=tuple(ROUTES[n] for n in names))
    return tuple(event_from_obj(d) for d in Simulator(cfg.add_incidents(incidents)).events())


def flips(make, events, route: str) -> list[tuple[float, bool]]:
    m = make()
    start = events[0].ts
    out = []
    for e in events:
        if e.route != route:
            continue
        m.update(e)
        if m.changed:
            out.append((e.ts - start, m.firing))
    return out


# -- memory_contention -------------------------------------------------------------------------


def test_contention_fires_on_evictions_and_resolves() -> None:
    events = simulate(("eviction:route=code-assistant,at=1h,for=30m",), ("code-assistant",))
    got = flips(ContentionMonitor, events, "code-assistant")
    assert [s for _, s in got] == [True, False]
    assert 3600 < got[0][0] < 3600 + 300
    assert 5400 < got[1][0] < 5400 + 900


def test_contention_silent_without_evictions() -> None:
    events = simulate(names=("code-assistant", "chat"))
    assert flips(ContentionMonitor, events, "code-assistant") == []
    assert flips(ContentionMonitor, events, "chat") == []


def test_contention_needs_a_minimum_count() -> None:
    m = ContentionMonitor(min_requests=50, min_evicted=3)
    e = Event("r", 0.0, "chat", "ok", "t", "1", "tok", 10, 50.0, draft_model="d")
    for i in range(40):
        m.observe(True, float(i))  # 100 % evicted, but only 40 requests
    assert not m.firing
    m.update(e)  # a 41st..., all still under min_requests
    assert not m.firing and m.share == pytest.approx(40 / 41)


class DecidesOnEveryEvent(ContentionMonitor):
    """Decides after every draft-less request too, not only when the window moved."""

    def update(self, event: Event) -> None:
        if event.draft_model is None:
            self.changed = False
            self._ring.advance(event.ts)
            self._decide()
            return
        self.observe(event.draft_evicted, event.ts)


def test_contention_decides_as_if_on_every_event() -> None:
    rng = random.Random(3)
    fast, slow = ContentionMonitor(min_requests=20), DecidesOnEveryEvent(min_requests=20)
    ts, flips = 0.0, 0
    for i in range(6000):
        ts += rng.choice([0.2, 0.5, 1.0, 2.0, 60.0])
        evicted = rng.random() < (0.3 if (i // 500) % 2 else 0.01)
        draft = None if rng.random() < 0.5 else "d"
        e = Event(f"r{i}", ts, "chat", "ok", "t", "1", "tok", 10, 50.0, draft_model=draft,
                  draft_evicted=evicted)  # fmt: skip
        fast.update(e)
        slow.update(e)
        assert (fast.firing, fast.changed) == (slow.firing, slow.changed)
        flips += fast.changed
    assert flips >= 4


# -- telemetry_stale ---------------------------------------------------------------------------


def test_stale_fires_on_silence_and_resolves_on_the_next_event() -> None:
    events = simulate(("silence:route=chat,at=1h,for=30m",))
    m = StalenessMonitor()
    start = events[0].ts
    got = []
    for e in events:  # replay: "now" is the stream's event time, ticked on every event
        if e.route == "chat":
            m.update(e)
        else:
            m.tick(e.ts)
        if m.changed:
            got.append((e.ts - start, m.firing))
    assert [s for _, s in got] == [True, False]
    assert got[0][0] == pytest.approx(3600 + 600, abs=5)
    assert got[1][0] == pytest.approx(5400, abs=5)


def test_stale_silent_on_quiet_traffic() -> None:
    events = simulate()
    monitors = {name: StalenessMonitor() for name in ROUTES}
    for e in events:
        monitors[e.route].update(e)
        for m in monitors.values():
            m.tick(e.ts)
            assert not m.firing


def test_stale_live_clock_and_late_events() -> None:
    m = StalenessMonitor(silence=60)
    m.tick(1000.0)
    assert not m.firing  # never reported: not stale
    m.update(1000.0)
    m.tick(1061.0)
    assert m.firing and m.changed
    m.tick(900.0)  # the clock never goes back
    assert m.firing and not m.changed
    m.update(990.0)  # a late event is no sign of life now
    assert m.firing and not m.changed
    m.update(1062.0)
    assert not m.firing and m.changed
    assert m.evidence()["silent_for_s"] == 0.0


# -- speculation_inactive ----------------------------------------------------------------------


@pytest.mark.parametrize("route", ["summarize", "chat"])
def test_inactive_fires_when_speculation_goes_off(route: str) -> None:
    events = simulate((f"speculation_off:route={route},at=1h,for=30m",), (route,))
    got = flips(InactivityMonitor, events, route)
    assert [s for _, s in got] == [True, False]
    assert 3600 + 540 <= got[0][0] <= 3600 + 600
    assert got[1][0] == pytest.approx(5400, abs=5)


def test_inactive_silent_on_ngram_no_draft_requests() -> None:
    events = simulate(names=("summarize",), hours=4.0)
    m = InactivityMonitor()
    shares = []
    for e in events:
        m.update(e)
        assert not m.firing
        if m.no_draft_share is not None and m.evidence()["requests"] > 100:
            shares.append(m.no_draft_share)
    # a third of n-gram requests legitimately draft nothing: tracked, never an alert
    assert 0.25 < min(shares) and max(shares) < 0.5


def test_inactive_needs_a_drafting_past_or_a_draft_model() -> None:
    def req(i: int, drafted: int, draft_model: str | None) -> Event:
        return Event(f"r{i}", 10.0 * i, "plain", "ok", "t", "1", "tok", 10, 50.0,
                     draft_model=draft_model, drafted_tokens=drafted)  # fmt: skip

    never = InactivityMonitor()
    for i in range(500):
        never.update(req(i, 0, None))  # a route without speculation at all
    assert not never.firing and never.no_draft_share == 1.0

    broken = InactivityMonitor()
    for i in range(500):
        broken.update(req(i, 0, "draft"))  # its draft never loaded
    assert broken.firing
    assert broken.evidence()["drafted_before"] is False


def test_inactive_partial_share_configuration() -> None:
    m = InactivityMonitor(share=0.9, min_requests=20)
    for i in range(200):
        m.observe(8 if i < 20 else (8 if i % 20 == 0 else 0), True, 10.0 * i)
    assert m.firing  # 95 % no-draft over the last window
    assert m.evidence()["no_draft_share"] >= 0.9


# -- state -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make,incident,route",
    [
        (ContentionMonitor, "eviction:route=code-assistant,at=1h,for=30m", "code-assistant"),
        (InactivityMonitor, "speculation_off:route=chat,at=1h,for=30m", "chat"),
        (StalenessMonitor, "silence:route=chat,at=1h,for=30m", "chat"),
    ],
)
def test_snapshot_restore_mid_stream_gives_identical_outputs(make, incident, route) -> None:
    events = simulate((incident,))
    cut = len(events) // 3
    a = make()
    for e in events[:cut]:
        if e.route == route:
            a.update(e)
        elif isinstance(a, StalenessMonitor):
            a.tick(e.ts)
    b = restore(json.loads(json.dumps(a.snapshot())))
    assert type(b) is make and b.snapshot() == a.snapshot()
    changes = 0
    for e in events[cut:]:
        if e.route != route and not isinstance(a, StalenessMonitor):
            continue
        for m in (a, b):
            if e.route == route:
                m.update(e)
            else:
                m.tick(e.ts)
        assert (a.firing, a.changed, a.evidence()) == (b.firing, b.changed, b.evidence())
        changes += a.changed
    assert changes == 2
    assert a.snapshot() == b.snapshot()
    assert SEVERITY[a.rule] == a.severity


@pytest.mark.parametrize("cls", [ContentionMonitor, InactivityMonitor, StalenessMonitor])
def test_bad_versions_raise(cls) -> None:
    snap = cls().snapshot()
    with pytest.raises(StateVersionError):
        cls.restore({**snap, "version": 99})
    with pytest.raises(StateVersionError):
        cls.restore({**snap, "kind": "other"})


def test_failed_requests_never_make_a_route_look_inactive() -> None:
    # A proxy reports an engine outage as failed requests with a draft and nothing drafted;
    # that is an error spike, not a draft model that stopped drafting.
    def event(i: int, drafted: int, status: str = "ok") -> Event:
        return Event(f"r{i}", 10.0 * i, "chat", status, "t", "1", "tok", 10, 50.0,
                     draft_model="d", has_spec=status == "ok", num_speculative_tokens=4,
                     drafted_tokens=drafted)

    m = InactivityMonitor(window=600, min_requests=20)
    for i in range(30):
        m.update(event(i, drafted=8))
    for i in range(30, 200):
        m.update(event(i, drafted=0, status="error"))
        assert not m.changed and not m.firing
    for i in range(200, 300):  # the same stretch with successful requests does fire
        m.update(event(i, drafted=0))
    assert m.firing
