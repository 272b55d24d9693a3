"""What detection keeps per route and per segment, and how a segment is keyed.

A **route** holds the rules that watch it as a whole; a **segment** (a series key plus a
sampling-temperature bucket: the unit within which acceptance is comparable) holds the
acceptance change-point detector, the break-even monitor, the per-position curve and the
throughput monitor. Both snapshot to versioned JSON stored in the checkpoint transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from monitor import heap
from monitor.detect.acceptance import AcceptanceDetector, restore_detector
from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.breakeven import BreakevenMonitor
from monitor.detect.comparison import Comparison
from monitor.detect.metadata import MetadataRules
from monitor.detect.positions import PositionCurve
from monitor.detect.throughput import ThroughputMonitor
from monitor.versioned import require_version

__all__ = ["Route", "Segment", "key_id", "temperature_bucket", "when"]


def temperature_bucket(t: float | None, edges: Iterable[float]) -> str:
    """The label of the temperature bucket ``t`` falls in ("" when not reported).

    >>> [temperature_bucket(t, (0.0, 0.5, 1.0)) for t in (None, 0.0, 0.3, 0.7, 1.0, 1.3)]
    ['', '0', '0-0.5', '0.5-1', '0.5-1', '>1']
    """
    if t is None:
        return ""
    lower = None
    for edge in edges:
        if t <= edge:
            return f"{edge:g}" if lower is None else f"{lower:g}-{edge:g}"
        lower = edge
    return f">{lower:g}"


def key_id(parts: Iterable[Any]) -> str:
    """The stored id of a route or segment key (the tail of its state key)."""
    return hashlib.sha256(orjson.dumps(list(parts))).hexdigest()[:24]


def when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


@dataclass(slots=True)  # no instance dict: one per series, by the ten thousand
class Segment:
    """Detectors of one route x model pair x draft length x temperature bucket."""

    labels: dict[str, str]
    acceptance: AcceptanceDetector
    breakeven: BreakevenMonitor
    positions: PositionCurve
    throughput: ThroughputMonitor
    last_ts: float = 0.0
    firing: dict[str, str] = field(default_factory=dict)  # rule -> fingerprint
    versus: Comparison | None = None  # the live test against the setup this one replaced
    setup: dict[str, str] = field(default_factory=dict)  # see monitor.change_record
    # The setup as change records name it (lineage.described): built once, read-only, shared
    # by the records of this setup's change and of the changes that replace it; never stored.
    described: dict[str, str] | None = field(default=None, compare=False, repr=False)

    @property
    def temperature(self) -> str:
        return self.labels.get("temperature", "")

    @property
    def pair(self) -> tuple[str, ...]:
        lab = self.labels
        return (lab["target_model"], lab["target_revision"], lab["draft_model"],
                lab["draft_revision"])

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "segment", "version": 1, "labels": self.labels, "last_ts": self.last_ts,
            "firing": self.firing, "acceptance": self.acceptance.snapshot(),
            "breakeven": self.breakeven.snapshot(), "positions": self.positions.snapshot(),
            "throughput": self.throughput.snapshot(),
            "versus": None if self.versus is None else self.versus.snapshot(),
            "setup": dict(self.setup),  # a plain dict: heap.shared's is a subclass
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Segment:
        require_version(data, "segment", 1)
        return cls(
            labels=dict(data["labels"]),
            acceptance=restore_detector(data["acceptance"]),
            breakeven=BreakevenMonitor.restore(data["breakeven"]),
            positions=PositionCurve.restore(data["positions"]),
            throughput=ThroughputMonitor.restore(data["throughput"]),
            last_ts=float(data["last_ts"]),
            firing=dict(data["firing"]),
            versus=None if data.get("versus") is None else Comparison.restore(data["versus"]),
            setup=heap.shared(data.get("setup") or _setup_from_labels(data["labels"])),
        )


def _setup_from_labels(labels: dict[str, str]) -> dict[str, str]:
    """The setup of a segment stored before setups were (tokenizers and engine unknown)."""
    return {"target_model": labels["target_model"],
            "target_revision": labels["target_revision"], "target_tokenizer": "",
            "draft_model": labels["draft_model"], "draft_revision": labels["draft_revision"],
            "draft_tokenizer": "", "method": labels.get("method", ""),
            "num_speculative_tokens": labels["num_speculative_tokens"], "engine": ""}


@dataclass
class Route:
    """Rules that watch a route as a whole."""

    name: str
    metadata: MetadataRules
    staleness: StalenessMonitor
    inactivity: InactivityMonitor
    contention: ContentionMonitor
    segments: list[str] = field(default_factory=list)  # segment key ids
    firing: dict[str, str] = field(default_factory=dict)  # rule -> fingerprint
    partition: int | None = None  # where its events arrive: who may judge its silence

    def snapshot(self) -> dict[str, Any]:
        return {
            "kind": "route", "version": 1, "name": self.name, "segments": self.segments,
            "partition": self.partition,
            "firing": self.firing, "metadata": self.metadata.snapshot(),
            "staleness": self.staleness.snapshot(), "inactivity": self.inactivity.snapshot(),
            "contention": self.contention.snapshot(),
        }

    @classmethod
    def restore(cls, data: dict[str, Any]) -> Route:
        require_version(data, "route", 1)
        return cls(
            name=data["name"],
            metadata=MetadataRules.restore(data["metadata"]),
            staleness=StalenessMonitor.restore(data["staleness"]),
            inactivity=InactivityMonitor.restore(data["inactivity"]),
            contention=ContentionMonitor.restore(data["contention"]),
            segments=list(data["segments"]),
            firing=dict(data["firing"]),
            partition=data.get("partition"),
        )
