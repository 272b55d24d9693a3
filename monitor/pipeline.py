"""The ingest pipeline: raw message -> valid, on-time, first-seen events -> bucket deltas.

This is where an event is decided to count. Per partition it keeps the newest event time
(the watermark is that minus the lateness allowance) and the request ids seen within the
dedup horizon; across partitions it keeps the rollup deltas not yet written. ``checkpoint()``
hands all of it to the store in one transaction together with each partition's next offset,
so the tables, the dedup memory and the offsets can never disagree after a crash.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from operator import attrgetter, itemgetter
from typing import Any, Protocol

import orjson

from monitor import heap
from monitor.aggregate.bucket import COUNTERS, FLOATS, SKETCHES, BucketStats, bucket_values
from monitor.aggregate.columns import ColumnSums, as_stats
from monitor.aggregate.series import SeriesKey
from monitor.alert_record import AlertRecord
from monitor.change_record import ChangeRecord
from monitor.config import IngestConfig
from monitor.deadletter import DeadLetterSink
from monitor.dedup import SeenIds
from monitor.eventtime import FutureRule, Parsed, WallClock
from monitor.metrics import IngestMetrics
from monitor.policy.slicer import Slicer
from monitor.policy.slices import (
    SLICE_COUNTERS,
    SLICE_FLOATS,
    SliceKey,
    SliceStats,
    slice_positions,
    slice_values,
)
from monitor.store.checkpoint import Checkpoint, PartitionCommit, PartitionState
from monitor.store.exceptions import FencedError
from monitor.telemetry.event import Event, Rejection
from monitor.telemetry.parse import Parser
from monitor.telemetry.serialize import event_to_dict

log = logging.getLogger(__name__)
_request_id = attrgetter("request_id")
_ts = attrgetter("ts")

NEG_INF = float("-inf")
# What a dead letter of a batch says about its event, in the order process() sends them.
_INVALID, _LATE, _FUTURE = 0, 1, 2
_by_message = itemgetter(0, 1)
HOLD_EVENTS = 4096  # events a source may hold for one observer call (see Pipeline.hold_limit)


class CheckpointStore(Protocol):
    def commit(self, cp: Checkpoint) -> None: ...
    def load_partitions(
        self, source: str, partitions: Iterable[int]
    ) -> dict[int, PartitionState]: ...
    def load_state(self, source: str, prefix: str = "") -> dict[str, Any]: ...


class EventObserver(Protocol):
    """Sees every counted event in processing order, a message's events at a time (the
    detection layer plugs in here).

    Its state and the alert records it decided go into the same checkpoint as the rollups,
    so after a crash it is restored to exactly the point the stored offsets resume from.
    """

    loaded: bool
    pending: bool  # alerts or state not yet handed to a checkpoint (a wall-clock tick, say)
    owned: set[int] | None  # partitions this process reads; None: all
    now: float  # the observer's clock: what the alert lifecycle measures its timers against

    def observe(self, partition: int, events: list[Event]) -> None: ...
    def load(self, states: dict[str, Any]) -> None: ...
    def snapshot(self) -> MutableMapping[str, Any]: ...
    def drain(self) -> list[AlertRecord]: ...
    def drain_changes(self) -> list[ChangeRecord]: ...
    def drop_all(self) -> None: ...
    def accept_baseline(self, route: str, now: float) -> bool: ...
    def owns_route(self, route: str) -> bool: ...


class EventGuard(Protocol):
    """Bounds what the pipeline keeps per series (``monitor.aggregate.guard``): events of
    series over the caps come back rewritten into an overflow series, counted and reported.

    Admission must give the same answer when the uncommitted stretch is read again after a
    crash, so it may only depend on what is committed plus what it admitted since.
    """

    def admit_keyed(self, events: list[Event], keys: list[tuple[Any, ...]]
                    ) -> tuple[list[Event], list[tuple[Any, ...]]]: ...
    def committed(self) -> None: ...  # what was admitted since the last call is now stored
    def drop_all(self) -> None: ...  # forget what was admitted since the last commit
    def load(self) -> None: ...  # read the committed series now (on assignment)


class AlertDecider(Protocol):
    """The alert lifecycle (``alerts.alerting.Alerting``): condition records in, outbox rows,
    episode rows and its own state out, all for the same checkpoint."""

    loaded: bool

    def load(
        self, states: dict[str, Any], owns: Callable[[str], bool] | None = None
    ) -> None: ...
    def drop_all(self) -> None: ...
    def decide(self, records: list[AlertRecord], now: float) -> Any: ...


@dataclass(slots=True)
class PartitionTracker:
    """Event-time and dedup state of one partition owned by this process."""

    next_offset: int | None
    expected_offset: int | None
    max_ts: float
    seen: SeenIds
    # The ids counted since the last checkpoint and their event times, in counting order.
    # Times in an array: a pair and a float object per event, alive until the checkpoint,
    # would pin memory the allocator could otherwise hand back (monitor/aggregate/columns.py).
    new_rids: list[str] = field(default_factory=list)
    new_ts: array = field(default_factory=lambda: array("d"))
    dirty: bool = False

    @property
    def new_ids(self) -> list[tuple[float, str]]:
        """(event time, id) of each id counted since the last checkpoint, in order."""
        return list(zip(self.new_ts, self.new_rids, strict=True))

    @classmethod
    def from_state(cls, state: PartitionState, horizon: float) -> PartitionTracker:
        max_ts = state.max_event_ts if state.max_event_ts is not None else NEG_INF
        seen = SeenIds.from_items(state.seen.items(), horizon, max_ts)
        return cls(state.next_offset, state.next_offset, max_ts, seen)


@dataclass(slots=True)
class IngestSummary:
    messages: int = 0
    events: int = 0
    invalid: int = 0
    duplicates: int = 0
    late: int = 0
    late_counted: int = 0
    future: int = 0

    def line(self) -> str:
        late = f"{self.late} late"
        if self.late_counted:
            late = f"{self.late_counted} late but counted, {late}"
        return (
            f"{self.messages} messages, {self.events} events counted, {self.invalid} invalid, "
            f"{self.duplicates} duplicates, {late}, {self.future} future"
        )


class Pipeline:
    """Owns the per-partition state of one source and writes it through a store.

    ``source`` names the stream in the store (``kafka:<group>:<topic>`` or ``replay``):
    everything stored for it resumes where the last checkpoint left off. ``future`` judges
    event times against a clock (``monitor.eventtime``; default: the wall clock, as the
    daemon does); a replay sets its own. ``gpus_per_replica`` (config ``cost``) prices the
    GPU time of events that report none: ``e2e_ms / 1000 * gpus_per_replica / batch_size``.
    """

    def __init__(
        self,
        store: CheckpointStore,
        source: str,
        config: IngestConfig,
        metrics: IngestMetrics,
        dead_letter: DeadLetterSink,
        *,
        observer: EventObserver | None = None,
        on_alerts: list[Callable[[list[AlertRecord]], None]] | None = None,
        alerting: AlertDecider | None = None,
        on_outbox: list[Callable[[], None]] | None = None,
        on_commit: list[Callable[[Checkpoint], None]] | None = None,
        holder: str = "",
        clock: Any = time.monotonic,
        guard: EventGuard | None = None,
        future: FutureRule | None = None,
        gpus_per_replica: float = 1.0,
        slicer: Slicer | None = None,
    ) -> None:
        self.store = store
        self.source = source
        self.config = config
        self.metrics = metrics
        self.dead_letter = dead_letter
        self.observer = observer
        # Called with the alert records of each committed checkpoint, in order.
        self.on_alerts = list(on_alerts or [])
        self.alerting = alerting
        # Called after a checkpoint that wrote outbox rows (the delivery worker's wake-up).
        self.on_outbox = list(on_outbox or [])
        # Called with every committed checkpoint (metrics that follow the exact rollups).
        self.on_commit = list(on_commit or [])
        self.holder = holder
        self.guard = guard
        self.future: FutureRule = future or WallClock(config.max_future_skew)
        self._applied_baselines: list[tuple[int, str]] = []
        self.parser = Parser(max_message_bytes=config.max_message_bytes)
        self.summary = IngestSummary()
        self._clock = clock
        self._partitions: dict[int, PartitionTracker] = {}
        # The deltas since the last checkpoint, in columns (monitor/aggregate/columns.py),
        # built into statistics objects only for the checkpoint that writes them:
        # (series, minute bucket start) -> BucketStats
        self._pending = _bucket_sums()
        # (experiment, arm, series, hour bucket start) -> the same, per A/B arm
        self._pending_experiments = _bucket_sums()
        # (slice, series, hour bucket start) -> SliceStats: what a policy learns from
        self._pending_slices = _slice_sums()
        # One key object per series since the last checkpoint, shared by all of its deltas
        # (and one per slice: _slice_sums): the pending keys are what the checkpoint writes,
        # so it builds none (at ten thousand series, a key per delta was tens of MB).
        self._series: dict[tuple[Any, ...], SeriesKey] = {}
        self.slicer = slicer
        # Where an event reports no GPU time it is estimated as its share of the replica's
        # GPUs for its duration (config ``cost.gpus_per_replica``).
        self._gpus_per_replica = gpus_per_replica
        self._pending_events = 0
        self._last_checkpoint = clock()  # when the newest checkpoint started
        self._pause_until = self._last_checkpoint  # none by count or age before this
        self._lateness = config.allowed_lateness
        self._horizon = config.dedup_horizon
        # Counted events held for the observer: a source that sets ``hold_limit`` hands a
        # poll's or a stretch of lines' events to detection in one call, which judges a
        # segment's requests at once (the same decisions as message by message: the
        # detectors' property tests). Flushed before anything reads or moves the detectors.
        self.hold_limit = 0
        self._held: list[Event] = []
        self._held_partition = -1

    # -- partition ownership -------------------------------------------------------------

    def assign(self, partitions: Iterable[int]) -> dict[int, int | None]:
        """Load the stored state of newly owned partitions; returns where to resume each
        (every partition held afterwards: the caller seeks them all).

        Detection and alert state is reloaded whole whenever partitions are added: the
        routes judged here change, and peers may have written any route since the last
        load (eager rebalancing dropped it all at the revoke; a process that held no
        partition, or an incremental assignment, still holds what it loaded then).
        """
        self.observe_held()
        partitions = list(partitions)
        new = [p for p in partitions if p not in self._partitions]
        observer = self.observer
        if observer is not None and new and observer.loaded:
            kept = list(self._partitions)
            # Store what the kept partitions decided, so that the reload includes it; if
            # that is fenced, drop_all() let them go too and they reload as well.
            if kept and not self.checkpoint():
                new = [*new, *(p for p in kept if p not in new)]
            observer.drop_all()
            if self.alerting is not None:
                self.alerting.drop_all()
            self._applied_baselines.clear()
        if observer is not None:
            observer.owned = {*self._partitions, *new}
            if not observer.loaded:
                states = self.store.load_state(self.source)
                observer.load(states)
                if self.alerting is not None:
                    # Only the alert groups of routes read here: a peer in the consumer
                    # group times (and notifies) the others.
                    self.alerting.load(states, owns=observer.owns_route)
        if new:
            states = self.store.load_partitions(self.source, new)
            for p in new:
                state = states.get(p) or PartitionState()
                self._partitions[p] = PartitionTracker.from_state(
                    _believable(state, self.source, p, self.config.max_future_skew),
                    self._horizon)
            if self.guard is not None and not self._pending:
                # Series peers committed count against the caps too; a store outage here is
                # handled where every assignment's is (the source), not mid-message.
                self.guard.load()
        self.metrics.assigned_partitions.set(len(self._partitions))
        return {p: t.next_offset for p, t in self._partitions.items()}

    def revoke(self, partitions: Iterable[int]) -> None:
        """Checkpoint what we have, then forget the partitions."""
        self.observe_held()
        gone = [p for p in partitions if p in self._partitions]
        if gone:
            self.checkpoint()  # when fenced, drop_all() already let everything go
            for p in gone:
                self._partitions.pop(p, None)
            if self.observer is not None:
                # Routes may move to another consumer, and others may arrive with state a
                # peer wrote meanwhile: everything reloads from the store on the next assign.
                self.observer.drop_all()
                if self.alerting is not None:
                    self.alerting.drop_all()
                self._applied_baselines.clear()
        self.metrics.assigned_partitions.set(len(self._partitions))

    def drop_all(self) -> None:
        """Forget everything not yet checkpointed (after being fenced out, or lost partitions)."""
        self._partitions.clear()
        self.drop_held()
        self._pending = _bucket_sums()
        self._pending_experiments = _bucket_sums()
        self._pending_slices = _slice_sums()
        self._series.clear()
        self._pending_events = 0
        self._applied_baselines.clear()
        if self.guard is not None:
            self.guard.drop_all()
        if self.observer is not None:
            self.observer.drop_all()
        if self.alerting is not None:
            self.alerting.drop_all()
        self.metrics.assigned_partitions.set(0)

    @property
    def partitions(self) -> list[int]:
        return sorted(self._partitions)

    def next_offset(self, partition: int) -> int | None:
        return self._partitions[partition].next_offset

    def accept_baseline(self, request_id: int, route: str) -> bool:
        """Apply an operator's ``baseline accept`` for ``route`` if this process judges it;
        the request is marked applied by the checkpoint that stores the reset detectors."""
        self.observe_held()  # the reset applies after what was read before it
        obs = self.observer
        if obs is None or not obs.loaded or not obs.accept_baseline(route, obs.now):
            return False
        self._applied_baselines.append((request_id, self.holder))
        return True

    def watermark(self, partition: int) -> float:
        return self._partitions[partition].max_ts - self._lateness

    def newest(self, partition: int) -> float:
        """The newest event time counted in ``partition`` (``-inf``: none yet)."""
        return self._partitions[partition].max_ts

    def tracker(self, partition: int) -> PartitionTracker:
        """The progress of ``partition`` as counted so far, live (its ``max_ts`` is
        :meth:`newest`), for a reader's per-message fast path; :meth:`assign` replaces it."""
        return self._partitions[partition]

    # -- the hot path ----------------------------------------------------------------------

    def process(self, partition: int, offset: int, raw: bytes, key: bytes | None = None,
                *, parsed: Parsed | None = None) -> None:
        """Count one message read at ``offset`` of ``partition`` (``key``: its Kafka key;
        ``parsed``: what ``self.parser`` made of ``raw``, when the caller parsed it already)."""
        self.process_many(partition, (offset,), (raw,), None if key is None else (key,),
                          None if parsed is None else (parsed,))

    def process_many(
        self,
        partition: int,
        offsets: Sequence[int],
        raws: Sequence[bytes],
        keys: Sequence[bytes | None] | None = None,
        parsed: Sequence[Parsed] | None = None,
    ) -> None:
        """Count the messages read at ``offsets`` of ``partition``, in order (``keys``: their
        Kafka keys; ``parsed``: what ``self.parser`` made of each ``raws``, when the caller
        parsed them already).

        Exactly :meth:`process` on each in turn: the same events counted, the same dead
        letters in the same order, the same events to the observer in the same order. What
        costs per message is paid once here: the dedup lookup, the metrics, the bookkeeping.
        """
        tracker = self._partitions[partition]
        parse = self.parser.parse
        batches: list[list[Event]] = []
        invalid: list[tuple[int, int, list[Rejection]]] | None = None
        for i, raw in enumerate(raws):
            events, rejections = parse(raw) if parsed is None else parsed[i]
            if rejections:
                if invalid is None:
                    invalid = []
                invalid.append((i, _INVALID, rejections))
            batches.append(events)
        n = len(batches)
        self.summary.messages += n
        self.metrics.messages.inc(n)
        counted, refused = self._count(tracker, partition, batches)
        if invalid or refused:
            self._dead_letters(partition, offsets, keys, (invalid or []) + refused)
        if counted:
            self.summary.events += counted
            self.metrics.events.inc(counted)
            self._pending_events += counted
        tracker.next_offset = offsets[-1] + 1
        tracker.dirty = True

    def _count(
        self, tracker: PartitionTracker, partition: int, batches: list[list[Event]]
    ) -> tuple[int, list[tuple[int, int, list[Rejection]]]]:
        """Count the events of consecutive messages (one list each); returns how many
        counted, and the late and future rejections as (message index, kind, rejections)."""
        seen = tracker.seen
        observer = self.observer
        lateness = self._lateness
        horizon = self._horizon
        max_ts = tracker.max_ts
        counted_events: list[Event] = []
        # positions in counted_events of events past the detectors' allowance: in the tables,
        # not in the detectors (which decide in event-time order)
        late_counted: list[int] | None = None
        refused: list[tuple[int, int, list[Rejection]]] = []
        rule = self.future
        relative = rule.relative
        if len(batches) == 1:
            ids = list(map(_request_id, batches[0]))
        else:
            ids = [e.request_id for events in batches for e in events]
        if not ids:
            return 0, refused
        known = seen.among(ids)  # C-level: no frame per event
        fresh: set[str] = set()  # ids first seen here: added to ``seen`` below
        fresh_rids: list[str] = []
        fresh_ts: list[float] = []
        duplicates = 0
        everything = None
        if not known:
            limit = (max_ts + rule.skew if relative
                     else min(rule.limit(max_ts) for events in batches if events))
            everything = _all_count(batches, ids, max_ts, lateness, limit)
        if everything is not None:
            # the common chunk: the loop below would count every event, and change nothing else
            counted_events, fresh_ts, fresh = everything
            fresh_rids = ids
            max_ts = max(max_ts, max(fresh_ts))
            batches = []
        for m, events in enumerate(batches):
            if not events:
                continue
            late: list[Rejection] | None = None
            future: list[Rejection] | None = None
            # Judged per message, as the producer sent it: the limit moves with the newest
            # event only between messages (and when an event beyond it is believed).
            limit = max_ts + rule.skew if relative else rule.limit(max_ts)
            for e in events:
                rid = e.request_id
                if rid in known or rid in fresh:
                    duplicates += 1
                    continue
                ts = e.ts
                if ts > limit:
                    # Too far ahead to believe: it would move the watermark and make every
                    # valid event after it late. Not counted, not remembered, moves nothing.
                    reason = rule.refuses(ts, max_ts)
                    if reason is not None:
                        if future is None:
                            future = []
                        future.append(Rejection(reason, _reserialise(e)))
                        continue
                    limit = rule.limit(ts)  # believed: it is the newest now
                if ts < max_ts - lateness:
                    if ts < max_ts - horizon:
                        # Older than the request ids remembered: a duplicate of it could no
                        # longer be told apart, so it cannot count exactly.
                        if late is None:
                            late = []
                        late.append(
                            Rejection(
                                f"late: event time {ts:.3f} is {max_ts - ts:.0f}s behind the "
                                f"newest event of partition {partition}, beyond the dedup "
                                f"horizon ({horizon:.0f}s)",
                                _reserialise(e),
                            )
                        )
                        continue
                    if late_counted is None:
                        late_counted = []
                    late_counted.append(len(counted_events))
                if ts > max_ts:
                    max_ts = ts
                fresh.add(rid)
                fresh_rids.append(rid)
                fresh_ts.append(ts)
                counted_events.append(e)
            if late:
                refused.append((m, _LATE, late))
            if future:
                refused.append((m, _FUTURE, future))
        tracker.max_ts = max_ts
        if duplicates:
            self.summary.duplicates += duplicates
            self.metrics.duplicate_events.inc(duplicates)
        if fresh:
            seen.add_many(zip(fresh_ts, fresh_rids, strict=True))
            tracker.new_rids += fresh_rids
            tracker.new_ts.extend(fresh_ts)
            if seen.slices > seen.max_slices:
                # A backlog crosses hours of event time between two checkpoints, and every
                # lookup above walks every slice: forget what a reload from the store would
                # not hold either (the checkpoint prunes the same way).
                seen.prune(max_ts)
        # Each event's series fields (series_fields(), inline), built once for the guard and
        # the sums below. A plain tuple finds the series' key (equal to it): cheaper than a
        # SeriesKey.
        keys = [(e.route, e.target_model, e.target_revision, e.target_tokenizer,
                 e.draft_model or "", e.draft_revision or "", e.draft_tokenizer or "",
                 e.method or "", e.num_speculative_tokens) for e in counted_events]
        if keys and self.guard is not None:
            # Only events that count may take a series slot: a duplicate or late event of a
            # new pair would hold one it never stores, and push a route into overflow.
            counted_events, keys = self.guard.admit_keyed(counted_events, keys)
        gpus = self._gpus_per_replica
        slicer, slices = self.slicer, self._pending_slices
        add, add_slice = self._pending.add, slices.add
        series_keys = self._series
        for e, fields in zip(counted_events, keys, strict=True):
            if e.gpu_seconds is None:
                # Before aggregation and observation: the rollups, the experiment rollups
                # and the detectors all see the same GPU time.
                e.gpu_seconds = e.e2e_ms / 1000 * gpus / (e.batch_size or 1)
                e.gpu_estimated = True
            series = series_keys.get(fields)
            if series is None:
                series = series_keys[fields] = SeriesKey._make(heap.interned(fields))
            values = bucket_values(e)
            add((series, int(e.ts // 60) * 60), values,
                e.accepted_per_position if e.has_spec else None)
            if e.experiment_name is not None:
                self._count_experiment(e, series, values)
            # A shadow twin ran on another upstream: its timing says nothing of this one's.
            if slicer is not None and not (e.tags and e.is_shadow):
                add_slice((slicer.key(e), series, int(e.ts // 3600) * 3600), slice_values(e),
                          slice_positions(e))
        counted = len(counted_events)
        if late_counted:
            self.summary.late_counted += len(late_counted)
            self.metrics.late_counted_events.inc(len(late_counted))
        if counted and observer is not None:
            if late_counted:
                skip = set(late_counted)
                on_time = [e for i, e in enumerate(counted_events) if i not in skip]
                if on_time:
                    self._observe(partition, on_time)
            else:
                self._observe(partition, counted_events)
        return counted, refused

    def _dead_letters(
        self,
        partition: int,
        offsets: Sequence[int],
        keys: Sequence[bytes | None] | None,
        rejected: list[tuple[int, int, list[Rejection]]],
    ) -> None:
        """Send rejections in the order message-by-message processing sends them: by
        message, and within one its invalid events, then the late, then the future ones."""
        rejected.sort(key=_by_message)
        for m, kind, rejections in rejected:
            origin = self._origin(partition, offsets[m], None if keys is None else keys[m])
            if kind == _LATE:
                self.summary.late += len(rejections)
                self.metrics.late_events.inc(len(rejections))
            elif kind == _FUTURE:
                self.summary.future += len(rejections)
                self.metrics.future_events.inc(len(rejections))
            self._reject(rejections, origin, invalid=kind == _INVALID)

    def _observe(self, partition: int, events: list[Event]) -> None:
        if not self.hold_limit:
            self.observer.observe(partition, events)  # type: ignore[union-attr]
            return
        if partition != self._held_partition and self._held:
            self.observe_held()
        self._held_partition = partition
        self._held += events
        if len(self._held) >= self.hold_limit:
            self.observe_held()

    def observe_held(self) -> None:
        """Hand the held events to the observer (a source calls this after each poll)."""
        held = self._held
        if held:
            self._held = []
            self.observer.observe(self._held_partition, held)  # type: ignore[union-attr]

    def drop_held(self) -> None:
        """Forget held events unobserved (a source that fails: what it read is read again
        from the stored offsets, and observing it now would judge it twice)."""
        self._held = []

    def _count_experiment(self, e: Event, series: SeriesKey, values: tuple[Any, ...]) -> None:
        assert e.experiment_name is not None
        key = (e.experiment_name, e.experiment_arm or "", series, int(e.ts // 3600) * 3600)
        self._pending_experiments.add(key, values,
                                      e.accepted_per_position if e.has_spec else None)

    def _origin(self, partition: int, offset: int, key: bytes | None) -> dict[str, Any]:
        origin: dict[str, Any] = {"source": self.source, "partition": partition, "offset": offset}
        if key is not None:
            origin["key"] = key.decode("utf-8", "replace")
        return origin

    def _reject(
        self, rejections: list[Rejection], origin: dict[str, Any], *, invalid: bool
    ) -> None:
        if invalid:
            self.summary.invalid += len(rejections)
            self.metrics.invalid_events.inc(len(rejections))
        for r in rejections:
            self.dead_letter.send(r, origin)
        self.metrics.dead_letters.inc(len(rejections))

    # -- checkpoints -------------------------------------------------------------------------

    def due(self) -> bool:
        now = self._clock()
        return now >= self._pause_until and (
            self._pending_events >= self.config.checkpoint_max_events
            or now - self._last_checkpoint >= self.config.checkpoint_interval
        )

    @property
    def pending(self) -> bool:
        """Whether anything read is not checkpointed yet (an idle source checkpoints it)."""
        return bool(self._pending_events or self._pending or self._pending_slices
                    or any(t.dirty for t in self._partitions.values()))

    def checkpoint(self) -> bool:
        """Write pending deltas and partition progress in one transaction.

        Returns ``False`` when fenced: the caller must re-assign its partitions (which reloads
        their stored state) and seek back to the stored offsets. A committed checkpoint's
        cost sets the pause before the next (``ingest.checkpoint_pause_factor``).
        """
        started = self._last_checkpoint = self._clock()
        with heap.collector_paused():  # its garbage dies by reference count: monitor/heap.py
            committed = self._checkpoint()
        if committed:
            # Only a committed checkpoint's cost counts: a failed or fenced one says nothing
            # about the next, which must come as soon as the store or the partitions allow.
            cfg, end = self.config, self._clock()
            self._pause_until = end + min(
                cfg.checkpoint_max_pause, cfg.checkpoint_pause_factor * (end - started))
        return committed

    def _checkpoint(self) -> bool:
        self.observe_held()
        dirty = {p: t for p, t in self._partitions.items() if t.dirty}
        observer, alerting = self.observer, self.alerting
        decided = (observer is not None and observer.pending) or bool(self._applied_baselines)
        alerts = observer.drain() if observer is not None else []
        changes = observer.drain_changes() if observer is not None else []
        notified = None
        if alerting is not None and alerting.loaded and observer is not None:
            # Timers (minimum firing time, resolve hold, group waits) fire on the clock alone.
            notified = alerting.decide(alerts, observer.now)
        if (not dirty and not self._pending and not self._pending_experiments
                and not self._pending_slices and not decided and not notified):
            return True
        # Dead letters first: once offsets are stored, the input that produced them is
        # never read again.
        self.dead_letter.flush()
        commits = []
        for p, t in dirty.items():
            assert t.next_offset is not None
            commits.append(
                PartitionCommit(
                    partition=p,
                    next_offset=t.next_offset,
                    expected_offset=t.expected_offset,
                    max_event_ts=t.max_ts if t.max_ts != NEG_INF else None,
                    new_ids=list(zip(t.new_rids, t.new_ts, strict=True)),
                    prune_before=t.max_ts - self._horizon if t.max_ts != NEG_INF else None,
                )
            )
        state = observer.snapshot() if observer is not None else {}
        # Built from the columns here, dropped after the commit: their keys already share
        # one object per series.
        rollups = as_stats(self._pending, BucketStats.from_sums)
        cp = Checkpoint(self.source, rollups=rollups, partitions=commits, state=state,
                        alerts=alerts, applied_baselines=list(self._applied_baselines),
                        changes=changes,
                        experiments=as_stats(self._pending_experiments, BucketStats.from_sums),
                        slices=as_stats(self._pending_slices, SliceStats.from_sums))
        # The columns go now, before the commit's own peak: a failed commit drops them
        # anyway (below), and a committed one starts afresh. Their large buffers go back to
        # the system at once, or the commit's peak would stack on them.
        self._pending = _bucket_sums()
        self._pending_experiments = _bucket_sums()
        self._pending_slices = _slice_sums()
        if len(rollups) + len(cp.slices) >= heap.TRIM_AFTER_ROWS:
            heap.release()
        if notified:
            state.update(notified.state)
            cp.outbox, cp.episodes = notified.outbox, notified.episodes
        started = time.perf_counter()
        try:
            self.store.commit(cp)
        except FencedError:
            log.warning("checkpoint fenced for %s: another consumer owns a partition", self.source)
            self.metrics.fenced.inc()
            self.drop_all()
            return False
        except BaseException:
            # The snapshot and alerts were handed over and are gone with the transaction:
            # only a reload from the store (and a re-read from the stored offsets) is exact.
            self.drop_all()
            raise
        self.metrics.checkpoint_duration.observe(time.perf_counter() - started)
        self.metrics.checkpoints.inc()
        for t in dirty.values():
            t.expected_offset = t.next_offset
            t.new_rids = []
            t.new_ts = array("d")
            t.dirty = False
            t.seen.prune(t.max_ts)
        self._series = {}
        self._pending_events = 0
        self._applied_baselines.clear()
        if self.guard is not None:
            self.guard.committed()
        if alerts:
            for callback in self.on_alerts:
                callback(alerts)
        if cp.outbox:
            for wake in self.on_outbox:
                wake()
        for callback in self.on_commit:
            callback(cp)
        newest = max((t.max_ts for t in self._partitions.values()), default=NEG_INF)
        if newest != NEG_INF:
            self.metrics.event_time_lag.set(max(0.0, time.time() - newest))
        written = len(rollups) + len(state) + len(cp.slices)
        del cp, state, rollups
        if written >= heap.TRIM_AFTER_ROWS:
            heap.release()  # the checkpoint's peak, freed just now, back to the system
        return True


def _all_count(
    batches: list[list[Event]], ids: list[str], max_ts: float, lateness: float, limit: float,
) -> tuple[list[Event], list[float], set[str]] | None:
    """The events of ``batches`` (ids ``ids``, none seen before), their times and their ids
    as a set, when :meth:`Pipeline._count` would count every one: no id twice, none beyond
    ``limit`` (the first message's: later ones' are no lower), none late against the newest
    time before it (the newest of all bounds it); else None. C-level: no frame per event."""
    unique = set(ids)
    if len(unique) != len(ids):
        return None
    events = list(batches[0]) if len(batches) == 1 else [e for b in batches for e in b]
    times = list(map(_ts, events))
    newest = max(times)
    if newest > limit or min(times) < max(max_ts, newest) - lateness:
        return None
    return events, times, unique


def _bucket_sums() -> ColumnSums:
    return ColumnSums(len(COUNTERS), len(FLOATS), len(SKETCHES))


def _slice_sums() -> ColumnSums:
    """Slice deltas whose keys share one SliceKey per slice (a closure, not a method: a
    pipeline holding its own bound method would be a cycle the frozen collector never
    frees)."""
    shared: dict[tuple[str, str, str, str], SliceKey] = {}

    def intern(key: tuple[Any, SeriesKey, int]) -> tuple[SliceKey, SeriesKey, int]:
        fields, series, hour = key
        skey = shared.get(fields)
        if skey is None:
            skey = shared[fields] = SliceKey._make(fields)
        return skey, series, hour

    return ColumnSums(len(SLICE_COUNTERS), len(SLICE_FLOATS), intern=intern)


def _believable(state: PartitionState, source: str, partition: int, skew: float) -> PartitionState:
    """``state`` with a stored newest event time beyond the wall clock dropped.

    Only a future-dated event counted by an earlier version can have put it there; kept, it
    would make every valid event late. The true newest time before it is not stored, so the
    next counted events set it again (nothing is late until then).
    """
    ts = state.max_event_ts
    if ts is None or ts <= time.time() + skew:
        return state
    log.warning("%s partition %d: stored newest event time %.3f is in the future (an event "
                "dated ahead of the clock counted by an earlier version); dropped, the next "
                "events set it again", source, partition, ts)
    return replace(state, max_event_ts=None)


def _reserialise(e: Event) -> bytes:
    return orjson.dumps(event_to_dict(e))
