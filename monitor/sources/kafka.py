"""The daemon's input: one member of a Kafka consumer group.

Offsets live in the store, written in the same transaction as the rollups they produced.
On assignment the consumer seeks to them, so Kafka's own committed offsets are advisory
(kept for lag tooling) and a crash at any moment replays exactly the uncommitted stretch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from monitor.config import KafkaConfig
from monitor.pipeline import Pipeline

log = logging.getLogger(__name__)


IDLE_POLLS = 3  # empty polls in a row that mean nothing is left to read


def source_id(config: KafkaConfig) -> str:
    """The name a consumer group's progress is stored under."""
    return f"kafka:{config.group_id}:{config.topic}"


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, source: KafkaSource) -> None:
        self.source = source

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        # Runs inside poll(): a bounded checkpoint of what we have, then let go.
        self.source.pipeline.revoke(tp.partition for tp in revoked)
        log.info("partitions revoked: %s", sorted(tp.partition for tp in revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.source.resume(assigned)
        log.info("partitions assigned: %s", sorted(tp.partition for tp in assigned))


class KafkaSource:
    """Polls the telemetry topic and feeds the pipeline, checkpointing as it goes."""

    def __init__(
        self,
        config: KafkaConfig,
        pipeline: Pipeline,
        *,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.consumer = consumer_factory(
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
        self.consumer.subscribe([config.topic], listener=_Rebalance(self))
        self._empty_polls = 0

    def resume(self, assigned: set[TopicPartition] | list[TopicPartition]) -> None:
        """Load stored state for ``assigned`` and seek each partition to its stored offset."""
        by_partition = {tp.partition: tp for tp in assigned}
        resume = self.pipeline.assign(by_partition)
        for p, tp in by_partition.items():
            offset = resume.get(p)
            if offset is not None:
                self.consumer.seek(tp, offset)

    def poll_once(self, timeout_ms: int = 200) -> int:
        """One poll: process what arrived and checkpoint when due. Returns records read."""
        batch = self.consumer.poll(timeout_ms=timeout_ms)
        pipeline = self.pipeline
        owned = set(pipeline.partitions)
        n = 0
        for tp, records in batch.items():
            p = tp.partition
            if p not in owned:
                continue  # revoked while the fetch was in flight
            process = pipeline.process
            for r in records:
                process(p, r.offset, r.value, r.key)
            n += len(records)
        self._empty_polls = 0 if n else self._empty_polls + 1
        if pipeline.due():
            self.checkpoint()
        return n

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
        if self.pipeline.checkpoint():
            self._commit_advisory()
            return
        # Fenced: someone else wrote a partition's offset. Reload every owned partition
        # from the store and seek back; whatever we had in memory is gone.
        self.resume(self.consumer.assignment())

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
        """Final checkpoint, then leave the group so partitions move at once."""
        try:
            self.checkpoint()
        finally:
            self.consumer.close()
