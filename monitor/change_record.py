"""A change on a route: a new setup, the setup it replaced, and how the comparison stands.

Below ``monitor/detect/`` and ``monitor/store/`` (as :mod:`monitor.alert_record`): detection
decides changes, the store keeps them, the change report and the API read them.

A **setup** is what decides how speculation behaves on a route, as a flat dict of strings:
the target (model, revision, tokenizer), the draft (model, revision, tokenizer), the method,
the draft length (``num_speculative_tokens``, "0": speculation off) and the engine. A
**change** is the first event of a setup on a route and temperature bucket whose latest
setup was another one (or a setup coming back after the route left it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["SETUP_FIELDS", "VERDICTS", "ChangeRecord", "change_kind", "describe", "diff"]

SETUP_FIELDS = (
    "target_model", "target_revision", "target_tokenizer", "draft_model", "draft_revision",
    "draft_tokenizer", "method", "num_speculative_tokens", "engine",
)
"""The fields of a setup, in the order a summary names them."""

VERDICTS = ("better", "worse", "same", "insufficient_data")


def diff(previous: dict[str, str], current: dict[str, str]) -> dict[str, list[str]]:
    """``{field: [old, new]}`` for every setup field that differs.

    >>> diff({"target_revision": "t1", "draft_revision": "d1"},
    ...      {"target_revision": "t2", "draft_revision": "d1"})
    {'target_revision': ['t1', 't2']}
    """
    return {f: [previous.get(f, ""), current.get(f, "")] for f in SETUP_FIELDS
            if previous.get(f, "") != current.get(f, "")}


def change_kind(changed: dict[str, list[str]]) -> str:
    """One word for what changed, the most telling first.

    >>> change_kind({"target_revision": ["t1", "t2"]})
    'draft_drift'
    >>> change_kind({"num_speculative_tokens": ["3", "5"]})
    'draft_length'
    >>> change_kind({"num_speculative_tokens": ["3", "0"], "draft_model": ["d", ""]})
    'speculation_off'
    """
    k = changed.get("num_speculative_tokens")
    if k is not None and k[1] == "0":
        return "speculation_off"
    if k is not None and k[0] == "0":
        return "speculation_on"
    target = {"target_model", "target_revision"} & changed.keys()
    draft = {"draft_model", "draft_revision"} & changed.keys()
    if target and not draft:
        return "draft_drift"  # the target moved and the draft did not follow
    if draft or "method" in changed:
        return "new_draft"
    if {"target_tokenizer", "draft_tokenizer"} & changed.keys():
        return "tokenizer"
    if k is not None:
        return "draft_length"
    if "engine" in changed:
        return "engine"
    return "other"


_SHORT = {"target_model": "target model", "target_revision": "target",
          "target_tokenizer": "target tokenizer", "draft_model": "draft model",
          "draft_revision": "draft", "draft_tokenizer": "draft tokenizer",
          "method": "method", "num_speculative_tokens": "draft length", "engine": "engine"}


def describe(changed: dict[str, list[str]], current: dict[str, str]) -> str:
    """What changed, for a summary: "target t1 -> t2, draft d1 unchanged (draft drift)".

    >>> describe({"target_revision": ["t1", "t2"]}, {"draft_revision": "d1"})
    'target t1 -> t2, draft d1 unchanged (draft drift)'
    >>> describe({"draft_revision": ["d1", "d2"]}, {"target_revision": "t1"})
    'draft d1 -> d2, target t1 unchanged'
    """
    parts = [f"{_SHORT[f]} {old or '-'} -> {new or '-'}" for f, (old, new) in changed.items()]
    kind = change_kind(changed)
    if kind == "draft_drift":
        parts.append(f"draft {current.get('draft_revision') or '-'} unchanged (draft drift)")
    elif kind == "new_draft" and "target_revision" not in changed:
        parts.append(f"target {current.get('target_revision') or '-'} unchanged")
    return ", ".join(parts)


@dataclass(slots=True)
class ChangeRecord:
    """One change on one route, and the live comparison of the new setup with the old.

    ``change_id`` is stable (a hash of the new segment and the first event time), so a
    replayed stretch writes the same row again instead of a second one. ``at``: event time
    (Unix seconds) of the new setup's first event on the route. ``previous`` and ``current``
    are setups (:data:`SETUP_FIELDS`, plus ``route`` and ``temperature`` where set).

    ``live`` is the live acceptance comparison: ``state`` (``comparing``, ``worse``,
    ``better``, ``same``, ``insufficient_data``, ``not_compared``), ``reason`` when not
    compared, the previous setup's rate (``previous_rate``), the new setup's
    (``current_rate``), its interval
    (``interval``: [low, high] of the relative change), counts (``requests``,
    ``drafted_tokens``, ``accepted_tokens``), ``basis`` (``rate`` or ``shared_positions``)
    and ``decided_at`` (event time) once decided. Throughput sits under ``throughput``.
    """

    change_id: str
    route: str
    temperature: str
    at: float
    kind: str
    previous: dict[str, str]
    current: dict[str, str]
    changed: dict[str, list[str]]
    segment: str  # the new setup's segment id (detection state key tail)
    previous_segment: str
    live: dict[str, Any] = field(default_factory=dict)
    updated_at: float = 0.0

    @property
    def summary(self) -> str:
        return f"{self.route}: {describe(self.changed, self.current)}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "change_id": self.change_id, "route": self.route, "temperature": self.temperature,
            "at": self.at, "kind": self.kind, "previous": dict(self.previous),
            "current": dict(self.current), "changed": {k: list(v) for k, v in
                                                       self.changed.items()},
            "segment": self.segment, "previous_segment": self.previous_segment,
            "live": dict(self.live), "updated_at": self.updated_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChangeRecord:
        return cls(
            change_id=str(data["change_id"]), route=str(data["route"]),
            temperature=str(data.get("temperature", "")), at=float(data["at"]),
            kind=str(data["kind"]), previous=dict(data["previous"]),
            current=dict(data["current"]),
            changed={k: list(v) for k, v in data["changed"].items()},
            segment=str(data["segment"]), previous_segment=str(data["previous_segment"]),
            live=dict(data.get("live") or {}), updated_at=float(data.get("updated_at", 0.0)),
        )
