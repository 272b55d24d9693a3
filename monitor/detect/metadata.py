"""Deterministic rules on model metadata: ``revision_mismatch`` and ``tokenizer_mismatch``.

No statistics: one event is enough to know that a draft was trained for another target
revision, or speaks another tokenizer. Each inconsistent *pair* (route, target model and
revision, draft model and revision) is one condition per rule, so a rolling deploy that mixes
an old and a new pair on one route raises one alert for the bad pair, not one per event.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from monitor import rules as catalogue
from monitor.detect import base
from monitor.telemetry.event import Event

__all__ = ["Flip", "MetadataCondition", "MetadataRules", "pair_labels"]

REVISION = "revision_mismatch"
TOKENIZER = "tokenizer_mismatch"

_LABELS = ("route", "target_model", "target_revision", "draft_model", "draft_revision")
_NO_FLIPS: tuple[()] = ()  # shared by every update that changes nothing: no list to allocate


def pair_labels(event: Event) -> dict[str, str]:
    """An alert's labels for the event's model pair (absent draft values are ``""``)."""
    return {
        "route": event.route,
        "target_model": event.target_model,
        "target_revision": event.target_revision,
        "draft_model": event.draft_model or "",
        "draft_revision": event.draft_revision or "",
    }


@dataclass(slots=True)
class MetadataCondition:
    """One firing condition: a rule on one pair, since ``since`` (event time).

    :class:`MetadataRules` updates its own records in place (``last_seen``, ``events``) on
    every event of the pair; ``conditions`` and ``active`` hand out copies.
    """

    rule: str
    labels: dict[str, str]
    since: float
    last_seen: float
    events: int
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return catalogue.severity(self.rule)

    def evidence(self) -> dict[str, Any]:
        return {**self.details, "since": self.since, "last_seen": self.last_seen,
                "events": self.events}  # fmt: skip


@dataclass(frozen=True)
class Flip:
    """A condition's state change, for the engine to turn into an alert record."""

    rule: str
    state: str  # "firing" or "resolved"
    labels: dict[str, str]
    at: float
    evidence: dict[str, Any]

    @property
    def severity(self) -> str:
        return catalogue.severity(self.rule)


# one rule's outcome on an event: (rule, pair labels, condition key, details) to fire on the
# pair, or (rule, None, None, None) to resolve what the route no longer shows
_Step = tuple[str, dict[str, str] | None, str | None, dict[str, Any] | None]


def _key(rule: str, labels: dict[str, str]) -> str:
    # a JSON-safe, deterministic key: the rule and the labels in a fixed order
    return "\x1f".join([rule, *(labels[k] for k in _LABELS)])


class MetadataRules(base.Detector):
    """Revision and tokenizer consistency of the model pairs seen on routes.

    Parameters
    ----------
    grace : float
        Event-time seconds an inconsistent pair must have been absent, while the route
        reports consistent events, before its condition resolves. It keeps a rolling deploy
        (old and new replicas answering in turn) or a late event from flapping the alert.
    max_pairs : int
        Most draft pairings remembered (least recently seen forgotten first): bounded memory.

    Notes
    -----
    ``revision_mismatch`` fires on the first event where

    - the draft reports ``pinned_target_revision`` and it differs from the target revision, or
    - the draft reports no pinned revision and the target revision differs from the one this
      draft (model, revision) was first seen with on the route: the target changed, the draft
      did not.

    A reported pinned revision is authoritative: a draft pinned to the new target revision is
    consistent even though the target changed under it (it was validated for it).
    ``tokenizer_mismatch`` fires when the draft and target tokenizers differ. Events without a
    draft model (no speculation, or n-gram drafting) have nothing to mismatch: they count as
    consistent.

    A condition resolves when an event of the same route is consistent for that rule and the
    condition's pair has not been seen for ``grace`` seconds. Results of the last update are in
    ``flips``; ``changed`` is True when there are any; ``active`` (keyed by rule and labels)
    and ``conditions`` (in firing order) hold what is firing.

    Examples
    --------
    >>> rules = MetadataRules(grace=60)
    >>> def event(ts, target_rev, draft_rev="d1", pinned=None, draft_tok="llama3"):
    ...     return Event(f"r{ts}", ts, "chat", "ok", "llama-70b", target_rev, "llama3", 10, 50.0,
    ...                  draft_model="llama-1b", draft_revision=draft_rev,
    ...                  draft_tokenizer=draft_tok, pinned_target_revision=pinned)
    >>> rules.update(event(0.0, "r1"))
    >>> rules.update(event(10.0, "r2"))                      # target changed, draft did not
    >>> [(f.rule, f.state, f.labels["target_revision"]) for f in rules.flips]
    [('revision_mismatch', 'firing', 'r2')]
    >>> rules.update(event(20.0, "r2")); rules.changed       # the same pair: no new alert
    False
    >>> rules.update(event(100.0, "r2", draft_rev="d2"))     # the draft was updated too
    >>> [(f.rule, f.state, f.labels["draft_revision"]) for f in rules.flips]
    [('revision_mismatch', 'resolved', 'd1')]
    >>> rules.update(event(110.0, "r2", draft_rev="d2", draft_tok="qwen2"))
    >>> [(f.rule, f.state) for f in rules.flips], rules.firing
    ([('tokenizer_mismatch', 'firing')], True)
    >>> [(rule, dict(labels)["draft_revision"]) for rule, labels in rules.active]
    [('tokenizer_mismatch', 'd2')]
    """

    KIND = "metadata_rules"
    PARAMS = {"grace": float, "max_pairs": int}
    STATE = (
        base.field("first_target", dump=lambda ft: [[k, v] for k, v in ft.items()],
              load=lambda pairs: {k: v for k, v in pairs}),
        base.field("active", dump=lambda active: [_condition_json(c) for c in active.values()],
              load=lambda raw: {_key(c.rule, c.labels): c for c in map(_condition, raw)}),
        base.field("flips", dump=lambda flips: [_flip_json(f) for f in flips],
              load=lambda raw: [_flip(f) for f in raw]),
    )

    def __init__(self, grace: float = 300.0, max_pairs: int = 64) -> None:
        if grace < 0 or max_pairs < 1:
            raise ValueError("grace must be >= 0 and max_pairs >= 1")
        self._set_params(locals())
        # (route, target model, draft model, draft revision) -> target revision first seen
        self._first_target: dict[str, str] = {}
        # condition key -> condition, in firing order
        self._active: dict[str, MetadataCondition] = {}
        self._flips: Sequence[Flip] = _NO_FLIPS
        # The last event's metadata and what it led to (see update): not state, a memo. An
        # event with the same metadata leads to the same steps, since the only state they read,
        # the target revision first seen with the draft, was set by that very event.
        self._last: tuple[tuple[str | None, ...], tuple[_Step, ...], bool] | None = None

    # -- feeding ------------------------------------------------------------------------------

    def update(self, event: Event) -> None:
        """Check one event's model metadata."""
        meta = (event.route, event.target_model, event.target_revision, event.target_tokenizer,
                event.draft_model, event.draft_revision, event.draft_tokenizer,
                event.pinned_target_revision)  # fmt: skip
        last = self._last
        if last is not None and last[0] == meta:
            steps = last[1]
            if last[2] and not self._active:
                # the common case: the pair of the last event again, consistent, and nothing
                # firing that a consistent event could resolve
                self._flips = _NO_FLIPS
                return
        else:
            steps = self._steps(event)
            self._last = (meta, steps, not any(labels for _, labels, _, _ in steps))
        flips: list[Flip] = []
        self._flips = flips
        ts = event.ts
        for rule, labels, key, details in steps:
            if labels is None:
                if self._active:
                    self._resolve_absent(event.route, rule, ts, flips)
            else:
                assert key is not None and details is not None
                self._fire(rule, labels, key, ts, details, flips)

    def update_many(self, events: Sequence[Event]) -> int:
        """Check events in order until one flips a condition; how many were taken.

        Exactly what :meth:`update` on each would do: read ``flips`` as after :meth:`update`,
        then call again with the rest. An event whose metadata is the memo's, consistent,
        while nothing fires, changes nothing (see :meth:`update`): only the others are
        updated one by one.
        """
        self._flips = _NO_FLIPS
        for i, e in enumerate(events):
            last = self._last
            if (last is not None and last[2] and not self._active
                    and last[0] == (e.route, e.target_model, e.target_revision,
                                    e.target_tokenizer, e.draft_model, e.draft_revision,
                                    e.draft_tokenizer, e.pinned_target_revision)):
                continue
            self.update(e)
            if self._flips:
                return i + 1
        return len(events)

    def _steps(self, event: Event) -> tuple[_Step, ...]:
        """Per rule, in order: fire on the event's pair (labels, key, details) or resolve."""
        if event.draft_model is None:
            return ((REVISION, None, None, None), (TOKENIZER, None, None, None))
        labels = pair_labels(event)
        steps: list[_Step] = []
        revision = self._revision_problem(event)
        if revision is None:
            steps.append((REVISION, None, None, None))
        else:
            steps.append((REVISION, labels, _key(REVISION, labels), revision))
        if event.draft_tokenizer is not None and event.draft_tokenizer != event.target_tokenizer:
            details = {"target_tokenizer": event.target_tokenizer,
                       "draft_tokenizer": event.draft_tokenizer}  # fmt: skip
            steps.append((TOKENIZER, labels, _key(TOKENIZER, labels), details))
        else:
            steps.append((TOKENIZER, None, None, None))
        return tuple(steps)

    def _revision_problem(self, event: Event) -> dict[str, Any] | None:
        pinned = event.pinned_target_revision
        if pinned is not None:
            if pinned != event.target_revision:
                return {"reason": "pinned_target_revision", "target_revision":
                        event.target_revision, "pinned_target_revision": pinned}  # fmt: skip
            return None
        key = "\x1f".join((event.route, event.target_model, event.draft_model or "",
                           event.draft_revision or ""))  # fmt: skip
        first = self._first_target.pop(key, None)  # re-inserted below: most recent last
        if first is None:
            first = event.target_revision
        self._first_target[key] = first
        if len(self._first_target) > self.max_pairs:
            del self._first_target[next(iter(self._first_target))]
        if first != event.target_revision:
            return {"reason": "target_changed", "target_revision": event.target_revision,
                    "previous_target_revision": first}  # fmt: skip
        return None

    def _fire(self, rule: str, labels: dict[str, str], key: str, ts: float,
              details: dict[str, Any], flips: list[Flip]) -> None:  # fmt: skip
        cond = self._active.get(key)
        if cond is not None:
            if ts > cond.last_seen:
                cond.last_seen = ts
            cond.events += 1
            return
        cond = MetadataCondition(rule, labels, ts, ts, 1, details)
        self._active[key] = cond
        flips.append(Flip(rule, "firing", labels, ts, cond.evidence()))
        if len(self._active) > self.max_pairs:
            # bounded memory: the condition seen least recently resolves
            oldest = min(self._active, key=lambda k: self._active[k].last_seen)
            gone = self._active.pop(oldest)
            evidence = {**gone.evidence(), "reason_resolved": "evicted"}
            flips.append(Flip(gone.rule, "resolved", gone.labels, ts, evidence))

    def _resolve_absent(self, route: str, rule: str, ts: float, flips: list[Flip]) -> None:
        for key in [k for k, c in self._active.items()
                    if c.rule == rule and c.labels["route"] == route
                    and ts - c.last_seen >= self.grace]:  # fmt: skip
            gone = self._active.pop(key)
            flips.append(Flip(rule, "resolved", gone.labels, ts, gone.evidence()))

    # -- results ------------------------------------------------------------------------------

    @property
    def flips(self) -> list[Flip]:
        """Conditions that fired or resolved on the last update."""
        return list(self._flips)

    @property
    def changed(self) -> bool:
        return bool(self._flips)

    @property
    def firing(self) -> bool:
        """Whether any condition is firing."""
        return bool(self._active)

    @property
    def active(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], MetadataCondition]:
        """The firing conditions keyed by (rule, the pair's labels as sorted items)."""
        return {(c.rule, tuple(sorted(c.labels.items()))): replace(c)
                for c in self._active.values()}  # fmt: skip

    @property
    def conditions(self) -> list[MetadataCondition]:
        """The firing conditions, in the order they fired."""
        return [replace(c) for c in self._active.values()]

    def evidence(self) -> dict[str, Any]:
        return {
            "conditions": [
                {"rule": c.rule, "severity": c.severity, "labels": dict(c.labels),
                 **c.evidence()}
                for c in self._active.values()
            ]
        }  # fmt: skip


def _condition_json(c: MetadataCondition) -> dict[str, Any]:
    return {"rule": c.rule, "labels": c.labels, "since": c.since, "last_seen": c.last_seen,
            "events": c.events, "details": c.details}


def _condition(c: dict[str, Any]) -> MetadataCondition:
    return MetadataCondition(c["rule"], dict(c["labels"]), c["since"], c["last_seen"],
                             int(c["events"]), dict(c["details"]))


def _flip_json(f: Flip) -> dict[str, Any]:
    return {"rule": f.rule, "state": f.state, "labels": f.labels, "at": f.at,
            "evidence": f.evidence}


def _flip(f: dict[str, Any]) -> Flip:
    return Flip(f["rule"], f["state"], dict(f["labels"]), f["at"], f["evidence"])
