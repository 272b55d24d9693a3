"""bench/dedup_memory.py on 12 minutes of event time at a low rate: its table and verdicts."""

from __future__ import annotations

import re

from tests.bench.run import run_bench


def test_prints_both_windows_per_minute_and_judges_them_once_full() -> None:
    out = run_bench("bench/dedup_memory.py", "--minutes", "13", "--rate", "50")
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert [int(r[0]) for r in rows] == list(range(13))  # minutes 0..12 of a 13-minute run
    ids = [int(r[1].replace(",", "")) for r in rows]
    assert ids[10] > 25_000 and abs(ids[12] - ids[10]) < 0.1 * ids[10]  # full at 10 min
    # Both hold the same ids; the sets cost less than the dict, its times and its tuples.
    assert all(float(new) < float(old) for _, _, old, new in rows[1:])
    assert re.search(r"^dict\+deque: once the horizon is full, [\d.]+\.\.[\d.]+ MB", out, re.M)
    assert re.search(r"^SeenIds: once the horizon is full, .* 0 minute-to-minute changes", out,
                     re.M)
