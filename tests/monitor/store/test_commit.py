"""Checkpoint transactions: rollups, merging, fencing, dedup log, state, concurrency."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from sqlalchemy import func, insert, select, text

from monitor.aggregate.bucket import COUNTERS, BucketStats
from monitor.aggregate.series import series_key
from monitor.store import Checkpoint, FencedError, PartitionCommit, Store
from monitor.store.query import RatioRow
from monitor.store.tables import rollups_table, series_table
from tests.monitor.store.helpers import T0, at, checkpoint, event, merged, rollups_of

COUNTS = ("requests", "errors", "drafted_tokens", "accepted_tokens", "verify_steps")


def _events(n: int = 240, *, start: float = T0, step: float = 61.0, prefix: str = "r") -> list:
    routes = ("code", "chat", "creative")
    return [
        event(
            f"{prefix}{i}",
            start + i * step,
            routes[i % 3],
            drafted=10 + i % 7,
            accepted=(10 + i % 7) // 2,
            e2e_ms=200.0 + 13 * i,
            status="error" if i % 11 == 0 else "ok",
        )
        for i in range(n)
    ]


def _by_key(rows: list[RatioRow]) -> dict[tuple, RatioRow]:
    return {(r.series, r.bucket_start): r for r in rows}


def _table_snapshot(store: Store) -> list[tuple]:
    with store.engine.connect() as conn:
        rollups = conn.execute(select(rollups_table).order_by(*rollups_table.primary_key)).all()
        series = conn.execute(select(series_table).order_by(series_table.c.id)).all()
    return [tuple(r) for r in rollups] + [tuple(s) for s in series]


def test_commit_roundtrip_with_hour_and_day_rollups(store: Store) -> None:
    events = _events()  # four hours from 22:00: two days, five hours
    store.commit(checkpoint(events, next_offset=len(events)))

    minute = store.ratios(granularity="minute")
    assert len(minute) == len(rollups_of(events))
    assert sum(r.requests for r in minute) == len(events)
    for gran, size in (("hour", 3600), ("day", 86400)):
        coarse = store.ratios(granularity=gran)
        expected: dict[tuple, dict[str, int]] = defaultdict(lambda: dict.fromkeys(COUNTS, 0))
        for r in minute:
            start = at(int(r.bucket_start.timestamp()) // size * size)
            for c in COUNTS:
                expected[(r.series, start)][c] += getattr(r, c)
        assert {k: {c: getattr(r, c) for c in COUNTS} for k, r in _by_key(coarse).items()} == (
            expected
        )
    assert {r.bucket_start.date().day for r in store.ratios(granularity="day")} == {2, 3}

    # The stored buckets are exactly what the events make, sketches included.
    direct = rollups_of(events)
    got = store.buckets(granularity="minute")
    assert got == {(k, at(ts)): s for (k, ts), s in direct.items()}
    hour_direct: dict[tuple, list[BucketStats]] = defaultdict(list)
    for (k, ts), s in direct.items():
        hour_direct[(k, at(ts // 3600 * 3600))].append(s)
    assert store.buckets(granularity="hour") == {k: merged(v) for k, v in hour_direct.items()}

    row = minute[0]
    assert row.bucket_start.tzinfo is not None and row.bucket_start.utcoffset().total_seconds() == 0
    assert row.acceptance_rate == row.accepted_tokens / row.drafted_tokens
    assert row.mean_accepted_length == 1 + row.accepted_tokens / row.verify_steps


def test_two_commits_to_one_bucket_merge(store: Store) -> None:
    first = [event(f"a{i}", T0 + i, e2e_ms=100.0 + i) for i in range(30)]
    second = [
        event(f"b{i}", T0 + 30 + i, e2e_ms=900.0 + i, drafted=20, accepted=5) for i in range(20)
    ]
    store.commit(checkpoint(first, next_offset=30))
    store.commit(checkpoint(second, next_offset=50, expected=30))

    want = merged(rollups_of(first + second).values())
    for gran in ("minute", "hour", "day"):
        (got,) = store.buckets(granularity=gran).values()
        assert got == want  # counters added, per-position lists and sketches merged
        assert got.requests == 50
        assert got.e2e_ms.count == 50
        assert got.drafted_tokens == 30 * 10 + 20 * 20


def test_deltas_in_one_checkpoint_fold_into_coarse_buckets(store: Store) -> None:
    events = [event(f"e{i}", T0 + 60 * i) for i in range(150)]  # 22:00 to 00:30
    cp = checkpoint(events, next_offset=150)
    before = {k: BucketStats.from_row(s.to_row()) for k, s in cp.rollups.items()}
    store.commit(cp)
    assert cp.rollups == before  # the caller's deltas are not mutated
    hours = store.ratios(granularity="hour")
    assert [r.requests for r in hours] == [60, 60, 30]
    assert [r.requests for r in store.ratios(granularity="day")] == [120, 30]


def test_stale_offset_is_fenced_and_writes_nothing(store: Store) -> None:
    store.commit(checkpoint(_events(50), next_offset=50, state={"d/x": {"version": 1, "v": 1}}))
    before = _table_snapshot(store)
    parts = store.load_partitions("telemetry", [0])

    zombie = checkpoint(
        [*_events(50, prefix="z"), event("new-series", T0, "never-committed")],
        next_offset=99,
        expected=40,  # somebody else moved the partition to 50
        state={"d/x": {"version": 2, "v": 666}},
    )
    with pytest.raises(FencedError, match="stored next_offset is 50, this consumer expected 40"):
        store.commit(zombie)

    assert _table_snapshot(store) == before
    assert store.load_partitions("telemetry", [0]) == parts
    assert store.load_state("telemetry") == {"d/x": {"version": 1, "v": 1}}
    assert not [r for r in store.ratios(granularity="minute") if r.route == "never-committed"]

    # The rolled-back series id was not cached: the same series commits fine afterwards.
    store.commit(
        checkpoint([event("new-series", T0, "never-committed")], next_offset=51, expected=50)
    )
    (row,) = store.ratios(granularity="minute", route="never-committed")
    assert row.requests == 1


def test_first_commit_fencing(store: Store, migrated_url: str) -> None:
    store.commit(checkpoint([event("a", T0)], partition=3, next_offset=10))
    other = Store(migrated_url)
    try:
        # Another consumer that also believes the partition is new has lost it.
        with pytest.raises(FencedError, match="already has a stored offset"):
            other.commit(checkpoint([event("b", T0)], partition=3, next_offset=7))
        # Expecting an offset where none is stored is fenced as well.
        with pytest.raises(FencedError, match="stored next_offset is absent"):
            other.commit(checkpoint([event("c", T0)], partition=4, next_offset=7, expected=5))
    finally:
        other.close()
    assert store.load_partitions("telemetry", [3])[3].next_offset == 10
    assert sum(r.requests for r in store.ratios(granularity="minute")) == 1


def test_one_fenced_partition_rolls_back_the_others(store: Store) -> None:
    store.commit(
        Checkpoint(
            "telemetry",
            partitions=[PartitionCommit(0, 5, None, None), PartitionCommit(1, 5, None, None)],
        )
    )
    cp = checkpoint([event("x", T0)], partition=0, next_offset=9, expected=5)
    cp.partitions.append(PartitionCommit(1, 9, 4, None))
    with pytest.raises(FencedError):
        store.commit(cp)
    got = store.load_partitions("telemetry", [0, 1])
    assert (got[0].next_offset, got[1].next_offset) == (5, 5)
    assert store.ratios(granularity="minute") == []


def test_load_partitions_offsets_dedup_ids_and_pruning(store: Store) -> None:
    a = [event(f"a{i}", T0 + i) for i in range(5)]
    b = [event(f"b{i}", T0 + 100 + i) for i in range(5)]
    c = [event(f"c{i}", T0 + 200 + i) for i in range(5)]
    store.commit(checkpoint(a, next_offset=5))
    store.commit(checkpoint(b, partition=1, next_offset=105))
    store.commit(checkpoint(b, next_offset=10, expected=5))
    got = store.load_partitions("telemetry", [0, 1, 2])
    assert got[0].next_offset == 10 and got[0].max_event_ts == T0 + 104
    assert got[0].seen == {e.request_id: e.ts for e in a + b}
    assert got[1].seen == {e.request_id: e.ts for e in b}
    assert got[2].next_offset is None and got[2].max_event_ts is None and got[2].seen == {}

    # Rows whose newest id is older than prune_before go; partition 1 is untouched.
    store.commit(checkpoint(c, next_offset=15, expected=10, prune_before=T0 + 50))
    got = store.load_partitions("telemetry", [0, 1])
    assert got[0].seen == {e.request_id: e.ts for e in b + c}
    assert got[1].seen == {e.request_id: e.ts for e in b}

    # No max_event_ts in a checkpoint keeps the stored one; other sources are separate.
    store.commit(Checkpoint("telemetry", partitions=[PartitionCommit(0, 16, 15, None)]))
    assert store.load_partitions("telemetry", [0])[0].max_event_ts == T0 + 204
    assert store.load_partitions("other", [0])[0].next_offset is None


def test_state_snapshots_roundtrip(store: Store) -> None:
    state: dict[str, Any] = {
        "detector/code/1": {"version": 1, "mean": 0.61, "n": [1, 2, 3], "nested": {"a": None}},
        "detector/chat/1": {"version": 3, "text": 'ünï "q" 🚀'},
        "detector_x": {"version": 1},
        "other": {"version": 1, "flag": True},
    }
    store.commit(Checkpoint("telemetry", state=state))
    assert store.load_state("telemetry") == state
    assert store.load_state("telemetry", prefix="detector/") == {
        k: v for k, v in state.items() if k.startswith("detector/")
    }
    # LIKE wildcards and case in the prefix are literal.
    assert store.load_state("telemetry", prefix="detector_") == {"detector_x": {"version": 1}}
    assert store.load_state("telemetry", prefix="DETECTOR") == {}
    assert store.load_state("elsewhere") == {}

    store.commit(Checkpoint("telemetry", state={"other": {"version": 2, "flag": False}}))
    assert store.load_state("telemetry", prefix="oth") == {"other": {"version": 2, "flag": False}}

    with pytest.raises(ValueError, match="version"):
        store.commit(Checkpoint("telemetry", state={"bad": {"v": 1}}))


def _wait_for_lock_wait(store: Store, timeout: float = 10.0) -> None:
    """Until another session of this PostgreSQL database waits on a lock."""
    deadline = time.monotonic() + timeout
    sql = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND wait_event_type = 'Lock'"
    )
    with store.engine.connect() as conn:
        while time.monotonic() < deadline:
            if conn.execute(sql).scalar():
                return
            conn.rollback()
            time.sleep(0.02)
    raise AssertionError("the concurrent checkpoint never waited on the row")


def test_insert_race_on_a_rollup_row_is_retried(
    store: Store, migrated_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store.commit(checkpoint([event("seed", T0)], next_offset=1))
    minute = T0 + 600
    theirs = rollups_of([event("t1", minute), event("t2", minute + 1)])
    (key, _), their_stats = next(iter(theirs.items()))
    sid = store._series_ids[key]

    # Another writer inserted the row and has not committed when our checkpoint reads it.
    rival = Store(migrated_url)
    conn = rival.engine.connect()
    tx = conn.begin()
    conn.execute(
        insert(rollups_table).values(
            granularity="minute", series_id=sid, bucket_start=at(minute), **their_stats.to_row()
        )
    )
    errors: list[BaseException] = []

    def ours() -> None:
        try:
            store.commit(checkpoint([event("o1", minute + 2)], partition=1, next_offset=1))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    caplog.set_level("INFO", logger="monitor.store.store")
    t = threading.Thread(target=ours)
    t.start()
    try:
        if store.engine.dialect.name == "postgresql":
            _wait_for_lock_wait(store)
        else:
            time.sleep(0.3)  # SQLite: blocked at BEGIN IMMEDIATE by the rival's write lock
        tx.commit()
    finally:
        conn.close()
        t.join(30)
        rival.close()
    assert not errors
    got = store.buckets(granularity="minute", since=at(minute), until=at(minute + 60))
    assert got[(key, at(minute))].requests == 3
    if store.engine.dialect.name == "postgresql":
        assert "raced another writer (23505)" in caplog.text


def test_concurrent_commits_to_different_partitions_both_land(
    store: Store, migrated_url: str
) -> None:
    rounds = 8
    stores = [store, Store(migrated_url)]
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def consumer(p: int) -> None:
        s = stores[p]
        expected = None
        try:
            for r in range(rounds):
                # The same series and minutes from both partitions: rows race both ways.
                evs = [event(f"p{p}-r{r}-{i}", T0 + 60 * (i % 5) + p, "shared") for i in range(10)]
                evs.append(event(f"p{p}-r{r}-own", T0 + 60 * r, f"route-{p}"))
                barrier.wait(10)
                s.commit(checkpoint(evs, partition=p, next_offset=r + 1, expected=expected))
                expected = r + 1
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=consumer, args=(p,)) for p in (0, 1)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        stores[1].close()
    assert not errors
    parts = store.load_partitions("telemetry", [0, 1])
    assert [parts[p].next_offset for p in (0, 1)] == [rounds, rounds]
    assert len(parts[0].seen) == len(parts[1].seen) == rounds * 11
    totals = defaultdict(int)
    for r in store.ratios(granularity="minute"):
        totals[r.route] += r.requests
    assert totals == {"shared": 2 * rounds * 10, "route-0": rounds, "route-1": rounds}
    for gran in ("hour", "day"):
        assert sum(r.requests for r in store.ratios(granularity=gran)) == 2 * rounds * 11
    with store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(series_table)).scalar() == 3


def test_counter_columns_match_bucket_stats() -> None:
    assert set(COUNTERS) <= set(rollups_table.c.keys())
    assert series_key(event("x", T0)).route == "code"


class _Snapshot(dict):  # a dict that can be watched for its end (weakref.finalize)
    pass


def test_deferred_state_is_built_and_written_a_chunk_at_a_time(store: Store) -> None:
    from weakref import finalize

    from monitor.detect.deferred import DeferredStates
    from monitor.store.writer import STATE_CHUNK

    live = {"now": 0, "most": 0, "built": 0}

    def gone() -> None:
        live["now"] -= 1

    def builder(i: int) -> Any:
        def build() -> _Snapshot:
            snap = _Snapshot(kind="segment", version=1, n=i)
            live["now"] += 1
            live["built"] += 1
            live["most"] = max(live["most"], live["now"])
            finalize(snap, gone)
            return snap
        return build

    n = 2 * STATE_CHUNK + 37
    state = DeferredStates()
    for i in range(n):
        state.defer(f"detect/segment/s{i:05d}", builder(i))
    state["detect/engine"] = {"kind": "engine", "version": 1, "max_ts": None}
    cp = checkpoint(_events(3), next_offset=3)
    cp.state = state
    store.commit(cp)

    stored = store.load_state("telemetry")
    assert len(stored) == n + 1
    assert all(stored[f"detect/segment/s{i:05d}"]["n"] == i for i in range(n))
    # every snapshot built once, and never more than a chunk of them alive at once
    assert live["built"] == n
    assert live["most"] <= STATE_CHUNK < n


def test_a_snapshot_without_a_version_writes_nothing(store: Store) -> None:
    from monitor.detect.deferred import DeferredStates

    state = DeferredStates()
    state.defer("detect/segment/good", lambda: {"version": 1})
    state.defer("detect/segment/bad", lambda: {"kind": "segment"})
    cp = checkpoint(_events(3), next_offset=3)
    cp.state = state
    with pytest.raises(ValueError, match="int 'version'"):
        store.commit(cp)
    assert store.load_state("telemetry") == {}
    assert store.ratios(granularity="minute") == []


def test_a_checkpoint_over_more_new_series_than_a_chunk_resolves_and_widens_each(
    store: Store,
) -> None:
    """New series are inserted, and every series' seen-at range widened, a chunk of rows at
    a time: each of them all the same, with an id of its own."""
    from monitor.store.series_ids import CHUNK

    n = 2 * CHUNK + 3
    first = [event(f"a{i}", T0 + i % 60, f"route-{i}") for i in range(n)]
    store.commit(checkpoint(first, next_offset=n))
    later = [event(f"b{i}", T0 + 7200 + i % 60, f"route-{i}") for i in range(n)]
    store.commit(checkpoint(later, next_offset=2 * n, expected=n))
    with store.engine.connect() as conn:
        rows = conn.execute(select(series_table.c.id, series_table.c.route,
                                   series_table.c.first_seen_at,
                                   series_table.c.last_seen_at)).all()
    assert len(rows) == n and len({r.id for r in rows}) == n
    assert {r.route for r in rows} == {f"route-{i}" for i in range(n)}
    assert {(r.first_seen_at, r.last_seen_at) for r in rows} == {(at(T0), at(T0 + 7200))}
    assert sum(r.requests for r in store.ratios(granularity="day")) == 2 * n
