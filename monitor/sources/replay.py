"""The replay input: a telemetry file (JSON lines, optionally gzip) read in event time.

Each line is one message, exactly as a Kafka record value would be. The whole file runs
through the same pipeline as the daemon, as fast as it can, so a replay is the backtest and
the benchmark path. Progress is stored under a source id (default ``replay``) as a running
line count: a second file replayed into the same database continues the first one's
event-time and dedup state, as if the two were one stream.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from monitor.deadletter import DeadLetterSink
from monitor.pipeline import IngestSummary, Pipeline
from monitor.telemetry.event import Rejection

PARTITION = 0


@dataclass(slots=True)
class _Input:
    lines: Iterator[bytes]
    total_bytes: int | None
    position: Any  # () -> bytes consumed so far
    close: Any


def open_input(path: str) -> _Input:
    """Lines of ``path`` (``-`` for stdin; ``.gz`` decompressed on the fly)."""
    if path == "-":
        stdin = sys.stdin.buffer
        return _Input(iter(stdin), None, lambda: 0, lambda: None)
    raw: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed via _Input.close
    total = os.fstat(raw.fileno()).st_size
    stream: IO[bytes] = raw
    if path.endswith(".gz"):
        stream = io.BufferedReader(gzip.GzipFile(fileobj=raw), buffer_size=1 << 20)
    return _Input(iter(stream), total, raw.tell, raw.close)


class _WithLine:
    """Adds the file and line number to each dead-letter origin."""

    def __init__(self, sink: DeadLetterSink, path: str, base: int) -> None:
        self.sink, self.path, self.base = sink, path, base

    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None:
        origin = origin | {"file": self.path, "line": origin["offset"] - self.base + 1}
        self.sink.send(rejection, origin)

    def flush(self) -> None:
        self.sink.flush()

    def close(self) -> None:
        self.sink.close()


def replay(path: str, pipeline: Pipeline, *, progress: bool | None = None) -> IngestSummary:
    """Run every line of ``path`` through ``pipeline`` and checkpoint at the end."""
    resume = pipeline.assign([PARTITION])
    base = resume.get(PARTITION) or 0
    pipeline.dead_letter = _WithLine(pipeline.dead_letter, path, base)
    src = open_input(path)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _progress_bar(src.total_bytes) if show else None
    process, due, summary = pipeline.process, pipeline.due, pipeline.summary
    offset = base
    started = last_draw = time.monotonic()
    try:
        for line in src.lines:
            line = line.rstrip(b"\r\n")
            if line.strip():
                process(PARTITION, offset, line)
            offset += 1
            if due():
                pipeline.checkpoint()
                if bar is not None and time.monotonic() - last_draw > 0.2:
                    last_draw = time.monotonic()
                    _draw(bar, src.position(), summary.events, last_draw - started)
        pipeline.checkpoint()
        if bar is not None:
            _draw(bar, src.position(), summary.events, time.monotonic() - started)
    finally:
        if bar is not None:
            bar.close()
        src.close()
        pipeline.dead_letter = pipeline.dead_letter.sink  # type: ignore[attr-defined]
    return summary


def _progress_bar(total: int | None) -> Any:
    from tqdm import tqdm

    # A terminal that reports no size (a fresh pty) would get a bar of zero width, or none
    # at all: tqdm hides bars below the last row.
    size = shutil.get_terminal_size((100, 24))
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
                ncols=size.columns, nrows=max(size.lines, 2),
                desc="replay", bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix} "
                "[{elapsed}<{remaining}]")


def _draw(bar: Any, position: int, events: int, elapsed: float) -> None:
    bar.n = position
    rate = events / elapsed if elapsed > 0 else 0.0
    bar.set_postfix_str(f"{events:,} events, {rate:,.0f} events/s", refresh=True)
