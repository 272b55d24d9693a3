"""Before and after: a new setup is judged against the one it replaced (issue 15).

Traffic is synthetic and seeded: requests with prompt-to-prompt spread (Beta per request)
and chained acceptance per step (position i is accepted only if every earlier one was), so
a longer draft lowers the raw rate with no drift while the shared positions keep theirs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from monitor.alert_record import AlertRecord
from monitor.config import DetectionConfig
from monitor.detect.engine import Detection
from monitor.detect.segments import Segment
from monitor.telemetry.event import Event

T0 = 1_795_000_000.0
RATE = 2.0  # requests per second
OLD = {"target_revision": "t1", "draft_revision": "d1", "k": 4}


def requests(rng: np.random.Generator, start: float, seconds: float, *, p: float,
             k: int = 4, target_revision: str = "t1", draft_revision: str = "d1",
             route: str = "chat", tput: float = 60.0, prefix: str = "r") -> Iterator[Event]:
    """``seconds`` of one setup's requests from ``start``: per-step acceptance ``p`` (spread
    by a Beta of concentration 40 per request), decode at ``tput`` tokens/s."""
    n = int(seconds * RATE)
    for i in range(n):
        pi = rng.beta(40 * p, 40 * (1 - p))
        steps = int(rng.integers(20, 60))
        ok = rng.random((steps, k)) < pi
        chain = np.cumprod(ok, axis=1)
        per = chain.sum(axis=0)
        accepted = int(per.sum())
        out = accepted + steps
        decode_ms = out / (tput * rng.uniform(0.9, 1.1)) * 1000.0
        yield Event(
            request_id=f"{prefix}-{start}-{i}", ts=start + i / RATE, route=route,
            status="ok", target_model="m70b", target_revision=target_revision,
            target_tokenizer="llama3", output_tokens=out, e2e_ms=100.0 + decode_ms,
            ttft_ms=100.0, draft_model="m1b", draft_revision=draft_revision,
            draft_tokenizer="llama3", has_spec=True, num_speculative_tokens=k,
            drafted_tokens=steps * k, accepted_tokens=accepted, verify_steps=steps,
            accepted_per_position=tuple(int(x) for x in per), batch_size=8,
        )


def run(*phases: Iterator[Event], config: DetectionConfig | None = None
        ) -> tuple[Detection, list[AlertRecord]]:
    det = Detection(config or DetectionConfig(), clock="event")
    det.load({})
    alerts: list[AlertRecord] = []
    for phase in phases:
        batch: list[Event] = []
        for e in phase:
            batch.append(e)
            if len(batch) == 50:
                det.observe(0, batch)
                batch = []
        det.observe(0, batch)
        alerts += det.drain()
    return det, alerts


def drops(alerts: list[AlertRecord], state: str = "firing") -> list[AlertRecord]:
    return [a for a in alerts if a.rule == "acceptance_drop" and a.state == state]


def comparison_of(det: Detection, **labels: str) -> Segment:
    [seg] = [s for s in det.view().segments.values()
             if all(s.labels[k] == v for k, v in labels.items())]
    return seg


HOUR = 3600.0


def test_a_target_fine_tune_that_lowers_acceptance_pages_naming_both_setups() -> None:
    rng = np.random.default_rng(1)
    det, alerts = run(requests(rng, T0, 2 * HOUR, p=0.75),
                      requests(rng, T0 + 2 * HOUR, HOUR, p=0.75 * 0.85,
                               target_revision="t2"))
    [drop] = drops(alerts)
    assert drop.labels["target_revision"] == "t2" and drop.severity == "warning"
    prev = drop.details["previous"]
    assert prev["setup"]["target_revision"] == "t1" and prev["kind"] == "draft_drift"
    assert "target t1 -> t2, draft d1 unchanged (draft drift)" in drop.summary
    assert drop.summary.startswith(f"chat: acceptance {prev['rate']:.2f} -> ")
    # decided within minutes of the change, from the new setup's first requests
    assert (drop.at.timestamp() - (T0 + 2 * HOUR)) < 15 * 60
    [change] = det.drain_changes()
    assert change.kind == "draft_drift" and change.live["state"] == "worse"
    assert change.changed == {"target_revision": ["t1", "t2"]}
    assert change.at == T0 + 2 * HOUR


def test_a_fine_tune_that_keeps_acceptance_is_judged_the_same_and_pages_no_one() -> None:
    rng = np.random.default_rng(2)
    cfg = DetectionConfig(change_window=1800.0)
    det, alerts = run(requests(rng, T0, 2 * HOUR, p=0.75),
                      requests(rng, T0 + 2 * HOUR, HOUR, p=0.75, target_revision="t2"),
                      config=cfg)
    assert not drops(alerts)
    [change] = det.drain_changes()
    assert change.live["state"] == "same" and change.live["basis"] == "rate"
    assert change.live["error_rate"] == change.live["previous_error_rate"] == 0.0
    low, high = change.live["interval"]
    assert low < 0 < high
    seg = comparison_of(det, target_revision="t2")
    assert seg.versus is not None and not seg.versus.active  # released after the window


def test_a_longer_draft_is_compared_at_the_positions_both_share() -> None:
    rng = np.random.default_rng(3)
    det, alerts = run(requests(rng, T0, 2 * HOUR, p=0.75, k=3),
                      requests(rng, T0 + 2 * HOUR, HOUR, p=0.75, k=5))
    # the raw rate falls a lot (positions 4 and 5 are rarely reached), yet nothing drifted
    assert not drops(alerts)
    [change] = det.drain_changes()
    assert change.kind == "draft_length" and change.live["basis"] == "shared_positions"
    assert change.live["state"] in ("comparing", "same")
    assert abs(change.live["current_rate"] / change.live["previous_rate"] - 1) < 0.03


def test_a_longer_draft_that_also_drifts_is_caught_at_the_shared_positions() -> None:
    rng = np.random.default_rng(4)
    _, alerts = run(requests(rng, T0, 2 * HOUR, p=0.75, k=3),
                    requests(rng, T0 + 2 * HOUR, HOUR, p=0.75 * 0.85, k=5,
                             draft_revision="d2"))
    [drop] = drops(alerts)
    assert drop.details["previous"]["basis"] == "shared_positions"


def test_a_better_draft_is_judged_better_without_an_alert() -> None:
    rng = np.random.default_rng(5)
    det, alerts = run(requests(rng, T0, 2 * HOUR, p=0.6),
                      requests(rng, T0 + 2 * HOUR, HOUR, p=0.6 * 1.15, draft_revision="d2"))
    assert not [a for a in alerts if a.rule.startswith("acceptance")]
    [change] = det.drain_changes()
    assert change.kind == "new_draft" and change.live["state"] == "better"


def test_a_shorter_draft_is_not_compared_on_the_raw_rate() -> None:
    rng = np.random.default_rng(6)
    det, alerts = run(requests(rng, T0, 2 * HOUR, p=0.75, k=5),
                      requests(rng, T0 + 2 * HOUR, HOUR, p=0.75, k=3))
    assert not drops(alerts)  # the raw rate rose; nothing compared it with the old one
    [change] = det.drain_changes()
    assert change.live["state"] == "not_compared" and "shortened 5 -> 3" in change.live[
        "reason"]


def interleave(*streams: Iterator[Event]) -> Iterator[Event]:
    merged = sorted((e for s in streams for e in s), key=lambda e: e.ts)
    yield from merged


def test_a_canary_is_one_change_and_a_rollback_is_another() -> None:
    rng = np.random.default_rng(7)
    start = T0 + 2 * HOUR
    det, alerts = run(
        requests(rng, T0, 2 * HOUR, p=0.75),
        # canary: t2 serves beside t1 for half an hour, then alone
        interleave(requests(rng, start, 1800, p=0.75, prefix="a"),
                   requests(rng, start + 0.25, 1800, p=0.75, target_revision="t2",
                            prefix="b")),
        requests(rng, start + 1800, 2 * HOUR, p=0.75, target_revision="t2"),
        # rolled back: t1 again, after the route left it for over an hour
        requests(rng, start + 1800 + 2 * HOUR, 1800, p=0.75, prefix="c"),
    )
    changes = det.drain_changes()
    assert [(c.previous["target_revision"], c.current["target_revision"]) for c in changes] == [
        ("t1", "t2"), ("t2", "t1")]
    assert not drops(alerts)


def test_the_comparison_survives_a_snapshot_mid_way_and_decides_the_same() -> None:
    rng = np.random.default_rng(8)
    before = list(requests(rng, T0, 2 * HOUR, p=0.75))
    after = list(requests(rng, T0 + 2 * HOUR, HOUR, p=0.75 * 0.85, target_revision="t2"))
    whole, alerts = run(iter(before), iter(after))
    cut = 10  # a few requests of the new setup: the comparison is under way
    first, _ = run(iter(before), iter(after[:cut]))
    assert not drops(first.drain()) and first.drain_changes()
    states = {k: v for k, v in first.snapshot().items()}
    second = Detection(DetectionConfig(), clock="event")
    second.load(states)
    second.observe(0, after[cut:])
    resumed = second.drain()
    assert [(a.rule, a.state, a.at) for a in drops(resumed)] == [
        (a.rule, a.state, a.at) for a in drops(alerts)]


def test_an_accepted_baseline_releases_the_comparison_and_resolves_its_alert() -> None:
    rng = np.random.default_rng(9)
    det, alerts = run(requests(rng, T0, 2 * HOUR, p=0.75),
                      requests(rng, T0 + 2 * HOUR, 1800, p=0.6, target_revision="t2"))
    assert drops(alerts)
    assert det.accept_baseline("chat", T0 + 2.5 * HOUR)
    [resolved] = drops(det.drain(), "resolved")
    assert "new baseline accepted" in resolved.summary
    seg = comparison_of(det, target_revision="t2")
    assert seg.versus is not None and not seg.versus.active and not seg.versus.holds


@pytest.mark.parametrize("k_old,k_new", [(0, 4), (4, 0)])
def test_speculation_switched_on_or_off_compares_no_rate(k_old: int, k_new: int) -> None:
    rng = np.random.default_rng(10)

    def phase(start: float, k: int) -> Iterator[Event]:
        for e in requests(rng, start, 2 * HOUR, p=0.7, k=max(k, 1)):
            if k == 0:
                yield Event(request_id=e.request_id, ts=e.ts, route=e.route, status="ok",
                            target_model=e.target_model, target_revision=e.target_revision,
                            target_tokenizer=e.target_tokenizer,
                            output_tokens=e.output_tokens, e2e_ms=e.e2e_ms * 1.5,
                            ttft_ms=e.ttft_ms, batch_size=8)
            else:
                yield e

    det, alerts = run(phase(T0, k_old), phase(T0 + 2 * HOUR, k_new))
    [change] = det.drain_changes()
    assert change.kind == ("speculation_on" if k_old == 0 else "speculation_off")
    assert change.live["state"] == "not_compared"
    assert not drops(alerts)


def test_change_records_share_the_setups_they_name() -> None:
    """t1 -> t2, then t3 (its predecessor t1 again: the most established): both records
    name t1 with one dict, never changed, and each current setup is its segment's one."""
    from monitor.detect.lineage import described

    rng = np.random.default_rng(3)
    det, _ = run(requests(rng, T0, 600, p=0.75),
                 requests(rng, T0 + 600, 600, p=0.75, target_revision="t2"),
                 requests(rng, T0 + 1200, 600, p=0.75, target_revision="t3"))
    first, second = sorted(det.drain_changes(), key=lambda c: c.at)
    assert first.previous["target_revision"] == "t1" and first.previous["route"] == "chat"
    assert first.current["target_revision"] == "t2" and first.current["route"] == "chat"
    assert second.changed == {"target_revision": ["t1", "t3"]}
    assert second.previous is first.previous
    for change, revision in ((first, "t2"), (second, "t3")):
        seg = comparison_of(det, target_revision=revision)
        assert change.current is described(seg)
        assert seg.setup == {k: v for k, v in change.current.items() if k != "route"}
