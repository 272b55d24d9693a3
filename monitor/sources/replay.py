"""The replay input: a telemetry file (JSON lines, optionally gzip) read in event time.

Each line is one message, exactly as a Kafka record value would be. The whole file runs
through the same pipeline as the daemon, as fast as it can, so a replay is the backtest and
the benchmark path. Progress is stored under a source id (default ``replay``) as a running
line count: a second file replayed into the same database continues the first one's
event-time and dedup state, as if the two were one stream.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import IO, Any

from monitor.deadletter import DeadLetterSink
from monitor.eventtime import FixedNow, Lookahead, Parsed, PlausibleTime, newest_time
from monitor.pipeline import HOLD_EVENTS, IngestSummary, Pipeline
from monitor.sources.exceptions import InputEndedEarlyError, ReplayInputError
from monitor.telemetry.event import Rejection

PARTITION = 0
GZ_CHUNK = 1 << 20  # bytes read, and decompressed, at a time
DUE_EVERY = 16  # lines between two questions whether a checkpoint is due
CHUNK_LINES = 512  # lines counted in one Pipeline.process_many call


# What reading a file can raise: the OS (EIO, EISDIR), a truncated gzip stream (EOFError), a
# corrupt one (zlib.error).
_READ_ERRORS = (OSError, EOFError, zlib.error)


@dataclass(slots=True)
class ReplayInput:
    lines: Iterator[bytes]
    total_bytes: int | None
    position: Any  # () -> bytes consumed so far
    close: Any


def _reason(e: BaseException) -> str:
    return (e.strerror if isinstance(e, OSError) and e.strerror else str(e)) or type(e).__name__


def open_input(path: str) -> ReplayInput:
    """Lines of ``path`` (``-`` for stdin; ``.gz`` decompressed on the fly).

    :class:`ReplayInputError` when it cannot be opened: open it before anything is created.
    """
    if path == "-":
        if sys.stdin is None:  # started with stdin closed (``<&-``)
            raise ReplayInputError("stdin is closed: give a file, or pipe the telemetry in")
        stdin = sys.stdin.buffer
        return ReplayInput(iter(stdin), None, lambda: 0, lambda: None)
    try:
        raw: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed via ReplayInput.close
    except OSError as e:
        raise ReplayInputError(f"cannot read {path}: {_reason(e)}") from None
    total = os.fstat(raw.fileno()).st_size
    stream: Iterable[bytes] = _lines(_gunzip(raw)) if path.endswith(".gz") else raw
    return ReplayInput(iter(stream), total, raw.tell, raw.close)


def _gunzip(raw: IO[bytes], chunk: int = GZ_CHUNK) -> Iterator[bytes]:
    """The decompressed bytes of a gzip file (one member or several), piece by piece.

    Not :mod:`gzip`: its buffered reader drops what it decompressed in a read that then meets
    the end of a truncated file, up to a megabyte of good lines here. This hands out every
    byte that can be decompressed before raising :class:`EOFError`. Each piece is at most
    ``chunk`` bytes, whatever the compression ratio.
    """
    member = zlib.decompressobj(wbits=31)
    started = False  # input of the current member was read
    while data := raw.read(chunk):
        while data:
            started = True
            try:
                out = member.decompress(data, chunk)
            except zlib.error as e:
                raise zlib.error(f"not gzip data, or damaged ({e})") from None
            data = member.unconsumed_tail
            if out:
                yield out
            if member.eof:  # the next member, if any, starts in what is left
                data = member.unused_data.lstrip(b"\0")  # zero padding ends a file, as in gzip
                member, started = zlib.decompressobj(wbits=31), False
    if started:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")


def _lines(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Lines (without their newline) of a stream handed out in pieces. A long line's
    pieces are joined once, when it ends: never copied again and again as it grows."""
    pending: list[bytes] = []
    for piece in pieces:
        parts = piece.split(b"\n")
        if len(parts) == 1:
            pending.append(piece)
            continue
        pending.append(parts[0])
        yield b"".join(pending)
        pending = []
        yield from parts[1:-1]
        if parts[-1]:
            pending.append(parts[-1])
    if pending:
        yield b"".join(pending)


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


def replay(path: str, pipeline: Pipeline, *, progress: bool | None = None,
           src: ReplayInput | None = None, now: float | None = None) -> IngestSummary:
    """Run every line of ``path`` through ``pipeline`` and checkpoint at the end.

    Events too far in the future are judged against the newest plausible time of the file
    (lines are read a few ahead for it), or against ``now`` when given (``--now``).

    ``src``: ``path`` already opened (:func:`open_input`; closed here). When the input
    breaks off, the lines read before the break are committed and
    :class:`InputEndedEarlyError` says where it stopped.
    """
    src = src or open_input(path)
    resume = pipeline.assign([PARTITION])
    base = resume.get(PARTITION) or 0
    pipeline.dead_letter = _WithLine(pipeline.dead_letter, path, base)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _progress_bar(src.total_bytes) if show else None
    due, summary = pipeline.due, pipeline.summary
    wall_clock, hold_limit = pipeline.future, pipeline.hold_limit
    # lines' events reach detection a stretch at a time (flushed by every checkpoint)
    pipeline.hold_limit = HOLD_EVENTS
    ahead = _lookahead(pipeline, now)
    # The look-ahead's fast path, inline: this loop runs once per line, and a message within
    # the limit while nothing is held goes to the pipeline (see Lookahead.feed), a chunk of
    # lines at a time (Pipeline.process_many: the same as line by line, cheaper).
    rule, held, hold = ahead.rule, ahead.held, ahead.hold
    parse, process_many = pipeline.parser.parse, pipeline.process_many
    tracker = pipeline.tracker(PARTITION)
    offsets: list[int] = []
    lines: list[bytes] = []
    parsed_lines: list[Parsed] = []

    def flush() -> None:
        if offsets:
            process_many(PARTITION, offsets, lines, None, parsed_lines if rule else None)
            offsets.clear()
            lines.clear()
            parsed_lines.clear()

    offset = base
    started = last_draw = time.monotonic()
    reading = True  # False while a line is processed: tells a read error from the rest
    try:
        try:
            for line in src.lines:
                reading = False
                line = line.rstrip(b"\r\n")
                if not line or line.isspace():  # not line.strip(): no copy of each line
                    pass
                elif rule is None:
                    offsets.append(offset)
                    lines.append(line)
                else:
                    parsed = parse(line)
                    events = parsed[0]
                    newest = events[0].ts if len(events) == 1 else newest_time(events)
                    # The chunk is not counted yet, so tracker.max_ts may lag behind what
                    # this line would meet: a line it cannot clear counts the chunk first.
                    if held or (newest is not None and newest > tracker.max_ts + rule.skew):
                        flush()
                    if held or (newest is not None and newest > tracker.max_ts + rule.skew):
                        hold(offset, line, parsed, newest)
                    else:
                        offsets.append(offset)
                        lines.append(line)
                        parsed_lines.append(parsed)
                offset += 1
                if len(offsets) >= CHUNK_LINES:
                    flush()
                # Asked every DUE_EVERY lines, not each: a call and a clock read per line
                # showed in the profile, and a checkpoint a few lines late changes nothing.
                if not offset % DUE_EVERY and due():
                    flush()
                    pipeline.checkpoint()
                    if bar is not None and time.monotonic() - last_draw > 0.2:
                        last_draw = time.monotonic()
                        _draw(bar, src.position(), summary.events, last_draw - started)
                reading = True
        except _READ_ERRORS as e:
            if not reading:
                raise
            read = offset - base
            if not read:
                raise ReplayInputError(f"cannot read {path}: {_reason(e)}") from e
            flush()
            ahead.drain()
            pipeline.checkpoint()  # what was read is good: keep it
            raise InputEndedEarlyError(
                f"{path}: input ended early at line {read + 1:,}: {_reason(e)}; the {read:,} "
                f"lines before it were committed ({summary.line()})"
            ) from e
        flush()
        ahead.drain()
        pipeline.checkpoint()
        if bar is not None:
            _draw(bar, src.position(), summary.events, time.monotonic() - started)
    finally:
        if bar is not None:
            bar.close()
        src.close()
        pipeline.dead_letter = pipeline.dead_letter.sink  # type: ignore[attr-defined]
        pipeline.future = wall_clock
        # the last checkpoint observed what was held; after an error nothing held may outlive
        # the replay (a re-read from the stored offsets brings it again)
        pipeline.drop_held()
        pipeline.hold_limit = hold_limit
    return summary


def _lookahead(pipeline: Pipeline, now: float | None) -> Lookahead:
    """Set ``pipeline``'s future rule for a file (it has no wall clock of its own); the
    reader feeds lines through the returned :class:`Lookahead`."""
    skew = pipeline.config.max_future_skew
    if now is not None:
        pipeline.future = FixedNow(now, skew)
        return Lookahead(None, pipeline.parser.parse, pipeline.process, PARTITION)
    rule = PlausibleTime(skew, pipeline.config.allowed_lateness)
    pipeline.future = rule
    return Lookahead(rule, pipeline.parser.parse, pipeline.process, PARTITION,
                     newest=partial(pipeline.newest, PARTITION))


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
