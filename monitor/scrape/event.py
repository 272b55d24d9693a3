"""One scrape interval of one target as one telemetry v1 event.

Telemetry v1 describes one finished request per event and has no field for "many requests".
A scraper only sees counters, so each interval becomes one event that *aggregates* it, and
the mapping is chosen so that every token table specwatch keeps stays exact:

=============================  ===========================================================
field                          value
=============================  ===========================================================
``request_id``                 ``scrape:<target key>:<interval end, Unix ms>``: the same
                               interval of the same target always has the same id, so an
                               event sent again after a crash is a duplicate, not a count
``ts``                         the scrape time (the interval's end as the engine saw it)
``route``, ``target``,         from the target's config: the metrics carry none of them
``draft``, ``spec.method``,
``spec.num_speculative_tokens``
``spec.drafted_tokens``,       sums over the interval: so sum(accepted)/sum(drafted) over
``spec.accepted_tokens``,      any range is exactly the engine's own rate(accepted) /
``spec.verify_steps``,         rate(drafted)
``spec.accepted_per_position``
``output_tokens``,             generated / prompt tokens of the interval (sums)
``prompt_tokens``
``e2e_ms``                     mean end-to-end latency of the requests finished in the
                               interval (histogram _sum/_count), 0 when none finished
``ttft_ms``                    never set: with ``output_tokens`` a sum over many requests,
                               the per-request decode throughput specwatch derives from
                               ttft_ms and e2e_ms would be many times too high. The mean
                               TTFT is in ``scrape.ttft_ms_mean``
``status``                     ``ok``: the event is a measurement, not a request
``engine``, ``instance``       the engine kind and the endpoint's host:port
``source``, ``scrape``         extension fields (telemetry v1 keeps unknown fields out of
                               the statistics): ``source: "scrape"`` marks an aggregate;
                               ``scrape`` holds what has no v1 field, above all the real
                               number of finished ``requests`` and ``errors``
=============================  ===========================================================

So per route the acceptance tables, verify steps, per-position survival and token counts
match the engine; the "requests" column counts intervals, not requests (the real count is
``scrape.requests``), and the acceptance detector sees one large observation per interval.
An interval with no engine activity yields no event (an event drafting nothing would read as
"speculation inactive"); its counts, if any, roll into the next one.

SGLang exposes no drafted or accepted counter, only verify steps. With chain drafting every
verify step proposes ``num_speculative_tokens`` drafts and emits the accepted ones plus one
bonus token, and each request's first token comes from prefill, so over an interval
``drafted = k * verify_steps`` and ``accepted = generated - verify_steps - requests`` (SGLang's
own ``spec_accept_rate`` makes the same fixed-budget assumption). The event lists such derived
fields in ``scrape.derived``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from monitor.scrape_config import ScrapeTarget
from monitor.telemetry.serialize import format_ts, spec_block

__all__ = ["Interval", "SpecCounts", "build_event", "request_id", "spec_counts"]

MAX_MS = 1e10  # telemetry v1's bound on a latency (monitor/telemetry/parse.py)


def request_id(target_key: str, interval_end: float) -> str:
    """The event id of the interval of ``target_key`` that ends at ``interval_end``.

    >>> request_id("0123456789abcdef", 1793628015.0)
    'scrape:0123456789abcdef:1793628015000'
    """
    return f"scrape:{target_key}:{round(interval_end * 1000)}"


@dataclass(slots=True)
class Interval:
    """Counter increases summed since ``start`` (the reading they count from), plus what
    happened meanwhile: scrapes that failed, readings in which a counter was reset."""

    start: float
    totals: dict[str, float] = field(default_factory=dict)
    failures: int = 0
    resets: int = 0

    def add(self, totals: dict[str, float], *, reset: bool) -> None:
        for key, value in totals.items():
            self.totals[key] = self.totals.get(key, 0.0) + value
        self.resets += reset

    @property
    def active(self) -> bool:
        """Whether the engine did anything: finished, drafted or generated."""
        return any(v > 0 for v in self.totals.values())

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "totals": dict(self.totals), "failures": self.failures,
                "resets": self.resets}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Interval:
        return cls(float(data["start"]), {k: float(v) for k, v in data["totals"].items()},
                   int(data["failures"]), int(data["resets"]))


@dataclass(frozen=True, slots=True)
class SpecCounts:
    drafted: int
    accepted: int
    verify_steps: int | None
    per_position: list[int] | None
    derived: tuple[str, ...] = ()
    # Why per-position counts were left out, when the engine has some but they do not fit.
    per_position_problem: str | None = None

    def clamped(self) -> SpecCounts:
        return replace(self, accepted=min(self.accepted, self.drafted), per_position=None)


def _n(value: float) -> int:
    # Counters of tokens and steps hold whole numbers; floats only carry them.
    return max(0, round(value))


def spec_counts(target: ScrapeTarget, totals: dict[str, float]) -> SpecCounts | None:
    """The interval's spec-decode counts, or ``None`` when the engine exposes none (no
    speculation configured), or (SGLang) when they cannot be derived.

    >>> from monitor.scrape_config import ScrapeTarget
    >>> t = ScrapeTarget(url="http://e:30000/metrics", engine="sglang", route="r",
    ...                  target_model="m", target_revision="1", target_tokenizer="t",
    ...                  num_speculative_tokens=3)
    >>> c = spec_counts(t, {"drafts": 10.0, "generation_tokens": 32.0, "requests": 2.0})
    >>> c.drafted, c.accepted, c.verify_steps
    (30, 20, 10)
    """
    k = target.num_speculative_tokens
    if target.engine == "sglang":
        if "drafts" not in totals or "generation_tokens" not in totals:
            return None
        steps = _n(totals["drafts"])
        drafted = k * steps
        # Clamped: a request cut short (EOS inside an accepted run, max_tokens) emits fewer
        # tokens than the identity assumes.
        accepted = min(drafted, _n(totals["generation_tokens"] - steps
                                   - totals.get("requests", 0.0)))
        return SpecCounts(drafted, accepted, steps, None, derived=(
            "drafted_tokens = num_speculative_tokens * sglang:spec_verify_calls",
            "accepted_tokens = sglang:generation_tokens - spec_verify_calls - num_requests",
        ))
    if "draft_tokens" not in totals:
        return None
    drafted = _n(totals["draft_tokens"])
    accepted = _n(totals.get("accepted_tokens", 0.0))
    derived: tuple[str, ...] = ()
    if "drafts" in totals:
        steps: int | None = _n(totals["drafts"])
    elif "drafted_pos:0" in totals:
        steps = _n(totals["drafted_pos:0"])
        derived = ("verify_steps = drafted tokens at position 0",)
    else:
        steps = None
    per_position, problem = _per_position(totals, k, accepted)
    return SpecCounts(drafted, accepted, steps, per_position, derived, problem)


def _per_position(totals: dict[str, float], k: int, accepted: int
                  ) -> tuple[list[int] | None, str | None]:
    """Accepted counts by draft position, when they are a valid ``accepted_per_position``:
    ``k`` entries (positions the engine does not show are 0) summing to ``accepted``."""
    found = {key.partition(":")[2]: v for key, v in totals.items()
             if key.startswith("accepted_pos:")}
    if not found:
        return None, None
    out = [0] * k
    for label, value in found.items():
        if not label.isdigit() or int(label) >= k:
            return None, (f"the engine counts draft position {label!r}, outside 0..{k - 1} "
                          f"(num_speculative_tokens {k})")
        out[int(label)] = _n(value)
    if sum(out) != accepted:
        return None, f"per-position counts sum to {sum(out)}, accepted tokens are {accepted}"
    return out, None


def build_event(
    target: ScrapeTarget,
    interval: Interval,
    counts: SpecCounts | None,
    *,
    now: float,
    end: float,
    clamped: bool = False,
) -> dict[str, Any]:
    """The telemetry v1 event of ``interval`` (see the module docstring for the mapping)."""
    t = interval.totals
    event: dict[str, Any] = {
        "request_id": request_id(target.key, end),
        "ts": format_ts(now),
        "route": target.route,
        "status": "ok",
        "target": {"model": target.target_model, "revision": target.target_revision,
                   "tokenizer": target.target_tokenizer},
    }
    if counts is not None and target.draft_model is not None:
        draft = {"model": target.draft_model, "revision": target.draft_revision,
                 "tokenizer": target.draft_tokenizer}
        if target.pinned_target_revision is not None:
            draft["pinned_target_revision"] = target.pinned_target_revision
        event["draft"] = draft
    if counts is not None:
        spec = spec_block(target.num_speculative_tokens, counts.drafted, counts.accepted,
                          counts.verify_steps, counts.per_position, target.method)
        event["spec"] = spec
    event["output_tokens"] = _n(t.get("generation_tokens", 0.0))
    if "prompt_tokens" in t:
        event["prompt_tokens"] = _n(t["prompt_tokens"])
    e2e = _mean_ms(t, "e2e")
    event["e2e_ms"] = e2e if e2e is not None else 0.0
    event["engine"] = target.engine
    event["instance"] = target.instance_name
    event["source"] = "scrape"
    scrape: dict[str, Any] = {
        "target": target.display_name,
        "interval_start": format_ts(interval.start),
        "interval_s": round(now - interval.start, 3),
        "requests": _n(t["requests"]) if "requests" in t else None,
        "errors": _n(t["errors"]) if "errors" in t else None,
        "ttft_ms_mean": _mean_ms(t, "ttft"),
        "failed_scrapes": interval.failures,
        "counter_resets": interval.resets,
    }
    if counts is not None and counts.derived:
        scrape["derived"] = list(counts.derived)
    if counts is not None and counts.per_position_problem:
        scrape["per_position_dropped"] = counts.per_position_problem
    if clamped:
        scrape["clamped"] = "accepted tokens exceeded drafted tokens; accepted set to drafted"
    event["scrape"] = scrape
    return event


def _mean_ms(totals: dict[str, float], prefix: str) -> float | None:
    count = totals.get(f"{prefix}_count", 0.0)
    total = totals.get(f"{prefix}_sum")
    if count <= 0 or total is None:
        return None
    mean = 1000.0 * total / count
    return round(mean, 3) if math.isfinite(mean) and 0.0 <= mean <= MAX_MS else None
