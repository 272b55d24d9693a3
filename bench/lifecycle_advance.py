"""One ``Lifecycle.advance`` over many open alert groups (issue 18).

A daemon catching up a backlog over thousands of series has an alert open in many groups,
and one advance per checkpoint decides every timer due since the last (group_wait,
reminders) at its own time. ``--groups`` routes each fire once at a random time in the
first hour; one advance then runs ``--hours`` of timers. Prints the CPU seconds of that
advance and the notifications it sent.

    PYTHONPATH=. python bench/lifecycle_advance.py                      # 2,000 groups, 8 h
    PYTHONPATH=. python bench/lifecycle_advance.py --groups 10000 --hours 24
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alerts.lifecycle import Lifecycle  # noqa: E402
from monitor.alert_record import AlertRecord  # noqa: E402
from monitor.config import LifecycleConfig  # noqa: E402

T0 = datetime(2026, 11, 2, tzinfo=UTC).timestamp()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2000)
    ap.add_argument("--hours", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    lc = Lifecycle(LifecycleConfig(group_wait=30, group_interval=300, repeat_interval=3600,
                                   min_firing=0, keep_firing_for=600))
    lc.loaded = True
    rng = random.Random(args.seed)
    records = sorted(
        (AlertRecord("acceptance_drop", "firing",
                     datetime.fromtimestamp(T0 + rng.uniform(0, 3600), UTC), "warning",
                     {"route": f"r{n:05d}"}, f"r{n:05d}: acceptance_drop", {})
         for n in range(args.groups)),
        key=lambda r: r.at,
    )
    lc.update(records)
    t = time.process_time()
    sent = lc.advance(T0 + args.hours * 3600)
    took = time.process_time() - t
    print(f"groups={args.groups} hours={args.hours:g} notifications={len(sent)} "
          f"advance_cpu_s={took:.3f}")


if __name__ == "__main__":
    main()
