"""The acceptance detector on seeded, overdispersed request streams.

Streams have the simulator's structure (monitor/simulate/model.py): per-request chain
acceptance alpha ~ Beta, lognormal output lengths, verify steps S = length / tau, and
per-position survivors Binomial(n_{i-1}, alpha) (prefix acceptance), so tokens of a request
are strongly correlated and requests differ.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from monitor.detect.acceptance import (
    AcceptanceDetector,
    OverdispersedCusum,
    make_detector,
    restore_detector,
)
from monitor.detect.acceptance_reference import RequestHistogram
from monitor.detect.exceptions import StateVersionError
from monitor.simulate.acceptance import calibrated_mean, engine_rate


def chain_stream(
    n: int,
    rate: float,
    *,
    seed: int,
    k: int = 4,
    concentration: float = 30.0,
    change_at: int | None = None,
    factor: float = 1.0,
    back_at: int | None = None,
    per_second: float = 1.0,
    length_median: float = 250.0,
) -> tuple[list[int], list[int], list[float]]:
    """(accepted, drafted, ts) of n requests at engine rate ``rate``.

    From request ``change_at`` on the rate is ``rate * factor``; from ``back_at`` on it is
    ``rate`` again. Requests arrive ``per_second`` a second on average (Poisson).
    """
    rng = np.random.default_rng(seed)
    level = np.full(n, rate)
    if change_at is not None:
        level[change_at:back_at] = rate * factor
    means = {r: calibrated_mean(float(r), k, concentration) for r in np.unique(level)}
    mean = np.array([means[r] for r in level])
    alpha = rng.beta(mean * concentration, (1.0 - mean) * concentration)
    length = np.maximum(1, np.rint(length_median * rng.lognormal(0.0, 0.7, n)))
    tau = 1.0 + k * engine_rate(alpha, k)
    steps = np.maximum(1, np.rint(length / tau)).astype(np.int64)
    accepted = np.zeros(n, dtype=np.int64)
    alive = steps
    for _ in range(k):
        alive = rng.binomial(alive, alpha)
        accepted += alive
    ts = np.cumsum(rng.exponential(1.0 / per_second, n))
    return accepted.tolist(), (k * steps).tolist(), ts.tolist()


def feed(det: AcceptanceDetector, stream: tuple[list[int], list[int], list[float]],
         start: int = 0, stop: int | None = None) -> list[tuple[int, str]]:
    """Feed a slice; return (index, "drop"/"rise"/"recovered") of the events."""
    a, d, t = stream
    events = []
    for i in range(start, len(a) if stop is None else stop):
        det.update(a[i], d[i], t[i])
        if det.drift_detected:
            events.append((i, str(det.direction)))
        if det.recovered:
            events.append((i, "recovered"))
    return events


@pytest.mark.parametrize(("factor", "within"), [(0.9, 400), (0.8, 120)])
def test_detects_drops_quickly(factor: float, within: int) -> None:
    stream = chain_stream(30_000, 0.65, seed=1, change_at=25_000, factor=factor)
    det = OverdispersedCusum()
    events = feed(det, stream)
    assert events and events[0][1] == "drop"
    assert 25_000 <= events[0][0] < 25_000 + within
    ev = det.evidence()
    # the change-point estimate lands near the true change, the level near the new one
    assert abs(ev["change_index"] - 25_001) < within
    assert ev["current"] / ev["baseline"] == pytest.approx(factor, abs=0.05)
    assert ev["drafted_tokens"] > 0 and ev["requests_since_change"] > 0


def test_bigger_drops_are_detected_faster() -> None:
    delays = []
    for factor in (0.9, 0.8, 0.6):
        stream = chain_stream(30_000, 0.65, seed=2, change_at=25_000, factor=factor)
        events = feed(OverdispersedCusum(), stream)
        delays.append(events[0][0] - 25_000)
    assert delays == sorted(delays, reverse=True) and delays[-1] < 10


def test_detects_a_rise() -> None:
    stream = chain_stream(30_000, 0.6, seed=3, change_at=25_000, factor=1.15)
    events = feed(OverdispersedCusum(), stream)
    assert events[0][1] == "rise" and 25_000 <= events[0][0] < 25_400
    one_sided = feed(OverdispersedCusum(two_sided=False), stream)
    assert not one_sided


@pytest.mark.parametrize(("rate", "k", "concentration"), [(0.65, 4, 30.0), (0.35, 3, 20.0)])
def test_silent_on_long_stable_overdispersed_streams(
    rate: float, k: int, concentration: float
) -> None:
    stream = chain_stream(200_000, rate, k=k, concentration=concentration, seed=4)
    det = OverdispersedCusum()
    assert feed(det, stream) == []
    assert det.phase == "watch" and det.baseline == pytest.approx(rate, rel=0.02)


def test_token_level_cusum_false_alarms_on_the_same_stream() -> None:
    """The coin-flip model trusts every token: on overdispersed traffic it fires constantly."""
    stream = chain_stream(40_000, 0.35, k=3, concentration=20.0, seed=4)
    assert feed(OverdispersedCusum(), stream) == []
    token_level = feed(OverdispersedCusum(overdispersion=False), stream)
    assert sum(1 for _, e in token_level if e != "recovered") >= 20


def test_false_alarm_rate_is_calibrated_at_a_short_arl() -> None:
    """At a target of one false alarm per 5,000 requests the detector stays at or below it."""
    stream = chain_stream(150_000, 0.65, seed=5)
    det = OverdispersedCusum(arl_requests=5_000)
    watched = alarms = 0
    a, d, _ = stream
    for i in range(len(a)):
        watched += det.phase == "watch"
        det.update(a[i], d[i])
        alarms += det.drift_detected
    assert watched / 5_000 >= alarms >= 1  # some alarms (it is not dead), but not too many


def test_recovery_resolves_after_the_level_returns() -> None:
    stream = chain_stream(40_000, 0.6, seed=6, change_at=25_000, factor=0.8, back_at=27_000)
    det = OverdispersedCusum()
    events = feed(det, stream)
    kinds = [e for _, e in events]
    assert kinds[:2] == ["drop", "recovered"]
    fired, back = events[0][0], events[1][0]
    assert fired < 25_200 and 27_000 < back < 30_000
    assert det.direction is None and det.phase == "watch"


def test_changed_state_holds_until_recovery_or_reset() -> None:
    stream = chain_stream(32_000, 0.6, seed=7, change_at=25_000, factor=0.8)
    det = OverdispersedCusum()
    events = feed(det, stream)
    assert [e for _, e in events] == ["drop"]
    assert det.direction == "drop" and det.current < det.baseline
    det.reset_baseline()
    assert det.phase == "warmup" and det.direction is None and det.baseline is None
    assert feed(det, stream, 25_000) == []  # a fresh warm-up on the new level: no alarm
    assert det.baseline == pytest.approx(0.48, rel=0.03)


def test_ignores_requests_that_drafted_nothing() -> None:
    stream = chain_stream(3_000, 0.6, seed=8)
    det = OverdispersedCusum()
    feed(det, stream)
    before = json.dumps(det.snapshot())
    det.update(0, 0, 1e9)
    assert json.dumps(det.snapshot()) == before
    with pytest.raises(ValueError):
        det.update(5, 3, 1.0)
    with pytest.raises(ValueError):
        OverdispersedCusum().update(1, 3)  # no ts and no arl_requests: no rate


def test_thresholds_follow_the_false_alarm_target() -> None:
    stream = chain_stream(5_000, 0.6, seed=9)
    loose, strict = OverdispersedCusum(arl_requests=1e4), OverdispersedCusum(arl_requests=1e8)
    feed(loose, stream)
    feed(strict, stream)
    t_loose, t_strict = loose.evidence()["thresholds"], strict.evidence()["thresholds"]
    assert set(t_loose) == {f"{s}_{e:g}" for s in ("drop", "rise") for e in loose.effects}
    assert all(t_strict[k] > t_loose[k] for k in t_loose)
    # ts gives the rate: 30 days of one request a second
    det = OverdispersedCusum()
    feed(det, stream)
    assert det.evidence()["arl_requests"] == pytest.approx(30 * 86400, rel=0.05)


def _outputs(det: AcceptanceDetector) -> tuple[Any, ...]:
    return (det.drift_detected, det.recovered, det.direction, det.baseline, det.current,
            det.statistic, det.threshold)


@pytest.mark.parametrize(
    ("kind", "params"),
    [
        ("cusum", {}),
        ("adwin", {"max_replay": 1_000}),
        ("page_hinkley", {"threshold": 3.0, "max_replay": 1_000}),
    ],
)
@pytest.mark.parametrize("cut", [1_000, 24_000, 25_100])  # warm-up, watch, changed
def test_snapshot_restore_mid_stream_gives_identical_outputs(
    kind: str, params: dict[str, Any], cut: int
) -> None:
    stream = chain_stream(30_000, 0.6, seed=10, change_at=25_000, factor=0.8, back_at=27_000)
    whole = make_detector(kind, **params)
    first = make_detector(kind, **params)
    feed(whole, stream, 0, cut)
    feed(first, stream, 0, cut)
    data = json.loads(json.dumps(first.snapshot()))
    assert data["kind"] and data["version"] == type(first).VERSION
    second = restore_detector(data)
    assert type(second) is type(whole)
    a, d, t = stream
    for i in range(cut, len(a)):
        whole.update(a[i], d[i], t[i])
        second.update(a[i], d[i], t[i])
        assert _outputs(second) == _outputs(whole), i
    assert json.dumps(second.snapshot()) == json.dumps(whole.snapshot())


@pytest.mark.parametrize("kind", ["cusum", "adwin", "page_hinkley"])
def test_bad_snapshot_versions_raise(kind: str) -> None:
    det = make_detector(kind)
    data = det.snapshot()
    with pytest.raises(StateVersionError, match="version 9"):
        type(det).restore({**data, "version": 9})
    with pytest.raises(StateVersionError):
        type(det).restore({**data, "kind": "something_else"})
    with pytest.raises(StateVersionError):
        restore_detector({**data, "kind": "unknown"})


def test_outputs_depend_only_on_the_inputs() -> None:
    stream = chain_stream(28_000, 0.6, seed=11, change_at=25_000, factor=0.85)
    runs = []
    for _ in range(2):
        det = OverdispersedCusum()
        runs.append((feed(det, stream), json.dumps(det.snapshot())))
    assert runs[0] == runs[1] and runs[0][0]


def test_make_detector_and_protocol() -> None:
    for kind in ("cusum", "adwin", "page_hinkley"):
        assert isinstance(make_detector(kind), AcceptanceDetector)
    with pytest.raises(ValueError, match="unknown detector kind"):
        make_detector("kswin")
    with pytest.raises(ValueError):
        OverdispersedCusum(min_effect=0.0)
    det = OverdispersedCusum(min_effect=0.1)
    assert det.effects == (0.1, 0.2, 0.4, 0.8)
    assert det.threshold is None and det.statistic == 0.0 and det.evidence()["phase"] == "warmup"


def test_current_at_recovery_is_the_recovered_level() -> None:
    stream = chain_stream(40_000, 0.6, seed=6, change_at=25_000, factor=0.8, back_at=27_000)
    det = OverdispersedCusum()
    a, d, t = stream
    for i in range(len(a)):
        det.update(a[i], d[i], t[i])
        if det.recovered:
            assert det.current == pytest.approx(det.baseline, rel=0.1)
            break
    else:
        pytest.fail("never recovered")


class _ScalarHistogram:
    """The request histogram as it was kept before issue 18: a dict of bins, each request
    added as it came (the sums :class:`RequestHistogram` must reproduce bit for bit)."""

    def __init__(self, rho: float) -> None:
        self.rho, self.n, self.bins = rho, 0, {}

    def add(self, accepted: int, drafted: int) -> None:
        w = 1.0 / (1.0 + (drafted - 1) * self.rho)
        wd = w * drafted
        key = int(math.log(wd) / math.log(1.08)) * 128 + int(accepted * 100 // drafted)
        b = self.bins.setdefault(key, [0.0, 0.0, 0.0])
        b[0] += 1.0
        b[1] += w * accepted
        b[2] += wd
        self.n += 1

    def merge(self, other: _ScalarHistogram) -> None:
        for key, (n, wa, wd) in other.bins.items():
            b = self.bins.setdefault(key, [0.0, 0.0, 0.0])
            b[0] += n
            b[1] += wa
            b[2] += wd
        self.n += other.n

    def to_json(self) -> dict[str, Any]:
        return {"rho": self.rho, "n": self.n,
                "bins": [[k, *self.bins[k]] for k in sorted(self.bins)]}


@pytest.mark.parametrize("seed", range(6))
def test_request_histogram_sums_are_the_scalar_ones_however_batched(seed: int) -> None:
    """Queued and binned a batch at a time (np.add.at), the bins hold the same floats as
    requests added one by one; reads and merges may come anywhere."""
    rng = np.random.default_rng(seed)
    rho = float(rng.uniform(0.0, 0.3))
    fast, slow = RequestHistogram(rho), _ScalarHistogram(rho)
    chunk, chunk_slow = RequestHistogram(rho), _ScalarHistogram(rho)
    for _ in range(40):
        size = int(rng.integers(1, 300))
        d = rng.integers(1, 2000, size).tolist()
        a = [int(rng.integers(0, x + 1)) for x in d]
        if rng.random() < 0.5:
            chunk.add_many(a, d)
        else:
            for ai, di in zip(a, d, strict=True):
                chunk.add(ai, di)
        for ai, di in zip(a, d, strict=True):
            chunk_slow.add(ai, di)
        if rng.random() < 0.3:
            chunk.arrays()  # a read bins what is queued
        if rng.random() < 0.4:
            fast.merge(chunk)
            slow.merge(chunk_slow)
            chunk, chunk_slow = RequestHistogram(rho), _ScalarHistogram(rho)
    for hist, ref in ((fast, slow), (chunk, chunk_slow)):
        assert json.dumps(hist.to_json()) == json.dumps(ref.to_json())
        assert len(hist) == len(ref.bins)
    restored = RequestHistogram.from_json(json.loads(json.dumps(fast.to_json())))
    assert restored.to_json() == fast.to_json()


def test_warm_up_taken_a_run_at_a_time_skips_and_refuses_as_update_does() -> None:
    """update_many takes the warm-up in runs: requests that drafted nothing are skipped and
    a bad one is refused where update() would, with the requests before it counted."""
    rng = np.random.default_rng(11)
    drafted = [0 if i % 37 == 5 else int(rng.integers(1, 300)) for i in range(900)]
    accepted = [int(rng.integers(0, d + 1)) for d in drafted]
    ts = [1.8e9 + 0.1 * i for i in range(900)]
    params = {"warmup_requests": 300, "warmup_tokens": 0, "arl_requests": 1e4}
    one, many = OverdispersedCusum(**params), OverdispersedCusum(**params)
    for a, d, t in zip(accepted, drafted, ts, strict=True):
        one.update(a, d, t)
    done = 0
    while done < len(drafted):
        done += many.update_many(accepted[done:], drafted[done:], ts[done:])
    assert json.dumps(many.snapshot()) == json.dumps(one.snapshot())
    bad = OverdispersedCusum(**params)
    with pytest.raises(ValueError, match="accepted <= drafted"):
        bad.update_many([*accepted[:100], 7], [*drafted[:100], 3], ts[:101])
    assert bad.evidence()["requests"] == sum(d > 0 for d in drafted[:100])


WATCH_FIELDS = ("_base", "_newer", "_ref", "_newer_hist", "_side", "_delta", "_p1", "_ca",
                "_cb", "_h", "_cap", "_theta", "_s", "_ex")


def test_warming_detectors_share_their_watch_fields_until_armed() -> None:
    """Before its baseline a detector holds the watch phase's fields as shared placeholders
    (most of a large fleet's segments are warming up); arming gives each its own, and the
    placeholders come out of every run as they went in."""
    from monitor.detect.acceptance import _EMPTY_HIST, _ZEROS

    warming = [OverdispersedCusum(warmup_requests=100, warmup_tokens=0) for _ in range(2)]
    stream = chain_stream(400, 0.6, seed=5)
    for det in warming:
        feed(det, stream, 0, 50)
        assert det.phase == "warmup"
    for name in WATCH_FIELDS:
        assert getattr(warming[0], name) is getattr(warming[1], name), name
    for det in warming:
        feed(det, stream, 50)
        assert det.phase == "watch"
    for name in WATCH_FIELDS:
        mine, theirs = getattr(warming[0], name), getattr(warming[1], name)
        assert mine is not theirs and mine is not _ZEROS and mine is not _EMPTY_HIST, name
    assert _ZEROS == (0.0,) * 8
    assert _EMPTY_HIST.n == 0 and _EMPTY_HIST.to_json() == RequestHistogram(0.0).to_json()
    with pytest.raises(TypeError, match="takes no requests"):
        _EMPTY_HIST.add(1, 2)


def test_a_restored_watch_left_without_its_chunk_owns_it_again() -> None:
    """A watching detector whose newest chunk is empty (rho 0: its histogram equals a fresh
    one) stores neither; restored, it takes its own and goes on as the uninterrupted one,
    and a detector carried from it owns its chunk too."""
    from monitor.detect.acceptance import _EMPTY_HIST, _ZEROS

    det = OverdispersedCusum(warmup_requests=100, warmup_tokens=0, baseline_chunk=20,
                             overdispersion=False)
    stream = chain_stream(3_000, 0.6, seed=6, change_at=2_000, factor=0.8)
    a, d, t = stream
    i = 0
    while not (det.phase == "watch" and det._newer[0] == 0.0 and i > 200):
        det.update(a[i], d[i], t[i])
        i += 1
    snap = json.loads(json.dumps(det.snapshot()))
    assert "newer" not in snap["state"] and "newer_hist" not in snap["state"]
    twin = OverdispersedCusum.restore(snap)
    assert twin._newer is not _ZEROS and twin._newer_hist is not _EMPTY_HIST
    carried = twin.carried()
    assert carried is not None and carried._newer is not _ZEROS
    for j in range(i, len(a)):
        det.update(a[j], d[j], t[j])
        twin.update(a[j], d[j], t[j])
        assert _outputs(twin) == _outputs(det), j
    assert json.dumps(twin.snapshot()) == json.dumps(det.snapshot())


def test_warm_up_counts_past_int32_widen_the_arrays_and_change_no_number() -> None:
    """Warm-up requests are kept as int32 until a count needs int64: one past 2**31 - 1 (the
    detector takes any int, though the parser caps counts at 10**9) arms the same detector
    whether it came one request at a time, as a run, or through a restore."""
    big = 2**31 + 5
    accepted = [big // 2 + k for k in range(120)]
    drafted = [big] * 120
    ts = [float(k) for k in range(120)]
    one = OverdispersedCusum()
    for k in range(60):
        one.update(accepted[k], drafted[k], ts[k])
    restored = OverdispersedCusum.restore(json.loads(json.dumps(one.snapshot())))
    many = OverdispersedCusum()
    many.update_many(accepted[:60], drafted[:60], ts[:60])
    assert one.snapshot() == many.snapshot() == restored.snapshot()
    for det in (one, restored, many):
        det.update_many(accepted[60:], drafted[60:], ts[60:])
    assert one.snapshot() == many.snapshot() == restored.snapshot()
    state = one.snapshot()["state"]
    assert state["warm_a"] == accepted and state["warm_d"] == drafted  # still warming up
