"""The pipeline records every counted event in exactly one slice of its hour (shadow twins
excepted), so the policy's inputs sum to the ratio tables; ``policy.enabled: false`` records
none."""

from __future__ import annotations

import json
from pathlib import Path

from monitor.cli import main
from monitor.store import Store


def _simulate(tmp_path: Path) -> Path:
    out = tmp_path / "traffic.jsonl"
    assert main(["simulate", "--scenario", "experiment", "--duration", "40m", "--rate", "1",
                 "--seed", "3", "--shadow", "0.3", "--start", "2026-11-02T09:30:00Z",
                 "--out", str(out)]) == 0
    return out


def test_slices_sum_to_the_counted_events_without_shadow_twins(tmp_path: Path) -> None:
    traffic = _simulate(tmp_path)
    events = [json.loads(line) for line in traffic.read_text().splitlines()]
    unique = {e["request_id"]: e for e in events}
    shadow = {rid for rid, e in unique.items() if (e.get("tags") or {}).get("shadow") == "true"}
    assert shadow, "the scenario should have shadow twins"
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert main(["replay", str(traffic), "--db", url, "--no-progress"]) == 0
    with Store(url) as store:
        records = store.slice_records()
        ratios = store.ratios(granularity="hour")
    assert sum(r.stats.requests for r in records) == len(unique) - len(shadow)
    assert sum(row.requests for row in ratios) == len(unique)
    spec = [e for rid, e in unique.items() if rid not in shadow and e.get("spec")]
    assert sum(r.stats.drafted_tokens for r in records) == sum(
        e["spec"]["drafted_tokens"] for e in spec)
    assert sum(r.stats.accepted_tokens for r in records) == sum(
        e["spec"]["accepted_tokens"] for e in spec)
    # Hours split the two sides of 10:00; tags are the caller's, never "shadow".
    assert {r.hour % 86400 for r in records} == {9 * 3600, 10 * 3600}
    assert all("shadow" not in r.key.tags for r in records)
    assert {r.key.tags.split("&")[-1] for r in records} >= {"task=code", "task=chat"}


def test_disabled_records_no_slices(tmp_path: Path) -> None:
    traffic = _simulate(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  enabled: false\n")
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    assert main(["replay", str(traffic), "--db", url, "--no-progress", "--config",
                 str(config)]) == 0
    with Store(url) as store:
        assert store.slice_records() == []
        assert store.ratios(granularity="hour")
