"""One contract over every detector: declared parameters round-trip, and a snapshot taken
mid-stream restores to a detector whose later outputs are those of the original."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.detect.acceptance import OverdispersedCusum
from monitor.detect.activity import ContentionMonitor, InactivityMonitor, StalenessMonitor
from monitor.detect.base import Detector
from monitor.detect.breakeven import BreakevenMonitor, CostModel
from monitor.detect.exceptions import StateVersionError
from monitor.detect.metadata import MetadataRules
from monitor.detect.positions import PositionCurve
from monitor.detect.river_adapters import AdwinDetector, PageHinkleyDetector
from monitor.detect.throughput import ThroughputMonitor
from monitor.telemetry.event import Event

# Small windows and warm-ups, so that a few thousand random requests reach every phase.
DETECTORS: dict[str, Any] = {
    "contention": lambda: ContentionMonitor(min_requests=20, window=300.0),
    "staleness": lambda: StalenessMonitor(silence=30.0),
    "inactivity": lambda: InactivityMonitor(window=300.0, min_requests=10),
    "breakeven": lambda: BreakevenMonitor(window=600.0, min_requests=10, min_tokens=50),
    "throughput": lambda: ThroughputMonitor(warmup=120.0, min_baseline=20, min_requests=10,
                                            window=300.0),
    "positions": lambda: PositionCurve(cost_model=CostModel(0.05, 0.1), window=600.0,
                                       min_steps=20),
    "metadata": lambda: MetadataRules(grace=30.0, max_pairs=4),
    "cusum": lambda: OverdispersedCusum(warmup_requests=100, warmup_tokens=0,
                                        baseline_chunk=20),
    "adwin": lambda: AdwinDetector(max_replay=400),
    "page_hinkley": lambda: PageHinkleyDetector(threshold=2.0, max_replay=400),
}
ACCEPTANCE = (OverdispersedCusum, AdwinDetector, PageHinkleyDetector)


def events(seed: int, n: int) -> list[Event]:
    """Random traffic: revisions, tokenizers and draft models change, acceptance shifts,
    requests fail, drafts get evicted, the stream pauses."""
    rng = np.random.default_rng(seed)
    out, ts = [], 1_000.0
    for i in range(n):
        ts += float(rng.exponential(2.0)) + (120.0 if rng.random() < 0.01 else 0.0)
        k = 4
        level = 0.7 if i < n // 2 else 0.45
        drafted = int(rng.integers(0, 3)) * k * int(rng.random() > 0.1)
        accepted = int(rng.binomial(drafted, level)) if drafted else 0
        steps = max(1, drafted // k)
        per_pos = tuple(int(rng.binomial(steps, level ** (j + 1))) for j in range(k))
        draft = None if rng.random() < 0.05 else "d"
        out.append(Event(
            f"r{i}", ts, "code", "ok" if rng.random() > 0.05 else "error", "t",
            str(rng.choice(["r1", "r1", "r1", "r2"])), "tok", int(rng.integers(20, 200)),
            float(rng.uniform(100, 2000)), draft_model=draft,
            draft_revision=None if draft is None else str(rng.choice(["d1", "d1", "d2"])),
            draft_tokenizer=None if draft is None else str(rng.choice(["tok"] * 9 + ["x"])),
            has_spec=True, num_speculative_tokens=k, drafted_tokens=drafted,
            accepted_tokens=accepted, verify_steps=steps, accepted_per_position=per_pos,
            draft_evicted=bool(rng.random() < 0.08), ttft_ms=float(rng.uniform(10, 100)),
        ))
    return out


def feed(det: Any, e: Event) -> None:
    if isinstance(det, ACCEPTANCE):
        if e.drafted_tokens > 0:
            det.update(e.accepted_tokens, e.drafted_tokens, e.ts)
        return
    det.update(e)
    if isinstance(det, StalenessMonitor):
        det.tick(e.ts + 45.0)  # a sweep that sees silence now and then


def outputs(det: Any) -> str:
    """Everything the engine reads after an update, as text (NaN included)."""
    return json.dumps([det.snapshot(), det.evidence()], sort_keys=True, default=repr)


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_every_detector_is_built_on_the_base(name: str) -> None:
    det = DETECTORS[name]()
    assert isinstance(det, Detector) and det.KIND and det.PARAMS
    snap = det.snapshot()
    assert list(snap)[:3] == ["kind", "version", "params"]
    assert list(det.params()) == list(det.PARAMS)
    # a compact snapshot leaves out the parameters at their defaults, in declared order
    assert [k for k in det.PARAMS if k in snap["params"]] == list(snap["params"])


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_declared_params_round_trip(name: str) -> None:
    det = DETECTORS[name]()
    params = json.loads(json.dumps(det.params()))
    twin = type(det)._from_params(dict(params))
    assert twin.params() == det.params() == params
    assert twin.snapshot() == det.snapshot()


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_restore_continues_identically(name: str, seed: int) -> None:
    stream = events(seed, 1500)
    det = DETECTORS[name]()
    for e in stream[:900]:
        feed(det, e)
    snap = json.loads(json.dumps(det.snapshot()))  # through JSON, as stored
    again = type(det).restore(snap)
    assert outputs(again) == outputs(det)
    assert again.snapshot() == snap
    for e in stream[900:]:
        feed(det, e)
        feed(again, e)
        assert outputs(again) == outputs(det)


COMPACT = sorted(name for name, make in DETECTORS.items() if type(make()).COMPACT)
# Version 1 snapshots, as the build before compact snapshots wrote them (commit 35c6889):
# DETECTORS[name] fed events(3, 1500)[:cut], keyed "name/cut".
V1 = json.loads((Path(__file__).parent / "data" / "v1_snapshots.json").read_text())


def fed(name: str, cut: int) -> Any:
    det = DETECTORS[name]()
    for e in events(3, 1500)[:cut]:
        feed(det, e)
    return det


@pytest.mark.parametrize("cut", [0, 40, 300, 900])  # fresh, warming up, and later
@pytest.mark.parametrize("name", COMPACT)
def test_compact_snapshots_continue_identically(name: str, cut: int) -> None:
    """A compact snapshot (what equals a fresh detector's left out) restores to a detector
    that decides as the uninterrupted one."""
    stream = events(3, 1500)
    det = fed(name, cut)
    compact = json.loads(json.dumps(det.snapshot()))
    assert compact["version"] == type(det).VERSION > 1
    twin = type(det).restore(compact)
    assert twin.snapshot() == compact and outputs(twin) == outputs(det)
    for e in stream[cut:]:
        feed(det, e)
        feed(twin, e)
        assert outputs(twin) == outputs(det)


@pytest.mark.parametrize("key", sorted(V1))
def test_version_1_snapshots_still_restore(key: str) -> None:
    """The full form version 1 stored restores to the state that the same events give now,
    and goes on deciding alike; the compact form is the smaller."""
    name, cut = key.split("/")
    old = V1[key]
    assert old["version"] == 1
    det = fed(name, int(cut))
    again = type(det).restore(json.loads(json.dumps(old)))
    assert again.snapshot() == det.snapshot()
    assert len(json.dumps(det.snapshot())) < len(json.dumps(old))
    for e in events(3, 1500)[int(cut):]:
        feed(det, e)
        feed(again, e)
        assert outputs(again) == outputs(det)


@pytest.mark.parametrize("name", COMPACT)
def test_a_fresh_compact_snapshot_holds_only_what_differs(name: str) -> None:
    det = DETECTORS[name]()
    snap = det.snapshot()
    defaults = type(det)().params()
    assert snap["params"] == {k: v for k, v in det.params().items() if v != defaults[k]}
    assert set(snap) <= {"kind", "version", "params"}
    assert type(det).restore({**snap, "params": {}}).params() == defaults


@pytest.mark.parametrize("key", sorted(V1))
def test_a_version_1_snapshot_missing_a_key_is_refused(key: str) -> None:
    old = json.loads(json.dumps(V1[key]))
    inner = old["state"] if "state" in old else old
    del inner[next(k for k in inner if k not in ("kind", "version", "params"))]
    with pytest.raises(StateVersionError):
        type(DETECTORS[key.split("/")[0]]()).restore(old)


PINNED = json.loads((Path(__file__).parent / "data" / "compact_fresh.json").read_text())


@pytest.mark.parametrize("kind", sorted(PINNED))
def test_what_compact_snapshots_leave_out_is_pinned_to_their_version(kind: str) -> None:
    """A compact snapshot leaves out the constructor's defaults and a fresh detector's state,
    so a stored snapshot means what it meant only while both stay as they were: changing
    either must come with a new VERSION (and a new entry in data/compact_fresh.json), or
    stored state would restore with the new values in silence."""
    from monitor.detect.acceptance import _reset_state
    from monitor.detect.base import _fresh_of

    cls = next(type(make()) for make in DETECTORS.values() if type(make()).KIND == kind)
    defaults, fresh = _fresh_of(cls, {})
    now = {"version": cls.VERSION, "defaults": defaults, "fresh": fresh}
    if cls is OverdispersedCusum:
        now["fresh_warmup"] = _reset_state()
    assert json.dumps(now, sort_keys=True) == json.dumps(PINNED[kind], sort_keys=True), (
        f"{kind}: its defaults or fresh state changed at version {cls.VERSION}; compact "
        "snapshots stored before this change would restore differently: bump VERSION, keep "
        "the old one readable, and record the new values in data/compact_fresh.json")


def spelled_out(det: Any) -> dict[str, Any]:
    """A compact snapshot computed from its definition, with nothing looked up or kept: the
    parameters that differ from the constructor's defaults, and the state keys whose JSON
    differs from a fresh twin's (one with the same parameters)."""
    params = det.params()
    defaults = type(det)().params()
    twin = type(det)._from_params(json.loads(json.dumps(params)))
    fresh = json.loads(json.dumps(twin._state()))

    def differs(value: Any, other: Any) -> bool:
        return json.dumps(value) != json.dumps(other) or type(value) is not type(other)

    return {"kind": det.KIND, "version": det.VERSION,
            "params": {k: v for k, v in params.items() if differs(v, defaults[k])},
            **{k: v for k, v in det._state().items() if k not in fresh or differs(v, fresh[k])}}


@pytest.mark.parametrize("name", COMPACT)
def test_compact_snapshots_match_their_definition_snapshot_after_snapshot(name: str) -> None:
    """What a detector looks up once (its compact parameters, a fresh twin's state) and the
    shortcut past equal fields give, snapshot after snapshot, what the definition gives;
    a caller changing a snapshot changes no later one."""
    stream = events(4, 1200)
    det = DETECTORS[name]()
    for i, e in enumerate(stream):
        feed(det, e)
        if i % 97 == 0:
            snap = det.snapshot()
            assert json.dumps(snap, sort_keys=True) == json.dumps(spelled_out(det),
                                                                  sort_keys=True)
            snap["params"]["poisoned"] = True
    assert "poisoned" not in det.snapshot()["params"]


def test_detectors_of_one_class_with_other_parameters_snapshot_their_own() -> None:
    """Parameters that compare equal yet are written differently (1 and 1.0 cannot arise
    after the constructor's conversions, 0.0 and -0.0 can) stay apart."""
    dets = [BreakevenMonitor(hysteresis=h) for h in (0.0, -0.0, 0.03, 0.05)]
    for det in dets * 2:  # the second snapshot of each reads what the first looked up
        assert json.dumps(det.snapshot()["params"]) == json.dumps(spelled_out(det)["params"])
    assert [json.dumps(d.snapshot()["params"]) for d in dets] == [
        '{"hysteresis": 0.0}', '{"hysteresis": -0.0}', "{}", '{"hysteresis": 0.05}']
