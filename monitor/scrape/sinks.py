"""Where scraped events go: a Kafka topic keyed by route (like any producer's telemetry), or
JSON lines in a file or on stdout (for ``specwatch replay``, or a pipe)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import orjson

__all__ = ["EventSink", "JsonLinesSink", "KafkaSink"]


class EventSink(Protocol):
    def write(self, events: Sequence[dict[str, Any]]) -> None: ...

    def flush(self) -> None:
        """Return only once every event written is durable; raise when that failed."""
        ...

    def close(self) -> None: ...


class JsonLinesSink:
    """One event per line. A file is appended to, never truncated: a scraper restarted, or
    run with ``--once`` every interval, keeps adding to the same file. ``-`` is stdout."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._own = self.path != "-"
        if self._own:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._out: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - closed in close()
        else:
            self._out = sys.stdout.buffer

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        self._out.write(b"".join(orjson.dumps(e, option=orjson.OPT_APPEND_NEWLINE)
                                 for e in events))

    def flush(self) -> None:
        self._out.flush()

    def close(self) -> None:
        if self._own:
            self._out.close()
        else:
            self._out.flush()


class KafkaSink:
    """The simulator's :class:`~monitor.simulate.writers.KafkaWriter`: events of a route go
    as one JSON array keyed by the route, so they land in the route's partition like any
    producer's. ``acks=all``: a flush that returns means the broker has the events, which is
    what lets the scraper forget them (see ``ScrapeSource``)."""

    def __init__(self, bootstrap_servers: str, topic: str, *, partitions: int = 4,
                 create_topic: bool = True) -> None:
        from monitor.simulate.writers import KafkaWriter

        self.topic = topic
        self._writer = KafkaWriter(
            bootstrap_servers, topic, batch_size=100, partitions=partitions,
            create_topic=create_topic, max_delay_s=None, acks="all",
            client_id="specwatch-scrape",
        )

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        for event in events:
            self._writer.write(event)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
