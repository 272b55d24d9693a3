"""What packing closed window buckets saves: a route's break-even and position windows.

Feeds an hour of one simulated route's requests (``specwatch simulate``'s quiet scenario,
traffic in every minute) to a :class:`BreakevenMonitor` and a :class:`PositionCurve`, and
prints the deep size of each (``sys.getsizeof`` over everything it reaches) twice: as the
windows keep them (closed buckets packed as int64 or double arrays, see
``monitor.detect.windows._packed``) and with packing turned off (every bucket a list of
Python numbers, as before 230384a). The replayed numbers are the same either way
(``tests/monitor/detect/test_windows.py``).

    PYTHONPATH=. python bench/window_memory.py
    PYTHONPATH=. python bench/window_memory.py --minutes 120 --rate 20
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from segment_memory import deep_size  # noqa: E402

from monitor.detect import windows  # noqa: E402
from monitor.detect.breakeven import BreakevenMonitor  # noqa: E402
from monitor.detect.positions import PositionCurve  # noqa: E402
from monitor.simulate import Simulator, scenario_config  # noqa: E402
from monitor.telemetry.event import Event  # noqa: E402
from monitor.telemetry.parse import Parser  # noqa: E402

ROUTE = "code-assistant"


def route_events(minutes: float, rate: float) -> list[Event]:
    cfg = scenario_config("quiet", duration_s=60.0 * minutes, rate=rate, seed=1)
    parse = Parser().parse
    return [e for raw in Simulator(cfg).events() for e in parse(orjson.dumps(raw))[0]
            if e.route == ROUTE and e.has_spec]


def sizes(events: list[Event]) -> tuple[int, int]:
    """Deep bytes of a break-even monitor and a position curve fed ``events``."""
    breakeven, positions = BreakevenMonitor(), PositionCurve()
    for e in events:
        breakeven.update(e)
        if e.drafted_tokens > 0:
            positions.update(e)
    return deep_size(breakeven, set()), deep_size(positions, set())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=10.0, help="requests/s, all routes")
    args = p.parse_args(argv)
    events = route_events(args.minutes, args.rate)
    packed = sizes(events)
    keep = windows._packed
    windows._packed = lambda values: values  # every bucket a list, as before
    try:
        lists = sizes(events)
    finally:
        windows._packed = keep
    print(f"{len(events):,} requests of route {ROUTE} over {args.minutes:g} minutes")
    print(f"{'':<16} {'lists B':>9} {'packed B':>9}")
    for name, old, new in zip(("break-even", "position curve"), lists, packed, strict=True):
        print(f"{name:<16} {old:>9,} {new:>9,}")
    print(f"{'both':<16} {sum(lists):>9,} {sum(packed):>9,}  "
          f"({sum(lists) - sum(packed):,} bytes a segment saved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
