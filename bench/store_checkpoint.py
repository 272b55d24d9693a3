"""CPU of the store's checkpoints over many series, without the pipeline.

Each checkpoint adds a minute of events to every series (and the same events' slices), in
one hour and day: from the second on, every series' hour and day rows (and slice rows) are
read back, merged and rewritten, as a backlog replay over many series does. Reported: the
CPU seconds of each ``Store.commit`` (``time.process_time``), their total, and the hour
row of one series checked against the events (a fast wrong store is no use).

    PYTHONPATH=. python bench/store_checkpoint.py                   # 10,000 series, 3 commits
    PYTHONPATH=../old-checkout python bench/store_checkpoint.py     # the same on another tree
    PYTHONPATH=. python bench/store_checkpoint.py --db postgresql+psycopg://postgres@127.0.0.1/x
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import series_key
from monitor.config import PolicyConfig
from monitor.policy.slicer import Slicer
from monitor.policy.slices import SliceKey, SliceStats
from monitor.store import Checkpoint, PartitionCommit, Store
from monitor.store.db import upgrade
from monitor.telemetry.event import Event

HOUR = 3600


def events(n_series: int, minute: int, per_series: int, rng: random.Random) -> list[Event]:
    out = []
    for s in range(n_series):
        for j in range(per_series):
            ttft = rng.uniform(20.0, 400.0)
            out.append(Event(
                f"s{s}-m{minute}-{j}", minute + rng.uniform(0, 59), f"route-{s}", "ok",
                "llama-70b", "r1", "llama3", draft_model="llama-1b", draft_revision="d1",
                draft_tokenizer="llama3", method="draft_model", has_spec=True,
                num_speculative_tokens=4, drafted_tokens=12, accepted_tokens=rng.randint(0, 12),
                verify_steps=3, accepted_per_position=(3, 2, 1, 1), output_tokens=100,
                e2e_ms=ttft + rng.uniform(200.0, 3000.0), ttft_ms=ttft,
                itl_p50_ms=rng.uniform(5, 30), itl_p99_ms=rng.uniform(30, 90),
                gpu_seconds=rng.uniform(0.1, 2.0), batch_size=rng.choice((1, 4, 16, 64)),
                prompt_tokens=rng.randint(10, 3000), temperature=rng.choice((0.0, 0.7)),
            ))
    return out


def checkpoint(evs: list[Event], slicer: Slicer, offset: int) -> Checkpoint:
    rollups: dict = {}
    slices: dict = {}
    for e in evs:
        key = series_key(e)
        k = (key, int(e.ts) - int(e.ts) % 60)
        if k not in rollups:
            rollups[k] = BucketStats()
        rollups[k].update(e)
        s = (SliceKey._make(slicer.key(e)), key, int(e.ts) - int(e.ts) % HOUR)
        if s not in slices:
            slices[s] = SliceStats()
        slices[s].update(e)
    part = PartitionCommit(0, offset + len(evs), offset or None, max(e.ts for e in evs))
    return Checkpoint("bench", rollups=rollups, partitions=[part], slices=slices)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", type=int, default=10_000)
    p.add_argument("--commits", type=int, default=3)
    p.add_argument("--per-series", type=int, default=5, help="events per series and commit")
    p.add_argument("--db", help="database URL (default: a fresh SQLite file)")
    args = p.parse_args(argv)
    rng = random.Random(1)
    slicer = Slicer(PolicyConfig())
    # Minutes of one hour, one day: the rows every commit after the first reads back.
    t0 = int(datetime(2026, 11, 2, 10, tzinfo=UTC).timestamp())
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'bench.db'}"
        upgrade(url)
        store = Store(url)
        offset, cpu = 0, []
        all_events: list[Event] = []
        for c in range(args.commits):
            evs = events(args.series, t0 + 60 * c, args.per_series, rng)
            all_events += evs
            cp = checkpoint(evs, slicer, offset)
            offset += len(evs)
            started = time.process_time()
            store.commit(cp)
            cpu.append(time.process_time() - started)
            print(f"commit {c + 1}: {cpu[-1]:.2f} CPU s", flush=True)
        first = [e for e in all_events if e.route == "route-0"]
        got = store.stats(granularity="hour", route="route-0")
        (stats,) = got.values()
        if stats.requests != len(first) or stats.e2e_ms.count != len(first):
            print(f"WRONG: route-0 hour row has {stats.requests} requests, want {len(first)}")
            return 1
        store.close()
    print(f"{args.series} series, {args.commits} commits: {sum(cpu):.2f} CPU s in commits "
          f"({sum(cpu[1:]):.2f} s after the first)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
