"""Task outcome and cost: the pipeline's GPU-second estimate and experiment rollups, and a
replayed file's ratio rows against an oracle written over the same file in plain Python.

The oracle reuses nothing of specwatch: stdlib json over the lines, first occurrence of a
request id wins, the definitions of telemetry v1.1 applied directly.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from monitor.config import IngestConfig
from monitor.deadletter import CountingDeadLetter
from monitor.metrics import IngestMetrics
from monitor.pipeline import Pipeline
from monitor.sources.replay import replay
from monitor.store import Store, format_ratios
from monitor.store.checkpoint import Checkpoint, PartitionState
from monitor.telemetry.event import Event

GPUS = 4.0  # cost.gpus_per_replica of the replayed deployment
PRICE = 2.75  # cost.price_per_gpu_hour
T0 = datetime(2026, 11, 2, 21, tzinfo=UTC).timestamp()  # three hours cross midnight
SECONDS = {"hour": 3600, "day": 86400}


# --- the pipeline, on events built directly ----------------------------------------------


class _Capture:
    """A checkpoint store that keeps what it is handed."""

    def __init__(self) -> None:
        self.commits: list[Checkpoint] = []

    def commit(self, cp: Checkpoint) -> None:
        self.commits.append(cp)

    def load_partitions(self, source: str, partitions: Any) -> dict[int, PartitionState]:
        return {p: PartitionState() for p in partitions}

    def load_state(self, source: str, prefix: str = "") -> dict[str, Any]:
        return {}


def _pipeline(store: Any, gpus: float = GPUS) -> Pipeline:
    p = Pipeline(store, "test", IngestConfig(), IngestMetrics(CollectorRegistry()),
                 CountingDeadLetter(), gpus_per_replica=gpus)
    p.assign([0])
    return p


def _event(rid: str, ts: float, **kw: Any) -> Event:
    fields: dict[str, Any] = dict(route="code", status="ok", target_model="t",
                                  target_revision="r", target_tokenizer="tok",
                                  output_tokens=10, e2e_ms=800.0)
    fields.update(kw)
    return Event(rid, ts, **fields)


def test_gpu_seconds_are_estimated_only_where_not_reported() -> None:
    store = _Capture()
    p = _pipeline(store)
    events = [
        _event("a", T0, gpu_seconds=0.3),
        _event("b", T0 + 1, batch_size=8),
        _event("c", T0 + 2),  # no batch size: the request had the replica to itself
        _event("d", T0 + 3, batch_size=0, e2e_ms=100.0),
    ]
    p.process(0, 0, b"", parsed=(events, []))
    assert [(e.gpu_seconds, e.gpu_estimated) for e in events] == [
        (0.3, False), (0.8 * GPUS / 8, True), (0.8 * GPUS, True), (0.1 * GPUS, True)]
    assert p.checkpoint()
    (cp,) = store.commits
    (stats,) = cp.rollups.values()
    assert stats.gpu_seconds == pytest.approx(0.3 + 0.4 * GPUS / 4 + 0.8 * GPUS + 0.1 * GPUS)
    assert stats.gpu_reported_requests == 1
    assert cp.experiments == {}


def test_experiment_events_also_go_to_per_arm_hours_in_the_same_checkpoint() -> None:
    store = _Capture()
    p = _pipeline(store)
    events = [_event(f"e{i}", T0 + 900 * i, experiment_name="x",
                     experiment_arm="candidate" if i % 2 else "baseline") for i in range(8)]
    events.insert(1, _event("plain", T0 + 5))
    p.process(0, 0, b"", parsed=(events, []))
    p.checkpoint()
    (cp,) = store.commits
    assert sum(b.requests for b in cp.rollups.values()) == 9
    keys = sorted((name, arm, int(ts)) for name, arm, _, ts in cp.experiments)
    assert keys == [("x", "baseline", int(T0)), ("x", "baseline", int(T0) + 3600),
                    ("x", "candidate", int(T0)), ("x", "candidate", int(T0) + 3600)]
    assert all(b.requests == 2 for b in cp.experiments.values())
    # Handed over: the next checkpoint starts empty; a dropped stretch forgets them.
    p.process(0, 1, b"", parsed=([_event("next-x", T0 + 7000, experiment_name="x",
                                         experiment_arm="baseline")], []))
    p.drop_all()
    p.assign([0])
    p.checkpoint()
    assert len(store.commits) == 1


# --- replay against the oracle ------------------------------------------------------------


def _write_file(path: Path, n: int = 3000, seed: int = 16) -> list[dict[str, Any]]:
    """Mixed v1.1 events over three hours, two routes, a baseline and a candidate arm, with
    duplicates; every optional field sometimes absent."""
    rng = random.Random(seed)
    lines: list[dict[str, Any]] = []
    for i in range(n):
        route = "code-assistant" if i % 3 else "json-tools"
        candidate = rng.random() < 0.5
        e: dict[str, Any] = {
            "request_id": f"req-{i}",
            "ts": T0 + i * 3.6 + rng.random(),
            "route": route,
            "status": rng.choice(["ok"] * 12 + ["error", "timeout"]),
            "target": {"model": "llama-70b", "revision": "r1", "tokenizer": "llama3"},
            "draft": {"model": "llama-1b", "revision": "d2" if candidate else "d1",
                      "tokenizer": "llama3"},
            "spec": {"num_speculative_tokens": 4, "drafted_tokens": 40,
                     "accepted_tokens": rng.randint(0, 40)},
            "output_tokens": rng.randint(1, 400),
            "e2e_ms": round(rng.uniform(50.0, 4000.0), 3),
            "ttft_ms": 20.0,
        }
        if rng.random() < 0.7:
            e["batch_size"] = rng.randint(1, 32)
        if rng.random() < 0.4:
            e["gpu_seconds"] = round(rng.uniform(0.01, 12.0), 4)
        outcome = {}
        for name, p_true in (("ok", 0.85), ("schema_valid", 0.95), ("tool_calls_valid", 0.9)):
            if rng.random() < 0.6:
                outcome[name] = rng.random() < p_true
        if outcome:
            e["outcome"] = outcome
        if rng.random() < 0.8:
            p50 = rng.uniform(5.0, 40.0)
            e["itl_ms"] = {"p50": p50, "p99": p50 * rng.uniform(1.5, 6.0),
                           "max": p50 * 10}
        if i % 2:
            e["experiment"] = {"name": "draft-v2", "arm": "candidate" if candidate
                               else "baseline"}
        lines.append(e)
        if rng.random() < 0.02:
            # A duplicate with different content: the first occurrence counts.
            lines.append({**e, "gpu_seconds": 99.0, "status": "error"})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return lines


def _oracle(lines: list[dict[str, Any]], step: int) -> dict[tuple, dict[str, Any]]:
    """Per (bucket start, route, draft revision): plain sums over first occurrences."""
    seen: set[str] = set()
    acc: dict[tuple, dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    itl: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: {"p50": [], "p99": []})
    for e in lines:
        if e["request_id"] in seen:
            continue
        seen.add(e["request_id"])
        key = (int(e["ts"] // step * step), e["route"], e["draft"]["revision"])
        a = acc[key]
        outcome = e.get("outcome", {})
        success = outcome["ok"] if "ok" in outcome else e["status"] == "ok"
        gpu = e.get("gpu_seconds")
        if gpu is None:
            gpu = e["e2e_ms"] / 1000 * GPUS / (e.get("batch_size") or 1)
        a["requests"] += 1
        a["successes"] += success
        a["gpu_seconds"] += gpu
        a["gpu_reported_requests"] += "gpu_seconds" in e
        for name in ("ok", "schema_valid", "tool_calls_valid"):
            if name in outcome:
                a[name + "_reported"] += 1
                a[name + "_true"] += outcome[name]
        if "itl_ms" in e:
            itl[key]["p50"].append(e["itl_ms"]["p50"])
            itl[key]["p99"].append(e["itl_ms"]["p99"])
    out = {}
    for key, a in acc.items():
        row = {
            "requests": a["requests"],
            "successes": a["successes"],
            "success_rate": a["successes"] / a["requests"],
            "gpu_seconds": a["gpu_seconds"],
            "gpu_seconds_estimated_share": 1 - a["gpu_reported_requests"] / a["requests"],
            "successes_per_gpu_second": a["successes"] / a["gpu_seconds"],
            "cost_per_success": (a["gpu_seconds"] / a["successes"] * PRICE / 3600
                                 if a["successes"] else None),
        }
        for name in ("ok", "schema_valid", "tool_calls_valid"):
            n = a[name + "_reported"]
            row[f"{name}_rate"] = a[name + "_true"] / n if n else None
        row["outcome_ok_reported"] = a["ok_reported"]
        row["schema_valid_reported"] = a["schema_valid_reported"]
        row["tool_calls_valid_reported"] = a["tool_calls_valid_reported"]
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            values = sorted(itl[key][name])
            row[f"itl_{name}_ms"] = values[int(q * (len(values) - 1))] if values else None
        out[key] = row
    return out


@pytest.fixture
def replayed(migrated_url: str, tmp_path: Path) -> tuple[str, list[dict[str, Any]]]:
    path = tmp_path / "v11.jsonl"
    lines = _write_file(path)
    with Store(migrated_url) as store:
        pipeline = _pipeline(store)
        summary = replay(str(path), pipeline, progress=False)
    assert summary.events == len({e["request_id"] for e in lines})
    assert summary.invalid == 0, "the parser does not take telemetry v1.1 yet"
    return migrated_url, lines


@pytest.mark.parametrize("granularity", ["hour", "day"])
def test_ratios_json_equals_the_oracle(replayed: tuple[str, list], granularity: str) -> None:
    url, lines = replayed
    want = _oracle(lines, SECONDS[granularity])
    with Store(url) as store:
        rows = json.loads(format_ratios(
            store.ratios(granularity=granularity, price_per_gpu_hour=PRICE), "json"))
    got = {(int(datetime.fromisoformat(r["bucket_start"]).timestamp()), r["route"],
            r["draft_revision"]): r for r in rows}
    assert set(got) == set(want)
    for key, expected in want.items():
        row = got[key]
        for name, value in expected.items():
            if name.startswith("itl_"):
                # A sketch: within its 1% relative accuracy of the exact order statistic.
                assert row[name] == pytest.approx(value, rel=0.0101), (key, name)
            elif isinstance(value, float):
                assert row[name] == pytest.approx(value, rel=1e-9), (key, name)
            else:
                assert row[name] == value, (key, name)


def test_experiment_arms_equal_the_oracle(replayed: tuple[str, list]) -> None:
    url, lines = replayed
    arms = {"baseline": [], "candidate": []}
    seen: set[str] = set()
    for e in lines:
        if e["request_id"] not in seen:
            seen.add(e["request_id"])
            if "experiment" in e:
                arms[e["experiment"]["arm"]].append(e)
    with Store(url) as store:
        (summary,) = store.experiments()
        assert (summary.name, summary.arms) == ("draft-v2", ("baseline", "candidate"))
        assert summary.requests == sum(map(len, arms.values()))
        got = store.experiment_stats("draft-v2")
        assert {s.route for s in got} == {"code-assistant", "json-tools"}
        half = store.experiment_stats("draft-v2", until=datetime.fromtimestamp(T0, UTC)
                                      + timedelta(hours=1))
    for arm, events in arms.items():
        mine = [s.stats for s in got if s.arm == arm]
        successes = sum(e["outcome"]["ok"] if "ok" in e.get("outcome", {})
                        else e["status"] == "ok" for e in events)
        gpu = sum(e["gpu_seconds"] if "gpu_seconds" in e
                  else e["e2e_ms"] / 1000 * GPUS / (e.get("batch_size") or 1) for e in events)
        assert sum(s.requests for s in mine) == len(events)
        assert sum(s.successes for s in mine) == successes
        assert sum(s.gpu_seconds for s in mine) == pytest.approx(gpu, rel=1e-9)
        first_hour = [e for e in events if e["ts"] < T0 + 3600]
        assert sum(s.stats.requests for s in half if s.arm == arm) == len(first_hour)
