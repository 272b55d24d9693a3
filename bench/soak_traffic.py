"""The soak benchmark's traffic: a live producer with scripted incidents, an oracle of what it
sent, and a relabelling that spreads simulated requests over many series."""

from __future__ import annotations

import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from monitor.simulate import DEFAULT_ROUTES, Incident, KafkaWriter, SimulationConfig, Simulator

MESSAGE_BATCH = 100  # events per Kafka message (JSON array), per route, as a sidecar would
MAX_DELAY_S = 0.5  # a partial batch waits at most this long


# -- incidents ---------------------------------------------------------------------------------

# (kind, route, start, length or None for "to the end", extra parameters, rules that answer it)
# Start and length are fractions of the run, so a 2-minute smoke run and the 30-minute soak
# script the same story.
SCRIPT: tuple[tuple[str, str, float, float | None, str, tuple[str, ...]], ...] = (
    ("acceptance_shift", "chat", 0.15, 0.25, "factor=0.8",
     ("acceptance_drop", "below_breakeven")),
    ("tokenizer_swap", "translation", 0.30, 0.20, "", ("tokenizer_mismatch",)),
    ("eviction", "code-assistant", 0.45, 0.20, "share=0.5,slowdown=3",
     ("memory_contention", "throughput_drop")),
    ("silence", "summarize", 0.60, 0.30, "", ("telemetry_stale",)),
    ("revision_change", "creative-writing", 0.75, None, "factor=0.85",
     ("revision_mismatch",)),
)


def stale_after(run_s: float) -> float:
    """The daemon's ``detection.stale_after`` for a run: the silence (30 % of the run) must
    outlast it with room for the staleness sweep, so half of the silence, within 20 s..10 min."""
    return min(600.0, max(20.0, 0.15 * run_s))


def incidents(run_s: float) -> list[tuple[Incident, tuple[str, ...]]]:
    """The scripted incidents of a run of ``run_s`` seconds, each with the rules expected."""
    out = []
    for kind, route, at, length, params, rules in SCRIPT:
        spec = f"{kind}:route={route},at={at * run_s:.0f}s"
        if length is not None:
            spec += f",for={length * run_s:.0f}s"
        if params:
            spec += "," + params
        out.append((Incident.parse(spec), rules))
    return out


# -- the oracle --------------------------------------------------------------------------------


def _ts(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Oracle:
    """Exact per-minute sums of what was sent, kept as the events go out (a soak is too long
    to keep its events), written independently of specwatch's pipeline.

    Keys are (minute start, route, target model, target revision, draft model, draft
    revision, draft length); values [requests, drafted, accepted]. The traffic has no
    duplicates and nothing later than the lateness allowance, so every event counts.
    """

    def __init__(self) -> None:
        self.sums: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
        self.events = 0

    def add(self, e: dict[str, Any]) -> None:
        draft = e.get("draft") or {}
        spec = e.get("spec") or {}
        key = (int(_ts(e["ts"]) // 60) * 60, e["route"], e["target"]["model"],
               e["target"]["revision"], draft.get("model") or "", draft.get("revision") or "",
               spec.get("num_speculative_tokens", 0))
        row = self.sums[key]
        row[0] += 1
        row[1] += spec.get("drafted_tokens", 0)
        row[2] += spec.get("accepted_tokens", 0)
        self.events += 1


def store_sums(rows: Iterable[Any]) -> dict[tuple[Any, ...], list[int]]:
    """``Store.ratios(granularity="minute")`` rows in the oracle's shape."""
    out: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        key = (int(r.bucket_start.timestamp()), r.route, r.target_model, r.target_revision,
               r.draft_model or "", r.draft_revision or "", r.num_speculative_tokens)
        row = out[key]
        row[0] += r.requests
        row[1] += r.drafted_tokens
        row[2] += r.accepted_tokens
    return dict(out)


# -- the live producer -------------------------------------------------------------------------


def steady_config(rate: float, seed: int, scripted: Iterable[Incident]) -> SimulationConfig:
    """The default routes at a flat ``rate``: no daily cycle, no bursts, no duplicates."""
    return SimulationConfig(seed=seed, rate=rate, diurnal=0.0, bursts_per_hour=0.0,
                            duration_s=None, incidents=tuple(scripted))


class LiveProducer(threading.Thread):
    """Sends ``Simulator.realtime`` traffic (timestamps = the wall clock) until stopped.

    ``started`` is the wall-clock time incident offsets count from. ``produced`` counts
    events handed to the Kafka writer; ``error`` holds what ended the thread early.
    """

    def __init__(self, bootstrap: str, topic: str, config: SimulationConfig, partitions: int,
                 oracle: Oracle) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.bootstrap, self.topic, self.config = bootstrap, topic, config
        self.partitions = partitions
        self.oracle = oracle
        self.stop_event = threading.Event()
        self.started = 0.0
        self.produced = 0
        self.messages = 0
        self.per_route: Counter[str] = Counter()
        self.error: BaseException | None = None
        self.ready = threading.Event()

    def run(self) -> None:
        try:
            with KafkaWriter(self.bootstrap, self.topic, batch_size=MESSAGE_BATCH,
                             partitions=self.partitions, max_delay_s=MAX_DELAY_S) as writer:
                self.started = time.time()
                self.ready.set()
                for event in Simulator(self.config).realtime(1.0, self.stop_event):
                    self.oracle.add(event)
                    writer.write(event)
                    self.produced += 1
                    self.messages = writer.messages
                writer.flush()
                self.messages = writer.messages
                self.per_route = writer.per_route
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.ready.set()

    def stop(self, timeout: float = 60.0) -> None:
        self.stop_event.set()
        self.join(timeout)


# -- many series -------------------------------------------------------------------------------


class SeriesSpreader:
    """Relabels simulated events so that they spread evenly over ``n`` series.

    Each default route's requests keep their numbers and model pair and go round-robin to
    ``share x n`` series of their own: routes ``<route>-000``, ``-001``, ... of ``pairs``
    series each, the pairs told apart by a suffix on the draft revision (the target
    revision on draft-free routes). Drafts stay pinned to their target's revision, so no
    metadata rule fires: these are well-behaved series, only many of them.
    """

    def __init__(self, n: int, pairs: int) -> None:
        routes = [r for r in DEFAULT_ROUTES if r.share > 0]
        total = sum(r.share for r in routes)
        exact = {r.name: n * r.share / total for r in routes}
        slots = {name: int(v) for name, v in exact.items()}
        # Largest remainders, so the slots add up to exactly n.
        for name in sorted(exact, key=lambda k: exact[k] - slots[k], reverse=True)[
                : n - sum(slots.values())]:
            slots[name] += 1
        self.slots = {k: v for k, v in slots.items() if v > 0}
        self.pairs = pairs
        self._seen: Counter[str] = Counter()

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        base = event["route"]
        i = self._seen[base] % self.slots[base]
        self._seen[base] += 1
        group, pair = divmod(i, self.pairs)
        event["route"] = f"{base}-{group:03d}"
        side = event.get("draft") or event["target"]
        side["revision"] = f"{side['revision']}+p{pair:03d}"
        return event


def recent_events(total: int, seed: int) -> Iterator[dict[str, Any]]:
    """``total`` simulated events whose times end about now (the daemon's retention and
    staleness judge by the wall clock), at a flat rate of about 1,000 events/s (over 10 s
    to 5 minutes)."""
    now = time.time()
    span_s = min(300.0, max(10.0, total / 1000.0))
    rate = max(total / span_s, 1.0)
    # Started a little further back: Poisson arrivals may need some time past the span.
    cfg = SimulationConfig(seed=seed, rate=rate, diurnal=0.0, bursts_per_hour=0.0,
                           duration_s=3 * span_s, start=now - 1.1 * span_s)
    n = 0
    for event in Simulator(cfg).events():
        yield event
        n += 1
        if n == total:
            return
    raise RuntimeError(f"the simulation gave only {n} of {total} events")
