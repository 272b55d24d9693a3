"""Lineage of changes: which setup a new one replaced on its route, and the comparison
that starts with it.

The **predecessor** of a setup is chosen among the other segments of the same route and
temperature bucket that served within ``change_return_after`` before its first event: the
most established one (the most requests judged). In a canary the old setup keeps serving
beside the new one, so it is still there to be chosen; a setup that comes back after the
route left it for ``change_return_after`` (a rollback) is a change too, whose predecessor is
the setup it displaces. A route's first setup has no predecessor.
"""

from __future__ import annotations

from collections.abc import Mapping

from monitor.change_record import ChangeRecord, change_kind, diff
from monitor.config import DetectionConfig
from monitor.detect.acceptance import OverdispersedCusum
from monitor.detect.comparison import NOT_COMPARED, Comparison
from monitor.detect.segments import Route, Segment, key_id
from monitor.telemetry.event import Event

__all__ = ["described", "predecessor", "setup_of", "start"]


def setup_of(e: Event) -> dict[str, str]:
    """The setup an event ran with (strings, "" when absent; draft length "0": off)."""
    return {
        "target_model": e.target_model, "target_revision": e.target_revision,
        "target_tokenizer": e.target_tokenizer, "draft_model": e.draft_model or "",
        "draft_revision": e.draft_revision or "", "draft_tokenizer": e.draft_tokenizer or "",
        "method": e.method or "", "num_speculative_tokens": str(e.num_speculative_tokens),
        "engine": e.engine or "",
    }


def described(seg: Segment) -> dict[str, str]:
    """The segment's setup as a change record names it: with its route and temperature
    bucket (the predecessor's are the same). One dict per segment, never changed: every
    record that names this setup shares it.

    >>> from monitor.detect.acceptance import OverdispersedCusum
    >>> from monitor.detect.breakeven import BreakevenMonitor
    >>> from monitor.detect.positions import PositionCurve
    >>> from monitor.detect.throughput import ThroughputMonitor
    >>> seg = Segment({"route": "code", "temperature": "0"}, OverdispersedCusum(),
    ...               BreakevenMonitor(), PositionCurve(), ThroughputMonitor(),
    ...               setup={"target_revision": "t1"})
    >>> described(seg)
    {'target_revision': 't1', 'route': 'code', 'temperature': '0'}
    >>> described(seg) is described(seg), seg.setup
    (True, {'target_revision': 't1'})
    """
    out = seg.described
    if out is None:
        out = dict(seg.setup)
        for extra in ("route", "temperature"):
            if seg.labels.get(extra):
                out[extra] = seg.labels[extra]
        seg.described = out
    return out


def predecessor(route: Route, segments: Mapping[str, Segment], seg_id: str,
                temperature: str, ts: float, recent: float) -> tuple[str, Segment] | None:
    """The setup that ``seg_id`` replaces at ``ts``, if any (see the module docstring)."""
    best: tuple[str, Segment] | None = None
    best_n = -1
    for other_id in route.segments:
        if other_id == seg_id:
            continue
        other = segments.get(other_id)
        if other is None or other.temperature != temperature:
            continue
        if ts - other.last_ts > recent or other.last_ts == 0.0:
            continue
        n = _requests(other)
        if n > best_n:
            best, best_n = (other_id, other), n
    return best


def _requests(seg: Segment) -> int:
    return seg.acceptance.requests if seg.acceptance else 0


def start(route: Route, seg_id: str, seg: Segment, prev_id: str, prev: Segment, e: Event,
          config: DetectionConfig) -> Comparison:
    """The change from ``prev`` to ``seg`` at ``e`` and its live comparison."""
    # Shared, not copied: a route that changes setup on every series would otherwise hold
    # two copies of two setups per change (at 100,000 series, about 90 MB).
    previous, current = described(prev), described(seg)
    changed = diff(previous, current)
    record = ChangeRecord(
        change_id=key_id((seg_id, e.ts)), route=route.name, temperature=seg.temperature,
        at=e.ts, kind=change_kind(changed), previous=previous, current=current,
        changed=changed, segment=seg_id, previous_segment=prev_id, updated_at=e.ts,
    )
    k_old = int(previous.get("num_speculative_tokens") or 0)
    k_new = int(current.get("num_speculative_tokens") or 0)
    acceptance: OverdispersedCusum | None = None
    shared: int | None = None
    live = record.live
    old_det = prev.acceptance
    if k_old == 0 or k_new == 0:
        live.update(state=NOT_COMPARED, reason="speculation switched on or off: no rate to "
                    "compare; throughput and latency are")
    elif k_new < k_old:
        live.update(state=NOT_COMPARED, reason=f"draft shortened {k_old} -> {k_new}: the "
                    "previous rate counts positions this one does not draft (the change "
                    "report compares the shared positions)")
    elif not isinstance(old_det, OverdispersedCusum) or old_det.baseline is None:
        live.update(state=NOT_COMPARED, reason="the previous setup had no baseline yet")
    else:
        acceptance = old_det.carried()
        if k_new > k_old:
            shared = k_old
        live.update(state="comparing", previous_rate=old_det.baseline,
                    basis="rate" if shared is None else "shared_positions",
                    rho=old_det.evidence().get("rho", 0.0))
    throughput = prev.throughput.carried()
    error_rate = prev.throughput.evidence().get("baseline_error_rate")
    if error_rate is not None:
        live["previous_error_rate"] = error_rate
    return Comparison(record, acceptance, throughput, window=config.change_window,
                      shared=shared)

