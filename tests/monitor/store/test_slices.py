"""Per-slice hourly rollups (what ``specwatch policy`` learns from) and stored policies, on
SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

from monitor.aggregate.series import series_key
from monitor.config import PolicyConfig
from monitor.policy.slicer import Slicer
from monitor.policy.slices import SLICE_COUNTERS, SliceKey, SliceRecord, SliceStats
from monitor.store import Checkpoint, Store
from tests.monitor.store.helpers import T0, at, event

HOUR = 3600


def _slices(events: list) -> dict:
    slicer = Slicer(PolicyConfig())
    out: dict = {}
    for e in events:
        k = (SliceKey._make(slicer.key(e)), series_key(e), int(e.ts) - int(e.ts) % HOUR)
        out.setdefault(k, SliceStats()).update(e)
    return out


def _events(n: int, start: int) -> list:
    return [event(f"s{start}-{i}", start + i * 30, batch_size=1 + (i * 7) % 300,
                  prompt_tokens=50 + 97 * i, temperature=0.0 if i % 3 else 0.7,
                  tags={"lang": ("py", "rust", "a&b=c")[i % 3]}, spec=i % 5 != 0,
                  e2e_ms=400.0 + i, output_tokens=20 + i % 4)
            for i in range(n)]


def _oracle(events: list, slicer: Slicer) -> dict:
    """Each (hour, route, slice): requests, drafted, accepted, plain-timed requests."""
    out: dict = {}
    for e in events:
        k = (int(e.ts) - int(e.ts) % HOUR, e.route, SliceKey._make(slicer.key(e)),
             e.num_speculative_tokens)
        acc = out.setdefault(k, [0, 0, 0, 0])
        acc[0] += 1
        acc[1] += e.drafted_tokens
        acc[2] += e.accepted_tokens
        acc[3] += int(not e.has_spec)
    return out


def _stored(records: list[SliceRecord]) -> dict:
    return {(r.hour, r.series.route, r.key, r.series.num_speculative_tokens):
            [r.stats.requests, r.stats.drafted_tokens, r.stats.accepted_tokens,
             r.stats.plain_timed] for r in records}


def test_slices_round_trip_and_merge_across_checkpoints(migrated_url: str) -> None:
    events = _events(300, T0)  # 300 x 30 s: 2.5 hours, three hour rows per slice at most
    first, second = events[:170], events[170:]
    with Store(migrated_url) as store:
        store.commit(Checkpoint("s", slices=_slices(first)))
        # The same hour again: rows merge (read, add, write), never duplicate.
        store.commit(Checkpoint("s", slices=_slices(second)))
        records = store.slice_records()
        assert _stored(records) == _oracle(events, Slicer(PolicyConfig()))
        assert sum(r.stats.requests for r in records) == 300
        # Tags with separators survive as written.
        assert {r.key.tags for r in records} == {"lang=py", "lang=rust", "lang=a%26b%3Dc"}
        # Range and route filters, hour aligned.
        later = store.slice_records(since=at(T0 + HOUR))
        assert {r.hour for r in later} == {T0 + HOUR, T0 + 2 * HOUR}
        assert store.slice_records(route="elsewhere") == []
        per_position = sum(r.stats.per_position[0] for r in records if r.stats.per_position)
        assert per_position == 3 * sum(1 for e in events if e.has_spec)


def _spread(n: int, routes: int) -> list:
    """``n`` events a minute apart over ``routes`` routes (a series each), floats that round."""
    return [event(f"w{i}", T0 + i * 60, f"route{(i * 7) % routes}", batch_size=1 + (i * 13) % 200,
                  prompt_tokens=40 + 31 * i, e2e_ms=100.0 + i / 7, gpu_seconds=0.1 + i / 9,
                  temperature=0.0 if i % 4 else 0.7, spec=i % 6 != 0)
            for i in range(n)]


def test_slices_written_a_few_series_at_a_time_are_exact(migrated_url: str, monkeypatch) -> None:
    """Blocks of two series per read-merge-write: every row once, every sum exact, across
    two checkpoints (inserts, then merges into stored rows)."""
    import monitor.store.slices as slices

    monkeypatch.setattr(slices, "SLICE_BLOCK", 2)
    events = _spread(400, 13)  # 400 minutes: hour rows of 26 series in several slices
    first, second = events[:230], events[150:]  # overlapping ids: the same hours again
    second = [e for e in second if e.request_id not in {f.request_id for f in first}]
    with Store(migrated_url) as store:
        store.commit(Checkpoint("s", slices=_slices(first)))
        store.commit(Checkpoint("s", slices=_slices(second)))
        records = store.slice_records()
    assert len({r.series for r in records}) == 26  # 13 routes, with and without a draft
    # every counter of every row is what one pass over all the events sums
    expected = {(hour, series, key): _counts(stats)
                for (key, series, hour), stats in _slices(events).items()}
    assert {(r.hour, r.series, r.key): _counts(r.stats) for r in records} == expected
    assert sum(r.stats.requests for r in records) == len(events)


def _counts(stats: SliceStats) -> list[int]:
    return [getattr(stats, name) for name in SLICE_COUNTERS] + list(stats.per_position)


def test_a_slice_folded_in_blocks_is_the_slice_folded_at_once() -> None:
    """Each series' deltas stay together and in order: its rows are the same to the bit."""
    import orjson

    from monitor.store.slices import _fold, _series_blocks

    deltas = _slices(_spread(600, 17))
    ids = {key: 100 - n for n, key in enumerate({s for _, s, _ in deltas})}
    items = [(ids[series], ts, stats) for (_, series, ts), stats in deltas.items()]
    whole = _fold(items)
    for size in (1, 2, 5, 17, 100):
        parts = list(_series_blocks(items, size))
        assert all(len({sid for sid, _, _ in p}) <= size for p in parts)
        sids = [sid for p in parts for sid in dict.fromkeys(s for s, _, _ in p)]
        assert sids == sorted(set(sids)) == sorted(ids.values())  # ascending, each once
        blocked = {k: v for p in parts for k, v in _fold(p).items()}
        assert blocked.keys() == whole.keys()
        assert all(orjson.dumps(blocked[k]) == orjson.dumps(whole[k]) for k in whole)


def test_retention_removes_old_slice_rows(migrated_url: str) -> None:
    with Store(migrated_url) as store:
        store.commit(Checkpoint("s", slices=_slices(_events(20, T0))))
        store.commit(Checkpoint("s", slices=_slices(_events(20, T0 + 10 * HOUR))))
        deleted = store.apply_retention(at(T0 + 11 * HOUR), {"hour": timedelta(hours=5)})
        assert deleted["slice_rollups"] > 0
        assert {r.hour for r in store.slice_records()} == {T0 + 10 * HOUR}


def test_policies_are_stored_newest_first(migrated_url: str) -> None:
    with Store(migrated_url) as store:
        assert store.policies() == []
        for day in (1, 2):
            store.save_policy(computed_at=at(T0 + day * 86400), train_since=at(T0),
                              train_until=at(T0 + day * HOUR), holdout_until=None,
                              features="tags,batch_size", document={"day": day})
        newest, older = store.policies()
        assert newest["document"] == {"day": 2} and older["document"] == {"day": 1}
        assert newest["train_until"] == at(T0 + 2 * HOUR)
        assert newest["holdout_until"] is None
