"""``setup_changes``: written in the checkpoint transaction, upserted by (source, change_id),
read back as ChangeRecords by ``at``; on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

import pytest

from monitor.change_record import ChangeRecord, change_kind, diff
from monitor.store import Checkpoint, FencedError, PartitionCommit, Store
from tests.monitor.store.helpers import T0, at, checkpoint, event

OLD = {"target_model": "llama-70b", "target_revision": "t1", "target_tokenizer": "llama3",
       "draft_model": "llama-1b", "draft_revision": "d1", "draft_tokenizer": "llama3",
       "method": "draft_model", "num_speculative_tokens": "4", "engine": "vllm-0.9"}


def change(change_id: str, ts: float, route: str = "chat", *, updated: float | None = None,
           live: dict | None = None, **new: str) -> ChangeRecord:
    current = {**OLD, **new}
    changed = diff(OLD, current)
    return ChangeRecord(
        change_id=change_id, route=route, temperature="0.5-1", at=ts,
        kind=change_kind(changed), previous={**OLD, "route": route},
        current={**current, "route": route}, changed=changed, segment=f"seg-{change_id}",
        previous_segment="seg-old", live=live or {"state": "comparing"},
        updated_at=ts if updated is None else updated,
    )


def test_changes_round_trip_in_the_checkpoint(store: Store) -> None:
    a = change("c1", T0 + 600.25, target_revision="t2",
               live={"state": "worse", "previous_rate": 0.58, "current_rate": 0.47,
                     "interval": [-0.25, -0.12], "requests": 812, "basis": "rate"})
    b = change("c2", T0 + 60, "code\x00-\u202e", draft_revision="d2")
    cp = checkpoint([event("r1", T0 + 5)])
    cp.changes = [a, b]
    store.commit(cp)
    assert store.changes() == [b, a]  # by at
    assert store.changes(route="chat") == [a]
    assert store.changes(since=at(T0 + 61)) == [a]
    assert store.changes(until=at(T0 + 600)) == [b]
    assert store.changes(source="nobody") == []
    assert store.changes(route="chat")[0].summary == (
        "chat: target t1 -> t2, draft d1 unchanged (draft drift)")


def test_a_replayed_change_rewrites_its_row_and_newer_live_wins(store: Store) -> None:
    first = change("c1", T0, target_revision="t2", updated=T0 + 60)
    store.commit(Checkpoint(source="replay", changes=[first]))
    store.commit(Checkpoint(source="replay", changes=[first]))  # the same stretch again
    assert store.changes() == [first]

    decided = dataclasses.replace(first, live={"state": "worse", "decided_at": T0 + 300},
                                  updated_at=T0 + 300)
    store.commit(Checkpoint(source="replay", changes=[decided]))
    assert store.changes() == [decided]
    # An older state of the same change (a zombie's, or out of order) leaves the newer one.
    store.commit(Checkpoint(source="replay", changes=[first]))
    assert store.changes() == [decided]

    # Two records of one id in one checkpoint: the last handed out is the one kept.
    later = dataclasses.replace(decided, live={"state": "same"}, updated_at=T0 + 400)
    store.commit(Checkpoint(source="replay", changes=[decided, later]))
    assert store.changes() == [later]


def test_sources_keep_their_own_rows_and_reads_show_a_change_once(store: Store) -> None:
    old = change("c1", T0, target_revision="t2", updated=T0 + 60)
    new = dataclasses.replace(old, live={"state": "worse"}, updated_at=T0 + 600)
    store.commit(Checkpoint(source="daemon", changes=[old]))
    store.commit(Checkpoint(source="replay", changes=[new]))
    assert store.changes(source="daemon") == [old]
    assert store.changes(source="replay") == [new]
    assert store.changes() == [new]


def test_a_fenced_checkpoint_writes_no_change(store: Store) -> None:
    store.commit(checkpoint([event("r1", T0)], next_offset=1))
    cp = Checkpoint(source="telemetry", changes=[change("c1", T0, target_revision="t2")],
                    partitions=[PartitionCommit(0, 5, expected_offset=3, max_event_ts=T0)])
    with pytest.raises(FencedError):
        store.commit(cp)
    assert store.changes() == []
