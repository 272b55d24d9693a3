"""Cost of one ``/metrics`` scrape of the daemon's registry, with the state of N series.

The state is built the way the daemon builds it: simulated events spread over N series
(``SeriesSpreader``, as ``bench/soak.py --skip-soak`` does), replayed through the real
``Pipeline`` into a fresh SQLite store with detection and alerting on, every committed
checkpoint fed to the same collectors as ``monitor/app.py`` wires them (pair counters,
outcome, segment view published after each checkpoint, change verdicts, cardinality guard,
policy). Then ``generate_latest(registry)`` is timed: the first scrape (it starts the change
judging, as a scrape does once a minute) and, once that judging is done, the median of
``--scrapes`` more; ``change refresh s`` is how long the judging took.

    PYTHONPATH=. python bench/metrics_scrape.py                         # N = 1,000 and 10,000
    PYTHONPATH=. python bench/metrics_scrape.py --series 1000,10000,100000 --events-per-series 5
    PYTHONPATH=. python bench/metrics_scrape.py --series 10000 --profile 25   # where time goes
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from soak_traffic import SeriesSpreader, recent_events  # noqa: E402

from alerts.alerting import Alerting  # noqa: E402
from alerts.metrics import AlertMetrics  # noqa: E402
from monitor.aggregate.guard import CardinalityGuard  # noqa: E402
from monitor.changes import JudgeSettings  # noqa: E402
from monitor.config import Config, load_config  # noqa: E402
from monitor.deadletter import CountingDeadLetter  # noqa: E402
from monitor.detect.engine import Detection  # noqa: E402
from monitor.exposition import (  # noqa: E402
    DetectionCollector,
    DetectionView,
    RollupCounters,
    snapshot_view,
)
from monitor.exposition_changes import ChangeCollector  # noqa: E402
from monitor.exposition_outcome import OutcomeCollector  # noqa: E402
from monitor.exposition_policy import PolicyCollector  # noqa: E402
from monitor.metrics import IngestMetrics  # noqa: E402
from monitor.pipeline import Pipeline  # noqa: E402
from monitor.sources.replay import replay  # noqa: E402
from monitor.store.checkpoint import Checkpoint  # noqa: E402
from monitor.store.db import create_if_new  # noqa: E402
from monitor.store.store import Store  # noqa: E402


@dataclass
class State:
    """A daemon's registry after replaying the traffic, and the store behind it."""

    registry: CollectorRegistry
    store: Store
    series: int
    events: int
    publish_s: float  # pipeline-thread time spent publishing the segment view, all checkpoints
    changes: ChangeCollector


def config_for(db: Path, n_series: int, max_series: int) -> Config:
    # The soak's series phase: every series admitted, none judged stale or idle meanwhile.
    return load_config(None, env={}, overrides={
        "store": {"url": f"sqlite:///{db}"},
        "ingest": {"allowed_lateness": "1h", "dedup_horizon": "1h",
                   "max_series_per_route": 256, "max_series": max(20_000, n_series + 1_000)},
        "detection": {"stale_after": "1d", "idle_pair_resolve": "1d"},
        "exposition": {"max_series": max_series},
    })


def write_events(path: Path, n_series: int, per_series: int, pairs: int, seed: int) -> int:
    spread = SeriesSpreader(n_series, pairs)
    n = 0
    with path.open("w") as f:
        for e in recent_events(n_series * per_series, seed):
            f.write(json.dumps(spread(e)) + "\n")
            n += 1
    return n


def build(work: Path, n_series: int, per_series: int, pairs: int, max_series: int,
          seed: int) -> State:
    """Replay N series' traffic through a pipeline wired like ``Application``'s."""
    db = work / f"n{n_series}.db"
    config = config_for(db, n_series, max_series)
    create_if_new(config.store.url)
    store = Store(config.store.url)
    registry = CollectorRegistry()
    detection = Detection(config.detection, clock="event")
    alert_metrics = AlertMetrics(registry, {})
    alerting = Alerting(config.alerting, {}, alert_metrics, deliver=False, wall=None)
    rollups = RollupCounters(registry)
    outcome = OutcomeCollector(price_per_gpu_hour=config.cost.price_per_gpu_hour,
                               max_series=max_series)
    registry.register(outcome)
    published: list[DetectionView | None] = [None]
    registry.register(DetectionCollector(lambda: published[0], max_series))
    changes = ChangeCollector.for_store(store, JudgeSettings.from_config(config.detection))
    registry.register(changes)
    guard = CardinalityGuard(store, config.ingest.max_series_per_route,
                             config.ingest.max_series, registry)
    spent = [0.0]

    def publish(cp: Checkpoint) -> None:
        started = time.perf_counter()
        published[0] = snapshot_view(detection, alerting.lifecycle.firing(),
                                     max_series=max_series)
        spent[0] += time.perf_counter() - started

    pipeline = Pipeline(store, "bench", config.ingest, IngestMetrics(registry),
                        CountingDeadLetter(), observer=detection, alerting=alerting,
                        on_commit=[rollups.observe, outcome.observe, publish], guard=guard)
    registry.register(PolicyCollector.for_store(store))
    path = work / f"n{n_series}.jsonl"
    events = write_events(path, n_series, per_series, pairs, seed)
    replay(str(path), pipeline, progress=False)
    path.unlink()
    return State(registry, store, len(detection.view().segments), events, spent[0], changes)


def timed(scrape: Callable[[], bytes]) -> tuple[float, bytes]:
    started = time.perf_counter()
    text = scrape()
    return time.perf_counter() - started, text


def profiled(scrape: Callable[[], bytes], lines: int, what: str) -> tuple[float, bytes]:
    if not lines:
        return timed(scrape)
    prof = cProfile.Profile()
    got = prof.runcall(timed, scrape)
    print(f"-- profile of the {what}")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("cumulative").print_stats(lines)
    return got


def measure(state: State, scrapes: int, profile: int) -> dict[str, float]:
    def scrape() -> bytes:
        return generate_latest(state.registry)

    first, _ = profiled(scrape, profile, "first scrape")
    # the change judgements, off the scrape path, in place before the warm scrapes
    state.changes.join()
    warm = [timed(scrape) for _ in range(scrapes)]
    if profile:
        profiled(scrape, profile, "warm scrape")
    text = warm[-1][1]
    return {"first_s": first, "median_s": statistics.median(t for t, _ in warm),
            "refresh_s": state.changes.last_refresh_s or 0.0, "bytes": len(text),
            "samples": sum(1 for ln in text.splitlines() if not ln.startswith(b"#"))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--series", default="1000,10000", help="comma-separated N (default "
                   "1000,10000)")
    p.add_argument("--events-per-series", type=int, default=20)
    p.add_argument("--pairs", type=int, default=100, help="series per route (default 100)")
    p.add_argument("--max-series", type=int, default=1000,
                   help="exposition.max_series (default: the daemon's, 1000)")
    p.add_argument("--scrapes", type=int, default=5, help="warm scrapes timed (default 5)")
    p.add_argument("--profile", type=int, default=0, metavar="LINES",
                   help="profile the first and a warm scrape: print their LINES costliest calls")
    p.add_argument("--seed", type=int, default=6)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.series.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or args.events_per_series < 1 or args.scrapes < 1:
        p.error("--series, --events-per-series and --scrapes must be >= 1")
    print(f"{args.events_per_series} events per series, {args.pairs} series per route, "
          f"exposition.max_series {args.max_series}; SQLite")
    print(f"{'N':>8} {'segments':>9} {'events':>9} {'build s':>8} {'publish s':>10} "
          f"{'first scrape s':>15} {'scrape s':>9} {'change refresh s':>17} {'samples':>8} "
          f"{'bytes':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            started = time.perf_counter()
            state = build(Path(tmp), n, args.events_per_series, args.pairs, args.max_series,
                          args.seed)
            built = time.perf_counter() - started
            try:
                got = measure(state, args.scrapes, args.profile)
            finally:
                state.store.close()
            print(f"{n:>8,} {state.series:>9,} {state.events:>9,} {built:>8.1f} "
                  f"{state.publish_s:>10.2f} {got['first_s']:>15.3f} {got['median_s']:>9.3f} "
                  f"{got['refresh_s']:>17.2f} {got['samples']:>8,} {got['bytes']:>10,}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
