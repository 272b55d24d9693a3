"""Issue 16, must show 2: outcome rates, GPU-seconds and cost per successful task in
``specwatch ratios --format json`` equal an independent oracle summed over the same file, on
SQLite and PostgreSQL; CSV carries the same values and the table can show them."""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from monitor.cli import main
from tests.helpers import read_jsonl

PRICE = 3.0  # per GPU-hour
OUTCOME_KEYS = ("ok", "schema_valid", "tool_calls_valid")


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Simulated traffic with v1.1 fields added at random: each outcome check reported or
    not, GPU time reported for some requests (estimated for the rest), inter-token gaps."""
    d = tmp_path_factory.mktemp("ratios-outcome")
    plain = d / "plain.jsonl"
    assert main(["simulate", "--duration", "3h", "--rate", "0.3", "--seed", "16",
                 "--start", "2026-11-02T00:00:00Z", "--out", str(plain)]) == 0
    rng = random.Random(16)
    out = d / "v11.jsonl"
    with out.open("w", encoding="utf-8") as fh:
        for e in read_jsonl(plain):
            for v11 in ("outcome", "gpu_seconds", "itl_ms"):
                e.pop(v11, None)  # the oracle below decides them, whatever the simulator does
            outcome = {k: rng.random() < 0.8 for k in OUTCOME_KEYS if rng.random() < 0.6}
            if outcome:
                e["outcome"] = outcome
            if rng.random() < 0.5:
                e["gpu_seconds"] = round(rng.uniform(0.05, 3.0), 4)
            if rng.random() < 0.7:
                p50 = rng.uniform(5, 30)
                e["itl_ms"] = {"p50": p50, "p99": p50 * rng.uniform(2, 6), "max": p50 * 8}
            fh.write(json.dumps(e) + "\n")
    return out


def _key(route: str, target: str, revision: str, draft: str | None, k: int) -> tuple[Any, ...]:
    return (route, target, revision, draft or None, k)


@pytest.fixture(scope="module")
def oracle(traffic: Path) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per series, the sums straight from the JSON lines (one day: one row per series); a
    request id seen before is a duplicate (the simulator sends a few), counted once."""
    sums: dict[tuple[Any, ...], dict[str, Any]] = defaultdict(lambda: defaultdict(float))
    seen: set[str] = set()
    for e in read_jsonl(traffic):
        if e["request_id"] in seen:
            continue
        seen.add(e["request_id"])
        spec = e.get("spec") or {}
        draft = e.get("draft") or {}
        key = _key(e["route"], e["target"]["model"], e["target"]["revision"],
                   draft.get("model"), spec.get("num_speculative_tokens", 0))
        s = sums[key]
        s["requests"] += 1
        outcome = e.get("outcome") or {}
        ok = outcome.get("ok")
        s["successes"] += (e["status"] == "ok") if ok is None else ok
        for name in OUTCOME_KEYS:
            if name in outcome:
                s[f"{name}_reported"] += 1
                s[f"{name}_true"] += outcome[name]
        if "gpu_seconds" in e:
            gpu = e["gpu_seconds"]
            s["gpu_reported"] += 1
        else:  # the documented estimate, cost.gpus_per_replica = 1
            gpu = e["e2e_ms"] / 1000 / (e.get("batch_size") or 1)
        s["gpu_seconds"] += gpu
    return {k: dict(v) for k, v in sums.items()}


def _config(tmp_path: Path) -> str:
    path = tmp_path / "specwatch.yaml"
    path.write_text(f"cost:\n  price_per_gpu_hour: {PRICE}\n", encoding="utf-8")
    return str(path)


def _rate(s: dict[str, Any], name: str) -> float | None:
    reported = s.get(f"{name}_reported", 0)
    return s.get(f"{name}_true", 0) / reported if reported else None


def test_ratios_json_equals_the_oracle_on_both_stores(
    db_url: str, traffic: Path, oracle: dict[tuple[Any, ...], dict[str, Any]], tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(tmp_path)
    assert main(["replay", str(traffic), "--db", db_url, "--config", config, "--migrate",
                 "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["ratios", "--db", db_url, "--config", config, "--format", "json",
                 "--granularity", "day"]) == 0
    rows = json.loads(capsys.readouterr().out)
    got = {_key(r["route"], r["target_model"], r["target_revision"], r["draft_model"],
                r["num_speculative_tokens"]): r for r in rows}
    assert set(got) == set(oracle) and len(rows) == len(oracle)
    reported_somewhere = {name: False for name in OUTCOME_KEYS}
    for key, want in oracle.items():
        r = got[key]
        n = want["requests"]
        assert r["requests"] == n, key
        assert r["successes"] == want["successes"], key
        assert r["success_rate"] == pytest.approx(want["successes"] / n), key
        for name, field in (("ok", "outcome_ok"), ("schema_valid", "schema_valid"),
                            ("tool_calls_valid", "tool_calls_valid")):
            assert r[f"{field}_reported"] == want.get(f"{name}_reported", 0), (key, name)
            assert r[f"{field}_true"] == want.get(f"{name}_true", 0), (key, name)
            rate = _rate(want, name)
            assert r[f"{name}_rate"] == (None if rate is None else pytest.approx(rate))
            reported_somewhere[name] |= rate is not None
        assert r["gpu_reported_requests"] == want.get("gpu_reported", 0), key
        assert r["gpu_seconds"] == pytest.approx(want["gpu_seconds"], rel=1e-9), key
        assert r["successes_per_gpu_second"] == pytest.approx(
            want["successes"] / want["gpu_seconds"], rel=1e-9), key
        assert r["gpu_seconds_per_success"] == pytest.approx(
            want["gpu_seconds"] / want["successes"], rel=1e-9), key
        assert r["cost_per_success"] == pytest.approx(
            want["gpu_seconds"] / want["successes"] * PRICE / 3600, rel=1e-9), key
        assert r["itl_p50_ms"] is not None and 5 * 0.99 <= r["itl_p50_ms"] <= 30 * 1.01
        assert r["itl_p99_ms"] >= r["itl_p50_ms"]
    assert all(reported_somewhere.values())

    # CSV: the same rows and values, empty where JSON has null
    assert main(["ratios", "--db", db_url, "--config", config, "--format", "csv",
                 "--granularity", "day"]) == 0
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(table) == len(rows)
    for line, r in zip(table, rows, strict=True):
        for name in ("successes", "gpu_seconds", "success_rate", "ok_rate", "cost_per_success",
                     "tool_calls_valid_rate"):
            if r[name] is None:
                assert line[name] == ""
            else:
                assert math.isclose(float(line[name]), r[name], rel_tol=1e-12), name

    # the table shows them when asked (by field name), and --wide has them all
    assert main(["ratios", "--db", db_url, "--config", config, "--granularity", "day",
                 "--columns", "route,success_rate,tool_calls_valid_rate,cost_per_success"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["route", "success_rate", "tool_calls_valid_rate",
                                "cost_per_success"]
    by_route = {line.split()[0]: line.split() for line in lines[1:]}
    for r in rows:
        assert by_route[r["route"]][1] == f"{r['success_rate']:.3f}"
    assert main(["ratios", "--db", db_url, "--config", config, "--granularity", "day",
                 "--wide"]) == 0
    head = capsys.readouterr().out.splitlines()[0].split()
    assert {"success_rate", "ok_rate", "gpu_seconds", "cost_per_success",
            "itl_p99_ms"} <= set(head)


def test_without_a_price_cost_is_null(db_url: str, traffic: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(traffic), "--db", db_url, "--migrate", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["ratios", "--db", db_url, "--format", "json", "--granularity", "day"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["cost_per_success"] is None for r in rows)
    assert all(r["successes_per_gpu_second"] > 0 for r in rows)
