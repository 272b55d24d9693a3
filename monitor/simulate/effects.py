"""What the active incidents do to each request of a route."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from monitor.simulate.durations import format_time
from monitor.simulate.incidents import NEEDS_DRAFT, Incident
from monitor.simulate.profiles import DraftModel, RouteProfile, TargetModel, foreign_draft

_METADATA_KINDS = ("revision_change", "tokenizer_swap", "draft_change")


@dataclass
class Conditions:
    """Per-request settings of one route over one chunk (arrays aligned with its requests)."""

    keep: np.ndarray  # False where the route is silent
    rate: np.ndarray  # target engine acceptance rate
    spec_on: np.ndarray
    evicted: np.ndarray
    error_rate: np.ndarray
    slowdown: np.ndarray  # decode step cost multiplier
    draft_cost_mult: np.ndarray
    batch_mult: np.ndarray
    variant: np.ndarray  # index into RouteEffects.variants
    k: np.ndarray  # num_speculative_tokens of each request
    mismatch: np.ndarray  # share of greedy speculative outputs that differ (lossy_verifier)


class RouteEffects:
    """The incidents of one route, and the target/draft metadata each combination implies.

    Metadata incidents (revision change, tokenizer swap, draft change) are numbered; a
    request's variant is the bit set of those active at its time, so metadata dicts are built
    once per variant.

    ``rate`` is the engine rate at the route's own draft length: it fixes the per-token chain
    acceptance, which ``draft_length`` keeps while it changes the length (see ``model``).
    """

    def __init__(self, route: RouteProfile, incidents: tuple[Incident, ...], start: float) -> None:
        self.route = route
        self.start = start
        self.incidents = tuple(
            i for i in incidents
            if i.applies_to(route.name) and (route.draft is not None or i.kind not in NEEDS_DRAFT)
        )
        self._metadata = [i for i in self.incidents if i.kind in _METADATA_KINDS]
        self._variants: dict[int, tuple[TargetModel, DraftModel | None]] = {}

    def variant(self, code: int) -> tuple[TargetModel, DraftModel | None]:
        """Target and draft when the metadata incidents in bit set ``code`` are active."""
        if code not in self._variants:
            target, draft = self.route.target, self.route.draft
            for bit, inc in enumerate(self._metadata):
                if not code >> bit & 1:
                    continue
                if inc.kind == "revision_change":
                    target = replace(target, revision=self._new_revision(inc, target.revision))
                elif inc.kind == "draft_change" and draft is not None:
                    draft = replace(draft, revision=self._new_revision(inc, draft.revision))
                    if draft.pinned_target_revision is not None:
                        # the new draft is built for the target serving when it is deployed,
                        # so it matches: no revision mismatch of its own
                        draft = replace(draft, pinned_target_revision=self._target_at(inc.at_s))
                elif draft is not None:
                    draft = foreign_draft(self.route)
            self._variants[code] = (target, draft)
        return self._variants[code]

    def _target_at(self, offset: float) -> str:
        """The target revision serving at ``offset`` (after the revision changes active then)."""
        revision = self.route.target.revision
        for inc in self._metadata:
            if inc.kind == "revision_change" and inc.at_s <= offset < inc.end_s:
                revision = self._new_revision(inc, revision)
        return revision

    def _new_revision(self, inc: Incident, old: str) -> str:
        if inc.revision is not None:
            return str(inc.revision)
        # Revisions are release dates here: the new one is the day it was deployed.
        new = format_time(self.start + inc.at_s)[:10]
        return new if new != old else f"{new}.1"

    def conditions(self, offsets: np.ndarray, u_evict: np.ndarray) -> Conditions:
        """Settings for requests finishing at ``offsets`` seconds after the start."""
        n = len(offsets)
        c = Conditions(
            keep=np.ones(n, dtype=bool),
            rate=np.full(n, self.route.acceptance),
            spec_on=np.ones(n, dtype=bool),
            evicted=np.zeros(n, dtype=bool),
            error_rate=np.zeros(n),  # baseline added by the caller
            slowdown=np.ones(n),
            draft_cost_mult=np.ones(n),
            batch_mult=np.ones(n),
            variant=np.zeros(n, dtype=np.int64),
            k=np.full(n, self.route.num_speculative_tokens, dtype=np.int64),
            mismatch=np.zeros(n),
        )
        for inc in self.incidents:
            active = (offsets >= inc.at_s) & (offsets < inc.end_s)
            if not active.any():
                continue
            kind = inc.kind
            if kind in _METADATA_KINDS:
                c.variant[active] |= 1 << self._metadata.index(inc)
            if kind in ("revision_change", "draft_change", "acceptance_shift"):
                c.rate[active] *= inc.param("factor")
            elif kind == "draft_length":
                c.k[active] = inc.param("k")
            elif kind == "tokenizer_swap":
                c.rate[active] = inc.param("acceptance")
                # re-tokenising between vocabularies makes every draft step dearer
                c.draft_cost_mult[active] *= inc.param("slowdown")
            elif kind == "eviction":
                hit = active & (u_evict < inc.param("share"))
                c.evicted |= hit
                c.slowdown[hit] *= inc.param("slowdown")
            elif kind == "silence":
                c.keep &= ~active
            elif kind == "speculation_off":
                c.spec_on &= ~active
            elif kind == "error_spike":
                c.error_rate[active] = np.maximum(c.error_rate[active], inc.param("rate"))
                c.slowdown[active] *= inc.param("slowdown")
            elif kind == "batch_surge":
                c.batch_mult[active] *= inc.param("factor")
            elif kind == "lossy_verifier":
                c.mismatch[active] = np.maximum(c.mismatch[active], inc.param("share"))
        return c
