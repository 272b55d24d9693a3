"""Which slice of pre-request signals an event falls in (the pipeline's side of the policy).

Tags are free-form: a route could send a new value on every request. Each route keeps at
most ``max_tag_slices_per_route`` distinct tag combinations; later ones are pooled under
``*`` (counted, never dropped). The cap is per process and starts afresh on restart, which
can only move a rare combination between its own slice and ``*``.
"""

from __future__ import annotations

from typing import Any

from monitor.config import PolicyConfig
from monitor.policy.features import Buckets, tag_slice
from monitor.telemetry.event import SHADOW_TAG, Event

__all__ = ["OVERFLOW_TAGS", "Slicer"]

OVERFLOW_TAGS = "*"
# Set by the proxy on shadow twins: never a signal a caller chose.
_EXCLUDED_TAGS = frozenset({SHADOW_TAG})
_CACHE_MAX = 100_000  # raw tag tuples remembered; past it, computed each time (still exact)


_LABELS_MAX = 4096


def _cached(cache: dict[Any, str], value: Any, label: str) -> str:
    if len(cache) >= _LABELS_MAX:
        cache.clear()
    cache[value] = label
    return label


class Slicer:
    """Maps an event to its :class:`SliceKey`.

    >>> from monitor.config import PolicyConfig
    >>> from monitor.policy.slices import SliceKey
    >>> s = Slicer(PolicyConfig(max_tag_slices_per_route=1))
    >>> e = Event("r1", 0.0, "code", "ok", "t", "r", "tok", output_tokens=5, e2e_ms=9.0,
    ...           batch_size=12, prompt_tokens=300, temperature=0.0, tags={"lang": "py"})
    >>> SliceKey._make(s.key(e))
    SliceKey(batch='8-15', prompt='256-1023', temperature='[0,0.01)', tags='lang=py')
    >>> e.tags = {"lang": "go"}; s.key(e)[3], s.overflowed
    ('*', 1)
    """

    def __init__(self, config: PolicyConfig) -> None:
        self.batch = Buckets(config.batch_edges)
        self.prompt = Buckets(config.prompt_edges)
        self.temperature = Buckets(config.temperature_edges, integer=False)
        self.tag_keys = config.tag_keys
        self.max_tags = config.max_tag_slices_per_route
        self._tags: dict[str, set[str]] = {}
        self._tag_text: dict[tuple[Any, ...], str] = {}
        # Batch sizes and temperatures take few distinct values: their labels are cached
        # (bounded: a producer may send any temperature).
        self._batch_labels: dict[int | None, str] = {}
        self._temperature_labels: dict[float | None, str] = {}
        self.overflowed = 0

    def key(self, e: Event) -> tuple[str, str, str, str]:
        """The fields of the event's :class:`SliceKey` (a plain tuple: this runs per event)."""
        # An absent signal is its own bucket ("?"), never guessed into another.
        b, p, t = e.batch_size, e.prompt_tokens, e.temperature
        batch = self._batch_labels.get(b)
        if batch is None:
            batch = _cached(self._batch_labels, b, "?" if b is None else self.batch.label(b))
        prompt = "?" if p is None else self.prompt.label(p)
        temp = self._temperature_labels.get(t)
        if temp is None:
            temp = _cached(self._temperature_labels, t,
                           "?" if t is None else self.temperature.label(t))
        tags = e.tags
        if not tags:
            return (batch, prompt, temp, "")
        route = e.route
        # Producers send tags in a stable order: the raw items are the cheap cache key.
        raw = (route, *tags.items())
        text = self._tag_text.get(raw)
        if text is None:
            text = tag_slice(tags, self.tag_keys, _EXCLUDED_TAGS)
            seen = self._tags.get(route)
            if seen is None:
                seen = self._tags[route] = set()
            if text and text not in seen:
                if len(seen) >= self.max_tags:
                    text = OVERFLOW_TAGS
                else:
                    seen.add(text)
            if len(self._tag_text) < _CACHE_MAX:
                self._tag_text[raw] = text
        if text == OVERFLOW_TAGS:
            self.overflowed += 1
        return (batch, prompt, temp, text)
