"""/api/v1/routes: detector snapshots -> routes, segments, baselines, recommendations."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from monitor.api.app import create_app
from monitor.api.routes_view import (
    clean,
    routes_from_detection,
    routes_from_states,
    segment_entry,
    segment_from_snapshot,
    store_routes_view,
)
from monitor.cli import main
from monitor.config import DetectionConfig
from monitor.detect.engine import ENGINE_KEY, SEGMENT_PREFIX, Detection, Segment
from monitor.simulate import Simulator, scenario_config
from monitor.store.checkpoint import Checkpoint
from monitor.store.store import Store
from monitor.telemetry.parse import event_from_obj
from tests.monitor.api import TestClient

INCIDENT = "acceptance_shift:route=code-assistant,at=1h,factor=0.4"


@pytest.fixture(scope="module")
def engine() -> tuple[Detection, dict[str, Any]]:
    """Two hours of five routes through the engine, one route falling below break-even; and
    the snapshots it would commit."""
    cfg = scenario_config("quiet", duration_s=7200, rate=0.6, seed=7,
                          start="2026-11-02T00:00:00Z").add_incidents([INCIDENT])
    d = Detection(DetectionConfig(), clock="event")
    d.load({})
    events = [event_from_obj(obj) for obj in Simulator(cfg).events()]
    for i in range(0, len(events), 100):
        d.observe(0, events[i:i + 100])
    return d, d.snapshot()


def _by_labels(routes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {json.dumps(s["labels"], sort_keys=True): s for r in routes for s in r["segments"]}


def _same_as_report(routes: list[dict[str, Any]], recs: list[dict[str, Any]]) -> None:
    """Each segment's recommendation is the engine's own (``Detection.recommendations``)."""
    segments = _by_labels(routes)
    assert recs
    for rec in recs:
        seg = segments[json.dumps(rec["labels"], sort_keys=True)]
        got = seg["recommendation"]
        assert got["recommendation"] == rec["recommendation"]
        assert got["recommended_num_speculative_tokens"] == rec[
            "recommended_num_speculative_tokens"]
        for key in ("rate", "low", "high", "cutoff", "requests"):
            assert got[key] == rec["evidence"][key]
        assert seg["baseline"]["acceptance"] == rec["acceptance"]["baseline"]
        assert seg["baseline"]["phase"] == rec["acceptance"]["phase"]


def test_routes_from_snapshots_report_what_the_engine_reports(
    engine: tuple[Detection, dict[str, Any]],
) -> None:
    detection, snaps = engine
    assert ENGINE_KEY in snaps  # not a route: left out
    routes = routes_from_states({"replay": snaps})
    assert [r["route"] for r in routes] == [
        "chat", "code-assistant", "creative-writing", "summarize", "translation"]
    assert all(r["source"] == "replay" and r["partition"] == 0 for r in routes)
    _same_as_report(routes, detection.recommendations())
    (code,) = (r for r in routes if r["route"] == "code-assistant")
    (seg,) = code["segments"]
    assert "below_breakeven" in seg["firing"]
    assert seg["recommendation"]["recommendation"] == "off"
    assert seg["recommendation"]["rate"] < seg["recommendation"]["cutoff"]
    assert seg["last_event_at"].year == 2026 and seg["error"] is None
    assert seg["labels"]["route"] == "code-assistant"
    # The same source twice under two names: one entry per (route, source), sorted.
    twice = routes_from_states({"b": snaps, "a": snaps})
    assert [(r["route"], r["source"]) for r in twice][:2] == [("chat", "a"), ("chat", "b")]
    # A live engine gives the same answer as its committed snapshots.
    assert routes_from_detection(detection, "replay") == routes




def test_an_armed_baseline_is_shown(engine: tuple[Detection, dict[str, Any]]) -> None:
    detection, snaps = engine
    seg_id, data = next((k.rpartition("/")[2], v) for k, v in snaps.items()
                        if k.startswith(SEGMENT_PREFIX))
    seg = Segment.restore(data)
    assert seg.acceptance.baseline is None  # still warming up after two hours
    for i in range(4000):  # 21 of 28 drafted tokens accepted, on average
        seg.acceptance.update(20 + i % 3, 28, 1.8e9 + i)
    entry = segment_entry(seg_id, seg)
    assert entry["baseline"]["phase"] == seg.acceptance.phase != "warmup"
    assert entry["baseline"]["detector"] == "overdispersed_cusum"
    assert entry["baseline"]["acceptance"] == seg.acceptance.baseline is not None
    assert entry["baseline"]["current"] == seg.acceptance.current
    assert segment_from_snapshot(seg_id, seg.snapshot()) == entry


def test_unreadable_or_missing_segments_never_fail_the_answer() -> None:
    route = {"kind": "route", "version": 1, "name": "code", "partition": 3,
             "segments": ["gone", "bad"], "firing": {"telemetry_stale": "f1"}}
    states = {"daemon": {"detect/route/r1": route,
                         "detect/segment/bad": {"kind": "segment", "version": 99,
                                                "labels": {"route": "code"}},
                         "alerts/lifecycle": {"anything": 1}}}
    (r,) = routes_from_states(states)
    assert (r["route"], r["partition"], r["firing"]) == ("code", 3, ["telemetry_stale"])
    (seg,) = r["segments"]  # "gone" has no snapshot: left out
    assert seg["id"] == "bad" and seg["labels"] == {"route": "code"}
    assert seg["error"].startswith("unreadable snapshot") and seg["recommendation"] is None


def test_clean_makes_floats_json_safe() -> None:
    assert clean({"a": [math.nan, 1.5, (math.inf,)], 2: {"b": -math.inf}}) == {
        "a": [None, 1.5, [None]], "2": {"b": None}}


# -- the endpoint, on both databases -----------------------------------------------------------


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("routes") / "t.jsonl"
    assert main(["simulate", "--duration", "2h", "--rate", "0.3", "--seed", "5",
                 "--start", "2026-11-02T00:00:00Z", "--incident", INCIDENT,
                 "--out", str(path)]) == 0
    return path


def test_routes_endpoint_after_a_replay(db_url: str, traffic: Path, tmp_path: Path) -> None:
    recs_path = tmp_path / "recs.jsonl"
    assert main(["replay", str(traffic), "--db", db_url, "--migrate", "--no-progress",
                 "--recommendations", str(recs_path)]) == 0
    recs = [json.loads(line) for line in recs_path.read_text().splitlines()]
    with Store(db_url) as store:
        # A damaged snapshot next to the replay's: shown as such, the rest still answered.
        store.commit(Checkpoint(source="other", state={
            "detect/route/x": {"kind": "route", "version": 1, "name": "code-assistant",
                               "partition": None, "segments": ["s"], "firing": {}},
            "detect/segment/s": {"kind": "segment", "version": 1, "labels": {}},
        }))
        client = TestClient(create_app(store))
        r = client.get("/api/v1/routes")
        assert r.status_code == 200, r.text
        routes = r.json()
        replayed = [x for x in routes if x["source"] == "replay"]
        assert len(replayed) == 5
        _same_as_report(replayed, recs)
        (code,) = [x for x in routes if x["route"] == "code-assistant" and x["source"] == "replay"]
        assert code["segments"][0]["recommendation"]["recommendation"] == "off"
        assert code["segments"][0]["last_event_at"].endswith("Z")
        (damaged,) = [x for x in routes if x["source"] == "other"]
        assert damaged["segments"][0]["error"].startswith("unreadable snapshot")

        only = client.get("/api/v1/routes", params={"route": "code-assistant"}).json()
        assert [(x["route"], x["source"]) for x in only] == [
            ("code-assistant", "other"), ("code-assistant", "replay")]
        assert client.get("/api/v1/routes", params={"route": "nope"}).json() == []
        # One source only (what the daemon passes for its own consumer group).
        view = store_routes_view(store, ["replay"])
        assert [x["source"] for x in view()] == ["replay"] * 5


def test_a_given_routes_view_is_used(store: Store) -> None:
    live = [{"route": "code", "source": None, "partition": 1, "firing": [], "segments": []}]
    client = TestClient(create_app(store, routes_view=lambda: live))
    assert client.get("/api/v1/routes").json() == live
    assert client.get("/api/v1/routes", params={"route": "x"}).json() == []
    # Without one, an empty store has no routes.
    assert TestClient(create_app(store)).get("/api/v1/routes").json() == []
