"""Detection per message against detection per event (issue 18, item 3), detectors alone.

The same parsed events (``bench/ingest.py``'s traffic) go to a fresh ``Detection`` one
event per call, then in calls of ``--group`` events (what a Kafka poll or a replay stretch
hands it), in alternating rounds; CPU seconds are this process's own. Both runs must end
with the same detector snapshots (the property tests check much more; this only guards the
figures).

    PYTHONPATH=. python bench/detection_batch.py                  # 150,000 events, 3 rounds
    PYTHONPATH=. python bench/detection_batch.py --events 300000 --group 100
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from monitor.config import DetectionConfig  # noqa: E402
from monitor.detect.engine import Detection  # noqa: E402
from monitor.telemetry.event import Event  # noqa: E402
from monitor.telemetry.parse import Parser  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import events as bench_events  # noqa: E402


def parsed(raw: list[bytes]) -> list[Event]:
    parser = Parser()
    out: list[Event] = []
    for line in raw:
        out.extend(parser.parse(line)[0])
    return out


def run(raw: list[bytes], group: int) -> tuple[float, bytes]:
    events = parsed(raw)
    detection = Detection(DetectionConfig())
    detection.loaded = True
    started = time.process_time()
    for i in range(0, len(events), group):
        detection.observe(0, events[i:i + group])
    cpu = time.process_time() - started
    return cpu, orjson.dumps(dict(detection.snapshot()), option=orjson.OPT_SORT_KEYS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=150_000)
    parser.add_argument("--group", type=int, default=4096, help="events per call, batched")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    raw = [orjson.dumps(e) for e in bench_events(args.events, args.seed)]
    single: list[float] = []
    batched: list[float] = []
    for _ in range(args.rounds):
        cpu_one, snap_one = run(raw, 1)
        cpu_many, snap_many = run(raw, args.group)
        if snap_one != snap_many:
            print("FAIL: the batched run ended with other detector state", file=sys.stderr)
            return 1
        single.append(cpu_one)
        batched.append(cpu_many)
    n = len(raw)
    print(f"# bench/detection_batch.py  {n:,} events  group={args.group}  rounds={args.rounds}")
    print(f"{'feed':<22} {'CPU s (rounds)':<28} {'median us/event':>16}")
    for label, cpus in (("one event per call", single), (f"{args.group} per call", batched)):
        rounds = " / ".join(f"{c:.2f}" for c in cpus)
        print(f"{label:<22} {rounds:<28} {statistics.median(cpus) / n * 1e6:>16.2f}")
    print(f"batched / per event: {statistics.median(batched) / statistics.median(single):.2f}x "
          f"CPU; same detector state: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
