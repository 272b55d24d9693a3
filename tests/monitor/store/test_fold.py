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


def test_fold_in_small_chunks_equals_the_fold_at_once(monkeypatch) -> None:
    import monitor.store.writer as writer

    rng = random.Random(11)
    evs = [event(f"r{i}", T0 + rng.randrange(0, 30 * 3600), f"route{i % 7}",
                 e2e_ms=rng.uniform(50, 5000), gpu_seconds=rng.uniform(0, 3))
           for i in range(2000)]
    expected = {k: s.to_row() for k, s in _reference_fold(rollups_of(evs)).items()}
    real = writer.chunks
    monkeypatch.setattr(writer, "chunks", lambda items: real(items, 2))
    got = fold(rollups_of(evs))
    assert sorted(got) == sorted(expected)
    assert all(orjson.dumps(got[k]) == orjson.dumps(expected[k]) for k in expected)
    seen = [gran for gran, _ in writer.fold_chunks(rollups_of(evs),
                                                   {k: k for k, _ in rollups_of(evs)})]
    # a granularity at a time, minutes first, in chunks of two series
    assert seen == sorted(seen, key=list(GRANULARITIES).index) and len(seen) > 3 * 3
