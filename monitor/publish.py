"""Send telemetry v1 events to Kafka from engine-side code, without ever holding it up.

::

    pub = Publisher("127.0.0.1:9092", "specwatch.telemetry")
    pub.publish({"request_id": "r-1", "ts": time.time(), "route": "chat", ...})  # -> bool
    ...
    pub.close()

``publish`` validates the event with specwatch's own parser (an event the daemon would
reject is dropped here, with the parser's reason), serialises it and appends it to a
bounded buffer; it never blocks on the network and never raises. A background thread owns
the Kafka producer, created lazily so that a broker that is down at start delays nothing.
It batches events per route, up to ``batch_max_events`` / ``batch_max_bytes`` or
``linger_s``, into one message holding a JSON array (one object when the batch has one
event), keyed by the route so that every event of a route lands in one partition, as
telemetry v1 asks of producers.

While Kafka is unreachable the events stay buffered and are retried with a growing pause; the
buffer holds at most ``max_buffer`` events in total (queued, batched and in flight), so
memory stays bounded. When it is full, ``publish`` drops the *new* event and returns False:
the caller learns exactly which event was lost, and what is buffered stays in event order.
(Dropping the oldest instead would keep fresher data, but an outage longer than the buffer
leaves a gap in the route's history either way.) A message the broker failed to take with a
retriable error goes back into the buffer: the daemon drops duplicates by ``request_id``, so
sending an event twice is harmless, losing it is not.

Every drop is counted by reason (``specwatch_publisher_dropped_total{reason}`` on the
registry passed in, and ``dropped`` / ``dropped_by_reason`` here) and logged as a
WARNING at most once per ``warn_interval_s`` per reason, with the count since the last one:

- ``invalid``: not a telemetry v1 event (the parser's reason is logged), or too large;
- ``unserialisable``: not JSON-serialisable, or not a mapping;
- ``buffer_full``: ``max_buffer`` events already waiting (Kafka down or too slow);
- ``closed``: published after ``close()``, or still unsent when ``close()`` gave up;
- ``send_failed``: the broker refused the message with an error retrying cannot fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client import Counter as PromCounter

from monitor.kafka_producer import (
    batch_value,
    close_producer,
    make_producer,
    publisher_settings,
    route_key,
)
from monitor.telemetry.parse import Parser

__all__ = ["DROP_REASONS", "Publisher", "PublisherMetrics", "WarnLimiter"]

log = logging.getLogger(__name__)

DROP_REASONS = ("invalid", "unserialisable", "buffer_full", "closed", "send_failed")

_BACKOFF_MIN_S = 0.2
_BACKOFF_MAX_S = 5.0


class WarnLimiter:
    """Rate limit for a WARNING: at most one per key per ``interval_s``, reporting how many
    occurrences it stands for.

    >>> w = WarnLimiter(60.0)
    >>> w.due("full"), w.due("full"), w.due("full", 5), w.due("invalid")
    (1, 0, 0, 1)
    """

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._at: dict[str, float] = {}
        self._unreported: Counter[str] = Counter()

    def due(self, key: str, count: int = 1) -> int:
        """Count ``count`` occurrences of ``key``; how many to report now (0: stay quiet)."""
        now = time.monotonic()
        with self._lock:
            self._unreported[key] += count
            last = self._at.get(key)
            if last is not None and now - last < self.interval_s:
                return 0
            self._at[key] = now
            return self._unreported.pop(key)


class PublisherMetrics:
    """The publisher's counters, on the registry passed in.

    >>> m = PublisherMetrics(CollectorRegistry())
    >>> m.dropped.labels(reason="buffer_full").inc()
    >>> m.registry.get_sample_value("specwatch_publisher_dropped_total",
    ...                             {"reason": "buffer_full"})
    1.0
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.sent = PromCounter(
            "specwatch_publisher_sent", "Telemetry events the broker acknowledged.",
            registry=registry,
        )
        self.dropped = PromCounter(
            "specwatch_publisher_dropped",
            "Telemetry events given up, by reason: invalid, unserialisable, buffer_full, "
            "closed, send_failed.",
            ["reason"], registry=registry,
        )
        for reason in DROP_REASONS:  # every reason exported from the start, at 0
            self.dropped.labels(reason=reason)
        self.messages = PromCounter(
            "specwatch_publisher_messages", "Kafka messages (per-route batches) acknowledged.",
            registry=registry,
        )
        self.buffered = Gauge(
            "specwatch_publisher_buffered_events",
            "Events accepted and not yet acknowledged or dropped.", registry=registry,
        )


@dataclass(slots=True)
class _Batch:
    items: list[bytes] = field(default_factory=list)
    size: int = 2  # the array's brackets
    since: float = 0.0


@dataclass(slots=True)
class _Message:
    route: str
    value: bytes
    count: int


class Publisher:
    """Batched, route-keyed, never-blocking telemetry producer (see the module doc).

    Parameters
    ----------
    bootstrap_servers, topic
        Where events go.
    max_buffer
        Events accepted and not yet acknowledged, at most; more are dropped (``buffer_full``).
    registry
        Prometheus registry for :class:`PublisherMetrics`; None counts only on this object.
    batch_max_events, batch_max_bytes, linger_s
        A route's batch is sent when it holds this many events, would pass this many bytes,
        or its oldest event has waited this long.
    max_message_bytes
        Events larger than this are dropped as invalid (the daemon's
        ``ingest.max_message_bytes`` would reject them).
    create_topic, partitions
        Create the topic (with this many partitions) once the broker answers.
    connect_timeout_s
        How long one attempt to reach the broker may take (in the background thread).
    warn_interval_s
        At most one drop WARNING per reason per this many seconds.
    producer_config
        Extra ``KafkaProducer`` settings (override the defaults chosen here).
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str = "specwatch.telemetry",
        *,
        max_buffer: int = 10000,
        registry: CollectorRegistry | None = None,
        batch_max_events: int = 500,
        batch_max_bytes: int = 900_000,
        linger_s: float = 0.05,
        max_message_bytes: int = 1 << 20,
        create_topic: bool = True,
        partitions: int = 4,
        client_id: str = "specwatch-publisher",
        connect_timeout_s: float = 2.0,
        warn_interval_s: float = 30.0,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        if max_buffer < 1:
            raise ValueError(f"max_buffer must be >= 1, got {max_buffer}")
        if batch_max_events < 1:
            raise ValueError(f"batch_max_events must be >= 1, got {batch_max_events}")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.max_buffer = max_buffer
        self.batch_max_events = batch_max_events
        self.batch_max_bytes = batch_max_bytes
        self.linger_s = linger_s
        self.create_topic = create_topic
        self.partitions = partitions
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.warn_interval_s = warn_interval_s
        self.metrics = PublisherMetrics(registry) if registry is not None else None
        self._producer_config = dict(producer_config or {})
        self._parser = Parser(max_message_bytes)

        self._cond = threading.Condition()
        # guarded by _cond
        self._queue: deque[tuple[str, bytes]] = deque()
        self._requeued: deque[_Message] = deque()
        self._pending = 0  # accepted, not yet acknowledged nor dropped
        self._sent = 0
        self._lost = 0  # accepted, then dropped (closed / send_failed)
        self._dropped: Counter[str] = Counter()
        self._flushing = 0
        self._closed = False  # publish refuses
        self._stopping = False  # the worker gives up what it holds and ends

        self._warnings = WarnLimiter(warn_interval_s)

        self._worker = _Worker(self)
        self._thread = threading.Thread(target=self._worker.run, name="specwatch-publisher",
                                        daemon=True)
        self._thread.start()

    # --- the caller's side ----------------------------------------------------------------

    def publish(self, event: Mapping[str, Any]) -> bool:
        """Queue one telemetry v1 event; False (and counted) when it was dropped.

        Never blocks on Kafka and never raises.
        """
        try:
            if self._closed:
                self._drop("closed", "the publisher is closed")
                return False
            if not isinstance(event, Mapping):
                self._drop("unserialisable",
                           f"an event must be a mapping, got {type(event).__name__}")
                return False
            try:
                data = orjson.dumps(event if type(event) is dict else dict(event))
            except (TypeError, ValueError) as e:  # orjson.JSONEncodeError is a TypeError
                self._drop("unserialisable", str(e))
                return False
            events, rejections = self._parser.parse(data)
            if rejections or len(events) != 1:
                reason = rejections[0].reason if rejections else "not one event"
                self._drop("invalid", reason)
                return False
            route = events[0].route
            with self._cond:
                if self._closed:
                    full = None
                elif self._pending >= self.max_buffer:
                    full = True
                else:
                    full = False
                    self._queue.append((route, data))
                    self._pending += 1
                    if len(self._queue) == 1:
                        self._cond.notify_all()
            if full is None:
                self._drop("closed", "the publisher is closed")
                return False
            if full:
                self._drop("buffer_full", f"{self.max_buffer} events already buffered "
                           f"({self._worker.state})")
                return False
            if self.metrics is not None:
                self.metrics.buffered.inc()
            return True
        except Exception as e:  # noqa: BLE001 - the caller's request must never fail here
            self._drop("invalid", f"internal error: {type(e).__name__}: {e}")
            return False

    def flush(self, timeout: float = 10.0) -> bool:
        """Send everything buffered now; True once all of it was acknowledged (and none of
        it given up) within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            lost_before = self._lost
            self._flushing += 1
            self._cond.notify_all()
            try:
                while self._pending > 0:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                return self._pending == 0 and self._lost == lost_before
            finally:
                self._flushing -= 1

    def close(self, timeout: float = 10.0) -> None:
        """Refuse new events, try for ``timeout`` seconds to deliver what is buffered, then
        drop the rest (counted as ``closed``) and stop the producer."""
        with self._cond:
            if self._stopping:
                return
            self._closed = True
        deadline = time.monotonic() + timeout
        self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(max(0.5, deadline - time.monotonic()) + 5.0)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def sent(self) -> int:
        """Events the broker acknowledged."""
        return self._sent

    @property
    def dropped(self) -> int:
        """Events given up, for any reason."""
        return sum(self._dropped.values())

    @property
    def dropped_by_reason(self) -> dict[str, int]:
        return dict(self._dropped)

    @property
    def buffered(self) -> int:
        """Events accepted and not yet acknowledged or dropped."""
        return self._pending

    @property
    def connected(self) -> bool:
        """Whether the last attempt to reach the broker succeeded."""
        return self._worker.state == "connected"

    # --- accounting (any thread) ----------------------------------------------------------

    def _drop(self, reason: str, detail: str, count: int = 1) -> None:
        with self._cond:
            self._dropped[reason] += count
        if self.metrics is not None:
            self.metrics.dropped.labels(reason=reason).inc(count)
        self._warn(reason, detail, count)

    def _warn(self, reason: str, detail: str, count: int) -> None:
        n = self._warnings.due(reason, count)
        if not n:
            return
        log.warning("telemetry publisher dropped %d event(s) (%s) since the last warning: %s; "
                    "%d dropped in all, topic %s at %s", n, reason, detail, self.dropped,
                    self.topic, self.bootstrap_servers)

    def _resolved(self, count: int, *, sent: bool) -> None:
        """``count`` accepted events are done: acknowledged, or lost after acceptance."""
        with self._cond:
            self._pending -= count
            if sent:
                self._sent += count
            else:
                self._lost += count
            if self._pending == 0 or self._flushing:
                self._cond.notify_all()
        if self.metrics is not None:
            self.metrics.buffered.dec(count)
            if sent:
                self.metrics.sent.inc(count)
                self.metrics.messages.inc()


class _Worker:
    """The background thread: batches, (re)connects, sends, and takes failed messages back."""

    def __init__(self, pub: Publisher) -> None:
        self.pub = pub
        self.state = "not connected yet"
        self._producer: Any = None
        self._batches: dict[str, _Batch] = {}
        self._outbox: deque[_Message] = deque()
        self._inflight: dict[int, _Message] = {}
        self._inflight_lock = threading.Lock()
        self._retry_at = 0.0
        self._backoff = _BACKOFF_MIN_S
        self._down_since: float | None = None
        # Metadata for the topic did not come: a broker restarted without it (or it was
        # deleted); create it again before the next try.
        self._topic_missing = False

    def run(self) -> None:
        pub = self.pub
        try:
            while True:
                with pub._cond:
                    while not self._work_now():
                        pub._cond.wait(self._wait_s())
                    items = list(pub._queue)
                    pub._queue.clear()
                    requeued = list(pub._requeued)
                    pub._requeued.clear()
                    stopping, flushing = pub._stopping, pub._flushing > 0
                # a failed message goes back before everything newer of its route
                self._outbox.extendleft(reversed(requeued))
                for route, data in items:
                    self._add(route, data)
                if stopping:
                    break
                self._cut(force=flushing)
                if self._outbox and time.monotonic() >= self._retry_at:
                    self._send_outbox()
        except Exception:  # noqa: BLE001 - say why the thread ends, never take the process
            log.exception("telemetry publisher thread failed; events are no longer sent")
        finally:
            self._stop()

    def _work_now(self) -> bool:
        """Whether there is something to do now (called holding the publisher's lock)."""
        pub = self.pub
        if pub._queue or pub._requeued or pub._stopping:
            return True
        now = time.monotonic()
        if self._outbox and now >= self._retry_at:
            return True
        if self._batches and (pub._flushing or min(b.since for b in self._batches.values())
                              + pub.linger_s <= now):
            return True
        return False

    def _wait_s(self) -> float:
        now = time.monotonic()
        waits = [5.0]
        if self._batches:
            oldest = min(b.since for b in self._batches.values())
            waits.append(oldest + self.pub.linger_s - now)
        if self._outbox:
            waits.append(self._retry_at - now)
        return max(0.001, min(waits))

    def _add(self, route: str, data: bytes) -> None:
        pub = self.pub
        batch = self._batches.get(route)
        if batch is not None and batch.size + len(data) + 1 > pub.batch_max_bytes:
            self._outbox.append(_message(route, self._batches.pop(route)))
            batch = None
        if batch is None:
            batch = self._batches[route] = _Batch(since=time.monotonic())
        batch.items.append(data)
        batch.size += len(data) + 1
        if len(batch.items) >= pub.batch_max_events:
            self._outbox.append(_message(route, self._batches.pop(route)))

    def _cut(self, force: bool) -> None:
        """Move batches whose linger is over (all of them when ``force``) to the outbox."""
        if not self._batches:
            return
        due = time.monotonic() - self.pub.linger_s
        for route in [r for r, b in self._batches.items() if force or b.since <= due]:
            self._outbox.append(_message(route, self._batches.pop(route)))

    # --- Kafka --------------------------------------------------------------------------------

    def _connect(self) -> bool:
        if self._producer is not None:
            return True
        pub = self.pub
        settings = publisher_settings(pub.connect_timeout_s, pub.batch_max_bytes)
        try:
            self._producer = make_producer(pub.bootstrap_servers, pub.client_id, settings,
                                           pub._producer_config)
        except Exception as e:  # noqa: BLE001 - NoBrokersAvailable, KafkaTimeoutError, DNS, ...
            self._unreachable(e)
            return False
        self._ensure_topic()
        self._reachable()
        return True

    def _ensure_topic(self) -> None:
        pub = self.pub
        self._topic_missing = False
        if not pub.create_topic:
            return
        from monitor.sources.topics import ensure_topics

        try:
            ensure_topics(pub.bootstrap_servers, [pub.topic], partitions=pub.partitions)
        except Exception as e:  # noqa: BLE001 - the broker may auto-create, or the topic exist
            log.warning("telemetry publisher could not create topic %s: %s", pub.topic,
                        _describe(e))

    def _unreachable(self, error: BaseException) -> None:
        now = time.monotonic()
        self._retry_at = now + self._backoff
        self._backoff = min(_BACKOFF_MAX_S, self._backoff * 2)
        if self._down_since is None:
            self._down_since = now
            log.warning("telemetry publisher: Kafka at %s unreachable (%s); buffering up to %d "
                        "events and retrying", self.pub.bootstrap_servers,
                        _describe(error), self.pub.max_buffer)
        self.state = (f"Kafka at {self.pub.bootstrap_servers} unreachable for "
                      f"{now - self._down_since:.0f}s: {_describe(error)}")

    def _reachable(self) -> None:
        self._backoff = _BACKOFF_MIN_S
        if self._down_since is not None:
            log.info("telemetry publisher: Kafka at %s reachable again after %.0fs",
                     self.pub.bootstrap_servers, time.monotonic() - self._down_since)
            self._down_since = None
        self.state = "connected"

    def _send_outbox(self) -> None:
        if not self._connect():
            return
        from kafka.errors import KafkaTimeoutError

        pub = self.pub
        if self._topic_missing:
            self._ensure_topic()
        while self._outbox:
            msg = self._outbox[0]
            try:
                future = self._producer.send(pub.topic, key=route_key(msg.route),
                                             value=msg.value)
            except KafkaTimeoutError as e:  # no metadata, or the producer's buffer is full
                self._topic_missing = True
                self._unreachable(e)
                return
            except Exception as e:  # noqa: BLE001 - too large, closed producer: retrying won't help
                self._outbox.popleft()
                pub._drop("send_failed", _describe(e), msg.count)
                pub._resolved(msg.count, sent=False)
                continue
            self._outbox.popleft()
            with self._inflight_lock:
                self._inflight[id(msg)] = msg
            future.add_callback(self._acked, msg)
            future.add_errback(self._failed, msg)

    def _take(self, msg: _Message) -> bool:
        with self._inflight_lock:
            return self._inflight.pop(id(msg), None) is not None

    def _acked(self, msg: _Message, _metadata: Any) -> None:
        if self.state != "connected":
            self._reachable()
        if self._take(msg):
            self.pub._resolved(msg.count, sent=True)

    def _failed(self, msg: _Message, error: BaseException) -> None:
        if not self._take(msg):
            return
        pub = self.pub
        if getattr(error, "retriable", False):
            with pub._cond:
                if not pub._stopping:
                    pub._requeued.append(msg)
                    pub._cond.notify_all()
                    self.state = f"Kafka at {pub.bootstrap_servers} failing: {_describe(error)}"
                    return
            pub._drop("closed", "the publisher closed before the broker took the message",
                      msg.count)
        else:
            pub._drop("send_failed", _describe(error), msg.count)
        pub._resolved(msg.count, sent=False)

    def _stop(self) -> None:
        """Give up what is still held (counted as ``closed``) and close the producer."""
        pub = self.pub
        producer, self._producer = self._producer, None
        if producer is not None:
            close_producer(producer, 2.0, log, "telemetry publisher")
        with pub._cond:
            pub._stopping = pub._closed = True
            held = sum(len(b.items) for b in self._batches.values())
            held += sum(m.count for m in self._outbox) + sum(m.count for m in pub._requeued)
            held += len(pub._queue)
            pub._queue.clear()
            pub._requeued.clear()
        with self._inflight_lock:
            held += sum(m.count for m in self._inflight.values())
            self._inflight.clear()
        self._batches.clear()
        self._outbox.clear()
        if held:
            pub._drop("closed", "still unsent when the publisher closed", held)
            pub._resolved(held, sent=False)


def _message(route: str, batch: _Batch) -> _Message:
    return _Message(route, batch_value(batch.items), len(batch.items))


def _describe(error: BaseException) -> str:
    name, text = type(error).__name__, str(error)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"
