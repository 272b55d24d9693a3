"""Task outcome and cost in the rollups, per-arm experiment rollups, and migration 0006."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey, series_key
from monitor.aggregate.sketch import LogHistogram
from monitor.store import Checkpoint, PartitionCommit, Store, format_ratios
from monitor.store.db import make_engine, upgrade
from monitor.store.experiments import ExperimentStats, ExperimentSummary
from monitor.store.query import COLUMNS
from monitor.store.series_ids import series_key_hash
from monitor.store.tables import experiment_rollups_table, rollups_table, series_table
from monitor.telemetry.event import Event
from tests.monitor.store.helpers import T0, at, checkpoint, event, merged

HOUR = 3600


def _v11(i: int, ts: float, route: str = "code", **kw: Any) -> Event:
    fields: dict[str, Any] = {
        "status": "error" if i % 9 == 0 else "ok",
        "outcome_ok": None if i % 3 == 0 else i % 4 != 1,
        "outcome_schema_valid": None if i % 2 else i % 5 != 0,
        "outcome_tool_calls_valid": None if i % 5 else i % 10 == 0,
        "gpu_seconds": 0.125 * (1 + i % 7),
        "gpu_estimated": i % 4 == 0,
        "itl_p50_ms": None if i % 6 == 0 else 8.0 + i % 13,
        "itl_p99_ms": None if i % 6 == 0 else 30.0 + 3 * (i % 17),
    }
    fields.update(kw)
    return event(f"v{i}", ts, route, **fields)


def _expected(events: list[Event]) -> dict[str, Any]:
    """The oracle: the definitions applied to the events directly."""
    ok = [e.outcome_ok for e in events if e.outcome_ok is not None]
    sv = [e.outcome_schema_valid for e in events if e.outcome_schema_valid is not None]
    tc = [e.outcome_tool_calls_valid for e in events if e.outcome_tool_calls_valid is not None]
    gpu = sum(e.gpu_seconds or 0.0 for e in events)
    successes = sum(1 for e in events if (e.status == "ok" if e.outcome_ok is None
                                          else e.outcome_ok))
    return {
        "requests": len(events),
        "successes": successes,
        "outcome_ok_reported": len(ok), "ok_rate": sum(ok) / len(ok) if ok else None,
        "schema_valid_reported": len(sv),
        "schema_valid_rate": sum(sv) / len(sv) if sv else None,
        "tool_calls_valid_reported": len(tc),
        "tool_calls_valid_rate": sum(tc) / len(tc) if tc else None,
        "gpu_seconds": gpu,
        "gpu_reported_requests": sum(not e.gpu_estimated for e in events),
        "gpu_seconds_per_success": gpu / successes if successes else None,
        "cost_per_success": gpu / successes * 2.5 / 3600 if successes else None,
    }


def _check(row: Any, want: dict[str, Any]) -> None:
    for name, value in want.items():
        got = getattr(row, name)
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-9), name
        else:
            assert got == value, name


def test_outcome_and_cost_at_every_granularity(store: Store) -> None:
    events = [_v11(i, T0 + 50 * i) for i in range(200)]  # 22:00 .. 00:45: two days
    # Two commits, so that hour and day rows are merged in the store, not only in memory.
    store.commit(checkpoint(events[:90], next_offset=90))
    store.commit(checkpoint(events[90:], next_offset=200, expected=90))
    for gran, size in (("minute", 60), ("hour", HOUR), ("day", 86400)):
        rows = store.ratios(granularity=gran, price_per_gpu_hour=2.5)
        assert sum(r.requests for r in rows) == 200
        for r in rows:
            start = r.bucket_start.timestamp()
            _check(r, _expected([e for e in events if start <= e.ts < start + size]))
            assert r.gpu_seconds_estimated_share == pytest.approx(
                1 - r.gpu_reported_requests / r.requests)
            assert r.successes_per_gpu_second == pytest.approx(r.successes / r.gpu_seconds)
    # The price is the reader's: none given, no cost.
    assert all(r.cost_per_success is None for r in store.ratios(granularity="day"))


def test_itl_quantiles_and_stats_merge_the_sketches(store: Store) -> None:
    events = [_v11(i, T0 + 20 * i) for i in range(150)]
    store.commit(checkpoint(events, next_offset=150))
    (row,) = store.ratios(granularity="day")
    whole = merged([BucketStats()])
    for e in events:
        whole.update(e)
    assert row.itl_p50_ms == whole.itl_p50_ms.quantile(0.5)
    assert row.itl_p99_ms == whole.itl_p99_ms.quantile(0.99)
    p50 = sorted(e.itl_p50_ms for e in events if e.itl_p50_ms is not None)
    assert row.itl_p50_ms == pytest.approx(p50[int(0.5 * (len(p50) - 1))], rel=0.011)
    (stats,) = store.stats(granularity="hour").values()
    assert stats.successes == whole.successes
    assert stats.success_gpu_seconds == pytest.approx(whole.success_gpu_seconds)
    assert stats.itl_p99_ms == whole.itl_p99_ms
    # Without itl_ms the quantiles are null, not zero.
    store.commit(checkpoint([event("plain", T0 + 86400 * 2)], next_offset=151, expected=150))
    plain = store.ratios(granularity="day")[-1]
    assert plain.itl_p50_ms is None and plain.itl_p99_ms is None


def test_json_and_csv_carry_the_new_fields(store: Store) -> None:
    store.commit(checkpoint([_v11(i, T0 + i) for i in range(1, 30)], next_offset=29))
    rows = store.ratios(price_per_gpu_hour=3.0)
    (obj,) = json.loads(format_ratios(rows, "json"))
    for name in ("successes", "success_rate", "ok_rate", "outcome_ok_reported",
                 "schema_valid_rate", "tool_calls_valid_rate", "gpu_seconds",
                 "gpu_seconds_estimated_share", "successes_per_gpu_second", "cost_per_success",
                 "itl_p50_ms", "itl_p99_ms"):
        assert name in obj and name in COLUMNS
    assert obj["cost_per_success"] == pytest.approx(rows[0].cost_per_success)
    header = format_ratios(rows, "csv").splitlines()[0].split(",")
    assert header == list(COLUMNS)
    assert "cost_per_success" in format_ratios(rows, "table").splitlines()[0]


# --- experiments ---------------------------------------------------------------------------


def _arm_deltas(events: list[Event]) -> dict[tuple[str, str, SeriesKey, int], BucketStats]:
    out: dict[tuple[str, str, SeriesKey, int], BucketStats] = {}
    for e in events:
        assert e.experiment_name is not None and e.experiment_arm is not None
        k = (e.experiment_name, e.experiment_arm, series_key(e), int(e.ts) - int(e.ts) % HOUR)
        out.setdefault(k, BucketStats()).update(e)
    return out


def _commit(store: Store, events: list[Event], offset: int, expected: int | None) -> None:
    cp = checkpoint(events, next_offset=offset, expected=expected)
    cp.experiments = _arm_deltas([e for e in events if e.experiment_name is not None])
    store.commit(cp)


def _ab(i: int, ts: float, name: str = "draft-v2", **kw: Any) -> Event:
    candidate = i % 2 == 1
    kw.setdefault("experiment_arm", "candidate" if candidate else "baseline")
    return _v11(i, ts, experiment_name=name, draft_revision="d2" if candidate else "d1", **kw)


def test_experiment_arms_are_summed_over_the_range(store: Store) -> None:
    events = [_ab(i, T0 + 40 * i) for i in range(300)]  # 22:00 .. 01:20
    events += [_ab(i, T0 + 40 * i + 7, "other", route="chat") for i in range(300, 310)]
    plain = [event(f"p{i}", T0 + i) for i in range(5)]  # no experiment
    _commit(store, events[:100] + plain, 105, None)
    _commit(store, events[100:], 315, 105)

    got = store.experiment_stats("draft-v2")
    assert [(s.arm, s.route) for s in got] == [("baseline", "code"), ("candidate", "code")]
    for s in got:
        assert isinstance(s, ExperimentStats) and s.experiment == "draft-v2"
        mine = [e for e in events if e.experiment_arm == s.arm
                and e.experiment_name == "draft-v2"]
        assert s.key == series_key(mine[0])
        assert s.stats.requests == len(mine)
        _check(s.stats, {k: v for k, v in _expected(mine).items()
                         if k not in ("cost_per_success",) and k in (
                             "requests", "successes", "outcome_ok_reported", "ok_rate",
                             "gpu_seconds", "gpu_seconds_per_success")})
    # [since, until) on hour boundaries: only the experiment's hours inside.
    since, until = at(T0 + HOUR), at(T0 + 3 * HOUR)
    window = store.experiment_stats("draft-v2", since, until)
    assert sum(s.stats.requests for s in window) == sum(
        1 for e in events if e.experiment_name == "draft-v2"
        and since.timestamp() <= e.ts < until.timestamp())
    assert store.experiment_stats("nope") == []
    with pytest.raises(ValueError):
        store.experiment_stats("draft-v2", since=since.replace(tzinfo=None))

    summary = store.experiments()
    assert summary == [
        ExperimentSummary("draft-v2", ("baseline", "candidate"), 300, at(T0), at(T0 + 3 * HOUR)),
        ExperimentSummary("other", ("baseline", "candidate"), 10, at(T0 + 3 * HOUR),
                          at(T0 + 3 * HOUR)),
    ]
    # The experiment's events are in the ordinary rollups too.
    assert sum(r.requests for r in store.ratios()) == 315


def test_experiment_names_are_any_unicode(store: Store) -> None:
    odd = "ab\x00test ✓ " + "x" * 300
    events = [_ab(i, T0 + i, odd, experiment_arm="arm\x00" + "y" * 300) for i in (0, 2, 4, 6)]
    _commit(store, events, 4, None)
    (s,) = store.experiment_stats(odd)
    assert s.arm == "arm\x00" + "y" * 300 and s.stats.requests == 4
    assert [x.name for x in store.experiments()] == [odd]
    assert store.experiment_stats("ab") == []


def test_an_experiment_only_series_is_resolved(store: Store) -> None:
    e = _ab(1, T0)
    cp = Checkpoint("telemetry", experiments=_arm_deltas([e]),
                    partitions=[PartitionCommit(0, 1, None, e.ts)])
    store.commit(cp)
    (s,) = store.experiment_stats("draft-v2")
    assert s.stats.requests == 1 and store.ratios() == []


def test_retention_drops_experiment_rows_with_the_hours(store: Store) -> None:
    now = at(T0 + 40 * 86400)
    events = [_ab(0, T0), _ab(1, T0 + 39 * 86400)]
    _commit(store, events, 2, None)
    deleted = store.apply_retention(now, {"hour": timedelta(days=30)})
    assert deleted == {"hour": 1, "experiment_rollups": 1}
    assert [s.stats.requests for s in store.experiment_stats("draft-v2")] == [1]
    # Without an hour retention the experiment rows are kept.
    assert store.apply_retention(now, {"minute": timedelta(days=1)}) == {"minute": 1}
    assert len(store.experiment_stats("draft-v2")) == 1


# --- migration 0006 on a database that holds data ---------------------------------------


def test_upgrade_keeps_rows_written_before_0006(db_url: str) -> None:
    upgrade(db_url, "0005")
    engine = make_engine(db_url)
    key = series_key(event("x", T0))
    old_cols = ("requests", "errors", "spec_requests", "drafting_requests", "evicted_requests",
                "drafted_tokens", "accepted_tokens", "verify_steps", "output_tokens",
                "prompt_tokens", "batch_size_sum", "batch_size_count")
    try:
        with engine.begin() as conn:
            conn.execute(insert(series_table).values(
                key_hash=series_key_hash(key), **key._asdict(), first_seen_at=at(T0),
                last_seen_at=at(T0)))
            sid = conn.execute(select(series_table.c.id)).scalar_one()
            values: dict[str, Any] = dict.fromkeys(old_cols, 0)
            values.update(requests=10, errors=3, output_tokens=100)
            empty = LogHistogram().to_json()
            # Only the columns revision 0005 has: the statement names no other.
            conn.execute(insert(rollups_table).values(
                granularity="hour", series_id=sid, bucket_start=at(T0), **values,
                per_position=[], ttft_ms=empty, e2e_ms=empty, decode_tps=empty))
    finally:
        engine.dispose()
    upgrade(db_url)
    with Store(db_url) as s:
        (row,) = s.ratios()
        assert (row.requests, row.successes, row.success_rate) == (10, 7, 0.7)
        assert row.gpu_seconds == 0.0 and row.gpu_seconds_per_success is None
        assert row.ok_rate is None and row.itl_p50_ms is None
        assert row.cost_per_success is None
        # New events merge into the old row additively.
        s.commit(checkpoint([_v11(2, T0 + 5)], next_offset=1))  # outcome.ok true
        (row,) = s.ratios()
        assert (row.requests, row.successes, row.outcome_ok_reported) == (11, 8, 1)
        assert row.gpu_seconds == pytest.approx(0.375)
        with s.engine.connect() as conn:
            assert conn.execute(select(experiment_rollups_table)).all() == []
            assert len(conn.execute(select(rollups_table)).all()) == 3
