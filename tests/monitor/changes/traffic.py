"""Hand-built traffic around setup changes, written through the store's checkpoint.

Each request drafts ``K`` tokens per verification step for ``steps`` steps; a step keeps its
draft up to the first rejected position, each position accepted with probability ``p``
(so position i survives with ``p**i``, as real drafts do: a longer draft lowers the raw rate
with no drift). ``p`` wanders from minute to minute (``spread``): requests of one minute are
not independent, as on a real route.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from monitor.change_record import ChangeRecord, change_kind, diff
from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store
from monitor.telemetry.event import Event
from tests.monitor.store.helpers import T0, rollups_of

__all__ = ["AT", "HOUR", "OLD", "T0", "THREE", "change", "commit", "setup", "three_changes",
           "traffic"]

OLD: dict[str, str] = {
    "target_model": "llama-70b", "target_revision": "t1", "target_tokenizer": "llama3",
    "draft_model": "llama-1b", "draft_revision": "d1", "draft_tokenizer": "llama3",
    "method": "draft_model", "num_speculative_tokens": "4", "engine": "vllm-0.9",
}


def setup(**fields: str) -> dict[str, str]:
    """``OLD`` with ``fields`` replaced; ``num_speculative_tokens="0"`` empties the draft."""
    s = {**OLD, **fields}
    if s["num_speculative_tokens"] == "0":
        s.update(draft_model="", draft_revision="", draft_tokenizer="", method="")
    return s


def traffic(route: str, s: Mapping[str, str], start: float, minutes: int, *,
            per_minute: int = 20, p: float = 0.7, ttft: float = 100.0, e2e: float = 1000.0,
            error_rate: float = 0.0, spread: float = 0.03, steps: int = 8, seed: int = 0,
            prefix: str = "") -> list[Event]:
    rng = np.random.default_rng(seed)
    k = int(s["num_speculative_tokens"])
    out = []
    for minute in range(minutes):
        p_min = float(np.clip(p + rng.normal(0.0, spread), 0.01, 0.99))
        for i in range(per_minute):
            ts = start + minute * 60 + (i + 0.5) * 60 / per_minute
            fields: dict[str, Any] = {}
            if k:
                # leading accepted positions per step, truncated at k
                accepted_run = np.minimum(rng.geometric(1.0 - p_min, steps) - 1, k)
                pp = tuple(int((accepted_run >= j).sum()) for j in range(1, k + 1))
                fields = dict(has_spec=True, num_speculative_tokens=k,
                              drafted_tokens=k * steps, accepted_tokens=int(accepted_run.sum()),
                              verify_steps=steps, accepted_per_position=pp,
                              draft_model=s["draft_model"], draft_revision=s["draft_revision"],
                              draft_tokenizer=s["draft_tokenizer"], method=s["method"])
            t = float(ttft * rng.lognormal(0.0, 0.2))
            total = t + float((e2e - ttft) * rng.lognormal(0.0, 0.2))
            out.append(Event(
                f"{prefix}{route}-{start}-{minute}-{i}", ts, route,
                "error" if rng.random() < error_rate else "ok", s["target_model"],
                s["target_revision"], s["target_tokenizer"], output_tokens=100, e2e_ms=total,
                ttft_ms=t, engine=s.get("engine"), **fields))
    return out


def change(change_id: str, at: float, previous: Mapping[str, str], current: Mapping[str, str],
           *, route: str = "chat", temperature: str = "", live: dict[str, Any] | None = None
           ) -> ChangeRecord:
    changed = diff(dict(previous), dict(current))
    return ChangeRecord(
        change_id=change_id, route=route, temperature=temperature, at=at,
        kind=change_kind(changed), previous={**previous, "route": route},
        current={**current, "route": route}, changed=changed, segment=f"seg-{change_id}",
        previous_segment=f"prev-{change_id}", live=dict(live or {}), updated_at=at,
    )


def commit(store: Store, events: Iterable[Event], changes: Iterable[ChangeRecord] = (),
           source: str = "replay") -> None:
    store.commit(Checkpoint(source=source, rollups=rollups_of(events), changes=list(changes)))


HOUR = 3600
AT = T0 + 2 * HOUR + 17.5  # mid-minute, as a real first event is
THREE = {"chat": "worse", "code": "better", "docs": "same"}


def three_changes(store: Store, *, minutes: int = 120) -> list[ChangeRecord]:
    """Three routes, one change each at ``AT``: ``chat``'s target fine-tuned under its draft
    (acceptance and e2e worse), ``code``'s new draft (better), ``docs``' fine-tune that
    changed nothing (same), a minute apart. Two hours each side at 20 requests a minute."""
    drift, draft, tune = (setup(target_revision="t2"), setup(draft_revision="d2"),
                          setup(target_revision="t2"))
    events = (
        traffic("chat", OLD, T0, minutes, seed=1)
        + traffic("chat", drift, T0 + 2 * HOUR, minutes, p=0.6, e2e=1150.0, seed=2)
        + traffic("code", OLD, T0, minutes, p=0.6, seed=3)
        + traffic("code", draft, T0 + 2 * HOUR + 60, minutes, p=0.75, e2e=850.0, seed=4)
        + traffic("docs", OLD, T0, minutes, seed=5)
        + traffic("docs", tune, T0 + 2 * HOUR + 120, minutes, seed=6)
    )
    changes = [
        change("chat-1", AT, OLD, drift, route="chat",
               live={"state": "worse", "previous_rate": 0.44, "current_rate": 0.33}),
        change("code-1", AT + 60, OLD, draft, route="code", live={"state": "better"}),
        change("docs-1", AT + 120, OLD, tune, route="docs", live={"state": "comparing"}),
    ]
    commit(store, events, changes)
    return changes
