"""The daemon's input: one member of a Kafka consumer group.

Offsets live in the store, written in the same transaction as the rollups they produced.
On assignment the consumer seeks to them, so Kafka's own committed offsets are advisory
(kept for lag tooling) and a crash at any moment replays exactly the uncommitted stretch.

Outages. When a checkpoint cannot be made durable (the store is unreachable:
``StoreUnavailableError``; or the dead-letter topic does not take the rejections:
``DeadLetterUnavailableError``) the source does what a crash would, without the crash: the
pipeline drops everything uncommitted, and every owned partition is paused (the
backpressure: nothing more is fetched, memory stays bounded) while ``poll()`` goes on, so the
group membership stays alive. The store is probed with capped exponential backoff; once it
answers, every owned partition is reloaded from it and sought back to its stored offset, and
fetching resumes. Offsets move only in the transaction that holds the data, so nothing is
lost; the stretch read again meets the stored dedup state, so nothing is counted twice. A
commit that landed although the client saw it fail (the ambiguous commit) is covered by the
same reload.

Broker outages. kafka-python reconnects and the group rejoins on its own (a rejoin revokes
and re-assigns, which reloads from the store), but some of its errors escape ``poll()`` on the
way (``KafkaConnectionError`` from the coordinator lookup when connections are reset, say).
Such an error is handled here: polling goes on after a capped exponential backoff, every owned
partition first sought back to where the pipeline stands (the failed poll may have taken
records it never returned). Only an error retrying
cannot fix (see :mod:`monitor.sources.kafka_errors`: bad credentials, no authorization)
stops the source, as a :class:`BrokerConfigError`. :meth:`KafkaSource.broker_up` reports
whether a broker answered recently, for ``/readyz`` and ``specwatch_broker_up``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from monitor.config import KafkaConfig
from monitor.deadletter import DeadLetterUnavailableError
from monitor.pipeline import HOLD_EVENTS, Pipeline
from monitor.sources.kafka_errors import config_error, describe, startup_error
from monitor.store.exceptions import StoreUnavailableError

log = logging.getLogger(__name__)


IDLE_POLLS = 3  # empty polls in a row that mean nothing is left to read
PROBE_MIN_S = 0.5  # first wait before probing an unavailable store; doubles up to the max
PROBE_MAX_S = 10.0
RETRY_MIN_S = 0.25  # first wait after a client error escaped poll(); doubles up to the max
RETRY_MAX_S = 5.0  # well inside max_poll_interval_ms: the membership outlives the wait
BROKER_SILENCE_MIN_S = 5.0  # the broker counts as down after this long without an answer

# What makes a checkpoint impossible for now; anything else is a bug and propagates.
OUTAGES = (StoreUnavailableError, DeadLetterUnavailableError)


def source_id(config: KafkaConfig) -> str:
    """The name a consumer group's progress is stored under."""
    return f"kafka:{config.group_id}:{config.topic}"


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Runs inside poll(): a bounded checkpoint of what we have, then let go.
        try:
            self.source.pipeline.revoke(tp.partition for tp in revoked)
        except OUTAGES as e:
            # Not raised into kafka-python (it would fail the whole poll): the outage state
            # takes over, and the stretch goes to whoever owns the partitions next.
            self.source.outage(e)
        log.info("partitions revoked: %s", sorted(tp.partition for tp in revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        source = self.source
        if source.in_outage:
            source.pause_all()  # the recovery probe reloads them with the others
        else:
            try:
                source.resume(assigned)
            except OUTAGES as e:
                source.outage(e)
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))


class _Outage:
    """Backoff state while checkpoints are impossible."""

    def __init__(self, cause: Exception, now: float, delay: float) -> None:
        self.cause = cause
        self.since = now
        self.delay = delay
        self.next_probe = now + delay


class _ClientErrors:
    """Backoff state while Kafka client errors escape poll()."""

    def __init__(self, now: float, delay: float) -> None:
        self.since = now
        self.delay = delay
        self.retry_at = now + delay
        self.count = 0


class KafkaSource:
    """Polls the telemetry topic and feeds the pipeline, checkpointing as it goes."""

    def __init__(
        self,
        config: KafkaConfig,
        pipeline: Pipeline,
        *,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        probe: Callable[[], None] | None = None,
        probe_backoff: tuple[float, float] = (PROBE_MIN_S, PROBE_MAX_S),
        retry_backoff: tuple[float, float] = (RETRY_MIN_S, RETRY_MAX_S),
    ) -> None:
        """``probe`` checks that the store answers (``Store.ping``) when no partition is
        owned; with partitions, reloading them is the probe."""
        self.config = config
        self.pipeline = pipeline
        pipeline.hold_limit = HOLD_EVENTS  # a poll's events to detection at once
        self._probe = probe
        self.probe_backoff = probe_backoff
        self._outage: _Outage | None = None
        # Partitions without a stored offset: the first offset read since, where a re-read
        # after a failed checkpoint starts (the consumer's position is past it by then).
        self._first_read: dict[int, int] = {}
        # Heartbeats and fetch long-polls answer at least this often while the broker lives.
        self.broker_silence_s = max(BROKER_SILENCE_MIN_S,
                                    3 * config.heartbeat_interval_ms / 1000)
        self._broker_up = False
        self.retry_backoff = retry_backoff
        self._client_error: _ClientErrors | None = None  # errors escaped poll(), in a row
        self._reload_due = False  # owned partitions to seek back before the next poll
        try:
            self.consumer = self._consumer(consumer_factory)
        except KafkaError as e:  # before anything is consumed: stopping loses nothing
            raise startup_error(e, f"Kafka at {config.bootstrap_servers}") from e
        self.consumer.subscribe([config.topic], listener=_Rebalance(self))
        self._empty_polls = 0
        pipeline.metrics.watch_broker(self.broker_up)

    def _consumer(self, factory: Callable[..., KafkaConsumer]) -> KafkaConsumer:
        config = self.config
        return factory(
            bootstrap_servers=config.bootstrap_servers,
            group_id=config.group_id,
            client_id=config.client_id,
            enable_auto_commit=False,
            auto_offset_reset=config.auto_offset_reset,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            max_poll_records=config.max_poll_records,
            fetch_max_bytes=config.fetch_max_bytes,
            max_partition_fetch_bytes=config.fetch_max_bytes,
        )

    def resume(self, assigned: Iterable[TopicPartition], *, unread_from_start: bool = False
               ) -> None:
        """Load stored state for ``assigned`` and seek each partition to its stored offset
        (a partition held already: to where the pipeline stands). ``unread_from_start``: a
        partition never read nor stored goes back to its start if ``auto_offset_reset`` is
        ``earliest`` (a poll may have taken its first records and then raised)."""
        by_partition = {tp.partition: tp for tp in assigned}
        resume = self.pipeline.assign(by_partition)
        for p, tp in by_partition.items():
            offset = resume.get(p)
            if offset is None:
                offset = self._first_read.get(p)
            if offset is not None:
                self.consumer.seek(tp, offset)
            elif unread_from_start and self.config.auto_offset_reset == "earliest":
                self.consumer.seek_to_beginning(tp)

    def poll_once(self, timeout_ms: int = 200) -> int:
        """One poll: process what arrived and checkpoint when due. Returns records read."""
        if self._backing_off(timeout_ms):
            return 0
        if self._reload_due:
            self.reload()
        if self._outage is not None:
            self._poll_paused(timeout_ms)
            return 0
        batch = self._poll(timeout_ms)
        if batch is None or self._outage is not None:  # an error, or a rebalance inside
            return 0  # poll() met the outage
        pipeline = self.pipeline
        owned = set(pipeline.partitions)
        n = 0
        try:
            for tp, records in batch.items():
                p = tp.partition
                if p not in owned:
                    continue  # revoked while the fetch was in flight
                if p not in self._first_read and pipeline.next_offset(p) is None:
                    self._first_read[p] = records[0].offset
                # a partition's records counted at once: the same as one by one, cheaper
                pipeline.process_many(p, [r.offset for r in records],
                                      [r.value for r in records], [r.key for r in records])
                n += len(records)
            # the poll's events judged in one call, before the app's sweep or an operator's
            # action can come between them
            pipeline.observe_held()
        except DeadLetterUnavailableError as e:  # a rejection that could not be sent
            self.outage(e)
            return n
        self._empty_polls = 0 if n else self._empty_polls + 1
        if pipeline.due() or (not n and pipeline.pending):
            # caught up: nothing to amortise a pause over, so what was read is stored now
            self.checkpoint()
        return n

    # -- outages ---------------------------------------------------------------------------

    @property
    def in_outage(self) -> bool:
        return self._outage is not None

    @property
    def store_up(self) -> bool:
        return not isinstance(getattr(self._outage, "cause", None), StoreUnavailableError)

    def outage(self, cause: Exception) -> None:
        """A checkpoint or a load could not be done: drop, pause, and probe later."""
        metrics = self.pipeline.metrics
        store = isinstance(cause, StoreUnavailableError)
        (metrics.store_errors if store else metrics.dead_letter_errors).inc()
        now = time.monotonic()
        lo, hi = self.probe_backoff
        if self._outage is None:
            log.warning("%s: ingestion paused, uncommitted work dropped; it is read again "
                        "once %s", cause, "the store answers" if store else "it can be")
            self._outage = _Outage(cause, now, lo)
        else:
            outage = self._outage
            outage.cause = cause
            outage.delay = min(hi, outage.delay * 2)
            outage.next_probe = now + outage.delay
            log.info("still unavailable (%s); next try in %.1fs", cause, outage.delay)
        metrics.store_up.set(0 if store else 1)
        metrics.ingest_paused.set(1)
        self.pipeline.drop_all()
        self.pause_all()

    def pause_all(self) -> None:
        assigned = self.consumer.assignment()
        if assigned:
            self.consumer.pause(*assigned)

    def _poll_paused(self, timeout_ms: int) -> None:
        """Keep the membership alive without fetching; probe when the backoff says so."""
        if self._poll(timeout_ms) is None:  # heartbeats, rebalances; no records
            return
        self.pause_all()  # partitions assigned in that poll too
        outage = self._outage
        if outage is None or time.monotonic() < outage.next_probe:
            return
        try:
            assigned = self.consumer.assignment()
            if assigned:
                self.resume(assigned)  # reload from the store: this is the probe
            elif self._probe is not None:
                self._probe()
        except OUTAGES as e:
            self.outage(e)
            return
        self._outage = None
        self._reload_due = False  # the probe was the reload
        self._empty_polls = 0
        metrics = self.pipeline.metrics
        metrics.store_up.set(1)
        metrics.ingest_paused.set(0)
        paused = self.consumer.paused()
        if paused:
            self.consumer.resume(*paused)
        log.warning("recovered after %.1fs: %d partitions reloaded from the store, "
                    "ingestion resumed", time.monotonic() - outage.since, len(assigned))

    # -- client errors ---------------------------------------------------------------------

    def _poll(self, timeout_ms: int) -> dict[TopicPartition, list[Any]] | None:
        """``consumer.poll()``; ``None`` when a client error escaped it (handled here)."""
        try:
            batch = self.consumer.poll(timeout_ms=timeout_ms)
        except KafkaError as e:
            self.client_error(e)
            return None
        if self._client_error is not None:
            log.warning("the broker answers again after %.1fs and %d client errors; "
                        "consuming from the stored offsets", time.monotonic()
                        - self._client_error.since, self._client_error.count)
            self._client_error = None
        return batch

    def client_error(self, cause: KafkaError) -> None:
        """An error escaped the client: stop on a configuration error; else back off, and
        seek back to where the pipeline stands at the next poll (the failed poll may have
        taken records it never returned)."""
        error = config_error(cause, f"consuming {self.config.topic} from "
                                    f"{self.config.bootstrap_servers}")
        if error is not None:
            raise error from cause
        self.pipeline.metrics.broker_errors.inc()
        now = time.monotonic()
        lo, hi = self.retry_backoff
        errors = self._client_error
        if errors is None:
            errors = self._client_error = _ClientErrors(now, lo)
            log.warning("Kafka client error (%s); consuming again once the broker answers",
                        describe(cause), exc_info=not cause.retriable)
        else:
            errors.delay = min(hi, errors.delay * 2)
            log.info("Kafka client error again (%s); next try in %.1fs", describe(cause),
                     errors.delay)
        errors.count += 1
        errors.retry_at = now + errors.delay
        self._reload_due = self._outage is None  # in an outage its recovery reloads

    def restart_from_store(self) -> None:
        """What a restart would do, without one: forget everything uncommitted, and read
        every owned partition again from its stored offset (sought at the next poll)."""
        self.pipeline.drop_all()
        self._reload_due = self._outage is None

    def reload(self) -> None:
        """Seek every owned partition to where the pipeline stands, loading from the store
        those it does not hold (all of them after :meth:`restart_from_store`)."""
        self._reload_due = False
        try:
            self.resume(self.consumer.assignment(), unread_from_start=True)
        except OUTAGES as e:
            self.outage(e)

    def _backing_off(self, timeout_ms: int) -> bool:
        """Wait out (a slice of) the backoff after a client error; True while it lasts."""
        errors = self._client_error
        if errors is None:
            return False
        left = errors.retry_at - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, timeout_ms / 1000))  # a slice: stop() is seen within timeout_ms
        return True

    # -- the broker ------------------------------------------------------------------------

    def broker_up(self) -> bool:
        """Whether a broker connection is open and one answered within ``broker_silence_s``.

        kafka-python retries on its own and never reports an outage, so this reads when its
        open connections last received anything: the consumer's fetch long-polls and group
        heartbeats answer every second or so while a broker lives. Thread-safe enough for a
        scrape: it only reads; a race with the network thread keeps the last answer.
        """
        if self._client_error is not None:  # errors escape poll(): down, whatever is open
            self._broker_up = False
            return False
        try:
            conns = list(self.consumer._client._manager._conns.values())
            reads = [c.transport.last_read for c in conns
                     if c.connected and c.transport is not None]
        except (RuntimeError, AttributeError):  # the network thread changed them meanwhile
            return self._broker_up
        self._broker_up = bool(reads) and time.monotonic() - max(reads) <= self.broker_silence_s
        return self._broker_up

    def caught_up(self) -> bool:
        """Whether every owned partition has been read up to its last known high watermark.

        Silence is only judged when caught up: after downtime, a route's newest event in
        the store is old until the backlog is read, and that is not the route going quiet.
        Until every owned partition's high watermark is known (the first fetch brings it),
        only a few empty polls in a row count as caught up.
        """
        partitions = self.pipeline.partitions
        if not partitions:
            return False  # nothing assigned (yet): nothing here to judge
        if self._empty_polls >= IDLE_POLLS:
            return True
        for p in partitions:
            hw = self.consumer.highwater(TopicPartition(self.config.topic, p))
            if hw is None or (self.pipeline.next_offset(p) or 0) < hw:
                return False
        return True

    def checkpoint(self) -> None:
        if self._outage is not None:
            return  # nothing in memory: it was dropped when the outage began
        try:
            if self.pipeline.checkpoint():
                self._commit_advisory()
                return
            # Fenced: someone else wrote a partition's offset. Reload every owned partition
            # from the store and seek back; whatever we had in memory is gone.
            self.resume(self.consumer.assignment())
        except OUTAGES as e:
            self.outage(e)

    def _commit_advisory(self) -> None:
        offsets = {}
        for p in self.pipeline.partitions:
            nxt = self.pipeline.next_offset(p)
            if nxt is not None:
                offsets[TopicPartition(self.config.topic, p)] = OffsetAndMetadata(nxt, "", -1)
        if offsets:
            try:
                self.consumer.commit_async(offsets)
            except Exception as e:  # advisory only: the store holds the real offsets
                log.debug("advisory offset commit failed: %s", e)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll_once()

    def close(self) -> None:
        """Final checkpoint, then leave the group so partitions move at once.

        With the store or the dead-letter topic unavailable the uncommitted stretch is left
        to be read again by whoever owns the partitions next: nothing is lost.
        """
        try:
            self.checkpoint()
        finally:
            try:
                self.consumer.close()
            except KafkaError as e:  # the broker away: the group times the member out
                log.warning("Kafka consumer closed uncleanly: %s", describe(e))
