"""The adapt loop: engine request outputs (JSON lines) in, telemetry v1 JSON lines out.

A line holds one request output, or a JSON array of them (SGLang answers a batch request with
one). Every output becomes one event, checked by specwatch's own parser before it is written,
or one dead-letter record with the reason; either way the run goes on.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import orjson

from monitor.adapters.common import NOTE_KEY, AdapterError
from monitor.adapters.defaults import Defaults
from monitor.deadletter import DeadLetterSink
from monitor.telemetry.event import Rejection
from monitor.telemetry.parse import Parser

__all__ = ["AdaptSummary", "ToEvent", "adapt_lines", "open_lines", "open_out"]

ToEvent = Callable[[dict[str, Any], Defaults], dict[str, Any]]


@dataclass(slots=True)
class AdaptSummary:
    """Counts of one run; ``ts_defaulted`` events had no engine time (ts = adapt time or
    ``--default-ts``)."""

    adapted: int = 0
    rejected: int = 0
    ts_defaulted: int = 0

    def line(self) -> str:
        """
        >>> AdaptSummary(12, 2, 0).line()
        '12 requests adapted, 2 rejected'
        >>> AdaptSummary(3, 0, 3).line()
        '3 requests adapted, 0 rejected; 3 with ts not from the engine (see adapter_note)'
        """
        text = f"{self.adapted} requests adapted, {self.rejected} rejected"
        if self.ts_defaulted:
            text += f"; {self.ts_defaulted} with ts not from the engine (see adapter_note)"
        return text


def adapt_lines(
    lines: Iterable[bytes],
    to_event: ToEvent,
    defaults: Defaults,
    write: Callable[[bytes], object],
    dead_letter: DeadLetterSink,
    origin: dict[str, Any] | None = None,
) -> AdaptSummary:
    """Adapt every request output in ``lines``; ``origin`` (file, engine) goes into each
    dead-letter record together with the 1-based line number."""
    summary = AdaptSummary()
    parser = Parser()
    base = origin or {}

    def reject(reason: str, raw: bytes, number: int, index: int | None) -> None:
        summary.rejected += 1
        dead_letter.send(Rejection(reason, raw, index), base | {"line": number})

    for number, line in enumerate(lines, 1):
        line = line.rstrip(b"\r\n")
        if not line.strip():
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as e:
            reject(f"invalid JSON: {e}", line, number, None)
            continue
        batch = isinstance(doc, list)
        for index, item in enumerate(doc if batch else [doc]):
            raw = orjson.dumps(item) if batch else line
            where = index if batch else None
            try:
                event = to_event(item, defaults)
                encoded = orjson.dumps(event)
            except AdapterError as e:
                reject(e.reason, raw, number, where)
                continue
            except Exception as e:  # an adapter bug must cost one request, not the run
                reject(f"internal error: {type(e).__name__}: {e}", raw, number, where)
                continue
            # The contract is specwatch's own parser: what it would reject is not written.
            _, rejections = parser.parse(encoded)
            if rejections:
                reject(f"adapted event is not valid telemetry v1: {rejections[0].reason}", raw,
                       number, where)
                continue
            write(encoded + b"\n")
            summary.adapted += 1
            if NOTE_KEY in event:
                summary.ts_defaulted += 1
    return summary


@contextmanager
def open_lines(path: str) -> Iterator[Iterable[bytes]]:
    """Lines of ``path`` (``-`` for stdin, ``.gz`` decompressed)."""
    if path == "-":
        yield sys.stdin.buffer
        return
    fh: IO[bytes] = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")  # noqa: SIM115
    with fh:
        yield fh


@contextmanager
def open_out(path: str) -> Iterator[IO[bytes]]:
    """Where events go (``-`` for stdout, ``.gz`` compressed); an existing file is replaced."""
    if path == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    fh: IO[bytes] = gzip.open(path, "wb") if path.endswith(".gz") else open(path, "wb")  # noqa: SIM115
    with fh:
        yield fh
