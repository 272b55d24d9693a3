"""Route rules per message against per event (issue 18), the route's detectors alone.

The same parsed events (``bench/ingest.py``'s traffic) go to fresh routes'
``Evaluator.route_rules`` one event at a time, then, message by message (``--group``
events), each route's events of the message to ``Evaluator.route_rules_many``, grouped as
``Router.observe`` defers them; alternating rounds in one process, CPU seconds its own. Both
must end with the same route snapshots and alert count (``tests/monitor/detect/
test_route_rules_many.py`` checks much more; this only guards the figures).

    PYTHONPATH=. python bench/route_rules.py                      # 200,000 events, 5 rounds
    PYTHONPATH=. python bench/route_rules.py --events 100000 --group 500
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
from monitor.detect.evaluate import STEP, Evaluator  # noqa: E402
from monitor.detect.ownership import DetectionState  # noqa: E402
from monitor.detect.routing import Router  # noqa: E402
from monitor.detect.segments import Route  # noqa: E402
from monitor.telemetry.event import Event  # noqa: E402
from monitor.telemetry.parse import Parser  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import events as bench_events  # noqa: E402


def run(events: list[Event], group: int, batched: bool) -> tuple[float, bytes, int]:
    ev = Evaluator()
    router = Router(DetectionConfig(), DetectionState("event"), ev, lambda ts: None)
    routes: dict[str, Route] = {}

    def route(name: str) -> Route:
        r = routes.get(name)
        if r is None:
            r = routes[name] = router.new_route(name)
        return r

    started = time.process_time()
    for start in range(0, len(events), group):
        message = events[start:start + group]
        if not batched:
            for e in message:
                ev.route_rules(route(e.route), e)
            continue
        by_route: dict[str, tuple[Route, list[int], list[Event]]] = {}
        for i, e in enumerate(message):
            pending = by_route.get(e.route)
            if pending is None:
                by_route[e.route] = (route(e.route), [i * STEP], [e])
            else:
                pending[1].append(i * STEP)
                pending[2].append(e)
        ev.begin_batch()
        for r, keys, run_events in by_route.values():
            ev.route_rules_many(r, keys, run_events)
        ev.end_batch()
    cpu = time.process_time() - started
    snapshot = orjson.dumps({k: r.snapshot() for k, r in routes.items()},
                            option=orjson.OPT_SORT_KEYS)
    return cpu, snapshot, len(ev.alerts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--group", type=int, default=4096, help="events per message")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    parse = Parser()
    events: list[Event] = []
    for e in bench_events(args.events, args.seed):
        events.extend(parse.parse(orjson.dumps(e))[0])
    single: list[float] = []
    batched: list[float] = []
    for _ in range(args.rounds):
        cpu_one, snap_one, alerts_one = run(events, args.group, False)
        cpu_many, snap_many, alerts_many = run(events, args.group, True)
        if snap_one != snap_many or alerts_one != alerts_many:
            print("FAIL: the batched run ended with other route state", file=sys.stderr)
            return 1
        single.append(cpu_one)
        batched.append(cpu_many)
    n = len(events)
    print(f"# bench/route_rules.py  {n:,} events  group={args.group}  rounds={args.rounds}")
    print(f"{'route rules':<26} {'CPU s (rounds)':<40} {'median us/event':>16}")
    for label, cpus in (("route_rules per event", single),
                        (f"route_rules_many, {args.group}", batched)):
        rounds = " / ".join(f"{c:.2f}" for c in cpus)
        print(f"{label:<26} {rounds:<40} {statistics.median(cpus) / n * 1e6:>16.2f}")
    print(f"per message / per event: {statistics.median(batched) / statistics.median(single):.2f}x "
          "CPU; same route state: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
