"""The identity of a ratio series: a route served by one model pair at one draft length."""

from __future__ import annotations

from typing import Any, NamedTuple

from monitor.telemetry.event import Event


class SeriesKey(NamedTuple):
    """Acceptance is only comparable within one series: same route, same target and draft
    (model, revision, tokenizer), same drafting method and draft length. Absent values are
    the empty string (or 0 draft tokens when speculation was off), never ``None``, so the
    key can be a SQL unique constraint on every database."""

    route: str
    target_model: str
    target_revision: str
    target_tokenizer: str
    draft_model: str
    draft_revision: str
    draft_tokenizer: str
    method: str
    num_speculative_tokens: int


def series_fields(e: Event) -> tuple[Any, ...]:
    """The fields of the event's :class:`SeriesKey` as a plain tuple (equal to the key, and
    hashed alike): cheaper to build where each event needs one."""
    return (e.route, e.target_model, e.target_revision, e.target_tokenizer, e.draft_model or "",
            e.draft_revision or "", e.draft_tokenizer or "", e.method or "",
            e.num_speculative_tokens)


def series_key(e: Event) -> SeriesKey:
    return SeriesKey._make(series_fields(e))
