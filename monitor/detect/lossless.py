"""Continuous losslessness: rule ``output_mismatch`` (telemetry v1.1 "Losslessness").

Speculative decoding must not change what a greedy request answers: two greedy requests
(temperature 0) with the same ``prompt_hash`` on the same target model and revision, one
served with speculation and one without, must have the same ``output_hash``. A difference is
an implementation fault (a verification bug, a kernel that is not batch-invariant under
speculation), never "the draft's style", hence a critical rule that needs one mismatch.

Per route, :class:`LosslessMonitor` remembers for each (target model, target revision, prompt
hash) the first output seen with speculation and the first seen without, for ``horizon``
seconds of event time and at most ``max_prompts`` prompts (the oldest forgotten first, and
counted). Every later request of a prompt whose other side is remembered is one *matched
pair*: equal hashes agree, different hashes are a mismatch. Matched pairs are counted per
model pair (route, target, and the draft of the speculative side: the side without
speculation has no draft), which is what one alert is about. A pair's alert resolves after
``resolve_pairs`` matched pairs in a row agree, or when no matched pair has come for
``horizon`` seconds (the pair left the route: nothing can confirm it any more).

Only requests that finished (status ``ok``) count: a cancelled or failed request has a
partial output whose hash differs for reasons of its own. A request that does not report its
temperature is not assumed greedy.

Memory holds digests, not the reported strings: a prompt key is 12 bytes of BLAKE2b over the
target and the prompt hash, an output 8 bytes over the output hash (collisions are below any
rate that matters at ``max_prompts`` prompts), so every remembered prompt costs the same.

:class:`LosslessBook` keeps the monitors of the routes judged here, and their stored state
under keys of their own (``detect/lossless/<route id>``), written only when they changed: the
remembered prompts are by far the largest detection state and must not ride along with the
route's snapshot, which every event dirties.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from monitor.detect import base
from monitor.detect.metadata import Flip, pair_labels
from monitor.detect.segments import key_id
from monitor.telemetry.event import Event
from monitor.versioned import require_version

__all__ = ["LOSSLESS_PREFIX", "RULE", "LosslessBook", "LosslessMonitor", "PairTally"]

RULE = "output_mismatch"
LOSSLESS_PREFIX = "detect/lossless/"
SWEEP_EVERY = 60.0  # event-time seconds between sweeps for pairs gone quiet

_NO_FLIPS: tuple[()] = ()
_NEVER = float("-inf")  # stored as null: JSON has no infinity


def _time(value: float | None) -> float:
    return _NEVER if value is None else float(value)

# A remembered prompt: (first seen (event time), speculative side's output digest, request id,
# draft model, draft revision, method; the side without speculation's output digest, request
# id). A side not seen yet is None. A tuple of strings and numbers, replaced when a side is
# first seen: the garbage collector stops tracking such tuples, and a hundred thousand tracked
# lists made every full collection (and the snapshot's allocations trigger some) crawl.
_Entry = tuple[Any, ...]
_EMPTY_SIDES = (None,) * 7
_TS, _S_OUT, _S_ID, _S_DRAFT, _S_DREV, _S_METHOD, _N_OUT, _N_ID = range(8)


def _digest(text: str, size: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def greedy(e: Event) -> bool:
    """A request that counts for losslessness: greedy by its own report, finished, hashed.

    >>> def event(**kw):
    ...     return Event("r", 0.0, "code", "ok", "t", "1", "tok", 10, 50.0, **kw)
    >>> greedy(event(temperature=0.0, prompt_hash="p", output_hash="o"))
    True
    >>> greedy(event(prompt_hash="p", output_hash="o"))  # no temperature: not assumed greedy
    False
    """
    return (e.temperature == 0.0 and e.prompt_hash is not None and e.output_hash is not None
            and e.status == "ok")


@dataclass(slots=True)
class PairTally:
    """Matched pairs of one model pair on the route, and its alert's state."""

    labels: dict[str, str]
    pairs: int = 0
    mismatches: int = 0
    streak: int = 0  # matched pairs in a row that agreed, since the last mismatch
    firing: bool = False
    since: float | None = None  # event time of the mismatch that fired
    last_seen: float = 0.0  # event time of the newest matched pair
    spec_request_id: str | None = None  # a sample mismatch (the one that fired)
    no_spec_request_id: str | None = None
    method: str | None = None

    def evidence(self) -> dict[str, Any]:
        lab = self.labels
        return {"route": lab["route"],
                "pair": {k: lab[k] for k in ("target_model", "target_revision", "draft_model",
                                             "draft_revision")},
                "spec_request_id": self.spec_request_id,
                "no_spec_request_id": self.no_spec_request_id,
                "matched_pairs": self.pairs, "mismatches": self.mismatches,
                "agreeing_in_a_row": self.streak, "since": self.since,
                "last_seen": self.last_seen, **({"method": self.method} if self.method else {})}

    def to_json(self) -> list[Any]:
        return [self.labels, self.pairs, self.mismatches, self.streak, self.firing, self.since,
                self.last_seen, self.spec_request_id, self.no_spec_request_id, self.method]

    @classmethod
    def from_json(cls, raw: Sequence[Any]) -> PairTally:
        return cls(dict(raw[0]), int(raw[1]), int(raw[2]), int(raw[3]), bool(raw[4]), raw[5],
                   float(raw[6]), raw[7], raw[8], raw[9])


def _pair_key(labels: dict[str, str]) -> str:
    return "\x1f".join((labels["target_model"], labels["target_revision"],
                        labels["draft_model"], labels["draft_revision"]))


class LosslessMonitor(base.Detector):
    """Greedy outputs with and without speculation, matched by prompt, on one route.

    Parameters
    ----------
    horizon : float
        Event-time seconds a prompt's first outputs are remembered (and a firing pair waits
        for a matched pair before it is taken to have left the route).
    max_prompts : int
        Most prompts remembered; the oldest are forgotten first (``evictions`` counts them).
    resolve_pairs : int
        Matched pairs in a row that must agree, after a mismatch, to resolve.
    max_pairs : int
        Most model pairs tallied (the least recently matched, not firing, forgotten first).

    Notes
    -----
    Feed it the route's events; those without ``prompt_hash`` cost one attribute check (the
    engine makes it before calling). State changes of the last update are in ``flips``.

    Examples
    --------
    >>> m = LosslessMonitor(resolve_pairs=2)
    >>> def event(i, prompt, out, spec=True):
    ...     return Event(f"r-{i}", float(i), "code", "ok", "m", "r2", "tok", 10, 50.0,
    ...                  draft_model="d" if spec else None, draft_revision="d1" if spec else None,
    ...                  has_spec=spec, num_speculative_tokens=4 if spec else 0,
    ...                  temperature=0.0, prompt_hash=prompt, output_hash=out)
    >>> m.update(event(1, "p1", "a", spec=False)); m.update(event(2, "p1", "a"))  # agree
    >>> m.update(event(9, "p2", "b", spec=False)); m.update(event(17, "p2", "c"))  # differ
    >>> [(f.rule, f.state, f.labels["draft_revision"]) for f in m.flips]
    [('output_mismatch', 'firing', 'd1')]
    >>> ev = m.flips[0].evidence
    >>> ev["matched_pairs"], ev["mismatches"], ev["spec_request_id"], ev["no_spec_request_id"]
    (2, 1, 'r-17', 'r-9')
    >>> m.update(event(20, "p1", "a")); m.update(event(21, "p1", "a"))
    >>> [(f.state, f.evidence["agreeing_in_a_row"]) for f in m.flips]
    [('resolved', 2)]
    """

    rule = RULE
    KIND = "lossless"
    PARAMS = {"horizon": float, "max_prompts": int, "resolve_pairs": int, "max_pairs": int}
    STATE = (
        # columns, not rows: the remembered tuples as they are, no object per prompt to build
        base.field("prompts", dump=lambda p: [list(p), list(p.values())],
                   load=lambda raw: dict(zip(raw[0], map(tuple, raw[1]), strict=True))),
        base.field("tallies", dump=lambda t: [v.to_json() for v in t.values()],
                   load=lambda raw: {_pair_key(t.labels): t
                                     for t in map(PairTally.from_json, raw)}),
        base.field("flips", dump=lambda flips: [_flip_json(f) for f in flips],
                   load=lambda raw: [_flip(f) for f in raw]),
        base.field("now", dump=lambda v: None if v == _NEVER else v, load=_time),
        base.field("last_sweep", dump=lambda v: None if v == _NEVER else v, load=_time),
        base.field("evictions", load=int),
        base.field("expired", load=int),
        base.field("same_side_differences", load=int),
    )

    def __init__(self, horizon: float = 3600.0, max_prompts: int = 10_000,
                 resolve_pairs: int = 20, max_pairs: int = 64) -> None:
        if horizon <= 0 or max_prompts < 1 or resolve_pairs < 1 or max_pairs < 1:
            raise ValueError("horizon must be > 0; max_prompts, resolve_pairs and max_pairs "
                             ">= 1")
        self._set_params(locals())
        # prompt key digest -> remembered prompt, oldest first (insertion order)
        self._prompts: dict[str, _Entry] = {}
        # pair key -> tally, least recently matched first
        self._tallies: dict[str, PairTally] = {}
        self._flips: Sequence[Flip] = _NO_FLIPS
        self._now = _NEVER  # newest event time seen
        self._last_sweep = _NEVER
        self._evictions = 0  # prompts forgotten to stay within max_prompts
        self._expired = 0  # prompts forgotten after horizon
        # Outputs that differ from the first of the same side (both with, or both without,
        # speculation): the engine is not deterministic even where speculation plays no
        # part, which is worth knowing before blaming the draft.
        self._same_side_differences = 0

    # -- feeding ------------------------------------------------------------------------------

    def update(self, e: Event) -> None:
        """Match one request against the remembered outputs of its prompt."""
        if self._flips:
            self._flips = _NO_FLIPS
        if e.prompt_hash is None or not greedy(e):
            return
        ts = e.ts
        if ts > self._now:
            self._now = ts
            self._forget_old(ts)
        elif ts < self._now - self.horizon:
            return  # later than the horizon: whatever it matched is forgotten already
        assert e.output_hash is not None
        out = _digest(e.output_hash, 8)
        key = _digest("\x1f".join((e.target_model, e.target_revision, e.prompt_hash)), 12)
        spec = e.has_spec and e.num_speculative_tokens > 0
        entry = self._prompts.get(key)
        if entry is not None and entry[_TS] < self._now - self.horizon:
            del self._prompts[key]  # a late event kept it past the horizon
            self._expired += 1
            entry = None
        if entry is None:
            entry = (ts, *_EMPTY_SIDES)
            self._prompts[key] = entry
            if len(self._prompts) > self.max_prompts:
                del self._prompts[next(iter(self._prompts))]
                self._evictions += 1
        if spec:
            if entry[_S_OUT] is None:
                self._prompts[key] = (entry[_TS], out, e.request_id, e.draft_model,
                                      e.draft_revision, e.method, entry[_N_OUT], entry[_N_ID])
            elif entry[_S_OUT] != out:
                self._same_side_differences += 1
            if entry[_N_OUT] is not None:
                self._matched(pair_labels(e), e.method, out == entry[_N_OUT], e.request_id,
                              entry[_N_ID], ts)
        else:
            if entry[_N_OUT] is None:
                self._prompts[key] = (*entry[:_N_OUT], out, e.request_id)
            elif entry[_N_OUT] != out:
                self._same_side_differences += 1
            if entry[_S_OUT] is not None:
                labels = {"route": e.route, "target_model": e.target_model,
                          "target_revision": e.target_revision,
                          "draft_model": entry[_S_DRAFT] or "",
                          "draft_revision": entry[_S_DREV] or ""}
                self._matched(labels, entry[_S_METHOD], out == entry[_S_OUT], entry[_S_ID],
                              e.request_id, ts)
        if ts - self._last_sweep >= SWEEP_EVERY:
            self._last_sweep = ts
            self._resolve_quiet(ts)

    def _forget_old(self, now: float) -> None:
        # insertion order is event order but for late events: the front is (nearly) the oldest
        prompts, cutoff = self._prompts, now - self.horizon
        while prompts:
            key = next(iter(prompts))
            if prompts[key][_TS] >= cutoff:
                break
            del prompts[key]
            self._expired += 1

    def _matched(self, labels: dict[str, str], method: str | None, agree: bool,
                 spec_id: str, no_spec_id: str, ts: float) -> None:
        pkey = _pair_key(labels)
        tally = self._tallies.pop(pkey, None)  # re-inserted: most recently matched last
        if tally is None:
            tally = PairTally(labels, method=method)
        self._tallies[pkey] = tally
        tally.pairs += 1
        if ts > tally.last_seen:
            tally.last_seen = ts
        if agree:
            tally.streak += 1
            if tally.firing and tally.streak >= self.resolve_pairs:
                tally.firing = False
                self._flip(Flip(RULE, "resolved", tally.labels, ts, tally.evidence()))
        else:
            tally.mismatches += 1
            tally.streak = 0
            if not tally.firing:
                tally.firing, tally.since = True, ts
                tally.spec_request_id, tally.no_spec_request_id = spec_id, no_spec_id
                self._flip(Flip(RULE, "firing", tally.labels, ts, tally.evidence()))
        if len(self._tallies) > self.max_pairs:
            self._forget_pair(ts)

    def _forget_pair(self, ts: float) -> None:
        quiet = next((k for k, t in self._tallies.items() if not t.firing), None)
        gone = self._tallies.pop(quiet if quiet is not None else next(iter(self._tallies)))
        if gone.firing:  # every pair fires: the least recently matched resolves, saying why
            self._flip(Flip(RULE, "resolved", gone.labels, ts,
                            {**gone.evidence(), "reason_resolved": "evicted"}))

    def tick(self, now: float) -> None:
        """A sweep without an event (the engine's, every minute): firing pairs that had no
        matched pair for ``horizon`` seconds resolve."""
        if self._flips:
            self._flips = _NO_FLIPS
        self._resolve_quiet(now)

    def _resolve_quiet(self, ts: float) -> None:
        for tally in self._tallies.values():
            if tally.firing and ts - tally.last_seen >= self.horizon:
                tally.firing = False
                self._flip(Flip(RULE, "resolved", tally.labels, ts,
                                {**tally.evidence(), "reason_resolved": "no matched pairs"}))

    def _flip(self, flip: Flip) -> None:
        if not self._flips:
            self._flips = []
        assert isinstance(self._flips, list)
        self._flips.append(flip)

    # -- results ------------------------------------------------------------------------------

    @property
    def flips(self) -> list[Flip]:
        """Alerts that fired or resolved on the last update."""
        return list(self._flips)

    @property
    def changed(self) -> bool:
        return bool(self._flips)

    @property
    def firing(self) -> bool:
        """Whether any model pair's condition is firing."""
        return any(t.firing for t in self._tallies.values())

    @property
    def conditions(self) -> list[PairTally]:
        """The firing pairs (copies), least recently matched first."""
        return [replace(t) for t in self._tallies.values() if t.firing]

    @property
    def prompts(self) -> int:
        """Prompts remembered now."""
        return len(self._prompts)

    def evidence(self) -> dict[str, Any]:
        return {"prompts": len(self._prompts), "evictions": self._evictions,
                "expired": self._expired,
                "same_side_differences": self._same_side_differences,
                "pairs": [{"labels": dict(t.labels), "firing": t.firing, **t.evidence()}
                          for t in self._tallies.values()]}


def _flip_json(f: Flip) -> dict[str, Any]:
    return {"rule": f.rule, "state": f.state, "labels": f.labels, "at": f.at,
            "evidence": f.evidence}


def _flip(f: dict[str, Any]) -> Flip:
    return Flip(f["rule"], f["state"], dict(f["labels"]), f["at"], f["evidence"])


class LosslessBook:
    """The routes' monitors: those judged here, those stored by another process, and which
    changed since the last snapshot.

    A route's monitor is created on its first event with a ``prompt_hash``: routes that send
    none keep no state. Ownership follows the route's (``owns_route`` at load); a monitor
    stored by another process is taken over when the route's events arrive here.

    >>> book = LosslessBook(lambda: LosslessMonitor(horizon=60))
    >>> m = book.monitor("code")
    >>> list(book.snapshot()) == [LOSSLESS_PREFIX + key_id(["code"])]
    True
    >>> book.snapshot()  # nothing changed since
    {}
    """

    def __init__(self, factory: Callable[[], LosslessMonitor]) -> None:
        self.factory = factory
        self.judged: dict[str, LosslessMonitor] = {}
        self.aside: dict[str, LosslessMonitor] = {}
        self.dirty: set[str] = set()

    def monitor(self, route: str) -> LosslessMonitor:
        """The route's monitor (taken over or created), marked as changed."""
        m = self.judged.get(route)
        if m is None:
            m = self.aside.pop(route, None) or self.factory()
            self.judged[route] = m
        self.dirty.add(route)
        return m

    def load(self, states: dict[str, Any], owns_route: Callable[[str], bool]) -> None:
        """Restore the stored monitors (every key of the source; others are skipped)."""
        self.clear()
        for key, data in states.items():
            if key.startswith(LOSSLESS_PREFIX):
                require_version(data, "lossless_route", 1)
                m = LosslessMonitor.restore(data["monitor"])
                (self.judged if owns_route(data["route"]) else self.aside)[data["route"]] = m

    def snapshot(self) -> dict[str, Any]:
        """The monitors that changed since the last call, keyed for the state table."""
        out = {LOSSLESS_PREFIX + key_id([name]): {"kind": "lossless_route", "version": 1,
                                                 "route": name,
                                                 "monitor": self.judged[name].snapshot()}
               for name in self.dirty if name in self.judged}
        self.dirty.clear()
        return out

    def clear(self) -> None:
        self.judged.clear()
        self.aside.clear()
        self.dirty.clear()

    def conditions(self) -> Iterator[PairTally]:
        """Every firing pair of the routes judged here."""
        for m in self.judged.values():
            yield from m.conditions
