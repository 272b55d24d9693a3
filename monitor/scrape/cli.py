"""``specwatch scrape``: engine ``/metrics`` counters in, telemetry v1 events out.

Events go to Kafka (``kafka.bootstrap_servers``, topic ``scrape.topic`` or else
``kafka.topic``), where the daemon counts them like any producer's, or with ``--out`` to a
JSON-lines file (appended) or stdout for ``specwatch replay``. ``--once`` scrapes every
target once and exits: run from cron, it needs a state file (``--state`` or
``scrape.state_path``) to carry the baselines from one run to the next.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from monitor.exceptions import ConfigError, SpecwatchError

__all__ = ["cmd_scrape", "register"]


def register(
    subparsers: Any,
    with_config: Callable[[argparse.ArgumentParser], None],
    config: Callable[[argparse.Namespace], Any],
) -> None:
    """Add ``scrape`` to the ``specwatch`` subcommands; ``config(args)`` loads the
    :class:`monitor.config.Config` (whose ``scrape`` section lists the targets)."""
    p = subparsers.add_parser(
        "scrape",
        help="turn engine /metrics counters (vLLM, SGLang, TRT-LLM) into telemetry events",
        description=(
            "Scrape each configured target's Prometheus endpoint once per interval and turn "
            "its spec-decode counter increases into one telemetry v1 event per interval. "
            "Events go to Kafka (kafka.bootstrap_servers; topic scrape.topic, else "
            "kafka.topic) or, with --out, to a JSON-lines file for `specwatch replay`. "
            "--once needs a state file (--state or scrape.state_path) to carry baselines "
            "from one run to the next."
        ),
    )
    with_config(p)
    p.add_argument("--once", action="store_true",
                   help="scrape every target once, send what that closes, and exit")
    p.add_argument("--out", metavar="PATH",
                   help="append JSON lines to PATH ('-' for stdout) instead of sending to Kafka")
    p.add_argument("--state", metavar="PATH",
                   help="state file for baselines and unsent events (overrides "
                        "scrape.state_path)")
    p.add_argument("--bootstrap", metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve the scraper's own metrics (failures, resets, events) on "
                   "127.0.0.1:PORT")
    p.set_defaults(func=lambda args: cmd_scrape(args, config(args)))


def cmd_scrape(args: argparse.Namespace, config: Any) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    from monitor.scrape.scraper import ScrapeCollector, ScrapeSource
    from monitor.scrape.sinks import EventSink, JsonLinesSink, KafkaSink

    scrape = config.scrape
    if not scrape.targets:
        raise ConfigError("config error at scrape.targets: no targets to scrape")
    state = args.state or scrape.state_path
    if args.once and not state:
        raise ConfigError("--once needs a state file (--state PATH or scrape.state_path): "
                          "without one every run is a first scrape, a baseline only")
    logging.basicConfig(level=getattr(logging, config.log_level),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    sink: EventSink
    if args.out:
        sink, destination = JsonLinesSink(args.out), args.out
    else:
        from kafka.errors import KafkaError

        kafka = config.kafka
        topic = scrape.topic or kafka.topic
        destination = f"kafka {kafka.bootstrap_servers} topic {topic}"
        try:
            sink = KafkaSink(kafka.bootstrap_servers, topic, partitions=kafka.partitions,
                             create_topic=kafka.create_topics)
        except KafkaError as e:
            raise SpecwatchError(f"Kafka at {kafka.bootstrap_servers}: {e!r}") from None
    source = ScrapeSource(scrape, sink, state_path=state)
    if args.metrics_port is not None:
        registry = CollectorRegistry()
        registry.register(ScrapeCollector(source.scrapers))
        # Loopback only: this endpoint has no token (the API's rule, docs/security.md).
        start_http_server(args.metrics_port, addr="127.0.0.1", registry=registry)
    try:
        if args.once:
            source.scrape_once()
        else:
            stop = threading.Event()
            if threading.current_thread() is threading.main_thread():
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, lambda *_: stop.set())
            source.run(stop)
    finally:
        source.close()
    failures = sum(s.stats.failures for s in source.scrapers)
    events = sum(s.stats.events for s in source.scrapers)
    print(f"specwatch scrape: {len(source.scrapers)} target(s), {events} event(s) to "
          f"{destination}, {failures} failed scrape(s), {source.pending} unsent",
          file=sys.stderr)
    # Unsent events stay in the state file for the next run; cron should still hear of it.
    return 1 if source.pending else 0
