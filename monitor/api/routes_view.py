"""Routes with their segments, baselines and recommendations, from detector snapshots.

The detection engine (``monitor/detect/engine.py``) stores one snapshot per route
(``detect/route/<id>``: name, partition, segment ids, route-level firing rules) and one per
segment (``detect/segment/<id>``: labels, firing rules and each detector's state) in the
checkpoint transaction. :func:`routes_from_states` turns them into the ``/api/v1/routes``
answer by restoring each segment with the engine's own code, so the baseline and the
recommendation are exactly what the daemon would report (``Detection.recommendations``);
:func:`routes_from_detection` gives the same answer from a live engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from monitor.detect.engine import Detection
from monitor.detect.ownership import ROUTE_PREFIX, SEGMENT_PREFIX
from monitor.detect.segments import Segment
from monitor.store.state_reads import sources_with_state
from monitor.store.store import Store


def clean(value: Any) -> Any:
    """JSON-safe: NaN and infinities (an empty interval, say) become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def _when(ts: float) -> datetime | None:
    # 0.0 is the engine's "no event yet".
    return datetime.fromtimestamp(ts, UTC) if ts and math.isfinite(ts) else None


def segment_entry(seg_id: str, seg: Segment) -> dict[str, Any]:
    """One segment as the API shows it, from the engine's own object."""
    acc = seg.acceptance.evidence()
    baseline = {
        "detector": acc.get("detector"), "phase": acc.get("phase"),
        "acceptance": seg.acceptance.baseline, "current": seg.acceptance.current,
        "throughput": seg.throughput.baseline,
    }
    recommendation = None
    if seg.labels.get("num_speculative_tokens") != "0":  # speculation already off
        ev = seg.breakeven.evidence()
        recommendation = {
            "recommendation": seg.breakeven.recommendation,
            "cutoff": ev.get("cutoff"), "rate": ev.get("rate"), "low": ev.get("low"),
            "high": ev.get("high"), "requests": ev.get("requests"),
            "recommended_num_speculative_tokens": seg.positions.knee,
        }
    return clean({
        "id": seg_id, "labels": dict(seg.labels), "last_event_at": _when(seg.last_ts),
        "firing": sorted(seg.firing), "baseline": baseline, "recommendation": recommendation,
        "error": None,
    })


def segment_from_snapshot(seg_id: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`segment_entry` of a stored snapshot; an unreadable one says so."""
    try:
        seg = Segment.restore(dict(data))
    except Exception as e:  # a snapshot of another version, or damaged: show, don't fail
        labels = data.get("labels")
        return {
            "id": seg_id,
            "labels": {str(k): str(v) for k, v in (labels or {}).items()}
            if isinstance(labels, Mapping) else {},
            "last_event_at": None, "firing": [], "baseline": None, "recommendation": None,
            "error": f"unreadable snapshot: {type(e).__name__}: {e}"[:500],
        }
    return segment_entry(seg_id, seg)


def _route_entry(name: str, source: str | None, partition: Any, firing: Iterable[str],
                 segments: list[dict[str, Any]]) -> dict[str, Any]:
    return {"route": name, "source": source, "partition": partition,
            "firing": sorted(firing), "segments": segments}


def routes_from_states(states: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``states``: per source, its snapshots by key (what ``Store.load_state`` returns).

    One entry per (route, source), sorted by route then source; each route's segments in the
    order the route first saw them.

    >>> routes_from_states({"replay": {"detect/route/x": {"kind": "route", "name": "code",
    ...     "partition": 0, "segments": ["s1"], "firing": {"telemetry_stale": "f"}}}})
    [{'route': 'code', 'source': 'replay', 'partition': 0, 'firing': ['telemetry_stale'],
      'segments': []}]
    """
    out = []
    for source, snaps in states.items():
        for key, data in snaps.items():
            if not key.startswith(ROUTE_PREFIX) or not isinstance(data, Mapping):
                continue
            segments = []
            for seg_id in data.get("segments") or ():
                seg = snaps.get(SEGMENT_PREFIX + seg_id)
                if isinstance(seg, Mapping):
                    segments.append(segment_from_snapshot(seg_id, seg))
            out.append(_route_entry(str(data.get("name", "")), source, data.get("partition"),
                                    data.get("firing") or (), segments))
    out.sort(key=lambda r: (r["route"], r["source"]))
    return out


def routes_from_detection(detection: Detection, source: str | None = None
                          ) -> list[dict[str, Any]]:
    """The same entries from a live engine. Call it on the thread that feeds ``detection``
    (the daemon's pipeline thread, after a checkpoint) and hand the plain result to the API:
    the API's threads must never read detectors while they change."""
    view = detection.view()
    out = []
    for route in view.routes.values():
        entries = [segment_entry(seg_id, seg) for seg_id, seg in view.segments_of(route)]
        out.append(_route_entry(route.name, source, route.partition, route.firing, entries))
    out.sort(key=lambda r: r["route"])
    return out


def state_sources(store: Store) -> list[str]:
    """The sources with stored state (a daemon's consumer group, a replay, ...)."""
    return sources_with_state(store, ROUTE_PREFIX)


def load_states(store: Store, sources: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The route and segment snapshots of each source (not the alert lifecycle's)."""
    return {
        s: {**store.load_state(s, ROUTE_PREFIX), **store.load_state(s, SEGMENT_PREFIX)}
        for s in sources
    }


def store_routes_view(store: Store, sources: Iterable[str] | None = None
                      ) -> Callable[[], list[dict[str, Any]]]:
    """A ``routes_view`` reading the committed snapshots of ``sources`` (default: all).

    The daemon's snapshots are committed with every checkpoint (seconds), so for a daemon
    this view is as live as its last checkpoint, and safe to call from the API's threads.
    """
    fixed = None if sources is None else list(sources)

    def view() -> list[dict[str, Any]]:
        return routes_from_states(load_states(store, fixed or state_sources(store)))

    return view
