"""``specwatch simulate``: generate telemetry to a file, stdout or Kafka."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

from monitor.simulate.config import SimulationConfig
from monitor.simulate.durations import format_time, parse_duration, parse_time
from monitor.simulate.exceptions import SimulationError
from monitor.simulate.incidents import KINDS, Incident
from monitor.simulate.scenarios import SCENARIOS, canonical_name, scenario_config
from monitor.simulate.simulator import Simulator
from monitor.simulate.writers import KafkaWriter, write_file

_EPILOG = "incident kinds (spec: kind:route=NAME,at=OFFSET[,for=DURATION][,param=value]):\n"
_EPILOG += "\n".join(
    f"  {kind:<17} {text}"
    + "".join(f" [{k}={v}]" for k, v in params.items() if v is not None)
    for kind, (text, params) in KINDS.items()
)
_EPILOG += "\n\nscenarios:\n" + "\n".join(
    f"  {s.name:<17} {s.description} (default {s.duration_s / 3600:g}h)"
    for s in SCENARIOS.values()
)


T = TypeVar("T")


def _arg(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type that reports our own message instead of 'invalid value'."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except SimulationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = parse.__name__
    return convert


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1]")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not > 0")
    return value


def register(subparsers: Any) -> None:
    """Add ``simulate`` to an argparse subparsers object; ``args.func(args)`` runs it."""
    p = subparsers.add_parser(
        "simulate",
        help="generate realistic telemetry v1 traffic (file, stdout or Kafka)",
        description=(
            "Generate deterministic, realistic speculative-decoding telemetry: several routes, "
            "daily cycle, bursts, errors, scripted incidents. Same arguments (with --start) "
            "give the same events."
        ),
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--scenario", default="default", choices=sorted(SCENARIOS),
                   type=canonical_name,
                   help="preset routes, incidents and noise (default: %(default)s)")
    p.add_argument("--duration", type=_arg(parse_duration), default=None,
                   help="event time to cover, e.g. 90s, 30m, 6h, 1d (default: the scenario's); "
                        "with --realtime, stop after this much simulated time (default: never)")
    p.add_argument("--rate", type=_positive, default=None,
                   help="mean events per second of event time (default: 50)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: 0)")
    p.add_argument("--start", type=_arg(parse_time), default=None,
                   help="event time of the start, RFC 3339 or Unix seconds "
                        "(default: so that the simulation ends now, whole minute)")
    p.add_argument("--incident", action="append", type=_arg(Incident.parse), default=[],
                   metavar="SPEC",
                   help="add an incident, e.g. silence:route=chat,at=30m,for=10m (repeatable)")
    p.add_argument("--duplicates", type=_fraction, default=None,
                   help="fraction of events sent twice")
    p.add_argument("--late", type=_fraction, default=None,
                   help="fraction of events emitted after later ones")
    p.add_argument("--late-max", type=_arg(parse_duration), default=None,
                   help="how late a late event can be, in event time (default: 5m)")
    p.add_argument("--experiment", metavar="NAME", default=None,
                   help="name of the A/B experiment of an experiment scenario "
                        "(default: draft-v2)")
    p.add_argument("--shadow", type=_fraction, default=None,
                   help="fraction of greedy requests also sent to a non-speculative upstream "
                        "(telemetry v1.1 scenarios)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", default=None,
                     help="JSON-lines file (.gz compresses), '-' for stdout (the default)")
    out.add_argument("--kafka", metavar="BOOTSTRAP", default=None,
                     help="Kafka bootstrap servers, e.g. 127.0.0.1:9092")
    p.add_argument("--topic", default="specwatch.telemetry",
                   help="Kafka topic, created if missing (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=100,
                   help="events per Kafka message, per route; 1 = single objects "
                        "(default: %(default)s)")
    p.add_argument("--realtime", action="store_true",
                   help="stream live: ts = wall clock, paced at --rate x --speed until Ctrl-C")
    p.add_argument("--speed", type=_positive, default=1.0,
                   help="with --realtime: simulated seconds per wall second (default: 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.batch_size < 1:
        return _fail("--batch-size must be >= 1", 2)
    if args.realtime and args.start is not None:
        return _fail("--start does not go with --realtime (a live run starts now)", 2)
    try:
        config = _config(args)
    except SimulationError as e:
        return _fail(str(e), 2)
    sim = Simulator(config)
    stop = threading.Event()
    started, wall_start = time.monotonic(), time.time()
    counts: Counter[str] = Counter()
    on_main = threading.current_thread() is threading.main_thread()
    previous: Any = None
    if args.realtime:
        if args.duration is not None:
            timer = threading.Timer(args.duration / args.speed, stop.set)
            timer.daemon = True
            timer.start()
        events: Iterable[dict[str, Any]] = sim.realtime(args.speed, stop)
        if on_main:
            # `kill` ends a live run like Ctrl-C does: flushed, with a summary
            previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    else:
        events = sim.events()
    try:
        if args.kafka:
            destination = f"kafka {args.kafka} topic {args.topic}"
            total = _to_kafka(args, _count(events, counts))
        else:
            destination = args.out or "-"
            try:
                total = write_file(_count(events, counts), destination, flush=args.realtime)
            except KeyboardInterrupt:
                total = sum(counts.values())
    except SimulationError as e:
        return _fail(str(e), 1)
    except BrokenPipeError:
        # `specwatch simulate | head`: the reader is gone; keep Python from complaining at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    per_route = ", ".join(f"{route} {n}" for route, n in sorted(counts.items()))
    start = format_time(wall_start if args.realtime else config.start_ts)
    print(
        f"specwatch simulate: {total} events ({per_route}) to {destination} in "
        f"{time.monotonic() - started:.1f}s; scenario {args.scenario}, seed {config.seed}, "
        f"start {start}{' (live)' if args.realtime else ''}, "
        f"{len(config.incidents)} incident(s)",
        file=sys.stderr,
    )
    return 0


def _to_kafka(args: argparse.Namespace, events: Iterable[dict[str, Any]]) -> int:
    from kafka.errors import KafkaError

    try:
        with KafkaWriter(args.kafka, args.topic, args.batch_size) as writer:
            try:
                writer.write_all(events)
            except KeyboardInterrupt:
                pass  # Ctrl-C ends a live run; closing the writer still flushes what it has
    except KafkaError as e:
        raise SimulationError(f"Kafka at {args.kafka}: {e!r}") from e
    return writer.sent


def _fail(message: str, code: int) -> int:
    print(f"specwatch simulate: {message}", file=sys.stderr)
    return code


def _config(args: argparse.Namespace) -> SimulationConfig:
    overrides: dict[str, Any] = {}
    for name, value in (
        ("rate", args.rate), ("seed", args.seed), ("duplicates", args.duplicates),
        ("late", args.late), ("late_max", args.late_max),
    ):
        if value is not None:
            overrides[name] = value
    duration = args.duration
    if args.realtime:
        duration = None  # incidents are placed over the scenario's own length
    if args.shadow is not None:
        overrides["shadow"] = args.shadow
    config = scenario_config(args.scenario, duration, **overrides)
    if args.experiment is not None:
        if config.experiment is None:
            raise SimulationError(
                f"--experiment needs an experiment scenario; {args.scenario} has no A/B split"
            )
        config = config.with_(experiment=replace(config.experiment, name=args.experiment))
    if args.start is not None:
        config = config.with_(start=args.start)
    elif not args.realtime:
        # A history that ends now is what a dashboard or a fresh daemon wants to see.
        span = config.duration_s or 0.0
        config = config.with_(start=(time.time() - span) // 60 * 60)
    return config.add_incidents(args.incident)


def _count(events: Iterable[dict[str, Any]], counts: Counter[str]) -> Iterator[dict[str, Any]]:
    for event in events:
        counts[event["route"]] += 1
        yield event


def main(argv: list[str] | None = None) -> int:
    """Run ``simulate`` on its own (``python -m monitor.simulate``)."""
    parser = argparse.ArgumentParser(prog="specwatch")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["simulate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))

