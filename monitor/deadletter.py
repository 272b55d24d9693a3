"""Dead-letter destinations: rejected input with its reason, never silently lost."""

from __future__ import annotations

import base64
import gzip
import hashlib
import sys
import time
from typing import IO, Any, Protocol

import orjson

from monitor.exceptions import SpecwatchError
from monitor.telemetry.event import Rejection

FLUSH_TIMEOUT_S = 30.0


class DeadLetterUnavailableError(SpecwatchError):
    """The dead-letter destination did not take records (the broker is unreachable, say).

    The checkpoint that needed them durable is not written: the stretch is read again.
    """


def dead_letter_record(
    rejection: Rejection, origin: dict[str, Any], max_raw_bytes: int | None = None
) -> dict[str, Any]:
    """The JSON record for one rejection.

    ``raw`` is kept as text when it is valid UTF-8, else as base64 in ``raw_base64``. Input
    larger than ``max_raw_bytes`` is cut, and ``raw_sha256``/``raw_bytes`` plus the origin
    (topic, partition, offset) point at the full original.
    """
    raw = rejection.raw
    record: dict[str, Any] = {
        "reason": rejection.reason,
        "origin": origin | ({"index": rejection.index} if rejection.index is not None else {}),
        "raw_bytes": len(raw),
        "at": time.time(),
    }
    if max_raw_bytes is not None and len(raw) > max_raw_bytes:
        record["raw_sha256"] = hashlib.sha256(raw).hexdigest()
        record["truncated"] = True
        raw = raw[:max_raw_bytes]
    try:
        record["raw"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        record["raw_base64"] = base64.b64encode(raw).decode("ascii")
    return record


class DeadLetterSink(Protocol):
    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class FileDeadLetter:
    """JSON lines to a file (``.gz`` compressed), or to stderr for ``-``.

    ``max_raw_bytes``: input longer than that is cut as on the dead-letter topic
    (:func:`dead_letter_record`: the record keeps the original size and sha256), so a huge
    line is neither copied whole into the file nor held as text and JSON beside itself.
    """

    def __init__(self, path: str, *, max_raw_bytes: int | None = None) -> None:
        self.path = path
        self.max_raw_bytes = max_raw_bytes
        self.count = 0
        self._fh: IO[bytes]
        try:
            if path == "-":
                self._fh = sys.stderr.buffer
            elif path.endswith(".gz"):
                self._fh = gzip.open(path, "ab")
            else:
                self._fh = open(path, "ab")  # noqa: SIM115 - closed in close()
        except OSError as e:  # before anything is read: one line, nothing lost
            raise SpecwatchError(f"cannot write the dead-letter file {path}: "
                                 f"{e.strerror or e}") from e

    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None:
        record = dead_letter_record(rejection, origin, self.max_raw_bytes)
        self._fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self.count += 1

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self.flush()
        if self.path != "-":
            self._fh.close()


class CountingDeadLetter:
    """Keeps nothing but a count: for a replay run without ``--dead-letter``."""

    def __init__(self) -> None:
        self.count = 0

    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None:
        self.count += 1

    def flush(self) -> None:
        return  # nothing is buffered: the count is all there is

    def close(self) -> None:
        self.flush()


class KafkaDeadLetter:
    """Produces records to the dead-letter topic; ``flush()`` before offsets are stored.

    Delivery is at-least-once: a crash, or a checkpoint that fails, between the flush and
    the commit re-sends the rejections of the uncommitted stretch. ``flush()`` raises
    :class:`DeadLetterUnavailableError` unless every record sent since the last flush was
    acknowledged within ``flush_timeout`` seconds, so offsets never pass a lost rejection.
    """

    def __init__(self, producer: Any, topic: str, max_raw_bytes: int,
                 flush_timeout: float = FLUSH_TIMEOUT_S) -> None:
        self.producer = producer
        self.topic = topic
        self.max_raw_bytes = max_raw_bytes
        self.flush_timeout = flush_timeout
        self.count = 0
        self._sent: list[Any] = []  # futures since the last flush

    def send(self, rejection: Rejection, origin: dict[str, Any]) -> None:
        record = dead_letter_record(rejection, origin, self.max_raw_bytes)
        key = origin.get("key")
        try:
            self._sent.append(self.producer.send(
                self.topic, key=key.encode("utf-8") if key is not None else None,
                value=orjson.dumps(record),
            ))
        except Exception as e:  # kafka-python: no metadata or buffer within max_block_ms
            self._refused(e)
            raise DeadLetterUnavailableError(f"dead letter not sent to {self.topic}: {e}") from e
        self.count += 1

    def flush(self) -> None:
        sent, self._sent = self._sent, []
        try:
            self.producer.flush(timeout=self.flush_timeout)
        except Exception as e:
            raise DeadLetterUnavailableError(
                f"dead letters not flushed to {self.topic} in {self.flush_timeout:g}s: {e}"
            ) from e
        failed = [f for f in sent if f.failed()]
        if failed:
            self._refused(failed[0].exception)
            raise DeadLetterUnavailableError(
                f"{len(failed)} dead letters not taken by {self.topic}: {failed[0].exception}"
            ) from failed[0].exception

    def _refused(self, cause: BaseException) -> None:
        """Stop on what waiting cannot fix (no authorization for the topic, say): the
        checkpoints would otherwise wait for the dead-letter topic forever."""
        # Here, not at the top: a replay writes its dead letters to a file and should not
        # import kafka-python (150 modules, a sixth of its start-up) to do it.
        from monitor.sources.kafka_errors import config_error

        error = config_error(cause, f"dead-letter topic {self.topic}")
        if error is not None:
            raise error from cause

    def close(self) -> None:
        self.producer.flush()
