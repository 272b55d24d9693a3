"""Alert state changes are written with their checkpoint, once each."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from monitor.alert_record import AlertRecord
from monitor.store.checkpoint import Checkpoint, PartitionCommit
from monitor.store.exceptions import FencedError
from monitor.store.store import Store


def record(state: str, minute: int, route: str = "creative <&> 🙂 שלום") -> AlertRecord:
    return AlertRecord(
        "acceptance_drop", state, datetime(2026, 11, 2, 14, minute, tzinfo=UTC), "warning",
        {"route": route, "target_model": "m70b", "target_revision": "r2"},
        f"{route}: acceptance 0.61 -> 0.49", {"baseline": 0.61, "current": 0.49},
    )


def test_alerts_roundtrip_in_order_and_once(store: Store) -> None:
    first = [record("firing", 20), record("firing", 5, route="code")]
    store.commit(Checkpoint("s", partitions=[PartitionCommit(0, 10, None, None)], alerts=first))
    again = [record("firing", 20), record("resolved", 40)]
    store.commit(Checkpoint("s", partitions=[PartitionCommit(0, 20, 10, None)], alerts=again))
    got = store.alerts()
    assert [(a.labels["route"], a.state, a.at.minute) for a in got] == [
        ("code", "firing", 5),
        ("creative <&> 🙂 שלום", "firing", 20),
        ("creative <&> 🙂 שלום", "resolved", 40),
    ]
    assert got[1] == first[0] and got[1].fingerprint == first[0].fingerprint
    assert [a.state for a in store.alerts(route="code")] == ["firing"]
    assert store.alerts(since=datetime(2026, 11, 2, 14, 30, tzinfo=UTC))[0].state == "resolved"


def test_fenced_checkpoint_writes_no_alerts(store: Store) -> None:
    store.commit(Checkpoint("s", partitions=[PartitionCommit(0, 10, None, None)]))
    with pytest.raises(FencedError):
        store.commit(Checkpoint("s", partitions=[PartitionCommit(0, 20, 3, None)],
                                alerts=[record("firing", 1)]))
    assert store.alerts() == []
