"""Memory of the dedup window over the soak's traffic: ``SeenIds`` against the dict it replaced.

The request ids and event times of ``bench/soak.py``'s traffic (the five default routes at
``--rate`` events/s with its five scripted incidents over ``--minutes``) go, keyed to four
partitions by route as the soak's producer sends them, into one window per partition, pruned
every 2 s of event time as the daemon's checkpoints prune. Printed per minute of event time:
the bytes of the containers (``sys.getsizeof`` of tables and, for the old structure, of the
time and tuple objects it adds per id; the id strings are the same in both and left out) of

- ``SeenIds`` (``monitor/dedup.py``): one set per minute of event time, freed whole;
- ``dict + deque``: what it replaced (id -> time, plus (time, id) in arrival order).

A dict with steady inserts and deletes keeps its table a power of two and rebuilds it when
deletions have used up its slots, so its size moves in steps whenever the ids in the horizon
cross a boundary at a rebuild; the sets of ``SeenIds`` only grow and are freed whole.

    PYTHONPATH=. .venv/bin/python bench/dedup_memory.py                 # 30 min at 2,000/s
    PYTHONPATH=. .venv/bin/python bench/dedup_memory.py --minutes 60
"""

from __future__ import annotations

import argparse
import sys
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka.partitioner.default import murmur2  # noqa: E402

from bench.soak_traffic import _ts, incidents, steady_config  # noqa: E402
from monitor.dedup import SeenIds  # noqa: E402
from monitor.simulate import Simulator  # noqa: E402

PARTITIONS = 4  # as bench/soak.py
HORIZON = 600.0  # ingest.dedup_horizon's default
PRUNE_EVERY = 2.0  # ingest.checkpoint_interval's default
MB = 1024 * 1024
FLOAT, TUPLE2 = sys.getsizeof(1.0), sys.getsizeof((1.0, ""))


class DictWindow:
    """The structure before ``SeenIds``."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.order: deque[tuple[float, str]] = deque()

    def add(self, rid: str, ts: float) -> None:
        self.seen[rid] = ts
        self.order.append((ts, rid))

    def prune(self, newest: float) -> None:
        cutoff = newest - HORIZON
        while self.order and self.order[0][0] < cutoff:
            _, rid = self.order.popleft()
            del self.seen[rid]

    def nbytes(self) -> int:
        return (sys.getsizeof(self.seen) + sys.getsizeof(self.order)
                + len(self.seen) * (FLOAT + TUPLE2))


def seen_ids_bytes(w: SeenIds) -> int:
    return sum(sys.getsizeof(s) for s in w._by_slice.values()) + sys.getsizeof(w._by_slice)


def partition(route: str) -> int:
    # kafka-python's default partitioner for a keyed record
    return (murmur2(route.encode()) & 0x7FFFFFFF) % PARTITIONS


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=2000.0)
    args = ap.parse_args()
    run_s = args.minutes * 60.0
    config = steady_config(args.rate, 1, [i for i, _ in incidents(run_s)]).with_(
        duration_s=run_s)
    old = [DictWindow() for _ in range(PARTITIONS)]
    new = [SeenIds(HORIZON) for _ in range(PARTITIONS)]
    parts: dict[str, int] = {}
    start: float | None = None
    next_prune = next_print = 0.0
    rows: list[tuple[int, int, int, int]] = []
    print(f"# bench/dedup_memory.py  {args.minutes:g} min at {args.rate:,.0f} events/s, "
          f"{PARTITIONS} partitions, horizon {HORIZON:.0f} s")
    print(f"{'minute':>6} {'ids':>10} {'dict+deque MB':>14} {'SeenIds MB':>11}")
    for event in Simulator(config).events():
        ts = _ts(event["ts"])
        if start is None:
            start = next_prune = ts
        route = event["route"]
        p = parts.get(route)
        if p is None:
            p = parts[route] = partition(route)
        rid = event["request_id"]
        old[p].add(rid, ts)
        new[p].add(rid, ts)
        if ts >= next_prune:
            for w_old, w_new in zip(old, new, strict=True):
                w_old.prune(ts)
                w_new.prune(ts)
            next_prune = ts + PRUNE_EVERY
        if ts - start >= next_print:
            minute = int((ts - start) // 60)
            ids = sum(len(w.seen) for w in old)
            row = (minute, ids, sum(w.nbytes() for w in old), sum(map(seen_ids_bytes, new)))
            rows.append(row)
            print(f"{row[0]:>6} {row[1]:>10,} {row[2] / MB:>14.1f} {row[3] / MB:>11.1f}",
                  flush=True)
            next_print = (minute + 1) * 60.0
    full = [r for r in rows if r[0] * 60.0 >= HORIZON + 60.0]
    if full:
        for name, col in (("dict+deque", 2), ("SeenIds", 3)):
            vals = [r[col] / MB for r in full]
            steps = sum(1 for a, b in zip(vals, vals[1:], strict=False) if abs(b - a) > 5.0)
            print(f"{name}: once the horizon is full, {min(vals):.1f}..{max(vals):.1f} MB, "
                  f"{steps} minute-to-minute changes over 5 MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
