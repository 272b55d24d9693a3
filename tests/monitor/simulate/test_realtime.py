from __future__ import annotations

import threading
import time

from monitor.simulate import SimulationConfig, Simulator
from tests.monitor.simulate.shape import check_event, ts_of


def test_paced_at_rate_times_speed_with_wall_clock_ts() -> None:
    sim = Simulator(SimulationConfig(rate=50, seed=1, diurnal=0.0, bursts_per_hour=0.0))
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    started = time.time()
    received = []
    for e in sim.realtime(speed=4.0, stop=stop):
        received.append((time.time(), e))
    elapsed = time.time() - started
    assert 0.95 < elapsed < 3.0  # stops promptly once stop is set
    assert 100 < len(received) < 350  # 50 events/s x 4 for one second
    for now, e in received:
        check_event(e)
        assert abs(ts_of(e) - now) < 1.0  # ts is the wall clock when it was yielded
    # a later run gets fresh request ids (the start is part of them)
    stop2 = threading.Event()
    stream = sim.realtime(speed=4.0, stop=stop2)
    first = next(stream)
    stop2.set()
    assert first["request_id"] not in {e["request_id"] for _, e in received}


def test_stop_already_set_yields_nothing_more() -> None:
    stop = threading.Event()
    stop.set()
    sim = Simulator(SimulationConfig(rate=5, seed=1))
    started = time.monotonic()
    assert list(sim.realtime(stop=stop)) == []
    assert time.monotonic() - started < 1.0


def test_incidents_follow_simulated_time() -> None:
    config = SimulationConfig(rate=40, seed=2, incidents=("silence:route=chat,at=60s",))
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    started = time.time()
    events = list(Simulator(config).realtime(speed=120.0, stop=stop))
    # at speed 120 the silence starts 0.5 s of wall time in
    cut = started + 60 / 120
    chat = [ts_of(e) for e in events if e["route"] == "chat"]
    assert chat and max(chat) < cut + 0.05
    assert any(ts_of(e) > cut + 0.2 for e in events)
