"""Per segment: keep speculation on, turn it off, or not enough data, with the evidence."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from monitor.detect.segments import Segment
from monitor.jsonable import jsonable

__all__ = ["recommendations"]


def recommendations(segments: Iterable[Segment]) -> list[dict[str, Any]]:
    """One entry per segment that speculates, sorted by route then labels."""
    out = []
    for seg in segments:
        if seg.labels["num_speculative_tokens"] == "0":
            continue  # speculation already off
        ev = seg.breakeven.evidence()
        out.append({
            "labels": dict(seg.labels),
            "recommendation": seg.breakeven.recommendation,
            "recommended_num_speculative_tokens": seg.positions.knee,
            "evidence": jsonable(ev),
            "acceptance": jsonable(seg.acceptance.evidence()),
        })
    out.sort(key=lambda r: (r["labels"]["route"], sorted(r["labels"].items())))
    return out
