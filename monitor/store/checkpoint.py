"""What one checkpoint transaction writes, and what a restart reads back."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.alert_record import AlertRecord
from monitor.change_record import ChangeRecord

MINUTE = 60
GRANULARITIES = {"minute": 60, "hour": 3600, "day": 86400}
EXPERIMENT_BUCKET = GRANULARITIES["hour"]  # experiment_rollups are kept per hour


@dataclass(slots=True)
class PartitionCommit:
    """The progress of one source partition up to this checkpoint.

    ``expected_offset`` is the ``next_offset`` this process last read from or wrote to the
    store for the partition (``None`` when the store had no row): the store applies the
    checkpoint only if the stored value still equals it, which fences out a zombie consumer
    that lost the partition in a rebalance without noticing.
    """

    partition: int
    next_offset: int
    expected_offset: int | None
    max_event_ts: float | None
    new_ids: list[tuple[str, float]] = field(default_factory=list)
    prune_before: float | None = None


@dataclass(slots=True)
class Checkpoint:
    """Rollup deltas, partition progress and opaque state snapshots, committed atomically.

    ``rollups`` maps (series, minute bucket start in Unix seconds) to the statistics added
    since the last checkpoint; the store merges them into the minute, hour and day rows.
    ``state`` maps a state key (e.g. a detector's segment id) to a JSON-able snapshot that
    replaces the stored one (any mapping: the store reads it a chunk of keys at a time, and
    detection's builds each snapshot as it is read); ``alerts`` are the alert state changes
    decided since the last checkpoint. Both come from the detection layer and may be empty.
    ``outbox`` holds the notifications the alert lifecycle decided, one ``(sink, key,
    payload)`` per sink, ``episodes`` the episode rows it changed and ``applied_baselines``
    the ``(request id, holder)`` of baseline requests applied: all written with the state
    that decided them.
    ``changes`` are the setup changes detection created or updated since the last checkpoint
    (``Detection.drain_changes()``), upserted by (source, change_id) into ``setup_changes``.
    ``experiments`` maps (experiment, arm, series, hour bucket start in Unix seconds) to the
    statistics of the A/B experiment's events added since the last checkpoint (the same
    events are in ``rollups`` too); merged into ``experiment_rollups``.
    """

    source: str
    rollups: dict[tuple[SeriesKey, int], BucketStats] = field(default_factory=dict)
    partitions: list[PartitionCommit] = field(default_factory=list)
    state: MutableMapping[str, Any] = field(default_factory=dict)
    alerts: list[AlertRecord] = field(default_factory=list)
    outbox: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    episodes: list[dict[str, Any]] = field(default_factory=list)
    applied_baselines: list[tuple[int, str]] = field(default_factory=list)
    changes: list[ChangeRecord] = field(default_factory=list)
    experiments: dict[tuple[str, str, SeriesKey, int], BucketStats] = field(default_factory=dict)
    # (slice of pre-request signals, series, hour bucket start) -> SliceStats added since
    # the last checkpoint; merged into ``slice_rollups`` (monitor/store/slices.py).
    slices: dict[tuple[Any, SeriesKey, int], Any] = field(default_factory=dict)


@dataclass(slots=True)
class PartitionState:
    """What the store knows of one partition: where to resume and the dedup horizon."""

    next_offset: int | None = None
    max_event_ts: float | None = None
    seen: dict[str, float] = field(default_factory=dict)
