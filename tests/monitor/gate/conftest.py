"""A migrated SQLite store holding three experiments (pass, fail, small) and one change
whose new setup errs, for the command and the API."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from monitor.aggregate.bucket import BucketStats
from monitor.aggregate.series import SeriesKey
from monitor.store.checkpoint import Checkpoint
from monitor.store.db import upgrade
from monitor.store.store import Store
from tests.monitor.changes.traffic import OLD, change, setup, traffic
from tests.monitor.gate.traffic import Arm, bucket
from tests.monitor.store.helpers import T0, rollups_of

CODE = Arm(p_success=0.8, gpu_mean=1.0, acceptance=0.6)
FASTER_CODE = Arm(p_success=0.8, gpu_mean=0.8, acceptance=0.75, e2e_ms=850.0)
JSON = Arm(p_success=0.9, gpu_mean=0.5, p_tool_valid=0.98)
BROKEN_JSON = Arm(p_success=0.9, gpu_mean=0.5, p_tool_valid=0.90)

# name -> per arm, per route: (how it serves, requests)
EXPERIMENTS: dict[str, dict[str, dict[str, tuple[Arm, int]]]] = {
    "faster-draft": {
        "baseline": {"code-assistant": (CODE, 120_000), "json-tools": (JSON, 120_000)},
        "candidate": {"code-assistant": (FASTER_CODE, 120_000), "json-tools": (JSON, 120_000)}},
    "broken-tools": {
        "baseline": {"code-assistant": (CODE, 20_000), "json-tools": (JSON, 5_000)},
        "candidate": {"code-assistant": (FASTER_CODE, 20_000),
                      "json-tools": (BROKEN_JSON, 5_000)}},
    "small": {
        "baseline": {"code-assistant": (CODE, 300), "json-tools": (JSON, 100)},
        "candidate": {"code-assistant": (FASTER_CODE, 300), "json-tools": (JSON, 100)}},
}
CHANGE_ID = "chat-errors"
CHANGE_AT = T0 + 2 * 3600 + 17.5


def key(route: str) -> SeriesKey:
    return SeriesKey(route, "llama-70b", "t1", "llama3", "llama-1b", "d1", "llama3",
                     "draft_model", 4)


def write(store: Store) -> None:
    rng = np.random.default_rng(11)
    deltas: dict[tuple[str, str, SeriesKey, int], BucketStats] = {}
    for name, arms in EXPERIMENTS.items():
        for arm, routes in arms.items():
            for route, (how, n) in routes.items():
                # two hours, to show the rows are summed
                deltas[(name, arm, key(route), T0)] = bucket(how, n // 2, rng)
                deltas[(name, arm, key(route), T0 + 3600)] = bucket(how, n - n // 2, rng)
    # a change on "chat": the new setup errs on one request in five
    new = setup(draft_revision="d2")
    events = [dataclasses.replace(e, gpu_seconds=0.5)
              for e in traffic("chat", OLD, T0, 120, seed=1)
              + traffic("chat", new, T0 + 2 * 3600, 120, error_rate=0.2, seed=2)]
    store.commit(Checkpoint(source="test", rollups=rollups_of(events), experiments=deltas,
                            changes=[change(CHANGE_ID, CHANGE_AT, OLD, new, route="chat")]))


@pytest.fixture(scope="module")
def gate_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path: Path = tmp_path_factory.mktemp("gate") / "gate.db"
    url = f"sqlite:///{path}"
    upgrade(url)
    with Store(url) as store:
        write(store)
    yield url
