"""CPU cost of the acceptance detector per event, and of its calibration (issue 18).

The requests of simulated traffic (``monitor.simulate``, the quiet scenario at
``--rate`` events/s, as ``bench/ingest.py``) are split by segment as the router does, and
each segment's requests go to its own ``OverdispersedCusum`` with the daemon's default
settings: first one request per call (``update``), then in messages of ``--group`` events
(``update_many`` per segment, as ``Evaluator.segment_rules_many`` calls it). Calibration
is timed apart: every ``_calibrate`` call of the runs, and a mature baseline recalibrated
``--calibrations`` times. CPU seconds are this process's own (``time.process_time``): the
machine is shared, wall time is not a measure.

To compare with an older checkout, point ``--tree`` at a copy of it (``git archive``):
the detector is imported from there, the traffic and the timing from here.

    PYTHONPATH=. python bench/acceptance_cost.py
    git archive 68a0e7f monitor | tar -x -C /tmp/old && \\
        PYTHONPATH=. python bench/acceptance_cost.py --tree /tmp/old
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]

# (accepted, drafted, ts) of one segment's requests, in event order
Requests = tuple[list[int], list[int], list[float]]
# the traffic as (segment index, accepted, drafted, ts), in event order
Stream = list[tuple[int, int, int, float]]


def _import_tree(tree: Path) -> None:
    """Import ``monitor`` from ``tree``: the first entry of sys.path wins."""
    sys.path.insert(0, str(tree.resolve()))


def stream(n: int, rate: float, seed: int) -> tuple[Stream, int]:
    """The spec requests of ``n`` simulated events, tagged by segment; and the segment count."""
    from monitor.config import DetectionConfig
    from monitor.detect.segments import temperature_bucket
    from monitor.simulate import Simulator, scenario_config
    from monitor.telemetry.parse import Parser

    cfg = scenario_config("quiet", duration_s=2 * n / rate, rate=rate, seed=seed)
    edges = DetectionConfig().temperature_edges
    parser = Parser()
    segments: dict[tuple[Any, ...], int] = {}
    out: Stream = []
    for i, raw in enumerate(Simulator(cfg).events()):
        if i == n:
            break
        for e in parser.parse(orjson.dumps(raw))[0]:
            if not (e.has_spec and e.drafted_tokens > 0):
                continue
            key = (e.route, e.target_model, e.target_revision, e.draft_model, e.method,
                   e.num_speculative_tokens, temperature_bucket(e.temperature, edges))
            seg = segments.setdefault(key, len(segments))
            out.append((seg, e.accepted_tokens, e.drafted_tokens, e.ts))
    return out, len(segments)


def detectors(count: int) -> list[Any]:
    """Fresh detectors as the daemon makes them (``Router.new_acceptance``)."""
    from monitor.config import DetectionConfig
    from monitor.detect.acceptance import make_detector

    cfg = DetectionConfig()
    return [make_detector("cusum", min_effect=cfg.min_effect,
                          false_alarm_days=cfg.false_alarm_days) for _ in range(count)]


@contextmanager
def calibration_clock() -> Iterator[list[float]]:
    """CPU seconds of every ``_calibrate`` call inside the block, appended to the list."""
    from monitor.detect.acceptance import OverdispersedCusum

    spent: list[float] = []
    original = OverdispersedCusum._calibrate

    def timed(self: Any) -> None:
        started = time.process_time()
        original(self)
        spent.append(time.process_time() - started)

    OverdispersedCusum._calibrate = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        OverdispersedCusum._calibrate = original  # type: ignore[method-assign]


def per_event(requests: Stream, segments: int) -> tuple[float, list[Any]]:
    dets = detectors(segments)
    started = time.process_time()
    for seg, a, d, ts in requests:
        dets[seg].update(a, d, ts)
    return time.process_time() - started, dets


def per_message(requests: Stream, segments: int, group: int) -> tuple[float, list[Any]]:
    """Messages of ``group`` requests, each segment's part in one ``update_many`` loop."""
    dets = detectors(segments)
    messages = [_split(requests[i:i + group]) for i in range(0, len(requests), group)]
    started = time.process_time()
    for message in messages:
        for seg, (accepted, drafted, ts) in message.items():
            det, done = dets[seg], 0
            while done < len(drafted):
                done += det.update_many(accepted[done:], drafted[done:], ts[done:])
    return time.process_time() - started, dets


def _split(message: Stream) -> dict[int, Requests]:
    out: dict[int, Requests] = {}
    for seg, a, d, ts in message:
        accepted, drafted, stamps = out.setdefault(seg, ([], [], []))
        accepted.append(a)
        drafted.append(d)
        stamps.append(ts)
    return out


def recalibrations(requests: Stream, count: int) -> float:
    """CPU seconds per ``_calibrate`` of the busiest segment's detector at the stream's end."""
    busiest = statistics.mode(seg for seg, _, _, _ in requests)
    det = detectors(1)[0]
    for seg, a, d, ts in requests:
        if seg == busiest:
            det.update(a, d, ts)
    started = time.process_time()
    for _ in range(count):
        det._calibrate()
    return (time.process_time() - started) / count


def _median_of(rounds: int, run: Callable[[], tuple[float, list[Any]]]) -> tuple[float,
                                                                                  list[Any]]:
    results = [run() for _ in range(rounds)]
    return statistics.median(cpu for cpu, _ in results), results[-1][1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=200.0, help="simulated events/s")
    parser.add_argument("--group", type=int, default=500, help="events per message")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calibrations", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tree", type=Path, default=ROOT,
                        help="checkout whose monitor package is measured")
    args = parser.parse_args()
    _import_tree(args.tree)
    import monitor

    requests, segments = stream(args.events, args.rate, args.seed)
    n = len(requests)
    with calibration_clock() as spent_one:
        cpu_one, dets_one = _median_of(args.rounds, lambda: per_event(requests, segments))
    with calibration_clock() as spent_many:
        cpu_many, dets_many = _median_of(
            args.rounds, lambda: per_message(requests, segments, args.group))
    same = [d.snapshot() for d in dets_one] == [d.snapshot() for d in dets_many]
    alarms = sum(d.evidence()["phase"] == "changed" for d in dets_one)
    cal = recalibrations(requests, args.calibrations)
    print(f"# bench/acceptance_cost.py  tree={Path(monitor.__file__).parents[1]}")
    print(f"# {n:,} requests of {args.events:,} simulated events, {segments} segments, "
          f"rounds={args.rounds}, median CPU")
    print(f"{'feed':<24} {'CPU s':>8} {'us/request':>12} {'calibrations':>13} {'their s':>8}")
    for label, cpu, spent in (("update, one per call", cpu_one, spent_one),
                              (f"update_many, {args.group}/msg", cpu_many, spent_many)):
        calls = len(spent) // args.rounds
        print(f"{label:<24} {cpu:>8.3f} {cpu / n * 1e6:>12.2f} {calls:>13} "
              f"{sum(spent) / args.rounds:>8.3f}")
    print(f"one calibration of a mature baseline: {cal * 1e3:.2f} ms CPU")
    print(f"same final state both ways: {'yes' if same else 'NO'}; segments changed: {alarms}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
