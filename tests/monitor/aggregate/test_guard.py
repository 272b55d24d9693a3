"""The cardinality guard: the caps hold, route totals stay exact, the excess is counted and
reported, and the decisions come out the same after a ``kill -9`` and a re-read."""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.guard import (
    OVERFLOW,
    OVERFLOW_KEY,
    CardinalityGuard,
    is_overflow,
    route_overflow_key,
)
from monitor.aggregate.series import SeriesKey, series_fields
from monitor.config import IngestConfig
from monitor.deadletter import CountingDeadLetter
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.store.checkpoint import GRANULARITIES
from monitor.store.db import upgrade
from monitor.store.store import Store
from monitor.telemetry.parse import Parser
from tests.monitor.test_pipeline import MemoryStore

REPO = Path(__file__).resolve().parents[3]
T0 = 1_792_999_980.0  # 2026-10-26, on a minute boundary


def doc(rid: str, ts: float, route: str, pair: int, drafted: int = 10,
        accepted: int = 6) -> dict[str, Any]:
    """An event of model pair ``pair`` (its target revision) on ``route``."""
    return {
        "request_id": rid, "ts": T0 + ts, "route": route,
        "target": {"model": "t", "revision": f"rev-{pair}", "tokenizer": "tok"},
        "draft": {"model": "d", "revision": "d1", "tokenizer": "tok",
                  "pinned_target_revision": f"rev-{pair}"},
        "spec": {"num_speculative_tokens": 2, "drafted_tokens": drafted,
                 "accepted_tokens": accepted, "accepted_per_position": [accepted, 0]},
        "output_tokens": 20, "e2e_ms": 400.0, "ttft_ms": 50.0,
    }


def pair_key(route: str, pair: int) -> SeriesKey:
    return SeriesKey(route, "t", f"rev-{pair}", "tok", "d", "d1", "tok", "", 2)


class SeriesMemoryStore(MemoryStore):
    """The in-memory store of the pipeline tests, plus the guard's read of the series."""

    def series_keys(self, keys: Iterable[SeriesKey] | None = None) -> set[SeriesKey]:
        stored = {k for k, _ in self.rollups}
        return stored if keys is None else stored & {SeriesKey(*k) for k in keys}


class HandedCheckpoints:
    """The guard as wired when the pipeline hands it each committed checkpoint
    (``committed(cp)``, through ``on_commit``) instead of calling ``committed()``."""

    def __init__(self, guard: CardinalityGuard) -> None:
        self.admit, self.drop_all, self.load = guard.admit, guard.drop_all, guard.load
        self.admit_keyed = guard.admit_keyed

    def committed(self) -> None:
        return  # on_commit brings the checkpoint


def guarded(store: Any, per_route: int, total: int, registry: CollectorRegistry | None = None,
            source: str = "test", checks: str = "store",
            **guard_args: Any) -> tuple[Pipeline, CardinalityGuard]:
    """A pipeline with a guard that checks admitted series against the store, or (``checks=
    "checkpoint"``) against the rollups of the checkpoint it is handed."""
    registry = registry if registry is not None else CollectorRegistry()
    guard = CardinalityGuard(store, per_route, total, registry, **guard_args)
    hook: Any = guard if checks == "store" else HandedCheckpoints(guard)
    p = Pipeline(store, source, IngestConfig(), IngestMetrics(registry), CountingDeadLetter(),
                 guard=hook, on_commit=[guard.committed] if checks == "checkpoint" else None)
    p.assign([0])
    return p, guard


def feed(p: Pipeline, docs: list[dict[str, Any]], start: int = 0) -> None:
    for i, d in enumerate(docs, start):
        p.process(0, i, orjson.dumps(d))


def totals(stats: Iterable[tuple[SeriesKey, BucketStats]]) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for key, b in stats:
        r, d, a = out.get(key.route, (0, 0, 0))
        out[key.route] = (r + b.requests, d + b.drafted_tokens, a + b.accepted_tokens)
    return out


def oracle(docs: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    out: dict[str, tuple[int, int, int]] = {}
    for d in docs:
        r, dr, a = out.get(d["route"], (0, 0, 0))
        out[d["route"]] = (r + 1, dr + d["spec"]["drafted_tokens"],
                           a + d["spec"]["accepted_tokens"])
    return out


def test_a_route_over_its_cap_keeps_its_totals(store: Store) -> None:
    registry = CollectorRegistry()
    p, guard = guarded(store, per_route=3, total=100, registry=registry)
    docs = [doc(f"a{i}", i, "a", i % 6, drafted=10 + i) for i in range(30)]
    docs += [doc(f"b{i}", i, "b", i % 2) for i in range(10)]
    feed(p, docs)
    assert p.checkpoint()

    stats = store.stats(granularity="day")
    assert set(stats) == {pair_key("a", 0), pair_key("a", 1), pair_key("a", 2),
                          route_overflow_key("a"), pair_key("b", 0), pair_key("b", 1)}
    assert totals(stats.items()) == oracle(docs)  # the route keeps every request and token
    assert stats[route_overflow_key("a")].requests == 15  # pairs 3, 4, 5: 5 events each
    sample = registry.get_sample_value
    assert sample("specwatch_series_overflow_events_total", {"reason": "route_cap"}) == 15
    assert sample("specwatch_series_overflow_events_total", {"reason": "total_cap"}) == 0
    assert sample("specwatch_series_tracked") == guard.tracked == 6
    assert sample("specwatch_series_overflow_series") == 1
    assert sample("specwatch_series_limit", {"scope": "route"}) == 3


def test_over_the_total_cap_new_routes_share_one_overflow_series(store: Store) -> None:
    registry = CollectorRegistry()
    p, guard = guarded(store, per_route=5, total=4, registry=registry)
    docs = [doc(f"r{r}-{i}", r * 2 + i, f"r{r}", 0) for r in range(6) for i in range(2)]
    docs += [doc(f"r0-new-{i}", 20 + i, "r0", 1) for i in range(2)]  # a known route's new pair
    feed(p, docs)
    assert p.checkpoint()

    stats = store.stats(granularity="day")
    assert set(stats) == {*(pair_key(f"r{r}", 0) for r in range(4)), OVERFLOW_KEY,
                          route_overflow_key("r0")}
    assert stats[OVERFLOW_KEY].requests == 4  # r4 and r5
    assert stats[route_overflow_key("r0")].requests == 2  # r0 stays exact
    want = oracle(docs)
    got = totals(stats.items())
    assert got[OVERFLOW] == tuple(map(sum, zip(want.pop("r4"), want.pop("r5"), strict=True)))
    assert {r: v for r, v in got.items() if r != OVERFLOW} == want
    sample = registry.get_sample_value
    assert sample("specwatch_series_overflow_events_total", {"reason": "total_cap"}) == 6
    assert sample("specwatch_series_tracked") == guard.tracked == 6
    assert sample("specwatch_series_overflow_series") == 2


def test_known_series_pass_through_untouched() -> None:
    store = SeriesMemoryStore()
    guard = CardinalityGuard(store, 2, 10, CollectorRegistry())
    events, _ = Parser().parse(orjson.dumps([doc("x", 0, "a", 0), doc("y", 1, "a", 1)]))
    assert guard.admit(events) is events  # no copy of the list when nothing overflows
    again, _ = Parser().parse(orjson.dumps([doc("z", 2, "a", 1), doc("w", 3, "a", 2)]))
    out = guard.admit(again)
    assert out is not again and out[0] is again[0]  # only the overflowing event is copied
    assert (out[1].route, out[1].target_model, out[1].num_speculative_tokens) == ("a", OVERFLOW, 0)
    assert out[1].pinned_target_revision is None and again[1].target_revision == "rev-2"
    assert (out[1].drafted_tokens, out[1].request_id) == (again[1].drafted_tokens, "w")


def test_admit_keyed_rewrites_the_fields_with_the_events() -> None:
    """The pipeline hands the guard each event's series fields and sums by what comes back:
    a rewritten event comes back with its own (the overflow series') fields, the rest as
    they were, and the lists themselves when nothing overflows."""
    guard = CardinalityGuard(SeriesMemoryStore(), 2, 10, CollectorRegistry())
    events, _ = Parser().parse(orjson.dumps([doc("x", 0, "a", 0), doc("y", 1, "a", 1)]))
    keys = [series_fields(e) for e in events]
    assert guard.admit_keyed(events, keys) == (events, keys)
    assert guard.admit_keyed(events, keys)[1] is keys  # known: no copy, no loop
    again, _ = Parser().parse(orjson.dumps([doc("z", 2, "a", 1), doc("w", 3, "a", 2),
                                            doc("v", 4, "a", 2)]))
    again_keys = [series_fields(e) for e in again]
    out, out_keys = guard.admit_keyed(again, again_keys)
    assert out_keys is not again_keys and again_keys[1] == series_fields(again[1])
    assert out_keys == [series_fields(e) for e in out]
    assert out_keys[1] == out_keys[2] == tuple(route_overflow_key("a"))
    assert out[0] is again[0] and out_keys[0] is again_keys[0]


def test_an_event_already_in_the_overflow_shape_takes_no_slot() -> None:
    """The parser cannot produce the reserved key (a ``spec.method`` needs a ``spec``, so a
    draft length >= 1), but an adapter could: such an event counts as the overflow."""
    guard = CardinalityGuard(SeriesMemoryStore(), 1, 10, CollectorRegistry())
    events, _ = Parser().parse(orjson.dumps([doc("s", 0, "a", 0), doc("x", 1, "a", 0),
                                             doc("y", 2, "a", 1)]))
    sneaky = replace(events[0], target_model=OVERFLOW, target_revision=OVERFLOW,
                     target_tokenizer=OVERFLOW, draft_model=OVERFLOW, draft_revision=OVERFLOW,
                     draft_tokenizer=OVERFLOW, method=OVERFLOW, num_speculative_tokens=0)
    out = guard.admit([sneaky, *events[1:]])
    assert out[0] is sneaky and out[1] is events[1]  # pair 0 still had its slot
    assert (out[2].route, out[2].target_model) == ("a", OVERFLOW)  # pair 1 is over the cap
    assert guard.tracked == 2


@pytest.mark.parametrize("checks", ["store", "checkpoint"])
def test_a_series_seen_only_in_duplicates_takes_no_slot(store: Store, checks: str) -> None:
    """A duplicate (or late) event of a new pair never reaches the guard: only counted
    events are admitted, so it holds no slot even until the checkpoint (where it could push
    another route's new series into overflow)."""
    p, guard = guarded(store, per_route=2, total=100, checks=checks)
    feed(p, [doc("x1", 0, "a", 1), doc("x1", 1, "a", 2)])  # x1 again, with another pair
    assert guard.tracked == 1
    assert p.checkpoint()
    assert guard.tracked == 1
    feed(p, [doc("x3", 2, "a", 3)], start=2)
    assert p.checkpoint()
    assert set(store.stats()) == {pair_key("a", 1), pair_key("a", 3)}


def test_drop_all_forgets_what_was_not_committed(store: Store) -> None:
    p, guard = guarded(store, per_route=2, total=100)
    feed(p, [doc("x1", 0, "a", 1)])
    assert p.checkpoint()
    feed(p, [doc("x2", 1, "a", 2)], start=1)
    p.drop_all()  # fenced, say: the stretch is read again from the stored offset
    assert guard.tracked == 0
    p.assign([0])
    feed(p, [doc("x3", 1, "a", 3), doc("x2", 2, "a", 2)], start=1)
    assert p.checkpoint()
    assert set(store.stats()) == {pair_key("a", 1), pair_key("a", 3), route_overflow_key("a")}


def test_the_log_names_the_route_escaped_once_and_rate_limited(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    guard = CardinalityGuard(SeriesMemoryStore(), 1, 6, CollectorRegistry(), log_interval=60,
                             clock=lambda: clock[0])
    evil = "ok\nERROR forged line \u202eevil\x1b[31m" + "x" * 90  # over 64: cut
    parse = Parser().parse

    def admit(*docs: dict[str, Any]) -> None:
        guard.admit(parse(orjson.dumps(list(docs)))[0])

    with caplog.at_level(logging.WARNING, logger="monitor.aggregate.guard"):
        admit(doc("1", 0, evil, 0), doc("2", 1, evil, 1), doc("3", 2, evil, 2))
        admit(doc("4", 3, "b", 0), doc("5", 4, "b", 1))  # within the interval: not logged
        clock[0] = 61.0
        admit(doc("6", 5, "c", 0), doc("7", 6, "c", 1))
        admit(*(doc(f"n{i}", 7 + i, f"new{i}", 0) for i in range(6)))  # the total cap, once
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert all("\n" not in line and "\u202e" not in line and "\x1b" not in line
               for line in lines)
    assert "'ok\\nERROR forged line \\u202eevil\\x1b[31m" in lines[0]
    assert f"({len(evil)} chars)" in lines[0]
    assert "route 'c'" in lines[1] and "1 more routes" in lines[1]
    assert "total series cap (6)" in lines[2] and "'new0'" in lines[2]


# -- crash safety ------------------------------------------------------------------------------


def traffic(seed: int, n: int = 600) -> list[dict[str, Any]]:
    """Routes with more pairs than the cap, more routes than the total allows, and the
    inputs that make a series look new without it ever being stored: duplicates carrying
    another pair, late events of a new pair."""
    rng = random.Random(seed)
    routes = ["r0", "r1", "r2", "r3", "r4", "r5", "r\n\u202e<x>", "r7"]
    docs: list[dict[str, Any]] = []
    for i in range(n):
        ts = 200 + i * 0.5
        roll = rng.random()
        if roll < 0.1 and docs:
            dup = dict(rng.choice(docs))
            docs.append({**doc(dup["request_id"], ts, dup["route"], rng.randrange(8))})
        elif roll < 0.15:
            docs.append(doc(f"late-{i}", ts - 190, rng.choice(routes), 8 + rng.randrange(3)))
        else:
            route = routes[min(int(rng.expovariate(0.5)), len(routes) - 1)]
            docs.append(doc(f"e{i}", ts, route, min(int(rng.expovariate(0.4)), 7),
                            drafted=rng.randint(1, 40), accepted=0))
    return docs


def guarded_run(url: str, path: str, per_route: int, total: int, every: int,
                kill_at: int | None = None) -> None:
    """Read ``path`` (one message per line) from the stored offset, checkpointing whenever
    the offset reaches a multiple of ``every``; ``kill -9`` itself right after ``kill_at``."""
    with Store(url) as store:
        p, _ = guarded(store, per_route, total, source="guarded")
        lines = Path(path).read_bytes().splitlines()
        for offset in range(p.next_offset(0) or 0, len(lines)):
            p.process(0, offset, lines[offset])
            if offset == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if (offset + 1) % every == 0:
                assert p.checkpoint()
        assert p.checkpoint()


def tables(store: Store) -> dict[str, Any]:
    return {g: store.buckets(granularity=g) for g in GRANULARITIES}


@pytest.mark.parametrize("seed", [1, 2])
def test_kill_9_mid_stretch_gives_the_same_tables(store: Store, migrated_url: str,
                                                  tmp_path: Path, seed: int) -> None:
    """Three processes over one file, the first two killed (SIGKILL, by themselves, at a
    random message between checkpoints), against one uninterrupted run."""
    docs = traffic(seed)
    path = tmp_path / "traffic.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(d) for d in docs) + b"\n")
    per_route, total, every = 3, 12, 25
    rng = random.Random(seed)
    first = rng.randrange(100, 300)
    kills = [k for k in (first, first + rng.randrange(100, 250)) if k % every != every - 1]
    for kill_at in [*kills, None]:
        args = json.dumps([migrated_url, str(path), per_route, total, every, kill_at])
        code = ("import json, sys; from tests.monitor.aggregate.test_guard import guarded_run;"
                " guarded_run(*json.loads(sys.argv[1]))")
        proc = subprocess.run([sys.executable, "-c", code, args], cwd=REPO, timeout=120,
                              capture_output=True)
        want = -signal.SIGKILL if kill_at is not None else 0
        assert proc.returncode == want, proc.stderr.decode()[-3000:]

    reference = f"sqlite:///{tmp_path / 'reference.db'}"
    upgrade(reference)
    guarded_run(reference, str(path), per_route, total, every)
    with Store(reference) as ref:
        assert tables(store) == tables(ref)
        assert store.series_keys() == ref.series_keys()
    keys = store.series_keys()
    regular = Counter(k.route for k in keys if not is_overflow(k))
    assert max(regular.values()) == per_route and sum(regular.values()) <= total
    assert any(is_overflow(k) for k in keys)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[dict[str, Any]], int, int, int, list[int]]:
    docs = traffic(draw(st.integers(0, 10_000)), n=draw(st.integers(20, 200)))
    every = draw(st.integers(1, 30))
    crashes = draw(st.lists(st.integers(0, len(docs) - 1), max_size=3, unique=True))
    return docs, draw(st.integers(1, 4)), draw(st.integers(1, 12)), every, sorted(crashes)


@settings(max_examples=150)
@given(runs(), st.sampled_from(["store", "checkpoint"]))
def test_any_crash_points_any_caps_same_decisions_and_bounds(
        run: tuple[list[dict[str, Any]], int, int, int, list[int]], checks: str) -> None:
    """In memory, many more cases: crashing after any message (whatever is uncommitted is
    lost and read again) ends in the same rollups as never crashing, within the bounds."""
    docs, per_route, total, every, crashes = run
    raws = [orjson.dumps(d) for d in docs]

    def play(crash_at: list[int], caps: tuple[int, int] = (per_route, total)
             ) -> SeriesMemoryStore:
        store = SeriesMemoryStore()
        pending = list(crash_at)
        while True:
            p, guard = guarded(store, *caps, checks=checks)
            start = store.offsets.get(0, 0)
            crashed = False
            for offset in range(start, len(raws)):
                p.process(0, offset, raws[offset])
                assert guard.tracked <= 2 * caps[1] + 1
                if pending and offset == pending[0]:
                    pending.pop(0)
                    crashed = True
                    break
                if (offset + 1) % every == 0:
                    assert p.checkpoint()
            if not crashed:
                assert p.checkpoint()
                return store

    crashed, clean = play(crashes), play([])
    assert crashed.rollups == clean.rollups
    keys = crashed.series_keys()
    regular = Counter(k.route for k in keys if not is_overflow(k))
    assert all(n <= per_route for n in regular.values()) and sum(regular.values()) <= total
    assert len(keys) <= 2 * total + 1
    # Nothing lost to the rewrite: each route keeps its totals, or (a route new once the
    # total cap was reached) all of them went to the overflow route.
    unguarded = totals((k, b) for (k, _), b in play([], (10**6, 10**6)).rollups.items())
    got = totals((k, b) for (k, _), b in crashed.rollups.items())
    moved = [v for r, v in unguarded.items() if r not in got]
    assert got.pop(OVERFLOW, (0, 0, 0)) == tuple(map(sum, zip((0, 0, 0), *moved, strict=True)))
    assert got == {r: v for r, v in unguarded.items() if r in got}
