"""``specwatch policy`` on a large store: time and peak memory of the whole command.

Fills a store with the slice rollups of ``--days`` days of ``--routes`` routes (each route
one model pair at draft length 4, ``--tags`` values of one tag, the default nine batch-size
buckets, plus the same buckets without speculation for the cost measurement): one row per
(hour, series, slice), written through ``Store.commit`` as the pipeline writes them. Then
runs ``specwatch policy --format json`` as a child process, ``--runs`` times, and prints its
wall time, CPU time and peak resident memory (``ru_maxrss`` of the child).

    PYTHONPATH=. python bench/policy.py                    # 30 days x 20 routes on SQLite
    PYTHONPATH=. python bench/policy.py --db postgresql+psycopg://postgres@127.0.0.1/test

Acceptance per tag value and a verification cost rising with batch size make the decisions
non-trivial; the numbers are synthetic, the row count and shapes are those of a real fleet.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.aggregate.series import SeriesKey  # noqa: E402
from monitor.policy.features import Buckets  # noqa: E402
from monitor.policy.slices import SliceKey, SliceStats  # noqa: E402
from monitor.store import Checkpoint, Store  # noqa: E402
from monitor.store.db import upgrade  # noqa: E402

EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
K = 4
START = 1_793_577_600  # 2026-11-02T00:00:00Z


def _stats(rng: np.random.Generator, requests: int, alpha: float, m: float,
           spec: bool) -> SliceStats:
    s = SliceStats()
    s.requests = s.timed_requests = requests
    tokens = 200 * requests
    s.output_tokens = s.timed_output_tokens = tokens
    plain_ms = 20.0
    if spec:
        tau = sum(alpha ** i for i in range(K + 1))
        steps = int(tokens / tau)
        s.drafting_requests = s.spec_timed = requests
        s.verify_steps = steps
        s.per_position = [int(steps * alpha ** (i + 1) * rng.uniform(0.97, 1.03))
                          for i in range(K)]
        s.drafted_tokens = K * steps
        s.accepted_tokens = sum(s.per_position)
        step_ms = plain_ms * (1 + K * m)
        s.decode_ms = steps * step_ms
        s.spec_step_ms = step_ms * requests * (steps / requests)
        s.spec_step_ms_sq = (step_ms ** 2) * requests * (steps / requests) ** 2 * 1.01
    else:
        s.plain_timed = requests
        s.decode_ms = tokens * plain_ms
        s.plain_token_ms = plain_ms * requests
        s.plain_token_ms_sq = plain_ms ** 2 * requests * 1.01
    s.ttft_ms = 50.0 * requests
    s.e2e_ms = s.decode_ms + s.ttft_ms
    return s


def fill(url: str, days: int, routes: int, tags: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    batch = Buckets(EDGES)
    rows = 0
    with Store(url) as store:
        for hour in range(days * 24):
            ts = START + hour * 3600
            slices: dict[tuple[SliceKey, SeriesKey, int], SliceStats] = {}
            for r in range(routes):
                route = f"route-{r:02d}"
                spec = SeriesKey(route, f"target-{r % 4}", "r1", "tok", f"draft-{r % 4}", "d1",
                                 "tok", "draft_model", K)
                plain = SeriesKey(route, f"target-{r % 4}", "r1", "tok", "", "", "", "", 0)
                for i in range(len(EDGES)):
                    label = batch.labels[i]
                    m = 0.1 + 0.15 * max(0, i - 4)
                    for t in range(tags):
                        key = SliceKey(label, "256-1023", "[0,0.01)", f"lang=l{t}")
                        alpha = 0.85 - 0.2 * t
                        slices[(key, spec, ts)] = _stats(rng, 40, alpha, m, True)
                    slices[(SliceKey(label, "256-1023", "[0,0.01)", "lang=l0"), plain, ts)] = \
                        _stats(rng, 10, 0.0, m, False)
            store.commit(Checkpoint("bench-policy", slices=slices))
            rows += len(slices)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--routes", type=int, default=20)
    ap.add_argument("--tags", type=int, default=2, help="values of the one tag per route")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--db", help="an empty database URL to fill (default: a new SQLite file)")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    print(f"# bench/policy.py  python {platform.python_version()}  {platform.machine()}  "
          f"cpus={os.cpu_count()}")
    with tempfile.TemporaryDirectory() as tmp:
        url = args.db or f"sqlite:///{Path(tmp) / 'policy.db'}"
        upgrade(url)
        t0 = time.perf_counter()
        rows = fill(url, args.days, args.routes, args.tags, args.seed)
        print(f"store: {rows:,} slice rows ({args.days} days x {args.routes} routes x "
              f"{len(EDGES)} batch buckets x ({args.tags} tags + no speculation)), written in "
              f"{time.perf_counter() - t0:.1f} s")
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        for run in range(1, args.runs + 1):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "monitor", "policy", "--db", url, "--format", "json"],
                capture_output=True, env=env, check=False)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                print(proc.stderr.decode(), file=sys.stderr)
                return 1
            doc = json.loads(proc.stdout)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            # ru_maxrss of RUSAGE_CHILDREN is the largest child so far (KB on Linux)
            print(f"run {run}: specwatch policy --format json: {wall:.2f} s wall, {cpu:.2f} s "
                  f"CPU, peak RSS {after.ru_maxrss / 1024:.0f} MB; {len(doc['slices'])} slices, "
                  f"{len(doc['schedules'])} pair schedules, held out "
                  f"{doc['holdout']['window']['hours'] if doc['holdout'] else 0} h")
    return 0


if __name__ == "__main__":
    sys.exit(main())
