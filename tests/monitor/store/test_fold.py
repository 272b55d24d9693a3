"""A checkpoint's deltas folded as rows equal the same fold on statistics objects."""

from __future__ import annotations

import random

import orjson

from monitor.aggregate.bucket import BucketStats
from monitor.store.checkpoint import GRANULARITIES
from monitor.store.writer import fold
from tests.monitor.store.helpers import T0, event, rollups_of


def _reference_fold(rollups: dict) -> dict:
    """The fold as it was done on BucketStats: each coarse bucket a fresh object that the
    level below merges into, in order."""
    out: dict = {}
    level = [(key, int(ts), stats) for (key, ts), stats in rollups.items()]
    for gran, size in GRANULARITIES.items():
        keys: dict = {}
        for key, ts, stats in level:
            k = (gran, key, ts - ts % size)
            acc = out.get(k)
            if acc is None:
                out[k] = acc = BucketStats()
            acc.merge(stats)
            keys[k] = None
        level = [(key, start, out[(gran, key, start)]) for gran, key, start in keys]
    return out


def test_fold_as_rows_equals_folding_bucket_stats() -> None:
    rng = random.Random(7)
    # Three routes over ~26 hours: minutes, hours and a day boundary, floats that round.
    evs = [event(f"r{i}", T0 + rng.randrange(0, 26 * 3600), ("a", "b", "c")[i % 3],
                 e2e_ms=rng.uniform(50, 5000), ttft_ms=rng.choice([None, rng.uniform(1, 900)]),
                 gpu_seconds=rng.choice([None, rng.uniform(0, 3)]), itl_p50_ms=rng.uniform(1, 90))
           for i in range(3000)]
    expected = {k: s.to_row() for k, s in _reference_fold(rollups_of(evs)).items()}
    got = fold(rollups_of(evs))
    assert sorted(got) == sorted(expected)
    assert all(orjson.dumps(got[k]) == orjson.dumps(expected[k]) for k in expected)
    assert {k[0] for k in got} == {"minute", "hour", "day"}


def test_fold_in_small_blocks_equals_the_fold_at_once() -> None:
    rng = random.Random(11)
    evs = [event(f"r{i}", T0 + rng.randrange(0, 30 * 3600), f"route{i % 7}",
                 e2e_ms=rng.uniform(50, 5000), gpu_seconds=rng.uniform(0, 3))
           for i in range(2000)]
    expected = {k: s.to_row() for k, s in _reference_fold(rollups_of(evs)).items()}
    got = fold(rollups_of(evs), block=2)
    assert sorted(got) == sorted(expected)
    assert all(orjson.dumps(got[k]) == orjson.dumps(expected[k]) for k in expected)


def test_rows_come_in_one_lock_order_whatever_series_a_writer_holds() -> None:
    """Store ids go in blocks by range, each block minutes, hours, days: two writers with
    different, overlapping series lock shared rows in the same order (no deadlock)."""
    import monitor.store.writer as writer

    rng = random.Random(5)
    evs = [event(f"r{i}", T0 + rng.randrange(0, 30 * 3600), f"route{i % 40}")
           for i in range(1000)]
    rollups = rollups_of(evs)
    keys = sorted({key for key, _ in rollups})
    ids = {key: 3 * n + 1 for n, key in enumerate(keys)}  # 1, 4, 7, ...: blocks of 10 ids
    grans = list(GRANULARITIES)

    def order(held: set) -> list:
        part = {k: v for k, v in rollups.items() if k[0] in held}
        out = []
        for gran, rows in writer.fold_chunks(part, ids, block=10):
            # merge_hourly locks a call's rows in key order
            out += [(sid // 10, grans.index(gran), sid, start) for sid, start in sorted(rows)]
        return out

    a = order(set(keys[::2]) | set(keys[:3]))
    b = order(set(keys[1::2]) | set(keys[:3]))
    assert a == sorted(a) and b == sorted(b)
    assert len({blk for blk, *_ in a}) > 3  # several blocks, each with its three levels
    assert {g for _blk, g, _sid, _start in a} == {0, 1, 2}
