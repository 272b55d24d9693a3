"""A real Prometheus scrapes specwatch and answers per route what the store holds exactly.

The pipeline replays simulated traffic in two halves; the registry is served over HTTP the
way the daemon will serve it; Prometheus (Debian's package, loopback, 1 s scrapes) reads it.
Prometheus starts after the first half is committed, so every sample it holds is a
committed state, and the rate() ratio between the two halves is an exact quotient.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from prometheus_client import make_wsgi_app

from monitor.simulate import Simulator, scenario_config
from tests.fixtures.prometheus import RunningPrometheus, scrape_config, start_prometheus
from tests.helpers import wait_for
from tests.monitor.test_exposition import Stack, sqlite_url

START = datetime(2026, 11, 2, tzinfo=UTC).timestamp()
SPLIT = START + 40 * 60  # a minute boundary: the second half is whole minute rows
RATIO = ("sum by (route) (rate(specwatch_accepted_tokens_total[1m])) / "
         "sum by (route) (rate(specwatch_drafted_tokens_total[1m]))")


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per scrape on stderr helps no one


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Stack, WSGIServer]]:
    """The pipeline's registry on http://127.0.0.1:<port>/metrics, from a thread."""
    stack = Stack(sqlite_url(tmp_path))
    server = make_server("127.0.0.1", 0, make_wsgi_app(stack.registry), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
    thread.start()
    try:
        yield stack, server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        stack.close()


def by_route(result: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"]["route"]: float(r["value"][1]) for r in result}


def counters(stack: Stack) -> dict[tuple[str, str], float]:
    """(metric, route) -> value of the pair counters in the registry right now."""
    out = {}
    for family in stack.registry.collect():
        for s in family.samples:
            if s.name in ("specwatch_drafted_tokens_total", "specwatch_accepted_tokens_total"):
                out[(s.name, s.labels["route"])] = s.value
    return out


def scraped(prom: RunningPrometheus) -> dict[tuple[str, str], float]:
    out = {}
    for name in ("specwatch_drafted_tokens_total", "specwatch_accepted_tokens_total"):
        for route, value in by_route(prom.query(name)).items():
            out[(name, route)] = value
    return out


def store_acceptance(stack: Stack, since: float, per_route_window: bool) -> dict[str, float]:
    """accepted / drafted per route from the store's minute rows: from ``since`` on, or over
    each route's break-even window (its newest 30 minute rows) when ``per_route_window``."""
    out: dict[str, float] = {}
    rows = stack.store.ratios(granularity="minute", since=datetime.fromtimestamp(since, UTC))
    newest: dict[str, float] = defaultdict(float)
    for r in rows:
        newest[r.route] = max(newest[r.route], r.bucket_start.timestamp())
    for route, head in newest.items():
        start = head - 29 * 60 if per_route_window else since
        sums = [0, 0]
        for stats in stack.store.stats(granularity="minute", route=route,
                                       since=datetime.fromtimestamp(start, UTC)).values():
            sums[0] += stats.accepted_tokens
            sums[1] += stats.drafted_tokens
        out[route] = sums[0] / sums[1]
    return out


def test_prometheus_reads_the_exact_acceptance_per_route(
    served: tuple[Stack, WSGIServer], tmp_path: Path
) -> None:
    stack, server = served
    cfg = scenario_config("quiet", duration_s=3600, rate=4, seed=11,
                          start="2026-11-02T00:00:00Z")
    events = list(Simulator(cfg).events())  # event-time order: no late events in "quiet"
    first = [e for e in events if _ts(e) < SPLIT]
    stack.replay(first, tmp_path / "first.jsonl")

    target = f"127.0.0.1:{server.server_port}"
    with start_prometheus(tmp_path / "prom", [scrape_config("specwatch", [target])]) as prom:
        before = counters(stack)
        wait_for(lambda: scraped(prom) == before, timeout=15,
                 what="a scrape of the first half's counters")
        assert [t["health"] for t in prom.targets()] == ["up"]

        stack.replay(events[len(first):], tmp_path / "second.jsonl")
        after = counters(stack)
        assert after != before
        wait_for(lambda: scraped(prom) == after, timeout=15,
                 what="a scrape of the second half's counters")

        # Both counters of a pair share every sample time, and each starts the window at about
        # twice its increase (40 minutes of traffic, then 20): rate() extrapolates both by the
        # same half interval, never to its zero point, so the quotient is exact.
        expected = store_acceptance(stack, SPLIT, per_route_window=False)
        assert len(expected) == 5
        assert by_route(prom.query(RATIO)) == pytest.approx(expected, rel=1e-9)

        # The gauge: the break-even window of each route's one segment, as the store has it.
        assert len({row.labels[0] for row in stack.view.segments}) == 5 == len(
            stack.view.segments)
        window = store_acceptance(stack, SPLIT, per_route_window=True)
        def gauges() -> dict[str, float]:
            return by_route(prom.query("specwatch_acceptance_ratio"))

        # the view is published after the counters: the scrape that showed them may be older
        wait_for(lambda: gauges() == pytest.approx(window, rel=1e-12), timeout=15,
                 what="a scrape of the acceptance gauges after the second half")
        assert gauges() == pytest.approx(window, rel=1e-12)


def _ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
