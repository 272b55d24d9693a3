"""CPU cost of the throughput detector per event, one per call and per message (issue 18).

The events of simulated traffic (``monitor.simulate``, the quiet scenario at ``--rate``
events/s, with an eviction incident so that the detector fires and resolves) are split by
segment as the router does, and each segment's events go to its own ``ThroughputMonitor``
with the daemon's settings: first one event per call (``update``), then in messages of
``--group`` events (``update_many`` per segment, called again after each flip). CPU seconds
are this process's own (``time.process_time``): the machine is shared, wall time is not a
measure.

To compare with an older checkout, point ``--tree`` at a copy of it (``git archive``): the
detector is imported from there (per message only where it has ``update_many``), the
traffic and the timing from here.

    PYTHONPATH=. python bench/detector_cost.py
    git archive main monitor | tar -x -C /tmp/old && \\
        PYTHONPATH=. python bench/detector_cost.py --tree /tmp/old
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]

# (segment index, event) in event order
Stream = list[tuple[int, Any]]


def stream(n: int, rate: float, seed: int) -> tuple[Stream, int]:
    """``n`` simulated events tagged by segment; and the segment count."""
    from monitor.config import DetectionConfig
    from monitor.detect.routing import segment_id
    from monitor.detect.segments import temperature_bucket
    from monitor.simulate import Simulator, scenario_config
    from monitor.simulate.incidents import Incident
    from monitor.telemetry.parse import Parser

    duration = 2 * n / rate
    cfg = scenario_config("quiet", duration_s=duration, rate=rate, seed=seed)
    cfg = cfg.add_incidents([Incident.parse(
        f"eviction:route=code-assistant,at={int(duration / 6)}s,share=0.5,slowdown=3,"
        f"for={int(duration / 8)}s")])
    edges = DetectionConfig().temperature_edges
    parser = Parser()
    segments: dict[str, int] = {}
    out: Stream = []
    for raw in Simulator(cfg).events():
        if len(out) >= n:
            break
        for e in parser.parse(orjson.dumps(raw))[0]:
            seg = segments.setdefault(segment_id(e, temperature_bucket(e.temperature, edges)),
                                      len(segments))
            out.append((seg, e))
    return out[:n], len(segments)


def detectors(count: int) -> list[Any]:
    """Fresh monitors as the daemon makes them (``Router.new_throughput``)."""
    from monitor.config import DetectionConfig
    from monitor.detect.throughput import ThroughputMonitor

    return [ThroughputMonitor(min_effect=DetectionConfig().throughput_min_effect)
            for _ in range(count)]


def per_event(events: Stream, segments: int) -> tuple[float, list[Any], int]:
    dets = detectors(segments)
    flips = 0
    started = time.process_time()
    for seg, e in events:
        det = dets[seg]
        det.update(e)
        flips += det.changed
    return time.process_time() - started, dets, flips


def per_message(events: Stream, segments: int, group: int) -> tuple[float, list[Any], int]:
    """Messages of ``group`` events, each segment's part in one ``update_many`` loop."""
    dets = detectors(segments)
    messages = []
    for i in range(0, len(events), group):
        parts: dict[int, list[Any]] = {}
        for seg, e in events[i:i + group]:
            parts.setdefault(seg, []).append(e)
        messages.append(parts)
    flips = 0
    started = time.process_time()
    for message in messages:
        for seg, part in message.items():
            det, done = dets[seg], 0
            while done < len(part):
                done += det.update_many(part[done:] if done else part)
                flips += det.changed
    return time.process_time() - started, dets, flips


def _median_of(rounds: int, run: Callable[[], tuple[float, list[Any], int]]
               ) -> tuple[float, list[Any], int]:
    results = [run() for _ in range(rounds)]
    return statistics.median(r[0] for r in results), results[-1][1], results[-1][2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=50.0, help="simulated events/s")
    parser.add_argument("--group", type=int, default=500, help="events per message")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="checkout whose monitor package is measured")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))  # the first entry of sys.path wins
    import monitor
    from monitor.detect.throughput import ThroughputMonitor

    events, segments = stream(args.events, args.rate, args.seed)
    n = len(events)
    rows = [("update, one per call",
             _median_of(args.rounds, lambda: per_event(events, segments)))]
    if hasattr(ThroughputMonitor, "update_many"):
        rows.append((f"update_many, {args.group}/msg", _median_of(
            args.rounds, lambda: per_message(events, segments, args.group))))
    print(f"# bench/detector_cost.py  tree={Path(monitor.__file__).parents[1]}")
    print(f"# {n:,} simulated events at {args.rate:g}/s, {segments} segments, "
          f"rounds={args.rounds}, median CPU")
    print(f"{'feed':<24} {'CPU s':>8} {'us/event':>10} {'flips':>6}")
    for label, (cpu, _, flips) in rows:
        print(f"{label:<24} {cpu:>8.3f} {cpu / n * 1e6:>10.2f} {flips:>6}")
    if len(rows) == 1:
        return 0
    snaps = [[orjson.dumps(d.snapshot()) for d in r[1][1]] for r in rows]
    same = snaps[0] == snaps[1] and rows[0][1][2] == rows[1][1][2]
    print(f"same final state and flips both ways: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
